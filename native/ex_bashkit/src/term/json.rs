//! JSON to and from Erlang terms, with `serde_json` (already in the
//! dependency tree through bashkit): `json_decode/1` and `json_encode/1`,
//! what `ExBashkit.MCP.JSON` calls.
//!
//! Both are bounded: the input of a decode is at most [`MAX_INPUT`] bytes
//! and nests at most `serde_json`'s own 128 levels (its recursion limit,
//! kept on); a term to encode nests at most [`MAX_DEPTH`] levels. Both run
//! on a dirty CPU scheduler, as a large input takes longer than a time
//! slice. A malformed document, a term JSON cannot carry (a tuple, a pid, a
//! non-UTF-8 binary, an integer past 64 bits) or one past a bound is
//! `{:error, message}`, never a crash.

use rustler::types::map::MapIterator;
use rustler::types::tuple::make_tuple;
use rustler::{Binary, Encoder, Env, ListIterator, NewBinary, Term, TermType};
use serde::ser::{Error as _, SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value as Json;

/// The largest document `json_decode/1` parses.
pub const MAX_INPUT: usize = 64 * 1024 * 1024;

/// How deep a term `json_encode/1` walks (decoding has `serde_json`'s 128).
pub const MAX_DEPTH: usize = 128;

rustler::atoms! {
    ok,
    error,
    nil,
}

/// `input` parsed, or why not in words (`serde_json`'s, with line and column).
pub fn parse(input: &[u8]) -> Result<Json, String> {
    if input.len() > MAX_INPUT {
        return Err(format!(
            "JSON input of {} bytes is over the {MAX_INPUT}-byte limit",
            input.len()
        ));
    }
    serde_json::from_slice(input).map_err(|e| format!("invalid JSON: {e}"))
}

/// A parsed document as a term: objects are maps with string keys, arrays
/// lists, strings binaries, `null` is `nil`.
fn to_term<'a>(env: Env<'a>, value: &Json) -> Term<'a> {
    match value {
        Json::Null => nil().encode(env),
        Json::Bool(b) => b.encode(env),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.encode(env)
            } else if let Some(u) = n.as_u64() {
                u.encode(env)
            } else {
                n.as_f64().unwrap_or(f64::NAN).encode(env)
            }
        }
        Json::String(s) => s.encode(env),
        Json::Array(items) => items
            .iter()
            .map(|item| to_term(env, item))
            .collect::<Vec<Term>>()
            .encode(env),
        Json::Object(fields) => {
            let keys: Vec<Term> = fields.keys().map(|k| k.encode(env)).collect();
            let values: Vec<Term> = fields.values().map(|v| to_term(env, v)).collect();
            // serde_json keeps one value per key, so the keys are distinct.
            Term::map_from_arrays(env, &keys, &values).unwrap_or_else(|_| nil().encode(env))
        }
    }
}

/// A term on its way to JSON, `depth` levels down.
struct Encodable<'a> {
    term: Term<'a>,
    depth: usize,
}

impl<'a> Encodable<'a> {
    fn child(&self, term: Term<'a>) -> Encodable<'a> {
        Encodable {
            term,
            depth: self.depth + 1,
        }
    }
}

/// A map key as JSON's string key: a UTF-8 binary or an atom.
fn key_text(term: Term) -> Result<String, String> {
    match term.get_type() {
        TermType::Binary => utf8(term),
        TermType::Atom => term
            .atom_to_string()
            .map_err(|_| "unreadable atom key".to_string()),
        _ => Err("a map key must be a string or an atom".to_string()),
    }
}

fn utf8(term: Term) -> Result<String, String> {
    let binary: Binary = term.decode().map_err(|_| "unreadable binary".to_string())?;
    std::str::from_utf8(binary.as_slice())
        .map(str::to_string)
        .map_err(|_| "a string is not valid UTF-8".to_string())
}

impl Serialize for Encodable<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.depth > MAX_DEPTH {
            return Err(S::Error::custom(format!(
                "the term nests deeper than {MAX_DEPTH} levels"
            )));
        }
        let term = self.term;
        match term.get_type() {
            TermType::Atom => {
                let name = term
                    .atom_to_string()
                    .map_err(|_| S::Error::custom("unreadable atom"))?;
                match name.as_str() {
                    "nil" => serializer.serialize_unit(),
                    "true" => serializer.serialize_bool(true),
                    "false" => serializer.serialize_bool(false),
                    other => serializer.serialize_str(other),
                }
            }
            TermType::Binary => serializer.serialize_str(&utf8(term).map_err(S::Error::custom)?),
            TermType::Integer => {
                if let Ok(i) = term.decode::<i64>() {
                    serializer.serialize_i64(i)
                } else if let Ok(u) = term.decode::<u64>() {
                    serializer.serialize_u64(u)
                } else {
                    Err(S::Error::custom("an integer does not fit in 64 bits"))
                }
            }
            TermType::Float => {
                let f: f64 = term
                    .decode()
                    .map_err(|_| S::Error::custom("unreadable float"))?;
                serializer.serialize_f64(f)
            }
            TermType::List => {
                // An improper list has no length (and its iterator panics).
                term.list_length()
                    .map_err(|_| S::Error::custom("an improper list is not JSON"))?;
                let items: ListIterator = term
                    .decode()
                    .map_err(|_| S::Error::custom("unreadable list"))?;
                let mut seq = serializer.serialize_seq(None)?;
                for item in items {
                    seq.serialize_element(&self.child(item))?;
                }
                seq.end()
            }
            TermType::Map => {
                let entries =
                    MapIterator::new(term).ok_or_else(|| S::Error::custom("unreadable map"))?;
                let mut map = serializer.serialize_map(None)?;
                for (key, value) in entries {
                    let key = key_text(key).map_err(S::Error::custom)?;
                    if key == "__struct__" {
                        return Err(S::Error::custom(
                            "a struct is not JSON (convert it to a map)",
                        ));
                    }
                    map.serialize_entry(&key, &self.child(value))?;
                }
                map.end()
            }
            other => Err(S::Error::custom(format!(
                "a {} is not JSON",
                format!("{other:?}").to_lowercase()
            ))),
        }
    }
}

fn answer<'a>(env: Env<'a>, outcome: Result<Term<'a>, String>) -> Term<'a> {
    match outcome {
        Ok(term) => make_tuple(env, &[ok().encode(env), term]),
        Err(message) => make_tuple(env, &[error().encode(env), message.encode(env)]),
    }
}

/// `json_decode(binary)`: `{:ok, term} | {:error, message}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn json_decode<'a>(env: Env<'a>, input: Binary<'a>) -> Term<'a> {
    answer(env, parse(input.as_slice()).map(|json| to_term(env, &json)))
}

/// `json_encode(term)`: `{:ok, binary} | {:error, message}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn json_encode<'a>(env: Env<'a>, term: Term<'a>) -> Term<'a> {
    let encoded = serde_json::to_vec(&Encodable { term, depth: 0 })
        .map_err(|e| format!("cannot encode as JSON: {e}"))
        .map(|bytes| {
            let mut binary = NewBinary::new(env, bytes.len());
            binary.as_mut_slice().copy_from_slice(&bytes);
            Term::from(binary)
        });
    answer(env, encoded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_documents() {
        assert_eq!(
            parse(br#"{"a":[1,2.5,"x",null,true]}"#).unwrap(),
            serde_json::json!({"a": [1, 2.5, "x", null, true]})
        );
    }

    #[test]
    fn malformed_input_is_an_error_with_its_place() {
        let message = parse(b"{\"a\": }").unwrap_err();
        assert!(message.starts_with("invalid JSON: "), "{message}");
        assert!(message.contains("column"), "{message}");
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        let message = parse(deep.as_bytes()).unwrap_err();
        assert!(message.contains("recursion limit"), "{message}");
    }

    #[test]
    fn size_is_bounded() {
        let big = vec![b' '; MAX_INPUT + 1];
        assert!(parse(&big).unwrap_err().contains("limit"));
    }
}

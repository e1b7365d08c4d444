//! `Value`: the one representation of every term that crosses between
//! Elixir and the interpreter core.
//!
//! The core never sees a `rustler::Term`: requests are decoded into a
//! `Value` and then into typed structs (`FromValue`), and answers are built
//! as `Value`s (or from one declaration straight as terms, below). That
//! lets the same core serve two transports:
//!
//! - in the node (NIF), a `Value` is converted to and from terms of the
//!   calling process or of a message env (`to_term`, `from_term`);
//! - on a quick exec's path in the node, two hot spots skip the `Value`
//!   and keep one declaration: a call's scalar options are read straight
//!   from the term (`FromValue::from_term`), and an exec's result is built
//!   straight as a term from its field list (`result.rs`);
//! - in a worker OS process, it is written to and read from the Erlang
//!   external term format on a port (`term/etf.rs`), which Elixir reads with
//!   `:erlang.binary_to_term/2` at no cost of a decoder of our own.
//!
//! Elixir validates options (types, unknown keys); decoding here checks
//! shape only and says which field was wrong when it is not what it should be.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

use rustler::types::tuple::make_tuple;
use rustler::{Encoder, Env, NewBinary, Term, TermType};

use crate::term::word_hash::WordMap;

thread_local! {
    /// The atoms of names compiled into this library, by the address and
    /// length of their text. Looking an atom up in the VM's table takes its
    /// lock and hashes the name; an answer such as `%ExBashkit.Result{}`
    /// names a dozen atoms, about 2 µs of a short exec (`perf`). Atoms are
    /// never freed, so a found atom stays valid; the cache holds only
    /// `&'static str`s, so it is as large as the set of literals at most.
    static STATIC_ATOMS: RefCell<AtomCache> = RefCell::new(AtomCache::default());
}

/// Literals' atoms by address and length (keys of our own: `term/word_hash.rs`).
type AtomCache = WordMap<(usize, usize), rustler::Atom>;

/// The atom `name`: from the cache when `name` is a literal of this library.
// It takes the `Cow` itself: which variant it is (a `'static` literal or
// not) is what decides.
#[allow(clippy::ptr_arg)]
fn cached_atom(env: Env<'_>, name: &Cow<'static, str>) -> rustler::NifResult<rustler::Atom> {
    match name {
        Cow::Borrowed(text) => {
            let key = (text.as_ptr() as usize, text.len());
            if let Some(found) = STATIC_ATOMS.with(|cache| cache.borrow().get(&key).copied()) {
                return Ok(found);
            }
            let made = rustler::Atom::from_str(env, text)?;
            STATIC_ATOMS.with(|cache| cache.borrow_mut().insert(key, made));
            Ok(made)
        }
        Cow::Owned(text) => rustler::Atom::from_str(env, text),
    }
}

/// An Erlang term, owned.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Atom(Cow<'static, str>),
    /// Wide enough for every Erlang integer the protocol uses (u64 and i64).
    Int(i128),
    Float(f64),
    Binary(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Key/value pairs, in no particular order.
    Map(Vec<(Value, Value)>),
}

/// Terms nested deeper than this are refused (decoding recurses).
pub const MAX_DEPTH: usize = 128;

impl Value {
    pub const fn atom(name: &'static str) -> Self {
        Value::Atom(Cow::Borrowed(name))
    }

    pub fn nil() -> Self {
        Self::atom("nil")
    }

    pub fn ok() -> Self {
        Self::atom("ok")
    }

    /// A binary holding `bytes`.
    pub fn bin(bytes: &[u8]) -> Self {
        Value::Binary(bytes.to_vec())
    }

    pub fn tuple<const N: usize>(items: [Value; N]) -> Self {
        Value::Tuple(items.into())
    }

    /// `{:ok, value}`.
    pub fn ok_with(value: impl Into<Value>) -> Self {
        Self::tuple([Self::ok(), value.into()])
    }

    /// `{:error, message}`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::tuple([
            Self::atom("error"),
            Value::Binary(message.into().into_bytes()),
        ])
    }

    /// A map with atom keys.
    pub fn map<const N: usize>(pairs: [(&'static str, Value); N]) -> Self {
        Value::Map(pairs.into_iter().map(|(k, v)| (Self::atom(k), v)).collect())
    }

    pub fn as_atom(&self) -> Option<&str> {
        match self {
            Value::Atom(name) => Some(name),
            _ => None,
        }
    }

    /// The value under atom key `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| k.as_atom() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Decode the field `key` of a map; a missing key decodes like `nil`.
    pub fn field<T: FromValue>(&self, key: &str) -> Result<T, String> {
        let nil = Value::nil();
        T::from_value(self.get(key).unwrap_or(&nil)).map_err(|e| format!("{key}: {e}"))
    }

    /// The elements of a tuple.
    pub fn elements(&self) -> Result<&[Value], String> {
        match self {
            Value::Tuple(items) => Ok(items),
            other => Err(format!("expected a tuple, got {other:?}")),
        }
    }

    /// Build the term in `env`.
    pub fn to_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            Value::Atom(name) => match cached_atom(env, name) {
                Ok(atom) => atom.encode(env),
                Err(_) => rustler::types::atom::nil().encode(env),
            },
            Value::Int(n) => match i64::try_from(*n) {
                Ok(n) => n.encode(env),
                Err(_) => u64::try_from(*n).unwrap_or(u64::MAX).encode(env),
            },
            Value::Float(f) => f.encode(env),
            Value::Binary(bytes) => binary_term(env, bytes),
            Value::List(items) => items
                .iter()
                .map(|v| v.to_term(env))
                .collect::<Vec<_>>()
                .encode(env),
            Value::Tuple(items) => {
                let terms: Vec<Term> = items.iter().map(|v| v.to_term(env)).collect();
                make_tuple(env, &terms)
            }
            Value::Map(pairs) => {
                let keys: Vec<Term> = pairs.iter().map(|(k, _)| k.to_term(env)).collect();
                let values: Vec<Term> = pairs.iter().map(|(_, v)| v.to_term(env)).collect();
                Term::map_from_term_arrays(env, &keys, &values)
                    .unwrap_or_else(|_| rustler::types::atom::nil().encode(env))
            }
        }
    }

    /// Read a term of the calling process. Pids, references and funs have no
    /// place in the protocol and are refused.
    pub fn from_term(term: Term<'_>) -> Result<Value, String> {
        Self::from_term_at(term, 0)
    }

    fn from_term_at(term: Term<'_>, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("term nested too deeply".into());
        }
        let bad = |_| "undecodable term".to_string();
        Ok(match term.get_type() {
            TermType::Atom => Value::Atom(atom_name(term).map_err(bad)?),
            TermType::Binary => Value::Binary(term.decode_as_binary().map_err(bad)?.to_vec()),
            TermType::Integer => match term.decode::<i64>() {
                Ok(n) => Value::Int(n.into()),
                Err(_) => Value::Int(term.decode::<u64>().map_err(bad)?.into()),
            },
            TermType::Float => Value::Float(term.decode::<f64>().map_err(bad)?),
            TermType::List => {
                let items: Vec<Term> = term.decode().map_err(bad)?;
                Value::List(
                    items
                        .into_iter()
                        .map(|t| Self::from_term_at(t, depth + 1))
                        .collect::<Result<_, _>>()?,
                )
            }
            TermType::Tuple => {
                let items = rustler::types::tuple::get_tuple(term).map_err(bad)?;
                Value::Tuple(
                    items
                        .into_iter()
                        .map(|t| Self::from_term_at(t, depth + 1))
                        .collect::<Result<_, _>>()?,
                )
            }
            TermType::Map => {
                let iter = rustler::types::map::MapIterator::new(term).ok_or("bad map")?;
                let mut pairs = Vec::new();
                for (k, v) in iter {
                    pairs.push((
                        Self::from_term_at(k, depth + 1)?,
                        Self::from_term_at(v, depth + 1)?,
                    ));
                }
                Value::Map(pairs)
            }
            other => return Err(format!("unsupported term type {other:?}")),
        })
    }
}

/// The name of atom `term`. The atoms most options hold (`nil`, `true`,
/// `false`) are recognized without copying their text, which would
/// allocate: decoding an exec's call options copied eight atoms.
fn atom_name(term: Term<'_>) -> rustler::NifResult<Cow<'static, str>> {
    use rustler::types::atom;
    for (known, name) in [
        (atom::nil(), "nil"),
        (atom::false_(), "false"),
        (atom::true_(), "true"),
    ] {
        if known == term {
            return Ok(Cow::Borrowed(name));
        }
    }
    term.atom_to_string().map(Cow::Owned)
}

/// Decode the field `key` of map `term` of the calling process: the value
/// under the atom `key` (a missing key decodes like `nil`), as
/// [`Value::field`] does for a decoded map. Nothing else of the map is read.
pub fn field_of_term<T: FromValue>(term: Term<'_>, key: &'static str) -> Result<T, String> {
    let name = Cow::Borrowed(key);
    let atom = cached_atom(term.get_env(), &name).map_err(|_| format!("{key}: no such atom"))?;
    match term.map_get(atom) {
        Ok(found) => T::from_term(found),
        Err(_) => T::from_value(&Value::nil()),
    }
    .map_err(|e| format!("{key}: {e}"))
}

/// Encode raw bytes as an Elixir binary in `env`.
pub fn binary_term<'a>(env: Env<'a>, bytes: &[u8]) -> Term<'a> {
    let mut bin = NewBinary::new(env, bytes.len());
    bin.as_mut_slice().copy_from_slice(bytes);
    bin.into()
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Binary(s.as_bytes().to_vec())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Binary(s.into_bytes())
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::from(s.as_str())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::atom(if b { "true" } else { "false" })
    }
}

macro_rules! int_into_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(n: $t) -> Self {
                Value::Int(n as i128)
            }
        }
    )*};
}
int_into_value!(i32, i64, u32, u64, usize);

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or_else(Value::nil, Into::into)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(items: Vec<T>) -> Self {
        Value::List(items.into_iter().map(Into::into).collect())
    }
}

impl From<&HashMap<String, String>> for Value {
    fn from(map: &HashMap<String, String>) -> Self {
        Value::Map(
            map.iter()
                .map(|(k, v)| (Value::from(k), Value::from(v)))
                .collect(),
        )
    }
}

/// Decoding a typed value from a `Value` (or from a term of the calling
/// process, [`FromValue::from_term`]).
pub trait FromValue: Sized {
    fn from_value(value: &Value) -> Result<Self, String>;

    /// Decode a term of the calling process as [`FromValue::from_value`]
    /// decodes its `Value`. The scalars of a call's options read the term
    /// itself: a `Value` built and dropped per field was a tenth of a quick
    /// exec's NIF call (bench/DECISIONS.md, "Fewer steps after an exec").
    fn from_term(term: Term<'_>) -> Result<Self, String> {
        Self::from_value(&Value::from_term_at(term, 1)?)
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(value.clone())
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Binary(bytes) => {
                String::from_utf8(bytes.clone()).map_err(|_| "expected UTF-8 text".into())
            }
            other => Err(format!("expected a string, got {other:?}")),
        }
    }
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value.as_atom() {
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            _ => Err(format!("expected a boolean, got {value:?}")),
        }
    }

    fn from_term(term: Term<'_>) -> Result<Self, String> {
        term.decode()
            .map_err(|_| format!("expected a boolean, got {term:?}"))
    }
}

macro_rules! int_from_value {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: &Value) -> Result<Self, String> {
                match value {
                    Value::Int(n) => <$t>::try_from(*n).map_err(|_| format!("{n} is out of range")),
                    other => Err(format!("expected an integer, got {other:?}")),
                }
            }

            fn from_term(term: Term<'_>) -> Result<Self, String> {
                if term.get_type() != TermType::Integer {
                    return Err(format!("expected an integer, got {term:?}"));
                }
                term.decode().map_err(|_| format!("{term:?} is out of range"))
            }
        }
    )*};
}
int_from_value!(i32, i64, u32, u64, usize);

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value.as_atom() {
            Some("nil") => Ok(None),
            _ => T::from_value(value).map(Some),
        }
    }

    fn from_term(term: Term<'_>) -> Result<Self, String> {
        match rustler::types::atom::nil() == term {
            true => Ok(None),
            false => T::from_term(term).map(Some),
        }
    }
}

impl<T: FromValue> FromValue for Vec<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::List(items) => items.iter().map(T::from_value).collect(),
            other => Err(format!("expected a list, got {other:?}")),
        }
    }
}

impl<A: FromValue, B: FromValue> FromValue for (A, B) {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value.elements()? {
            [a, b] => Ok((A::from_value(a)?, B::from_value(b)?)),
            _ => Err("expected a pair".into()),
        }
    }
}

/// Raw bytes (an Elixir binary that need not be text).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bytes(pub Vec<u8>);

impl FromValue for Bytes {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Binary(bytes) => Ok(Bytes(bytes.clone())),
            other => Err(format!("expected a binary, got {other:?}")),
        }
    }

    fn from_term(term: Term<'_>) -> Result<Self, String> {
        match term.decode_as_binary() {
            Ok(binary) => Ok(Bytes(binary.as_slice().to_vec())),
            Err(_) => Err(format!("expected a binary, got {term:?}")),
        }
    }
}

/// A struct decoded from a map term with atom keys, one key per field of
/// the same name: the struct is declared once, and its decoder
/// (`from_map!`) is written from the same field list, so a new option is
/// one field here beside its Elixir schema entry.
#[macro_export]
macro_rules! map_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $ty:ident {
            $( $(#[$field_meta:meta])* $field_vis:vis $field:ident : $field_ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $ty {
            $( $(#[$field_meta])* $field_vis $field: $field_ty, )*
        }
        $crate::from_map!($ty { $($field),* });
    };
}

/// `FromValue` for a struct decoded from a map with atom keys, one key per
/// field of the same name: the declaration is the field list. Also
/// `from_term`, which reads those fields straight from a map term of the
/// calling process (the NIFs' arguments) without decoding the whole map.
#[macro_export]
macro_rules! from_map {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl $crate::term::value::FromValue for $ty {
            fn from_value(value: &$crate::term::value::Value) -> Result<Self, String> {
                if !matches!(value, $crate::term::value::Value::Map(_)) {
                    return Err(format!("expected a map for {}", stringify!($ty)));
                }
                Ok(Self { $($field: value.field(stringify!($field))?,)* })
            }
        }

        impl $ty {
            /// Decode from a map term (see `from_map!`).
            #[allow(dead_code)]
            pub fn from_term(term: rustler::Term<'_>) -> Result<Self, String> {
                if !term.is_map() {
                    return Err(format!("expected a map for {}", stringify!($ty)));
                }
                Ok(Self { $($field: $crate::term::value::field_of_term(term, stringify!($field))?,)* })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Sample {
        name: String,
        count: Option<u64>,
        pairs: Vec<(String, Bytes)>,
    }
    from_map!(Sample { name, count, pairs });

    #[test]
    fn decodes_a_struct_from_a_map_and_names_the_bad_field() {
        let value = Value::map([
            ("name", "x".into()),
            (
                "pairs",
                Value::List(vec![Value::tuple(["/a".into(), Value::bin(b"\xff")])]),
            ),
        ]);
        let sample = Sample::from_value(&value).unwrap();
        assert_eq!(sample.count, None);
        assert_eq!(sample.pairs[0].1, Bytes(vec![0xff]));

        let bad = Value::map([("name", Value::Int(1))]);
        assert!(Sample::from_value(&bad).unwrap_err().starts_with("name:"));
    }
}

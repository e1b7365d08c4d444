//! The Erlang external term format for `Value`: the encoding of every frame
//! between the VM and a worker process (`worker.rs`).
//!
//! Elixir writes frames with `:erlang.term_to_binary/1` and reads ours with
//! `:erlang.binary_to_term(frame, [:safe])`, so neither side needs a codec
//! of its own making beyond this file. Only the tags `term_to_binary`
//! produces for the protocol's terms are read: atoms, integers (small, 32-bit
//! and big), floats, binaries, lists (including the byte-list form), tuples
//! and maps. Anything else is refused, and so is nesting deeper than
//! `value::MAX_DEPTH` or a length that overruns the frame.

use std::borrow::Cow;

use crate::term::value::{Value, MAX_DEPTH};

const VERSION: u8 = 131;
const NEW_FLOAT: u8 = 70;
const SMALL_INTEGER: u8 = 97;
const INTEGER: u8 = 98;
const ATOM: u8 = 100;
const SMALL_TUPLE: u8 = 104;
const LARGE_TUPLE: u8 = 105;
const NIL: u8 = 106;
const STRING: u8 = 107;
const LIST: u8 = 108;
const BINARY: u8 = 109;
const SMALL_BIG: u8 = 110;
const LARGE_BIG: u8 = 111;
const SMALL_ATOM: u8 = 115;
const MAP: u8 = 116;
const ATOM_UTF8: u8 = 118;
const SMALL_ATOM_UTF8: u8 = 119;

/// `term_to_binary(value)`.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = vec![VERSION];
    write(value, &mut out);
    out
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
}

fn write(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Atom(name) => {
            let bytes = name.as_bytes();
            match u8::try_from(bytes.len()) {
                Ok(len) => out.extend_from_slice(&[SMALL_ATOM_UTF8, len]),
                Err(_) => {
                    out.push(ATOM_UTF8);
                    out.extend_from_slice(&(bytes.len().min(65535) as u16).to_be_bytes());
                }
            }
            out.extend_from_slice(&bytes[..bytes.len().min(65535)]);
        }
        Value::Int(n) => write_int(*n, out),
        Value::Float(f) => {
            out.push(NEW_FLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        Value::Binary(bytes) => {
            out.push(BINARY);
            write_len(out, bytes.len());
            out.extend_from_slice(bytes);
        }
        Value::List(items) if items.is_empty() => out.push(NIL),
        Value::List(items) => {
            out.push(LIST);
            write_len(out, items.len());
            items.iter().for_each(|v| write(v, out));
            out.push(NIL);
        }
        Value::Tuple(items) => {
            match u8::try_from(items.len()) {
                Ok(arity) => out.extend_from_slice(&[SMALL_TUPLE, arity]),
                Err(_) => {
                    out.push(LARGE_TUPLE);
                    write_len(out, items.len());
                }
            }
            items.iter().for_each(|v| write(v, out));
        }
        Value::Map(pairs) => {
            out.push(MAP);
            write_len(out, pairs.len());
            for (k, v) in pairs {
                write(k, out);
                write(v, out);
            }
        }
    }
}

fn write_int(n: i128, out: &mut Vec<u8>) {
    if (0..=255).contains(&n) {
        out.extend_from_slice(&[SMALL_INTEGER, n as u8]);
    } else if let Ok(small) = i32::try_from(n) {
        out.push(INTEGER);
        out.extend_from_slice(&small.to_be_bytes());
    } else {
        let mut magnitude = n.unsigned_abs();
        let mut digits = Vec::new();
        while magnitude > 0 {
            digits.push((magnitude & 0xff) as u8);
            magnitude >>= 8;
        }
        out.extend_from_slice(&[SMALL_BIG, digits.len() as u8, u8::from(n < 0)]);
        out.extend_from_slice(&digits);
    }
}

/// `binary_to_term(bytes)` for the subset above.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut reader = Reader { bytes, pos: 0 };
    if reader.u8()? != VERSION {
        return Err("not an external term format frame".into());
    }
    let value = reader.value(0)?;
    if reader.pos != bytes.len() {
        return Err("trailing bytes after the term".into());
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or("truncated term")?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<usize, String> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn u32(&mut self) -> Result<usize, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn atom(&mut self, len: usize) -> Result<Value, String> {
        let text = String::from_utf8_lossy(self.take(len)?).into_owned();
        Ok(Value::Atom(Cow::Owned(text)))
    }

    fn items(&mut self, n: usize, depth: usize) -> Result<Vec<Value>, String> {
        // Every element takes at least one byte: a count beyond what is
        // left is a lie, refused before allocating for it.
        if n > self.bytes.len() - self.pos {
            return Err("truncated term".into());
        }
        (0..n).map(|_| self.value(depth + 1)).collect()
    }

    fn big(&mut self, n: usize) -> Result<Value, String> {
        let sign = self.u8()?;
        let digits = self.take(n)?;
        if digits.iter().skip(16).any(|&d| d != 0) {
            return Err("integer out of range".into());
        }
        let magnitude = digits
            .iter()
            .take(16)
            .rev()
            .fold(0u128, |acc, &d| (acc << 8) | u128::from(d));
        let n = i128::try_from(magnitude).map_err(|_| "integer out of range")?;
        Ok(Value::Int(if sign == 0 { n } else { -n }))
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err("term nested too deeply".into());
        }
        Ok(match self.u8()? {
            SMALL_INTEGER => Value::Int(self.u8()?.into()),
            INTEGER => {
                let b = self.take(4)?;
                Value::Int(i32::from_be_bytes([b[0], b[1], b[2], b[3]]).into())
            }
            SMALL_BIG => {
                let n = self.u8()? as usize;
                self.big(n)?
            }
            LARGE_BIG => {
                let n = self.u32()?;
                self.big(n)?
            }
            NEW_FLOAT => {
                let b = self.take(8)?;
                Value::Float(f64::from_be_bytes(b.try_into().expect("8 bytes")))
            }
            ATOM | ATOM_UTF8 => {
                let n = self.u16()?;
                self.atom(n)?
            }
            SMALL_ATOM | SMALL_ATOM_UTF8 => {
                let n = self.u8()? as usize;
                self.atom(n)?
            }
            BINARY => {
                let n = self.u32()?;
                Value::Binary(self.take(n)?.to_vec())
            }
            NIL => Value::List(Vec::new()),
            STRING => {
                let n = self.u16()?;
                Value::List(
                    self.take(n)?
                        .iter()
                        .map(|&b| Value::Int(b.into()))
                        .collect(),
                )
            }
            LIST => {
                let n = self.u32()?;
                let items = self.items(n, depth)?;
                match self.value(depth + 1)? {
                    Value::List(tail) if tail.is_empty() => Value::List(items),
                    _ => return Err("improper lists are not supported".into()),
                }
            }
            SMALL_TUPLE => {
                let n = self.u8()? as usize;
                Value::Tuple(self.items(n, depth)?)
            }
            LARGE_TUPLE => {
                let n = self.u32()?;
                Value::Tuple(self.items(n, depth)?)
            }
            MAP => {
                let n = self.u32()?;
                let flat = self.items(n.checked_mul(2).ok_or("map too large")?, depth)?;
                let mut pairs = Vec::with_capacity(n);
                let mut iter = flat.into_iter();
                while let (Some(k), Some(v)) = (iter.next(), iter.next()) {
                    pairs.push((k, v));
                }
                Value::Map(pairs)
            }
            tag => return Err(format!("unsupported term tag {tag}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_supported_shape() {
        let value = Value::tuple([
            Value::atom("exec"),
            Value::Int(0),
            Value::Int(-5),
            Value::Int(70_000),
            Value::Int(u64::MAX.into()),
            Value::Int(i64::MIN.into()),
            Value::Float(1.5),
            Value::bin(b"hi\0"),
            Value::List(vec![]),
            Value::List(vec![Value::Int(1), Value::atom("nil")]),
            Value::map([("key", Value::from("v"))]),
        ]);
        assert_eq!(decode(&encode(&value)).unwrap(), value);
    }

    #[test]
    fn reads_what_erlang_writes_for_byte_lists_and_old_atoms() {
        // term_to_binary([1, 2]) and term_to_binary(:ab) in the latin-1 form.
        assert_eq!(
            decode(&[131, 107, 0, 2, 1, 2]).unwrap(),
            Value::List(vec![Value::Int(1), Value::Int(2)])
        );
        assert_eq!(
            decode(&[131, 100, 0, 2, b'a', b'b']).unwrap(),
            Value::atom("ab")
        );
    }

    #[test]
    fn refuses_lies_and_truncation_at_every_offset() {
        let frame = encode(&Value::tuple([Value::bin(b"abc"), Value::Int(1_000_000)]));
        for cut in 0..frame.len() {
            assert!(decode(&frame[..cut]).is_err(), "cut at {cut}");
        }
        // A list claiming four billion elements in a ten-byte frame.
        assert!(decode(&[131, 108, 255, 255, 255, 255, 106]).is_err());
    }
}

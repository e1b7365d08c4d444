//! The one error type of the NIF boundary.
//!
//! A NIF returning `NifResult<T>` answers `{:ok, value}` or
//! `{:error, message}` (rustler encodes `Result`), with a message a person
//! can act on. Panics are not errors: rustler's own `catch_unwind` around
//! every NIF turns them into an Elixir exception, and the interpreter tasks
//! catch theirs in `run/guard.rs`.

use rustler::{Encoder, Env, Term};

/// Why a NIF failed, in words for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

pub type NifResult<T> = Result<T, Error>;

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error(message.to_string())
    }
}

impl Encoder for Error {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.0.encode(env)
    }
}

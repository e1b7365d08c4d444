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
        Error(bounded(message))
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error(bounded(message.to_string()))
    }
}

/// The most bytes of a message that reach the caller: a message quotes
/// what it refuses (a member name, an option), and what it refuses may be
/// megabytes long.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// `message`, cut to `MAX_MESSAGE_BYTES` (at a character boundary) with
/// how much was left out said at its end.
pub fn bounded(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let total = message.len();
    let mut end = MAX_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push_str(&format!("... ({} more bytes)", total - end));
    message
}

impl Encoder for Error {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.0.encode(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short".into()), "short");
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let cut = bounded(long);
        assert!(cut.len() < MAX_MESSAGE_BYTES + 40, "{}", cut.len());
        assert!(cut.ends_with(&format!("... ({} more bytes)", MAX_MESSAGE_BYTES)));
    }
}

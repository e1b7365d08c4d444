//! The vocabulary of `%ExBashkit.Error{reason: ...}`, as the Rust side
//! sends it: an atom chosen where the failure is known, never read back
//! from the message. `lib/ex_bashkit/error.ex` lists the same atoms (its
//! test compares the two lists).

use crate::term::value::Value;

/// Why a call failed (`ExBashkit.Error`'s `:reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reason {
    Timeout,
    Cancelled,
    Limit,
    Parse,
    // Set by a worker's owner (`ExBashkit.Worker`), which outlives the
    // worker: listed for the vocabulary.
    #[allow(dead_code)]
    Crashed,
    #[allow(dead_code)]
    Lost,
    NotFound,
    Exists,
    PermissionDenied,
    NotSupported,
    // Set by `ExBashkit.Pool`.
    #[allow(dead_code)]
    Overloaded,
    #[default]
    Internal,
}

impl Reason {
    /// Every reason, in `ExBashkit.Error.reasons/0`'s order.
    #[cfg(test)]
    pub const ALL: [Reason; 12] = [
        Reason::Timeout,
        Reason::Cancelled,
        Reason::Limit,
        Reason::Parse,
        Reason::Crashed,
        Reason::Lost,
        Reason::NotFound,
        Reason::Exists,
        Reason::PermissionDenied,
        Reason::NotSupported,
        Reason::Overloaded,
        Reason::Internal,
    ];

    /// The atom's text.
    pub fn as_atom(self) -> &'static str {
        match self {
            Reason::Timeout => "timeout",
            Reason::Cancelled => "cancelled",
            Reason::Limit => "limit",
            Reason::Parse => "parse",
            Reason::Crashed => "crashed",
            Reason::Lost => "lost",
            Reason::NotFound => "not_found",
            Reason::Exists => "exists",
            Reason::PermissionDenied => "permission_denied",
            Reason::NotSupported => "not_supported",
            Reason::Overloaded => "overloaded",
            Reason::Internal => "internal",
        }
    }
}

/// `{:error, %ExBashkit.Error{}}` with `reason`, `message`, the `:limits`
/// key and the output written before the stop: the one place that builds
/// the struct.
pub fn error_value(
    reason: Reason,
    limit: Option<&'static str>,
    message: &str,
    stdout: &[u8],
    stderr: &[u8],
) -> Value {
    Value::tuple([
        Value::atom("error"),
        Value::map([
            ("__struct__", Value::atom("Elixir.ExBashkit.Error")),
            ("__exception__", true.into()),
            ("reason", Value::atom(reason.as_atom())),
            ("limit", limit.map(Value::atom).unwrap_or_else(Value::nil)),
            ("message", message.into()),
            ("stdout", Value::bin(stdout)),
            ("stderr", Value::bin(stderr)),
            ("exit_code", Value::nil()),
        ]),
    ])
}

/// A failure of a call that has no output (the filesystem API, ...):
/// `{:error, %ExBashkit.Error{}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    pub fn to_value(&self) -> Value {
        error_value(self.reason, None, &self.message, b"", b"")
    }
}

impl From<String> for Failure {
    /// A bare message: a refusal with no reason of its own.
    fn from(message: String) -> Self {
        Failure::new(Reason::Internal, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vocabulary_matches_the_elixir_side() {
        let source = include_str!("../../../../lib/ex_bashkit/error.ex");
        let start = source.find("@reasons [").expect("error.ex lists @reasons");
        let end = start + source[start..].find(']').expect("the list ends");
        let listed: Vec<&str> = source[start + "@reasons [".len()..end]
            .split(',')
            .map(|atom| atom.trim().trim_start_matches(':'))
            .filter(|atom| !atom.is_empty())
            .collect();
        let ours: Vec<&str> = Reason::ALL.iter().map(|r| r.as_atom()).collect();
        assert_eq!(listed, ours);
    }
}

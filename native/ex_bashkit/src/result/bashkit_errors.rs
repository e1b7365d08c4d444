//! Turn `bashkit::Error` into the one-line messages Elixir callers see.
//!
//! The messages name the limit or the cause in words a person can act on
//! (which `:limits` key to raise, where the parse failed).

use bashkit::{Error, LimitExceeded};

use crate::result::reason::{Failure, Reason};

/// Describe an interpreter error for `{:error, message}`.
pub fn describe(error: &Error) -> String {
    match error {
        Error::ResourceLimit(limit) => describe_limit(limit),
        Error::Cancelled => "execution cancelled".to_string(),
        other => match session_limit_key(other) {
            Some(key) => format!("{other} (raise limits: [{key}: ...])"),
            None => other.to_string(),
        },
    }
}

/// bashkit reports its cumulative session caps as execution errors, not
/// `ResourceLimit`s: the `:limits` key they correspond to, read from the
/// text (pinned by `session_caps_name_their_key` below).
pub fn session_limit_key(error: &Error) -> Option<&'static str> {
    match error {
        Error::Execution(text) if text.contains("session exec() call limit exceeded") => {
            Some("max_exec_calls")
        }
        Error::Execution(text) if text.contains("session command limit exceeded") => {
            Some("max_total_commands")
        }
        _ => None,
    }
}

fn describe_limit(limit: &LimitExceeded) -> String {
    if let LimitExceeded::Timeout(after)
    | LimitExceeded::ExecutionBudget(bashkit::ExecutionBudgetExceeded::Deadline {
        limit: after,
    }) = limit
    {
        return format!(
            "execution timed out after {} ms (raise limits: [timeout_ms: ...])",
            after.as_millis()
        );
    }
    let hint = match (limit, limit_key(limit)) {
        (LimitExceeded::MaxFunctionDepth(_), Some(key)) => {
            format!(" (infinite recursion? see limits: [{key}: ...])")
        }
        (_, Some(key)) => format!(" (raise limits: [{key}: ...])"),
        (_, None) => String::new(),
    };
    format!("resource limit exceeded: {limit}{hint}")
}

/// The `:limits` key of `ExBashkit.Session.new/1` that governs `limit`, or
/// `None` for bashkit's fixed guards (parser fuel, nesting depths, memory).
pub fn limit_key(limit: &LimitExceeded) -> Option<&'static str> {
    Some(match limit {
        LimitExceeded::MaxCommands(_) => "max_commands",
        LimitExceeded::MaxLoopIterations(_) => "max_loop_iterations",
        LimitExceeded::MaxTotalLoopIterations(_) => "max_total_loop_iterations",
        LimitExceeded::MaxFunctionDepth(_) => "max_function_depth",
        LimitExceeded::Timeout(_) => "timeout_ms",
        LimitExceeded::InputTooLarge(_, _) => "max_input_bytes",
        LimitExceeded::SessionMaxCommands(_) => "max_total_commands",
        LimitExceeded::SessionMaxExecCalls(_) => "max_exec_calls",
        LimitExceeded::ExecutionBudget(bashkit::ExecutionBudgetExceeded::Deadline { .. }) => {
            "timeout_ms"
        }
        _ => return None,
    })
}

/// Describe a filesystem error for the filesystem API (`read_file/2`, ...).
pub fn describe_fs(path: &str, error: &Error) -> String {
    let reason = match error {
        Error::Io(io) => io_reason(io),
        other => other.to_string(),
    };
    format!("{path}: {reason}")
}

/// The `ExBashkit.Error` reason of a filesystem error.
pub fn fs_reason(error: &Error) -> Reason {
    let Error::Io(io) = error else {
        return Reason::Internal;
    };
    match io.kind() {
        std::io::ErrorKind::NotFound => Reason::NotFound,
        std::io::ErrorKind::AlreadyExists => Reason::Exists,
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            Reason::PermissionDenied
        }
        _ => Reason::Internal,
    }
}

/// A filesystem error of `path` as the filesystem API answers it: its
/// reason and [`describe_fs`]'s message.
pub fn fs_failure(path: &str, error: &Error) -> Failure {
    Failure::new(fs_reason(error), describe_fs(path, error))
}

/// bashkit says why it refused (a read-only host mount, a path escaping a
/// mount, a write through a symlink): keep that, in the words of `EROFS` for
/// the read-only case.
fn permission_reason(io: &std::io::Error) -> String {
    match io.get_ref().map(|inner| inner.to_string()) {
        Some(why) if why == "realfs is mounted readonly" || why == "filesystem is read-only" => {
            "read-only file system".to_string()
        }
        Some(why) if !why.is_empty() => format!("permission denied ({why})"),
        _ => "permission denied".to_string(),
    }
}

fn io_reason(io: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match io.kind() {
        NotFound => "no such file or directory".to_string(),
        PermissionDenied => permission_reason(io),
        AlreadyExists => "file exists".to_string(),
        _ => {
            let text = io.to_string();
            // bashkit's io errors are mostly custom ("parent directory not
            // found", "is a directory"): keep their words, lower-cased start.
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => "i/o error".to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limits_name_the_option_to_raise() {
        let msg = describe(&Error::ResourceLimit(LimitExceeded::MaxCommands(5)));
        assert!(msg.contains("maximum command count exceeded (5)"), "{msg}");
        assert!(msg.contains("max_commands"), "{msg}");
        let msg = describe(&Error::ResourceLimit(LimitExceeded::Timeout(
            Duration::from_millis(20),
        )));
        assert_eq!(
            msg,
            "execution timed out after 20 ms (raise limits: [timeout_ms: ...])"
        );
        let msg = describe(&Error::ResourceLimit(LimitExceeded::SessionMaxExecCalls(3)));
        assert!(msg.contains("raise limits: [max_exec_calls: ...]"), "{msg}");
    }

    #[test]
    fn session_caps_name_their_key() {
        let err = Error::Execution("session exec() call limit exceeded (1 calls)".into());
        assert_eq!(session_limit_key(&err), Some("max_exec_calls"));
        assert!(describe(&err).ends_with("(raise limits: [max_exec_calls: ...])"));
        let err = Error::Execution("session command limit exceeded (9 total commands)".into());
        assert_eq!(session_limit_key(&err), Some("max_total_commands"));
    }

    #[test]
    fn parse_errors_keep_position() {
        let msg = describe(&Error::Parse {
            message: "unexpected token".into(),
            line: 2,
            column: 3,
        });
        assert_eq!(msg, "parse error at line 2, column 3: unexpected token");
    }

    #[test]
    fn fs_errors_name_the_path() {
        let err = Error::Io(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(describe_fs("/x", &err), "/x: no such file or directory");
        let err = Error::Io(std::io::Error::other("Is a directory"));
        assert_eq!(describe_fs("/d", &err), "/d: is a directory");
        assert_eq!(fs_reason(&err), Reason::Internal);
        let err = Error::Io(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(fs_failure("/x", &err).reason, Reason::NotFound);
    }

    #[test]
    fn permission_errors_keep_bashkit_reason() {
        use std::io::{Error as IoError, ErrorKind};
        // The exact texts bashkit 0.20 uses for read-only mounts and
        // containment; a bashkit upgrade that rewords them fails here.
        let err = Error::Io(IoError::new(
            ErrorKind::PermissionDenied,
            "realfs is mounted readonly",
        ));
        assert_eq!(describe_fs("/ro/f", &err), "/ro/f: read-only file system");
        let err = Error::Io(IoError::new(
            ErrorKind::PermissionDenied,
            "path escapes realfs root",
        ));
        assert_eq!(
            describe_fs("/m/l/f", &err),
            "/m/l/f: permission denied (path escapes realfs root)"
        );
        let err = Error::Io(IoError::from(ErrorKind::PermissionDenied));
        assert_eq!(describe_fs("/x", &err), "/x: permission denied");
    }
}

//! `parse_status/1`: is a piece of shell input a complete command, an
//! unfinished one (the interactive shell then shows its `> ` continuation
//! prompt and reads another line), or a syntax error?
//!
//! The answer is bashkit's parser's, not a guess from the text:
//!
//! - The input is parsed as a whole. A parse error that says the input ran
//!   out inside a construct means "incomplete". bashkit 0.20 words those the
//!   way bash does: `syntax error: unexpected end of file` (an open `if`,
//!   `for`, `while`, `case`, `{`, `(`, function body, a trailing `|` or
//!   `&&`), `unexpected EOF while looking for matching `"'` (an open quote or
//!   subscript), `unexpected end of input in ...` (`for ((`, `[[`, `((`,
//!   `<(`), and `unterminated ...` from its lexer (`$(`, backticks, `$'`).
//!   Its own terminal (`bashkit::terminal`) keys on the same wordings.
//! - Two unfinished forms parse without error, because bashkit, like bash
//!   reading a file, accepts them at end of input: a here-document whose
//!   delimiter line has not come yet, and a line ending in `\`. For those the
//!   input is parsed once more with a probe command on a line of its own
//!   after it: when the parser does not start a command at the probe's
//!   offset, the probe was swallowed by the here-document body or joined to
//!   the continued line, so the input is not finished.
//!
//! The parse runs on a thread of its own with a large stack (bashkit's
//! parser recurses up to its depth limit), never on a BEAM scheduler's
//! stack; the NIF is a dirty-CPU one since a pasted script can be long.

use bashkit::parser::Parser;
use bashkit::Error;
use rustler::{Encoder, Env, Term};

rustler::atoms! {
    complete,
    incomplete,
}

/// A word no one types: the probe command appended after the input.
const PROBE: &str = "__ex_bashkit_parse_probe__";

/// Stack for the parsing thread: ample for bashkit's 100-level depth cap.
const PARSE_STACK: usize = 16 * 1024 * 1024;

/// What the parser says about a piece of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Status {
    /// A whole command (or nothing but blanks and comments): run it.
    Complete,
    /// The input stops inside a construct: read another line.
    Incomplete,
    /// A syntax error more input cannot fix.
    Invalid(String),
}

/// Classify `script` (see the module doc).
pub fn status(script: &str) -> Status {
    match Parser::new(script).parse() {
        Err(err) if ran_out(&err) => Status::Incomplete,
        Err(err) => Status::Invalid(err.to_string()),
        Ok(_) if swallows_next_line(script) => Status::Incomplete,
        Ok(_) => Status::Complete,
    }
}

/// A parse error that means the input ended inside a construct.
fn ran_out(err: &Error) -> bool {
    let Error::Parse { message, .. } = err else {
        return false;
    };
    message.contains("unexpected end of file")
        || message.starts_with("unexpected EOF while looking for matching")
        || message.contains("unexpected end of input")
        || message.contains("unterminated")
}

/// Whether a line typed after `script` would become part of it (an open
/// here-document, a trailing `\`) instead of starting a new command.
fn swallows_next_line(script: &str) -> bool {
    let separator = if script.ends_with('\n') { "" } else { "\n" };
    let probe_at = script.len() + separator.len();
    let probed = format!("{script}{separator}{PROBE}\n");
    match Parser::new(&probed).parse() {
        Ok(parsed) => !parsed
            .command_starts
            .iter()
            .any(|&(offset, _line)| offset == probe_at),
        // The input parsed alone; whatever the probe did to it, running the
        // input is what tells the user.
        Err(_) => false,
    }
}

/// Run `status` on a thread with a large stack; a panic becomes an error.
fn status_on_own_thread(script: String) -> Status {
    let worker = std::thread::Builder::new()
        .name("ex_bashkit_parse".into())
        .stack_size(PARSE_STACK)
        .spawn(move || crate::run::guard::catch(|| status(&script)));
    let internal = |message: String| Status::Invalid(format!("internal error: {message}"));
    match worker {
        Ok(handle) => match handle.join() {
            Ok(outcome) => outcome.unwrap_or_else(internal),
            Err(panic) => internal(crate::run::guard::panic_message(&*panic)),
        },
        Err(e) => Status::Invalid(format!("internal error: cannot start the parser: {e}")),
    }
}

/// `parse_status(script)`: `:complete | :incomplete | {:error, message}`.
#[rustler::nif(schedule = "DirtyCpu")]
fn parse_status(env: Env, script: String) -> Term {
    match status_on_own_thread(script) {
        Status::Complete => complete().encode(env),
        Status::Incomplete => incomplete().encode(env),
        Status::Invalid(message) => (rustler::types::atom::error(), message).encode(env),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incomplete(script: &str) {
        assert_eq!(status(script), Status::Incomplete, "{script:?}");
    }

    fn complete(script: &str) {
        assert_eq!(status(script), Status::Complete, "{script:?}");
    }

    #[test]
    fn whole_commands_are_complete() {
        for script in [
            "",
            "\n",
            "# a comment\n",
            "echo hi\n",
            "echo hi",
            "for i in 1 2; do echo $i; done\n",
            "if true; then\n  echo yes\nfi\n",
            "cat <<EOF\nbody\nEOF\n",
            "cat <<-EOF\n\tbody\n\tEOF\n",
            "echo 'a\nb'\n",
            "f() { echo x; }\n",
            "echo a \\\n  b\n",
            "echo $(echo inner)\n",
            "case x in x) echo x;; esac\n",
        ] {
            complete(script);
        }
    }

    #[test]
    fn open_constructs_are_incomplete() {
        for script in [
            "for i in 1 2; do\n",
            "for i in 1 2\n",
            "if true; then\n",
            "if true; then echo a; else\n",
            "while true\n",
            "case x in\n",
            "f() {\n",
            "{ echo a\n",
            "( echo a\n",
            "echo hi |\n",
            "true &&\n",
            "echo 'open\n",
            "echo \"open\n",
            "echo $(echo\n",
            "echo `echo\n",
            "[[ a ==\n",
            "(( 1 +\n",
        ] {
            incomplete(script);
        }
    }

    #[test]
    fn open_heredoc_and_trailing_backslash_are_incomplete() {
        incomplete("cat <<EOF\n");
        incomplete("cat <<EOF\nbody\n");
        incomplete("cat <<'EOF' | tr a-z A-Z\nbody\n");
        incomplete("echo a \\\n");
        incomplete("echo a \\");
    }

    #[test]
    fn syntax_errors_are_errors() {
        for script in ["echo )\n", "fi\n", "done\n", "if then fi\n", ";;\n"] {
            match status(script) {
                Status::Invalid(message) => assert!(message.contains("syntax error"), "{message}"),
                other => panic!("{script:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn own_thread_answers_like_the_direct_call() {
        assert_eq!(status_on_own_thread("echo hi\n".into()), Status::Complete);
        assert_eq!(status_on_own_thread("if x\n".into()), Status::Incomplete);
    }
}

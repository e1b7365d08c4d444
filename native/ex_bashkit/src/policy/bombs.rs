//! Known bombs in bashkit 0.20.2's bundled commands, refused before they
//! run, in the node and in worker processes alike.
//!
//! In the node a stack overflow or an unbounded allocation would take the VM
//! down, and a loop that never reaches a command boundary would ignore
//! every timeout; in a worker process it would cost the worker and every
//! session on it (`worker.rs`): refused, it costs the script its exec. Where an argument alone tells that a command will blow
//! up, a `before_tool` hook cancels it ("NAME: cancelled by before_tool
//! hook", exit 1) at no cost to well-formed uses:
//!
//! - `xxd -c N` / `-g N` with N above 256 (xxd's own maximum width): the
//!   line buffer is allocated from N (10^10 exhausts memory);
//! - `uniq -f N` / `-s N` / `-w N` above 100 000: skipping loops N times
//!   per line without a cancellation check (10^18 never returns);
//! - `jq` / `yq` filters nested deeper than 256 brackets: the parser
//!   recurses per level and overflows the stack.
//!
//! `test/security/bombs_in_node_test.exs` checks each is refused in both
//! modes.

use bashkit::hooks::{HookAction, ToolEvent};

/// Widths and counts past these are refused (see the module doc).
const MAX_XXD_WIDTH: u64 = 256;
const MAX_UNIQ_SKIP: u64 = 100_000;
const MAX_FILTER_NESTING: usize = 256;

/// The `before_tool` hook.
pub fn refuse(event: ToolEvent) -> HookAction<ToolEvent> {
    let refused = match event.name.as_str() {
        "xxd" => numeric_option_over(
            &event.args,
            &["-c", "-cols", "-g", "-groupsize"],
            MAX_XXD_WIDTH,
        ),
        "uniq" => numeric_option_over(
            &event.args,
            &[
                "-f",
                "-s",
                "-w",
                "--skip-fields",
                "--skip-chars",
                "--check-chars",
            ],
            MAX_UNIQ_SKIP,
        ),
        "jq" | "yq" => event.args.iter().any(|a| nesting(a) > MAX_FILTER_NESTING),
        _ => false,
    };
    if refused {
        HookAction::Cancel(format!(
            "{}: argument past a known interpreter limit",
            event.name
        ))
    } else {
        HookAction::Continue(event)
    }
}

/// Whether one of `flags` (`-c N`, `-cN`, `--flag=N`, `--flag N`) carries a
/// number above `max`. A value that is not a number is left to the command.
fn numeric_option_over(args: &[String], flags: &[&str], max: u64) -> bool {
    let over = |value: &str| value.parse::<u128>().is_ok_and(|n| n > u128::from(max));
    let mut args = args.iter().peekable();
    while let Some(arg) = args.next() {
        for flag in flags {
            if arg == flag {
                if args.peek().is_some_and(|v| over(v)) {
                    return true;
                }
            } else if let Some(rest) = arg.strip_prefix(flag) {
                let value = rest.strip_prefix('=').unwrap_or(rest);
                // `-c10` but not `-cols` read as `-c` + "ols".
                if (flag.starts_with("--") || flag.len() == 2) && over(value) {
                    return true;
                }
            }
        }
    }
    false
}

/// The deepest bracket nesting in `text`.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(name: &str, args: &[&str]) -> bool {
        let event = ToolEvent {
            name: name.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        matches!(refuse(event), HookAction::Cancel(_))
    }

    #[test]
    fn refuses_the_bombs_and_nothing_ordinary() {
        assert!(refused("xxd", &["-c", "10000000000"]));
        assert!(refused("xxd", &["-c10000000000"]));
        assert!(refused("xxd", &["-g", "999"]));
        assert!(!refused("xxd", &["-c", "16", "-g", "2"]));
        assert!(refused("uniq", &["-f", "1000000000000000000"]));
        assert!(refused("uniq", &["--skip-chars=999999999"]));
        assert!(!refused("uniq", &["-f", "2", "-c"]));
        let deep = "(".repeat(300) + "1" + &")".repeat(300);
        assert!(refused("jq", &["-n", &deep]));
        assert!(!refused("jq", &["-n", "[.[] | {a: (.b)}]"]));
        assert!(!refused("sed", &["-c", "10000000000"]));
    }
}

//! Known bombs in bashkit 0.20.2's bundled commands, refused before they
//! run, in the node and in worker processes alike.
//!
//! In the node a stack overflow or an unbounded allocation would take the VM
//! down, and a loop that never reaches a command boundary would ignore
//! every timeout; in a worker process it would cost the worker and every
//! session on it (`worker.rs`): refused, it costs the script its exec.
//! Where an argument alone tells that a command will blow up, a
//! `before_tool` hook cancels it ("NAME: cancelled by before_tool hook",
//! exit 1) at no cost to well-formed uses:
//!
//! - `xxd -c N` / `-g N` with N above 256 (xxd's own maximum width): the
//!   line buffer is allocated from N (10^10 exhausts memory);
//! - `uniq -f N` / `-s N` / `-w N` above 100 000: skipping loops N times
//!   per line without a cancellation check (10^18 never returns);
//! - `jq` / `yq` filters nested deeper than 256 brackets: the parser
//!   recurses per level and overflows the stack;
//! - `set` with more than `MAX_POSITIONAL` words: `set -- "$@" "$@"`
//!   doubles the positional parameters, and empty words pass every
//!   variable, array and byte budget (30 doublings took 3.9 GB);
//! - programs of `ts` (and its aliases) and `sqlite` (`program_bomb`, read
//!   from their arguments and stdin by `commands/program.rs`): nesting
//!   deeper than `MAX_PROGRAM_NESTING`, a TypeScript expression chaining
//!   more than `MAX_OPERATOR_CHAIN` operators, a compound SELECT of more
//!   than `MAX_COMPOUND_TERMS` terms (SQLite's own limit) and more than
//!   `MAX_VIEWS` views created in one run: ZapCode's and Turso's parsers
//!   and planners recurse per level and overflow the stack.
//!
//! `test/security/bombs_in_node_test.exs` checks each is refused in both
//! modes.

use bashkit::hooks::{HookAction, ToolEvent};

/// Widths and counts past these are refused (see the module doc).
const MAX_XXD_WIDTH: u64 = 256;
const MAX_UNIQ_SKIP: u64 = 100_000;
const MAX_FILTER_NESTING: usize = 256;
/// The array-entry cap bashkit applies to arrays (`DEFAULT_MAX_ARRAY_ENTRIES`).
pub const MAX_POSITIONAL: usize = 100_000;
pub const MAX_PROGRAM_NESTING: usize = 256;
pub const MAX_OPERATOR_CHAIN: usize = 1_000;
/// SQLite's `SQLITE_MAX_COMPOUND_SELECT`.
pub const MAX_COMPOUND_TERMS: usize = 500;
pub const MAX_VIEWS: usize = 200;

/// The `before_tool` hook of a session (and of its nested interpreters).
pub fn refuse(event: ToolEvent) -> HookAction<ToolEvent> {
    if event.name == "set" && event.args.len() > MAX_POSITIONAL {
        return HookAction::Cancel(format!(
            "set: more than {MAX_POSITIONAL} positional parameters"
        ));
    }
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

/// A program's language, for `program_bomb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    TypeScript,
    Sql,
}

/// Why `program` would blow up its interpreter's parser or planner (see
/// the module doc), or `None`. One pass over the text; string literals
/// are skipped (their brackets and operators are data).
pub fn program_bomb(language: Language, program: &str) -> Option<String> {
    let bytes = program.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut chain, mut longest) = (0usize, 0usize);
    let (mut terms, mut most_terms) = (1usize, 1usize);
    let mut views = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'\'' | b'"' => {
                i = skip_quoted(bytes, i, language);
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        match language {
            Language::TypeScript => match b {
                b';' | b',' | b'\n' | b'{' | b'}' => chain = 0,
                b'+' | b'-' | b'*' | b'/' | b'%' | b'?' | b'&' | b'|' | b'^' | b'<' | b'>' => {
                    chain += 1;
                    longest = longest.max(chain);
                }
                _ => {}
            },
            Language::Sql => {
                if b == b';' {
                    terms = 1;
                } else if b.is_ascii_alphabetic() && (i == 0 || !is_word_byte(bytes[i - 1])) {
                    let end = (i..bytes.len())
                        .find(|&j| !is_word_byte(bytes[j]))
                        .unwrap_or(bytes.len());
                    let word = &program[i..end];
                    if ["union", "intersect", "except"]
                        .iter()
                        .any(|k| word.eq_ignore_ascii_case(k))
                    {
                        terms += 1;
                        most_terms = most_terms.max(terms);
                    } else if word.eq_ignore_ascii_case("view") {
                        views += 1;
                    }
                    i = end;
                    continue;
                }
            }
        }
        i += 1;
    }
    if deepest > MAX_PROGRAM_NESTING {
        Some(format!(
            "nested {deepest} levels deep ({MAX_PROGRAM_NESTING} at most)"
        ))
    } else if longest > MAX_OPERATOR_CHAIN {
        Some(format!(
            "an expression of {longest} chained operators ({MAX_OPERATOR_CHAIN} at most)"
        ))
    } else if most_terms > MAX_COMPOUND_TERMS {
        Some(format!(
            "a compound SELECT of {most_terms} terms ({MAX_COMPOUND_TERMS} at most)"
        ))
    } else if views > MAX_VIEWS {
        Some(format!("{views} views in one run ({MAX_VIEWS} at most)"))
    } else {
        None
    }
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The index after the string literal opening at `start`: SQL doubles a
/// quote to escape it, TypeScript uses a backslash; a newline ends a
/// TypeScript string (an unterminated one is the parser's to refuse).
fn skip_quoted(bytes: &[u8], start: usize, language: Language) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if language == Language::TypeScript => i += 1,
            b'\n' if language == Language::TypeScript => return i,
            b if b == quote => {
                if language == Language::Sql && bytes.get(i + 1) == Some(&quote) {
                    i += 1;
                } else {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
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
    fn positional_growth_is_refused_in_both_modes() {
        let many = ToolEvent {
            name: "set".into(),
            args: vec![String::new(); MAX_POSITIONAL + 1],
        };
        assert!(matches!(refuse(many.clone()), HookAction::Cancel(_)));
        let fine = ToolEvent {
            name: "set".into(),
            args: vec![String::new(); 1_000],
        };
        assert!(matches!(refuse(fine), HookAction::Continue(_)));
        let xxd = ToolEvent {
            name: "xxd".into(),
            args: vec!["-c".into(), "10000000000".into()],
        };
        assert!(matches!(refuse(xxd), HookAction::Cancel(_)));
    }

    #[test]
    fn program_bombs_and_ordinary_programs() {
        use Language::*;
        let deep = "(".repeat(300) + "1" + &")".repeat(300);
        assert!(program_bomb(TypeScript, &deep).is_some());
        assert!(program_bomb(TypeScript, &format!("[{}]", "[".repeat(300))).is_some());
        assert!(program_bomb(TypeScript, &"1+".repeat(2_000)).is_some());
        assert!(program_bomb(TypeScript, &"a?b:".repeat(2_000)).is_some());
        let strings = format!("console.log('{}')", "(".repeat(1_000));
        assert_eq!(program_bomb(TypeScript, &strings), None);
        let ordinary = "const xs = [1, 2, 3].map((x) => x * 2 + 1); console.log(xs.join(','))";
        assert_eq!(program_bomb(TypeScript, ordinary), None);
        let list = (0..5_000)
            .map(|i| format!("-{i}"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(program_bomb(TypeScript, &format!("[{list}]")), None);

        let union = format!(
            "SELECT count(*) FROM (SELECT 1{})",
            " UNION ALL SELECT 1".repeat(600)
        );
        assert!(program_bomb(Sql, &union).is_some());
        let nested = "SELECT * FROM (".repeat(300) + "SELECT 1" + &")".repeat(300);
        assert!(program_bomb(Sql, &nested).is_some());
        let views: String = (1..=300)
            .map(|i| format!("CREATE VIEW v{i} AS SELECT * FROM v{};", i - 1))
            .collect();
        assert!(program_bomb(Sql, &views).is_some());
        let ok = "CREATE TABLE t(a); INSERT INTO t VALUES ('union (((('); \
                  SELECT a FROM t UNION SELECT 1; SELECT * FROM (SELECT 1) AS overview";
        assert_eq!(program_bomb(Sql, ok), None);
        let many_statements = "SELECT 1 UNION SELECT 2;".repeat(1_000);
        assert_eq!(program_bomb(Sql, &many_statements), None);
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

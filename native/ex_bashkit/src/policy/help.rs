//! `help` under a command policy: a command the policy denies reads exactly
//! as one that does not exist, in `help NAME` and in every listing `help`
//! prints (and so in `man NAME`, which falls back to `help NAME` for a
//! name the table lacks).
//!
//! bashkit's `help` (0.20.2) answers from a fixed catalogue compiled into
//! it, not from the interpreter's table, so it still described a denied
//! command. Its implementation is private, so this one runs it in a nested
//! interpreter (`commands/nested.rs`) and corrects what it says:
//! * `help NAME` for a denied NAME runs bashkit's `help` on a name that
//!   cannot exist and puts NAME back into its words: the same message,
//!   status and prefixes as for any unknown topic;
//! * `help --list [-s]` and `help --search TERM` drop the lines of denied
//!   commands (and a search left with none says so, as bashkit does);
//! * `help` alone recounts its categories and total without them.
//!
//! Registered only when the session has a policy: without one, bashkit's
//! `help` is already right.

use std::sync::Arc;

use bashkit::{Builtin, BuiltinContext, ExecResult};

use crate::commands::nested::Nested;
use crate::policy::commands::Permits;

/// A command name no table holds (control characters are not valid in a
/// name a script can define).
const NO_SUCH_TOPIC: &str = "\u{1}ex_bashkit-no-such-topic\u{1}";

/// `help` that knows the policy.
pub struct PolicyHelp {
    permits: Permits,
    nested: Arc<Nested>,
}

impl PolicyHelp {
    pub fn new(permits: Permits, nested: Arc<Nested>) -> Self {
        Self { permits, nested }
    }
}

/// What bashkit's `help` makes of its arguments (the same loop): the
/// topic's index in `args`, the search term, and whether it lists.
struct Request {
    topic: Option<usize>,
    search: Option<String>,
    list: bool,
}

fn parse(args: &[String]) -> Request {
    let mut request = Request {
        topic: None,
        search: None,
        list: false,
    };
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-s" | "--json" => {}
            "--list" => request.list = true,
            "--search" => {
                i += 1;
                request.search = args.get(i).cloned();
            }
            "--" => {
                i += 1;
                if i < args.len() {
                    request.topic = Some(i);
                }
            }
            arg if !arg.starts_with('-') => request.topic = Some(i),
            // bashkit refuses it: nothing of ours to correct.
            _ => return request,
        }
        i += 1;
    }
    request
}

/// The first word of a listing line (`"  grep         Search..."`).
fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or("")
}

#[bashkit::async_trait]
impl Builtin for PolicyHelp {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let request = parse(ctx.args);
        let mut bash = self.nested.build(&ctx, "help");
        if let Some(i) = request.topic {
            let topic = &ctx.args[i];
            if self.permits.permits(topic) {
                return self.nested.exec(&mut bash, &ctx, "help", ctx.args).await;
            }
            let mut args = ctx.args.to_vec();
            args[i] = NO_SUCH_TOPIC.to_string();
            let mut result = self.nested.exec(&mut bash, &ctx, "help", &args).await?;
            result.stdout = result
                .stdout
                .text_lossy()
                .replace(NO_SUCH_TOPIC, topic)
                .into();
            result.stderr = result
                .stderr
                .text_lossy()
                .replace(NO_SUCH_TOPIC, topic)
                .into();
            return Ok(result);
        }
        let mut result = self.nested.exec(&mut bash, &ctx, "help", ctx.args).await?;
        if result.exit_code != 0 {
            return Ok(result);
        }
        // Every catalogued command the policy denies.
        let all = self
            .nested
            .exec(&mut bash, &ctx, "help", &["--list".into(), "-s".into()])
            .await?;
        let denied: Vec<String> = all
            .stdout
            .text_lossy()
            .lines()
            .map(str::trim)
            .filter(|name| !name.is_empty() && !self.permits.permits(name))
            .map(str::to_string)
            .collect();
        if denied.is_empty() {
            return Ok(result);
        }
        let text = result.stdout.text_lossy().into_owned();
        let kept = |line: &&str| !denied.iter().any(|d| d == first_word(line));
        let out = if let Some(term) = &request.search {
            let lines: Vec<&str> = text.lines().filter(kept).collect();
            if lines.is_empty() {
                format!("help: no commands matching '{term}'\n")
            } else {
                lines.iter().map(|l| format!("{l}\n")).collect()
            }
        } else if request.list {
            text.lines()
                .filter(kept)
                .map(|l| format!("{l}\n"))
                .collect()
        } else {
            let mut categories: Vec<String> = Vec::with_capacity(denied.len());
            for name in &denied {
                let info = self
                    .nested
                    .exec(&mut bash, &ctx, "help", &["--json".into(), name.clone()])
                    .await?;
                categories.push(json_field(&info.stdout.text_lossy(), "category"));
            }
            recount(&text, &categories)
        };
        result.stdout = out.into();
        Ok(result)
    }
}

/// The value of `"field":"..."` in bashkit's one-line `help --json` answer.
fn json_field(json: &str, field: &str) -> String {
    let key = format!("\"{field}\":\"");
    json.split_once(&key)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map_or_else(String::new, |(value, _)| value.to_string())
}

/// bashkit's category view (`  text             (12 commands)` ...,
/// `Total: N builtins`) without the commands of `removed` (one category per
/// removed command); a category left empty is dropped.
fn recount(text: &str, removed: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if let Some(total) = line
            .strip_prefix("Total: ")
            .and_then(|rest| rest.strip_suffix(" builtins"))
            .and_then(|n| n.parse::<usize>().ok())
        {
            out.push_str(&format!(
                "Total: {} builtins\n",
                total.saturating_sub(removed.len())
            ));
            continue;
        }
        let counted = line
            .strip_suffix(" commands)")
            .and_then(|rest| rest.rsplit_once('('))
            .and_then(|(head, n)| Some((head, n.parse::<usize>().ok()?)));
        if let Some((head, count)) = counted {
            let category = head.trim();
            let gone = removed.iter().filter(|c| *c == category).count();
            let left = count.saturating_sub(gone);
            if left > 0 {
                out.push_str(&format!("{head}({left} commands)\n"));
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recount_drops_removed_commands_and_empty_categories() {
        let text = "Bashkit builtin commands:\n\n  text             (2 commands)\n  \
                    net              (1 commands)\n\nTotal: 3 builtins\nUse 'help'.\n";
        let out = recount(text, &["net".into(), "text".into()]);
        assert_eq!(
            out,
            "Bashkit builtin commands:\n\n  text             (1 commands)\n\nTotal: 1 \
             builtins\nUse 'help'.\n"
        );
    }

    #[test]
    fn the_topic_is_found_as_bashkit_finds_it() {
        let args: Vec<String> = ["-s", "--", "sed"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse(&args).topic, Some(2));
        let args: Vec<String> = ["--search", "x"].iter().map(|s| s.to_string()).collect();
        assert_eq!(parse(&args).topic, None);
        assert_eq!(
            json_field(r#"{"name":"a","category":"text"}"#, "category"),
            "text"
        );
    }
}

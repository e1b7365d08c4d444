//! Which scripts can run without live execution, read from their syntax.
//!
//! Scripts run through bashkit's live execution (`Bash::execute`) because
//! it is the only mode that yields to the runner: every 64 commands, which
//! is how a long script shares the runners fairly (`run/runner.rs`). It costs
//! more than buffered execution (`exec_with_options`) on every exec: two
//! output pumps over pipes, a cancel watcher, and around each output write
//! a budget `interval` whose first tick wakes tokio's timer driver about
//! every other exec (bench/DECISIONS.md, "Short scripts run buffered").
//!
//! A script that cannot reach 64 commands never yields in live execution
//! either, so running it buffered changes nothing in how it shares the
//! runners. This module says when that holds, from the script's syntax
//! tree (bashkit's own parser):
//!
//! - [`ScriptShape::short`]: straight-line code (no loop, no function, no
//!   background job) of at most [`MAX_COMMANDS`] commands, each a builtin
//!   from [`SHORT_COMMANDS`] that runs no other code, with no command
//!   substitution anywhere in its text. Such a script runs at most its
//!   own commands, unless code defined by an *earlier* script (a function or
//!   alias shadowing `echo`, a `DEBUG` trap, `set -x` with a `$(...)` in
//!   `PS4`) runs with them: hence the second half.
//! - [`ScriptShape::keeps_session_plain`]: the script defines no function,
//!   alias or trap and runs nothing that could ([`RUNS_CODE`], a name built
//!   at run time). A session all of whose scripts kept it plain has no code
//!   of its own to run, and only such a session runs short scripts
//!   buffered (`Session::plain`). Command and process substitutions do not
//!   count: they run in a subshell, whose functions, aliases, traps and
//!   options bashkit discards (checked against bashkit 0.20.2).
//!
//! - [`ScriptShape::quick`]: short, and made of nothing but the few
//!   builtins of [`QUICK_COMMANDS`] and plain assignments, every word
//!   literal text that no expansion can grow (no variable, glob, brace or
//!   tilde), no redirection, no pipeline, no compound command. What such a
//!   script does is bounded by its own text, plus a per-command cost that
//!   grows with the session's variables (bashkit 0.20 walks its exported
//!   environment on every builtin call): the exec NIF measures that cost on
//!   each session and runs a quick script on the caller's own scheduler
//!   when the measure says it fits (`session/cost.rs`, `Session::quick_fits`).
//!
//! - [`ScriptShape::bounded_steps`]: it may loop, but each of its commands
//!   costs at most what its text and a few integers bound
//!   (`run/bounded_steps.rs`): such a loop runs on the caller's scheduler too,
//!   for a time slice (`session/cost.rs`).
//!
//! A session's own commands (its custom builtins, [`OwnCommands`]) count
//! as quick builtins: each is answered by an Elixir function, runs no shell
//! code and leaves none behind, and what it costs here (a message out, the
//! answer written) is measured with the rest; the time its script waits
//! for Elixir holds no thread (`run/runner.rs`).
//!
//! Parsing is most of what this costs (3–4 µs of a 64-session `echo hi`
//! exec, `perf`), so each thread remembers the shapes of the last few
//! scripts it read: agents and services repeat theirs (a status poll, a
//! build step).
//!
//! Being wrong costs fairness, not safety: a script run buffered that turned
//! out long would hold its runner (or dirty scheduler) until it ends, as one
//! long command (a big `sort`) already does; timeouts, `cancel/1` and the
//! limits still stop it, at its next command.

use std::cell::RefCell;

use bashkit::parser::{
    ArithmeticForCommand, Command, CompoundCommand, ForCommand, ListOperator, Parser,
    SelectCommand, SimpleCommand, UntilCommand, WhileCommand, WordPart,
};

/// Commands a short script may hold; live execution's first yield would
/// come at the 64th.
const MAX_COMMANDS: usize = 32;

/// Longer scripts are not parsed twice (bashkit parses every script
/// anyway); they run live and leave the session not plain.
const MAX_SCRIPT_BYTES: usize = 64 * 1024;

/// Scripts up to this size have their shapes remembered, this many per
/// thread.
const RECENT_BYTES: usize = 512;
const RECENT_SCRIPTS: usize = 8;

thread_local! {
    /// The last scripts this thread classified, and their shapes.
    static RECENT: RefCell<Recent> = const { RefCell::new(Recent { scripts: Vec::new(), next: 0 }) };
}

/// A ring of the last [`RECENT_SCRIPTS`] scripts, each with the key of the
/// own commands it was read with, and their shapes.
struct Recent {
    scripts: Vec<(Box<str>, u64, ScriptShape)>,
    next: usize,
}

impl Recent {
    fn find(&self, script: &str, own: &OwnCommands) -> Option<ScriptShape> {
        self.scripts
            .iter()
            .find(|(known, key, _)| *key == own.key && **known == *script)
            .map(|(_, _, shape)| *shape)
    }

    fn remember(&mut self, script: &str, own: &OwnCommands, shape: ScriptShape) {
        let entry = (Box::from(script), own.key, shape);
        if self.scripts.len() < RECENT_SCRIPTS {
            self.scripts.push(entry);
        } else {
            self.scripts[self.next] = entry;
            self.next = (self.next + 1) % RECENT_SCRIPTS;
        }
    }
}

/// Text that runs code when expanded: command and process substitution, and
/// `${x@P}` (prompt expansion, which runs a `$(...)` held in `x`'s value).
/// Looked for anywhere in the script, quotes included: a false alarm only
/// costs the fast path.
const CODE_MARKERS: [&str; 5] = ["`", "$(", "<(", ">(", "@P"];

/// bashkit builtins that act on their arguments, the filesystem and the
/// shell's variables, and run no other command or code.
const SHORT_COMMANDS: &[&str] = &[
    ":",
    "[",
    "base64",
    "basename",
    "cat",
    "cd",
    "chmod",
    "comm",
    "cp",
    "cut",
    "date",
    "declare",
    "diff",
    "dirname",
    "du",
    "echo",
    "exit",
    "export",
    "false",
    "fold",
    "grep",
    "head",
    "hostname",
    "id",
    "jq",
    "ln",
    "local",
    "ls",
    "md5sum",
    "mkdir",
    "mv",
    "nl",
    "paste",
    "printenv",
    "printf",
    "pwd",
    "read",
    "readlink",
    "readonly",
    "realpath",
    "return",
    "rev",
    "rm",
    "rmdir",
    "seq",
    "set",
    "sha256sum",
    "shift",
    "sort",
    "stat",
    "tail",
    "tee",
    "test",
    "touch",
    "tr",
    "true",
    "typeset",
    "uname",
    "uniq",
    "unset",
    "wc",
    "whoami",
];

/// Builtins whose cost is bounded by their literal arguments (none reads a
/// file's contents, lists a directory, or prints the environment): the
/// commands of a quick script.
const QUICK_COMMANDS: &[&str] = &[
    ":", "[", "basename", "cd", "dirname", "echo", "exit", "false", "mkdir", "pwd", "test",
    "touch", "true", "unset",
];

/// Characters that make a literal word expand (globs, braces, a tilde):
/// not in a quick script's words, nor in those of one with bounded steps.
pub const EXPANDING: &[char] = &['*', '?', '[', '{', '~'];

/// Commands that define functions, aliases, traps or shell options, or run
/// other commands or code (strings, files, callbacks): a script naming one
/// leaves its session not plain. `set` is judged by its options
/// ([`set_keeps_plain`]).
const RUNS_CODE: &[&str] = &[
    ".",
    "alias",
    "awk",
    "bash",
    "bind",
    "builtin",
    "command",
    "compgen",
    "complete",
    "enable",
    "env",
    "eval",
    "exec",
    "fc",
    "find",
    "gawk",
    "hash",
    "make",
    "man",
    "mapfile",
    "nice",
    "nohup",
    "parallel",
    "readarray",
    "retry",
    "sed",
    "sh",
    "shopt",
    "source",
    "time",
    "timeout",
    "trap",
    "unalias",
    "watch",
    "xargs",
];

/// Commands that give variables attributes: `readonly` (an assignment to
/// the variable then fails and the old value stays) or a nameref (the
/// name then reads another variable). A loop that reads its own integers
/// relies on their assignments (`run/bounded_steps.rs`), so a session where
/// one of these ran keeps its loops off the caller's scheduler.
const SETS_ATTRIBUTES: &[&str] = &["declare", "local", "readonly", "typeset"];

/// `set -o` options a plain session may take: none changes what runs.
const PLAIN_SET_OPTIONS: &[&str] = &["errexit", "nounset", "pipefail", "noglob", "noclobber"];

/// What a script's syntax says about how it may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptShape {
    /// Straight-line and short: it may run buffered on a plain session.
    pub short: bool,
    /// It leaves its session plain (see the module doc).
    pub keeps_session_plain: bool,
    /// Short, and bounded by its own text (see the module doc).
    pub quick: bool,
    /// Each command bounded by its text, loops allowed (`run/bounded_steps.rs`).
    pub bounded_steps: bool,
    /// It may give variables attributes ([`SETS_ATTRIBUTES`]).
    pub sets_attributes: bool,
    /// Its simple commands, assignments included.
    pub commands: u32,
}

impl ScriptShape {
    pub const UNKNOWN: Self = Self {
        short: false,
        keeps_session_plain: false,
        quick: false,
        bounded_steps: false,
        sets_attributes: true,
        commands: 0,
    };
}

/// A session's own commands: the names of its custom builtins.
#[derive(Debug, Default)]
pub struct OwnCommands {
    /// Tells apart, in the per-thread memory of shapes, scripts read with
    /// different command sets: a hash of the names (0 for none), so that
    /// sessions with the same builtins share what was read.
    key: u64,
    names: Vec<String>,
}

impl OwnCommands {
    /// No commands of its own: a session without custom builtins, or a
    /// fresh default interpreter.
    pub const NONE: Self = Self {
        key: 0,
        names: Vec::new(),
    };

    pub fn new(names: &[String]) -> Self {
        if names.is_empty() {
            return Self::default();
        }
        let mut names = names.to_vec();
        names.sort_unstable();
        names.dedup();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&names, &mut hasher);
        Self {
            key: std::hash::Hasher::finish(&hasher).max(1),
            names,
        }
    }

    /// Whether `name` is one of them and nothing else already: a name
    /// that runs code stays what [`RUNS_CODE`] says it is.
    pub fn has(&self, name: &str) -> bool {
        !RUNS_CODE.contains(&name) && self.names.iter().any(|own| own == name)
    }
}

/// bashkit commands that may run for long inside one command, where the
/// interpreter cannot yield: they loop over their input or their program
/// (jq's `reduce`, an awk or python loop, a sed over a large file, a sort
/// of it). Whatever thread runs one is held until it ends.
const LONG_COMMANDS: &[&str] = &[
    "awk", "gawk", "jq", "python", "python3", "sed", "sort", "sqlite", "sqlite3", "uniq", "xxd",
    "yq",
];

/// Whether `script` names one of [`LONG_COMMANDS`] as a word anywhere (in
/// quotes or a string too: a false alarm only costs it a thread of its
/// own). Read from the text, so it holds for scripts of any length. Split
/// as bytes, which is cheaper than as chars on every exec's path: a byte of
/// a multi-byte character is a separator, as the character would be.
pub fn names_long_command(script: &str) -> bool {
    script
        .as_bytes()
        .split(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
        .any(|word| LONG_COMMANDS.iter().any(|name| name.as_bytes() == word))
}

/// What bashkit 0.20.2's live execution loses and its buffered one keeps
/// (reproducers in `test/ex_bashkit/run/live_output_test.exs`): output a
/// command writes after sub-commands it ran through an execution plan
/// (awk after `close()` of a pipe, find after `-exec`, `man`), what a
/// subshell writes after `exec >`, `select`'s menu. Read from the text: a
/// false alarm only runs the script buffered on a thread of its own.
const LOST_LIVE: &[&str] = &[
    "close(", "-exec", "exec >", "exec>", "exec 1>", "select ", "man ",
];

/// Whether `script` may write output live execution would lose.
pub fn loses_live_output(script: &str) -> bool {
    LOST_LIVE.iter().any(|needle| script.contains(needle))
}

/// The shape of `script` on a session whose own commands are `own`:
/// remembered, or read from its syntax tree.
pub fn of(script: &str, own: &OwnCommands) -> ScriptShape {
    if script.len() > RECENT_BYTES {
        return read(script, own);
    }
    if let Some(shape) = RECENT.with(|recent| recent.borrow().find(script, own)) {
        return shape;
    }
    let shape = read(script, own);
    RECENT.with(|recent| recent.borrow_mut().remember(script, own, shape));
    shape
}

/// The shape of `script`, from its syntax tree.
fn read(script: &str, own: &OwnCommands) -> ScriptShape {
    if script.len() > MAX_SCRIPT_BYTES {
        return ScriptShape::UNKNOWN;
    }
    let Ok(parsed) = Parser::new(script).parse() else {
        return ScriptShape::UNKNOWN;
    };
    let mut walk = Walk {
        own,
        count: 0,
        straight: !CODE_MARKERS.iter().any(|m| script.contains(m)),
        plain: true,
        quick: true,
        sets_attributes: false,
    };
    walk.commands(&parsed.commands);
    let short = walk.straight && walk.plain && walk.count <= MAX_COMMANDS;
    ScriptShape {
        short,
        keeps_session_plain: walk.plain,
        quick: short && walk.quick,
        bounded_steps: walk.plain && crate::run::bounded_steps::read(&parsed.commands, own),
        sets_attributes: walk.sets_attributes,
        commands: u32::try_from(walk.count).unwrap_or(u32::MAX),
    }
}

struct Walk<'a> {
    /// The session's own commands.
    own: &'a OwnCommands,
    /// Commands seen.
    count: usize,
    /// No loop, function, job or substitution: every command runs at most
    /// once, and none is hidden in a word.
    straight: bool,
    /// Nothing defines or runs code (see [`RUNS_CODE`]).
    plain: bool,
    /// Every command is one a quick script may hold ([`Walk::quick_simple`]).
    quick: bool,
    /// A command gives variables attributes ([`SETS_ATTRIBUTES`]).
    sets_attributes: bool,
}

impl Walk<'_> {
    fn commands(&mut self, commands: &[Command]) {
        for command in commands {
            self.command(command);
        }
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Pipeline(pipeline) => {
                // A pipeline's commands run in subshells, each a copy of
                // the shell's state.
                self.quick &= pipeline.commands.len() == 1 && !pipeline.negated;
                self.commands(&pipeline.commands)
            }
            Command::List(list) => {
                self.command(&list.first);
                for (operator, command) in &list.rest {
                    if *operator == ListOperator::Background {
                        self.opaque();
                    }
                    self.command(command);
                }
            }
            Command::Compound(compound, _) => {
                self.quick = false;
                self.compound(compound)
            }
            Command::Function(_) => self.opaque(),
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::If(command) => {
                self.commands(&command.condition);
                self.commands(&command.then_branch);
                for (condition, branch) in &command.elif_branches {
                    self.commands(condition);
                    self.commands(branch);
                }
                if let Some(branch) = &command.else_branch {
                    self.commands(branch);
                }
            }
            CompoundCommand::Subshell(body) | CompoundCommand::BraceGroup(body) => {
                self.commands(body)
            }
            CompoundCommand::Case(command) => {
                for item in &command.cases {
                    self.commands(&item.commands);
                }
            }
            CompoundCommand::Arithmetic(_) | CompoundCommand::Conditional(_) => self.count += 1,
            // Loops: what their bodies run decides whether the session
            // stays plain.
            CompoundCommand::For(ForCommand { body, .. })
            | CompoundCommand::ArithmeticFor(ArithmeticForCommand { body, .. })
            | CompoundCommand::Select(SelectCommand { body, .. }) => {
                self.straight = false;
                self.commands(body);
            }
            CompoundCommand::While(WhileCommand {
                condition, body, ..
            })
            | CompoundCommand::Until(UntilCommand {
                condition, body, ..
            }) => {
                self.straight = false;
                self.commands(condition);
                self.commands(body);
            }
            // A job goes on beside later scripts; `time` runs a command.
            CompoundCommand::Coproc(_) | CompoundCommand::Time(_) => self.opaque(),
        }
    }

    /// Something that may run, or leave behind, code not in this text: a
    /// function, a job, a name built at run time, a command that runs code.
    fn opaque(&mut self) {
        self.straight = false;
        self.plain = false;
    }

    fn simple(&mut self, simple: &SimpleCommand) {
        self.count += 1;
        let name = match simple.name.parts.as_slice() {
            // Assignments alone (also written as an empty name, below).
            [] => Some(""),
            parts => literal(parts),
        };
        let own = name.is_some_and(|name| self.own.has(name));
        self.quick &= name.is_some_and(|name| quick_simple(name, own, simple));
        let Some(name) = name else {
            // A name built at run time may be anything.
            self.opaque();
            return;
        };
        if name.is_empty() {
            // Assignments alone, as bashkit's parser writes them.
            return;
        }
        if !SHORT_COMMANDS.contains(&name) && !own {
            self.straight = false;
        }
        self.sets_attributes |= SETS_ATTRIBUTES.contains(&name);
        let plain = match name {
            "set" => set_keeps_plain(&simple.args),
            name => !RUNS_CODE.contains(&name),
        };
        if !plain {
            self.opaque();
        }
    }
}

/// Whether `simple`, named `name` (empty for assignments alone), is a
/// command a quick script may hold: a builtin of [`QUICK_COMMANDS`], one of
/// the session's own (`own`), or assignments alone, every word and assigned
/// value literal and free of [`EXPANDING`] characters, no redirection.
fn quick_simple(name: &str, own: bool, simple: &SimpleCommand) -> bool {
    let fixed = |word: &bashkit::parser::Word| {
        literal(&word.parts).is_some_and(|text| !text.contains(EXPANDING))
    };
    let assignments_fixed = simple.assignments.iter().all(|a| {
        a.index.is_none()
            && matches!(&a.value, bashkit::parser::AssignmentValue::Scalar(w) if fixed(w))
    });
    (name.is_empty() || own || QUICK_COMMANDS.contains(&name))
        && simple.redirects.is_empty()
        && assignments_fixed
        && simple.args.iter().all(fixed)
}

/// The text of a word made of literal text only.
fn literal(parts: &[WordPart]) -> Option<&str> {
    match parts {
        [WordPart::Literal(text)] => Some(text),
        _ => None,
    }
}

/// Whether `set ARGS` only sets options that change no code run (`set -e`,
/// `set -euo pipefail`) or the positional parameters (`set -- a b`):
/// `set -x` would run `PS4`'s expansions before every command.
fn set_keeps_plain(args: &[bashkit::parser::Word]) -> bool {
    let mut args = args.iter().map(|arg| literal(&arg.parts));
    while let Some(arg) = args.next() {
        let Some(arg) = arg else { return false };
        if arg == "--" || arg == "-" {
            return true;
        }
        let Some(flags) = arg.strip_prefix('-').or_else(|| arg.strip_prefix('+')) else {
            // Positional parameters follow.
            return true;
        };
        for flag in flags.chars() {
            match flag {
                'e' | 'u' | 'f' | 'C' => {}
                'o' => match args.next() {
                    Some(Some(name)) if PLAIN_SET_OPTIONS.contains(&name) => {}
                    _ => return false,
                },
                _ => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(script: &str) -> (bool, bool) {
        let shape = read(script, &OwnCommands::NONE);
        // Asked again, the remembered shape is the same.
        assert_eq!(of(script, &OwnCommands::NONE), shape, "{script}");
        assert_eq!(of(script, &OwnCommands::NONE), shape, "{script}");
        (shape.short, shape.keeps_session_plain)
    }

    #[test]
    fn straight_line_builtins_are_short() {
        for script in [
            "echo hi",
            "cd /tmp && ls -la | head -5; echo done > /tmp/x; cat /tmp/x",
            "x=1; export Y=$x; echo \"$x ${Y:-none}\" >&2",
            "if [ -f /a ]; then cat /a; else echo missing; fi",
            "[[ $x == 1 ]] && (( x += 1 )); case $x in 2) echo two ;; esac",
            "set -euo pipefail; echo ok",
            "{ echo a; echo b; } | sort",
            "",
        ] {
            assert_eq!(shape(script), (true, true), "{script}");
        }
    }

    #[test]
    fn loops_and_other_commands_run_live_but_keep_the_session_plain() {
        for script in [
            "for i in 1 2 3; do echo $i; done",
            "while true; do :; done",
            "until false; do break; done",
            "for ((i=0; i<3; i++)); do echo $i; done",
            "sleep 1",
            "python3 -c 'print(1)'",
            "./run.sh",
            "answer 42",
            // Substitutions run in a subshell: what they define is gone after.
            "echo $(while :; do :; done)",
            "echo `pwd`",
            "cat <(echo hi)",
            "x='$(pwd)'; echo ${x@P}",
            "x=$(f() { :; }; alias echo=f)",
        ] {
            assert_eq!(shape(script), (false, true), "{script}");
        }
        let many = "echo x; ".repeat(MAX_COMMANDS + 1);
        assert_eq!(shape(&many), (false, true));
    }

    #[test]
    fn code_definitions_and_code_runners_leave_the_session_not_plain() {
        for script in [
            "f() { echo hi; }",
            "function f { :; }",
            "alias echo='while :; do :; done'",
            "trap 'echo bye' EXIT",
            "eval 'echo hi'",
            "source /x.sh",
            ". /x.sh",
            "set -x",
            "set -o xtrace",
            "shopt -s extdebug",
            "$cmd arg",
            "sleep 10 &",
            "xargs echo < /list",
            "find / -exec echo {} \\;",
            "bash -c 'echo hi'",
            "if true; then unterminated",
        ] {
            assert_eq!(shape(script), (false, false), "{script}");
        }
    }

    #[test]
    fn quick_scripts_are_literal_builtins_bounded_by_their_text() {
        for script in [
            "echo hi",
            "cd /tmp && pwd; echo 'a b' \"c\"",
            "x=1; y='two words'; unset x",
            "[ -d /tmp ] || mkdir -p /tmp/a/b; touch /tmp/a/f; test -f /tmp/a/f",
            ": ; true; false; basename /a/b; dirname /a/b; exit 3",
        ] {
            let shape = read(script, &OwnCommands::NONE);
            assert!(shape.quick && shape.short, "{script}");
        }
        assert_eq!(read("echo a; echo b; x=1", &OwnCommands::NONE).commands, 3);
        for script in [
            "readonly x=1",
            "declare -n r=x",
            "typeset -r y",
            "local -n z=x",
        ] {
            assert!(read(script, &OwnCommands::NONE).sets_attributes, "{script}");
        }
        // A function's body is not read: defining one leaves the session
        // not plain, which keeps every script off the caller's scheduler.
        assert!(!read("f() { local -n z; }", &OwnCommands::NONE).keeps_session_plain);
        assert!(!read("echo hi; x=1", &OwnCommands::NONE).sets_attributes);
        for script in [
            // An expansion can be as big as the session's variables.
            "echo $HOME",
            "echo \"${x}\"",
            "x=$y",
            // Globs and braces list directories or multiply words.
            "echo /*",
            "echo {1..100000}",
            "echo ~",
            "a[1]=x",
            "a=(1 2)",
            // Commands whose cost is their input's, not their text's.
            "cat /big",
            "printf '%99999999d' 1",
            "export",
            "seq 1 100000000",
            // Redirections, pipelines, compound commands.
            "echo hi > /f",
            "echo hi | echo",
            "! true",
            "if true; then echo hi; fi",
            "(echo hi)",
            "{ echo hi; }",
            "for i in 1; do echo; done",
            "echo $(pwd)",
        ] {
            assert!(!read(script, &OwnCommands::NONE).quick, "{script}");
        }
        assert!(!read(&"echo x; ".repeat(MAX_COMMANDS + 1), &OwnCommands::NONE).quick);
    }

    #[test]
    fn a_sessions_own_commands_are_quick_builtins() {
        let own = OwnCommands::new(&["answer".into(), "lookup".into(), "eval".into()]);
        for script in [
            "answer",
            "answer 42 'two words'; echo hi",
            "cd /a && lookup x",
        ] {
            let shape = of(script, &own);
            assert!(
                shape.quick && shape.short && shape.keeps_session_plain,
                "{script}"
            );
        }
        // Read without them, the same text names unknown commands; and the
        // shape remembered for one command set is not another's.
        assert_eq!(shape("answer 42"), (false, true));
        assert!(!of("answer 42", &OwnCommands::new(&["other".into()])).short);
        for script in ["answer $x", "answer > /f", "answer | answer"] {
            assert!(!of(script, &own).quick, "{script}");
        }
        // A name that runs code stays one.
        assert!(!of("eval x", &own).keeps_session_plain);
        assert_eq!(OwnCommands::new(&[]).key, 0);
        assert_eq!(
            OwnCommands::new(&["b".into(), "a".into()]).key,
            OwnCommands::new(&["a".into(), "b".into(), "a".into()]).key
        );
    }

    #[test]
    fn long_commands_are_found_as_words_anywhere() {
        for script in [
            "jq -n .",
            "cat f | sort",
            "x=$(sed s/a/b/ f)",
            "python3 -c 1",
            "f() { awk '{print}'; }",
            "echo «jq»",
        ] {
            assert!(names_long_command(script), "{script}");
        }
        for script in [
            "echo hi",
            "echo used based",
            "cat sorted.txt",
            "ls -la /tmp",
            "echo «jqx» ésort2",
        ] {
            assert!(!names_long_command(script), "{script}");
        }
    }

    #[test]
    fn an_oversized_script_is_not_parsed() {
        let big = format!("echo {}", "x".repeat(MAX_SCRIPT_BYTES));
        assert_eq!(of(&big, &OwnCommands::NONE), ScriptShape::UNKNOWN);
    }
}

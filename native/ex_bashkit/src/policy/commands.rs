//! The command policy (`commands: [allow: names]` / `[deny: names]` of
//! `Session.new/1`): which commands a session has at all.
//!
//! A command outside the policy must behave exactly like one that does not
//! exist, however it is reached. So it is not intercepted: it is left out of
//! the interpreter's tables when the `Bash` is built, and every route then
//! misses it for the same reason a missing command is missed.
//!
//! Why that holds in bashkit 0.20.2 (read from its source):
//! * every way of running a command by name ends in the one dispatch
//!   (`Interpreter::dispatch_command`): a plain call, `command`, `builtin`,
//!   `exec`, `eval`, `bash -c`/`sh -c` (a forked interpreter that clones the
//!   already filtered table), `source`, functions, aliases, names built at
//!   run time, pipelines and substitutions; and the commands that run other
//!   commands (`env`, `xargs`, `find -exec`, `timeout`, `time`, `parallel`,
//!   `retry`, `watch`, `make`, `man`) hand the interpreter a `SubCommand`
//!   that is lowered to a simple command and dispatched the same way. That
//!   dispatch looks in: functions, the special builtins the interpreter runs
//!   itself (all shell builtins, kept), the host registry (unused here), the
//!   builtin table, a path, `$PATH`: a name absent from the table falls
//!   through to `command not found` (127), with suggestions drawn from the
//!   table, so they never name a hidden command either;
//! * `BashBuilder::builtin_filter` removes bashkit's own commands from that
//!   table before the interpreter exists, and the commands we register
//!   ourselves (`rm`, `tee`, `sleep`, `:builtins`, `python`) are simply not
//!   registered when outside the policy;
//! * the root filesystem's `/bin` and `/usr/bin` stubs are generated from
//!   the table (`rootfs_command_names`), so `/usr/bin/sed` does not exist
//!   either ("No such file or directory", 127, as for any missing program);
//!   a stub a script copies elsewhere names a command the table lacks and
//!   runs as an ordinary script;
//! * `type`, `which`, `command -v`, `hash`, `compgen -c`, `man`, `builtin`
//!   all ask the same table; `help` alone answers from a fixed catalogue,
//!   so under a policy it is ours (`policy/help.rs`), and `man`, which
//!   falls back to `help NAME`, follows.
//!
//! The bash builtins (GNU bash 5.2's `enable -a` list) and `bash`/`sh` are
//! the shell itself, not commands: the policy does not touch them, and
//! naming one in it is refused at `new/1`.

use std::collections::HashSet;
use std::sync::Arc;

use crate::map_struct;

map_struct! {
    /// The policy as `ExBashkit.Session.Options` encodes it: `allow` is `nil`
    /// or the only commands kept; `deny` the commands removed.
    #[derive(Debug, Clone, Default)]
    pub struct CommandPolicy {
        pub allow: Option<Vec<String>>,
        pub deny: Vec<String>,
    }
}

/// GNU bash 5.2's builtins (`enable -a`) plus the shells themselves:
/// always present, whatever the policy.
const SHELL_BUILTINS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
    "bash",
    "sh",
];

/// Whether `name` is part of the shell rather than a command.
pub fn is_shell_builtin(name: &str) -> bool {
    SHELL_BUILTINS.contains(&name)
}

/// The decision the builder applies: whether a command is kept.
#[derive(Clone)]
pub struct Permits(Arc<Rule>);

enum Rule {
    All,
    Only(HashSet<String>),
    AllBut(HashSet<String>),
}

impl Permits {
    /// Every command (no policy).
    pub fn all() -> Self {
        Self(Arc::new(Rule::All))
    }

    /// The rule `policy` describes, or why it is invalid.
    pub fn new(policy: Option<&CommandPolicy>) -> Result<Self, String> {
        let Some(policy) = policy else {
            return Ok(Self::all());
        };
        // An allowlist may name builtins (people write `allow: ["echo",
        // "cat"]`): they are always there, so naming them changes nothing.
        // Denying one cannot be honoured, and accepting it silently would
        // lie about the policy.
        if let Some(name) = policy.deny.iter().find(|n| is_shell_builtin(n)) {
            return Err(format!(
                ":commands deny names {name:?}, which is part of the shell itself (a bash \
                 builtin): it cannot be denied (shell builtins are always present)"
            ));
        }
        let set = |names: &[String]| names.iter().cloned().collect::<HashSet<_>>();
        Ok(Self(Arc::new(match &policy.allow {
            Some(allow) => Rule::Only(set(allow)),
            None => Rule::AllBut(set(&policy.deny)),
        })))
    }

    /// Whether the session has the command `name`.
    ///
    /// The rule is matched before the shell-builtin list: the builder asks
    /// this of each of its ~200 commands on every build, and with no policy
    /// (the common case) that list need not be searched at all.
    pub fn permits(&self, name: &str) -> bool {
        match &*self.0 {
            Rule::All => true,
            Rule::Only(names) => names.contains(name) || is_shell_builtin(name),
            Rule::AllBut(names) => !names.contains(name) || is_shell_builtin(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{build_bash, SessionConfig};
    use crate::run::runtime;

    fn run(policy: CommandPolicy, script: &str) -> bashkit::ExecResult {
        let config = SessionConfig {
            commands: Some(policy),
            ..SessionConfig::default()
        };
        let mut bash = build_bash(&config, None, None).unwrap();
        runtime::block_on(bash.exec(script)).unwrap()
    }

    fn deny(names: &[&str]) -> CommandPolicy {
        CommandPolicy {
            allow: None,
            deny: names.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_denied_command_is_missing_on_every_route() {
        let out = run(deny(&["sed"]), "sed p </dev/null; echo $?");
        assert_eq!(out.stdout, "127\n");
        assert!(out.stderr.contains("sed: command not found"), "{out:?}");
        let out = run(deny(&["sed"]), "/usr/bin/sed p </dev/null; echo $?");
        assert_eq!(out.stdout, "127\n");
        let out = run(deny(&["sed"]), "echo a | xargs sed p; echo $?");
        assert!(out.stderr.contains("sed: command not found"), "{out:?}");
    }

    #[test]
    fn an_allowlist_keeps_the_shell() {
        let allow = CommandPolicy {
            allow: Some(vec!["cat".into()]),
            deny: vec![],
        };
        let out = run(
            allow,
            "echo hi | cat; [ -n x ] && printf ok; ls; echo \" $?\"",
        );
        assert_eq!(out.stdout, "hi\nok 127\n");
    }

    #[test]
    fn denying_a_shell_builtin_is_refused_allowing_one_is_not() {
        assert!(Permits::new(Some(&deny(&["eval"]))).is_err());
        assert!(Permits::new(Some(&deny(&["bash"]))).is_err());
        assert!(Permits::new(Some(&deny(&["sed"]))).is_ok());
        let allow = CommandPolicy {
            allow: Some(vec!["echo".into(), "cat".into()]),
            deny: vec![],
        };
        assert!(Permits::new(Some(&allow)).is_ok());
        let out = run(allow, "echo hi | cat; ls; echo $?");
        assert_eq!(out.stdout, "hi\n127\n");
    }
}

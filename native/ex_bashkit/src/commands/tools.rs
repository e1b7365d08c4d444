//! The opt-in tools built from bashkit's cargo features `git`, `sqlite` and
//! `typescript`: the `:git`, `:sqlite` and `:typescript` options of
//! `Session.new/1`. Each is off unless granted, like `:python`, and each
//! command name obeys the command policy (`policy/commands.rs`) like every other.
//!
//! - `git`: bashkit's virtual git, confined to the session filesystem (its
//!   state is the `.git` directory, so it moves with snapshots). bashkit
//!   puts `git` in its default command table in every build with the
//!   feature and makes it answer "not configured" without a `GitConfig`; a
//!   session without the grant drops it from the table with the policy's
//!   filter (`ungranted`), so `git` is an unknown command (127) and the
//!   builtin list (which snapshots fingerprint) is the same as in a build
//!   without the feature. The author is the one granted, or bashkit's
//!   virtual default, never the host's. Remote patterns must be URL
//!   prefixes (the `:allow_net` parser) within the session's network
//!   access (`:allow_net` and its private-IP rule), checked here when the
//!   session is built: bashkit 0.20.2 moves no bytes for a remote
//!   (clone/fetch/pull/push only check the URL against the patterns), and
//!   a release that does cannot reach more than `curl` can.
//! - `sqlite`: Turso, as `sqlite` and `sqlite3`. bashkit runs it only when
//!   the builder env holds `BASHKIT_ALLOW_INPROCESS_SQLITE=1` (read once, at
//!   build): set here, then taken back out of the shell like Python's.
//!   Its wall-clock budget is its own (30 s), not clamped to the exec's
//!   deadline the way Python's and TypeScript's are, so it is lowered to the
//!   session's `timeout_ms`; its output cap to `max_stdout_bytes`.
//! - `typescript`: ZapCode, as `ts`, `typescript`, `node`, `deno` and
//!   `bun`. bashkit clamps its budget to what is left of the exec's
//!   deadline on every call.
//!
//! sqlite's and typescript's commands are builtins we register, each
//! wrapped by `commands/program.rs` (known bombs refused, the per-call
//! deadline bounding their budget), so a name outside the policy is
//! simply not registered; a custom `:builtins` or
//! `:python` name one of them takes is refused at `new/1` (one would
//! silently replace the other).

use std::sync::Arc;
use std::time::Duration;

use bashkit::{
    Bash, BashBuilder, Builtin, Extension, GitConfig, NetworkAllowlist, SqliteLimits,
    TypeScriptExtension, TypeScriptLimits,
};

use crate::commands::program::{Make, Program};
use crate::policy::bombs::Language;
use crate::run::interrupt::Interrupt;

use crate::config::SessionConfig;
use crate::map_struct;
use crate::policy::commands::{CommandPolicy, Permits};
use crate::term::value::Value;

/// The variable bashkit reads at build time to allow in-process SQLite.
pub const SQLITE_OPT_IN: &str = "BASHKIT_ALLOW_INPROCESS_SQLITE";

/// The commands `sqlite: true` registers (as bashkit's `sqlite_with_limits`).
pub const SQLITE_COMMANDS: [&str; 2] = ["sqlite", "sqlite3"];

/// bashkit's own budget for one `sqlite` invocation.
const SQLITE_MAX_DURATION: Duration = Duration::from_secs(30);

map_struct! {
    /// A `:git` grant, as `ExBashkit.Session.Options` validated it.
    #[derive(Debug, Clone)]
    pub struct GitGrant {
        pub author_name: String,
        pub author_email: String,
        pub remotes: Vec<String>,
    }
}

/// bashkit's own commands `config` was not granted, for the command
/// table's filter (bashkit keeps one, shared with the command policy).
pub fn ungranted(config: &SessionConfig) -> &'static [&'static str] {
    if config.git.is_some() {
        &[]
    } else {
        &["git"]
    }
}

/// Register the granted tools on `builder`, each command only where
/// `permits` keeps it; `Err` when a git remote is not a URL prefix within
/// the session's network access, or a granted command's name is also a
/// `:builtins` or `:python` name.
pub fn register(
    mut builder: BashBuilder,
    config: &SessionConfig,
    permits: &Permits,
    interrupt: Option<&Arc<Interrupt>>,
) -> Result<BashBuilder, String> {
    check_conflicts(config)?;
    if let Some(grant) = &config.git {
        builder = builder.git(git_config(grant, config)?);
    }
    if config.sqlite {
        let limits = sqlite_limits(config);
        let names: Vec<&str> = SQLITE_COMMANDS
            .into_iter()
            .filter(|n| permits.permits(n))
            .collect();
        let budget = limits.max_duration;
        let make: Make = Arc::new(move |left: Duration| {
            let limits = limits.clone().max_duration(budget.min(left));
            Box::new(bashkit::Sqlite::with_limits(limits)) as Box<dyn Builtin>
        });
        for name in &names {
            let program = Program::new(name, Language::Sql, Arc::clone(&make), budget, interrupt);
            builder = builder.builtin(*name, Box::new(program));
        }
        if !names.is_empty() {
            builder = builder.env(SQLITE_OPT_IN, "1");
        }
    }
    if config.typescript {
        let budget = TypeScriptLimits::default().common.max_duration;
        for (name, _) in typescript(budget).builtins() {
            if permits.permits(&name) {
                let own = name.clone();
                let make: Make = Arc::new(move |left: Duration| {
                    typescript(budget.min(left))
                        .builtins()
                        .into_iter()
                        .find(|(n, _)| *n == own)
                        .map(|(_, command)| command)
                        .expect("the extension makes the same commands each time")
                });
                let program = Program::new(&name, Language::TypeScript, make, budget, interrupt);
                builder = builder.builtin(name, Box::new(program));
            }
        }
    }
    Ok(builder)
}

/// The TypeScript commands (bashkit's compat aliases on), with a budget of
/// at most `max_duration` (bashkit clamps it to the session's deadline).
fn typescript(max_duration: Duration) -> TypeScriptExtension {
    TypeScriptExtension::with_limits(TypeScriptLimits::default().max_duration(max_duration))
}

/// The command names each granted tool takes, before the policy.
fn granted(config: &SessionConfig) -> [(&'static str, Vec<String>); 3] {
    let names = |granted: bool, names: fn() -> Vec<String>| {
        if granted {
            names()
        } else {
            Vec::new()
        }
    };
    [
        ("git", names(config.git.is_some(), || vec!["git".into()])),
        (
            "sqlite",
            names(config.sqlite, || SQLITE_COMMANDS.map(String::from).to_vec()),
        ),
        (
            "typescript",
            names(config.typescript, || {
                typescript(Duration::from_secs(1))
                    .builtins()
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect()
            }),
        ),
    ]
}

fn check_conflicts(config: &SessionConfig) -> Result<(), String> {
    for (option, names) in granted(config) {
        for name in names {
            if config.builtins.contains(&name) || config.python.contains(&name) {
                return Err(format!(
                    ":{option} takes the command name {name:?}, which :builtins or :python \
                     also defines; rename one of them"
                ));
            }
        }
    }
    Ok(())
}

fn git_config(grant: &GitGrant, config: &SessionConfig) -> Result<GitConfig, String> {
    if !grant.remotes.is_empty() {
        let network = crate::policy::net::policy(config)?;
        for remote in &grant.remotes {
            crate::policy::net::check_prefix(":git remote", remote)?;
            // With `allow_net: :all` the allowlist admits everything before
            // it looks at the host; a list of the remote alone still refuses
            // a private address written as a literal.
            let private_literal = config.block_private_ips
                && !NetworkAllowlist::new()
                    .allow(remote.as_str())
                    .is_allowed(remote);
            if private_literal || !network.is_allowed(remote) {
                return Err(format!(
                    ":git remote {remote:?} is outside the session's network access: list it \
                     (or a prefix of it) in :allow_net; a private or loopback address also \
                     needs block_private_ips: false"
                ));
            }
        }
    }
    Ok(GitConfig::new()
        .author(&grant.author_name, &grant.author_email)
        .allow_remotes(grant.remotes.iter().cloned()))
}

fn sqlite_limits(config: &SessionConfig) -> SqliteLimits {
    let limits = &config.limits;
    let duration = limits.timeout_ms.map_or(SQLITE_MAX_DURATION, |ms| {
        SQLITE_MAX_DURATION.min(Duration::from_millis(ms))
    });
    let mut out = SqliteLimits::default().max_duration(duration);
    if let Some(bytes) = limits.max_stdout_bytes {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        let cap = out.max_output_bytes.min(bytes);
        out = out.max_output_bytes(cap);
    }
    out
}

/// Remove the SQLite opt-in variable from the shell state of a freshly built
/// `Bash`, unless the user set it through `:env` themselves.
pub fn hide_opt_in(bash: &mut Bash, config: &SessionConfig) {
    if config.sqlite {
        crate::commands::python::hide_variable(bash, config, SQLITE_OPT_IN);
    }
}

/// The commands each grant gave the session, the command policy applied:
/// `%{python: [name], git: [name], sqlite: [name], typescript: [name]}`
/// (empty lists for what was not granted), for the session's description.
pub fn commands(config: &SessionConfig) -> Value {
    // The session was built from this config, so the policy is valid; were
    // it not, nothing is described as available.
    let permits = Permits::new(config.commands.as_ref()).unwrap_or_else(|_| {
        let none = CommandPolicy {
            allow: Some(Vec::new()),
            deny: Vec::new(),
        };
        Permits::new(Some(&none)).expect("an empty allowlist is valid")
    });
    let kept = |names: Vec<String>| -> Value {
        names
            .into_iter()
            .filter(|n| permits.permits(n))
            .collect::<Vec<_>>()
            .into()
    };
    let [(_, git), (_, sqlite), (_, typescript)] = granted(config);
    Value::map([
        ("python", kept(config.python.clone())),
        ("git", kept(git)),
        ("sqlite", kept(sqlite)),
        ("typescript", kept(typescript)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::build_bash;
    use crate::run::runtime;

    fn run(config: &SessionConfig, script: &str) -> bashkit::ExecResult {
        let mut bash = build_bash(config, None, None).unwrap();
        runtime::block_on(bash.exec(script)).unwrap()
    }

    fn git(remotes: &[&str]) -> Option<GitGrant> {
        Some(GitGrant {
            author_name: "Agent".into(),
            author_email: "agent@example.com".into(),
            remotes: remotes.iter().map(|s| s.to_string()).collect(),
        })
    }

    #[test]
    fn nothing_granted_means_unknown_commands() {
        let config = SessionConfig::default();
        for command in ["git status", "sqlite3 :memory: 'select 1'", "ts -c '1'"] {
            assert_eq!(run(&config, command).exit_code, 127, "{command}");
        }
    }

    #[test]
    fn git_commits_with_the_granted_author() {
        let config = SessionConfig {
            git: git(&[]),
            ..SessionConfig::default()
        };
        let out = run(
            &config,
            "git init -q /r; cd /r; echo a > a; git add a; git commit -q -m one; git log",
        );
        assert!(out.stdout.contains("Agent <agent@example.com>"), "{out:?}");
    }

    #[test]
    fn git_remotes_must_be_within_the_network_access() {
        let mut config = SessionConfig {
            git: git(&["https://example.com/org/"]),
            ..SessionConfig::default()
        };
        assert!(build_bash(&config, None, None).is_err());
        config.allow_net = Some(vec!["https://example.com/other".into()]);
        assert!(build_bash(&config, None, None).is_err());
        config.allow_net = Some(vec!["https://example.com/org".into()]);
        assert!(build_bash(&config, None, None).is_ok());

        let mut config = SessionConfig {
            git: git(&["http://127.0.0.1:9/r"]),
            allow_net: Some(vec!["http://127.0.0.1:9".into()]),
            ..SessionConfig::default()
        };
        assert!(build_bash(&config, None, None).is_err());
        config.allow_all_net = true;
        config.allow_net = None;
        assert!(build_bash(&config, None, None).is_err());
        config.block_private_ips = false;
        assert!(build_bash(&config, None, None).is_ok());
    }

    #[test]
    fn sqlite_runs_and_its_opt_in_is_not_in_the_shell() {
        let config = SessionConfig {
            sqlite: true,
            ..SessionConfig::default()
        };
        let out = run(
            &config,
            "sqlite3 /d.db 'create table t(x); insert into t values (41)'; \
             sqlite /d.db 'select x + 1 from t'; echo \"[$BASHKIT_ALLOW_INPROCESS_SQLITE]\"",
        );
        assert_eq!(out.stdout, "42\n[]\n", "{out:?}");
    }

    #[test]
    fn typescript_runs() {
        let config = SessionConfig {
            typescript: true,
            ..SessionConfig::default()
        };
        let out = run(&config, "ts -c 'const x: number = 6; console.log(x * 7)'");
        assert_eq!(out.stdout, "42\n", "{out:?}");
    }

    #[test]
    fn sqlite_budget_follows_the_session_timeout() {
        let mut config = SessionConfig::default();
        assert_eq!(sqlite_limits(&config).max_duration, SQLITE_MAX_DURATION);
        config.limits.timeout_ms = Some(1_500);
        config.limits.max_stdout_bytes = Some(10);
        let limits = sqlite_limits(&config);
        assert_eq!(limits.max_duration, Duration::from_millis(1_500));
        assert_eq!(limits.max_output_bytes, 10);
    }
}

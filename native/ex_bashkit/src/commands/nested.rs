//! bashkit's own commands run one at a time in a nested interpreter, so
//! that we can wrap a command whose implementation is private to bashkit.
//!
//! The problem (bashkit 0.20.2): `tar`, `gzip`, `gunzip`, `bzip2`,
//! `bunzip2`, `zip`, `unzip`, `split` and `patch` pass a filesystem error
//! (a read-only mount, a missing directory, a quota) up with `?`, and the
//! interpreter turns an I/O error of a builtin into an error of the whole
//! exec, losing every earlier output. In bash it is that command's
//! failure: a message on stderr, a non-zero status, and the script goes on.
//! (The list was found by reading every builtin's source for a filesystem
//! write passed up with `?`; `tee` and `rm` are ours already,
//! `commands/strict.rs`; `cp`, `mv`, `touch`, `mkdir`, `ln`, `sed -i`,
//! `sort -o`, `dd of=`, `install` report their failures themselves.)
//!
//! Why a nested interpreter and not a reimplementation of each: bashkit
//! offers no way to call one of its builtins from ours (the table and the
//! commands are private), and reimplementing nine archivers and editors
//! with their options would be thousands of lines that drift from
//! bashkit's behaviour. Instead [`Contained`] is registered under each of
//! those names and runs the original in a throw-away `Bash` that shares
//! everything the command can see: the session's filesystem as the command
//! sees it (`ctx.fs`: mounts, root layer, soft delete, quotas), the cwd,
//! the environment and stdin; the arguments go in as positional parameters
//! (`NAME "$@"`), so nothing is re-parsed. Its normal results pass through
//! unchanged; an I/O error becomes `NAME: reason` on stderr with status 1.
//! Every other error (a limit, cancellation) stays the exec's, as it would
//! be for the original.
//!
//! What keeps it inside the session's rules:
//! * the command policy: a wrapper is registered only for a permitted name
//!   (`config.rs`), and the nested table holds that one command only;
//! * limits: the nested interpreter gets the session's execution limits,
//!   and its output is then charged to the outer exec like any command's;
//!   the filesystem quotas are the shared filesystem's own;
//! * timeouts and `cancel/2`: the nested run races the session's
//!   [`Interrupt`] (raised by the watchdog and by cancel) and is dropped
//!   when it fires (a throw-away interpreter has no state to reconcile);
//!   the outer exec's own timeout drops it with the outer future;
//! * the network: the nested interpreter has none (none of these commands
//!   uses it);
//! * the same `before_tool` guard against known crashers
//!   (`policy/bombs.rs`).
//!
//! Cost: building the nested interpreter is the price of one wrapped
//! command, about 40 µs a call (`bench/nested_commands.md`); these
//! commands are rare and do real work.
//!
//! [`DeadlineBound`] runs `jq` and `yq` the same way for another reason:
//! their evaluation is synchronous and polls bashkit's execution deadline,
//! which is the *session's* timeout; no per-call deadline, cancel or timer
//! reaches it (`jq -n 'def f: f; f'` with `timeout_ms: 1000` held the
//! session, or ran until its worker was killed, for 30 s). The nested
//! interpreter's timeout is what is left of the exec's per-call deadline,
//! so the filter stops there by bashkit's own check. Without a per-call
//! deadline the session's timeout applies, as for the original.

use std::sync::Arc;

use bashkit::{Bash, BuiltinContext, ExecResult, ExecutionLimits};

use crate::run::interrupt::Interrupt;

/// bashkit's commands whose filesystem errors would end the whole exec.
pub const CONTAINED: &[&str] = &[
    "tar", "gzip", "gunzip", "bzip2", "bunzip2", "zip", "unzip", "split", "patch",
];

/// What a nested interpreter needs from the session.
#[derive(Clone)]
pub struct Nested {
    limits: ExecutionLimits,
    username: String,
    hostname: String,
    interrupt: Option<Arc<Interrupt>>,
}

impl Nested {
    pub fn new(
        limits: ExecutionLimits,
        username: &str,
        hostname: &str,
        interrupt: Option<&Arc<Interrupt>>,
    ) -> Self {
        Self {
            limits,
            username: username.to_string(),
            hostname: hostname.to_string(),
            interrupt: interrupt.cloned(),
        }
    }

    /// A fresh interpreter over what `ctx` sees that has the one bashkit
    /// command `name`.
    pub fn build(&self, ctx: &BuiltinContext<'_>, name: &str) -> Bash {
        let only = name.to_string();
        let mut builder = Bash::builder()
            .fs(Arc::clone(&ctx.fs))
            // `ctx.fs` already has the root layer, the mounts and symlink
            // following of the session.
            .rootfs(false)
            .follow_symlinks(false)
            .cwd(ctx.cwd.clone())
            .username(&self.username)
            .hostname(&self.hostname)
            .limits(self.limits.clone())
            .builtin_filter(move |n| n == only);
        for (key, value) in ctx.env {
            builder = builder.env(key, value);
        }
        builder = builder.before_tool(Box::new(crate::policy::bombs::refuse));
        builder.build()
    }

    /// Run `name "$@"` in `bash` (from [`Nested::build`]) with `args` and
    /// `ctx`'s stdin, until the session is interrupted.
    pub async fn exec(
        &self,
        bash: &mut Bash,
        ctx: &BuiltinContext<'_>,
        name: &str,
        args: &[String],
    ) -> bashkit::Result<ExecResult> {
        let mut options = bashkit::ExecOptions::new().positional(args.iter().cloned());
        if let Some(stdin) = ctx.stdin {
            options = options.stdin(stdin.clone());
        }
        let script = format!("{name} \"$@\"");
        let run = bash.exec_with_options(&script, options);
        match &self.interrupt {
            None => run.await,
            Some(interrupt) => tokio::select! {
                result = run => result,
                () = interrupt.wait() => Err(bashkit::Error::Cancelled),
            },
        }
    }

    /// Run bashkit's own `name` with `args` over what `ctx` sees, in a
    /// fresh interpreter. The result is the nested exec's, errors included.
    pub async fn run(
        &self,
        ctx: &BuiltinContext<'_>,
        name: &str,
        args: &[String],
    ) -> bashkit::Result<ExecResult> {
        let mut bash = self.build(ctx, name);
        self.exec(&mut bash, ctx, name, args).await
    }
}

/// bashkit's commands bounded by the exec's per-call deadline.
pub const DEADLINE_BOUND: &[&str] = &["jq", "yq"];

/// One of [`DEADLINE_BOUND`], run in a nested interpreter whose timeout is
/// what is left of the exec's per-call deadline.
pub struct DeadlineBound {
    name: &'static str,
    nested: Arc<Nested>,
}

impl DeadlineBound {
    pub fn new(name: &'static str, nested: Arc<Nested>) -> Self {
        Self { name, nested }
    }
}

#[bashkit::async_trait]
impl bashkit::Builtin for DeadlineBound {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let interrupt = self.nested.interrupt.as_ref();
        let left = interrupt.and_then(|i| Some((i, i.remaining()?)));
        match left.filter(|(_, left)| *left < self.nested.limits.timeout) {
            Some((interrupt, left)) => {
                let mut bounded = (*self.nested).clone();
                bounded.limits = bounded.limits.timeout(left);
                let answer = bounded.run(&ctx, self.name, ctx.args).await;
                interrupt.or_timed_out(answer).await
            }
            None => self.nested.run(&ctx, self.name, ctx.args).await,
        }
    }
}

/// One of [`CONTAINED`], run by bashkit in a nested interpreter, its
/// filesystem errors made its own.
pub struct Contained {
    name: &'static str,
    /// Shared by all of a session's contained commands (one copy of the
    /// limits and names per session, not one per command).
    nested: Arc<Nested>,
}

impl Contained {
    pub fn new(name: &'static str, nested: Arc<Nested>) -> Self {
        Self { name, nested }
    }
}

#[bashkit::async_trait]
impl bashkit::Builtin for Contained {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        match self.nested.run(&ctx, self.name, ctx.args).await {
            Err(bashkit::Error::Io(error)) => {
                Ok(ExecResult::err(format!("{}: {error}\n", self.name), 1))
            }
            other => other,
        }
    }
}

//! The session resource: one `bashkit::Bash` behind an async mutex, plus the
//! handles that must stay reachable while a script holds that mutex.
//!
//! `exec` submits the script to the interpreter runtime and returns at once;
//! the outcome reaches the caller as a message (see `reply.rs`). The mutex
//! serializes execs on one session (FIFO); different sessions run in
//! parallel on the runtime's threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bashkit::{Bash, ExecOptions, ExecResult, FileSystem};
use parking_lot::RwLock;
use rustler::{Encoder, Env, NifMap, ResourceArc, Term};

use crate::errors;
use crate::options::{self, Bytes, SessionConfig};
use crate::reply::{self, ErrorMessage, Payload, ReplyTo};
use crate::{guard, runtime};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Sessions alive right now (observability for leak tests and benchmarks).
static LIVE: AtomicU64 = AtomicU64::new(0);

/// How many sessions are alive (created and not yet garbage-collected).
pub fn live_sessions() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// A live session, shared between the BEAM (as a resource) and the tasks
/// running its scripts.
pub struct SessionResource {
    pub id: u64,
    bash: tokio::sync::Mutex<Bash>,
    /// The interpreter's outer filesystem, reachable without the lock so
    /// that `stat/2` and friends answer while a script runs.
    fs: RwLock<Arc<dyn FileSystem>>,
    /// The interpreter's cancellation token (see `cancel`).
    cancel: RwLock<Arc<AtomicBool>>,
    running: AtomicBool,
}

// The resource is only touched through its locks and atomics, so a panic
// caught mid-operation cannot leave it observably half-updated.
impl std::panic::RefUnwindSafe for SessionResource {}
impl std::panic::UnwindSafe for SessionResource {}

#[rustler::resource_impl]
impl rustler::Resource for SessionResource {}

impl Drop for SessionResource {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SessionResource {
    /// Build a session from a validated configuration.
    pub fn new(config: &SessionConfig) -> Result<Self, String> {
        let bash = options::build_bash(config)?;
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            fs: RwLock::new(bash.fs()),
            cancel: RwLock::new(bash.cancellation_token()),
            bash: tokio::sync::Mutex::new(bash),
            running: AtomicBool::new(false),
        })
    }

    /// The session's filesystem, as scripts see it.
    pub fn fs(&self) -> Arc<dyn FileSystem> {
        Arc::clone(&self.fs.read())
    }

    /// Whether a script is running on this session right now.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// The working directory, or `None` while a script holds the session.
    pub fn try_cwd(&self) -> Option<String> {
        let bash = self.bash.try_lock().ok()?;
        Some(bash.shell_state_view().cwd.to_string_lossy().into_owned())
    }
}

/// Per-call options of `exec/3`, validated by Elixir.
#[derive(Debug, Default, NifMap)]
pub struct ExecCallOptions {
    pub stdin: Option<Bytes>,
}

fn bashkit_options(call: ExecCallOptions) -> ExecOptions {
    let mut out = ExecOptions::new();
    if let Some(Bytes(stdin)) = call.stdin {
        out = out.stdin(stdin);
    }
    out
}

/// Clears the running flag however the exec ends (including a panic).
struct RunningGuard<'a>(&'a AtomicBool);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Run `script` on `session` and answer `reply` when it ends.
pub fn exec(
    session: ResourceArc<SessionResource>,
    script: String,
    call: ExecCallOptions,
    reply: ReplyTo,
) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let mut bash = session.bash.lock().await;
            session.cancel.read().store(false, Ordering::SeqCst);
            session.running.store(true, Ordering::Release);
            let _running = RunningGuard(&session.running);
            bash.exec_with_options(&script, bashkit_options(call)).await
        })
        .await;
        reply.finish(&ExecOutcome::from(outcome));
    });
}

/// Run `script` in a fresh default interpreter (`ExBashkit.exec/1`).
pub fn exec_once(script: String, reply: ReplyTo) {
    runtime::spawn(async move {
        // The interpreter is dropped only after the answer is sent: tearing
        // it down takes ~10 µs that the caller need not wait for.
        let mut used = None;
        let outcome = guard::catch_future(async {
            let bash = match options::build_bash(&SessionConfig::default()) {
                Ok(bash) => used.insert(bash),
                Err(message) => return Err(bashkit::Error::Execution(message)),
            };
            bash.exec(&script).await
        })
        .await;
        reply.finish(&ExecOutcome::from(outcome));
        drop(used);
    });
}

/// What an exec ended with, ready to encode.
pub enum ExecOutcome {
    Ok(ExecResult),
    Error(String),
}

impl From<Result<bashkit::Result<ExecResult>, String>> for ExecOutcome {
    fn from(outcome: Result<bashkit::Result<ExecResult>, String>) -> Self {
        match outcome {
            Ok(Ok(result)) => ExecOutcome::Ok(result),
            Ok(Err(error)) => ExecOutcome::Error(errors::describe(&error)),
            Err(panic) => ExecOutcome::Error(format!("internal error in the interpreter: {panic}")),
        }
    }
}

impl Payload for ExecOutcome {
    /// `{:ok, {stdout, stderr, exit_code, stdout_truncated, stderr_truncated}}`
    /// or `{:error, message}`.
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            ExecOutcome::Ok(result) => {
                let fields = (
                    reply::binary(env, result.stdout.as_bytes()),
                    reply::binary(env, result.stderr.as_bytes()),
                    result.exit_code,
                    result.stdout_truncated,
                    result.stderr_truncated,
                );
                (reply::ok(), fields).encode(env)
            }
            ExecOutcome::Error(message) => ErrorMessage(message.clone()).encode(env),
        }
    }
}

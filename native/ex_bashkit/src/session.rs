//! The session resource: one `bashkit::Bash` behind an async mutex, plus the
//! handles that must stay reachable while a script holds that mutex.
//!
//! Every operation that needs the interpreter (`exec`, `state`, `reset`, ...)
//! is a task on the interpreter runtime that answers the caller by message
//! (see `reply.rs`): no BEAM thread ever waits for the lock. The mutex
//! serializes them per session in arrival order; different sessions run in
//! parallel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bashkit::{Bash, ExecOptions, ExecResult, FileSystem};
use parking_lot::{Mutex, RwLock};
use rustler::{Encoder, Env, LocalPid, Monitor, NifMap, ResourceArc, Term};

use crate::callbacks::CallbackChannel;
use crate::changes::{self, Changes};
use crate::interrupt::Interrupt;
use crate::options::{self, Bytes, SessionConfig};
use crate::reply::{self, ErrorMessage, Payload, ReplyTo, SharedCaller};
use crate::watchdog::{self, ExecTicket};
use crate::{errors, guard, runtime};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_EXEC: AtomicU64 = AtomicU64::new(1);
/// Sessions alive right now (observability for leak tests and benchmarks).
static LIVE: AtomicU64 = AtomicU64::new(0);

/// How many sessions are alive (created and not yet garbage-collected).
pub fn live_sessions() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

rustler::atoms! {
    ex_bashkit_output,
}

/// A live session, shared between the BEAM (as a resource) and the tasks
/// running its scripts.
pub struct SessionResource {
    pub id: u64,
    bash: tokio::sync::Mutex<Bash>,
    /// The interpreter's outer filesystem, reachable without the lock so
    /// that `stat/2` and friends answer while a script runs. Replaced by
    /// `reset`.
    fs: RwLock<Arc<dyn FileSystem>>,
    /// The running exec's cancellation state, for `cancel/1`.
    current: Mutex<Option<Arc<ExecTicket>>>,
    /// Every submitted exec not yet ended, by id, with the monitor on its
    /// caller: `cancel_exec`, and cancelling the execs of a caller that died.
    tickets: Mutex<HashMap<u64, Pending>>,
    /// Route of builtin / virtual_fs back-calls, when the session has any.
    channel: Option<Arc<CallbackChannel>>,
    /// Wakes the running exec's waits (sleep, back-calls) on cancel/timeout.
    interrupt: Arc<Interrupt>,
    /// What `new/1` asked for, to rebuild on `reset`.
    config: Arc<SessionConfig>,
    /// The host mounts in place now: `new/1`'s, plus and minus the runtime
    /// ones (see `runtime_mounts.rs`). Changed only under the interpreter
    /// lock.
    pub host_mounts: Mutex<Vec<options::MountSpec>>,
}

// The resource is only touched through its locks and atomics, so a panic
// caught mid-operation cannot leave it observably half-updated.
impl std::panic::RefUnwindSafe for SessionResource {}
impl std::panic::UnwindSafe for SessionResource {}

/// A submitted exec, as the session tracks it until it ends.
struct Pending {
    ticket: Weak<ExecTicket>,
    caller_monitor: Option<Monitor>,
}

#[rustler::resource_impl]
impl rustler::Resource for SessionResource {
    /// The caller of an exec died: nobody will read the answer, so stop the
    /// exec (running) or make it end at once when its turn comes (queued).
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, monitor: Monitor) {
        let tickets = self.tickets.lock();
        for pending in tickets.values() {
            if pending.caller_monitor.as_ref() == Some(&monitor) {
                if let Some(ticket) = pending.ticket.upgrade() {
                    ticket.cancel();
                }
            }
        }
    }
}

impl Drop for SessionResource {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SessionResource {
    /// Build a session from a validated configuration. Runs on a dirty IO
    /// scheduler (it may touch host directories).
    pub fn new(config: SessionConfig) -> Result<Self, String> {
        let interrupt = Interrupt::new();
        let channel = options::callback_channel(&config, &interrupt);
        let bash = options::build_bash(&config, channel.as_ref(), Some(&interrupt))?;
        if options::needs_prepare(&config) {
            runtime::block_on(options::prepare(&bash, &config, channel.as_ref()))?;
        }
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            fs: RwLock::new(bash.fs()),
            bash: tokio::sync::Mutex::new(bash),
            current: Mutex::new(None),
            tickets: Mutex::new(HashMap::new()),
            channel,
            interrupt,
            host_mounts: Mutex::new(config.mounts.clone()),
            config: Arc::new(config),
        })
    }

    /// What `new/1` asked for.
    pub fn config(&self) -> &SessionConfig {
        &self.config
    }

    /// The interpreter between scripts, for jobs that read the filesystem
    /// (search): back-calls of `:virtual_fs` backends go to `caller` while
    /// the returned guard lives.
    pub async fn hold(&self, caller: &SharedCaller) -> Held<'_> {
        let bash = self.bash.lock().await;
        // A cancel or timeout of an earlier exec leaves the interrupt
        // raised until the next exec re-arms it; re-arm it for this job.
        self.interrupt.clear();
        let attached = self.channel.as_ref().map(|c| c.attach(Arc::clone(caller)));
        Held {
            _attached: attached,
            bash,
        }
    }

    /// The session's filesystem, as scripts see it.
    pub fn fs(&self) -> Arc<dyn FileSystem> {
        Arc::clone(&self.fs.read())
    }

    /// Whether a script is running on this session right now.
    pub fn is_running(&self) -> bool {
        self.current.lock().is_some()
    }

    /// The interpreter, once no script holds it (snapshot/restore, which run
    /// between commands in the same FIFO order as `exec`).
    pub async fn lock_bash(&self) -> tokio::sync::MutexGuard<'_, Bash> {
        self.bash.lock().await
    }

    /// The working directory, or `None` while a script holds the session.
    pub fn try_cwd(&self) -> Option<String> {
        let bash = self.bash.try_lock().ok()?;
        Some(bash.shell_state_view().cwd.to_string_lossy().into_owned())
    }

    /// Stop the running exec, if any, at its next check. Returns whether one
    /// was running.
    pub fn cancel(&self) -> bool {
        match &*self.current.lock() {
            Some(ticket) => {
                ticket.cancel();
                true
            }
            None => false,
        }
    }

    /// Stop exec `id`, running or still queued. Returns whether it existed.
    pub fn cancel_exec(&self, id: u64) -> bool {
        match self
            .tickets
            .lock()
            .get(&id)
            .and_then(|p| p.ticket.upgrade())
        {
            Some(ticket) => {
                ticket.cancel();
                true
            }
            None => false,
        }
    }
}

/// The interpreter held by a job, with back-calls routed to its caller.
pub struct Held<'a> {
    // Dropped first: back-calls stop being routed before the lock goes.
    _attached: Option<crate::callbacks::AttachGuard>,
    bash: tokio::sync::MutexGuard<'a, Bash>,
}

impl Held<'_> {
    /// The filesystem scripts see.
    pub fn fs(&self) -> Arc<dyn FileSystem> {
        self.bash.fs()
    }
}

/// Register a new exec of `session` by the process `caller`, monitored so
/// that its death cancels the exec.
fn submit(session: &ResourceArc<SessionResource>, env: Env, caller: LocalPid) -> Arc<ExecTicket> {
    let ticket = ExecTicket::new(NEXT_EXEC.fetch_add(1, Ordering::Relaxed));
    let caller_monitor = session.monitor(Some(env), &caller);
    let pending = Pending {
        ticket: Arc::downgrade(&ticket),
        caller_monitor,
    };
    session.tickets.lock().insert(ticket.id, pending);
    ticket
}

/// Forget exec `id` and its caller monitor (from an interpreter thread).
fn forget(session: &ResourceArc<SessionResource>, id: u64) {
    let pending = session.tickets.lock().remove(&id);
    if let Some(monitor) = pending.and_then(|p| p.caller_monitor) {
        session.demonitor(None, &monitor);
    }
}

/// Per-call options of `exec/3`, validated by Elixir.
#[derive(Debug, Default, NifMap)]
pub struct ExecCallOptions {
    pub stdin: Option<Bytes>,
    /// Send output chunks to the caller while the script runs.
    pub stream: bool,
    /// A wall-clock limit for this call, on top of the session's.
    pub timeout_ms: Option<u64>,
    pub track_changes: bool,
}

/// Marks the session busy with `ticket` while it runs.
struct Running<'a> {
    session: &'a SessionResource,
}

impl<'a> Running<'a> {
    fn start(session: &'a SessionResource, ticket: &Arc<ExecTicket>, bash: &Bash) -> Self {
        // bashkit leaves resetting the token to us: reset it before this
        // exec becomes cancellable.
        let token = bash.cancellation_token();
        token.store(false, Ordering::SeqCst);
        session.interrupt.clear();
        ticket.start(token, Arc::clone(&session.interrupt));
        *session.current.lock() = Some(Arc::clone(ticket));
        Running { session }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        *self.session.current.lock() = None;
    }
}

/// Streamed output: `{:ex_bashkit_output, ref, {stdout_chunk, stderr_chunk}}`.
struct OutputChunk<'a>(&'a [u8], &'a [u8]);

impl Payload for OutputChunk<'_> {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        (reply::binary(env, self.0), reply::binary(env, self.1)).encode(env)
    }
}

fn bashkit_options(call: &mut ExecCallOptions, caller: &SharedCaller) -> ExecOptions {
    let mut out = ExecOptions::new();
    if let Some(Bytes(stdin)) = call.stdin.take() {
        out = out.stdin(stdin);
    }
    if call.stream {
        let caller = Arc::clone(caller);
        out = out.streaming(Box::new(move |stdout, stderr| {
            if !stdout.is_empty() || !stderr.is_empty() {
                let chunk = OutputChunk(stdout.as_bytes(), stderr.as_bytes());
                caller.lock().send(ex_bashkit_output(), &chunk);
            }
        }));
    }
    out
}

/// Run `script` on `session` and answer `reply` when it ends. Returns the
/// exec's id (for `cancel_exec`).
pub fn exec(
    env: Env,
    session: ResourceArc<SessionResource>,
    script: String,
    mut call: ExecCallOptions,
    caller_pid: LocalPid,
    reply: ReplyTo,
) -> u64 {
    let caller = reply.caller();
    let ticket = submit(&session, env, caller_pid);
    let id = ticket.id;
    // A per-call timeout counts from the call, queueing behind other execs
    // of this session included.
    if let Some(ms) = call.timeout_ms {
        watchdog::schedule(Instant::now() + Duration::from_millis(ms), &ticket);
    }
    runtime::spawn_script(async move {
        let outcome = guard::catch_future(async {
            let mut bash = session.bash.lock().await;
            let _running = Running::start(&session, &ticket, &bash);
            let _attached = session
                .channel
                .as_ref()
                .map(|c| c.attach(Arc::clone(&caller)));

            let skip = &session.config.virtual_fs;
            let before = match call.track_changes {
                true => Some(changes::scan(&bash.fs(), skip).await),
                false => None,
            };
            let options = bashkit_options(&mut call, &caller);
            let metering = Metering::start(&bash);
            let result = bash.exec_with_options(&script, options).await;
            let metrics = metering.stop(&bash);
            let changes = match before {
                Some(before) => Some(changes::diff(
                    &before,
                    &changes::scan(&bash.fs(), skip).await,
                )),
                None => None,
            };
            ExecOutcome::new(result, changes, metrics, &ticket, call.timeout_ms)
        })
        .await;
        forget(&session, id);
        reply.finish(&outcome.unwrap_or_else(ExecOutcome::panicked));
    });
    id
}

/// Run `script` in a fresh default interpreter (`ExBashkit.exec/1`).
pub fn exec_once(script: String, reply: ReplyTo) {
    runtime::spawn_script(async move {
        // The interpreter is dropped only after the answer is sent: tearing
        // it down takes ~10 µs that the caller need not wait for.
        let mut used = None;
        let outcome = guard::catch_future(async {
            match options::build_bash(&SessionConfig::default(), None, None) {
                Ok(bash) => {
                    let bash = used.insert(bash);
                    let metering = Metering::start(bash);
                    let result = bash.exec(&script).await;
                    ExecOutcome::plain(result, metering.stop(bash))
                }
                Err(message) => ExecOutcome::Error(message),
            }
        })
        .await;
        reply.finish(&outcome.unwrap_or_else(ExecOutcome::panicked));
        drop(used);
    });
}

/// What one exec cost: commands run (bashkit's cumulative counter, before
/// and after) and wall-clock time in the interpreter, queueing excluded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics {
    pub commands: u64,
    pub wall_time_us: u64,
}

struct Metering {
    started: Instant,
    commands: u64,
}

impl Metering {
    fn start(bash: &Bash) -> Self {
        Self {
            started: Instant::now(),
            commands: bash.session_counters().0,
        }
    }

    fn stop(self, bash: &Bash) -> Metrics {
        Metrics {
            commands: bash.session_counters().0.saturating_sub(self.commands),
            wall_time_us: u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }
}

/// What an exec ended with, ready to encode.
pub enum ExecOutcome {
    Ok(Box<ExecResult>, Option<Changes>, Metrics),
    Error(String),
}

impl ExecOutcome {
    fn plain(result: bashkit::Result<ExecResult>, metrics: Metrics) -> Self {
        match result {
            Ok(result) => ExecOutcome::Ok(Box::new(result), None, metrics),
            Err(error) => ExecOutcome::Error(errors::describe(&error)),
        }
    }

    fn new(
        result: bashkit::Result<ExecResult>,
        changes: Option<Changes>,
        metrics: Metrics,
        ticket: &ExecTicket,
        timeout_ms: Option<u64>,
    ) -> Self {
        match result {
            Ok(result) => ExecOutcome::Ok(Box::new(result), changes, metrics),
            // Our watchdog and `cancel/1` stop a script through the same
            // token; say which one did.
            Err(_) if ticket.timed_out() => ExecOutcome::Error(format!(
                "execution timed out after {} ms (exec option :timeout_ms)",
                timeout_ms.unwrap_or_default()
            )),
            Err(_) if ticket.was_cancelled() => {
                ExecOutcome::Error("execution cancelled by cancel/1".to_string())
            }
            Err(error) => ExecOutcome::Error(errors::describe(&error)),
        }
    }

    fn panicked(panic: String) -> Self {
        ExecOutcome::Error(format!("internal error in the interpreter: {panic}"))
    }
}

impl Payload for ExecOutcome {
    /// `{:ok, {stdout, stderr, exit_code, stdout_truncated, stderr_truncated,
    /// changes, {commands, wall_time_us}}}` with `changes` `nil` or
    /// `{created, modified, deleted, complete?}`; or `{:error, message}`.
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            ExecOutcome::Ok(result, changes, metrics) => {
                let changes = match changes {
                    Some(c) => (&c.created, &c.modified, &c.deleted, c.complete).encode(env),
                    None => rustler::types::atom::nil().encode(env),
                };
                let fields = (
                    reply::binary(env, result.stdout.as_bytes()),
                    reply::binary(env, result.stderr.as_bytes()),
                    result.exit_code,
                    result.stdout_truncated,
                    result.stderr_truncated,
                    changes,
                    (metrics.commands, metrics.wall_time_us),
                );
                (reply::ok(), fields).encode(env)
            }
            ExecOutcome::Error(message) => ErrorMessage(message.clone()).encode(env),
        }
    }
}

/// `state/1`: a plain view of the shell, taken between scripts.
pub fn state(session: ResourceArc<SessionResource>, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let bash = session.bash.lock().await;
            ShellStateView::from(bash.shell_state())
        })
        .await;
        match outcome {
            Ok(view) => reply.finish(&view),
            Err(panic) => reply.finish(&ErrorMessage(format!("internal error: {panic}"))),
        }
    });
}

/// The parts of the shell state `state/1` shows.
pub struct ShellStateView {
    env: HashMap<String, String>,
    variables: HashMap<String, String>,
    cwd: String,
    functions: Vec<String>,
    aliases: HashMap<String, String>,
    last_exit_code: i32,
}

impl From<bashkit::ShellState> for ShellStateView {
    fn from(state: bashkit::ShellState) -> Self {
        let mut functions: Vec<String> = state.functions.into_keys().collect();
        functions.sort_unstable();
        Self {
            env: state.env,
            // `shopt` settings live in the variable table as SHOPT_*: they
            // are options, not variables anyone set.
            variables: state
                .variables
                .into_iter()
                .filter(|(k, _)| !k.starts_with("SHOPT_"))
                .collect(),
            cwd: state.cwd.to_string_lossy().into_owned(),
            functions,
            aliases: state.aliases,
            last_exit_code: state.last_exit_code,
        }
    }
}

mod keys {
    rustler::atoms! { env, variables, cwd, functions, aliases, last_exit_code }
}

impl Payload for ShellStateView {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        let pairs = [
            (keys::env().encode(env), self.env.encode(env)),
            (keys::variables().encode(env), self.variables.encode(env)),
            (keys::cwd().encode(env), self.cwd.encode(env)),
            (keys::functions().encode(env), self.functions.encode(env)),
            (keys::aliases().encode(env), self.aliases.encode(env)),
            (
                keys::last_exit_code().encode(env),
                self.last_exit_code.encode(env),
            ),
        ];
        let map = Term::map_from_pairs(env, &pairs).expect("distinct keys");
        (reply::ok(), map).encode(env)
    }
}

/// `reset/1`: rebuild the interpreter from the session's configuration,
/// keeping its capabilities (builtins, backends, mounts, limits, network)
/// because they are part of that configuration.
pub fn reset(session: ResourceArc<SessionResource>, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let mut bash = session.bash.lock().await;
            let config = &session.config;
            let fresh =
                options::build_bash(config, session.channel.as_ref(), Some(&session.interrupt))?;
            options::prepare(&fresh, config, session.channel.as_ref()).await?;
            *session.fs.write() = fresh.fs();
            *bash = fresh;
            *session.host_mounts.lock() = config.mounts.clone();
            Ok::<(), String>(())
        })
        .await;
        match outcome {
            Ok(Ok(())) => reply.finish(&Done),
            Ok(Err(message)) => reply.finish(&ErrorMessage(message)),
            Err(panic) => reply.finish(&ErrorMessage(format!("internal error: {panic}"))),
        }
    });
}

/// `:ok`.
pub struct Done;

impl Payload for Done {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        reply::ok().encode(env)
    }
}

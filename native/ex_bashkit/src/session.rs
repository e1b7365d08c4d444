//! A session: one `bashkit::Bash` behind an async mutex, plus the handles
//! that must stay reachable while a script holds that mutex. This is the
//! core both transports share: the NIF resource (bottom of this file) and
//! the worker process (`worker.rs`) each hold `Arc<Session>`s.
//!
//! Every operation that needs the interpreter (`exec`, `state`, `reset`, ...)
//! is a task on the interpreter runtime that answers its `ReplyTo` (see
//! `reply.rs`): no BEAM thread ever waits for the lock. The mutex serializes
//! them per session in the order they were submitted (`line.rs`); different
//! sessions run in parallel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bashkit::{Bash, ExecOptions, ExecResult, FileSystem};
use parking_lot::{Mutex, RwLock};
use rustler::{Binary, Encoder, Env, LocalPid, Monitor, ResourceArc, Term};

use crate::callbacks::CallbackChannel;
use crate::changes;
use crate::config_cache::{self, DecodedConfig};
use crate::error::NifResult;
use crate::interrupt::Interrupt;
use crate::lifecycle::{Op, OpCallOptions};
use crate::line::{Place, Turn};
use crate::options::{self, SessionConfig};
use crate::outcome::{self, ExecOutcome, GiveUp, Metrics, Partial, SharedPartial};
use crate::reply::{self, Caller, Payload, ReplyTo, SharedCaller};
use crate::runner;
use crate::script_shape::{self, OwnCommands, ScriptShape};
use crate::teardown::{self, DropLater};
use crate::value::{Bytes, Value};
use crate::watchdog::{self, ExecTicket};
use crate::word_hash::IdMap;
use crate::{dirty, from_map, guard, runtime, warm};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_EXEC: AtomicU64 = AtomicU64::new(1);
/// Sessions alive right now (observability for leak tests and benchmarks).
static LIVE: AtomicU64 = AtomicU64::new(0);

/// How many sessions are alive (created and not yet dropped).
pub fn live_sessions() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// A fresh exec id, for transports that do not bring their own.
pub fn next_exec_id() -> u64 {
    NEXT_EXEC.fetch_add(1, Ordering::Relaxed)
}

/// A live session, shared by its owner (a NIF resource or a worker's table)
/// and the tasks running its scripts.
pub struct Session {
    pub id: u64,
    bash: Arc<tokio::sync::Mutex<Bash>>,
    /// The interpreter's outer filesystem, reachable without the lock so
    /// that `stat/2` and friends answer while a script runs. Replaced by
    /// `reset`.
    fs: RwLock<Arc<dyn FileSystem>>,
    /// The session's own layer below the system layer and mounts (see
    /// `options::Layer`). Replaced by `reset`.
    layer: RwLock<options::Layer>,
    /// The running exec's cancellation state, for `cancel/1`.
    current: Mutex<Option<Arc<ExecTicket>>>,
    /// Every submitted exec not yet ended, by id: `cancel_exec`.
    tickets: Mutex<IdMap<Weak<ExecTicket>>>,
    /// Route of builtin / virtual_fs back-calls, when the session has any.
    channel: Option<Arc<CallbackChannel>>,
    /// Wakes the running exec's waits (sleep, back-calls) on cancel/timeout.
    /// Replaced by `reset` with an interpreter built in advance (each one
    /// is built with its own).
    interrupt: Mutex<Arc<Interrupt>>,
    /// What `new/1` asked for, to rebuild on `reset`.
    config: Arc<SessionConfig>,
    /// The configuration with its term, when it is built from memory alone
    /// (`warm.rs`): `reset` then takes an interpreter built in advance.
    /// Shared with `config_cache.rs`, which hands out one decoding per
    /// term it remembers: the term is a few KiB.
    warm: Option<Arc<DecodedConfig>>,
    /// The host mounts in place now: `new/1`'s, plus and minus the runtime
    /// ones (see `runtime_mounts.rs`). Changed only under the interpreter
    /// lock.
    pub host_mounts: Mutex<Vec<options::MountSpec>>,
    /// No script of this session defined code (a function, alias or trap)
    /// or ran something that could, and it was not restored from a
    /// snapshot: its short scripts may run buffered (`script_shape.rs`).
    /// Cleared under the interpreter lock; `reset` sets it again.
    plain: AtomicBool,
    /// What one command of this session's last exec cost, in nanoseconds,
    /// when that exec was a quick script (`script_shape.rs`); 0 when
    /// unknown. Any other exec or a restore makes it unknown: they may have
    /// grown the state the cost depends on; a reset sets it to
    /// `fresh_cost_ns`. Read by [`Session::quick_fits`].
    quick_cost_ns: AtomicU64,
    /// What one command of its first exec after it was built (or reset)
    /// cost, when that exec was measured (quick, or with bounded steps); 0
    /// when unknown. A reset rebuilds the same interpreter, so
    /// [`Session::quick_cost_ns`] starts from it again instead of unknown,
    /// and the first exec after a reset may be quick.
    fresh_cost_ns: AtomicU64,
    /// Nothing ran on the interpreter since it was built or reset, and no
    /// snapshot was restored on it: its next exec measures `fresh_cost_ns`.
    as_built: AtomicBool,
    /// How long its last exec with bounded steps took, in µs (0: none
    /// yet): see [`LOOP_INLINE_WALL_US`].
    last_loop_wall_us: AtomicU64,
    /// A script that may give variables attributes ran on it
    /// (`script_shape::SETS_ATTRIBUTES`): its loops stay off the caller's
    /// scheduler. Cleared by `reset`.
    attributes_set: AtomicBool,
    /// Its custom builtins, which its scripts' shapes count as builtins.
    own_commands: OwnCommands,
}

/// The thread that would poll a script inline, which bounds what may run
/// there ([`Session::quick_fits`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InlinePoller {
    /// The caller's normal scheduler, in the node: quick scripts, and loops
    /// with bounded steps for a time slice at most.
    NormalScheduler,
    /// A worker's frame reader, which reads the frames of every session of
    /// its worker: quick scripts only.
    FrameReader,
}

/// Scripts longer than this are never run on a normal scheduler (nor
/// parsed there).
const QUICK_SCRIPT_BYTES: usize = 512;

/// What a quick script may be expected to cost to run on a normal
/// scheduler: a fifth of the 1 ms a NIF may take, leaving room for an
/// estimate that is off (the OS can always preempt a thread).
const QUICK_BUDGET_NS: u64 = 200_000;

/// Whether a script of `shape` is quick and its commands, at `cost_ns`
/// each (0: unknown), fit [`QUICK_BUDGET_NS`].
fn fits_budget(shape: ScriptShape, cost_ns: u64) -> bool {
    let commands = u64::from(shape.commands.max(1));
    cost_ns != 0 && shape.quick && cost_ns.saturating_mul(commands) <= QUICK_BUDGET_NS
}

/// How many commands bashkit's live execution runs between two yields,
/// where the runner checks its time slice (`runner::SLICE`).
const COMMANDS_BETWEEN_YIELDS: u64 = 64;

/// Whether a script of `shape` has bounded steps and the commands it runs
/// before its first yield, at `cost_ns` each (0: unknown), fit
/// [`STEPS_BUDGET_NS`]. Polled on a normal scheduler, it leaves at a later
/// yield when the next stretch, at what the last one took, would hold the
/// scheduler past 700 µs (`runner.rs`): so only its first stretch is
/// estimated here.
fn steps_fit_budget(shape: ScriptShape, cost_ns: u64) -> bool {
    cost_ns != 0
        && shape.bounded_steps
        && cost_ns.saturating_mul(COMMANDS_BETWEEN_YIELDS) <= STEPS_BUDGET_NS
}

/// A loop with bounded steps starts on the caller's scheduler only when the
/// session's last one took no longer than this, so that it likely ends
/// there again: it may hold it 700 µs, and the rest is room for the host's
/// slow stretches (a 50-iteration loop: 400 µs in a fast one, 600 µs in a
/// slow one). One that outlives its time there goes on on the runners.
/// After a long loop, the next starts on a dirty scheduler, which measures
/// it again: such loops took as long from either start, within the host's
/// noise (bench/analysis.md, 2026-11-28 19:08), so the caller's scheduler
/// is kept for loops that end there.
const LOOP_INLINE_WALL_US: u64 = 800;

/// What the first 64 commands of a script with bounded steps may be
/// expected to cost on a normal scheduler. The cost per command it is read
/// against is an exec's wall time over its commands, fixed costs included:
/// 3–6 µs for a short loop on a session with few exported variables
/// (bench/analysis.md), against up to 340 µs with 80 000 of them.
const STEPS_BUDGET_NS: u64 = 500_000;

/// What one command of the last quick `ExBashkit.exec/1` script cost, in
/// nanoseconds, on a fresh interpreter (its first exec); 0 while unknown.
/// One figure for the node, unlike a session's: every such script runs on
/// an interpreter of its own, so none grows what the next one pays.
static ONCE_QUICK_COST_NS: AtomicU64 = AtomicU64::new(0);

impl Drop for Session {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    /// Build a session from a validated configuration. May touch host
    /// directories: never call it on a normal scheduler unless Elixir's
    /// `ExBashkit.Session.Options.inline?/1` said the configuration is
    /// purely in memory (`session_new_inline`).
    ///
    /// `decoded.key` is the configuration as Elixir sent it: a
    /// configuration built from memory alone may get an interpreter built
    /// in advance (`warm.rs`).
    pub fn new(decoded: &Arc<DecodedConfig>) -> Result<Arc<Self>, String> {
        let config = Arc::clone(&decoded.config);
        let eligible = warm::eligible(&config);
        let (bash, layer, interrupt, channel) = if eligible {
            let built = warm::take_or_build(&decoded.key, &config)?;
            (built.bash, built.layer, built.interrupt, None)
        } else {
            let interrupt = Interrupt::new();
            let channel = options::callback_channel(&config, &interrupt);
            let layer = options::Layer::new(&config);
            let bash = options::build_bash_on(&config, channel.as_ref(), Some(&interrupt), &layer)?;
            if options::needs_prepare(&config) {
                runtime::block_on(options::prepare(&bash, &config, channel.as_ref()))?;
            }
            (bash, layer, interrupt, channel)
        };
        LIVE.fetch_add(1, Ordering::Relaxed);
        let warm = eligible.then(|| Arc::clone(decoded));
        Ok(Arc::new(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            fs: RwLock::new(bash.fs()),
            layer: RwLock::new(layer),
            bash: Arc::new(tokio::sync::Mutex::new(bash)),
            current: Mutex::new(None),
            tickets: Mutex::new(IdMap::default()),
            channel,
            interrupt: Mutex::new(interrupt),
            warm,
            host_mounts: Mutex::new(config.mounts.clone()),
            plain: AtomicBool::new(plain_when_built(&config)),
            quick_cost_ns: AtomicU64::new(0),
            fresh_cost_ns: AtomicU64::new(0),
            as_built: AtomicBool::new(true),
            last_loop_wall_us: AtomicU64::new(0),
            attributes_set: AtomicBool::new(false),
            own_commands: OwnCommands::new(&config.builtins),
            config,
        }))
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
        self.interrupt().clear();
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

    /// The session's own filesystem layer (no system layer, no mounts).
    pub fn layer(&self) -> options::Layer {
        self.layer.read().clone()
    }

    /// How `script` runs on this session now: buffered when it is short and
    /// the session plain. A script that may leave code behind makes the
    /// session not plain first, whether it completes or not. A session that
    /// is not plain runs everything live: its scripts are not even parsed.
    /// Also gives the script's shape, read on a plain session only: what
    /// its exec costs is then noted ([`Session::note_cost`]).
    fn run_mode_for(&self, script: &str) -> (RunMode<'static>, Option<ScriptShape>) {
        if !self.plain.load(Ordering::Relaxed) {
            return (RunMode::Live, None);
        }
        let shape = script_shape::of(script, &self.own_commands);
        if !shape.keeps_session_plain {
            self.forget_plain();
        }
        if shape.sets_attributes {
            self.attributes_set.store(true, Ordering::Relaxed);
        }
        (RunMode::for_plain(shape), Some(shape))
    }

    /// The session may hold code from now on: a script that could define
    /// some ran, or a snapshot's shell state was restored.
    pub fn forget_plain(&self) {
        self.plain.store(false, Ordering::Relaxed);
        self.quick_cost_ns.store(0, Ordering::Relaxed);
        self.as_built.store(false, Ordering::Relaxed);
    }

    /// The interrupt of the interpreter in place now.
    fn interrupt(&self) -> Arc<Interrupt> {
        Arc::clone(&self.interrupt.lock())
    }

    /// Whether `script` may run on a normal scheduler: it is quick (its
    /// work is bounded by its text, `script_shape.rs`), the session is plain
    /// and mounts no host directory (a host filesystem can block), and its
    /// commands at what this session's last quick exec paid per command fit
    /// [`QUICK_BUDGET_NS`]. bashkit's per-command cost grows with the
    /// session's exported variables (up to ~4 µs per thousand), which only
    /// a script that is not quick can add many of: after one, the cost is
    /// unknown and the next quick script runs on a dirty scheduler, which
    /// measures it again.
    ///
    /// On a normal scheduler in the node (`poller`), a script with bounded
    /// steps fits too when 64 of its commands at that cost fit
    /// [`STEPS_BUDGET_NS`], the session's last such loop was short
    /// ([`LOOP_INLINE_WALL_US`]) and no script gave its variables
    /// attributes: it runs there for a time slice at most (`runner.rs`).
    pub fn quick_fits(&self, script: &str, poller: InlinePoller) -> bool {
        if script.len() > QUICK_SCRIPT_BYTES || !self.plain.load(Ordering::Relaxed) {
            return false;
        }
        let cost = self.quick_cost_ns.load(Ordering::Relaxed);
        if cost == 0 || !self.host_mounts.lock().is_empty() {
            return false;
        }
        let shape = script_shape::of(script, &self.own_commands);
        let loops = poller == InlinePoller::NormalScheduler
            && !self.attributes_set.load(Ordering::Relaxed)
            && self.last_loop_wall_us.load(Ordering::Relaxed) <= LOOP_INLINE_WALL_US;
        fits_budget(shape, cost) || loops && steps_fit_budget(shape, cost)
    }

    /// Whether exec `call` of `script` may run on `poller`, a thread that
    /// must not be held for long: [`Session::quick_fits`], and neither
    /// stdin (its size is not the script's), streaming (chunks go out from
    /// a runner) nor `track_changes` (two scans of the whole filesystem).
    pub fn quick_call_fits(
        &self,
        script: &str,
        call: &ExecCallOptions,
        poller: InlinePoller,
    ) -> bool {
        call.stdin.is_none()
            && !call.stream
            && !call.track_changes
            && self.quick_fits(script, poller)
    }

    /// Remember what an exec of a script of `shape` (`None`: not read, or
    /// not to be measured) cost per command if it was quick or had bounded
    /// steps (neither grows what the next one pays), else forget; and how
    /// long it took if it had bounded steps. The time its back-calls
    /// `waited` for Elixir is not theirs: the script held no thread then.
    fn note_cost(&self, shape: Option<ScriptShape>, metrics: &Metrics, waited: Duration) {
        let shape = shape.unwrap_or(ScriptShape::UNKNOWN);
        let waited_us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        let busy = Metrics {
            wall_time_us: metrics.wall_time_us.saturating_sub(waited_us),
            ..*metrics
        };
        let per_command = match shape.quick || shape.bounded_steps {
            true => busy.cost_per_command_ns(),
            false => 0,
        };
        self.quick_cost_ns.store(per_command, Ordering::Relaxed);
        if self.as_built.swap(false, Ordering::Relaxed) {
            self.fresh_cost_ns.store(per_command, Ordering::Relaxed);
        }
        if shape.bounded_steps {
            let wall_us = busy.wall_time_us.max(1);
            self.last_loop_wall_us.store(wall_us, Ordering::Relaxed);
        }
    }

    /// How long this session's back-calls have waited for Elixir in all,
    /// in nanoseconds.
    fn waited_for_elixir(&self) -> u64 {
        self.channel.as_ref().map_or(0, |c| c.waited_ns())
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

    /// `{id, running?, cwd | nil}` for `inspect/2`.
    pub fn info(&self) -> Value {
        Value::tuple([
            self.id.into(),
            self.is_running().into(),
            self.try_cwd().into(),
        ])
    }

    /// Stop the running exec, if any, at its next check. Returns whether one
    /// was running.
    pub fn cancel(&self) -> bool {
        match &*self.current.lock() {
            Some(ticket) => {
                stop(ticket);
                true
            }
            None => false,
        }
    }

    /// Record call `id` (an exec, or a lifecycle call: `lifecycle.rs`) so
    /// that `cancel_exec` reaches it, and put it in line for the
    /// interpreter behind the calls submitted before it.
    pub(crate) fn register_call(&self, id: u64, ticket: &Arc<ExecTicket>) -> Place {
        self.tickets.lock().insert(id, Arc::downgrade(ticket));
        Place::take(&self.bash)
    }

    /// Call `id` has ended.
    pub(crate) fn forget_call(&self, id: u64) {
        self.tickets.lock().remove(&id);
    }

    /// Whether call `id` is the only call of this session in flight.
    pub(crate) fn alone_in_flight(&self, id: u64) -> bool {
        let tickets = self.tickets.lock();
        tickets.len() == 1 && tickets.contains_key(&id)
    }

    /// The interpreter, once this call's `place` in line comes up; `None` if
    /// `ticket` is cancelled or times out first (a call must not wait out
    /// the whole exec in front of it past its own deadline).
    pub(crate) async fn turn(ticket: &ExecTicket, place: Place) -> Option<Turn> {
        tokio::select! {
            biased;
            bash = place => Some(bash),
            () = ticket.stopped() => None,
        }
    }

    /// Give up on exec `id` if it should have ended by now
    /// (`ExecTicket::overdue`, against this session's own timeout, which
    /// bashkit counts from the exec's start): its caller gets nothing more
    /// (`ExecTicket::give_up`) and this returns its output so far. If not,
    /// how long until it should have (`None` while it waits for its turn).
    /// `None`: no such exec (it has ended; its answer is on its way).
    pub fn give_up_if_overdue(&self, id: u64) -> GiveUp {
        let ticket = self.tickets.lock().get(&id).and_then(Weak::upgrade)?;
        let limit = match self.config.limits.timeout_ms {
            Some(ms) => Duration::from_millis(ms),
            None => bashkit::ExecutionLimits::default().timeout,
        };
        match ticket.overdue(limit) {
            Ok(()) => ticket.give_up().map(Ok),
            Err(left) => Some(Err(left)),
        }
    }

    /// Stop exec `id`, running or still queued. Returns whether it existed.
    pub fn cancel_exec(&self, id: u64) -> bool {
        match self.tickets.lock().get(&id).and_then(Weak::upgrade) {
            Some(ticket) => {
                stop(&ticket);
                true
            }
            None => false,
        }
    }
}

/// Cancel `ticket` for `cancel/1` (or `cancel/2`, a halted stream). In the
/// node, if it has not stopped a second later, the watchdog answers it
/// (in a worker, the worker's owner does).
fn stop(ticket: &Arc<ExecTicket>) {
    ticket.cancel();
    if !runtime::in_worker() {
        watchdog::answer_if_still_running(ticket);
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

/// Per-call options of `exec/3`, validated by Elixir.
#[derive(Debug, Default)]
pub struct ExecCallOptions {
    pub stdin: Option<Bytes>,
    /// Send output chunks to the caller while the script runs.
    pub stream: bool,
    /// A wall-clock limit for this call, on top of the session's.
    pub timeout_ms: Option<u64>,
    pub track_changes: bool,
}
from_map!(ExecCallOptions {
    stdin,
    stream,
    timeout_ms,
    track_changes
});

/// Marks the session busy with `ticket` while it runs.
struct Running<'a> {
    session: &'a Session,
}

impl<'a> Running<'a> {
    fn start(session: &'a Session, ticket: &Arc<ExecTicket>, bash: &Bash) -> Self {
        // bashkit leaves resetting the token to us: reset it before this
        // exec becomes cancellable.
        let token = bash.cancellation_token();
        token.store(false, Ordering::SeqCst);
        let interrupt = session.interrupt();
        interrupt.clear();
        ticket.start(token, interrupt);
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
    fn to_value(&self) -> Value {
        Value::tuple([Value::bin(self.0), Value::bin(self.1)])
    }
}

/// bashkit's options for one exec.
fn bashkit_options(call: &mut ExecCallOptions) -> ExecOptions {
    let mut out = ExecOptions::new();
    if let Some(Bytes(stdin)) = call.stdin.take() {
        out = out.stdin(stdin);
    }
    out
}

/// Whether a session just built is plain (`Session::plain`). A command
/// policy can hide a builtin that a short script names, which then resolves
/// to a script file on `$PATH`: such sessions run every script live.
fn plain_when_built(config: &SessionConfig) -> bool {
    config.commands.is_none()
}

/// How a script is run by bashkit.
enum RunMode<'a> {
    /// Live execution (`Bash::execute`): it yields every 64 commands, so a
    /// long script shares the runners.
    Live,
    /// Buffered execution with a per-command output callback (what was
    /// written so far is kept for a failed exec's answer). It never yields:
    /// only for short scripts (`script_shape.rs`), which would not yield
    /// live either, and costs less than live execution.
    Buffered,
    /// Buffered, each command's output also sent to the caller as it comes
    /// (`stream_to`, `stream/3`: one chunk per command, which live
    /// execution's pipes would merge).
    Streamed(&'a SharedCaller),
}

impl RunMode<'static> {
    /// The mode of a script of `shape` on an interpreter that holds no code
    /// of its own.
    fn for_plain(shape: ScriptShape) -> Self {
        match shape.short {
            true => RunMode::Buffered,
            false => RunMode::Live,
        }
    }
}

/// Run `script` the way `mode` says.
///
/// Live, it yields every 64 commands, which lets the runner (`runner.rs`)
/// move a long script off the submitting thread and share runner threads
/// fairly. Its output is collected by our own sinks into `partial` rather
/// than by bashkit's `capture`, which would allocate (and reserve from the
/// exec's live-memory budget) both output caps up front on every exec; the
/// caps still bound what is delivered and set the `*_truncated` flags. A
/// failed exec (timeout, cancel, a limit) so keeps what the script wrote
/// before it stopped, and a completed one takes its output from there.
///
/// Buffered and streamed, bashkit's output callback fires once per command
/// and feeds `partial` (and, streamed, the caller); the result's output is
/// bashkit's own. Neither yields: a streamed exec is never polled inline
/// and holds its runner until it ends, a buffered one is short.
async fn run_script(
    bash: &mut Bash,
    script: &str,
    mut options: ExecOptions,
    partial: &SharedPartial,
    mode: RunMode<'_>,
) -> bashkit::Result<ExecResult> {
    let caller = match mode {
        RunMode::Live => return run_live(bash, script, options, partial).await,
        RunMode::Buffered => None,
        RunMode::Streamed(caller) => Some(Arc::clone(caller)),
    };
    let partial = Arc::clone(partial);
    options = options.streaming(Box::new(move |stdout, stderr| {
        if !stdout.is_empty() || !stderr.is_empty() {
            partial.lock().push(stdout.as_bytes(), stderr.as_bytes());
            if let Some(caller) = &caller {
                let chunk = OutputChunk(stdout.as_bytes(), stderr.as_bytes());
                caller.lock().send("ex_bashkit_output", &chunk);
            }
        }
    }));
    bash.exec_with_options(script, options).await
}

async fn run_live(
    bash: &mut Bash,
    script: &str,
    options: ExecOptions,
    partial: &SharedPartial,
) -> bashkit::Result<ExecResult> {
    let result = bash
        .execute(script)
        .options(options)
        .stdout_fn(|bytes| sink(partial, bytes, false))
        .stderr_fn(|bytes| sink(partial, bytes, true))
        .await;
    result.map(|mut result| {
        let (stdout, stderr) = partial.lock().take();
        result.stdout = stdout.into();
        result.stderr = stderr.into();
        result
    })
}

async fn sink(partial: &SharedPartial, bytes: Vec<u8>, stderr: bool) -> bashkit::Result<()> {
    partial.lock().append(bytes, stderr);
    Ok(())
}

/// Run `script` on `session` as exec `exec_id`. Returns the outcome when it
/// completed on the calling thread (the inline fast path, `runner.rs`):
/// `reply` is then left unanswered for the caller to answer its own way.
/// Otherwise `before_park` runs on this thread, the exec goes on on the
/// runner pool, and `reply` gets the outcome. `on_end` runs once the exec
/// is over, before the answer is sent, either way.
pub fn exec(
    session: Arc<Session>,
    exec_id: u64,
    script: String,
    mut call: ExecCallOptions,
    reply: ReplyTo,
    on_end: impl FnOnce() + Send + 'static,
    before_park: impl FnOnce(),
) -> Option<ExecOutcome> {
    let caller = reply.caller();
    let ticket = ExecTicket::new();
    let partial = Partial::shared();
    ticket.attach(&partial, &caller);
    let place = session.register_call(exec_id, &ticket);
    // A per-call timeout counts from the call, queueing behind other execs
    // of this session included.
    if let Some(ms) = call.timeout_ms {
        watchdog::schedule(Instant::now() + Duration::from_millis(ms), &ticket);
    }
    // Streamed output is sent as it comes: from a runner thread. In a
    // worker the submitting thread reads every frame (cancel included): it
    // runs a script only when a normal scheduler would in the node (quick,
    // within the budget), and only when no other call of the session is in
    // flight: one that arrived before may not have asked for its turn yet
    // (no runner has polled it), and this one must not overtake it (FIFO
    // per session). Anything else goes straight to the runners.
    let inline = !call.stream
        && (!runtime::in_worker()
            || session.quick_call_fits(&script, &call, InlinePoller::FrameReader)
                && session.alone_in_flight(exec_id));
    // A command that may run for long without yielding gets a thread of
    // its own (`runner::drive_on_own_thread`).
    let own_thread = script_shape::names_long_command(&script);
    let work = Box::pin(async move {
        let outcome = guard::catch_future(async {
            // A deadline or cancel that comes while the exec still waits for
            // its turn ends it there (the exec never runs).
            let Some(mut bash) = Session::turn(&ticket, place).await else {
                return ExecOutcome::stopped(&ticket, call.timeout_ms);
            };
            let _running = Running::start(&session, &ticket, &bash);
            let _attached = session
                .channel
                .as_ref()
                .map(|c| c.attach(Arc::clone(&caller)));

            // Mount points of backends, and the trash (what a delete moved
            // there is reported as deleted, not as a new file). Scans stop
            // at the exec's deadline (or a cancel); the change set is then
            // marked incomplete.
            let stop = || ticket.is_stopped();
            let tracking = match call.track_changes {
                true => {
                    let config = &session.config;
                    let skip: Vec<String> = config
                        .virtual_fs
                        .iter()
                        .chain(&config.soft_delete)
                        .cloned()
                        .collect();
                    let before = changes::scan(&bash.fs(), &skip, &stop).await;
                    Some((skip, before))
                }
                false => None,
            };
            let options = bashkit_options(&mut call);
            // Read for every exec, streamed ones too: what a script may
            // leave behind (a function shadowing `echo`) decides where the
            // session's next quick script may run.
            let (plain_mode, shape) = session.run_mode_for(&script);
            let (mode, shape) = match call.stream {
                true => (RunMode::Streamed(&caller), None),
                false => (plain_mode, shape),
            };
            let waited = session.waited_for_elixir();
            let metering = Metering::start(&bash);
            let result = run_script(&mut bash, &script, options, &partial, mode).await;
            let metrics = metering.stop(&bash);
            let waited = Duration::from_nanos(session.waited_for_elixir().saturating_sub(waited));
            let measured = shape.filter(|_| !call.track_changes);
            session.note_cost(measured, &metrics, waited);
            let changes = match tracking {
                Some((skip, before)) => Some(changes::diff(
                    &before,
                    &changes::scan(&bash.fs(), &skip, &stop).await,
                )),
                None => None,
            };
            ExecOutcome::new(
                result,
                changes,
                metrics,
                &ticket,
                call.timeout_ms,
                Some(&partial),
            )
        })
        .await;
        session.forget_call(exec_id);
        on_end();
        outcome.unwrap_or_else(ExecOutcome::panicked)
    });
    let finish = |outcome: ExecOutcome, reply: ReplyTo| reply.finish(&outcome);
    if own_thread {
        crate::runner::drive_on_own_thread(work, reply, before_park, finish);
        return None;
    }
    crate::runner::drive(work, inline, reply, before_park, finish)
}

/// Run `script` in a fresh default interpreter (`ExBashkit.exec/1`):
/// `prebuilt`, or one taken from the shelf or built now. `ticket` cancels
/// it (its caller died); `on_end` runs once it is over. Returns the outcome
/// when it completed inline, like [`exec`]. In a worker it runs inline only
/// with `prebuilt`, which the reader passes for a quick script
/// ([`once_quick_fits`]): building an interpreter would hold the reader.
pub fn exec_once_job(
    decoded: Arc<DecodedConfig>,
    prebuilt: Option<warm::Prebuilt>,
    script: String,
    ticket: Arc<ExecTicket>,
    reply: ReplyTo,
    on_end: Option<Box<dyn FnOnce() + Send>>,
    before_park: impl FnOnce(),
) -> Option<ExecOutcome> {
    let inline = !runtime::in_worker() || prebuilt.is_some();
    // As in `exec`: a command that may run for long gets a thread of its own.
    let own_thread = script_shape::names_long_command(&script);
    let partial = Partial::shared();
    ticket.attach(&partial, &reply.caller());
    let work = Box::pin(async move {
        let mut used = None;
        let outcome = guard::catch_future(async {
            let built = match prebuilt {
                Some(prebuilt) => Ok(prebuilt),
                None => warm::take_or_build(&decoded.key, &decoded.config),
            };
            match built {
                Ok(built) => {
                    let bash = used.insert(built.bash);
                    ticket.start(bash.cancellation_token(), built.interrupt);
                    // A fresh default interpreter holds no code of its own.
                    let shape = script_shape::of(&script, &OwnCommands::NONE);
                    let metering = Metering::start(bash);
                    let result = run_script(
                        bash,
                        &script,
                        ExecOptions::new(),
                        &partial,
                        RunMode::for_plain(shape),
                    )
                    .await;
                    let metrics = metering.stop(bash);
                    if shape.quick {
                        ONCE_QUICK_COST_NS.store(metrics.cost_per_command_ns(), Ordering::Relaxed);
                    }
                    ExecOutcome::new(result, None, metrics, &ticket, None, Some(&partial))
                }
                Err(message) => ExecOutcome::error(message),
            }
        })
        .await;
        if let Some(on_end) = on_end {
            on_end();
        }
        // The interpreter is dropped after the answer is sent: tearing it
        // down takes a few µs that the caller need not wait for.
        (outcome.unwrap_or_else(ExecOutcome::panicked), used)
    });
    let finish = |(outcome, used): (ExecOutcome, Option<Bash>), reply: ReplyTo| {
        reply.finish(&outcome);
        drop(used);
    };
    if own_thread {
        crate::runner::drive_on_own_thread(work, reply, before_park, finish);
        return None;
    }
    let done = crate::runner::drive(work, inline, reply, before_park, finish);
    done.map(|(outcome, used)| {
        // Dropped off the caller's path.
        if let Some(bash) = used {
            teardown::later(bash);
        }
        outcome
    })
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

/// `state/1`: a plain view of the shell, taken between scripts.
pub fn state(op: Op, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let bash = op.turn().await?;
            let mut view = ShellStateView::from(bash.shell_state());
            view.fs_usage = bash.fs().usage();
            Ok::<_, String>(view)
        })
        .await;
        drop(op);
        match outcome {
            Ok(Ok(view)) => reply.finish(&view),
            Ok(Err(message)) => reply.finish(&Value::error(message)),
            Err(panic) => reply.finish(&Value::error(format!("internal error: {panic}"))),
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
    /// The filesystem's usage against the `max_fs_bytes` / `max_files`
    /// limits.
    fs_usage: bashkit::FsUsage,
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
            fs_usage: bashkit::FsUsage::default(),
        }
    }
}

impl Payload for ShellStateView {
    fn to_value(&self) -> Value {
        Value::ok_with(Value::map([
            ("env", (&self.env).into()),
            ("variables", (&self.variables).into()),
            ("cwd", (&self.cwd).into()),
            ("functions", self.functions.clone().into()),
            ("aliases", (&self.aliases).into()),
            ("last_exit_code", self.last_exit_code.into()),
            (
                "fs_usage",
                Value::map([
                    ("bytes", self.fs_usage.total_bytes.into()),
                    ("files", self.fs_usage.file_count.into()),
                    ("dirs", self.fs_usage.dir_count.into()),
                ]),
            ),
        ]))
    }
}

/// `reset/1`: rebuild the interpreter from the session's configuration,
/// keeping its capabilities (builtins, backends, mounts, limits, network)
/// because they are part of that configuration. Answers `:ok` or
/// `{:error, message}`, through `reply` or, when it completed within the
/// call, as the return value.
///
/// A session built from memory alone ([`Session::resets_quickly`]) is
/// reset on the calling thread first (`runner::drive`; a normal scheduler
/// in the node, the frame reader in a worker): with its turn free and an
/// interpreter built in advance, that is a swap. Otherwise it goes on on
/// the runners. Any other session is reset on a thread of its own:
/// rebuilding may write large `:files`, which must not hold up the runtime
/// threads other sessions' timers run on.
pub fn reset(op: Op, reply: ReplyTo) -> Option<Value> {
    if !op.session().resets_quickly() {
        runtime::spawn_job(async move { reply.finish(&reset_work(op).await) });
        return None;
    }
    runner::drive(
        Box::pin(reset_work(op)),
        true,
        reply,
        || {},
        |answer, reply| reply.finish(&answer),
    )
}

/// The work of `reset/1`: `:ok` or `{:error, message}`. The interpreter it
/// replaces is dropped off this thread (`teardown.rs`): it may be large.
async fn reset_work(op: Op) -> Value {
    let outcome = guard::catch_future(async {
        let session = Arc::clone(op.session());
        let mut bash = op.turn().await?;
        let replaced = session.rebuild(&mut bash).await?;
        teardown::later(replaced);
        Ok::<(), String>(())
    })
    .await;
    drop(op);
    match outcome {
        Ok(Ok(())) => Value::ok(),
        Ok(Err(message)) => Value::error(message),
        Err(panic) => Value::error(format!("internal error: {panic}")),
    }
}

impl Session {
    /// Whether `reset/1` may start on the calling thread: the session is
    /// built from memory alone, so its reset takes an interpreter built in
    /// advance, or leaves for the runners to build one.
    fn resets_quickly(&self) -> bool {
        self.warm.is_some()
    }

    /// Put a fresh interpreter for the session's configuration in place of
    /// `bash` (whose turn the caller holds) and return the one it replaced.
    async fn rebuild(&self, bash: &mut Bash) -> Result<Bash, String> {
        let config = &self.config;
        let ready = self
            .warm
            .as_ref()
            .and_then(|warm| warm::take_ready(&warm.key, config));
        let (fresh, layer, interrupt) = match ready {
            Some(built) => (built.bash, built.layer, built.interrupt),
            None => {
                // Building takes tens of microseconds at least: not on a
                // normal scheduler.
                runner::leave_inline().await;
                let interrupt = self.interrupt();
                let layer = options::Layer::new(config);
                let fresh = options::build_bash_on(
                    config,
                    self.channel.as_ref(),
                    Some(&interrupt),
                    &layer,
                )?;
                options::prepare_reset(&fresh, config, self.channel.as_ref()).await?;
                (fresh, layer, interrupt)
            }
        };
        *self.fs.write() = fresh.fs();
        *self.layer.write() = layer;
        *self.interrupt.lock() = interrupt;
        *self.host_mounts.lock() = config.mounts.clone();
        self.as_built_again();
        Ok(std::mem::replace(bash, fresh))
    }

    /// What the session knows of its interpreter once that is as it was
    /// built again: plain as its configuration makes it, no attributes set,
    /// and a command costing what its first exec paid per command.
    fn as_built_again(&self) {
        let plain = plain_when_built(&self.config);
        self.plain.store(plain, Ordering::Relaxed);
        let fresh_cost = self.fresh_cost_ns.load(Ordering::Relaxed);
        self.quick_cost_ns.store(fresh_cost, Ordering::Relaxed);
        self.as_built.store(fresh_cost == 0, Ordering::Relaxed);
        self.attributes_set.store(false, Ordering::Relaxed);
    }
}

// -- The NIF transport ------------------------------------------------------

/// A session as the node holds it (`isolation: :in_node`): the core session
/// plus a monitor on each process with calls under way, whose death cancels
/// those calls.
pub struct SessionResource {
    /// Dropped on a runner: the VM drops a resource on a normal scheduler,
    /// and a session's teardown takes as long as it is big (`teardown.rs`).
    pub session: DropLater<Arc<Session>>,
    callers: Mutex<Vec<WatchedCaller>>,
}

/// A process this session monitors, and its calls not yet over.
///
/// The monitor outlives the calls: it stays for the process's next ones
/// and goes when the process dies (`down`) or the session does (the VM
/// drops a resource's monitors with it). Setting a monitor up and taking it
/// down each signal the monitored process, which wakes its scheduler: per
/// call, that was about 20 µs of a builtin round trip (an A/B of 3 × 10 000
/// round trips, bench/analysis.md). So there is at most one monitor per
/// (session, live caller), and a call only joins its caller's list.
struct WatchedCaller {
    pid: LocalPid,
    monitor: Monitor,
    calls: Vec<u64>,
}

// Only touched through its locks, so a panic caught mid-operation cannot
// leave it observably half-updated.
impl std::panic::RefUnwindSafe for SessionResource {}
impl std::panic::UnwindSafe for SessionResource {}

#[rustler::resource_impl]
impl rustler::Resource for SessionResource {
    /// A caller died: nobody will read its answers, so stop its calls
    /// (running) or make them end at once when their turn comes (queued).
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, monitor: Monitor) {
        let calls = {
            let mut callers = self.callers.lock();
            match callers.iter().position(|c| c.monitor == monitor) {
                Some(i) => callers.swap_remove(i).calls,
                None => Vec::new(),
            }
        };
        for id in calls {
            self.session.cancel_exec(id);
        }
    }
}

type Handle = ResourceArc<SessionResource>;

/// Watch `pid`, the caller of call `id` on `handle`: its death cancels the
/// call (`down`). Returns what to run once the call is over.
pub fn watch_caller(
    env: Env,
    handle: &Handle,
    pid: &LocalPid,
    id: u64,
) -> Box<dyn FnOnce() + Send> {
    watch(env, handle, pid, id);
    Box::new(unwatch_caller(handle, id))
}

/// Add call `id` to `pid`'s calls, monitoring `pid` if this session does not
/// yet. A caller that is already dead (killed while its call's NIF ran: its
/// `down` may even have come and gone) cannot be monitored: nobody will
/// read the answer, so the call is cancelled, as `down` would have.
fn watch(env: Env, handle: &Handle, pid: &LocalPid, id: u64) {
    let watched = {
        let mut callers = handle.callers.lock();
        if let Some(caller) = callers.iter_mut().find(|c| c.pid == *pid) {
            caller.calls.push(id);
            true
        } else if let Some(monitor) = handle.monitor(Some(env), pid) {
            callers.push(WatchedCaller {
                pid: *pid,
                monitor,
                calls: vec![id],
            });
            true
        } else {
            false
        }
    };
    if !watched {
        handle.session.cancel_exec(id);
    }
}

/// What to run once call `id` is over: take it off its caller's calls (the
/// monitor stays, see [`WatchedCaller`]).
fn unwatch_caller(handle: &Handle, id: u64) -> impl FnOnce() + Send + 'static {
    let owner = handle.clone();
    move || {
        for caller in owner.callers.lock().iter_mut() {
            if let Some(i) = caller.calls.iter().position(|&c| c == id) {
                caller.calls.swap_remove(i);
                return;
            }
        }
    }
}

/// A session for the configuration term `config` (decoded once per term:
/// `config_cache.rs`).
fn new_handle(config: Term) -> NifResult<Handle> {
    let decoded = config_cache::decode(config)?;
    Ok(ResourceArc::new(SessionResource {
        session: DropLater::new(Session::new(&decoded)?),
        callers: Mutex::new(Vec::new()),
    }))
}

#[rustler::nif(schedule = "DirtyIo")]
fn session_new(config: Term) -> NifResult<Handle> {
    new_handle(config)
}

/// `session_new/1` on the calling (normal) scheduler, for configurations
/// whose construction touches neither the host nor large data (Elixir's
/// `ExBashkit.Session.Options.inline?/1` decides): building the interpreter
/// then takes tens of microseconds, less than the round trip to a dirty
/// scheduler would add.
#[rustler::nif]
fn session_new_inline(env: Env, config: Term) -> NifResult<Handle> {
    let handle = new_handle(config);
    // Tell the VM this call used part of its time slice (about 40 µs of 1 ms).
    rustler::schedule::consume_timeslice(env, 4);
    handle
}

/// Run `script`: where it was called when it is quick and fits
/// (`runs_here`), else on a dirty CPU scheduler; there it is polled first
/// (`runner.rs`), so a short script answers as the NIF's return value,
/// `{:done, id, outcome}`.
/// A script that waits or runs past its slice goes on on the runner pool and
/// the call returns `{:ok, id}`; the answer then arrives as
/// `{:ex_bashkit_reply, ref, outcome}`. `id` is the exec's id, for
/// `session_cancel_exec/2`.
#[rustler::nif]
fn session_exec<'a>(
    env: Env<'a>,
    handle: Term<'a>,
    script: Term<'a>,
    call: Term<'a>,
    pid: Term<'a>,
    reference: Term<'a>,
) -> rustler::NifResult<Term<'a>> {
    let args = [handle, script, call, pid, reference];
    let handle: Handle = handle.decode()?;
    let Some(call) = runs_here(&handle.session, script, call) else {
        return Ok(dirty::to_dirty_cpu(
            env,
            c"session_exec",
            session_exec_dirty,
            &args,
        ));
    };
    let (script, pid) = (script.decode()?, pid.decode()?);
    Ok(dirty::run_here(env, || {
        exec_answer(env, handle, script, call, pid, reference, true)
    }))
}

// `session_exec` moved to a dirty CPU scheduler.
crate::dirty_entry!(session_exec_dirty, exec_nif);

/// The decoded call options when `session_exec` may run `script` where it
/// was called, on a normal scheduler: a script of at most 512 bytes with no
/// stdin, no streaming, no change tracking, that the session says fits
/// (`Session::quick_call_fits`). Looks at nothing bigger than that: a big script
/// or stdin is not even copied here.
fn runs_here(session: &Session, script: Term, call: Term) -> Option<ExecCallOptions> {
    let script = quick_text(script)?;
    let no_stdin = call
        .map_get(stdin())
        .is_ok_and(|value| rustler::types::atom::nil() == value);
    if !no_stdin {
        return None;
    }
    let call = decode_call(call).ok()?;
    session
        .quick_call_fits(script, &call, InlinePoller::NormalScheduler)
        .then_some(call)
}

/// The text of `script` when it may be quick: at most
/// [`QUICK_SCRIPT_BYTES`] of UTF-8. Nothing bigger is copied or read.
fn quick_text<'a>(script: Term<'a>) -> Option<&'a str> {
    let bytes = script.decode::<Binary<'a>>().ok()?.as_slice();
    if bytes.len() > QUICK_SCRIPT_BYTES {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

rustler::atoms! { stdin, done }

/// The body of `session_exec`, wherever it runs: `[handle, script, call,
/// pid, ref]`. Arguments of the wrong type raise `badarg`, as rustler's
/// decoding does; the answer is `{:ok, _}` or `{:error, message}`.
fn exec_nif<'a>(env: Env<'a>, args: &[Term<'a>]) -> rustler::NifResult<Term<'a>> {
    let [handle, script, call, pid, reference] = args else {
        return Err(rustler::Error::BadArg);
    };
    let handle: Handle = handle.decode()?;
    let script = script.decode::<Binary>()?;
    let pid: LocalPid = pid.decode()?;
    let answer = script_text(&script).and_then(|script| {
        let call = decode_call(*call)?;
        exec_answer(env, handle, script.to_owned(), call, pid, *reference, false)
    });
    Ok(answer.encode(env))
}

/// A script is UTF-8 text: anything else is the caller's error, answered
/// as one (`Session.exec/3` leaves this check to the NIF in the node).
fn script_text<'s>(script: &'s Binary) -> NifResult<&'s str> {
    std::str::from_utf8(script.as_slice()).map_err(|_| "script is not valid UTF-8".into())
}

fn decode_call(call: Term) -> NifResult<ExecCallOptions> {
    Ok(ExecCallOptions::from_term(call)?)
}

/// Run the exec; `{:done, id, outcome}`, `{:ok, id}`, or, for a quick
/// script polled here (`quick`) that made a back-call, `{:ok, id,
/// message}`: that back-call, returned instead of sent
/// (`reply::keeping_message`; see `session_exec`).
fn exec_answer<'a>(
    env: Env<'a>,
    handle: Handle,
    script: String,
    call: ExecCallOptions,
    pid: LocalPid,
    reference: Term<'a>,
    quick: bool,
) -> NifResult<Term<'a>> {
    let id = next_exec_id();
    let on_end = unwatch_caller(&handle, id);
    // The caller dying cancels the exec, once it no longer runs on the
    // caller's own call: an exec that completes inline needs no monitor.
    let before_park = || watch(env, &handle, &pid, id);
    let reply = ReplyTo::new(Caller::in_nif(pid, reference));
    let session = Arc::clone(&handle.session);
    let run = || exec(session, id, script, call, reply, on_end, before_park);
    let run = || runner::with_nif_env(env, run);
    let (outcome, back_call) = match quick {
        true => reply::keeping_message(env, &[reply::BACK_CALL], run),
        false => (run(), None),
    };
    Ok(match (outcome, back_call) {
        // A back-call that the exec no longer waits for (it was cancelled
        // in the same poll) is dropped unsent: nobody would answer it.
        (Some(outcome), _) => (done(), id, outcome.to_term(env)).encode(env),
        (None, None) => (rustler::types::atom::ok(), id).encode(env),
        (None, Some(message)) => (rustler::types::atom::ok(), id, message).encode(env),
    })
}

/// A one-shot exec (`ExBashkit.exec/1`) as the node tracks it: whose caller
/// dying cancels it.
pub struct OneShotResource {
    ticket: Arc<ExecTicket>,
}

#[rustler::resource_impl]
impl rustler::Resource for OneShotResource {
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, _monitor: Monitor) {
        self.ticket.cancel();
    }
}

/// `ExBashkit.exec/1`, run like `session_exec`: returns `{:done, outcome}`
/// when it completed inline, else `{:ok, handle}` and the answer comes by
/// message (`handle` is for [`exec_once_give_up`]).
/// `config` is what `new/1` decodes to with no options, or with `:limits`
/// only (Elixir declares the defaults). A quick script runs where it was
/// called when an interpreter built in advance is ready
/// ([`once_runs_here`]); anything else moves to a dirty CPU scheduler first.
#[rustler::nif]
fn exec_once<'a>(
    env: Env<'a>,
    config: Term<'a>,
    script: Term<'a>,
    pid: Term<'a>,
    reference: Term<'a>,
) -> rustler::NifResult<Term<'a>> {
    let args = [config, script, pid, reference];
    let pid: LocalPid = pid.decode()?;
    let Some((decoded, prebuilt)) = once_runs_here(config, script) else {
        return Ok(dirty::to_dirty_cpu(
            env,
            c"exec_once",
            exec_once_dirty,
            &args,
        ));
    };
    let script = script.decode()?;
    Ok(dirty::run_here(env, || {
        once_answer(env, decoded, Some(prebuilt), script, pid, reference)
    }))
}

// `exec_once` moved to a dirty CPU scheduler.
crate::dirty_entry!(exec_once_dirty, |env, args| {
    let [config, script, pid, reference] = args else {
        return Err(rustler::Error::BadArg);
    };
    let (script, pid) = (script.decode()?, pid.decode()?);
    let answer = config_cache::decode(*config)
        .and_then(|decoded| once_answer(env, decoded, None, script, pid, *reference));
    Ok(answer.encode(env))
});

/// The remembered configuration and an interpreter built in advance for
/// it, when `exec_once` may run `script` on the caller's normal scheduler:
/// a quick script of at most 512 bytes whose commands, at what the last
/// quick one-shot exec paid per command, fit the budget. Decodes and builds
/// nothing: a configuration not remembered, or no interpreter ready, and
/// the exec moves to a dirty scheduler.
fn once_runs_here(config: Term, script: Term) -> Option<(Arc<DecodedConfig>, warm::Prebuilt)> {
    if !once_quick_fits(quick_text(script)?) {
        return None;
    }
    let decoded = config_cache::recall(config)?;
    let prebuilt = warm::take_ready(&decoded.key, &decoded.config)?;
    Some((decoded, prebuilt))
}

/// Whether a one-shot exec of `script` may run on a thread that must not be
/// held for long (the caller's normal scheduler in the node, the frame
/// reader in a worker): a quick script of at most 512 bytes whose commands,
/// at what the last quick one-shot exec paid per command, fit the budget.
pub fn once_quick_fits(script: &str) -> bool {
    // The length first: a long script is not even read.
    script.len() <= QUICK_SCRIPT_BYTES
        && fits_budget(
            script_shape::of(script, &OwnCommands::NONE),
            ONCE_QUICK_COST_NS.load(Ordering::Relaxed),
        )
}

/// Run a one-shot exec; `{:done, outcome}` or `{:ok, handle}` (see `exec_once`).
fn once_answer<'a>(
    env: Env<'a>,
    decoded: Arc<DecodedConfig>,
    prebuilt: Option<warm::Prebuilt>,
    script: String,
    pid: LocalPid,
    reference: Term<'a>,
) -> NifResult<Term<'a>> {
    let ticket = ExecTicket::new();
    let tracker = ResourceArc::new(OneShotResource {
        ticket: Arc::clone(&ticket),
    });
    let watched = tracker.clone();
    let handle = tracker.clone();
    let monitor = Arc::new(Mutex::new(None));
    let taken = Arc::clone(&monitor);
    // The job holds the tracker (and so the monitor) until it ends.
    let on_end = Box::new(move || {
        if let Some(monitor) = taken.lock().take() {
            runner::with_caller_env(|env| tracker.demonitor(env, &monitor));
        }
    });
    let before_park = || *monitor.lock() = watched.monitor(Some(env), &pid);
    let reply = ReplyTo::new(Caller::in_nif(pid, reference));
    let run = || {
        exec_once_job(
            decoded,
            prebuilt,
            script,
            ticket,
            reply,
            Some(on_end),
            before_park,
        )
    };
    Ok(match runner::with_nif_env(env, run) {
        Some(outcome) => Value::tuple([Value::atom("done"), outcome.to_value()]).to_term(env),
        // What the caller gives up on it with, past its deadline.
        None => (Value::atom("ok").to_term(env), handle).encode(env),
    })
}

#[rustler::nif(name = "live_sessions")]
fn live_sessions_count() -> u64 {
    live_sessions()
}

/// Stop the running exec of the session; `true` if one was running.
#[rustler::nif]
fn session_cancel(handle: Handle) -> bool {
    handle.session.cancel()
}

/// Stop exec `id` of the session (running or queued); `true` if it existed.
#[rustler::nif]
fn session_cancel_exec(handle: Handle, id: u64) -> bool {
    handle.session.cancel_exec(id)
}

/// In the node, the caller of exec `id` answers it itself once it should
/// have ended and has not (a command that does not check its token, past
/// its deadline): see [`Session::give_up_if_overdue`]. Answers
/// `{stdout, stderr}`, `{:running, ms | nil}` or `nil`
/// ([`outcome::give_up_value`]). On a dirty scheduler: the output so far
/// may be large.
#[rustler::nif(schedule = "DirtyCpu")]
fn session_give_up_exec(env: Env, handle: Handle, id: u64) -> Term {
    outcome::give_up_value(handle.session.give_up_if_overdue(id)).to_term(env)
}

/// The same for a one-shot exec (`ExBashkit.exec/1`), which never waits
/// for a turn: `{stdout, stderr}`, or `nil` if it has ended.
#[rustler::nif(schedule = "DirtyCpu")]
fn exec_once_give_up(env: Env, tracker: ResourceArc<OneShotResource>) -> Term {
    outcome::give_up_value(tracker.ticket.give_up().map(Ok)).to_term(env)
}

/// Lifecycle call `name` on `handle` for `pid`, its options decoded from
/// `call`: registered, deadline started, caller monitored.
pub fn op_for(
    env: Env,
    handle: &Handle,
    name: &'static str,
    call: Term,
    pid: &LocalPid,
) -> NifResult<Op> {
    let call = OpCallOptions::from_term(call)?;
    let id = next_exec_id();
    let on_end = watch_caller(env, handle, pid, id);
    Ok(Op::new(
        Arc::clone(&handle.session),
        name,
        id,
        call,
        Some(on_end),
    ))
}

/// `state/1`: answers `{:ex_bashkit_reply, ref, {:ok, map} | {:error, _}}`.
#[rustler::nif]
fn session_state(
    env: Env,
    handle: Handle,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<rustler::Atom> {
    let op = op_for(env, &handle, "state/1", call, &pid)?;
    state(op, ReplyTo::new(Caller::process(pid, reference)));
    Ok(rustler::types::atom::ok())
}

/// `reset/1`: `{:ok, {:done, :ok | {:error, message}}}` when it completed
/// within the call ([`reset`]), else `{:ok, :ok}`, and the answer comes as
/// `{:ex_bashkit_reply, ref, :ok | {:error, message}}`.
#[rustler::nif]
fn session_reset<'a>(
    env: Env<'a>,
    handle: Handle,
    call: Term<'a>,
    pid: LocalPid,
    reference: Term<'a>,
) -> NifResult<Term<'a>> {
    let op = op_for(env, &handle, "reset/1", call, &pid)?;
    // Polled here, the reset's reply keeps its ref in this call's env until
    // it leaves (`runner::drive`); sent from elsewhere, it copies it now.
    let caller = match handle.session.resets_quickly() {
        true => Caller::in_nif(pid, reference),
        false => Caller::process(pid, reference),
    };
    let started = std::time::Instant::now();
    let answer = runner::on_normal_scheduler(|| {
        runner::with_nif_env(env, || reset(op, ReplyTo::new(caller)))
    });
    dirty::account(env, started);
    Ok(match answer {
        Some(answer) => (done(), answer.to_term(env)).encode(env),
        None => rustler::types::atom::ok().encode(env),
    })
}

/// `{id, running?, cwd | nil}` for `inspect/2`.
#[rustler::nif]
fn session_info(env: Env, handle: Handle) -> Term {
    handle.session.info().to_term(env)
}

#[cfg(test)]
mod tests {
    use super::InlinePoller::{FrameReader, NormalScheduler};
    use super::*;

    /// `config` as if Elixir had sent it as the term `key`.
    fn decoded(config: Arc<SessionConfig>, key: &[u8]) -> Arc<DecodedConfig> {
        Arc::new(DecodedConfig {
            key: Value::bin(key),
            config,
        })
    }

    fn mode(session: &Session, script: &str) -> &'static str {
        match session.run_mode_for(script).0 {
            RunMode::Live => "live",
            RunMode::Buffered => "buffered",
            RunMode::Streamed(_) => "streamed",
        }
    }

    #[test]
    fn a_reset_restores_what_the_first_exec_paid_per_command() {
        let measured = |wall_time_us| Metrics {
            commands: 1,
            wall_time_us,
        };
        let quick = Some(script_shape::of("echo hi", &OwnCommands::NONE));
        let cost = |s: &Session| s.quick_cost_ns.load(Ordering::Relaxed);
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"reset cost")).unwrap();
        // Unknown until measured; the first exec's cost is the fresh one.
        session.as_built_again();
        assert_eq!(cost(&session), 0);
        session.note_cost(quick, &measured(5), Duration::ZERO);
        let fresh = cost(&session);
        assert!(fresh > 0);
        // A script that is not quick makes it unknown; a reset brings back
        // the fresh cost, not the last one.
        session.note_cost(None, &measured(5), Duration::ZERO);
        assert_eq!(cost(&session), 0);
        session.note_cost(quick, &measured(50), Duration::ZERO);
        session.as_built_again();
        assert_eq!(cost(&session), fresh);
        // After a restored snapshot, the next exec is not on an interpreter
        // as built: it measures nothing for later resets.
        let config = Arc::new(SessionConfig::default());
        let restored = Session::new(&decoded(config, b"reset cost 2")).unwrap();
        restored.forget_plain();
        restored.note_cost(quick, &measured(5), Duration::ZERO);
        restored.as_built_again();
        assert_eq!(cost(&restored), 0);
    }

    #[test]
    fn short_scripts_run_buffered_until_the_session_may_hold_code() {
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"session tests")).unwrap();
        assert_eq!(mode(&session, "echo hi"), "buffered");
        // A loop runs live, and defines nothing.
        assert_eq!(mode(&session, "for i in 1 2; do echo $i; done"), "live");
        assert_eq!(mode(&session, "echo hi"), "buffered");
        // A function could shadow `echo`: live from now on.
        assert_eq!(mode(&session, "echo() { while :; do :; done; }"), "live");
        assert_eq!(mode(&session, "echo hi"), "live");
    }

    fn run(session: &Arc<Session>, script: &str) -> ExecOutcome {
        let frames = crate::reply::FrameWriter::new(Box::new(std::io::sink()));
        let reply = ReplyTo::new(Caller::Port { id: 1, frames });
        let call = ExecCallOptions::default();
        exec(
            Arc::clone(session),
            1,
            script.into(),
            call,
            reply,
            || {},
            || {},
        )
        .expect("completes inline")
    }

    #[test]
    fn a_quick_exec_measures_its_cost_and_any_other_forgets_it() {
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"session tests")).unwrap();
        let cost = || session.quick_cost_ns.load(Ordering::Relaxed);
        assert_eq!(cost(), 0);
        run(&session, "echo hi");
        assert!(cost() > 0);
        // A script that is not quick may grow what each command costs.
        run(&session, "for i in 1 2; do export V$i=x; done");
        assert_eq!(cost(), 0);
        run(&session, "cd /tmp");
        assert!(cost() > 0);
        session.forget_plain();
        assert_eq!(cost(), 0);
    }

    #[test]
    fn a_quick_script_fits_when_its_commands_at_the_measured_cost_fit_the_budget() {
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"session tests")).unwrap();
        let measured = |wall_time_us| Metrics {
            commands: 1,
            wall_time_us,
        };
        let quick = Some(script_shape::of("echo hi", &OwnCommands::NONE));
        // Nothing measured yet.
        assert!(!session.quick_fits("echo hi", FrameReader));
        session.note_cost(quick, &measured(20), Duration::ZERO);
        assert!(session.quick_fits("echo hi", FrameReader));
        assert!(session.quick_fits("cd /tmp; x=1; echo a b", FrameReader));
        assert!(!session.quick_fits("echo $x", FrameReader));
        assert!(!session.quick_fits(
            &format!("echo {}", "x".repeat(QUICK_SCRIPT_BYTES)),
            FrameReader
        ));
        session.note_cost(quick, &measured(QUICK_BUDGET_NS / 1000 / 2), Duration::ZERO);
        assert!(session.quick_fits("echo a; echo b", FrameReader));
        assert!(!session.quick_fits("echo a; echo b; echo c", FrameReader));
        // Time spent waiting for Elixir's answers is not the commands' cost.
        let waited = Duration::from_micros(QUICK_BUDGET_NS / 1000);
        session.note_cost(quick, &measured(QUICK_BUDGET_NS / 1000 + 20), waited);
        assert!(session.quick_fits("echo a; echo b; echo c", FrameReader));
        // A call with stdin, streamed or tracking changes never runs there.
        let call = |stdin: Option<&[u8]>, stream, track_changes| ExecCallOptions {
            stdin: stdin.map(|bytes| Bytes(bytes.to_vec())),
            stream,
            timeout_ms: None,
            track_changes,
        };
        assert!(session.quick_call_fits("echo hi", &call(None, false, false), FrameReader));
        assert!(!session.quick_call_fits("echo hi", &call(Some(b""), false, false), FrameReader));
        assert!(!session.quick_call_fits("echo hi", &call(None, true, false), FrameReader));
        assert!(!session.quick_call_fits("echo hi", &call(None, false, true), FrameReader));
        assert!(!session.quick_call_fits("echo $x", &call(None, false, false), FrameReader));
        // A call that arrived before, still in flight, keeps its place.
        let (first, second) = (ExecTicket::new(), ExecTicket::new());
        session.register_call(1, &first);
        assert!(session.alone_in_flight(1));
        session.register_call(2, &second);
        assert!(!session.alone_in_flight(2));
        session.forget_call(1);
        assert!(session.alone_in_flight(2));
        session.forget_call(2);
        session.note_cost(None, &measured(20), Duration::ZERO);
        assert!(!session.quick_fits("echo hi", FrameReader));
    }

    #[test]
    fn a_loop_with_bounded_steps_fits_a_normal_scheduler_when_64_commands_fit_the_budget() {
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"session tests")).unwrap();
        let cost = || session.quick_cost_ns.load(Ordering::Relaxed);
        let last_loop = || session.last_loop_wall_us.load(Ordering::Relaxed);
        let looping = "i=0; while [ $i -lt 50 ]; do i=$((i + 1)); done; echo $i";
        // Unknown until an exec measures it: its cost per command, and how
        // long the loop took.
        assert!(!session.quick_fits(looping, NormalScheduler));
        run(&session, looping);
        assert!(cost() > 0 && last_loop() > 0);
        // Then a loop of any length fits, on a normal scheduler only, when
        // 64 commands at the measured cost fit the budget.
        let measured = |commands, wall_time_us| Metrics {
            commands,
            wall_time_us,
        };
        let looped = Some(script_shape::of(looping, &OwnCommands::NONE));
        let per_command = STEPS_BUDGET_NS / COMMANDS_BETWEEN_YIELDS / 1000;
        session.note_cost(looped, &measured(1, per_command), Duration::ZERO);
        assert!(session.quick_fits(looping, NormalScheduler));
        assert!(session.quick_fits("while :; do :; done", NormalScheduler));
        assert!(!session.quick_fits(looping, FrameReader));
        assert!(!session.quick_fits("while [ $j -lt 5 ]; do :; done", NormalScheduler));
        session.note_cost(looped, &measured(1, per_command + 1), Duration::ZERO);
        assert!(!session.quick_fits(looping, NormalScheduler));
        // After a loop that took long, the next starts on a dirty scheduler
        // (which measures it again); after a short one, here. Quick scripts
        // are not concerned.
        session.note_cost(
            looped,
            &measured(1_000, LOOP_INLINE_WALL_US + 1),
            Duration::ZERO,
        );
        assert!(!session.quick_fits(looping, NormalScheduler));
        assert!(session.quick_fits("echo hi", NormalScheduler));
        session.note_cost(
            looped,
            &measured(1_000, LOOP_INLINE_WALL_US),
            Duration::ZERO,
        );
        assert!(session.quick_fits(looping, NormalScheduler));
        // Once a script may have made a variable readonly (a loop's own
        // assignment may then fail) or a nameref, never again.
        run(&session, "readonly i=123456789");
        session.note_cost(looped, &measured(1_000, 100), Duration::ZERO);
        assert!(!session.quick_fits(looping, NormalScheduler));
        assert!(session.quick_fits("echo hi", NormalScheduler));
    }

    #[test]
    fn a_quick_one_shot_exec_measures_the_cost_later_ones_are_admitted_by() {
        let decoded = Arc::new(DecodedConfig {
            key: Value::bin(b"one-shot tests"),
            config: Arc::new(SessionConfig::default()),
        });
        let frames = crate::reply::FrameWriter::new(Box::new(std::io::sink()));
        let reply = ReplyTo::new(Caller::Port { id: 1, frames });
        let ticket = ExecTicket::new();
        exec_once_job(decoded, None, "echo hi".into(), ticket, reply, None, || {})
            .expect("completes inline");
        assert!(ONCE_QUICK_COST_NS.load(Ordering::Relaxed) > 0);
        // What it measured depends on the machine's load; these never fit.
        assert!(!once_quick_fits("echo $x"));
        assert!(!once_quick_fits(&format!(
            "echo {}",
            "x".repeat(QUICK_SCRIPT_BYTES)
        )));
        let shape = |script| script_shape::of(script, &OwnCommands::NONE);
        assert!(fits_budget(shape("echo hi"), 1));
        assert!(
            !fits_budget(shape("echo hi"), 0),
            "an unknown cost never fits"
        );
        assert!(!fits_budget(shape("echo $x"), 1));
        assert!(!fits_budget(shape("echo a; echo b"), QUICK_BUDGET_NS));
    }

    #[test]
    fn a_restored_session_runs_every_script_live() {
        let config = Arc::new(SessionConfig::default());
        let session = Session::new(&decoded(config, b"session tests")).unwrap();
        session.forget_plain();
        assert_eq!(mode(&session, "echo hi"), "live");
    }
}

//! A session: one `bashkit::Bash` behind an async mutex, plus the handles
//! that must stay reachable while a script holds that mutex. This is the
//! core both transports share: the NIF resource (`session/resource.rs`)
//! and the worker process (`worker.rs`) each hold `Arc<Session>`s.
//!
//! Every operation that needs the interpreter (`exec`, `state`, `reset`, ...)
//! is a task on the interpreter runtime that answers its `ReplyTo` (see
//! `run/reply.rs`): no BEAM thread ever waits for the lock. The mutex serializes
//! them per session in the order they were submitted (`session/line.rs`); different
//! sessions run in parallel.
//!
//! This file holds the session itself and its calls' bookkeeping (the line,
//! tickets, cancel); each operation lives in a file of its own below
//! `session/`:
//! - `exec.rs`: the life of an exec, from its turn to its answer;
//! - `cost.rs`: what a session's scripts cost per command, and so where the
//!   next one may run (the caller's scheduler, a worker's frame reader, or
//!   the runners);
//! - `one_shot.rs`: `ExBashkit.exec/1`, a script on a fresh interpreter;
//! - `state.rs` and `reset.rs`: `state/1` and `reset/1`;
//! - `resource.rs`: the session as the node holds it, and the NIFs on it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bashkit::{Bash, FileSystem};
use parking_lot::{Mutex, RwLock};

use crate::callbacks::CallbackChannel;
use crate::config::cache::DecodedConfig;
use crate::config::SessionConfig;
use crate::policy::egress::RequestLog;
use crate::result::GiveUp;
use crate::run::interrupt::Interrupt;
use crate::run::reply::SharedCaller;
use crate::run::shape::OwnCommands;
use crate::run::watchdog::{self, ExecTicket};
use crate::session::line::{Place, Turn};
use crate::term::value::Value;
use crate::term::word_hash::IdMap;
use crate::{run::runtime, run::warm};

mod cost;
mod exec;
pub(crate) mod fork;
pub(crate) mod fs;
pub(crate) mod history;
pub(crate) mod lifecycle;
pub(crate) mod line;
pub(crate) mod mounts;
mod one_shot;
pub(crate) mod recovery;
mod reset;
mod resource;
pub(crate) mod snapshot;
mod state;
pub(crate) mod tar;
pub(crate) mod trash;

pub use exec::{exec, ExecCallOptions};
pub use one_shot::{exec_once_job, once_quick_fits};
pub use reset::reset;
pub use resource::{op_for, Handle};
pub use state::state;

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
    /// `crate::config::Layer`). Replaced by `reset`.
    layer: RwLock<crate::config::Layer>,
    /// The running exec's cancellation state, for `cancel/1`.
    current: Mutex<Option<Arc<ExecTicket>>>,
    /// Every submitted exec not yet ended, by id: `cancel_exec`.
    tickets: Mutex<IdMap<Weak<ExecTicket>>>,
    /// Route of builtin / virtual_fs back-calls, when the session has any.
    channel: Option<Arc<CallbackChannel>>,
    /// The requests its interpreter's transport made since the running
    /// exec began (`policy/egress.rs`). Replaced by `reset`, as `interrupt`.
    requests: Mutex<Arc<RequestLog>>,
    /// Wakes the running exec's waits (sleep, back-calls) on cancel/timeout.
    /// Replaced by `reset` with an interpreter built in advance (each one
    /// is built with its own).
    interrupt: Mutex<Arc<Interrupt>>,
    /// What `new/1` asked for, to rebuild on `reset`.
    config: Arc<SessionConfig>,
    /// The configuration with its term, when it is built from memory alone
    /// (`run/warm.rs`): `reset` then takes an interpreter built in advance.
    /// Shared with `config/cache.rs`, which hands out one decoding per
    /// term it remembers: the term is a few KiB.
    warm: Option<Arc<DecodedConfig>>,
    /// The host mounts in place now: `new/1`'s, plus and minus the runtime
    /// ones (see `session/mounts.rs`). Changed only under the interpreter
    /// lock.
    pub host_mounts: Mutex<Vec<crate::config::MountSpec>>,
    /// No script of this session defined code (a function, alias or trap)
    /// or ran something that could, and it was not restored from a
    /// snapshot: its short scripts may run buffered (`run/shape.rs`).
    /// Cleared under the interpreter lock; `reset` sets it again.
    plain: AtomicBool,
    /// What one command of this session's last exec cost, in nanoseconds,
    /// when that exec was a quick script (`run/shape.rs`); 0 when
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
    /// (`crate::run::shape::SETS_ATTRIBUTES`): its loops stay off the caller's
    /// scheduler. Cleared by `reset`.
    attributes_set: AtomicBool,
    /// Its custom builtins, which its scripts' shapes count as builtins.
    own_commands: OwnCommands,
    /// Its head in the content-addressed store (`session/history.rs`).
    pub(crate) history: history::History,
    /// In a worker: the id its owner names it by (`{:new, id, sid, ...}`),
    /// which its recovery points carry (`session/recovery.rs`).
    pub(crate) worker_sid: std::sync::OnceLock<u64>,
}

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
    /// in advance (`run/warm.rs`).
    pub fn new(decoded: &Arc<DecodedConfig>) -> Result<Arc<Self>, String> {
        let config = Arc::clone(&decoded.config);
        let eligible = warm::eligible(&config);
        let (bash, layer, interrupt, requests, channel) = if eligible {
            let built = warm::take_or_build(&decoded.key, &config)?;
            (
                built.bash,
                built.layer,
                built.interrupt,
                built.requests,
                None,
            )
        } else {
            let interrupt = Interrupt::new();
            let channel = crate::config::callback_channel(&config, &interrupt);
            let layer = crate::config::Layer::new(&config);
            let requests = RequestLog::new();
            let bash = crate::config::build_bash_on(
                &config,
                channel.as_ref(),
                Some(&interrupt),
                &layer,
                &requests,
            )?;
            if crate::config::needs_prepare(&config) {
                runtime::block_on(crate::config::prepare(&bash, &config, channel.as_ref()))?;
            }
            (bash, layer, interrupt, requests, channel)
        };
        LIVE.fetch_add(1, Ordering::Relaxed);
        let warm = eligible.then(|| Arc::clone(decoded));
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(Self {
            id,
            history: history::History::new(id),
            fs: RwLock::new(bash.fs()),
            layer: RwLock::new(layer),
            bash: Arc::new(tokio::sync::Mutex::new(bash)),
            current: Mutex::new(None),
            tickets: Mutex::new(IdMap::default()),
            channel,
            interrupt: Mutex::new(interrupt),
            requests: Mutex::new(requests),
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
            worker_sid: std::sync::OnceLock::new(),
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
    pub fn layer(&self) -> crate::config::Layer {
        self.layer.read().clone()
    }

    /// The session may hold code from now on: a script that could define
    /// some ran, or a snapshot's shell state was restored.
    pub fn forget_plain(&self) {
        self.plain.store(false, Ordering::Relaxed);
        self.quick_cost_ns.store(0, Ordering::Relaxed);
        self.as_built.store(false, Ordering::Relaxed);
    }

    /// Where the interpreter in place now records its requests.
    fn requests(&self) -> Arc<RequestLog> {
        Arc::clone(&self.requests.lock())
    }

    /// The interrupt of the interpreter in place now.
    fn interrupt(&self) -> Arc<Interrupt> {
        Arc::clone(&self.interrupt.lock())
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

    /// Record call `id` (an exec, or a lifecycle call: `session/lifecycle.rs`) so
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

/// Whether a session just built is plain (`Session::plain`). A command
/// policy can hide a builtin that a short script names, which then resolves
/// to a script file on `$PATH`: such sessions run every script live.
fn plain_when_built(config: &SessionConfig) -> bool {
    config.commands.is_none()
}

/// A session of the default configuration, as if Elixir had sent it as
/// the term `key` (its interpreter may come from the shelf, `run/warm.rs`).
#[cfg(test)]
fn test_session(key: &[u8]) -> Arc<Session> {
    let config = Arc::new(SessionConfig::default());
    let decoded = Arc::new(DecodedConfig {
        key: Value::bin(key),
        config,
    });
    Session::new(&decoded).unwrap()
}

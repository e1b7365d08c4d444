//! The tokio runtime that every interpreter runs on, created once per VM.
//!
//! Why our own threads instead of BEAM dirty schedulers: the interpreter
//! recurses deeply (a dirty scheduler's small stack overflows and takes the
//! VM down), and a script that waits for an Elixir back-call must not hold a
//! scheduler thread while it waits (nested execs would starve the bounded
//! dirty pool). A NIF therefore only *submits* work here and returns; the
//! result comes back to the caller as a message.
//!
//! A script is first polled by the thread that submitted it, and only a
//! script that is not done within a short slice becomes a task here (see
//! `run/runner.rs`): the worker threads are the runner pool, one per core, with
//! big stacks, at the lowest CPU priority so the VM's own threads win the
//! CPU. bashkit's live execution yields every 64 commands, so a few runners
//! share the CPU fairly between any number of long scripts, and a script
//! that waits (a back-call into Elixir, `sleep`) holds no thread. Jobs that
//! may compute for long without yielding (snapshots, restores, resets) get
//! a thread each (`spawn_job`); only short ones (`state`, searches) share
//! the runners, which also serve every session's timers.
//!
//! The runtime lives in a `static` and is never dropped: dropping a tokio
//! runtime during VM teardown is a known source of exit-time crashes.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use rustler::{Env, Term};
use tokio::runtime::{Builder, Runtime};
use tokio::sync::Notify;

/// Settings read once from the application environment at load time.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeConfig {
    /// Worker threads (timers, short jobs).
    pub worker_threads: usize,
    /// Threads of the blocking pool (host filesystem calls, session builds).
    pub max_script_threads: usize,
    /// The runner threads' nice value (0..=19; 19, the default, lets every
    /// thread of the VM run first; see `run/runner.rs`).
    pub runner_nice: i32,
    /// Stack size of every interpreter thread, in bytes. The interpreter's
    /// recursion (functions, subshells, substitutions) needs far more than a
    /// scheduler thread offers; the memory is reserved, not committed.
    pub stack_size: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            worker_threads: cores.max(2),
            max_script_threads: 1024,
            runner_nice: 19,
            stack_size: 64 * 1024 * 1024,
        }
    }
}

static CONFIG: OnceLock<RuntimeConfig> = OnceLock::new();
/// Set by the worker executable: there is no BEAM in this process.
static IN_WORKER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Mark this process as a worker (no BEAM, so no scheduler threads).
pub fn set_worker_process() {
    IN_WORKER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this process is a worker (`isolation: :process`).
pub fn in_worker() -> bool {
    IN_WORKER.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether the calling thread is a BEAM scheduler (normal or dirty): such
/// a thread can neither send our messages nor afford to wait for Elixir.
pub fn on_beam_thread() -> bool {
    !in_worker() && rustler::thread::is_scheduler_thread()
}
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Record the configuration; the runtime itself starts lazily on first use.
pub fn configure(config: RuntimeConfig) {
    let _ = CONFIG.set(config);
}

/// The shared runtime, started on first use.
pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let config = CONFIG.get().copied().unwrap_or_default();
        let nice = config.runner_nice;
        let runtime = Builder::new_multi_thread()
            .worker_threads(config.worker_threads)
            .max_blocking_threads(config.max_script_threads)
            .thread_stack_size(config.stack_size)
            .thread_name("ex_bashkit")
            .on_thread_start(move || lower_priority(nice))
            .enable_all()
            .build()
            .expect("ex_bashkit: cannot start the interpreter runtime");
        runtime.spawn(anchor_timers());
        runtime
    })
}

/// How far ahead the timer driver's next wake-up is kept while scripts run
/// (see [`anchor_timers`]): below bashkit's 10 ms budget-check interval.
const ANCHOR_TICK: Duration = Duration::from_millis(5);

/// Ticks without a script before the anchor rests (one second).
const ANCHOR_REST_AFTER: u32 = 200;

/// Scripts started (inline or on a runner); the anchor watches it move.
static SCRIPT_STARTS: AtomicU64 = AtomicU64::new(0);
/// Set while the anchor rests; the next script start wakes it.
static ANCHOR_RESTING: AtomicBool = AtomicBool::new(false);
static ANCHOR_WAKE: Notify = Notify::const_new();

/// Called when a script starts: keeps [`anchor_timers`] ticking.
pub fn note_script_start() {
    SCRIPT_STARTS.fetch_add(1, Ordering::Relaxed);
    if ANCHOR_RESTING.swap(false, Ordering::AcqRel) {
        ANCHOR_WAKE.notify_one();
    }
}

/// Keep a timer pending at most [`ANCHOR_TICK`] ahead while scripts run.
///
/// Why: bashkit arms timers on every exec (its execution timeouts and a
/// 10 ms budget-check interval around each output step), and tokio wakes
/// its parked timer driver (an eventfd write, then lock hand-offs with the
/// woken runner) whenever a new timer is due before the driver's next
/// wake-up, which with no other timer pending is every time. For a script
/// polled inline on a dirty scheduler that was two to three cross-thread
/// wake-ups per `echo hi` (`strace`, `perf` on `sys_enter_write`). With
/// this timer pending, every later deadline is filed without waking anyone;
/// what remains is the budget interval's first tick, which is due at once
/// (one wake-up per exec; bench/DECISIONS.md). It costs one runner wake-up
/// per tick while scripts run; after a second without one it rests, and
/// the next script's start wakes it.
async fn anchor_timers() {
    loop {
        let mut seen = SCRIPT_STARTS.load(Ordering::Relaxed);
        let mut quiet = 0;
        while quiet < ANCHOR_REST_AFTER {
            tokio::time::sleep(ANCHOR_TICK).await;
            let now = SCRIPT_STARTS.load(Ordering::Relaxed);
            quiet = if now == seen { quiet + 1 } else { 0 };
            seen = now;
        }
        ANCHOR_RESTING.store(true, Ordering::Release);
        // A start between the last look and the flag finds it unset and
        // does not notify: look once more.
        if SCRIPT_STARTS.load(Ordering::Relaxed) != seen {
            ANCHOR_RESTING.store(false, Ordering::Release);
            continue;
        }
        ANCHOR_WAKE.notified().await;
    }
}

/// Run `future` on an interpreter thread, detached.
pub fn spawn<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    drop(runtime().spawn(future));
}

/// Scripts submitted and not yet ended (observability: tests, benchmarks).
static RUNNING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many scripts are running or waiting for a thread right now.
pub fn running_scripts() -> u64 {
    RUNNING.load(std::sync::atomic::Ordering::Relaxed)
}

/// One script counted in [`running_scripts`] from `start` until dropped:
/// a script that left the inline path is counted whether it runs, waits
/// for a thread, or waits parked (`run/runner.rs`).
pub struct ScriptCount(());

impl ScriptCount {
    pub fn start() -> Self {
        RUNNING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ScriptCount(())
    }
}

impl Drop for ScriptCount {
    fn drop(&mut self) {
        RUNNING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Run a script-like `future` (a search) on the runner pool, detached,
/// counted in [`running_scripts`] until it ends.
pub fn spawn_script<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let running = ScriptCount::start();
    spawn(async move {
        let _running = running;
        future.await;
    });
}

/// Run a job that may compute for long without yielding (a snapshot or a
/// restore of a large session, a reset writing large `:files`) on a thread
/// of its own, detached. On the shared worker threads it would hold up
/// every other session's timers (`sleep`, deadlines of back-calls) and short
/// jobs until it ends.
pub fn spawn_job<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let handle = runtime().handle().clone();
    drop(runtime().spawn_blocking(move || handle.block_on(future)));
}

/// Give the calling thread (a runner) the nice value `nice`: on Linux the
/// nice value is per thread, so the VM's threads keep theirs.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread with constant arguments.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, nice.max(current));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// `running_scripts/0` for the node's own scripts.
#[rustler::nif(name = "running_scripts")]
fn running_scripts_nif() -> u64 {
    running_scripts()
}

/// Run `job` on a thread of the blocking pool, detached (work that blocks:
/// building a session, the filesystem API in a worker).
pub fn spawn_blocking(job: impl FnOnce() + Send + 'static) {
    drop(runtime().spawn_blocking(job));
}

/// Drive `future` to completion on the calling thread (used by the short,
/// synchronous filesystem NIFs, which run on dirty IO schedulers).
pub fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// The NIF library's `load`: read `[worker_threads: n, max_script_threads: n,
/// stack_size: bytes, runner_nice: 0..19]` (any may be absent) from
/// `config :ex_bashkit`.
pub fn load(env: Env, info: Term) -> bool {
    crate::run::guard::install_panic_hook();
    let mut config = RuntimeConfig::default();
    if let Ok(pairs) = info.decode::<Vec<(rustler::Atom, u64)>>() {
        for (key, value) in pairs {
            let value = usize::try_from(value).unwrap_or(usize::MAX);
            match key.to_term(env).atom_to_string().as_deref() {
                Ok("worker_threads") if value > 0 => config.worker_threads = value,
                Ok("max_script_threads") if value > 0 => config.max_script_threads = value,
                Ok("stack_size") if value >= 1024 * 1024 => config.stack_size = value,
                Ok("runner_nice") if value <= 19 => config.runner_nice = value as i32,
                _ => {}
            }
        }
    }
    configure(config);
    true
}

//! How a script's future is driven: first on the thread that asked for it,
//! then, if it is not done within a time slice, on the runner pool.
//!
//! # The inline fast path
//! Handing every script to another thread costs two cross-thread wake-ups
//! (5–11 µs in pure Rust, `bench/raw` group `handoff`), more than bashkit's
//! own `echo hi`. So the thread that submits a script (in the node, a dirty
//! CPU scheduler, or the caller's own scheduler for a quick script, or a
//! loop with bounded steps, that fits there: `session/cost.rs`, `nif/dirty.rs`,
//! `run/bounded_steps.rs`) first polls the exec future itself, on
//! a big stack of its own switched in with `corosensei` (the
//! interpreter recurses deeply: a scheduler's small stack would overflow).
//! If the future completes within [`SLICE`], the answer goes straight back
//! (the NIF's return value): no thread hand-off, no message. In a worker
//! process the submitting thread reads every frame (`cancel` included), so
//! it polls inline only what a normal scheduler would in the node: a quick
//! script whose commands fit the budget (`Session::quick_call_fits`).
//!
//! # Parking
//! The future leaves the calling thread, still pending, when
//! - it waits for something (a back-call, `sleep`, the network, another
//!   exec holding the session): nothing woke it during its poll, so there is
//!   nothing to do until something does, and no thread must wait for it.
//!   A back-call is sent before that, from right here, with the exec NIF's
//!   env ([`with_nif_env`]): the caller reads it as soon as the NIF returns;
//! - it asks to ([`leave_inline`]): a back-call off an exec NIF (there is
//!   no env to send it with);
//! - it has used its slice. bashkit's live execution (`Bash::execute`)
//!   yields every 64 commands, which is where the slice is checked. On a
//!   normal scheduler it also leaves there when its next 64 commands, at
//!   what the last 64 took, would hold that scheduler past [`NORMAL_HOLD`]
//!   (a dirty scheduler's caller spins while it waits: 270–330 µs of CPU
//!   per exec, which a short loop run here saves).
//!
//! A future that waits stays where it is, in its own waker (`Parking`): it
//! holds no thread and no runner task. Its first wake takes it out. When
//! that wake is the answer to its back-call, handed over by the
//! `callback_reply` NIF, the script goes on inline in that NIF
//! ([`answer_and_resume`]) and its reply goes out from there: an answered
//! back-call wakes no thread at all. That NIF runs where the script was
//! polled: on a normal scheduler for a quick script polled on one
//! ([`on_normal_scheduler`]), else on a dirty CPU scheduler. In a worker,
//! a quick script polled by the frame reader sends its back-call as a
//! frame from there, and the reader that reads the answer resumes it. Any
//! other wake (a timer, a cancel, the session's lock) hands it to the
//! runner pool.
//!
//! A future that has more to do becomes a task of the runner pool: the
//! runtime's worker threads, one per core, big stacks, at the lowest nice
//! value (19 by default, `runner_nice`; see `run/runtime.rs`) so the VM's
//! schedulers win the CPU. Since scripts yield every 64 commands, a few
//! runner threads share the CPU fairly between any number of long scripts.
//! The task answers through its `ReplyTo` as before.
//!
//! # Scripts with a long command
//! A command that runs long without yielding (jq's `reduce`, an awk loop,
//! a sort of a large input) holds whatever thread polls it, for its whole
//! run: bashkit yields only between commands. A script that names one
//! (`crate::run::shape::names_long_command`) therefore skips the inline slice
//! and the runners and gets a thread of its own from the runtime's
//! blocking pool ([`drive_on_own_thread`]), where the OS shares the CPU
//! between such scripts and no pool that others wait for is held.
//!
//! Moving a pending future to another thread is ordinary async Rust: its
//! state lives in its box, not on the stack it was polled on, and whoever
//! polls it next does so with its own waker.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use corosensei::stack::DefaultStack;
use parking_lot::Mutex;
use rustler::sys::ErlNifEnv;
use rustler::Env;

use crate::run::reply::ReplyTo;

/// A script's work, movable between threads.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How long a script may run on the thread that submitted it before it is
/// parked on the runner pool. A dirty scheduler may run longer, but a
/// script past this is a long one: it should share the runners, not hold
/// one of the few dirty schedulers that short scripts need.
pub const SLICE: Duration = Duration::from_micros(500);

/// The longest a script polled on a normal scheduler should hold it
/// (a NIF may take 1 ms). Live execution yields every 64 commands; there
/// such a script also leaves when the next 64, at what the last 64 took,
/// would take it past this. Only a script with bounded steps polls live on
/// a normal scheduler (`run/bounded_steps.rs`), so its stretches cost alike.
const NORMAL_HOLD: Duration = Duration::from_micros(700);

/// The big stack's size: the same as a runner thread's (`run/runtime.rs`). It
/// is reserved address space; only what the recursion touches is committed.
const STACK_SIZE: usize = 64 * 1024 * 1024;

thread_local! {
    /// One big stack per submitting thread, reused by every inline run.
    static BIG_STACK: RefCell<Option<DefaultStack>> = const { RefCell::new(None) };
    /// Set while this thread polls a future inline.
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Set by [`leave_inline`]: park the future after this poll.
    static PARK: Cell<bool> = const { Cell::new(false) };
    /// Set while `callback_reply` hands over an answer: the parked scripts
    /// it wakes, to resume on this thread ([`answer_and_resume`]).
    static ANSWERED: RefCell<Option<Vec<Job>>> = const { RefCell::new(None) };
    /// The env of the exec NIF running on this thread ([`with_nif_env`]).
    static NIF_ENV: Cell<*mut ErlNifEnv> = const { Cell::new(std::ptr::null_mut()) };
    /// Set while a NIF on a normal scheduler polls a quick script
    /// ([`on_normal_scheduler`]).
    static ON_NORMAL: Cell<bool> = const { Cell::new(false) };
}

/// Run `f`, a NIF body on a normal scheduler that polls a quick script
/// (`nif/dirty.rs`, `session/reset.rs`), known as such: a back-call the script
/// makes is answered there too ([`polls_quick_script`]).
pub fn on_normal_scheduler<R>(f: impl FnOnce() -> R) -> R {
    let previous = ON_NORMAL.with(|n| n.replace(true));
    let _restore = RestoreOnNormal(previous);
    f()
}

/// Puts back the flag [`on_normal_scheduler`] replaced, however `f` ends.
struct RestoreOnNormal(bool);

impl Drop for RestoreOnNormal {
    fn drop(&mut self) {
        ON_NORMAL.with(|n| n.set(self.0));
    }
}

/// Whether this thread polls a quick script inline where nothing may hold
/// it for long: a normal scheduler in the node, or a worker's frame reader
/// (which polls nothing else inline). The rest of such a script is quick
/// too, so the answer to its back-call may resume it there as well.
pub fn polls_quick_script() -> bool {
    INLINE.with(Cell::get) && (ON_NORMAL.with(Cell::get) || crate::run::runtime::in_worker())
}

/// Run `f`, an exec NIF's body, with `env` known as that NIF's env: a
/// script it polls inline sends its back-calls with it ([`with_inline_env`]).
pub fn with_nif_env<R>(env: Env<'_>, f: impl FnOnce() -> R) -> R {
    let previous = NIF_ENV.with(|e| e.replace(env.as_c_arg()));
    let _restore = RestoreNifEnv(previous);
    f()
}

/// Puts back the env [`with_nif_env`] replaced, however `f` ends.
struct RestoreNifEnv(*mut ErlNifEnv);

impl Drop for RestoreNifEnv {
    fn drop(&mut self) {
        NIF_ENV.with(|e| e.set(self.0));
    }
}

/// Call `f` with the env of the exec NIF running on this thread, if one is
/// (whether or not it polls a script right now).
pub fn with_nif_env_here<R>(f: impl FnOnce(Option<Env<'_>>) -> R) -> R {
    let env = NIF_ENV.with(Cell::get);
    let marker = ();
    // SAFETY: set by `with_nif_env` for exactly the duration of that NIF
    // call, which is still on the stack below us; the `Env` does not escape
    // `f`.
    f((!env.is_null()).then(|| unsafe { Env::new(&marker, env) }))
}

/// Whether this thread polls a script inline under an exec NIF, whose env
/// can send its messages ([`with_inline_env`]).
pub fn sends_from_nif() -> bool {
    INLINE.with(Cell::get) && !NIF_ENV.with(Cell::get).is_null()
}

/// Call `f` with the env of the NIF that polls a script inline on this
/// thread, if one does: on a BEAM thread, that is the only env a message
/// may be sent with (`enif_send`).
pub fn with_inline_env<R>(f: impl FnOnce(Env<'_>) -> R) -> Option<R> {
    with_caller_env(|env| env.map(f))
}

/// Call `f` with the env a call into the VM needs on this thread: the
/// inline NIF's on a BEAM thread, none on an interpreter thread (rustler's
/// resource monitors panic on either mistake).
pub fn with_caller_env<R>(f: impl FnOnce(Option<Env<'_>>) -> R) -> R {
    if !sends_from_nif() {
        return f(None);
    }
    let marker = ();
    // SAFETY: the pointer is the env of the NIF call that is running on
    // this thread (set by `with_nif_env` for exactly that call's duration,
    // and it is still on the stack below us); the `Env` does not escape `f`.
    let env = unsafe { Env::new(&marker, NIF_ENV.with(Cell::get)) };
    f(Some(env))
}

/// A script's job once it has left the inline path: its output goes to
/// `finish` and its answer to its `ReplyTo`.
type Job = BoxFuture<()>;

/// The waker of a script polled inline, and the place where it waits when
/// nothing woke it during its poll: a waiting script holds no thread and no
/// runner task.
///
/// While the script is polled, a wake only marks it woken (the poll loop
/// polls again). Once it is parked, the first wake takes it out: into the
/// `callback_reply` NIF (or the worker's frame reader) that answered its
/// back-call, which resumes it on its own thread ([`answer_and_resume`]),
/// or else onto the runner pool.
/// That spares a back-call's answer a runner's wake-up, and the script's
/// reply then goes out from that NIF too.
struct Parking {
    state: Mutex<Parked>,
}

enum Parked {
    /// Being polled; nothing woke it yet.
    Polling,
    /// Woken while being polled (or before it could be parked).
    Woken,
    /// Waiting for its first wake.
    Waiting(Job),
    /// Handed on; later wakes are for whoever polls it now.
    Gone,
}

impl Parking {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(Parked::Polling),
        })
    }

    /// A poll starts: wakes from now on count for it.
    fn polling(&self) {
        *self.state.lock() = Parked::Polling;
    }

    fn was_woken(&self) -> bool {
        matches!(*self.state.lock(), Parked::Woken)
    }

    /// Leave `job` here until its first wake; if that already came (between
    /// the last poll and now), hand it on at once.
    fn park(&self, job: Job) {
        let mut state = self.state.lock();
        match *state {
            Parked::Polling => *state = Parked::Waiting(job),
            _ => {
                *state = Parked::Gone;
                drop(state);
                hand_on(job);
            }
        }
    }
}

impl Wake for Parking {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.lock();
        match std::mem::replace(&mut *state, Parked::Gone) {
            Parked::Polling => *state = Parked::Woken,
            Parked::Waiting(job) => {
                drop(state);
                hand_on(job);
            }
            other => *state = other,
        }
    }
}

/// A woken job goes on: in the `callback_reply` NIF answering on this
/// thread, if that is where it was woken, else on the runner pool.
fn hand_on(job: Job) {
    let job = ANSWERED.with(|answered| match answered.borrow_mut().as_mut() {
        Some(resume_here) => {
            resume_here.push(job);
            None
        }
        None => Some(job),
    });
    if let Some(job) = job {
        crate::run::runtime::spawn(job);
    }
}

/// Run `answer` (the `callback_reply` NIF, or a worker's frame reader,
/// handing Elixir's answer to its back-call), then resume here, inline,
/// every parked script it woke. `env` is that NIF's: the scripts' messages
/// go out with it (a worker's go out as frames, from any thread).
pub fn answer_and_resume<R>(env: Option<Env<'_>>, answer: impl FnOnce() -> R) -> R {
    let previous = ANSWERED.with(|a| a.replace(Some(Vec::new())));
    let answered = answer();
    let woken = ANSWERED.with(|a| a.replace(previous)).unwrap_or_default();
    let resume = || {
        for job in woken {
            run_job_inline(job);
        }
    };
    match env {
        Some(env) => with_nif_env(env, resume),
        None => resume(),
    }
    answered
}

/// Poll a woken job inline; park it again or move it to the runners as
/// [`drive`] does.
fn run_job_inline(mut job: Job) {
    let parking = Parking::new();
    match poll_inline(&mut job, &parking) {
        Polled::Done(()) => {}
        Polled::Waiting => parking.park(job),
        Polled::Yielded => crate::run::runtime::spawn(job),
    }
}

/// Resolves at once on a runner thread; on a thread polling inline it asks
/// to be parked first. Await it before anything that must not happen on the
/// submitting thread (sending a back-call from a BEAM thread).
pub async fn leave_inline() {
    std::future::poll_fn(|cx| {
        if INLINE.with(Cell::get) {
            PARK.with(|p| p.set(true));
            cx.waker().wake_by_ref();
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

/// Whether the calling thread is polling a script inline right now.
#[cfg(test)]
fn is_inline() -> bool {
    INLINE.with(Cell::get)
}

/// Drive `work`: inline first when `inline` is true, and if it does not
/// complete there, run `before_park` on this thread and leave it parked
/// (it waits for something) or hand it to the runner pool (it has more to
/// do), where `finish` gets its output and `reply`. Returns the output when
/// it completed inline (`reply` is then dismissed: the caller answers its
/// own way).
pub fn drive<T: Send + 'static>(
    mut work: BoxFuture<T>,
    inline: bool,
    reply: ReplyTo,
    before_park: impl FnOnce(),
    finish: impl FnOnce(T, ReplyTo) + Send + 'static,
) -> Option<T> {
    crate::run::runtime::note_script_start();
    let parking = Parking::new();
    let polled = match inline {
        true => poll_inline(&mut work, &parking),
        false => Polled::Yielded,
    };
    if let Polled::Done(output) = polled {
        reply.dismiss();
        return Some(output);
    }
    // From here on the reply is sent from other threads, or later.
    reply.keep();
    before_park();
    let running = crate::run::runtime::ScriptCount::start();
    let job: Job = Box::pin(async move {
        let _running = running;
        finish(work.await, reply)
    });
    match polled {
        Polled::Waiting => parking.park(job),
        _ => crate::run::runtime::spawn(job),
    }
    None
}

/// Drive `work` on a thread of its own, never inline nor on the runner
/// pool: a script that names a command which may run for long without
/// yielding (`crate::run::shape::names_long_command`) would hold the thread it
/// starts on, a dirty scheduler or a runner, while other scripts wait for
/// one. On its own thread (the runtime's blocking pool: big stacks, the
/// runners' priority) the OS shares the CPU between such scripts instead.
/// `before_park` runs on this thread first, and `finish` gets the output
/// and `reply`, as with [`drive`].
pub fn drive_on_own_thread<T: Send + 'static>(
    work: BoxFuture<T>,
    reply: ReplyTo,
    before_park: impl FnOnce(),
    finish: impl FnOnce(T, ReplyTo) + Send + 'static,
) {
    crate::run::runtime::note_script_start();
    reply.keep();
    before_park();
    let running = crate::run::runtime::ScriptCount::start();
    crate::run::runtime::spawn_blocking(move || {
        let _running = running;
        let output = crate::run::runtime::block_on(work);
        finish(output, reply);
    });
}

/// How an inline poll ended.
enum Polled<T> {
    Done(T),
    /// Nothing woke it: it waits for something.
    Waiting,
    /// It has more to do: its slice is over, or it asked to leave.
    Yielded,
}

/// Poll `work` on this thread's big stack, with `parking` as its waker,
/// until it completes, waits, asks to leave, or its slice is over.
fn poll_inline<T>(work: &mut BoxFuture<T>, parking: &Arc<Parking>) -> Polled<T> {
    let _context = crate::run::runtime::runtime().enter();
    with_big_stack(|| {
        let waker = Waker::from(Arc::clone(parking));
        let mut cx = Context::from_waker(&waker);
        let started = Instant::now();
        let mut stretch_started = started;
        let on_normal = ON_NORMAL.with(Cell::get);
        INLINE.with(|i| i.set(true));
        let _reset = Reset;
        loop {
            parking.polling();
            if let Poll::Ready(output) = work.as_mut().poll(&mut cx) {
                return Polled::Done(output);
            }
            let now = Instant::now();
            let (elapsed, stretch) = (now - started, now - stretch_started);
            stretch_started = now;
            let held_too_long = on_normal && elapsed + stretch >= NORMAL_HOLD;
            if PARK.with(|p| p.replace(false)) || elapsed >= SLICE || held_too_long {
                return Polled::Yielded;
            }
            if !parking.was_woken() {
                return Polled::Waiting;
            }
        }
    })
}

/// Clears the inline flags however the poll loop ends (a panic included).
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        INLINE.with(|i| i.set(false));
        PARK.with(|p| p.set(false));
    }
}

/// Run `f` on this thread's big stack (made on first use), or on a fresh
/// one if it is already in use.
fn with_big_stack<R>(f: impl FnOnce() -> R) -> R {
    BIG_STACK.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = DefaultStack::new(STACK_SIZE).ok();
            }
            match slot.as_mut() {
                Some(stack) => corosensei::on_stack(stack, f),
                None => f(),
            }
        }
        Err(_) => match DefaultStack::new(STACK_SIZE) {
            Ok(stack) => corosensei::on_stack(stack, f),
            Err(_) => f(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed<T: Send + 'static>(f: impl Future<Output = T> + Send + 'static) -> BoxFuture<T> {
        Box::pin(f)
    }

    /// A reply nobody reads (a worker request whose frames go nowhere).
    fn reply() -> ReplyTo {
        let frames = crate::run::reply::FrameWriter::new(Box::new(std::io::sink()));
        ReplyTo::new(crate::run::reply::Caller::Port { id: 1, frames })
    }

    #[test]
    fn completes_inline_without_parking() {
        let out = drive(
            boxed(async { 7 }),
            true,
            reply(),
            || panic!("parked"),
            |_, _| {},
        );
        assert_eq!(out, Some(7));
    }

    #[test]
    fn parks_a_future_that_waits_and_finishes_it_on_the_runners() {
        let (tx, rx) = std::sync::mpsc::channel();
        let work = boxed(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            9
        });
        let mut parked = false;
        let out = drive(
            work,
            true,
            reply(),
            || parked = true,
            move |v, r| {
                r.dismiss();
                tx.send(v).unwrap()
            },
        );
        assert_eq!(out, None);
        assert!(parked);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 9);
    }

    #[test]
    fn leave_inline_parks_and_then_runs_off_the_submitting_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let work = boxed(async {
            leave_inline().await;
            is_inline()
        });
        let out = drive(
            work,
            true,
            reply(),
            || {},
            move |v, r| {
                r.dismiss();
                tx.send(v).unwrap()
            },
        );
        assert_eq!(out, None);
        assert!(!rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }

    /// A script of `stretches` stretches of `each` work, yielding after
    /// each: how many it ran when an inline poll gave it up.
    fn stretches_run_inline(stretches: u32, each: Duration, on_normal: bool) -> u32 {
        let ran = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = Arc::clone(&ran);
        let mut work = boxed(async move {
            for _ in 0..stretches {
                let started = Instant::now();
                while started.elapsed() < each {
                    std::hint::spin_loop();
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                bashkit_like_yield().await;
            }
        });
        let parking = Parking::new();
        let polled = match on_normal {
            true => on_normal_scheduler(|| poll_inline(&mut work, &parking)),
            false => poll_inline(&mut work, &parking),
        };
        assert!(matches!(polled, Polled::Yielded));
        ran.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What bashkit's live execution does every 64 commands.
    async fn bashkit_like_yield() {
        let mut yielded = false;
        std::future::poll_fn(move |cx| {
            if std::mem::replace(&mut yielded, true) {
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        })
        .await
    }

    #[test]
    fn on_a_normal_scheduler_a_script_leaves_before_its_next_stretch_would_hold_it_too_long() {
        // A second stretch like the first would end past NORMAL_HOLD: it
        // leaves after one (elsewhere it would run a second, as it is
        // still within its slice; not asserted: a test thread preempted
        // for 100 µs would end the slice first).
        let long = Duration::from_micros(400);
        assert_eq!(stretches_run_inline(10, long, true), 1);
        // Short stretches go on there (until the slice is over).
        let short = Duration::from_micros(100);
        assert!(stretches_run_inline(100, short, true) >= 2);
    }

    #[test]
    fn deep_recursion_fits_the_big_stack() {
        fn depth(n: u64) -> u64 {
            let pad = std::hint::black_box([0u8; 512]);
            if n == 0 {
                u64::from(pad[0])
            } else {
                1 + depth(n - 1)
            }
        }
        // Over 10 MiB of frames: far past a test thread's 2 MiB stack.
        let out = drive(
            boxed(async { depth(20_000) }),
            true,
            reply(),
            || {},
            |_, _| {},
        );
        assert_eq!(out, Some(20_000));
    }
}

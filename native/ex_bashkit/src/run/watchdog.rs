//! Deadlines for per-call timeouts (`exec/3`'s `:timeout_ms`).
//!
//! One plain thread sleeps until the earliest deadline and then cancels that
//! exec through its cancellation token, which bashkit polls at every command
//! boundary and inside its budget checks. A thread of its own, not a tokio
//! timer: a script that never yields can keep every interpreter thread busy,
//! and the deadline must still fire.
//!
//! The same thread answers an exec cancelled in the node that has not
//! stopped a second later ([`answer_if_still_running`]): the process that
//! cancels is not the one that waits, so nothing in the VM would.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::Notify;

use crate::result::{ExecOutcome, OutputSoFar, Partial, SharedPartial};
use crate::run::interrupt::Interrupt;
use crate::run::reply::{Caller, SharedCaller, FINAL_REPLY};

/// The cancellation state of one exec, shared by the exec, `cancel/1` and
/// the watchdog. It exists from submission on, so an exec can be cancelled
/// (or time out) while it still waits for its turn; the interpreter's token
/// is only touched once the exec runs, since it is shared by all of them.
#[derive(Debug)]
pub struct ExecTicket {
    /// How the exec is stopped, and since when it runs, once it runs.
    running: Mutex<Option<Running>>,
    cancelled: AtomicBool,
    timed_out: AtomicBool,
    /// Wakes `stopped()`: a call still waiting for its session's turn gives
    /// up at once when cancelled or timed out.
    stop: Notify,
    /// The exec's output so far, from its submission until it ends, and
    /// where its answer goes: read when its caller (or a worker's owner)
    /// answers a stopped exec that has not ended, and so that a caller who
    /// gives up on it gets nothing more ([`give_up`](Self::give_up)).
    attached: OnceLock<Attached>,
}

/// Where an exec writes its output so far and sends its answer: held by
/// the exec until it ends.
#[derive(Debug)]
struct Attached {
    output: Weak<Mutex<Partial>>,
    reply: Weak<Mutex<Caller>>,
}

/// A running exec: the interpreter's token and the session's interrupt,
/// and when it got its turn.
#[derive(Debug)]
struct Running {
    token: Arc<AtomicBool>,
    interrupt: Arc<Interrupt>,
    since: Instant,
}

impl ExecTicket {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            running: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            timed_out: AtomicBool::new(false),
            stop: Notify::new(),
            attached: OnceLock::new(),
        })
    }

    /// Where the exec writes its output and sends its answer (set once, at
    /// submission; the exec holds both until it ends).
    pub fn attach(&self, partial: &SharedPartial, caller: &SharedCaller) {
        let _ = self.attached.set(Attached {
            output: Arc::downgrade(partial),
            reply: Arc::downgrade(caller),
        });
    }

    /// The caller answers the exec itself (past its deadline, a command
    /// that does not check its token still runs): in the node nothing more
    /// reaches that caller, not even the exec's own answer (a worker's
    /// owner drops what comes late itself). Returns the output so far, or
    /// `None`, giving up nothing, if the exec has ended: its own answer is
    /// then sent, or on its way.
    pub fn give_up(&self) -> Option<OutputSoFar> {
        // Gone: the exec has ended, and its answer was sent or is on its
        // way. If it ends after this, its answer was sent before the close
        // below (the caller finds it in its mailbox) or is dropped by it.
        let attached = self.attached.get()?;
        let partial = attached.output.upgrade()?;
        if let Some(caller) = attached.reply.upgrade() {
            caller.lock().stop_sending();
        }
        let partial = partial.lock();
        Some(partial.copy())
    }

    /// A cancelled exec that still runs (a command that does not check its
    /// token): its caller gets the cancel error with the output so far now,
    /// as a worker's owner answers one (`ExBashkit.Worker`), and nothing of
    /// the exec after it. Nothing if it has ended, or its caller already
    /// has an answer (its own, which closes the reply, or a give-up).
    fn answer_cancelled(&self) {
        // The output first: its lock is not taken under the caller's.
        let Some(attached) = self.attached.get() else {
            return;
        };
        let Some(output) = attached.output.upgrade() else {
            return;
        };
        let output = output.lock().copy();
        let Some(caller) = attached.reply.upgrade() else {
            return;
        };
        let mut caller = caller.lock();
        if caller.awaits_answer() {
            caller.send(FINAL_REPLY, &ExecOutcome::cancelled_running(output));
            caller.stop_sending();
        }
    }

    /// Whether the exec should have ended by now: it was timed out or
    /// cancelled, or it has run for `limit` (its session's own timeout,
    /// which bashkit applies from the exec's start). If not, how long until
    /// it should have (`None` while it still waits for its turn).
    pub fn overdue(&self, limit: Duration) -> Result<(), Option<Duration>> {
        if self.is_stopped() {
            return Ok(());
        }
        let since = self.running.lock().as_ref().map(|running| running.since);
        match since {
            Some(since) => match limit.checked_sub(since.elapsed()) {
                Some(left) if !left.is_zero() => Err(Some(left)),
                _ => Ok(()),
            },
            None => Err(None),
        }
    }

    /// The exec starts running with `token` and `interrupt` (both re-armed
    /// by the caller); a cancel or timeout that came first takes effect now.
    pub fn start(&self, token: Arc<AtomicBool>, interrupt: Arc<Interrupt>) {
        let since = Instant::now();
        let mut slot = self.running.lock();
        if self.was_cancelled() || self.timed_out() {
            token.store(true, Ordering::SeqCst);
            interrupt.raise();
        }
        *slot = Some(Running {
            token,
            interrupt,
            since,
        });
    }

    fn stop(&self, flag: &AtomicBool) {
        let slot = self.running.lock();
        flag.store(true, Ordering::SeqCst);
        if let Some(running) = &*slot {
            running.token.store(true, Ordering::SeqCst);
            running.interrupt.raise();
        }
        self.stop.notify_waiters();
    }

    /// Whether the call was cancelled or timed out.
    pub fn is_stopped(&self) -> bool {
        self.was_cancelled() || self.timed_out()
    }

    /// Resolves once the call is cancelled or timed out.
    pub async fn stopped(&self) {
        loop {
            let notified = self.stop.notified();
            tokio::pin!(notified);
            // Register before checking, so a stop in between is not lost.
            notified.as_mut().enable();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }

    /// Stop the exec at its next check (`cancel/1`).
    pub fn cancel(&self) {
        self.stop(&self.cancelled);
    }

    fn time_out(&self) {
        self.stop(&self.timed_out);
    }

    pub fn was_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::SeqCst)
    }
}

struct Entry {
    at: Instant,
    seq: u64,
    ticket: Weak<ExecTicket>,
    due: Due,
}

/// What the watchdog does to an exec whose entry comes due.
#[derive(Clone, Copy)]
enum Due {
    /// Time it out (its per-call `:timeout_ms`).
    TimeOut,
    /// Answer it in its stead if it still runs (cancelled in the node).
    AnswerCancelled,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct Queue {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    /// Size at which entries of ended execs are swept out, so a stream of
    /// short execs with long deadlines cannot grow the heap without bound.
    sweep_at: usize,
}

struct Watchdog {
    queue: Mutex<Queue>,
    wake: Condvar,
}

static WATCHDOG: LazyLock<Arc<Watchdog>> = LazyLock::new(|| {
    let dog = Arc::new(Watchdog {
        queue: Mutex::new(Queue {
            heap: BinaryHeap::new(),
            seq: 0,
            sweep_at: 1024,
        }),
        wake: Condvar::new(),
    });
    let worker = Arc::clone(&dog);
    std::thread::Builder::new()
        .name("ex_bashkit_watchdog".into())
        .spawn(move || worker.run())
        .expect("ex_bashkit: cannot start the watchdog thread");
    dog
});

impl Watchdog {
    fn run(&self) {
        let mut queue = self.queue.lock();
        loop {
            let now = Instant::now();
            while queue.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
                let Reverse(entry) = queue.heap.pop().expect("peeked");
                // A ticket already dropped belongs to an exec that ended.
                if let Some(ticket) = entry.ticket.upgrade() {
                    match entry.due {
                        Due::TimeOut => ticket.time_out(),
                        // It copies the output and sends a message: not
                        // while other execs' deadlines wait for the lock.
                        Due::AnswerCancelled => {
                            parking_lot::MutexGuard::unlocked(&mut queue, || {
                                ticket.answer_cancelled()
                            })
                        }
                    }
                }
            }
            match queue.heap.peek().map(|Reverse(e)| e.at) {
                Some(at) => {
                    self.wake.wait_until(&mut queue, at);
                }
                None => self.wake.wait(&mut queue),
            }
        }
    }
}

/// Time `ticket` out at `at` unless it has ended (been dropped) by then.
///
/// The watchdog is woken only when `at` comes before every deadline it
/// waits for: it sleeps until the earliest one, and wakes then anyway.
/// Calls that all pass the same `:timeout_ms` (an agent's loop) so queue
/// their deadlines without a thread wake-up each, which costs the caller
/// more than the rest of a short exec's bookkeeping.
pub fn schedule(at: Instant, ticket: &Arc<ExecTicket>) {
    push(at, ticket, Due::TimeOut);
}

/// How long an exec past its deadline, or cancelled, may take to stop
/// before it is answered in its stead: the one slack of both languages
/// (`ExBashkit.Deadline` reads it through [`answer_slack_ms`]).
pub const ANSWER_SLACK: Duration = Duration::from_secs(1);

#[rustler::nif]
fn answer_slack_ms() -> u64 {
    ANSWER_SLACK.as_millis() as u64
}

/// In the node, answer cancelled `ticket` [`ANSWER_SLACK`] from now if it
/// still runs then ([`ExecTicket::answer_cancelled`]).
pub fn answer_if_still_running(ticket: &Arc<ExecTicket>) {
    push(Instant::now() + ANSWER_SLACK, ticket, Due::AnswerCancelled);
}

fn push(at: Instant, ticket: &Arc<ExecTicket>, due: Due) {
    let dog = &*WATCHDOG;
    let mut queue = dog.queue.lock();
    if queue.heap.len() >= queue.sweep_at {
        queue.heap.retain(|Reverse(e)| e.ticket.strong_count() > 0);
        queue.sweep_at = (queue.heap.len() * 2).max(1024);
    }
    // The watchdog waits for a deadline no later than any in the heap (it
    // is woken for each earlier one), so a later `at` needs no wake-up.
    let earlier = queue.heap.peek().is_none_or(|Reverse(first)| at < first.at);
    queue.seq += 1;
    let seq = queue.seq;
    queue.heap.push(Reverse(Entry {
        at,
        seq,
        ticket: Arc::downgrade(ticket),
        due,
    }));
    if earlier {
        dog.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::reply::ReplyTo;
    use std::time::Duration;

    #[test]
    fn fires_at_the_deadline_and_skips_ended_execs() {
        let token = Arc::new(AtomicBool::new(false));
        let ticket = ExecTicket::new();
        ticket.start(Arc::clone(&token), Interrupt::new());
        let ended = ExecTicket::new();
        schedule(Instant::now() + Duration::from_millis(20), &ended);
        drop(ended);
        schedule(Instant::now() + Duration::from_millis(30), &ticket);
        let start = Instant::now();
        while !token.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "deadline never fired"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(ticket.timed_out());
        assert!(!ticket.was_cancelled());
    }

    /// Waits up to 5 s for `token` to be raised.
    fn fired(token: &AtomicBool) -> bool {
        let start = Instant::now();
        while !token.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        token.load(Ordering::SeqCst)
    }

    #[test]
    fn an_earlier_deadline_wakes_the_watchdog_and_later_ones_still_fire() {
        let started = |ticket: &Arc<ExecTicket>| {
            let token = Arc::new(AtomicBool::new(false));
            ticket.start(Arc::clone(&token), Interrupt::new());
            token
        };
        // The watchdog first sleeps towards a far deadline; one that comes
        // before it must wake it.
        let far = ExecTicket::new();
        let far_token = started(&far);
        schedule(Instant::now() + Duration::from_secs(3_600), &far);
        let near = ExecTicket::new();
        let near_token = started(&near);
        schedule(Instant::now() + Duration::from_millis(30), &near);
        // Scheduled without a wake-up: it is later than the near one.
        let next = ExecTicket::new();
        let next_token = started(&next);
        schedule(Instant::now() + Duration::from_millis(60), &next);
        assert!(fired(&near_token), "the earlier deadline never fired");
        assert!(fired(&next_token), "the later deadline never fired");
        assert!(!far_token.load(Ordering::SeqCst));
    }

    #[test]
    fn giving_up_copies_the_output_while_the_exec_lives() {
        let ticket = ExecTicket::new();
        assert_eq!(ticket.give_up(), None, "nothing attached yet");
        let partial = Partial::shared();
        let frames = crate::run::reply::FrameWriter::new(Box::new(std::io::sink()));
        let caller = ReplyTo::new(Caller::Port { id: 1, frames }).caller();
        ticket.attach(&partial, &caller);
        partial.lock().push(b"out", b"err");
        assert_eq!(ticket.give_up(), Some((b"out".to_vec(), b"err".to_vec())));
        // A copy: the exec's own output is untouched.
        assert_eq!(partial.lock().take(), (b"out".to_vec(), b"err".to_vec()));
        drop(partial);
        assert_eq!(ticket.give_up(), None, "the exec has ended");
    }

    #[test]
    fn overdue_counts_the_session_limit_from_the_start() {
        let limit = Duration::from_millis(50);
        let ticket = ExecTicket::new();
        assert_eq!(
            ticket.overdue(limit),
            Err(None),
            "still waiting for its turn"
        );
        ticket.start(Arc::new(AtomicBool::new(false)), Interrupt::new());
        assert!(matches!(ticket.overdue(limit), Err(Some(left)) if left <= limit));
        std::thread::sleep(limit);
        assert_eq!(ticket.overdue(limit), Ok(()), "ran for its limit");
        let stopped = ExecTicket::new();
        stopped.cancel();
        assert_eq!(stopped.overdue(limit), Ok(()), "cancelled before it ran");
    }

    #[test]
    fn a_cancel_before_start_applies_at_start_only() {
        let token = Arc::new(AtomicBool::new(false));
        let ticket = ExecTicket::new();
        ticket.cancel();
        assert!(
            !token.load(Ordering::SeqCst),
            "a queued exec must not stop the running one"
        );
        ticket.start(Arc::clone(&token), Interrupt::new());
        assert!(token.load(Ordering::SeqCst));
    }
}

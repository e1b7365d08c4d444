//! What a session's scripts cost per command, measured as they run, and so
//! where the next one may run: the caller's normal scheduler (in the node),
//! a worker's frame reader, or the runners. A script is polled where it was
//! submitted only when its commands, at what the session's last measured
//! exec paid per command, fit a budget well inside the 1 ms a NIF may take.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bashkit::Bash;

use crate::result::Metrics;
use crate::run::shape::ScriptShape;

use super::{ExecCallOptions, Session};

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
pub(super) const QUICK_SCRIPT_BYTES: usize = 512;

/// What a quick script may be expected to cost to run on a normal
/// scheduler: a fifth of the 1 ms a NIF may take, leaving room for an
/// estimate that is off (the OS can always preempt a thread).
const QUICK_BUDGET_NS: u64 = 200_000;

/// Whether a script of `shape` is quick and its commands, at `cost_ns`
/// each (0: unknown), fit [`QUICK_BUDGET_NS`].
pub(super) fn fits_budget(shape: ScriptShape, cost_ns: u64) -> bool {
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
/// scheduler past 700 µs (`run/runner.rs`): so only its first stretch is
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
/// noise (bench/DECISIONS.md, short loops), so the caller's scheduler
/// is kept for loops that end there.
const LOOP_INLINE_WALL_US: u64 = 800;

/// What the first 64 commands of a script with bounded steps may be
/// expected to cost on a normal scheduler. The cost per command it is read
/// against is an exec's wall time over its commands, fixed costs included:
/// 3–6 µs for a short loop on a session with few exported variables
/// (bench/DECISIONS.md), against up to 340 µs with 80 000 of them.
const STEPS_BUDGET_NS: u64 = 500_000;

impl Session {
    /// Whether `script` may run on a normal scheduler: it is quick (its
    /// work is bounded by its text, `run/shape.rs`), the session is plain
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
    /// attributes: it runs there for a time slice at most (`run/runner.rs`).
    pub fn quick_fits(&self, script: &str, poller: InlinePoller) -> bool {
        if script.len() > QUICK_SCRIPT_BYTES || !self.plain.load(Ordering::Relaxed) {
            return false;
        }
        let cost = self.quick_cost_ns.load(Ordering::Relaxed);
        if cost == 0 || !self.host_mounts.lock().is_empty() {
            return false;
        }
        let shape = crate::run::shape::of(script, &self.own_commands);
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
    pub(super) fn note_cost(
        &self,
        shape: Option<ScriptShape>,
        metrics: &Metrics,
        waited: Duration,
    ) {
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
}

/// What an exec ran and how long it took: the interpreter's command count
/// and the clock, read at its start and again at its end.
pub(super) struct Metering {
    started: Instant,
    commands: u64,
}

impl Metering {
    pub(super) fn start(bash: &Bash) -> Self {
        Self {
            started: Instant::now(),
            commands: bash.session_counters().0,
        }
    }

    pub(super) fn stop(self, bash: &Bash) -> Metrics {
        Metrics {
            commands: bash.session_counters().0.saturating_sub(self.commands),
            wall_time_us: u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::result::ExecOutcome;
    use crate::run::reply::{Caller, ReplyTo};
    use crate::run::shape::OwnCommands;
    use crate::run::watchdog::ExecTicket;
    use crate::term::value::Bytes;

    use super::super::{exec, test_session};
    use super::InlinePoller::{FrameReader, NormalScheduler};
    use super::*;

    fn run(session: &Arc<Session>, script: &str) -> ExecOutcome {
        let frames = crate::run::reply::FrameWriter::new(Box::new(std::io::sink()));
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
        let session = test_session(b"session tests");
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
    fn a_quick_script_fits_its_budget_only_at_a_known_cost() {
        let shape = |script| crate::run::shape::of(script, &OwnCommands::NONE);
        assert!(fits_budget(shape("echo hi"), 1));
        assert!(
            !fits_budget(shape("echo hi"), 0),
            "an unknown cost never fits"
        );
        assert!(!fits_budget(shape("echo $x"), 1));
        assert!(!fits_budget(shape("echo a; echo b"), QUICK_BUDGET_NS));
    }

    #[test]
    fn a_quick_script_fits_when_its_commands_at_the_measured_cost_fit_the_budget() {
        let session = test_session(b"session tests");
        let measured = |wall_time_us| Metrics {
            commands: 1,
            wall_time_us,
        };
        let quick = Some(crate::run::shape::of("echo hi", &OwnCommands::NONE));
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
        let session = test_session(b"session tests");
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
        let looped = Some(crate::run::shape::of(looping, &OwnCommands::NONE));
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
}

//! The life of an exec on a session: its place in the session's line, its
//! ticket (cancel, per-call timeout), the way bashkit runs it (live,
//! buffered or streamed), what it cost, the changes it made, and its answer.
//! Both transports call [`exec`]: the NIF (`resource.rs`) and a worker's
//! frame reader (`worker.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bashkit::{Bash, ExecOptions, ExecResult};

use crate::fs::changes;
use crate::result::{ExecOutcome, Partial, SharedPartial};
use crate::run::reply::{Payload, ReplyTo, SharedCaller};
use crate::run::shape::ScriptShape;
use crate::run::watchdog::{self, ExecTicket};
use crate::term::value::{Bytes, Value};
use crate::{map_struct, run::guard, run::runtime};

use super::cost::{InlinePoller, Metering};
use super::Session;

impl Session {
    /// How `script` runs on this session now: buffered when it is short and
    /// the session plain, or when live execution would lose its output. A script that may leave code behind makes the
    /// session not plain first, whether it completes or not. A session that
    /// is not plain runs everything live: its scripts are not even parsed.
    /// Also gives the script's shape, read on a plain session only: what
    /// its exec costs is then noted ([`Session::note_cost`]).
    fn run_mode_for(&self, script: &str) -> (RunMode<'static>, Option<ScriptShape>) {
        let lost_live = crate::run::shape::loses_live_output(script);
        if !self.plain.load(Ordering::Relaxed) {
            return match lost_live {
                true => (RunMode::Buffered, None),
                false => (RunMode::Live, None),
            };
        }
        let shape = crate::run::shape::of(script, &self.own_commands);
        if !shape.keeps_session_plain {
            self.forget_plain();
        }
        if shape.sets_attributes {
            self.attributes_set.store(true, Ordering::Relaxed);
        }
        match lost_live {
            true => (RunMode::Buffered, Some(shape)),
            false => (RunMode::for_plain(shape), Some(shape)),
        }
    }
}

map_struct! {
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
}

/// Marks the session busy with `ticket` while it runs.
struct Running<'a> {
    session: &'a Session,
}

impl<'a> Running<'a> {
    fn start(
        session: &'a Session,
        ticket: &Arc<ExecTicket>,
        bash: &Bash,
        deadline: Option<Instant>,
    ) -> Self {
        // bashkit leaves resetting the token to us: reset it before this
        // exec becomes cancellable.
        let token = bash.cancellation_token();
        token.store(false, Ordering::SeqCst);
        let interrupt = session.interrupt();
        interrupt.clear();
        interrupt.set_deadline(deadline);
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

/// How a script is run by bashkit.
pub(super) enum RunMode<'a> {
    /// Live execution (`Bash::execute`): it yields every 64 commands, so a
    /// long script shares the runners.
    Live,
    /// Buffered execution with a per-command output callback (what was
    /// written so far is kept for a failed exec's answer). It never yields:
    /// only for short scripts (`run/shape.rs`), which would not yield
    /// live either, and costs less than live execution; and, on a thread of
    /// their own, for scripts whose output live execution would lose
    /// (`shape::loses_live_output`).
    Buffered,
    /// Buffered, each command's output also sent to the caller as it comes
    /// (`stream_to`, `stream/3`: one chunk per command, which live
    /// execution's pipes would merge).
    Streamed(&'a SharedCaller),
}

impl RunMode<'static> {
    /// The mode of a script of `shape` on an interpreter that holds no code
    /// of its own.
    pub(super) fn for_plain(shape: ScriptShape) -> Self {
        match shape.short {
            true => RunMode::Buffered,
            false => RunMode::Live,
        }
    }
}

/// Run `script` the way `mode` says.
///
/// Live, it yields every 64 commands, which lets the runner (`run/runner.rs`)
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
pub(super) async fn run_script(
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
/// completed on the calling thread (the inline fast path, `run/runner.rs`):
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
    let deadline = call
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    if let Some(deadline) = deadline {
        watchdog::schedule(deadline, &ticket);
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
    let own_thread = crate::run::shape::names_long_command(&script)
        || crate::run::shape::loses_live_output(&script);
    let work = Box::pin(async move {
        let outcome = guard::catch_future(async {
            // A deadline or cancel that comes while the exec still waits for
            // its turn ends it there (the exec never runs).
            let Some(mut bash) = Session::turn(&ticket, place).await else {
                return ExecOutcome::stopped(&ticket, call.timeout_ms);
            };
            let _running = Running::start(&session, &ticket, &bash, deadline);
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
            // What an exec that ended early left behind is not this one's.
            let requests = session.requests();
            requests.take();
            let durable = super::recovery::keeps_points(&session);
            if durable {
                super::recovery::note_built(&session, &bash);
            }
            let metering = Metering::start(&bash);
            let result = run_script(&mut bash, &script, options, &partial, mode).await;
            let metrics = metering.stop(&bash);
            if durable {
                super::recovery::after_call(&session, &bash, &caller).await;
            }
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
                requests.take(),
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
        crate::run::runner::drive_on_own_thread(work, reply, before_park, finish);
        return None;
    }
    crate::run::runner::drive(work, inline, reply, before_park, finish)
}

#[cfg(test)]
mod tests {
    use super::super::test_session;
    use super::*;

    fn mode(session: &Session, script: &str) -> &'static str {
        match session.run_mode_for(script).0 {
            RunMode::Live => "live",
            RunMode::Buffered => "buffered",
            RunMode::Streamed(_) => "streamed",
        }
    }

    #[test]
    fn short_scripts_run_buffered_until_the_session_may_hold_code() {
        let session = test_session(b"session tests");
        assert_eq!(mode(&session, "echo hi"), "buffered");
        // A loop runs live, and defines nothing.
        assert_eq!(mode(&session, "for i in 1 2; do echo $i; done"), "live");
        assert_eq!(mode(&session, "echo hi"), "buffered");
        // A function could shadow `echo`: live from now on.
        assert_eq!(mode(&session, "echo() { while :; do :; done; }"), "live");
        assert_eq!(mode(&session, "echo hi"), "live");
    }

    #[test]
    fn a_restored_session_runs_every_script_live() {
        let session = test_session(b"session tests");
        session.forget_plain();
        assert_eq!(mode(&session, "echo hi"), "live");
    }
}

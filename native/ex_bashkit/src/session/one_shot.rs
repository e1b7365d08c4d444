//! `ExBashkit.exec/1`: a script on a fresh default interpreter, taken from
//! the interpreters built in advance (`run/warm.rs`) or built for it, and
//! dropped once the answer is out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bashkit::{Bash, ExecOptions};
use parking_lot::Mutex;
use rustler::{Encoder, Env, LocalPid, Monitor, ResourceArc, Term};

use crate::config::cache::DecodedConfig;
use crate::nif::error::NifResult;
use crate::result::{ExecOutcome, Partial};
use crate::run::reply::{Caller, Payload, ReplyTo};
use crate::run::runner;
use crate::run::shape::OwnCommands;
use crate::run::teardown;
use crate::run::watchdog::ExecTicket;
use crate::term::value::Value;
use crate::{nif::dirty, run::guard, run::runtime, run::warm};

use super::cost::{fits_budget, Metering, QUICK_SCRIPT_BYTES};
use super::exec::{run_script, RunMode};
use super::resource::quick_text;

/// What one command of the last quick `ExBashkit.exec/1` script cost, in
/// nanoseconds, on a fresh interpreter (its first exec); 0 while unknown.
/// One figure for the node, unlike a session's: every such script runs on
/// an interpreter of its own, so none grows what the next one pays.
static ONCE_QUICK_COST_NS: AtomicU64 = AtomicU64::new(0);

/// Run `script` in a fresh default interpreter (`ExBashkit.exec/1`):
/// `prebuilt`, or one taken from the shelf or built now. `ticket` cancels
/// it (its caller died); `on_end` runs once it is over. Returns the outcome
/// when it completed inline, like an exec on a session (`exec.rs`). In a worker it runs inline only
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
    let own_thread = crate::run::shape::names_long_command(&script);
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
                    let shape = crate::run::shape::of(&script, &OwnCommands::NONE);
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
                    let requests = built.requests.take();
                    ExecOutcome::new(
                        result,
                        None,
                        metrics,
                        requests,
                        &ticket,
                        None,
                        Some(&partial),
                    )
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
        crate::run::runner::drive_on_own_thread(work, reply, before_park, finish);
        return None;
    }
    let done = crate::run::runner::drive(work, inline, reply, before_park, finish);
    done.map(|(outcome, used)| {
        // Dropped off the caller's path.
        if let Some(bash) = used {
            teardown::later(bash);
        }
        outcome
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
    let answer = crate::config::cache::decode(*config)
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
    let decoded = crate::config::cache::recall(config)?;
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
            crate::run::shape::of(script, &OwnCommands::NONE),
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

/// The same for a one-shot exec (`ExBashkit.exec/1`), which never waits
/// for a turn: `{stdout, stderr}`, or `nil` if it has ended.
#[rustler::nif(schedule = "DirtyCpu")]
fn exec_once_give_up(env: Env, tracker: ResourceArc<OneShotResource>) -> Term {
    crate::result::give_up_value(tracker.ticket.give_up().map(Ok)).to_term(env)
}

#[cfg(test)]
mod tests {
    use crate::config::SessionConfig;

    use super::*;

    #[test]
    fn a_quick_one_shot_exec_measures_the_cost_later_ones_are_admitted_by() {
        let decoded = Arc::new(DecodedConfig {
            key: Value::bin(b"one-shot tests"),
            config: Arc::new(SessionConfig::default()),
        });
        let frames = crate::run::reply::FrameWriter::new(Box::new(std::io::sink()));
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
    }
}

//! `reset/1`: a fresh interpreter from the session's configuration, in
//! place of the one it has, keeping its capabilities.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bashkit::Bash;
use rustler::{Encoder, Env, LocalPid, Term};

use crate::nif::error::NifResult;
use crate::result::reason::Failure;
use crate::run::reply::{Caller, ReplyTo};
use crate::run::runner;
use crate::run::teardown;
use crate::session::lifecycle::Op;
use crate::term::value::Value;
use crate::{nif::dirty, run::guard, run::runtime, run::warm};

use super::resource::{done, op_for, Handle};
use super::{plain_when_built, Session};

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
/// replaces is dropped off this thread (`run/teardown.rs`): it may be large.
async fn reset_work(op: Op) -> Value {
    let outcome = guard::catch_future(async {
        let session = Arc::clone(op.session());
        let mut bash = op.turn().await?;
        let replaced = session.rebuild(&mut bash).await?;
        teardown::later(replaced);
        Ok::<(), Failure>(())
    })
    .await;
    drop(op);
    match outcome {
        Ok(Ok(())) => Value::ok(),
        Ok(Err(failure)) => failure.to_value(),
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
        let (fresh, layer, interrupt, requests) = match ready {
            Some(built) => (built.bash, built.layer, built.interrupt, built.requests),
            None => {
                // Building takes tens of microseconds at least: not on a
                // normal scheduler.
                runner::leave_inline().await;
                let interrupt = self.interrupt();
                let layer = crate::config::Layer::new(config);
                let requests = self.requests();
                let fresh = crate::config::build_bash_on(
                    config,
                    self.channel.as_ref(),
                    Some(&interrupt),
                    &layer,
                    &requests,
                )?;
                crate::config::prepare_reset(&fresh, config, self.channel.as_ref()).await?;
                (fresh, layer, interrupt, requests)
            }
        };
        *self.fs.write() = fresh.fs();
        *self.layer.write() = layer;
        *self.interrupt.lock() = interrupt;
        *self.requests.lock() = requests;
        *self.host_mounts.lock() = config.mounts.clone();
        self.as_built_again();
        super::recovery::forget(self);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::result::Metrics;
    use crate::run::shape::OwnCommands;

    use super::super::test_session;
    use super::*;

    #[test]
    fn a_reset_restores_what_the_first_exec_paid_per_command() {
        let measured = |wall_time_us| Metrics {
            commands: 1,
            wall_time_us,
        };
        let quick = Some(crate::run::shape::of("echo hi", &OwnCommands::NONE));
        let cost = |s: &Session| s.quick_cost_ns.load(Ordering::Relaxed);
        let session = test_session(b"reset cost");
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
        let restored = test_session(b"reset cost 2");
        restored.forget_plain();
        restored.note_cost(quick, &measured(5), Duration::ZERO);
        restored.as_built_again();
        assert_eq!(cost(&restored), 0);
    }
}

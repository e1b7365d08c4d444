//! `Session.fork/2` of the state now, into a session built beside it in the
//! same process (the same tenant) from the same configuration: the files
//! as content both share until either writes (`fs/shared.rs`), the shell
//! state, the head and log, and (in a worker) the recovery point, so the
//! fork is as durable as its parent. No commit, nothing hashed: a fork
//! costs a walk of the paths, and a copy of the bytes only on the first
//! fork since the parent last changed.

use std::sync::Arc;

use rustler::{LocalPid, Term};

use super::history::{self, describe};
use super::lifecycle::Op;
use super::{Handle, Session};
use crate::nif::error::NifResult;
use crate::run::reply::{Caller, ReplyTo};
use crate::run::{guard, runtime};
use crate::term::value::Value;

/// Fork the session of `op` into `child`; answers `:ok`, or an error for a
/// session over a `:base` image (which a commit cannot hold either yet).
pub fn fork(op: Op, child: Arc<Session>, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let parent = Arc::clone(op.session());
        // The parent's turn, held until the answer is out: the worker's
        // owner gives the fork the parent's recovery point as of that
        // answer, which no later call of the parent may have moved yet.
        let mut turn = None;
        let outcome = guard::catch_future(async {
            let (Some(from), Some(into)) = (
                parent.layer().recorded().cloned(),
                child.layer().recorded().cloned(),
            ) else {
                return Err("fork/2: a session over a :base image cannot be forked yet".into());
            };
            let bash = turn.insert(op.turn().await.map_err(|failure| failure.message)?);
            let entries = from.shared().await.map_err(|e| describe(&e))?;
            let mut fork = child.lock_bash().await;
            crate::fs::shared::install(into.unrecorded(), &entries)
                .await
                .map_err(|e| describe(&e))?;
            fork.restore_shell_state(&bash.shell_state());
            child.forget_plain();
            crate::fs::mounts::drop_hidden_entries(&fork.fs(), child.config())
                .map_err(|e| describe(&e))?;
            into.take_written();
            history::inherit(&parent.history, &child.history);
            Ok::<_, String>(Value::ok())
        })
        .await;
        history::finish(reply, outcome);
        drop(turn);
        drop(op);
    });
}

#[rustler::nif]
fn session_fork(
    env: rustler::Env,
    handle: Handle,
    child: Handle,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let op = super::op_for(env, &handle, "fork/2", call, &pid)?;
    fork(
        op,
        Arc::clone(&child.session),
        ReplyTo::new(Caller::process(pid, reference)),
    );
    Ok(())
}

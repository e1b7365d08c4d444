//! Recovery points: what brings a durable session back when its worker OS
//! process dies (`ExBashkit.Worker` keeps them and rebuilds from them).
//!
//! After each exec in a worker (and each other call that may change the
//! state, asked by the worker's owner), a session with `durable: true`
//! compares its state with its last point: its in-memory layer was written
//! (`fs/written.rs`) or its shell state's fingerprint moved. If so it
//! commits, before the exec's answer: a full commit when files changed
//! (bashkit hashes every file: cost ∝ bytes held), else one of the shell
//! state alone, which a recovery checks out over the last full one. The
//! objects the store lacks go to the owner as
//! `{:ex_bashkit_recovery, id, {sid, {[fs, shell | nil, head | nil], objects}}}`
//! (or `{sid, {:error, message}}`: it cannot be recovered), ahead of the
//! call's answer on the same pipe, so the owner stores them first.
//!
//! A point is not a commit of the session's history: it moves neither the
//! head nor the log. Its commits (and the previous point's, until this one
//! is stored) are GC roots.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bashkit::{Bash, CheckoutPolicy, CommitId, CommitOptions, ObjectId};

use super::history::{self, describe, hex, parse_id, reach, refs_value, Node, ObjectList};
use super::lifecycle::Op;
use super::Session;
use crate::run::reply::{ReplyTo, SharedCaller};
use crate::run::{guard, runtime};
use crate::term::value::Value;

/// A session's last recovery point.
pub(crate) struct Point {
    /// The last full commit (files and shell state).
    fs: CommitId,
    fs_reach: HashMap<ObjectId, Node>,
    /// A commit of the shell state alone, newer than `fs`.
    shell: Option<(CommitId, HashMap<ObjectId, Node>)>,
    /// The fingerprint of the shell state the point holds.
    print: u64,
}

impl Point {
    /// Its commits: GC roots.
    pub(crate) fn commits(&self) -> impl Iterator<Item = CommitId> + '_ {
        std::iter::once(self.fs).chain(self.shell.as_ref().map(|(id, _)| *id))
    }

    fn reaches(&self) -> impl Iterator<Item = &HashMap<ObjectId, Node>> {
        std::iter::once(&self.fs_reach).chain(self.shell.as_ref().map(|(_, r)| r))
    }
}

/// The shell state's fingerprint: equal prints, same variables, cwd,
/// functions, aliases, traps and options, but for `$_` (the last
/// command's last word, which nearly every exec moves: left out, an exec
/// that changed nothing else makes no point). Maps are hashed in key
/// order: the interpreter's come out in any order.
fn print(bash: &Bash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match serde_json::to_value(bash.shell_state()) {
        Ok(mut value) => {
            if let Some(variables) = value.get_mut("variables").and_then(|v| v.as_object_mut()) {
                variables.remove("_");
            }
            hash_value(&value, &mut hasher)
        }
        // Unprintable: different from every other print.
        Err(_) => std::time::Instant::now().hash(&mut hasher),
    }
    hasher.finish()
}

fn hash_value(value: &serde_json::Value, hasher: &mut impl Hasher) {
    use serde_json::Value as Json;
    match value {
        Json::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            for key in keys {
                key.hash(hasher);
                hash_value(&map[key], hasher);
            }
            hasher.write_u8(b'}');
        }
        Json::Array(items) => {
            items.iter().for_each(|item| hash_value(item, hasher));
            hasher.write_u8(b']');
        }
        other => other.to_string().hash(hasher),
    }
}

/// Whether `session` keeps recovery points: durable, in a worker, and
/// committable (a session over a base image is not yet).
pub fn keeps_points(session: &Session) -> bool {
    session.config().durable && runtime::in_worker() && session.layer().base().is_none()
}

/// Note the state as built, before a durable session's first exec: the
/// point a rebuild from its configuration gives, which costs no commit.
pub fn note_built(session: &Session, bash: &Bash) {
    let mut state = session.history.state.lock();
    if state.point.is_none() && state.built_print.is_none() {
        state.built_print = Some(print(bash));
        session.layer().take_written();
    }
}

/// A new point if the state changed since the last one: sent to `caller`
/// before its answer.
pub fn after_call(session: &Session, bash: &Bash, caller: &SharedCaller) {
    let point = match point(session, bash) {
        Ok(None) => return,
        Ok(Some(point)) => point,
        Err(message) => Value::error(message),
    };
    let sid = session.worker_sid.get().copied().unwrap_or(session.id);
    let frame = Value::tuple([Value::from(sid), point]);
    caller.lock().send("ex_bashkit_recovery", &frame);
}

fn point(session: &Session, bash: &Bash) -> Result<Option<Value>, String> {
    let written = session.layer().take_written();
    let print = print(bash);
    let history = &session.history;
    let mut state = history.state.lock();
    let last_print = state.point.as_ref().map(|p| p.print).or(state.built_print);
    if !written && last_print == Some(print) {
        return Ok(None);
    }
    let files_kept = !written && state.point.is_some();
    let mut options = CommitOptions::new()
        .have(
            state
                .reach
                .keys()
                .chain(state.point.iter().flat_map(|p| p.reaches()).flat_map(|r| r.keys())),
        )
        .exclude_filesystem(files_kept);
    if let Some(head) = state.head {
        options = options.parent(head);
    }
    let packed = bash.commit(options).map_err(|e| describe(&e))?;
    let id = packed.id();
    let blobs: HashMap<ObjectId, Vec<u8>> = packed.into_objects().collect();
    let mut known: Vec<&HashMap<ObjectId, Node>> = vec![&state.reach];
    known.extend(state.point.iter().flat_map(|p| p.reaches()));
    let reached = reach(id, &blobs, &known)?;
    let objects = blobs
        .iter()
        .map(|(oid, blob)| Value::tuple([hex(oid), Value::bin(blob), refs_value(reached.get(oid))]))
        .collect();
    let last = state.point.take();
    let prior: Vec<CommitId> = last.iter().flat_map(|p| p.commits()).collect();
    let next = match (files_kept, last) {
        (true, Some(last)) => Point {
            fs: last.fs,
            fs_reach: last.fs_reach,
            shell: Some((id, reached)),
            print,
        },
        _ => Point {
            fs: id,
            fs_reach: reached,
            shell: None,
            print,
        },
    };
    state.prior_point = prior;
    let ids = ids_value(&next, state.head);
    state.point = Some(next);
    history.publish(&state);
    Ok(Some(Value::tuple([ids, Value::List(objects)])))
}

fn ids_value(point: &Point, head: Option<CommitId>) -> Value {
    let id = |c: Option<CommitId>| c.map(|c| hex(&c)).unwrap_or_else(Value::nil);
    Value::List(vec![
        hex(&point.fs),
        id(point.shell.as_ref().map(|(c, _)| *c)),
        id(head),
    ])
}

/// Forget the point (a reset: the state is the configuration's again).
pub fn forget(session: &Session) {
    let mut state = session.history.state.lock();
    state.point = None;
    state.built_print = None;
    session.history.publish(&state);
}

/// A point now, as a lifecycle call of its own (`{:recovery_point, id,
/// sid, call}`): answers `:ok` after the point's frame, if any.
pub fn point_call(op: Op, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let caller = reply.caller();
        let outcome = guard::catch_future(async {
            let bash = op.turn().await.map_err(|failure| failure.message)?;
            after_call(&session, &bash, &caller);
            Ok::<_, String>(Value::ok())
        })
        .await;
        drop(op);
        history::finish(reply, outcome);
    });
}

/// What a rebuilt session is recovered to: its point and its history.
#[derive(Debug, Default)]
pub struct RecoverRequest {
    pub fs: String,
    pub shell: Option<String>,
    pub head: Option<String>,
    pub kept: Vec<String>,
}
crate::from_map!(RecoverRequest {
    fs,
    shell,
    head,
    kept
});

/// Check the point out into a session just rebuilt from its configuration
/// (`{:recover, id, sid, request, objects}`): the full commit, then the
/// shell state over it; the head and log as they were. On the worker's
/// reading thread, like the session's build, so that every request after
/// it (a filesystem read too, which takes no turn) finds the session
/// recovered.
pub fn recover(session: &Session, request: RecoverRequest, objects: impl ObjectList) -> Value {
    let outcome = runtime::block_on(guard::catch_future(async {
        let fs = parse_id(&request.fs)?;
        let shell = request.shell.as_deref().map(parse_id).transpose()?;
        let head = request.head.as_deref().map(parse_id).transpose()?;
        let kept = request
            .kept
            .iter()
            .map(|k| parse_id(k))
            .collect::<Result<_, _>>()?;
        let blobs = objects.load()?;
        let invalid = |message: String| format!("invalid recovery point: {message}");
        let fs_reach = reach(fs, &blobs, &[]).map_err(invalid)?;
        let shell_reach = match shell {
            Some(id) => Some((id, reach(id, &blobs, &[]).map_err(invalid)?)),
            None => None,
        };
        let mut bash = session.lock_bash().await;
        bash.checkout(fs, &blobs, CheckoutPolicy::Superset)
            .map_err(|e| describe(&e))?;
        if let Some(id) = shell {
            bash.checkout(id, &blobs, CheckoutPolicy::Superset)
                .map_err(|e| describe(&e))?;
        }
        session.forget_plain();
        crate::fs::mounts::drop_hidden_entries(&bash.fs(), session.config())
            .map_err(|e| describe(&e))?;
        session.layer().take_written();
        let history = &session.history;
        let mut state = history.state.lock();
        state.restore_log(head, kept);
        state.point = Some(Point {
            fs,
            fs_reach,
            shell: shell_reach,
            print: print(&bash),
        });
        history.publish(&state);
        Ok::<_, String>(Value::ok())
    }));
    match outcome {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => Value::error(message),
        Err(panic) => Value::error(format!("internal error in the interpreter: {panic}")),
    }
}

//! Recovery points: what brings a durable session back when its worker OS
//! process dies (`ExBashkit.Worker` keeps them and rebuilds from them).
//!
//! After each exec in a worker (and each other call that may change the
//! state, asked by the worker's owner), a session with `durable: true`
//! compares its state with its last point: what its in-memory layer
//! recorded as written (`fs/written.rs`), and its shell state's
//! fingerprint. It then sends, ahead of the call's answer on the same pipe
//! (so the owner keeps it first), `{:ex_bashkit_recovery, id, {sid, point}}`
//! with `point` one of:
//!
//! - `{:shell, bytes, head | nil}`: only the shell state changed (a few
//!   KiB, serialized);
//! - `{:files, entries, bytes, head | nil}`: a few files too, read back as
//!   they are now (`recovery/files.rs`), replayed over the last commit;
//! - `{:commit, fs, head | nil, objects}`: a commit of everything, with the
//!   objects the store lacks, when the files sent since the last one pass
//!   [`MAX_FILE_BYTES`], or the layer cannot say what changed (bashkit
//!   hashes every file: cost ∝ bytes held);
//! - `{:error, message}`: the session cannot be recovered.
//!
//! A point's commit is not a commit of the session's history: it moves
//! neither the head nor the log. It (and the previous point's, until this
//! one is stored) is a GC root.

mod files;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bashkit::{Bash, CheckoutPolicy, CommitId, CommitOptions, ObjectId, ShellState};

use crate::config::MountSpec;
use crate::fs::written::Written;

use super::history::{self, describe, hex, parse_id, reach, refs_value, Node, ObjectList};
use super::lifecycle::Op;
use super::Session;
use crate::run::reply::{ReplyTo, SharedCaller};
use crate::run::{guard, runtime};
use crate::term::value::{Bytes, Value};

/// Bytes of files sent since the last commit past which the next point is
/// a commit again: a recovery replays every file sent since it.
const MAX_FILE_BYTES: u64 = 8 << 20;

/// A session's last recovery point.
#[derive(Clone)]
pub(crate) struct Point {
    /// The last commit of files and shell state, if any (none: the files
    /// are the configuration's).
    fs: Option<(CommitId, HashMap<ObjectId, Node>)>,
    /// The fingerprint of the shell state the point holds.
    print: u64,
    /// Bytes of files sent since `fs`.
    file_bytes: u64,
}

impl Point {
    /// Its commit: a GC root.
    pub(crate) fn commits(&self) -> impl Iterator<Item = CommitId> + '_ {
        self.fs.iter().map(|(id, _)| *id)
    }

    fn reach(&self) -> Option<&HashMap<ObjectId, Node>> {
        self.fs.as_ref().map(|(_, reach)| reach)
    }
}

/// The shell state's fingerprint: equal prints, same variables, cwd,
/// functions, aliases, traps and options, but for `$_` (the last
/// command's last word, which nearly every exec moves: left out, an exec
/// that changed nothing else makes no point). A map's entries are summed
/// (the interpreter's maps come out in any order); nothing is allocated
/// but the state's copy.
fn print(state: &ShellState) -> u64 {
    fn one(value: impl Hash) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        value.hash(&mut hasher);
        hasher.finish()
    }
    fn map<K: Hash, V: Hash>(entries: impl Iterator<Item = (K, V)>) -> u64 {
        entries.fold(0u64, |sum, entry| sum.wrapping_add(one(entry)))
    }
    let variables = state.variables.iter().filter(|(name, _)| *name != "_");
    let arrays = state
        .arrays
        .iter()
        .map(|(name, items)| (name, map(items.iter())));
    let assoc = state
        .assoc_arrays
        .iter()
        .map(|(name, items)| (name, map(items.iter())));
    // A function's source text when it has one, else its syntax tree.
    let functions = state.functions.iter().map(|(name, def)| {
        let body = match &def.source {
            Some(source) => one(source),
            None => one(serde_json::to_vec(def).unwrap_or_default()),
        };
        (name, body)
    });
    one((
        [
            map(state.env.iter()),
            map(variables),
            map(state.var_attrs.iter()),
            map(state.namerefs.iter()),
            map(arrays),
            map(assoc),
            map(functions),
            map(state.aliases.iter()),
            map(state.traps.iter()),
        ],
        &state.cwd,
        state.last_exit_code,
        &state.last_bg_pid,
        &state.dir_stack,
    ))
}

/// Whether `session` keeps recovery points: durable, in a worker, and
/// committable (a session over a base image is not yet).
pub fn keeps_points(session: &Session) -> bool {
    session.config().durable && runtime::in_worker() && session.layer().base().is_none()
}

/// Note the state as built, before a durable session's first exec: the
/// point a rebuild from its configuration gives, which costs nothing.
pub fn note_built(session: &Session, bash: &Bash) {
    let mut state = session.history.state.lock();
    if state.point.is_none() {
        state.point = Some(Point {
            fs: None,
            print: print(&bash.shell_state()),
            file_bytes: 0,
        });
        session.layer().take_written();
    }
}

/// A new point if the state changed since the last one: sent to `caller`
/// before its answer.
pub async fn after_call(session: &Session, bash: &Bash, caller: &SharedCaller) {
    let point = match point(session, bash).await {
        Ok(None) => return,
        Ok(Some(point)) => point,
        Err(message) => Value::error(message),
    };
    let sid = session.worker_sid.get().copied().unwrap_or(session.id);
    let frame = Value::tuple([Value::from(sid), point]);
    caller.lock().send("ex_bashkit_recovery", &frame);
}

async fn point(session: &Session, bash: &Bash) -> Result<Option<Value>, String> {
    let layer = session.layer();
    let written = layer.take_written();
    let shell = bash.shell_state();
    let print = print(&shell);
    let history = &session.history;
    let (same_shell, file_bytes) = {
        let state = history.state.lock();
        let last = state
            .point
            .as_ref()
            .ok_or("no recovery point to compare with")?;
        (last.print == print, last.file_bytes)
    };
    let head = || {
        let head = history.state.lock().head;
        head.map(|c| hex(&c)).unwrap_or_else(Value::nil)
    };
    let set = |file_bytes: u64| {
        if let Some(last) = history.state.lock().point.as_mut() {
            last.print = print;
            last.file_bytes = file_bytes;
        }
    };
    let serialized = || serde_json::to_vec(&shell).map_err(|e| e.to_string());
    match (written, layer.recorded()) {
        (Written::Nothing, _) if same_shell => Ok(None),
        (Written::Nothing, _) => {
            set(file_bytes);
            Ok(Some(Value::tuple([
                Value::atom("shell"),
                Value::bin(&serialized()?),
                head(),
            ])))
        }
        (Written::Paths { paths, trees }, Some(fs)) if file_bytes < MAX_FILE_BYTES => {
            let (entries, bytes) = files::read(fs.unrecorded(), &paths, &trees).await;
            set(file_bytes.saturating_add(bytes));
            Ok(Some(Value::tuple([
                Value::atom("files"),
                Value::List(entries),
                Value::bin(&serialized()?),
                head(),
            ])))
        }
        _ => commit(session, bash, print).map(Some),
    }
}

/// A point that commits everything.
fn commit(session: &Session, bash: &Bash, print: u64) -> Result<Value, String> {
    let history = &session.history;
    let mut state = history.state.lock();
    let state = &mut *state;
    let last = state.point.as_ref();
    let known: Vec<&HashMap<ObjectId, Node>> = std::iter::once(&state.reach)
        .chain(last.and_then(Point::reach))
        .collect();
    let mut options = CommitOptions::new().have(known.iter().flat_map(|k| k.keys()));
    if let Some(head) = state.head {
        options = options.parent(head);
    }
    let packed = bash.commit(options).map_err(|e| describe(&e))?;
    let id = packed.id();
    let blobs: HashMap<ObjectId, Vec<u8>> = packed.into_objects().collect();
    let reached = reach(id, &blobs, &known)?;
    let objects = blobs
        .iter()
        .map(|(oid, blob)| Value::tuple([hex(oid), Value::bin(blob), refs_value(reached.get(oid))]))
        .collect();
    let prior = state
        .point
        .take()
        .into_iter()
        .flat_map(|p| p.fs.map(|(c, _)| c));
    state.prior_point = prior.collect();
    state.point = Some(Point {
        fs: Some((id, reached)),
        print,
        file_bytes: 0,
    });
    let head = state.head.map(|c| hex(&c)).unwrap_or_else(Value::nil);
    history.publish(state);
    Ok(Value::tuple([
        Value::atom("commit"),
        hex(&id),
        head,
        Value::List(objects),
    ]))
}

/// Forget the point (a reset: the state is the configuration's again).
pub fn forget(session: &Session) {
    let mut state = session.history.state.lock();
    state.point = None;
    state.prior_point.clear();
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
            note_built(&session, &bash);
            after_call(&session, &bash, &caller).await;
            Ok::<_, String>(Value::ok())
        })
        .await;
        drop(op);
        history::finish(reply, outcome);
    });
}

crate::map_struct! {
    /// What a rebuilt session is recovered to: its point and its history.
    #[derive(Debug, Default)]
    pub struct RecoverRequest {
        pub fs: Option<String>,
        /// The file entries sent since `fs`, oldest first.
        pub files: Vec<Value>,
        pub shell: Option<Bytes>,
        pub head: Option<String>,
        pub kept: Vec<String>,
        /// The host mounts it had, when runtime mounts changed them (nil:
        /// its configuration's).
        pub mounts: Option<Vec<MountSpec>>,
    }
}

/// Put the point back into a session just rebuilt from its configuration
/// (`{:recover, id, sid, request, objects}`): the commit, the files sent
/// since, then the shell state over them; the head and log, and the host
/// mounts runtime mounts left it with, as they were. On the worker's reading
/// thread, like the session's build, so that every request after it (a
/// filesystem read too, which takes no turn) finds the session recovered.
pub fn recover(session: &Session, request: RecoverRequest, objects: impl ObjectList) -> Value {
    let outcome = runtime::block_on(guard::catch_future(async {
        let fs = request.fs.as_deref().map(parse_id).transpose()?;
        let head = request.head.as_deref().map(parse_id).transpose()?;
        let kept = request
            .kept
            .iter()
            .map(|k| parse_id(k))
            .collect::<Result<_, _>>()?;
        let shell: Option<ShellState> = match &request.shell {
            Some(Bytes(bytes)) => Some(
                serde_json::from_slice(bytes)
                    .map_err(|e| format!("invalid recovery point: {e}"))?,
            ),
            None => None,
        };
        let blobs = objects.load()?;
        let fs_reach = match fs {
            Some(id) => {
                Some(reach(id, &blobs, &[]).map_err(|m| format!("invalid recovery point: {m}"))?)
            }
            None => None,
        };
        let mut bash = session.lock_bash().await;
        if let Some(id) = fs {
            bash.checkout(id, &blobs, CheckoutPolicy::Superset)
                .map_err(|e| describe(&e))?;
        }
        let file_bytes = match session.layer().recorded() {
            Some(fs) => files::replay(fs.unrecorded(), &request.files)
                .await
                .map_err(|m| format!("invalid recovery point: {m}"))?,
            None => 0,
        };
        if let Some(shell) = &shell {
            bash.restore_shell_state(shell);
        }
        session.forget_plain();
        crate::fs::mounts::drop_hidden_entries(&bash.fs(), session.config())
            .map_err(|e| describe(&e))?;
        if let Some(specs) = &request.mounts {
            super::mounts::reapply(session, &bash, specs).await?;
        }
        session.layer().take_written();
        let history = &session.history;
        let mut state = history.state.lock();
        state.restore_log(head, kept);
        state.point = Some(Point {
            fs: fs.zip(fs_reach),
            print: print(&bash.shell_state()),
            file_bytes,
        });
        history.publish(&state);
        Ok::<_, String>(Value::ok())
    }));
    history::answer(outcome)
}

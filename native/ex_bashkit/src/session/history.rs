//! A session's history in a content-addressed store (`Session.commit/2`,
//! `checkout/2`, `diff/3`, `log/2`; `lib/ex_bashkit/session/history.ex`).
//!
//! bashkit's commit graph ("pull model"): `Bash::commit` hands back the
//! objects the host's store lacks, `Bash::checkout` takes the objects a
//! commit needs. The store lives in Elixir (`ExBashkit.Store`); this file
//! keeps, per session, only ids: its head, the commits it keeps (the log's
//! bound, the GC's roots) and every object its head reaches with the
//! objects each one references. That map is the `have` of the next commit
//! (so only new objects come back) and gives each new object its
//! references, which the store keeps beside it for mark-and-sweep.
//!
//! Commit, checkout and diff take the interpreter lock, like a snapshot
//! (`session/snapshot.rs`, whose reasons for an async job on a thread of
//! its own hold here too). A checkout decodes and verifies everything
//! before it changes anything: bashkit hashes every object it reads
//! against its id and refuses a commit made with capabilities this
//! session lacks (`CheckoutPolicy::Superset`).

mod encode;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Read;
use std::sync::{Arc, LazyLock};

use bashkit::{CheckoutPolicy, CommitId, CommitOptions, ObjectId, SnapshotGraph};
use parking_lot::Mutex;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Binary, LocalPid, Term};

use crate::map_struct;
use crate::nif::error::NifResult;
use crate::run::reply::{Caller, ReplyTo};
use crate::run::{guard, runtime};
use crate::session::lifecycle::Op;
use crate::session::{self, Handle};
use crate::term::value::{Bytes, Value};
use crate::term::word_hash::IdMap;

// bashkit's object kinds and storage envelope (snapshot/objects.rs and
// container.rs, schema 2): private there, read here only to learn which
// objects an object references. `decoded_references_match_bashkit` checks
// them against `SnapshotGraph::reachable` on a real commit.
const KIND_CHUNK: u8 = 1;
const KIND_FILE: u8 = 2;
const KIND_TREE: u8 = 3;
const KIND_SHELL: u8 = 4;
const KIND_CAPS: u8 = 5;
const KIND_COMMIT: u8 = 6;
const COMPRESSION_NONE: u8 = 0;
const COMPRESSION_DEFLATE: u8 = 1;
/// A tree or file manifest larger than this once inflated is refused.
const MAX_INDEX_OBJECT: u64 = 256 << 20;

/// Every session's kept commits, by session id: the GC's roots in this
/// process (`history_roots/0`).
static ROOTS: LazyLock<Mutex<IdMap<Vec<CommitId>>>> =
    LazyLock::new(|| Mutex::new(IdMap::default()));

/// One object its head reaches: its kind and what it references.
#[derive(Clone, Debug)]
pub(super) struct Node {
    kind: u8,
    refs: Vec<(ObjectId, u8)>,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) head: Option<CommitId>,
    /// The head and its ancestors, newest first: the log.
    kept: VecDeque<CommitId>,
    /// The commits it made or checked out last, newest first: kept too,
    /// so that a checkout of an older commit (an undo) can be undone.
    recent: VecDeque<CommitId>,
    pub(super) reach: HashMap<ObjectId, Node>,
    /// Its last recovery point, and the one before until the next is
    /// stored (`session/recovery.rs`): GC roots too.
    pub(super) point: Option<super::recovery::Point>,
    pub(super) prior_point: Vec<CommitId>,
    /// The tree and capabilities of the head, made by a commit when the
    /// session's layer was at this generation: while it still is, the next
    /// commit reuses them (`history/encode.rs`) instead of hashing every
    /// file again. A reset replaces the layer, so no generation matches.
    tree_at: Option<(u64, ObjectId, ObjectId)>,
}

impl State {
    /// Move the head to `id`, with `kept` as its log, each bounded by `limit`.
    fn advance(&mut self, id: CommitId, mut kept: VecDeque<CommitId>, limit: u64) {
        let limit = limit.max(1) as usize;
        kept.retain(|k| *k != id);
        kept.push_front(id);
        kept.truncate(limit);
        self.recent.retain(|k| *k != id);
        self.recent.push_front(id);
        self.recent.truncate(limit);
        self.head = Some(id);
        self.kept = kept;
    }

    /// The head and log a recovered session had (what its head reached is
    /// learned again on its next commit).
    pub(super) fn restore_log(&mut self, head: Option<CommitId>, kept: VecDeque<CommitId>) {
        self.head = head;
        self.recent = kept.clone();
        self.kept = kept;
        self.reach.clear();
        self.tree_at = None;
    }
}

/// A session's history: its head and what the store holds for it.
pub struct History {
    session_id: u64,
    pub(super) state: Mutex<State>,
}

impl History {
    pub fn new(session_id: u64) -> Self {
        Self {
            session_id,
            state: Mutex::new(State::default()),
        }
    }

    /// The commits kept, newest first.
    pub fn kept(&self) -> Vec<CommitId> {
        self.state.lock().kept.iter().copied().collect()
    }

    pub(super) fn publish(&self, state: &State) {
        let points = state.point.iter().flat_map(|p| p.commits());
        let mut roots: Vec<CommitId> = (state.kept.iter().chain(&state.recent).copied())
            .chain(points)
            .chain(state.prior_point.iter().copied())
            .collect();
        roots.sort();
        roots.dedup();
        ROOTS.lock().insert(self.session_id, roots);
    }
}

/// Give `child` (a fork, just built) `parent`'s head, log and recovery
/// point: the fork's state is its parent's.
pub(super) fn inherit(parent: &History, child: &History) {
    let from = parent.state.lock();
    let mut into = child.state.lock();
    into.head = from.head;
    into.kept = from.kept.clone();
    into.recent = from.recent.clone();
    into.reach = from.reach.clone();
    into.point = from.point.clone();
    drop(from);
    child.publish(&into);
}

impl Drop for History {
    fn drop(&mut self) {
        ROOTS.lock().remove(&self.session_id);
    }
}

/// Every commit a live session of this process keeps.
pub fn roots() -> Vec<CommitId> {
    let roots = ROOTS.lock();
    let mut out: Vec<CommitId> = roots.values().flatten().copied().collect();
    out.sort();
    out.dedup();
    out
}

map_struct! {
    /// Options of `commit/2`, validated by Elixir.
    #[derive(Debug, Default)]
    pub struct CommitRequest {
        pub meta: Vec<(String, String)>,
        pub limit: u64,
        /// Answer with the head, and commit nothing, when the state (files,
        /// shell state, capabilities) is the head's.
        pub if_changed: bool,
    }
}

pub(super) fn hex(id: &ObjectId) -> Value {
    Value::from(id.to_hex())
}

pub(super) fn parse_id(text: &str) -> Result<ObjectId, String> {
    ObjectId::from_hex(text).map_err(|_| format!("not a commit id: {text:?}"))
}

/// The `[kind][payload]` of a storage blob.
fn inflate(blob: &[u8]) -> Result<Vec<u8>, String> {
    let (flag, data) = blob.split_first().ok_or("empty object")?;
    match *flag {
        COMPRESSION_NONE => Ok(data.to_vec()),
        COMPRESSION_DEFLATE => {
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(data)
                .take(MAX_INDEX_OBJECT + 1)
                .read_to_end(&mut out)
                .map_err(|_| "object failed to decompress".to_string())?;
            if out.len() as u64 > MAX_INDEX_OBJECT {
                return Err("object too large".into());
            }
            Ok(out)
        }
        other => Err(format!("unknown compression flag {other}")),
    }
}

/// A little-endian reader over a tree or file manifest.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err("truncated object".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn skip_bytes(&mut self) -> Result<(), String> {
        let len = usize::try_from(self.u64()?).map_err(|_| "length overflow")?;
        self.take(len).map(|_| ())
    }
    fn id(&mut self) -> Result<ObjectId, String> {
        Ok(ObjectId::from_bytes(self.take(32)?.try_into().unwrap()))
    }
}

/// What object `id`, expected to be of `kind`, references.
fn decode(id: ObjectId, kind: u8, blob: &[u8]) -> Result<Node, String> {
    let refs = match kind {
        KIND_COMMIT => {
            let one = HashMap::from([(id, blob.to_vec())]);
            let commit = SnapshotGraph::read_commit(id, &one).map_err(|e| e.to_string())?;
            let mut refs = vec![(commit.shell, KIND_SHELL), (commit.caps, KIND_CAPS)];
            refs.extend(commit.tree.map(|tree| (tree, KIND_TREE)));
            refs
        }
        KIND_TREE | KIND_FILE => {
            let raw = inflate(blob)?;
            let (found, payload) = raw.split_first().ok_or("empty object")?;
            if *found != kind {
                return Err(format!("object {id} has kind {found}, {kind} expected"));
            }
            let mut r = Reader(payload);
            let mut refs = Vec::new();
            if kind == KIND_TREE {
                for _ in 0..r.u32()? {
                    r.skip_bytes()?; // path
                    r.u32()?; // mode
                    match r.u8()? {
                        0 => refs.push((r.id()?, KIND_FILE)),
                        2 => r.skip_bytes()?, // symlink target
                        1 | 3 => {}           // directory, fifo
                        other => return Err(format!("unknown tree entry kind {other}")),
                    }
                }
            } else if r.u8()? == 1 {
                r.u64()?; // size
                for _ in 0..r.u32()? {
                    refs.push((r.id()?, KIND_CHUNK));
                }
            }
            refs
        }
        _ => Vec::new(),
    };
    Ok(Node { kind, refs })
}

/// Every object `root` reaches, from `blobs` (decoded) or `known` (the
/// maps of commits the store holds, for objects the commit did not emit
/// again).
pub(super) fn reach(
    root: CommitId,
    blobs: &HashMap<ObjectId, Vec<u8>>,
    known: &[&HashMap<ObjectId, Node>],
) -> Result<HashMap<ObjectId, Node>, String> {
    let mut out = HashMap::new();
    let mut queue = VecDeque::from([(root, KIND_COMMIT)]);
    while let Some((id, kind)) = queue.pop_front() {
        if out.contains_key(&id) {
            continue;
        }
        let node = match (blobs.get(&id), known.iter().find_map(|k| k.get(&id))) {
            (Some(blob), _) => decode(id, kind, blob)?,
            (None, Some(node)) => node.clone(),
            (None, None) => return Err(format!("object {id} is not in the store")),
        };
        queue.extend(node.refs.iter().copied());
        out.insert(id, node);
    }
    Ok(out)
}

pub(super) fn refs_value(node: Option<&Node>) -> Value {
    Value::List(
        node.map(|n| n.refs.iter().map(|(id, _)| hex(id)).collect())
            .unwrap_or_default(),
    )
}

pub(super) fn describe(error: &bashkit::Error) -> String {
    match error {
        bashkit::Error::SnapshotCapabilityMismatch(delta) => format!(
            "commit made by a session with capabilities this one lacks ({delta}); \
             check it out into a session built with the same :builtins, :python, :git, :sqlite and :typescript"
        ),
        other => format!("invalid commit: {other}"),
    }
}

/// A session over a base image keeps what it deleted from the image in
/// whiteouts, which a commit does not carry (a snapshot seals them beside
/// its bytes): such a checkout would bring deleted files back.
fn check_no_base(session: &crate::session::Session, name: &str) -> Result<(), String> {
    match session.layer().base() {
        Some(_) => Err(format!(
            "{name} does not support a session over a :base image yet (use snapshot/2)"
        )),
        None => Ok(()),
    }
}

pub(super) fn finish(reply: ReplyTo, outcome: Result<Result<Value, String>, String>) {
    reply.finish(&answer(outcome));
}

/// A job's answer: its value, its error, or the panic that ended it.
pub(super) fn answer(outcome: Result<Result<Value, String>, String>) -> Value {
    match outcome {
        Ok(Ok(value)) => value,
        Ok(Err(message)) => Value::error(message),
        Err(panic) => Value::error(format!("internal error in the interpreter: {panic}")),
    }
}

/// Commit the session of `op`: answers `{:ok, {commit_id, [{id, blob, refs}]}}`
/// with the objects the store does not hold yet. When no file changed
/// since the head was committed, the head's tree is reused and only the
/// shell state and capabilities are encoded.
pub fn commit(op: Op, request: CommitRequest, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let outcome = guard::catch_future(async {
            check_no_base(&session, "commit/2")?;
            let bash = op.turn().await.map_err(|failure| failure.message)?;
            // Before the files are read: a write meanwhile moves it.
            let generation = session.layer().recorded().map(|fs| fs.generation());
            let history = &session.history;
            let mut state = history.state.lock();
            let meta: BTreeMap<String, String> = request.meta.into_iter().collect();
            let (id, mut blobs) = match (state.head, state.tree_at, generation) {
                (Some(head), Some((at, tree, caps)), Some(now)) if at == now => {
                    encode::commit_over(&bash, tree, Some(caps), vec![head], meta)?
                }
                _ => {
                    let mut options = CommitOptions::new().have(state.reach.keys());
                    if let Some(head) = state.head {
                        options = options.parent(head);
                    }
                    for (key, value) in meta {
                        options = options.meta(key, value);
                    }
                    let packed = bash.commit(options).map_err(|e| describe(&e))?;
                    (packed.id(), packed.into_objects().collect())
                }
            };
            blobs.retain(|oid, _| *oid == id || !state.reach.contains_key(oid));
            let reached = reach(id, &blobs, &[&state.reach])?;
            if let Some(head) = state.head.filter(|_| request.if_changed) {
                let content = |commit: &CommitId| reached.get(commit).map(|n| n.refs.clone());
                let before = state.reach.get(&head).map(|n| n.refs.clone());
                if before.is_some() && before == content(&id) {
                    return Ok(Value::ok_with(Value::tuple([
                        hex(&head),
                        Value::List(vec![]),
                    ])));
                }
            }
            let objects = blobs
                .iter()
                .map(|(oid, blob)| {
                    Value::tuple([hex(oid), Value::bin(blob), refs_value(reached.get(oid))])
                })
                .collect();
            let referenced = |wanted: u8| {
                let commit = reached.get(&id)?;
                commit
                    .refs
                    .iter()
                    .find(|(_, kind)| *kind == wanted)
                    .map(|(oid, _)| *oid)
            };
            state.tree_at = match (generation, referenced(KIND_TREE), referenced(KIND_CAPS)) {
                (Some(at), Some(tree), Some(caps)) => Some((at, tree, caps)),
                _ => None,
            };
            let kept = std::mem::take(&mut state.kept);
            state.advance(id, kept, request.limit);
            state.reach = reached;
            history.publish(&state);
            Ok::<_, String>(Value::ok_with(Value::tuple([
                hex(&id),
                Value::List(objects),
            ])))
        })
        .await;
        drop(op);
        finish(reply, outcome);
    });
}

/// Where a checkout or diff reads its objects from: the worker owns a
/// copy; the NIF keeps the caller's list (binaries by reference) and reads
/// it on the job's thread, not on a scheduler.
pub trait ObjectList: Send + 'static {
    fn load(&self) -> Result<HashMap<ObjectId, Vec<u8>>, String>;
}

impl ObjectList for Vec<(String, Bytes)> {
    fn load(&self) -> Result<HashMap<ObjectId, Vec<u8>>, String> {
        self.iter()
            .map(|(id, Bytes(blob))| Ok((parse_id(id)?, blob.clone())))
            .collect()
    }
}

/// The caller's `[{id, blob}]`, saved for the job.
pub struct SavedObjects {
    env: OwnedEnv,
    term: SavedTerm,
}

impl SavedObjects {
    pub fn new(term: Term<'_>) -> Result<Self, String> {
        if !term.is_list() {
            return Err("objects must be a list".to_string());
        }
        let env = OwnedEnv::new();
        let term = env.save(term);
        Ok(Self { env, term })
    }
}

impl ObjectList for SavedObjects {
    fn load(&self) -> Result<HashMap<ObjectId, Vec<u8>>, String> {
        self.env.run(|env| {
            let list: Vec<(String, Binary)> = self
                .term
                .load(env)
                .decode()
                .map_err(|_| "objects must be a list of {id, binary}".to_string())?;
            list.into_iter()
                .map(|(id, blob)| Ok((parse_id(&id)?, blob.as_slice().to_vec())))
                .collect()
        })
    }
}

/// Check out `commit` into the session of `op` from `objects`, keeping
/// `kept` (its ancestry in the store) as the session's history.
pub fn checkout(
    op: Op,
    commit: String,
    objects: impl ObjectList,
    kept: Vec<String>,
    limit: u64,
    reply: ReplyTo,
) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let call = &op;
        let outcome = guard::catch_future(async move {
            let id = parse_id(&commit)?;
            let kept = kept
                .iter()
                .map(|k| parse_id(k))
                .collect::<Result<VecDeque<_>, _>>()?;
            check_no_base(&session, "checkout/2")?;
            let mut bash = call.turn().await.map_err(|failure| failure.message)?;
            let blobs = objects.load()?;
            let reached =
                reach(id, &blobs, &[]).map_err(|message| format!("invalid commit: {message}"))?;
            bash.checkout(id, &blobs, CheckoutPolicy::Superset)
                .map_err(|e| describe(&e))?;
            session.forget_plain();
            crate::fs::mounts::drop_hidden_entries(&bash.fs(), session.config())
                .map_err(|e| describe(&e))?;
            let history = &session.history;
            let mut state = history.state.lock();
            state.advance(id, kept, limit);
            state.reach = reached;
            history.publish(&state);
            Ok::<_, String>(Value::ok())
        })
        .await;
        drop(op);
        finish(reply, outcome);
    });
}

/// Diff `from` against `to`, or against the session's state now when `to`
/// is `None`; `objects` holds both commits and their trees.
pub fn diff(op: Op, from: String, to: Option<String>, objects: impl ObjectList, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let loaded = objects.load();
        let outcome = guard::catch_future(async {
            let from = parse_id(&from)?;
            let to = to.as_deref().map(parse_id).transpose()?;
            let mut source = loaded?;
            let to = match to {
                Some(to) => to,
                None => {
                    check_no_base(&session, "diff/3")?;
                    // The state now, as a commit nobody keeps: its tree is
                    // emitted even when unchanged, the diff reads it.
                    let bash = op.turn().await.map_err(|failure| failure.message)?;
                    let state = session.history.state.lock();
                    let have: HashSet<ObjectId> = state
                        .reach
                        .iter()
                        .filter(|(_, node)| node.kind != KIND_TREE && node.kind != KIND_COMMIT)
                        .map(|(id, _)| *id)
                        .collect();
                    let packed = bash
                        .commit(CommitOptions::new().have(&have))
                        .map_err(|e| describe(&e))?;
                    let id = packed.id();
                    source.extend(packed.into_objects());
                    id
                }
            };
            let diff = SnapshotGraph::diff(from, to, &source).map_err(|e| describe(&e))?;
            let list =
                |paths: Vec<String>| Value::List(paths.into_iter().map(Value::from).collect());
            Ok::<_, String>(Value::ok_with(Value::map([
                ("created", list(diff.files_added)),
                ("modified", list(diff.files_modified)),
                ("deleted", list(diff.files_removed)),
            ])))
        })
        .await;
        drop(op);
        finish(reply, outcome);
    });
}

/// The parents and metadata of commit `id` from its stored `blob`,
/// verified against its id.
pub fn read_commit(id: &str, blob: &[u8]) -> Value {
    let decoded = parse_id(id).and_then(|oid| {
        let one = HashMap::from([(oid, blob.to_vec())]);
        SnapshotGraph::read_commit(oid, &one).map_err(|e| format!("invalid commit: {e}"))
    });
    match decoded {
        Ok(commit) => Value::ok_with(Value::map([
            (
                "parents",
                Value::List(commit.parents.iter().map(hex).collect()),
            ),
            (
                "meta",
                Value::List(
                    commit
                        .meta
                        .into_iter()
                        .map(|(k, v)| Value::tuple([Value::from(k), Value::from(v)]))
                        .collect(),
                ),
            ),
        ])),
        Err(message) => Value::error(message),
    }
}

/// The ids of a list of commits.
pub fn ids_value(ids: &[CommitId]) -> Value {
    Value::List(ids.iter().map(hex).collect())
}

fn reply_for(pid: LocalPid, reference: Term) -> ReplyTo {
    ReplyTo::new(Caller::process(pid, reference))
}

#[rustler::nif]
fn session_history_commit(
    env: rustler::Env,
    handle: Handle,
    request: Term,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let request = CommitRequest::from_term(request)?;
    let op = session::op_for(env, &handle, "commit/2", call, &pid)?;
    commit(op, request, reply_for(pid, reference));
    Ok(())
}

#[rustler::nif]
#[allow(clippy::too_many_arguments)]
fn session_history_checkout(
    env: rustler::Env,
    handle: Handle,
    commit: String,
    objects: Term,
    kept: Vec<String>,
    limit: u64,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let objects = SavedObjects::new(objects)?;
    let op = session::op_for(env, &handle, "checkout/2", call, &pid)?;
    checkout(op, commit, objects, kept, limit, reply_for(pid, reference));
    Ok(())
}

#[rustler::nif]
#[allow(clippy::too_many_arguments)]
fn session_history_diff(
    env: rustler::Env,
    handle: Handle,
    from: String,
    to: Option<String>,
    objects: Term,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let objects = SavedObjects::new(objects)?;
    let op = session::op_for(env, &handle, "diff/3", call, &pid)?;
    diff(op, from, to, objects, reply_for(pid, reference));
    Ok(())
}

/// The commits the session keeps, newest first.
#[rustler::nif]
fn session_history_kept(env: rustler::Env, handle: Handle) -> Term {
    ids_value(&handle.session.history.kept()).to_term(env)
}

/// Every commit a live session of this node keeps (the store's GC roots).
#[rustler::nif]
fn history_roots(env: rustler::Env) -> Term {
    ids_value(&roots()).to_term(env)
}

/// On a dirty scheduler: the blob comes from the store, which may hold a
/// huge one in place of a commit, and it is hashed whole.
#[rustler::nif(schedule = "DirtyCpu")]
fn history_read_commit<'a>(env: rustler::Env<'a>, id: String, blob: Binary) -> Term<'a> {
    read_commit(&id, blob.as_slice()).to_term(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{build_bash, SessionConfig};

    // The references this file decodes are exactly what bashkit walks.
    #[test]
    fn decoded_references_match_bashkit() {
        let mut bash = build_bash(&SessionConfig::default(), None, None).unwrap();
        runtime::block_on(bash.exec(
            "mkdir -p /d; echo small > /d/a; seq 1 40000 > /big; ln -s /d/a /link; f() { :; }",
        ))
        .unwrap();
        let packed = bash.commit(CommitOptions::new()).unwrap();
        let id = packed.id();
        let blobs: HashMap<ObjectId, Vec<u8>> = packed.into_objects().collect();
        let ours: HashSet<ObjectId> = reach(id, &blobs, &[]).unwrap().into_keys().collect();
        let theirs: HashSet<ObjectId> = SnapshotGraph::reachable(id, &blobs)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(ours, theirs);
        assert!(
            ours.len() > 6,
            "a chunked file and its chunks: {}",
            ours.len()
        );
    }
}

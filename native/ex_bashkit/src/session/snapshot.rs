//! Snapshot and restore of a session (`Session.snapshot/2`, `restore/3`).
//!
//! Both take the session's interpreter lock, so they run *between* commands,
//! in the same FIFO order as `exec`: a snapshot requested while a script
//! runs waits for it to end and then captures its effects.
//!
//! Why an async job answered by message (like `exec`) rather than a DirtyIo
//! NIF that `block_on`s the lock: waiting for the lock can take as long as
//! the running script (up to its timeout), and a dirty IO thread blocked for
//! that time is taken from a small shared pool; many snapshots queued behind
//! long scripts would starve every other DirtyIo NIF of the VM. A task
//! parked on the lock costs nothing.
//!
//! Restore goes INTO the existing `Bash` (`restore_snapshot*`), never
//! rebuilds it: the session keeps its builtins, Python, mounts, network and
//! limits, and the filesystem handle the lock-free filesystem API holds
//! stays the one scripts use. bashkit decodes and validates everything
//! before it mutates anything, so a rejected snapshot leaves the session as
//! it was. What a snapshot holds at or below this session's mount points
//! (host mounts, `:virtual_fs`) is dropped after the restore: it would be
//! hidden under the mount, yet counted and carried along.
//!
//! Legacy (bashkit v1 JSON) snapshots are refused (`legacy_format`): they
//! carry no capability fingerprint, so bashkit restores them unchecked, and
//! it validates none of their names (an unkeyed one, its digest public,
//! brought in env names like `$(id)` and a cwd of `rel/../..` that `new/1`
//! refuses). This library never wrote them: bashkit 0.20 writes v2 only.
//!
//! Both are lifecycle calls (`session/lifecycle.rs`): their wait for the lock is
//! bounded by their `:timeout_ms` and ended by their caller's death. Both
//! run on a thread of their own: a 90 MB snapshot computes for seconds
//! without yielding, which on the shared runtime threads would hold up
//! every other session's timers.

use std::sync::Arc;

use bashkit::{Error, SnapshotOptions};
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{LocalPid, Term};

use crate::nif::error::NifResult;
use crate::result::reason::Failure;
use crate::run::reply::{Caller, Payload, ReplyTo};
use crate::session::lifecycle::Op;
use crate::session::{self, Handle};
use crate::term::value::{Bytes, Value};
use crate::{map_struct, run::guard, run::runtime};

map_struct! {
    /// Options of `snapshot/2`, validated by Elixir.
    #[derive(Debug, Default)]
    pub struct SnapshotRequest {
        pub key: Option<Bytes>,
        pub exclude_filesystem: bool,
        pub exclude_functions: bool,
    }
}

/// What a snapshot or restore ended with, ready to encode.
enum Outcome {
    Bytes(Vec<u8>),
    Restored,
    Error(Failure),
}

impl Payload for Outcome {
    /// `{:ok, binary}`, `:ok` or `{:error, message}`.
    fn to_value(&self) -> Value {
        match self {
            Outcome::Bytes(bytes) => Value::ok_with(Value::bin(bytes)),
            Outcome::Restored => Value::ok(),
            Outcome::Error(failure) => failure.to_value(),
        }
    }
}

impl From<Result<Result<Outcome, Error>, String>> for Outcome {
    fn from(outcome: Result<Result<Outcome, Error>, String>) -> Self {
        match outcome {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(error)) => Outcome::Error(describe(&error).into()),
            Err(panic) => {
                Outcome::Error(format!("internal error in the interpreter: {panic}").into())
            }
        }
    }
}

/// bashkit reports undecodable input as `Internal("...")`, which reads as
/// "our bug"; the caller's bytes are the cause, so say that instead.
fn describe(error: &Error) -> String {
    match error {
        Error::Internal(message) => format!("invalid snapshot: {message}"),
        // bashkit's default policy (`Superset`): the target must have every
        // builtin the source had, or restored scripts could not run.
        Error::SnapshotCapabilityMismatch(delta) => format!(
            "snapshot taken by a session with capabilities this one lacks ({delta}); \
             restore into a session built with the same :builtins, :python, :git, :sqlite and :typescript"
        ),
        other => format!("invalid snapshot: {other}"),
    }
}

/// Bytes of a snapshot's integrity digest, before its body.
const DIGEST_LEN: usize = 32;

/// Refuse a legacy v1 snapshot: a digest, then a JSON body (v2 bodies
/// start with `BKSNAP`). See the module doc.
fn legacy_format(data: &[u8]) -> Result<(), String> {
    match data.get(DIGEST_LEN..) {
        Some(body) if body.trim_ascii_start().starts_with(b"{") => Err(
            "invalid snapshot: legacy (v1 JSON) format, which carries no capability \
             fingerprint and is not accepted; take the snapshot again with this version"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Capture the session of `op` and answer `reply` with `{:ok, bytes}`.
pub fn snapshot(op: Op, request: SnapshotRequest, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let outcome = guard::catch_future(async {
            let bash = match op.turn().await {
                Ok(bash) => bash,
                Err(message) => return Ok(Outcome::Error(message)),
            };
            let options = SnapshotOptions {
                exclude_filesystem: request.exclude_filesystem,
                exclude_functions: request.exclude_functions,
            };
            let bytes = match &request.key {
                Some(Bytes(key)) => bash.snapshot_to_bytes_keyed_with_options(key, options),
                None => bash.snapshot_with_options(options),
            }?;
            // Over a base image: the session's layer plus the image's
            // identity and what the session deleted from it.
            let layer = session.layer();
            let bytes = match layer.base() {
                Some(base) => {
                    let whiteouts = match request.exclude_filesystem {
                        true => Vec::new(),
                        false => base.whiteouts().await,
                    };
                    let key = request.key.as_ref().map(|Bytes(k)| k.as_slice());
                    crate::image::snapshot::seal(&base.image.id, &whiteouts, &bytes, key)
                }
                None => bytes,
            };
            Ok::<_, Error>(Outcome::Bytes(bytes))
        })
        .await;
        drop(op);
        reply.finish(&Outcome::from(outcome));
    });
}

/// Where a restore reads the snapshot from: the worker owns a copy; the NIF
/// borrows the caller's binary.
pub trait SnapshotSource: Send + 'static {
    fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T;
}

impl SnapshotSource for Vec<u8> {
    fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        f(self)
    }
}

/// The caller's snapshot binary, kept alive for the job without copying it:
/// a snapshot can be many MB, and copying that on a normal scheduler (the
/// restore NIF only submits the job) would blow its time budget.
pub struct SnapshotBytes {
    env: OwnedEnv,
    term: SavedTerm,
}

impl SnapshotBytes {
    /// Hold on to `term`, which must be a binary.
    pub fn new(term: Term<'_>) -> Result<Self, String> {
        if !term.is_binary() {
            return Err("snapshot must be a binary".to_string());
        }
        let env = OwnedEnv::new();
        // Saving a large (refcounted) binary copies a reference, not the data.
        let term = env.save(term);
        Ok(Self { env, term })
    }
}

impl SnapshotSource for SnapshotBytes {
    /// Run `f` on the bytes. Must run on a non-BEAM thread.
    fn with<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        self.env.run(|env| {
            let binary = self
                .term
                .load(env)
                .decode_as_binary()
                .expect("checked in new");
            f(binary.as_slice())
        })
    }
}

/// Restore `bytes` into the session of `op` and answer `reply` with `:ok`.
pub fn restore(op: Op, bytes: impl SnapshotSource, key: Option<Vec<u8>>, reply: ReplyTo) {
    runtime::spawn_job(async move {
        let session = Arc::clone(op.session());
        let call = &op;
        // `move`: the job owns the bytes (their env is Send, not Sync).
        let outcome = guard::catch_future(async move {
            let mut bash = match call.turn().await {
                Ok(bash) => bash,
                Err(message) => return Ok(Outcome::Error(message)),
            };
            // A snapshot's shell state may hold functions, aliases, traps.
            session.forget_plain();
            let layer = session.layer();
            let base = layer.base();
            let whiteouts = bytes.with(|data| {
                let (inner, whiteouts) = crate::image::snapshot::open(
                    data,
                    base.map(|b| b.image.id.as_str()),
                    key.as_deref(),
                )?;
                legacy_format(inner)?;
                match &key {
                    Some(key) => bash.restore_snapshot_keyed(inner, key),
                    None => bash.restore_snapshot(inner),
                }
                .map_err(|e| describe(&e))?;
                Ok::<_, String>(whiteouts)
            })?;
            crate::policy::credentials::keep_placeholders(&mut bash, session.config())?;
            // Files the snapshot has where this session mounts something
            // could never be reached, yet would count against the quota and
            // ride along in every later snapshot: they are dropped.
            crate::fs::mounts::drop_hidden_entries(&bash.fs(), session.config())
                .map_err(|e| describe(&e))?;
            // Last: dropping hidden entries may swap the base overlay again.
            if let Some(base) = base {
                base.apply_whiteouts(&whiteouts).await;
            }
            Ok::<_, String>(Outcome::Restored)
        })
        .await;
        drop(op);
        let outcome = match outcome {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(message)) => Outcome::Error(message.into()),
            Err(panic) => {
                Outcome::Error(format!("internal error in the interpreter: {panic}").into())
            }
        };
        reply.finish(&outcome);
    });
}

/// `snapshot/2`: answers `{:ex_bashkit_reply, ref, {:ok, bytes} | {:error, _}}`.
#[rustler::nif]
fn session_snapshot(
    env: rustler::Env,
    handle: Handle,
    request: Term,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let request = SnapshotRequest::from_term(request)?;
    let op = session::op_for(env, &handle, "snapshot/2", call, &pid)?;
    let reply = ReplyTo::new(Caller::process(pid, reference));
    snapshot(op, request, reply);
    Ok(())
}

/// `restore/3`: answers `{:ex_bashkit_reply, ref, :ok | {:error, _}}`.
/// An invalid argument is answered by the return value alone, before any
/// reply obligation exists, so no message is left behind.
#[rustler::nif]
fn session_restore(
    env: rustler::Env,
    handle: Handle,
    bytes: Term,
    key: Option<rustler::Binary>,
    call: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let bytes = SnapshotBytes::new(bytes)?;
    let key = key.map(|k| k.as_slice().to_vec());
    let op = session::op_for(env, &handle, "restore/3", call, &pid)?;
    let reply = ReplyTo::new(Caller::process(pid, reference));
    restore(op, bytes, key, reply);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{build_bash, SessionConfig};
    use crate::run::runtime;

    // Traps cannot be observed through `exec` after a restore (bashkit clears
    // them at the start of every exec), so check at the bashkit level that a
    // snapshot does carry them, along with the rest of the shell state.
    #[test]
    fn traps_and_shell_state_are_in_the_snapshot() {
        let mut source = build_bash(&SessionConfig::default(), None, None).unwrap();
        runtime::block_on(source.exec("trap 'echo int' INT; x=1; f() { :; }; cd /tmp")).unwrap();
        let bytes = source.snapshot().unwrap();

        let mut target = build_bash(&SessionConfig::default(), None, None).unwrap();
        target.restore_snapshot(&bytes).unwrap();
        let state = target.shell_state();
        assert_eq!(state.traps.get("INT").map(String::as_str), Some("echo int"));
        assert_eq!(state.variables.get("x").map(String::as_str), Some("1"));
        assert!(state.functions.contains_key("f"));
        assert_eq!(state.cwd, std::path::PathBuf::from("/tmp"));
    }

    #[test]
    fn rejected_bytes_are_described_as_the_callers_problem() {
        let mut bash = build_bash(&SessionConfig::default(), None, None).unwrap();
        let error = bash.restore_snapshot(b"junk").unwrap_err();
        let message = super::describe(&error);
        assert!(message.starts_with("invalid snapshot: "), "{message}");
        assert!(!message.contains("internal error"), "{message}");
    }
}

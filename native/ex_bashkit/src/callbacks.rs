//! The Rust side of back-calls: a running script asking Elixir to do
//! something (a custom builtin, a `virtual_fs` operation) and waiting for
//! the answer.
//!
//! # Protocol
//!
//! 1. A builtin or virtual-fs operation calls [`CallbackChannel::call`]. It
//!    allocates a call id, parks a oneshot sender under that id in
//!    [`PENDING`], and sends the process that is running the exec:
//!
//!    `{:ex_bashkit_callback, exec_ref, {call_id, request}}`
//!
//!    where `request` is `{:builtin, name, args, stdin, env}` or
//!    `{:vfs, mount, op, path, extra}` (see `callbacks/builtins.rs`, `callbacks/virtual_fs.rs`)
//!    or `{:egress, method, url, headers}` (`policy/egress.rs`).
//! 2. That process runs the request in a fresh, unlinked process (Elixir's
//!    `ExBashkit.Callbacks`), which answers through the `callback_reply` NIF
//!    with an already-normalized term; [`reply`] hands it to the waiter.
//!    A quick script's back-call is returned by the exec NIF instead of
//!    sent, and what the script sends after an answer (its final reply or
//!    its next back-call) by that `callback_reply` (`reply::keeping_message`).
//! 3. The back-call timeout (`builtin_timeout_ms`) and the reply cap
//!    (`max_reply_bytes`) are enforced in Elixir only, where the handler
//!    runs: the runner stops the handler at the deadline and answers the
//!    failure itself, and it measures a reply before it is ever sent here.
//!    This side waits for the answer or an interrupt (cancel, the exec's
//!    deadline, the caller's death); a late answer finds no entry in
//!    `PENDING` and is dropped.
//!
//! Waiting is an `await` on the oneshot, on the runner pool (a script
//! polled inline by an exec NIF is parked first, `run/runner.rs`): no BEAM
//! scheduler waits and a waiting script holds no thread, so a builtin that
//! itself execs another session cannot starve a scheduler pool.
//!
//! A channel has a target only while an exec runs. With no target (an idle
//! session, or a filesystem-API call made from a BEAM thread) a back-call
//! fails at once instead of sending a message nobody will answer.

pub(crate) mod builtins;
pub(crate) mod virtual_fs;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use parking_lot::Mutex;
use rustler::{Binary, Encoder, Env, NifResult, Term, TermType};
use tokio::sync::oneshot;

use crate::nif::dirty;
use crate::run::interrupt::Interrupt;
use crate::run::reply::{self, Payload, SharedCaller};
use crate::term::value::Value;
use crate::term::word_hash::IdMap;

/// What Elixir answered, already validated and normalized there.
#[derive(Debug)]
pub enum Answer {
    /// A builtin's outcome.
    Command {
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        exit_code: i32,
    },
    /// A virtual-fs operation succeeded with nothing to return.
    Done,
    /// File contents.
    Data(Vec<u8>),
    /// A directory listing: `(name, kind)` with kind `file|dir|symlink`.
    Entries(Vec<(String, String)>),
    /// `stat`: kind and size.
    Stat(String, u64),
    /// A virtual-fs failure: an errno-style name (`enoent`, ...) or a message.
    Failed(String),
    /// The `:egress` callback let the request go out.
    Allow,
    /// The `:egress` callback refused it (or failed: Elixir answers so).
    Deny,
}

/// Why a back-call produced no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No exec is running, or the call came from a BEAM thread.
    NoTarget,
    /// The caller process is gone.
    CallerGone,
    /// The exec was cancelled or timed out while waiting.
    Interrupted,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);
static PENDING: LazyLock<Mutex<IdMap<Waiter>>> = LazyLock::new(|| Mutex::new(IdMap::default()));

/// A back-call waiting for its answer.
struct Waiter {
    answer: oneshot::Sender<Answer>,
    /// Its script was polled inline where nothing may hold the thread for
    /// long (a quick script, `runner::polls_quick_script`): its answer may
    /// resume it on such a thread.
    quick: bool,
}

/// Hand `answer` to the back-call waiting under `call_id`. Returns false when
/// nobody waits any more (timed out, or the exec ended).
pub fn reply(call_id: u64, answer: Answer) -> bool {
    match PENDING.lock().remove(&call_id) {
        Some(waiter) => waiter.answer.send(answer).is_ok(),
        None => false,
    }
}

/// In a worker, on its frame reader: hand `answer` to back-call `call_id`.
/// A quick script that made its back-call from the reader goes on right
/// here, as on a normal scheduler in the node; any other script is woken
/// onto the runners.
pub fn reply_on_reader(call_id: u64, answer: Answer) -> bool {
    match made_by_quick_script(call_id) {
        true => crate::run::runner::answer_and_resume(None, || reply(call_id, answer)),
        false => reply(call_id, answer),
    }
}

/// Whether the back-call waiting under `call_id` was made by a quick script
/// polled inline (`runner::polls_quick_script`).
fn made_by_quick_script(call_id: u64) -> bool {
    PENDING
        .lock()
        .get(&call_id)
        .is_some_and(|waiter| waiter.quick)
}

/// Removes the pending entry however the wait ends (answer, timeout, or the
/// future being dropped because the exec was cancelled).
struct PendingGuard(u64);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        PENDING.lock().remove(&self.0);
    }
}

/// A request as sent to Elixir.
pub trait Request: Send + Sync {
    fn to_value(&self) -> Value;
}

struct CallbackMessage<'r> {
    call_id: u64,
    request: &'r dyn Request,
}

impl Payload for CallbackMessage<'_> {
    fn to_value(&self) -> Value {
        Value::tuple([self.call_id.into(), self.request.to_value()])
    }
}

/// One session's route to Elixir, shared by its builtins and backends.
pub struct CallbackChannel {
    target: Mutex<Option<SharedCaller>>,
    /// Raised by `cancel/1` and per-call timeouts: stop waiting for Elixir.
    interrupt: Arc<Interrupt>,
    /// How long its back-calls have waited for their answers in all, in
    /// nanoseconds: not the script's own cost (`Session::note_cost`).
    waited_ns: AtomicU64,
}

impl CallbackChannel {
    pub fn new(interrupt: Arc<Interrupt>) -> Arc<Self> {
        Arc::new(Self {
            target: Mutex::new(None),
            interrupt,
            waited_ns: AtomicU64::new(0),
        })
    }

    /// How long its back-calls have waited for Elixir, in all (ns).
    pub fn waited_ns(&self) -> u64 {
        self.waited_ns.load(Ordering::Relaxed)
    }

    /// Route back-calls to `caller` until the returned guard is dropped.
    pub fn attach(self: &Arc<Self>, caller: SharedCaller) -> AttachGuard {
        *self.target.lock() = Some(caller);
        AttachGuard(Arc::clone(self))
    }

    /// Ask Elixir to handle `request`; wait for the answer or an interrupt.
    pub async fn call(&self, request: &dyn Request) -> Result<Answer, CallError> {
        // A script polled inline by an exec NIF sends its back-call from
        // there, with the NIF's env, and parks while Elixir answers (nothing
        // wakes it before the answer); so does one polled by a worker's
        // frame reader (frames go out from any thread). Anywhere else it
        // moves to a runner first: a BEAM thread without that env can send
        // nothing.
        let quick = crate::run::runner::polls_quick_script();
        if !(crate::run::runner::sends_from_nif() || crate::run::runtime::in_worker()) {
            crate::run::runner::leave_inline().await;
            if on_beam_thread() {
                return Err(CallError::NoTarget);
            }
        }
        let caller = self.target.lock().clone().ok_or(CallError::NoTarget)?;
        let call_id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        PENDING.lock().insert(call_id, Waiter { answer, quick });
        let _pending = PendingGuard(call_id);

        let message = CallbackMessage { call_id, request };
        let delivered = caller.lock().send("ex_bashkit_callback", &message);
        if !delivered {
            return Err(CallError::CallerGone);
        }
        let waiting = Instant::now();
        let answered = tokio::select! {
            waited = receiver => match waited {
                Ok(answer) => Ok(answer),
                // The sender vanished without an answer: treat it as the
                // caller going away.
                Err(_) => Err(CallError::CallerGone),
            },
            _ = self.interrupt.wait() => Err(CallError::Interrupted),
        };
        let waited = u64::try_from(waiting.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.waited_ns.fetch_add(waited, Ordering::Relaxed);
        answered
    }
}

/// A BEAM thread (a filesystem-API NIF) can neither send our messages nor
/// afford to wait for Elixir.
#[cfg(not(test))]
fn on_beam_thread() -> bool {
    crate::run::runtime::on_beam_thread()
}

#[cfg(test)]
fn on_beam_thread() -> bool {
    false
}

/// Detaches the channel from its caller when the exec ends.
pub struct AttachGuard(Arc<CallbackChannel>);

impl Drop for AttachGuard {
    fn drop(&mut self) {
        *self.0.target.lock() = None;
    }
}

/// Decode the normalized answer Elixir passes to `callback_reply`:
/// `{:command, stdout, stderr, code}`, `:done`, `:allow`, `:deny`, `{:data, bin}`,
/// `{:entries, [{name, kind}]}`, `{:stat, kind, size}`, `{:failed, reason}`.
/// Its size was checked against the session's `max_reply_bytes` in Elixir
/// before it was sent, and listings were validated there (names, kinds,
/// duplicates, depth): this is the only place those rules live.
pub fn decode_answer(value: &Value) -> Option<Answer> {
    match value.as_atom() {
        Some("done") => return Some(Answer::Done),
        Some("allow") => return Some(Answer::Allow),
        Some("deny") => return Some(Answer::Deny),
        _ => {}
    }
    let bytes = |v: &Value| match v {
        Value::Binary(b) => Some(b.clone()),
        _ => None,
    };
    // An entry or stat kind outside these is a malformed answer, never
    // silently a file.
    let kind = |v: &Value| {
        v.as_atom()
            .filter(|k| matches!(*k, "file" | "dir" | "symlink"))
            .map(str::to_string)
    };
    let items = value.elements().ok()?;
    match (items.first()?.as_atom()?, items) {
        ("command", [_, out, err, code]) => Some(Answer::Command {
            stdout: bytes(out)?,
            stderr: bytes(err)?,
            exit_code: crate::term::value::FromValue::from_value(code).ok()?,
        }),
        ("data", [_, data]) => Some(Answer::Data(bytes(data)?)),
        ("entries", [_, Value::List(entries)]) => entries
            .iter()
            .map(|entry| match entry.elements().ok()? {
                [name, k] => Some((String::from_utf8(bytes(name)?).ok()?, kind(k)?)),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(Answer::Entries),
        ("stat", [_, k, size]) => Some(Answer::Stat(
            kind(k)?,
            crate::term::value::FromValue::from_value(size).ok()?,
        )),
        ("failed", [_, reason]) => Some(Answer::Failed(
            crate::term::value::FromValue::from_value(reason).ok()?,
        )),
        _ => None,
    }
}

/// Answer back-call `call_id` with a term Elixir already normalized (see
/// `decode_answer`). `true` if someone was still waiting, `false` if not;
/// or, for the quick script it resumed here, the first message that
/// script sent its caller during this call (its final reply, or its next
/// back-call), returned instead of sent: the caller of this NIF is the
/// process that waits.
///
/// Where it runs follows the script it answers, which goes on right here,
/// for up to its slice, instead of waking a runner thread
/// (`runner::answer_and_resume`): a quick script that was polled on a
/// normal scheduler (and so made its back-call from there) stays on this
/// one when the answer is small; anything else moves to a dirty CPU
/// scheduler first, as `session_exec` does.
#[rustler::nif]
fn callback_reply<'a>(env: Env<'a>, call_id: Term<'a>, answer: Term<'a>) -> NifResult<Term<'a>> {
    let id: u64 = call_id.decode()?;
    if !(made_by_quick_script(id) && small_answer(answer, 0)) {
        let args = [call_id, answer];
        return Ok(dirty::to_dirty_cpu(
            env,
            c"callback_reply",
            callback_reply_dirty,
            &args,
        ));
    }
    // The quick script goes on here: its final reply (or its next
    // back-call) is this call's answer (`reply::keeping_message`). Only
    // here: a script resumed on a dirty scheduler may stream output, which
    // must reach the caller first, as messages.
    Ok(dirty::run_here(env, || {
        let tags = &[reply::FINAL_REPLY, reply::BACK_CALL];
        let (answered, kept) = reply::keeping_message(env, tags, || answer_call(env, id, answer));
        kept.unwrap_or_else(|| answered.encode(env))
    }))
}

// `callback_reply` moved to a dirty CPU scheduler.
crate::dirty_entry!(callback_reply_dirty, |env, args| match args {
    [call_id, answer] => Ok(answer_call(env, call_id.decode()?, *answer).encode(env)),
    _ => Err(rustler::Error::BadArg),
});

/// Hand the answer to its back-call and resume, here, the script it woke.
fn answer_call(env: Env, call_id: u64, answer: Term) -> bool {
    let answer = Value::from_term(answer)
        .ok()
        .as_ref()
        .and_then(decode_answer)
        .unwrap_or_else(|| {
            Answer::Failed("malformed answer from the builtin or virtual_fs handler".into())
        });
    crate::run::runner::answer_and_resume(Some(env), || reply(call_id, answer))
}

/// Answers no bigger than this are decoded on a normal scheduler: copying
/// them takes a few µs at most.
const SMALL_ANSWER_BYTES: usize = 64 * 1024;

/// Whether `answer` is small: atoms, integers and small binaries in a
/// tuple or two (a command's output, a stat), no list (a directory
/// listing may be long).
fn small_answer(answer: Term, depth: u8) -> bool {
    match answer.get_type() {
        TermType::Atom | TermType::Integer => true,
        TermType::Binary => answer
            .decode::<Binary>()
            .is_ok_and(|bytes| bytes.len() <= SMALL_ANSWER_BYTES),
        TermType::Tuple if depth < 2 => {
            rustler::types::tuple::get_tuple(answer).is_ok_and(|items| {
                items.len() <= 4 && items.iter().all(|i| small_answer(*i, depth + 1))
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_without_waiter_is_dropped() {
        assert!(!reply(u64::MAX, Answer::Done));
    }

    #[test]
    fn call_without_target_fails_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        struct Nothing;
        impl Request for Nothing {
            fn to_value(&self) -> Value {
                Value::nil()
            }
        }
        let channel = CallbackChannel::new(Interrupt::new());
        let outcome = rt.block_on(channel.call(&Nothing));
        assert_eq!(outcome.unwrap_err(), CallError::NoTarget);
    }

    #[test]
    fn pending_entry_is_removed_when_the_wait_is_dropped() {
        let (answer, _receiver) = oneshot::channel();
        let waiter = Waiter {
            answer,
            quick: false,
        };
        PENDING.lock().insert(42_000_000, waiter);
        drop(PendingGuard(42_000_000));
        assert!(!PENDING.lock().contains_key(&42_000_000));
    }
}

//! Messages from interpreter threads to whoever asked: the one reply path of
//! the core, whichever transport carries it.
//!
//! Every message is `{tag, ref, payload}` where `ref` identifies the request
//! so that a `receive` matches only its own. The tags (see
//! `ExBashkit.Request` for the Elixir side):
//!
//! - `:ex_bashkit_reply`: the final answer, exactly one per request. If the
//!   task ends without answering (it cannot, short of a runtime teardown),
//!   `ReplyTo`'s `Drop` sends an error so the caller never waits forever.
//! - `:ex_bashkit_callback`: a back-call request (see `callbacks.rs`).
//! - `:ex_bashkit_output`: a chunk of streamed output.
//!
//! A `Caller` is either a process of this node (the NIF transport: the
//! message is built in a fresh `OwnedEnv` and sent from a non-BEAM thread, so
//! no term outlives its message) or a request of a worker process (the port
//! transport: `ref` is the request's integer id and the frame goes to the
//! port writer, see `worker.rs`). Payloads are `Value`s either way.
//!
//! A quick script's first message to the process whose NIF call polls it
//! is returned by that call instead of sent ([`keeping_message`]): its
//! back-call, by the exec NIF that started it; its final reply (or its
//! next back-call), by the `callback_reply` NIF that resumed it. The very
//! message, so the caller is spared a copy and a receive.
//!
//! An exec NIF's caller keeps its `ref` in the NIF's own env while the
//! script runs inline ([`Caller::in_nif`]): most execs end there, and
//! copying the ref into an env of its own (and freeing that env) was 5 % of
//! the CPU of `echo hi` execs from 64 processes (`perf`). The ref is copied
//! ([`Caller::keep`]) only when the exec leaves the NIF still running.

use std::cell::RefCell;
use std::sync::Arc;

use parking_lot::Mutex;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::sys::ErlNifTerm;
use rustler::{Encoder, Env, LocalPid, Term};

use crate::term::etf;
use crate::term::value::Value;

/// The tag of a request's final answer.
pub const FINAL_REPLY: &str = "ex_bashkit_reply";
/// The tag of a back-call.
pub const BACK_CALL: &str = "ex_bashkit_callback";

thread_local! {
    /// Armed by [`keeping_message`]: the NIF call (its env), its process,
    /// the tags it keeps, and the message it kept.
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

struct Kept {
    env: usize,
    pid: LocalPid,
    tags: &'static [&'static str],
    message: Option<ErlNifTerm>,
}

/// Run `f`, the body of a NIF on a normal scheduler that polls a quick
/// script of the process that owns `env`: the first message to that
/// process tagged one of `tags` that the script sends during `f` (with
/// this env, `runner::with_inline_env`) is kept and returned, as a term of
/// `env`, instead of sent. Only the first: a quick script sends nothing
/// before its back-call or its final reply, so the caller that reads the
/// kept message before its mailbox sees the messages in their order. If
/// `f` panics, what was kept is sent after all.
pub fn keeping_message<'e, R>(
    env: Env<'e>,
    tags: &'static [&'static str],
    f: impl FnOnce() -> R,
) -> (R, Option<Term<'e>>) {
    let armed = Kept {
        env: env.as_c_arg() as usize,
        pid: env.pid(),
        tags,
        message: None,
    };
    let guard = KeepGuard {
        env,
        previous: KEPT.with(|k| k.replace(Some(armed))),
    };
    let out = f();
    let kept = guard.disarm();
    // SAFETY: kept only when built in `env`, whose NIF call is running.
    (out, kept.map(|term| unsafe { Term::new(env, term) }))
}

/// Puts back what [`keeping_message`] replaced; on a panic, sends the
/// message it kept so the caller still gets it.
struct KeepGuard<'e> {
    env: Env<'e>,
    previous: Option<Kept>,
}

impl KeepGuard<'_> {
    fn disarm(mut self) -> Option<ErlNifTerm> {
        let armed = KEPT.with(|k| k.replace(self.previous.take()));
        std::mem::forget(self);
        armed.and_then(|k| k.message)
    }
}

impl Drop for KeepGuard<'_> {
    fn drop(&mut self) {
        let armed = KEPT.with(|k| k.replace(self.previous.take()));
        if let Some(Kept {
            pid,
            message: Some(term),
            ..
        }) = armed
        {
            // SAFETY: built in `self.env`, whose NIF call is still running.
            let _ = self.env.send(&pid, unsafe { Term::new(self.env, term) });
        }
    }
}

/// Keep `message` (a term of `env`, tagged `tag`) if [`keeping_message`]
/// is armed for this env, process and tag and has kept nothing yet.
fn keep_message(env: Env, pid: &LocalPid, tag: &str, message: Term) -> bool {
    KEPT.with(|k| match k.borrow_mut().as_mut() {
        Some(kept)
            if kept.env == env.as_c_arg() as usize
                && kept.pid == *pid
                && kept.message.is_none()
                && kept.tags.contains(&tag) =>
        {
            kept.message = Some(message.as_c_arg());
            true
        }
        _ => false,
    })
}

/// A value that answers a request or travels with one.
pub trait Payload {
    fn to_value(&self) -> Value;

    /// The payload as a term of `env`: [`Payload::to_value`]'s, built
    /// without the `Value` where a payload knows how (an exec's result).
    fn to_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        self.to_value().to_term(env)
    }
}

impl Payload for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }

    fn to_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        Value::to_term(self, env)
    }
}

/// Where one request's messages go.
pub enum Caller {
    /// A process of this node, waiting on `reference`.
    Process { pid: LocalPid, reference: Reference },
    /// Request `id` of the VM at the other end of a worker's port.
    Port { id: u64, frames: Arc<FrameWriter> },
}

/// Where a process caller's ref lives.
pub enum Reference {
    /// In the env of the exec NIF that is running now (the env's address),
    /// usable only by that call, on its thread. What other threads send
    /// meanwhile waits in `queued`. [`Caller::keep`] or [`Caller::close`]
    /// ends this state before the NIF returns ([`crate::run::runner::drive`]).
    InNif {
        env: usize,
        term: ErlNifTerm,
        queued: Vec<(&'static str, Value)>,
    },
    /// Copied into an env of its own: usable from any thread.
    Saved { env: OwnedEnv, term: SavedTerm },
    /// The call returned its answer itself, or the caller gave up on the
    /// request: nothing more is sent.
    Closed,
}

impl Caller {
    /// Capture `pid` and `reference` (a term of the calling NIF) for later.
    pub fn process(pid: LocalPid, reference: Term<'_>) -> Self {
        let env = OwnedEnv::new();
        let term = env.save(reference);
        Caller::Process {
            pid,
            reference: Reference::Saved { env, term },
        }
    }

    /// `pid` and `reference`, a term of the exec NIF running on this thread,
    /// left in that NIF's env. Only for requests driven by
    /// [`crate::run::runner::drive`] under [`crate::run::runner::with_nif_env`], which
    /// keeps or closes it before the NIF returns.
    pub fn in_nif(pid: LocalPid, reference: Term<'_>) -> Self {
        Caller::Process {
            pid,
            reference: Reference::InNif {
                env: reference.get_env().as_c_arg() as usize,
                term: reference.as_c_arg(),
                queued: Vec::new(),
            },
        }
    }

    /// The request goes on after its NIF returns: copy its ref out of `env`
    /// (that NIF's) and send what was queued (see [`Reference::leave_nif`]).
    pub fn keep(&mut self, env: Option<Env<'_>>) {
        if let Caller::Process { pid, reference } = self {
            reference.leave_nif(pid, env, true);
        }
    }

    /// The NIF returns the answer itself (or is unwinding): send what was
    /// queued, with `env` (that NIF's, when there is one), and nothing after.
    pub fn close(&mut self, env: Option<Env<'_>>) {
        if let Caller::Process { pid, reference } = self {
            reference.leave_nif(pid, env, false);
        }
    }

    /// Whether a process of this node may still be sent the final answer:
    /// its ref is saved and nothing closed it (the final answer closes it,
    /// `ReplyTo::finish`).
    pub fn awaits_answer(&self) -> bool {
        matches!(
            self,
            Caller::Process {
                reference: Reference::Saved { .. },
                ..
            }
        )
    }

    /// The caller has stopped waiting (`ExecTicket::give_up`), or has its
    /// final answer: nothing more is sent to a process. (A port's request
    /// is answered by the worker's owner, which drops what comes late
    /// itself.)
    pub fn stop_sending(&mut self) {
        if let Caller::Process { reference, .. } = self {
            *reference = Reference::Closed;
        }
    }

    /// Send `{tag, ref, payload}`. Returns whether it could be delivered.
    /// In the node it runs on an interpreter thread, or on the BEAM thread
    /// of an exec NIF polling its script inline (a back-call, sent with that
    /// NIF's env: `runner::with_inline_env`).
    pub fn send(&mut self, tag: &'static str, payload: &dyn Payload) -> bool {
        match self {
            Caller::Process { pid, reference } => match reference {
                Reference::Saved { env: ref_env, term } => {
                    if crate::run::runtime::on_beam_thread() {
                        // Without the NIF's env, refusing beats the panic
                        // `enif_send` would cause here.
                        return crate::run::runner::with_inline_env(|env| {
                            let message = message(env, tag, load(env, ref_env, term), payload);
                            keep_message(env, pid, tag, message) || env.send(pid, message).is_ok()
                        })
                        .unwrap_or(false);
                    }
                    OwnedEnv::new()
                        .send_and_clear(pid, |env| {
                            message(env, tag, load(env, ref_env, term), payload)
                        })
                        .is_ok()
                }
                Reference::InNif { .. } => {
                    // The NIF's own inline poll sends with its env; anyone
                    // else leaves the message for that NIF to send.
                    let sent = crate::run::runner::with_inline_env(|nif| {
                        let reference = reference.in_nif(nif)?;
                        let message = message(nif, tag, reference, payload);
                        Some(keep_message(nif, pid, tag, message) || nif.send(pid, message).is_ok())
                    })
                    .flatten();
                    if sent.is_none() {
                        if let Reference::InNif { queued, .. } = reference {
                            queued.push((tag, payload.to_value()));
                        }
                    }
                    sent.unwrap_or(true)
                }
                Reference::Closed => false,
            },
            Caller::Port { id, frames } => {
                let frame = Value::tuple([Value::atom(tag), Value::from(*id), payload.to_value()]);
                frames.write(&etf::encode(&frame))
            }
        }
    }
}

impl Reference {
    /// The ref as a term of `env`, if it is still a term of that NIF call.
    fn in_nif<'e>(&self, env: Env<'e>) -> Option<Term<'e>> {
        match self {
            Reference::InNif {
                env: owner, term, ..
            } if *owner == env.as_c_arg() as usize => {
                // SAFETY: `term` belongs to `env`, whose NIF call is running.
                Some(unsafe { Term::new(env, *term) })
            }
            _ => None,
        }
    }

    /// Leave the NIF's env before the NIF returns: copied with `env` (that
    /// NIF's) when `keep`, else closed, and what was queued sent with
    /// `env`. A ref that cannot be copied (no env, another call's) is closed
    /// and its queue dropped, never left to outlive its call.
    fn leave_nif(&mut self, pid: &LocalPid, env: Option<Env<'_>>, keep: bool) {
        let queued = match self {
            Reference::InNif { queued, .. } => std::mem::take(queued),
            _ => return,
        };
        let Some((env, reference)) = env.and_then(|env| Some((env, self.in_nif(env)?))) else {
            *self = Reference::Closed;
            return;
        };
        *self = match keep {
            true => {
                let saved = OwnedEnv::new();
                let term = saved.save(reference);
                Reference::Saved { env: saved, term }
            }
            false => Reference::Closed,
        };
        for (tag, payload) in queued {
            let _ = env.send(pid, message(env, tag, reference, &payload));
        }
    }
}

/// A saved ref as a term of `env`.
fn load<'e>(env: Env<'e>, ref_env: &OwnedEnv, term: &SavedTerm) -> Term<'e> {
    ref_env.run(|r| term.load(r).in_env(env))
}

/// `{tag, ref, payload}` built in `env`.
fn message<'e>(
    env: Env<'e>,
    tag: &'static str,
    reference: Term<'e>,
    payload: &dyn Payload,
) -> Term<'e> {
    let tag = Value::atom(tag).to_term(env);
    (tag, reference, payload.to_term(env)).encode(env)
}

/// The worker's stdout, where every frame to the VM goes: written by the
/// thread that has the answer, under a lock, with no hand-off to another
/// thread (one wake-up less per message).
pub struct FrameWriter {
    out: Mutex<Box<dyn std::io::Write + Send>>,
}

impl FrameWriter {
    pub fn new(out: Box<dyn std::io::Write + Send>) -> Arc<Self> {
        Arc::new(Self {
            out: Mutex::new(out),
        })
    }

    /// Write one `{:packet, 4}` frame and flush it, in one piece (one
    /// `write` for the VM's port to read, unless the frame outgrows the
    /// pipe). A failed write means the VM is gone: the worker has nothing
    /// left to do.
    pub fn write(&self, frame: &[u8]) -> bool {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX).to_be_bytes();
        let mut packet = Vec::with_capacity(len.len() + frame.len());
        packet.extend_from_slice(&len);
        packet.extend_from_slice(frame);
        let mut out = self.out.lock();
        if out.write_all(&packet).and_then(|()| out.flush()).is_err() {
            std::process::exit(0);
        }
        true
    }
}

/// A caller shared between the task answering it and the back-calls and
/// output chunks that reach it while the task runs.
pub type SharedCaller = Arc<Mutex<Caller>>;

/// The obligation to answer one request exactly once.
pub struct ReplyTo {
    caller: SharedCaller,
    answered: bool,
}

impl ReplyTo {
    pub fn new(caller: Caller) -> Self {
        Self {
            caller: Arc::new(Mutex::new(caller)),
            answered: false,
        }
    }

    /// The caller, for messages sent before the final answer.
    pub fn caller(&self) -> SharedCaller {
        Arc::clone(&self.caller)
    }

    /// The request was answered another way (the inline fast path returned
    /// the outcome directly): send nothing more.
    pub fn dismiss(mut self) {
        self.answered = true;
        crate::run::runner::with_nif_env_here(|env| self.caller.lock().close(env));
    }

    /// The request goes on past its NIF's return (see [`Caller::keep`]).
    pub fn keep(&self) {
        crate::run::runner::with_nif_env_here(|env| self.caller.lock().keep(env));
    }

    /// Send the final `{:ex_bashkit_reply, ref, outcome}`. A caller whose
    /// ref is saved is then closed: the answer is sent once, whoever sends
    /// it (`ExecTicket::answer_cancelled`).
    pub fn finish(mut self, outcome: &dyn Payload) {
        self.answered = true;
        let mut caller = self.caller.lock();
        caller.send(FINAL_REPLY, outcome);
        if caller.awaits_answer() {
            caller.stop_sending();
        }
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        // A ref left in a NIF's env must not outlive that call (a panic
        // unwinding through `drive`).
        if std::thread::panicking() {
            self.caller.lock().close(None);
        }
        if !self.answered {
            self.answered = true;
            let abandoned =
                Value::error("request abandoned: the interpreter task ended without an answer");
            self.caller.lock().send(FINAL_REPLY, &abandoned);
        }
    }
}

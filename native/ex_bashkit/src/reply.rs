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

use std::sync::Arc;

use parking_lot::Mutex;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::{Encoder, Env, LocalPid, Term};

use crate::etf;
use crate::value::Value;

/// A value that answers a request or travels with one.
pub trait Payload {
    fn to_value(&self) -> Value;
}

impl Payload for Value {
    fn to_value(&self) -> Value {
        self.clone()
    }
}

/// Where one request's messages go.
pub enum Caller {
    /// A process of this node, waiting on `reference`.
    Process {
        pid: LocalPid,
        ref_env: OwnedEnv,
        reference: SavedTerm,
    },
    /// Request `id` of the VM at the other end of a worker's port.
    Port { id: u64, frames: Arc<FrameWriter> },
}

impl Caller {
    /// Capture `pid` and `reference` (a term of the calling NIF) for later.
    pub fn process(pid: LocalPid, reference: Term<'_>) -> Self {
        let ref_env = OwnedEnv::new();
        let reference = ref_env.save(reference);
        Caller::Process {
            pid,
            ref_env,
            reference,
        }
    }

    /// Send `{tag, ref, payload}`. Returns whether it could be delivered.
    /// In the node it runs on an interpreter thread, or on the BEAM thread
    /// of an exec NIF polling its script inline (a back-call, sent with that
    /// NIF's env: `runner::with_inline_env`).
    pub fn send(&self, tag: &'static str, payload: &dyn Payload) -> bool {
        match self {
            Caller::Process {
                pid,
                ref_env,
                reference,
            } => {
                let value = payload.to_value();
                if crate::runtime::on_beam_thread() {
                    // Without the NIF's env, refusing beats the panic
                    // `enif_send` would cause here.
                    return crate::runner::with_inline_env(|env| {
                        let message = message(env, tag, ref_env, reference, &value);
                        env.send(pid, message).is_ok()
                    })
                    .unwrap_or(false);
                }
                OwnedEnv::new()
                    .send_and_clear(pid, |env| message(env, tag, ref_env, reference, &value))
                    .is_ok()
            }
            Caller::Port { id, frames } => {
                let frame = Value::tuple([Value::atom(tag), Value::from(*id), payload.to_value()]);
                frames.write(&etf::encode(&frame))
            }
        }
    }
}

/// `{tag, ref, payload}` built in `env`.
fn message<'e>(
    env: Env<'e>,
    tag: &'static str,
    ref_env: &OwnedEnv,
    reference: &SavedTerm,
    payload: &Value,
) -> Term<'e> {
    let reference = ref_env.run(|r| reference.load(r).in_env(env));
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
    /// the outcome directly): send nothing.
    pub fn dismiss(mut self) {
        self.answered = true;
    }

    /// Send the final `{:ex_bashkit_reply, ref, outcome}`.
    pub fn finish(mut self, outcome: &dyn Payload) {
        self.answered = true;
        self.caller.lock().send("ex_bashkit_reply", outcome);
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if !self.answered {
            self.answered = true;
            let abandoned =
                Value::error("request abandoned: the interpreter task ended without an answer");
            self.caller.lock().send("ex_bashkit_reply", &abandoned);
        }
    }
}

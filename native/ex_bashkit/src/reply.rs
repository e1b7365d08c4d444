//! Messages from interpreter threads to the Elixir process that asked.
//!
//! Every message is `{tag, ref, payload}` where `ref` is the reference the
//! caller created for this request, so its `receive` matches only its own.
//! The tags (see `ExBashkit.Callbacks` for the Elixir side):
//!
//! - `:ex_bashkit_reply`: the final answer, exactly one per request. If the
//!   task ends without answering (it cannot, short of a runtime teardown),
//!   `ReplyTo`'s `Drop` sends an error so the caller never waits forever.
//! - `:ex_bashkit_callback`: a back-call request (see `callbacks.rs`).
//! - `:ex_bashkit_output`: a chunk of streamed output.
//!
//! Messages are built in a fresh `OwnedEnv` each time and sent from a
//! non-BEAM thread, so no term outlives its message.

use std::sync::Arc;

use parking_lot::Mutex;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::types::atom::Atom;
use rustler::{Encoder, Env, LocalPid, NewBinary, Term};

rustler::atoms! {
    ok,
    error,
    ex_bashkit_reply,
}

/// A Rust-side value that can be turned into a term in a message env.
pub trait Payload {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a>;
}

/// Encode raw bytes as an Elixir binary.
pub fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Term<'a> {
    let mut bin = NewBinary::new(env, bytes.len());
    bin.as_mut_slice().copy_from_slice(bytes);
    bin.into()
}

/// The process waiting for a request, and the reference it waits on.
pub struct Caller {
    pid: LocalPid,
    ref_env: OwnedEnv,
    reference: SavedTerm,
}

impl Caller {
    /// Capture `pid` and `reference` (a term of the calling NIF) for later.
    pub fn new(pid: LocalPid, reference: Term<'_>) -> Self {
        let ref_env = OwnedEnv::new();
        let reference = ref_env.save(reference);
        Self {
            pid,
            ref_env,
            reference,
        }
    }

    /// Send `{tag, ref, payload}`. Returns whether the process was alive.
    /// Must run on a non-BEAM thread (interpreter threads always are).
    pub fn send(&self, tag: Atom, payload: &dyn Payload) -> bool {
        if rustler::thread::is_scheduler_thread() {
            // Never happens by construction; refusing beats the panic
            // `enif_send` would cause here.
            return false;
        }
        let mut msg_env = OwnedEnv::new();
        msg_env
            .send_and_clear(&self.pid, |env| {
                let reference = self
                    .ref_env
                    .run(|ref_env| self.reference.load(ref_env).in_env(env));
                (tag, reference, payload.encode(env)).encode(env)
            })
            .is_ok()
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
    pub fn new(pid: LocalPid, reference: Term<'_>) -> Self {
        Self {
            caller: Arc::new(Mutex::new(Caller::new(pid, reference))),
            answered: false,
        }
    }

    /// The caller, for messages sent before the final answer.
    pub fn caller(&self) -> SharedCaller {
        Arc::clone(&self.caller)
    }

    /// Send the final `{:ex_bashkit_reply, ref, outcome}`.
    pub fn finish(mut self, outcome: &dyn Payload) {
        self.answered = true;
        self.caller.lock().send(ex_bashkit_reply(), outcome);
    }
}

struct Abandoned;

impl Payload for Abandoned {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        (
            error(),
            "request abandoned: the interpreter task ended without an answer",
        )
            .encode(env)
    }
}

impl Drop for ReplyTo {
    fn drop(&mut self) {
        if !self.answered {
            self.answered = true;
            self.caller.lock().send(ex_bashkit_reply(), &Abandoned);
        }
    }
}

/// `{:error, message}`.
pub struct ErrorMessage(pub String);

impl Payload for ErrorMessage {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        (error(), self.0.as_str()).encode(env)
    }
}

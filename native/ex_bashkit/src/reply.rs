//! Messages from interpreter threads to the Elixir process that asked.
//!
//! Every message is `{tag, ref, payload}` where `ref` is the reference the
//! caller created for this request, so its `receive` matches only its own:
//!
//! - `{:ex_bashkit_reply, ref, {:ok, result_tuple} | {:error, message}}`:
//!   the final answer; exactly one per request, guaranteed by `Drop`.
//!
//! Messages are built in a fresh `OwnedEnv` each time and sent from a
//! non-BEAM thread, so no term outlives its message.

use rustler::env::{OwnedEnv, SavedTerm};
use rustler::types::atom::Atom;
use rustler::{Encoder, Env, LocalPid, NewBinary, Term};

rustler::atoms! {
    ok,
    error,
    ex_bashkit_reply,
}

/// Where and under which reference to answer one request.
pub struct ReplyTo {
    pid: LocalPid,
    ref_env: OwnedEnv,
    reference: SavedTerm,
    answered: bool,
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

impl ReplyTo {
    /// Capture `pid` and `reference` (a term of the calling NIF) for later.
    pub fn new(pid: LocalPid, reference: Term<'_>) -> Self {
        let ref_env = OwnedEnv::new();
        let reference = ref_env.save(reference);
        Self {
            pid,
            ref_env,
            reference,
            answered: false,
        }
    }

    /// Send `{tag, ref, payload}` to the caller. Must run on a non-BEAM thread.
    pub fn send(&self, tag: Atom, payload: &dyn Payload) {
        if rustler::thread::is_scheduler_thread() {
            // Never happens by construction (sends come from interpreter
            // threads); refusing is better than the panic enif_send causes.
            return;
        }
        let mut msg_env = OwnedEnv::new();
        // A dead recipient is not an error: nobody is waiting any more.
        let _ = msg_env.send_and_clear(&self.pid, |env| {
            let reference = self
                .ref_env
                .run(|ref_env| self.reference.load(ref_env).in_env(env));
            (tag, reference, payload.encode(env)).encode(env)
        });
    }

    /// Send the final `{:ex_bashkit_reply, ref, outcome}`.
    pub fn finish(mut self, outcome: &dyn Payload) {
        self.answered = true;
        self.send(ex_bashkit_reply(), outcome);
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
            self.send(ex_bashkit_reply(), &Abandoned);
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

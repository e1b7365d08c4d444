//! The session calls that are not execs (`state/1`, `reset/1`,
//! `snapshot/2`, `restore/3`) as calls with a lifetime of their own: a
//! deadline and a caller whose death cancels them, as an exec has.
//!
//! Each such call waits for the session's interpreter lock behind the
//! calls submitted before it, like an exec (`session/line.rs`). That wait is what
//! the deadline bounds and what a cancel ends: the call then answers
//! `{:error, reason}` at once and never runs. Once it holds the lock it
//! runs to its end (a reset or a restore is never left half applied); that
//! part is bounded by the session's size, not by a script.
//!
//! The call is registered under its id in the session's table of calls, the
//! one `cancel_exec` looks in, so the existing ways of cancelling an exec
//! (the NIF resource's monitor on its caller, the worker's
//! `{:cancel_exec, sid, id}` frame) cancel these too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::map_struct;
use crate::result::reason::{Failure, Reason};
use crate::run::watchdog::{self, ExecTicket};
use crate::session::line::{Place, Turn};
use crate::session::Session;

map_struct! {
    /// Per-call options of the lifecycle calls, validated by Elixir.
    #[derive(Debug, Default)]
    pub struct OpCallOptions {
        /// How long the call may wait for its turn, from submission.
        pub timeout_ms: Option<u64>,
    }
}

/// One lifecycle call in flight: registered with its session until dropped.
pub struct Op {
    session: Arc<Session>,
    name: &'static str,
    id: u64,
    ticket: Arc<ExecTicket>,
    timeout_ms: Option<u64>,
    // In mutexes only to make `Op` `Sync`: jobs hold `&Op` across awaits.
    place: Mutex<Option<Place>>,
    on_end: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Op {
    /// Register call `id` (`name` is the public function, for messages) on
    /// `session` and start its deadline; `on_end` runs once it is over.
    pub fn new(
        session: Arc<Session>,
        name: &'static str,
        id: u64,
        call: OpCallOptions,
        on_end: Option<Box<dyn FnOnce() + Send>>,
    ) -> Self {
        let ticket = ExecTicket::new();
        let place = session.register_call(id, &ticket);
        if let Some(ms) = call.timeout_ms {
            watchdog::schedule(Instant::now() + Duration::from_millis(ms), &ticket);
        }
        Self {
            session,
            name,
            id,
            ticket,
            timeout_ms: call.timeout_ms,
            place: Mutex::new(Some(place)),
            on_end: Mutex::new(on_end),
        }
    }

    /// The session this call is for.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Wait for the session's interpreter, or say why the call gave up.
    /// A call takes its turn once.
    pub async fn turn(&self) -> Result<Turn, Failure> {
        let place = self.place.lock().take();
        let place = place.ok_or_else(|| format!("{}: its turn was already taken", self.name))?;
        match Session::turn(&self.ticket, place).await {
            Some(bash) => Ok(bash),
            None if self.ticket.timed_out() => Err(Failure::new(
                Reason::Timeout,
                format!(
                    "{} timed out after {} ms waiting for the session (option :timeout_ms)",
                    self.name,
                    self.timeout_ms.unwrap_or_default()
                ),
            )),
            None => Err(Failure::new(
                Reason::Cancelled,
                format!("{} cancelled: its caller exited", self.name),
            )),
        }
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        self.session.forget_call(self.id);
        if let Some(on_end) = self.on_end.get_mut().take() {
            on_end();
        }
    }
}

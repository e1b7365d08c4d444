//! What an exec ends with, as it crosses to Elixir: a `%ExBashkit.Result{}`
//! or a `%ExBashkit.Error{}`, built as maps with their `__struct__` key so
//! both transports (NIF terms, the worker's ETF frames) deliver the struct
//! itself and Elixir shapes nothing. A result's fields are listed once
//! (`result_fields`) and built from that list as a `Value` (a worker's
//! frames) or straight as a term (the node: no `Value` tree per exec).
//!
//! A failed exec keeps the output the script wrote before it was stopped
//! (`Partial`): an agent told "timed out" also needs what ran.

pub(crate) mod bashkit_errors;
pub(crate) mod reason;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bashkit::{Error, ExecResult};
use parking_lot::Mutex;
use rustler::{Atom, Encoder, Env, Term};

use crate::fs::changes::Changes;
use crate::policy::egress::{records_value, RequestRecord};
use crate::result::reason::{error_value, Reason};
use crate::run::reply::Payload;
use crate::run::watchdog::ExecTicket;
use crate::term::value::Value;

/// What one exec cost: commands run (bashkit's cumulative counter, before
/// and after) and wall-clock time in the interpreter, queueing excluded.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics {
    pub commands: u64,
    pub wall_time_us: u64,
}

impl Metrics {
    /// What one command cost on average, in nanoseconds (at least 1: a
    /// measured cost is never "unknown").
    pub fn cost_per_command_ns(&self) -> u64 {
        (self.wall_time_us.saturating_mul(1000) / self.commands.max(1)).max(1)
    }
}

/// Output a running script has written so far, fed by bashkit's output
/// sinks or its streaming callback (already capped at the session's
/// `max_stdout_bytes` / `max_stderr_bytes`).
#[derive(Debug, Default)]
pub struct Partial {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

pub type SharedPartial = Arc<Mutex<Partial>>;

/// A copy of what a running exec has written so far: `(stdout, stderr)`.
pub type OutputSoFar = (Vec<u8>, Vec<u8>);

/// What asking to give up on an exec answered (`Session::give_up_if_overdue`):
/// its output so far, given up; not due yet, for how long (`None`: still
/// waiting for its turn); `None`: it has ended.
pub type GiveUp = Option<Result<OutputSoFar, Option<Duration>>>;

/// A [`GiveUp`] as the caller reads it, by either transport:
/// `{stdout, stderr}`, `{:running, ms | nil}` or `nil`.
pub fn give_up_value(answer: GiveUp) -> Value {
    match answer {
        Some(Ok((stdout, stderr))) => Value::tuple([Value::Binary(stdout), Value::Binary(stderr)]),
        Some(Err(left)) => Value::tuple([
            Value::atom("running"),
            // Rounded up: asked again after `ms`, it is due.
            left.map_or_else(Value::nil, |left| {
                Value::from(
                    u64::try_from(left.as_millis())
                        .unwrap_or(u64::MAX)
                        .saturating_add(1),
                )
            }),
        ]),
        None => Value::nil(),
    }
}

impl Partial {
    pub fn shared() -> SharedPartial {
        Arc::new(Mutex::new(Partial::default()))
    }

    pub fn push(&mut self, stdout: &[u8], stderr: &[u8]) {
        self.stdout.extend_from_slice(stdout);
        self.stderr.extend_from_slice(stderr);
    }

    /// Add one sink chunk to stdout or stderr. The first chunk is kept as
    /// it is (most scripts write one): no copy.
    pub fn append(&mut self, bytes: Vec<u8>, stderr: bool) {
        let buffer = if stderr {
            &mut self.stderr
        } else {
            &mut self.stdout
        };
        if buffer.is_empty() {
            *buffer = bytes;
        } else {
            buffer.extend_from_slice(&bytes);
        }
    }

    /// A copy of everything written so far, `(stdout, stderr)`.
    pub fn copy(&self) -> OutputSoFar {
        (self.stdout.clone(), self.stderr.clone())
    }

    /// Everything written so far, `(stdout, stderr)`, leaving it empty.
    pub fn take(&mut self) -> (Vec<u8>, Vec<u8>) {
        (
            std::mem::take(&mut self.stdout),
            std::mem::take(&mut self.stderr),
        )
    }
}

/// Why an exec did not run to completion, in the terms of
/// `ExBashkit.Error`: `reason` (an atom), the `:limits` key that would have
/// let it finish, the message, and the output written before it stopped.
#[derive(Debug, Default)]
pub struct ExecFailure {
    pub reason: Reason,
    pub limit: Option<&'static str>,
    pub message: String,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ExecFailure {
    /// A failure with no output (before the script ran, or a panic).
    pub fn internal(message: String) -> Self {
        Self {
            reason: Reason::Internal,
            message,
            ..Self::default()
        }
    }

    fn with_partial(mut self, partial: Option<&SharedPartial>) -> Self {
        if let Some(partial) = partial {
            (self.stdout, self.stderr) = partial.lock().take();
        }
        self
    }
}

impl Payload for ExecFailure {
    /// `{:error, %ExBashkit.Error{}}`.
    fn to_value(&self) -> Value {
        error_value(
            self.reason,
            self.limit,
            &self.message,
            &self.stdout,
            &self.stderr,
        )
    }
}

/// What an exec ended with, ready to encode.
pub enum ExecOutcome {
    Ok(
        Box<ExecResult>,
        Option<Changes>,
        Metrics,
        Vec<RequestRecord>,
    ),
    Failed(Box<ExecFailure>),
}

impl ExecOutcome {
    /// Classify bashkit's answer. Our watchdog and `cancel/1` stop a script
    /// through the same token: `ticket` says which one did.
    pub fn new(
        result: bashkit::Result<ExecResult>,
        changes: Option<Changes>,
        metrics: Metrics,
        requests: Vec<RequestRecord>,
        ticket: &ExecTicket,
        timeout_ms: Option<u64>,
        partial: Option<&SharedPartial>,
    ) -> Self {
        let failure = match result {
            Ok(result) => return ExecOutcome::Ok(Box::new(result), changes, metrics, requests),
            Err(_) if ticket.timed_out() => ExecFailure {
                reason: Reason::Timeout,
                message: format!(
                    "execution timed out after {} ms (exec option :timeout_ms)",
                    timeout_ms.unwrap_or_default()
                ),
                ..ExecFailure::default()
            },
            Err(_) if ticket.was_cancelled() => ExecFailure {
                reason: Reason::Cancelled,
                message: "execution cancelled by cancel/1".to_string(),
                ..ExecFailure::default()
            },
            Err(error) => classify(&error),
        };
        ExecOutcome::Failed(Box::new(failure.with_partial(partial)))
    }

    /// The exec was timed out or cancelled before its turn came: it never
    /// ran, so there is no output.
    pub fn stopped(ticket: &ExecTicket, timeout_ms: Option<u64>) -> Self {
        let failure = if ticket.timed_out() {
            ExecFailure {
                reason: Reason::Timeout,
                message: format!(
                    "execution timed out after {} ms (exec option :timeout_ms), waiting for \
                     the session's running exec to end",
                    timeout_ms.unwrap_or_default()
                ),
                ..ExecFailure::default()
            }
        } else {
            ExecFailure {
                reason: Reason::Cancelled,
                message: "execution cancelled before it ran".to_string(),
                ..ExecFailure::default()
            }
        };
        ExecOutcome::Failed(Box::new(failure))
    }

    /// A cancelled exec that had not stopped a second later, with what it
    /// wrote (`ExecTicket::answer_cancelled`; the Worker's words for it).
    pub fn cancelled_running((stdout, stderr): OutputSoFar) -> Self {
        ExecOutcome::Failed(Box::new(ExecFailure {
            reason: Reason::Cancelled,
            message: "execution cancelled by cancel/1 (the script did not stop by itself)"
                .to_string(),
            stdout,
            stderr,
            ..ExecFailure::default()
        }))
    }

    pub fn panicked(panic: String) -> Self {
        ExecOutcome::Failed(Box::new(ExecFailure::internal(format!(
            "internal error in the interpreter: {panic}"
        ))))
    }

    /// A failure before the interpreter ran (it could not be built).
    pub fn error(message: String) -> Self {
        ExecOutcome::Failed(Box::new(ExecFailure::internal(message)))
    }
}

fn classify(error: &Error) -> ExecFailure {
    let (reason, limit) = match error {
        Error::Parse { .. } => (Reason::Parse, None),
        Error::Cancelled => (Reason::Cancelled, None),
        Error::ResourceLimit(limit) => match bashkit_errors::limit_key(limit) {
            Some("timeout_ms") => (Reason::Timeout, Some("timeout_ms")),
            key => (Reason::Limit, key),
        },
        other => match bashkit_errors::session_limit_key(other) {
            Some(key) => (Reason::Limit, Some(key)),
            None => (Reason::Internal, None),
        },
    };
    ExecFailure {
        reason,
        limit,
        message: bashkit_errors::describe(error),
        ..ExecFailure::default()
    }
}

impl Payload for ExecOutcome {
    /// `{:ok, %ExBashkit.Result{}}` or `{:error, %ExBashkit.Error{}}`.
    fn to_value(&self) -> Value {
        match self {
            ExecOutcome::Ok(result, changes, metrics, requests) => {
                let fields = result_fields(result, changes, metrics, requests);
                let pairs = fields.map(|(key, field)| (Value::atom(key), field.to_value()));
                Value::ok_with(Value::Map(pairs.into()))
            }
            ExecOutcome::Failed(failure) => failure.to_value(),
        }
    }

    /// [`Payload::to_value`] as a term of `env`, the result built straight
    /// from [`result_fields`]: no `Value` tree to build and drop, and its
    /// keys' atoms looked up once per VM. A quick exec answers with it as
    /// its NIF's value, where building the answer was a tenth of the call
    /// (bench/DECISIONS.md, "Fewer steps after an exec").
    fn to_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        let ExecOutcome::Ok(result, changes, metrics, requests) = self else {
            return self.to_value().to_term(env);
        };
        let fields = result_fields(result, changes, metrics, requests);
        static KEYS: OnceLock<[Atom; RESULT_FIELDS]> = OnceLock::new();
        let keys = KEYS.get_or_init(|| fields.each_ref().map(|(key, _)| atom(env, key)));
        let keys = keys.map(|key| key.encode(env));
        let values = fields.map(|(_, field)| field.to_term(env));
        match Term::map_from_term_arrays(env, &keys, &values) {
            Ok(map) => (rustler::types::atom::ok(), map).encode(env),
            // Unreachable (the keys are distinct atoms); answered the slow way.
            Err(_) => self.to_value().to_term(env),
        }
    }
}

/// The fields of `%ExBashkit.Result{}`.
const RESULT_FIELDS: usize = 12;

/// `%ExBashkit.Result{}` of an exec, as (key, field) pairs: the struct's one
/// description, which both [`Payload::to_value`] (a worker's frames) and
/// its `Payload::to_term` (the node) build. Keys in the VM's term order:
/// it sorts a new map's keys, comparing atoms by their text, so keys that
/// come sorted cost one comparison each.
fn result_fields<'r>(
    result: &'r ExecResult,
    changes: &'r Option<Changes>,
    metrics: &Metrics,
    requests: &'r [RequestRecord],
) -> [(&'static str, ResultField<'r>); RESULT_FIELDS] {
    let stdout = result.stdout.as_bytes();
    let stderr = result.stderr.as_bytes();
    [
        ("__struct__", ResultField::Module),
        ("changes", ResultField::Changes(changes)),
        ("commands", ResultField::Int(metrics.commands.into())),
        ("exit_code", ResultField::Int(result.exit_code.into())),
        ("requests", ResultField::Requests(requests)),
        ("stderr", ResultField::Bytes(stderr)),
        ("stderr_bytes", ResultField::Int(stderr.len() as i128)),
        (
            "stderr_truncated",
            ResultField::Bool(result.stderr_truncated),
        ),
        ("stdout", ResultField::Bytes(stdout)),
        ("stdout_bytes", ResultField::Int(stdout.len() as i128)),
        (
            "stdout_truncated",
            ResultField::Bool(result.stdout_truncated),
        ),
        (
            "wall_time_us",
            ResultField::Int(metrics.wall_time_us.into()),
        ),
    ]
}

/// A value of [`result_fields`], borrowed from the exec's result.
enum ResultField<'r> {
    /// `ExBashkit.Result`, the `__struct__`.
    Module,
    Changes(&'r Option<Changes>),
    Requests(&'r [RequestRecord]),
    Int(i128),
    Bool(bool),
    Bytes(&'r [u8]),
}

const RESULT_MODULE: &str = "Elixir.ExBashkit.Result";

rustler::atoms! { result_module = RESULT_MODULE }

impl ResultField<'_> {
    fn to_value(&self) -> Value {
        match self {
            ResultField::Module => Value::atom(RESULT_MODULE),
            ResultField::Changes(changes) => changes_value(changes),
            ResultField::Requests(requests) => records_value(requests),
            ResultField::Int(n) => Value::Int(*n),
            ResultField::Bool(b) => (*b).into(),
            ResultField::Bytes(bytes) => Value::bin(bytes),
        }
    }

    fn to_term<'a>(&self, env: Env<'a>) -> Term<'a> {
        match self {
            ResultField::Module => result_module().encode(env),
            ResultField::Changes(None) => rustler::types::atom::nil().encode(env),
            // Only with `track_changes: true`, where the scans dwarf this.
            ResultField::Changes(changes) => changes_value(changes).to_term(env),
            ResultField::Requests([]) => Term::list_new_empty(env),
            ResultField::Requests(requests) => records_value(requests).to_term(env),
            ResultField::Int(n) => Value::Int(*n).to_term(env),
            ResultField::Bool(b) => b.encode(env),
            ResultField::Bytes(bytes) => crate::term::value::binary_term(env, bytes),
        }
    }
}

/// `%{created:, modified:, deleted:, complete:}`, or nil.
fn changes_value(changes: &Option<Changes>) -> Value {
    match changes {
        Some(c) => Value::map([
            ("created", c.created.clone().into()),
            ("modified", c.modified.clone().into()),
            ("deleted", c.deleted.clone().into()),
            ("complete", c.complete.into()),
        ]),
        None => Value::nil(),
    }
}

/// The atom `name`, made once for the VM's lifetime (atoms are never freed).
fn atom(env: Env<'_>, name: &str) -> Atom {
    // The names are literals of this file: valid atoms.
    Atom::from_str(env, name).unwrap_or_else(|_| rustler::types::atom::nil())
}

//! The session as the node holds it (`isolation: :in_node`): a NIF resource
//! that monitors the processes with calls under way, and the NIFs that act
//! on it (new, exec, cancel, give up, info).

use std::sync::Arc;

use parking_lot::Mutex;
use rustler::{Binary, Encoder, Env, LocalPid, Monitor, ResourceArc, Term};

use crate::nif::dirty;
use crate::nif::error::NifResult;
use crate::run::reply::{self, Caller, Payload, ReplyTo};
use crate::run::runner;
use crate::run::teardown::DropLater;
use crate::session::lifecycle::{Op, OpCallOptions};

use super::cost::{InlinePoller, QUICK_SCRIPT_BYTES};
use super::exec::{exec, ExecCallOptions};
use super::{live_sessions, next_exec_id, Session};

/// A session as the node holds it (`isolation: :in_node`): the core session
/// plus a monitor on each process with calls under way, whose death cancels
/// those calls.
pub struct SessionResource {
    /// Dropped on a runner: the VM drops a resource on a normal scheduler,
    /// and a session's teardown takes as long as it is big (`run/teardown.rs`).
    pub session: DropLater<Arc<Session>>,
    callers: Mutex<Vec<WatchedCaller>>,
}

/// A process this session monitors, and its calls not yet over.
///
/// The monitor outlives the calls: it stays for the process's next ones
/// and goes when the process dies (`down`) or the session does (the VM
/// drops a resource's monitors with it). Setting a monitor up and taking it
/// down each signal the monitored process, which wakes its scheduler: per
/// call, that was about 20 µs of a builtin round trip (an A/B of 3 × 10 000
/// round trips, bench/DECISIONS.md). So there is at most one monitor per
/// (session, live caller), and a call only joins its caller's list.
struct WatchedCaller {
    pid: LocalPid,
    monitor: Monitor,
    calls: Vec<u64>,
}

// Only touched through its locks, so a panic caught mid-operation cannot
// leave it observably half-updated.
impl std::panic::RefUnwindSafe for SessionResource {}
impl std::panic::UnwindSafe for SessionResource {}

#[rustler::resource_impl]
impl rustler::Resource for SessionResource {
    /// A caller died: nobody will read its answers, so stop its calls
    /// (running) or make them end at once when their turn comes (queued).
    fn down<'a>(&'a self, _env: Env<'a>, _pid: LocalPid, monitor: Monitor) {
        let calls = {
            let mut callers = self.callers.lock();
            match callers.iter().position(|c| c.monitor == monitor) {
                Some(i) => callers.swap_remove(i).calls,
                None => Vec::new(),
            }
        };
        for id in calls {
            self.session.cancel_exec(id);
        }
    }
}

/// A session as a NIF argument: the node's reference to its resource.
pub type Handle = ResourceArc<SessionResource>;

/// Watch `pid`, the caller of call `id` on `handle`: its death cancels the
/// call (`down`). Returns what to run once the call is over.
fn watch_caller(env: Env, handle: &Handle, pid: &LocalPid, id: u64) -> Box<dyn FnOnce() + Send> {
    watch(env, handle, pid, id);
    Box::new(unwatch_caller(handle, id))
}

/// Add call `id` to `pid`'s calls, monitoring `pid` if this session does not
/// yet. A caller that is already dead (killed while its call's NIF ran: its
/// `down` may even have come and gone) cannot be monitored: nobody will
/// read the answer, so the call is cancelled, as `down` would have.
fn watch(env: Env, handle: &Handle, pid: &LocalPid, id: u64) {
    let watched = {
        let mut callers = handle.callers.lock();
        if let Some(caller) = callers.iter_mut().find(|c| c.pid == *pid) {
            caller.calls.push(id);
            true
        } else if let Some(monitor) = handle.monitor(Some(env), pid) {
            callers.push(WatchedCaller {
                pid: *pid,
                monitor,
                calls: vec![id],
            });
            true
        } else {
            false
        }
    };
    if !watched {
        handle.session.cancel_exec(id);
    }
}

/// What to run once call `id` is over: take it off its caller's calls (the
/// monitor stays, see [`WatchedCaller`]).
fn unwatch_caller(handle: &Handle, id: u64) -> impl FnOnce() + Send + 'static {
    let owner = handle.clone();
    move || {
        for caller in owner.callers.lock().iter_mut() {
            if let Some(i) = caller.calls.iter().position(|&c| c == id) {
                caller.calls.swap_remove(i);
                return;
            }
        }
    }
}

/// A session for the configuration term `config` (decoded once per term:
/// `config/cache.rs`).
fn new_handle(config: Term) -> NifResult<Handle> {
    let decoded = crate::config::cache::decode(config)?;
    Ok(ResourceArc::new(SessionResource {
        session: DropLater::new(Session::new(&decoded)?),
        callers: Mutex::new(Vec::new()),
    }))
}

#[rustler::nif(schedule = "DirtyIo")]
fn session_new(config: Term) -> NifResult<Handle> {
    new_handle(config)
}

/// `session_new/1` on the calling (normal) scheduler, for configurations
/// whose construction touches neither the host nor large data (Elixir's
/// `ExBashkit.Session.Options.inline?/1` decides): building the interpreter
/// then takes tens of microseconds, less than the round trip to a dirty
/// scheduler would add.
#[rustler::nif]
fn session_new_inline(env: Env, config: Term) -> NifResult<Handle> {
    let handle = new_handle(config);
    // Tell the VM this call used part of its time slice (about 40 µs of 1 ms).
    rustler::schedule::consume_timeslice(env, 4);
    handle
}

/// Run `script`: where it was called when it is quick and fits
/// (`runs_here`), else on a dirty CPU scheduler; there it is polled first
/// (`run/runner.rs`), so a short script answers as the NIF's return value,
/// `{:done, id, outcome}`.
/// A script that waits or runs past its slice goes on on the runner pool and
/// the call returns `{:ok, id}`; the answer then arrives as
/// `{:ex_bashkit_reply, ref, outcome}`. `id` is the exec's id, for
/// `session_cancel_exec/2`.
#[rustler::nif]
fn session_exec<'a>(
    env: Env<'a>,
    handle: Term<'a>,
    script: Term<'a>,
    call: Term<'a>,
    pid: Term<'a>,
    reference: Term<'a>,
) -> rustler::NifResult<Term<'a>> {
    let args = [handle, script, call, pid, reference];
    let handle: Handle = handle.decode()?;
    let Some(call) = runs_here(&handle.session, script, call) else {
        return Ok(dirty::to_dirty_cpu(
            env,
            c"session_exec",
            session_exec_dirty,
            &args,
        ));
    };
    let (script, pid) = (script.decode()?, pid.decode()?);
    Ok(dirty::run_here(env, || {
        exec_answer(env, handle, script, call, pid, reference, true)
    }))
}

// `session_exec` moved to a dirty CPU scheduler.
crate::dirty_entry!(session_exec_dirty, exec_nif);

/// The decoded call options when `session_exec` may run `script` where it
/// was called, on a normal scheduler: a script of at most 512 bytes with no
/// stdin, no streaming, no change tracking, that the session says fits
/// (`Session::quick_call_fits`). Looks at nothing bigger than that: a big script
/// or stdin is not even copied here.
fn runs_here(session: &Session, script: Term, call: Term) -> Option<ExecCallOptions> {
    let script = quick_text(script)?;
    let no_stdin = call
        .map_get(stdin())
        .is_ok_and(|value| rustler::types::atom::nil() == value);
    if !no_stdin {
        return None;
    }
    let call = decode_call(call).ok()?;
    session
        .quick_call_fits(script, &call, InlinePoller::NormalScheduler)
        .then_some(call)
}

/// The text of `script` when it may be quick: at most
/// [`QUICK_SCRIPT_BYTES`] of UTF-8. Nothing bigger is copied or read.
pub(super) fn quick_text<'a>(script: Term<'a>) -> Option<&'a str> {
    let bytes = script.decode::<Binary<'a>>().ok()?.as_slice();
    if bytes.len() > QUICK_SCRIPT_BYTES {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

rustler::atoms! { stdin, done }

/// The body of `session_exec`, wherever it runs: `[handle, script, call,
/// pid, ref]`. Arguments of the wrong type raise `badarg`, as rustler's
/// decoding does; the answer is `{:ok, _}` or `{:error, message}`.
fn exec_nif<'a>(env: Env<'a>, args: &[Term<'a>]) -> rustler::NifResult<Term<'a>> {
    let [handle, script, call, pid, reference] = args else {
        return Err(rustler::Error::BadArg);
    };
    let handle: Handle = handle.decode()?;
    let script = script.decode::<Binary>()?;
    let pid: LocalPid = pid.decode()?;
    let answer = script_text(&script).and_then(|script| {
        let call = decode_call(*call)?;
        exec_answer(env, handle, script.to_owned(), call, pid, *reference, false)
    });
    Ok(answer.encode(env))
}

/// A script is UTF-8 text: anything else is the caller's error, answered
/// as one (`Session.exec/3` leaves this check to the NIF in the node).
fn script_text<'s>(script: &'s Binary) -> NifResult<&'s str> {
    std::str::from_utf8(script.as_slice()).map_err(|_| "script is not valid UTF-8".into())
}

fn decode_call(call: Term) -> NifResult<ExecCallOptions> {
    Ok(ExecCallOptions::from_term(call)?)
}

/// Run the exec; `{:done, id, outcome}`, `{:ok, id}`, or, for a quick
/// script polled here (`quick`) that made a back-call, `{:ok, id,
/// message}`: that back-call, returned instead of sent
/// (`reply::keeping_message`; see `session_exec`).
fn exec_answer<'a>(
    env: Env<'a>,
    handle: Handle,
    script: String,
    call: ExecCallOptions,
    pid: LocalPid,
    reference: Term<'a>,
    quick: bool,
) -> NifResult<Term<'a>> {
    let id = next_exec_id();
    let on_end = unwatch_caller(&handle, id);
    // The caller dying cancels the exec, once it no longer runs on the
    // caller's own call: an exec that completes inline needs no monitor.
    let before_park = || watch(env, &handle, &pid, id);
    let reply = ReplyTo::new(Caller::in_nif(pid, reference));
    let session = Arc::clone(&handle.session);
    let run = || exec(session, id, script, call, reply, on_end, before_park);
    let run = || runner::with_nif_env(env, run);
    let (outcome, back_call) = match quick {
        true => reply::keeping_message(env, &[reply::BACK_CALL], run),
        false => (run(), None),
    };
    Ok(match (outcome, back_call) {
        // A back-call that the exec no longer waits for (it was cancelled
        // in the same poll) is dropped unsent: nobody would answer it.
        (Some(outcome), _) => (done(), id, outcome.to_term(env)).encode(env),
        (None, None) => (rustler::types::atom::ok(), id).encode(env),
        (None, Some(message)) => (rustler::types::atom::ok(), id, message).encode(env),
    })
}

#[rustler::nif(name = "live_sessions")]
fn live_sessions_count() -> u64 {
    live_sessions()
}

/// Stop the running exec of the session; `true` if one was running.
#[rustler::nif]
fn session_cancel(handle: Handle) -> bool {
    handle.session.cancel()
}

/// Stop exec `id` of the session (running or queued); `true` if it existed.
#[rustler::nif]
fn session_cancel_exec(handle: Handle, id: u64) -> bool {
    handle.session.cancel_exec(id)
}

/// In the node, the caller of exec `id` answers it itself once it should
/// have ended and has not (a command that does not check its token, past
/// its deadline): see [`Session::give_up_if_overdue`]. Answers
/// `{stdout, stderr}`, `{:running, ms | nil}` or `nil`
/// ([`crate::result::give_up_value`]). On a dirty scheduler: the output so far
/// may be large.
#[rustler::nif(schedule = "DirtyCpu")]
fn session_give_up_exec(env: Env, handle: Handle, id: u64) -> Term {
    crate::result::give_up_value(handle.session.give_up_if_overdue(id)).to_term(env)
}

/// Lifecycle call `name` on `handle` for `pid`, its options decoded from
/// `call`: registered, deadline started, caller monitored.
pub fn op_for(
    env: Env,
    handle: &Handle,
    name: &'static str,
    call: Term,
    pid: &LocalPid,
) -> NifResult<Op> {
    let call = OpCallOptions::from_term(call)?;
    let id = next_exec_id();
    let on_end = watch_caller(env, handle, pid, id);
    Ok(Op::new(
        Arc::clone(&handle.session),
        name,
        id,
        call,
        Some(on_end),
    ))
}

/// `{id, running?, cwd | nil}` for `inspect/2`.
#[rustler::nif]
fn session_info(env: Env, handle: Handle) -> Term {
    handle.session.info().to_term(env)
}

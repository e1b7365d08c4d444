//! ExBashkit's NIF boundary: one thin function per Elixir-facing operation.
//!
//! Each NIF decodes its arguments, delegates to the module of its concern
//! and encodes the answer; none runs a script on a BEAM scheduler thread.
//! Every body is wrapped in `guard::catch`, so a panic becomes
//! `{:error, message}` instead of reaching the VM.
//!
//! Modules: `runtime` (interpreter threads), `allocator` (mimalloc), `session` (the resource, exec,
//! state, reset), `options` (option term to `Bash`), `mounts` (host
//! directories), `net` (network allowlist), `fs_api` (filesystem API),
//! `callbacks` (back-calls into Elixir) with `builtins` and `vfs` on top,
//! `interrupt` and `watchdog` (cancel, per-call timeouts), `changes` (file
//! tracking), `snapshot` (snapshot/restore), `python` (the `:python`
//! builtin), `reply` (messages to Elixir), `errors` (messages), `guard`
//! (panics), `search` (glob/grep over a session's filesystem),
//! `runtime_mounts` (mount/unmount while a session lives).

mod allocator;
mod builtins;
mod callbacks;
mod changes;
#[cfg(test)]
mod enif_stubs;
mod errors;
mod fs_api;
mod guard;
mod interrupt;
mod mounts;
mod net;
mod options;
mod python;
mod reply;
mod runtime;
mod runtime_mounts;
mod search;
mod session;
mod snapshot;
mod vfs;
mod watchdog;

use rustler::{Binary, Encoder, Env, LocalPid, ResourceArc, Term};

use options::SessionConfig;
use reply::ReplyTo;
use session::{ExecCallOptions, SessionResource};

rustler::atoms! {
    ok,
    error,
    worker_threads,
    max_script_threads,
    stack_size,
}

type Session = ResourceArc<SessionResource>;

/// `{:ok, value}` / `{:error, message}` for the caller, with a panic turned
/// into an error.
fn answer<'a, T: Encoder>(env: Env<'a>, body: impl FnOnce() -> Result<T, String>) -> Term<'a> {
    match guard::catch(body) {
        Ok(Ok(value)) => (ok(), value).encode(env),
        Ok(Err(message)) => (error(), message).encode(env),
        Err(panic) => (error(), format!("internal error: {panic}")).encode(env),
    }
}

/// `:ok` / `{:error, message}`.
fn answer_unit<'a>(env: Env<'a>, body: impl FnOnce() -> Result<(), String>) -> Term<'a> {
    match guard::catch(body) {
        Ok(Ok(())) => ok().encode(env),
        Ok(Err(message)) => (error(), message).encode(env),
        Err(panic) => (error(), format!("internal error: {panic}")).encode(env),
    }
}

/// Submit a job that answers the caller by message (see `reply.rs`):
/// `:ok` once submitted. The job must not fail: a `ReplyTo` always answers.
fn submit<'a>(
    env: Env<'a>,
    pid: LocalPid,
    reference: Term<'a>,
    job: impl FnOnce(ReplyTo),
) -> Term<'a> {
    answer_unit(env, || {
        job(ReplyTo::new(pid, reference));
        Ok(())
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn session_new(env: Env, config: SessionConfig) -> Term {
    answer(env, || SessionResource::new(config).map(ResourceArc::new))
}

#[rustler::nif]
fn session_exec<'a>(
    env: Env<'a>,
    session: Session,
    script: String,
    call: ExecCallOptions,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    answer(env, || {
        Ok(session::exec(
            env,
            session,
            script,
            call,
            pid,
            ReplyTo::new(pid, reference),
        ))
    })
}

#[rustler::nif]
fn exec_once<'a>(env: Env<'a>, script: String, pid: LocalPid, reference: Term<'a>) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        session::exec_once(script, reply)
    })
}

#[rustler::nif]
fn live_sessions() -> u64 {
    session::live_sessions()
}

/// Stop the running exec of `session`; `true` if one was running.
#[rustler::nif]
fn session_cancel(session: Session) -> bool {
    guard::catch(|| session.cancel()).unwrap_or(false)
}

/// Stop exec `id` of `session` (running or queued); `true` if it existed.
#[rustler::nif]
fn session_cancel_exec(session: Session, id: u64) -> bool {
    guard::catch(|| session.cancel_exec(id)).unwrap_or(false)
}

/// `state/1`: answers `{:ex_bashkit_reply, ref, {:ok, map}}`.
#[rustler::nif]
fn session_state<'a>(
    env: Env<'a>,
    session: Session,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| session::state(session, reply))
}

/// `reset/1`: answers `{:ex_bashkit_reply, ref, :ok | {:error, message}}`.
#[rustler::nif]
fn session_reset<'a>(
    env: Env<'a>,
    session: Session,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| session::reset(session, reply))
}

/// `{id, running?, cwd | nil}` for `inspect/2`.
#[rustler::nif]
fn session_info(env: Env, session: Session) -> Term {
    let cwd = session.try_cwd();
    (session.id, session.is_running(), cwd).encode(env)
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_read<'a>(env: Env<'a>, session: Session, path: String) -> Term<'a> {
    match guard::catch(|| fs_api::read(&session.fs(), &path)) {
        Ok(Ok(bytes)) => (ok(), reply::binary(env, &bytes)).encode(env),
        Ok(Err(message)) => (error(), message).encode(env),
        Err(panic) => (error(), format!("internal error: {panic}")).encode(env),
    }
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_write<'a>(env: Env<'a>, session: Session, path: String, content: Binary<'a>) -> Term<'a> {
    answer_unit(env, || {
        fs_api::write(&session.fs(), &path, content.as_slice())
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_list(env: Env, session: Session, path: String) -> Term {
    answer(env, || {
        let entries = fs_api::list(&session.fs(), &path)?;
        Ok(entries
            .into_iter()
            .map(|(name, kind)| (name, rustler::Atom::from_str(env, kind).expect("atom")))
            .collect::<Vec<_>>())
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_mkdir(env: Env, session: Session, path: String, parents: bool) -> Term {
    answer_unit(env, || fs_api::mkdir(&session.fs(), &path, parents))
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_remove(env: Env, session: Session, path: String, recursive: bool) -> Term {
    answer_unit(env, || fs_api::remove(&session.fs(), &path, recursive))
}

#[rustler::nif(schedule = "DirtyIo")]
fn fs_rename(env: Env, session: Session, from: String, to: String) -> Term {
    answer_unit(env, || fs_api::rename(&session.fs(), &from, &to))
}

/// `{:ok, {type, size}}` / `{:error, message}`.
#[rustler::nif(schedule = "DirtyIo")]
fn fs_stat(env: Env, session: Session, path: String) -> Term {
    answer(env, || {
        let (kind, size) = fs_api::stat(&session.fs(), &path)?;
        Ok((rustler::Atom::from_str(env, kind).expect("atom"), size))
    })
}

/// Answer back-call `call_id` with a term Elixir already normalized (see
/// `callbacks::decode_answer`). `true` if someone was still waiting.
#[rustler::nif]
fn callback_reply(call_id: u64, answer: Term) -> bool {
    guard::catch(|| {
        let answer = callbacks::decode_answer(answer).unwrap_or_else(|| {
            callbacks::Answer::Failed("malformed answer from ExBashkit.Callbacks".into())
        });
        callbacks::reply(call_id, answer)
    })
    .unwrap_or(false)
}

// -- snapshot / restore: jobs on the runtime, answered by message ----------

#[rustler::nif]
fn session_snapshot<'a>(
    env: Env<'a>,
    session: Session,
    request: snapshot::SnapshotRequest,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        snapshot::snapshot(session, request, reply)
    })
}

#[rustler::nif]
fn session_restore<'a>(
    env: Env<'a>,
    session: Session,
    bytes: Term<'a>,
    key: Option<Binary<'a>>,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    // Validated before a `ReplyTo` exists: an invalid argument is answered
    // by the return value alone, with no message left behind.
    answer_unit(env, || {
        let bytes = snapshot::SnapshotBytes::new(bytes)?;
        let key = key.map(|k| k.as_slice().to_vec());
        snapshot::restore(session, bytes, key, ReplyTo::new(pid, reference));
        Ok(())
    })
}

/// `session_new/1` on the calling (normal) scheduler, for configurations
/// whose construction touches neither the host nor large data (no `:files`,
/// no host mounts, cwd `/`): building the interpreter then takes tens of
/// microseconds, less than the round trip to a dirty scheduler and back
/// would add. Elixir picks this NIF only for such configurations
/// (`ExBashkit.Session.new/1`); everything else goes through `session_new`.
#[rustler::nif]
fn session_new_inline(env: Env, config: SessionConfig) -> Term {
    let term = answer(env, || SessionResource::new(config).map(ResourceArc::new));
    // Tell the VM this call used part of its time slice (about 40 µs of 1 ms).
    rustler::schedule::consume_timeslice(env, 4);
    term
}

// -- search and runtime mounts: jobs on the runtime, answered by message ---

/// `ExBashkit.Search.glob/3`: answers `{:ok, [path]} | {:error, message}`.
#[rustler::nif]
fn session_glob<'a>(
    env: Env<'a>,
    session: Session,
    request: search::GlobRequest,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        search::glob(session, request, reply)
    })
}

/// `ExBashkit.Search.grep/3`: answers `{:ok, [{path, line_number, line}]}`,
/// `{:error, {:invalid_regex, message}}` or `{:error, message}`.
#[rustler::nif]
fn session_grep<'a>(
    env: Env<'a>,
    session: Session,
    request: search::GrepRequest,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        search::grep(session, request, reply)
    })
}

/// `ExBashkit.Session.mount/4`: answers `:ok | {:error, message}`.
#[rustler::nif]
fn session_mount<'a>(
    env: Env<'a>,
    session: Session,
    spec: options::MountSpec,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        runtime_mounts::mount(session, spec, reply)
    })
}

/// `ExBashkit.Session.unmount/2`: answers `:ok | {:error, message}`.
#[rustler::nif]
fn session_unmount<'a>(
    env: Env<'a>,
    session: Session,
    vfs_path: String,
    pid: LocalPid,
    reference: Term<'a>,
) -> Term<'a> {
    submit(env, pid, reference, |reply| {
        runtime_mounts::unmount(session, vfs_path, reply)
    })
}

/// `{:ok, map}`: the session's grants (mounts now, network, limits).
#[rustler::nif]
fn session_describe(env: Env, session: Session) -> Term {
    match guard::catch(|| runtime_mounts::describe(env, &session)) {
        Ok(term) => term,
        Err(panic) => (error(), format!("internal error: {panic}")).encode(env),
    }
}

/// Read `[worker_threads: n, max_script_threads: n, stack_size: bytes]`
/// (any may be absent).
fn load(_env: Env, info: Term) -> bool {
    guard::install_panic_hook();
    let mut config = runtime::RuntimeConfig::default();
    if let Ok(pairs) = info.decode::<Vec<(rustler::Atom, u64)>>() {
        for (key, value) in pairs {
            let value = usize::try_from(value).unwrap_or(usize::MAX);
            if key == worker_threads() && value > 0 {
                config.worker_threads = value;
            } else if key == max_script_threads() && value > 0 {
                config.max_script_threads = value;
            } else if key == stack_size() && value >= 1024 * 1024 {
                config.stack_size = value;
            }
        }
    }
    runtime::configure(config);
    true
}

rustler::init!("Elixir.ExBashkit.Native", load = load);

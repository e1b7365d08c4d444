//! Host mounts added and removed while a session lives
//! (`ExBashkit.Session.mount/4`, `unmount/2`), and the description of a
//! session's grants that `ExBashkit.Tool.system_prompt/1` shows a model.
//!
//! A runtime mount passes the very gate `:mounts` passes at `new/1`
//! (`mounts::apply`: sensitive host paths, `:allowed_mount_paths`, missing
//! or non-directory paths, symlinks resolved before judging) and is attached
//! with bashkit's live `Bash::mount`, which leaves shell state alone. Both
//! operations wait for the interpreter, so they take effect between
//! scripts, in arrival order with execs.
//!
//! The session keeps the list of its host mounts (`Session::host_mounts`),
//! starting from `new/1`'s: it refuses a second mount at one path (bashkit
//! would silently replace the first) and tells `unmount` what is a host
//! mount. `reset/1` rebuilds the interpreter from `new/1`'s configuration,
//! so the list goes back to `new/1`'s mounts.

use std::sync::Arc;

use rustler::{LocalPid, Term};

use crate::config::MountSpec;
use crate::nif::error::NifResult;
use crate::run::reply::{Caller, ReplyTo};
use crate::session::{Handle, Session};
use crate::term::value::Value;
use crate::{fs::mounts, run::guard, run::runtime};

/// Attach `spec` to `session`, answering `:ok` or `{:error, message}`.
pub fn mount(session: Arc<Session>, spec: MountSpec, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let bash = session.lock_bash().await;
            let config = session.config();
            if config.virtual_fs.contains(&spec.vfs_path) {
                return Err(format!(
                    "{} is a :virtual_fs mount; one path takes one mount",
                    spec.vfs_path
                ));
            }
            if session
                .host_mounts
                .lock()
                .iter()
                .any(|m| m.vfs_path == spec.vfs_path)
            {
                return Err(format!(
                    "a host directory is already mounted at {}; unmount it first",
                    spec.vfs_path
                ));
            }
            mounts::apply(
                &bash,
                std::slice::from_ref(&spec),
                config.allowed_mount_paths.as_deref(),
            )
            .await?;
            session.host_mounts.lock().push(spec);
            Ok(())
        })
        .await;
        finish(reply, outcome);
    });
}

/// Give `session` (just rebuilt from its configuration) the host mounts
/// `specs`: the runtime mounts and unmounts it had when its process died
/// (`session/recovery.rs`), each through the gate `mount/3` uses.
pub(crate) async fn reapply(
    session: &Session,
    bash: &bashkit::Bash,
    specs: &[MountSpec],
) -> Result<(), String> {
    let current = session.host_mounts.lock().clone();
    for gone in current.iter().filter(|m| !specs.contains(m)) {
        bash.unmount(&gone.vfs_path)
            .map_err(|e| format!("cannot unmount {}: {e}", gone.vfs_path))?;
    }
    let added: Vec<MountSpec> = specs
        .iter()
        .filter(|s| !current.contains(s))
        .cloned()
        .collect();
    let allowed = session.config().allowed_mount_paths.clone();
    mounts::apply(bash, &added, allowed.as_deref()).await?;
    *session.host_mounts.lock() = specs.to_vec();
    Ok(())
}

/// Detach the host mount at `vfs_path`, answering `:ok` or `{:error, message}`.
pub fn unmount(session: Arc<Session>, vfs_path: String, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let bash = session.lock_bash().await;
            let mut host_mounts = session.host_mounts.lock();
            let Some(index) = host_mounts.iter().position(|m| m.vfs_path == vfs_path) else {
                let why = if session.config().virtual_fs.contains(&vfs_path) {
                    "it is a :virtual_fs mount, which stays for the session's life"
                } else {
                    "no host directory is mounted there"
                };
                return Err(format!("cannot unmount {vfs_path}: {why}"));
            };
            bash.unmount(&vfs_path)
                .map_err(|e| format!("cannot unmount {vfs_path}: {e}"))?;
            host_mounts.remove(index);
            Ok(())
        })
        .await;
        finish(reply, outcome);
    });
}

fn finish(reply: ReplyTo, outcome: Result<Result<(), String>, String>) {
    match outcome {
        Ok(Ok(())) => reply.finish(&Value::ok()),
        Ok(Err(message)) => reply.finish(&Value::error(message)),
        Err(panic) => reply.finish(&Value::error(format!("internal error: {panic}"))),
    }
}

/// What the session grants, for a model's system prompt:
/// `{:ok, %{mounts: [%{vfs_path:, host_path:, mode:}], virtual_fs: [path],
/// allow_net: [pattern] | :all | nil, credentials: [%{prefix:, placeholder:}],
/// username:, hostname:, limits: map,
/// tools: %{python:, git:, sqlite:, typescript: [command]}}}` (limits: every
/// key, `nil` when not set at `new/1`; tools: the commands each grant gave
/// the session, the command policy applied).
pub fn describe(session: &Session) -> Value {
    let config = session.config();
    let mounts: Vec<Value> = session
        .host_mounts
        .lock()
        .iter()
        .map(|m| {
            let mode = if m.writable {
                "read_write"
            } else {
                "read_only"
            };
            Value::map([
                ("vfs_path", (&m.vfs_path).into()),
                ("host_path", (&m.host_path).into()),
                ("mode", Value::atom(mode)),
            ])
        })
        .collect();
    let allow_net = if config.allow_all_net {
        Value::atom("all")
    } else {
        match &config.allow_net {
            Some(patterns) if !patterns.is_empty() => patterns.clone().into(),
            _ => Value::nil(),
        }
    };
    let l = &config.limits;
    let limits = Value::map([
        ("max_commands", l.max_commands.into()),
        ("max_loop_iterations", l.max_loop_iterations.into()),
        (
            "max_total_loop_iterations",
            l.max_total_loop_iterations.into(),
        ),
        ("max_function_depth", l.max_function_depth.into()),
        ("max_input_bytes", l.max_input_bytes.into()),
        ("timeout_ms", l.timeout_ms.into()),
        ("max_stdout_bytes", l.max_stdout_bytes.into()),
        ("max_stderr_bytes", l.max_stderr_bytes.into()),
        ("max_total_commands", l.max_total_commands.into()),
        ("max_exec_calls", l.max_exec_calls.into()),
    ]);
    Value::ok_with(Value::map([
        ("mounts", mounts.into()),
        ("virtual_fs", config.virtual_fs.clone().into()),
        ("allow_net", allow_net),
        ("credentials", crate::policy::credentials::describe(config)),
        ("username", (&config.username).into()),
        ("hostname", (&config.hostname).into()),
        ("limits", limits),
        ("tools", crate::commands::tools::commands(config)),
    ]))
}

// -- NIFs (the worker's `mount` / `unmount` / `describe` requests call the
// -- functions above) ---------------------------------------------------------

/// `ExBashkit.Session.mount/4`: answers `:ok | {:error, message}` by message.
#[rustler::nif]
fn session_mount(handle: Handle, spec: Term, pid: LocalPid, reference: Term) -> NifResult<()> {
    let spec = MountSpec::from_term(spec)?;
    mount(
        Arc::clone(&handle.session),
        spec,
        ReplyTo::new(Caller::process(pid, reference)),
    );
    Ok(())
}

/// `ExBashkit.Session.unmount/2`: answers `:ok | {:error, message}` by message.
#[rustler::nif]
fn session_unmount(
    handle: Handle,
    vfs_path: String,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    unmount(
        Arc::clone(&handle.session),
        vfs_path,
        ReplyTo::new(Caller::process(pid, reference)),
    );
    Ok(())
}

/// The session's grants, returned at once (no interpreter lock needed).
#[rustler::nif]
fn session_describe(env: rustler::Env, handle: Handle) -> Term {
    describe(&handle.session).to_term(env)
}

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
//! The session keeps the list of its host mounts (`SessionResource::
//! host_mounts`), starting from `new/1`'s: it refuses a second mount at one
//! path (bashkit would silently replace the first) and tells `unmount` what
//! is a host mount. `reset/1` rebuilds the interpreter from `new/1`'s
//! configuration, so the list goes back to `new/1`'s mounts.

use rustler::{Encoder, Env, ResourceArc, Term};

use crate::options::MountSpec;
use crate::reply::{self, ErrorMessage, ReplyTo};
use crate::session::{Done, SessionResource};
use crate::{guard, mounts, runtime};

/// Attach `spec` to `session`, answering `:ok` or `{:error, message}`.
pub fn mount(session: ResourceArc<SessionResource>, spec: MountSpec, reply: ReplyTo) {
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

/// Detach the host mount at `vfs_path`, answering `:ok` or `{:error, message}`.
pub fn unmount(session: ResourceArc<SessionResource>, vfs_path: String, reply: ReplyTo) {
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
        Ok(Ok(())) => reply.finish(&Done),
        Ok(Err(message)) => reply.finish(&ErrorMessage(message)),
        Err(panic) => reply.finish(&ErrorMessage(format!("internal error: {panic}"))),
    }
}

mod keys {
    rustler::atoms! {
        mounts, virtual_fs, allow_net, all, username, hostname, limits,
        vfs_path, host_path, mode, read_only, read_write,
    }
}

/// What the session grants, for a model's system prompt:
/// `%{mounts: [%{vfs_path:, host_path:, mode:}], virtual_fs: [path],
/// allow_net: [pattern] | :all | nil, username:, hostname:, limits: map}`
/// (limits: only the keys set at `new/1`).
pub fn describe<'a>(env: Env<'a>, session: &SessionResource) -> Term<'a> {
    let config = session.config();
    let mounts: Vec<Term<'a>> = session
        .host_mounts
        .lock()
        .iter()
        .map(|m| {
            let mode = if m.writable {
                keys::read_write()
            } else {
                keys::read_only()
            };
            let pairs = [
                (keys::vfs_path().encode(env), m.vfs_path.encode(env)),
                (keys::host_path().encode(env), m.host_path.encode(env)),
                (keys::mode().encode(env), mode.encode(env)),
            ];
            Term::map_from_pairs(env, &pairs).expect("distinct keys")
        })
        .collect();
    let allow_net = if config.allow_all_net {
        keys::all().encode(env)
    } else {
        match &config.allow_net {
            Some(patterns) if !patterns.is_empty() => patterns.encode(env),
            _ => rustler::types::atom::nil().encode(env),
        }
    };
    let pairs = [
        (keys::mounts().encode(env), mounts.encode(env)),
        (
            keys::virtual_fs().encode(env),
            config.virtual_fs.encode(env),
        ),
        (keys::allow_net().encode(env), allow_net),
        (keys::username().encode(env), config.username.encode(env)),
        (keys::hostname().encode(env), config.hostname.encode(env)),
        (keys::limits().encode(env), config.limits.encode(env)),
    ];
    let map = Term::map_from_pairs(env, &pairs).expect("distinct keys");
    (reply::ok(), map).encode(env)
}

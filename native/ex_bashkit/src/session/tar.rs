//! `Session.export_tar/3`: the session's filesystem as a tar.
//!
//! What goes in is the session's own layer (`crate::config::Layer`): its files,
//! and with a base image the image as the session sees it (its deletions
//! and changes applied). What stays out: host mounts and `:virtual_fs`
//! mounts (their content is not the session's; their mount points are left
//! out too), bashkit's synthesized system files (`/etc/passwd`, `/proc`,
//! the command stubs in `/bin` and `/usr/bin`), and `/dev`. Runs between
//! commands, in the session's FIFO order, like a snapshot.

use std::sync::Arc;

use rustler::{LocalPid, Term};

use crate::nif::error::NifResult;
use crate::run::reply::{Caller, ReplyTo};
use crate::session::{Handle, Session};
use crate::term::value::Value;
use crate::{map_struct, run::guard, run::runtime};

map_struct! {
    /// Options of `export_tar/3`, validated by Elixir (`path` normalized).
    #[derive(Debug, Default)]
    pub struct ExportRequest {
        pub path: String,
        pub gzip: bool,
    }
}

/// Mount points of `session`, whose subtrees the archive leaves out.
fn mount_points(session: &Session) -> Vec<String> {
    let mut out: Vec<String> = session
        .host_mounts
        .lock()
        .iter()
        .map(|m| m.vfs_path.clone())
        .collect();
    out.extend(session.config().virtual_fs.iter().cloned());
    out
}

fn under(path: &str, mount: &str) -> bool {
    let mount = mount.trim_end_matches('/');
    mount.is_empty() || path == mount || path.starts_with(&format!("{mount}/"))
}

/// Archive `request.path` of `session`; answers `{:ok, bytes}`.
pub fn export_tar(session: Arc<Session>, request: ExportRequest, reply: ReplyTo) {
    runtime::spawn(async move {
        let outcome = guard::catch_future(async {
            let _bash = session.lock_bash().await;
            let skip = mount_points(&session);
            if let Some(mount) = skip.iter().find(|m| under(&request.path, m)) {
                return Err(format!(
                    "{} is under the mount {mount}, which export_tar/3 leaves out",
                    request.path
                ));
            }
            let layer = session.layer().fs();
            let options = crate::image::archive::WriteOptions {
                skip: &skip,
                mtimes: true,
            };
            let bytes =
                crate::image::archive::write(layer.as_ref(), &request.path, &options).await?;
            match request.gzip {
                true => crate::image::archive::gzip(&bytes),
                false => Ok(bytes),
            }
        })
        .await;
        let value = match outcome {
            Ok(Ok(bytes)) => Value::ok_with(Value::bin(&bytes)),
            Ok(Err(message)) => Value::error(message),
            Err(panic) => Value::error(format!("internal error: {panic}")),
        };
        reply.finish(&value);
    });
}

/// `export_tar/3`: answers `{:ex_bashkit_reply, ref, {:ok, bytes} | {:error, _}}`.
#[rustler::nif]
fn session_export_tar(
    handle: Handle,
    request: Term,
    pid: LocalPid,
    reference: Term,
) -> NifResult<()> {
    let request = ExportRequest::from_term(request)?;
    let reply = ReplyTo::new(Caller::process(pid, reference));
    export_tar(Arc::clone(&handle.session), request, reply);
    Ok(())
}

//! The node's handle on a session that lives in a worker OS process
//! (`isolation: :process`).
//!
//! The session itself is in the worker; Elixir holds this resource so that
//! the session's lifetime still follows the `%ExBashkit.Session{}` value:
//! when the last reference is garbage-collected, the destructor tells the
//! `ExBashkit.Worker` process that owns the port
//! (`{:ex_bashkit_drop, session_id}`), which frees it in the worker.

use rustler::env::OwnedEnv;
use rustler::{Encoder, LocalPid, ResourceArc};

use crate::run::runtime;

rustler::atoms! { ex_bashkit_drop }

/// A session in worker `owner` under `id`.
pub struct RemoteSession {
    owner: LocalPid,
    id: u64,
}

#[rustler::resource_impl]
impl rustler::Resource for RemoteSession {}

impl Drop for RemoteSession {
    fn drop(&mut self) {
        // The destructor runs on a scheduler thread, where `enif_send` from
        // an owned env is not allowed: send from an interpreter thread.
        let (owner, id) = (self.owner, self.id);
        runtime::spawn(async move {
            let _ =
                OwnedEnv::new().send_and_clear(&owner, |env| (ex_bashkit_drop(), id).encode(env));
        });
    }
}

/// A handle for session `id` of the worker process `owner`.
#[rustler::nif]
fn remote_session(owner: LocalPid, id: u64) -> ResourceArc<RemoteSession> {
    ResourceArc::new(RemoteSession { owner, id })
}

/// Send SIGKILL to worker OS process `os_pid` (the watchdog's last resort
/// for a script that ignores its deadline). `true` if the signal was sent.
#[rustler::nif]
fn kill_os_process(os_pid: u32) -> bool {
    let Ok(pid) = i32::try_from(os_pid) else {
        return false;
    };
    // Only positive pids: 0 and negatives would signal process groups.
    // SAFETY: kill(2) has no memory-safety preconditions.
    pid > 0 && unsafe { libc::kill(pid, libc::SIGKILL) } == 0
}

//! The worker's own user, mount, IPC and UTS namespaces, and its own network
//! namespace unless a session it serves was granted network.
//!
//! The user namespace maps only the worker's own uid and gid (to the same
//! numbers), with `setgroups` denied: inside it the worker is who it was,
//! and every other host user is the overflow id. The capabilities it holds
//! there right after `unshare` are dropped next (`capabilities.rs`). The new
//! network namespace has only a loopback interface, down: no socket reaches
//! anything, not even the VM's 127.0.0.1. The mount namespace is made
//! private, so no mount reaches the host's tree or comes from it, and its
//! temporary directory is a small tmpfs of its own (`private_tmp`).

/// Enter the namespaces; returns their names as `Session.info/1` lists them.
/// Must run while the process has one thread (`unshare(CLONE_NEWUSER)`
/// refuses a threaded one).
pub fn enter(network: bool) -> Result<Vec<&'static str>, String> {
    // SAFETY: plain syscalls reading this process's credentials.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut flags =
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    let mut names = vec!["user", "mount", "ipc", "uts"];
    if !network {
        flags |= libc::CLONE_NEWNET;
        names.push("network");
    }
    // SAFETY: unshare only changes this process's namespaces.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|e| format!("writing /proc/self/{file}: {e}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    // SAFETY: a null-terminated path and no data: changes propagation only.
    let private = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if private != 0 {
        return Err(format!(
            "making / private: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(names)
}

/// The process's own temporary directory, a tmpfs mounted over the host's
/// `/dev/shm` in its mount namespace: not over `/tmp`, where host mounts
/// may lie, while nothing under `/dev` may be mounted (`fs/mounts.rs`).
pub const TMP: &str = "/dev/shm";

/// The size of the process's own temporary directory: SQLite spills sorts
/// and large results to temporary files, and no host directory is granted
/// for them. tmpfs pages are memory the address-space limit does not
/// count, so they have a bound of their own.
const TMP_BYTES: u64 = 256 << 20;

/// Mount an empty tmpfs of this process's own over `TMP` (after `enter`):
/// nothing executed or made a device there, and `TMPDIR` names it, so
/// `std::env::temp_dir()` answers it. Whether it was mounted.
pub fn private_tmp() -> bool {
    let options = std::ffi::CString::new(format!("size={TMP_BYTES},mode=0700"))
        .expect("no NUL in the options");
    // SAFETY: null-terminated strings valid for the call.
    let mounted = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            options.as_ptr().cast(),
        ) == 0
    };
    if mounted {
        std::env::set_var("TMPDIR", TMP);
    }
    mounted
}

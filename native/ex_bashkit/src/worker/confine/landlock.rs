//! The worker's Landlock domain (Linux 5.13+, ABI read from the kernel).
//!
//! What it holds today: no program can be executed from any file
//! (`EXECUTE` is handled and granted nowhere), no device node, FIFO or
//! socket file can be created, no device can be driven by `ioctl` (ABI 5),
//! and (ABI 6) no signal can be sent and no abstract unix socket reached
//! outside the worker's own domain: it cannot signal the VM. Landlock also
//! forbids ptrace of any process outside the domain.
//!
//! What it does not hold yet: reads and writes of host files. A worker is
//! shared by sessions and `Session.mount/4` grants host directories at
//! run time, and Landlock can only narrow a running process; limiting the
//! filesystem to the granted mounts needs a process per grant set (see
//! SECURITY.md).

const CREATE_RULESET_VERSION: u32 = 1;
const ACCESS_FS_EXECUTE: u64 = 1 << 0;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_IOCTL_DEV: u64 = 1 << 15;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// Enter the domain (needs `no_new_privs` first).
pub fn restrict() -> Result<(), String> {
    // SAFETY: the version query takes no attribute.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        return Err(format!(
            "not enabled in this kernel: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut attr = RulesetAttr {
        handled_access_fs: ACCESS_FS_EXECUTE
            | ACCESS_FS_MAKE_CHAR
            | ACCESS_FS_MAKE_SOCK
            | ACCESS_FS_MAKE_FIFO
            | ACCESS_FS_MAKE_BLOCK,
        handled_access_net: 0,
        scoped: 0,
    };
    // The attribute's size tells the kernel which fields it may read.
    let mut size = std::mem::size_of::<u64>();
    if abi >= 4 {
        size = 2 * std::mem::size_of::<u64>();
    }
    if abi >= 5 {
        attr.handled_access_fs |= ACCESS_FS_IOCTL_DEV;
    }
    if abi >= 6 {
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
        size = std::mem::size_of::<RulesetAttr>();
    }
    // SAFETY: `attr` is valid for `size` bytes for the call.
    let fd = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, &attr, size, 0u32) };
    if fd < 0 {
        return Err(format!(
            "creating the ruleset: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: `fd` is the ruleset descriptor just made; closed right after.
    let restricted = unsafe {
        let r = libc::syscall(libc::SYS_landlock_restrict_self, fd as libc::c_int, 0u32);
        libc::close(fd as libc::c_int);
        r
    };
    if restricted != 0 {
        return Err(format!("restricting: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

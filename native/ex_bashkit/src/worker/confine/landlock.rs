//! The worker's Landlock domain (Linux 5.13+, ABI read from the kernel).
//!
//! What it holds: no file can be opened, read, written, created or removed
//! outside the host directories the process was granted (`--grant-read`:
//! read only, `--grant-write`: read and write), one per host mount of its
//! sessions and one per base image file they map, and its own tmpfs for
//! temporary files (`namespaces.rs`); no program can be executed from any file (`EXECUTE` is
//! handled and granted nowhere); no device node, FIFO or socket file can
//! be created, no device driven by `ioctl` (ABI 5); and (ABI 6) no signal
//! sent and no abstract unix socket reached outside the worker's own
//! domain: it cannot signal the VM. Landlock also forbids ptrace of any
//! process outside the domain.
//!
//! A process granted network (`--network`) may also read the system's
//! certificate authorities (`CA_STORES`), which its HTTP client loads to
//! verify TLS servers: public files, and none of `/etc/ssl/private`.
//!
//! A running process can only be narrowed, so a mount its grants do not
//! cover moves its sessions to a process started with it
//! (`ExBashkit.Worker`, "Grants"). Landlock does not govern metadata:
//! `stat` and `readlink` of host paths still answer (SECURITY.md).

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;
const ACCESS_FS_EXECUTE: u64 = 1 << 0;
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_READ_FILE: u64 = 1 << 2;
const ACCESS_FS_READ_DIR: u64 = 1 << 3;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
const ACCESS_FS_REFER: u64 = 1 << 13;
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
const ACCESS_FS_IOCTL_DEV: u64 = 1 << 15;
/// Every right ABI 1 knows.
const ACCESS_FS_ABI_1: u64 = ACCESS_FS_EXECUTE
    | ACCESS_WRITE & !(ACCESS_FS_REFER | ACCESS_FS_TRUNCATE)
    | ACCESS_FS_MAKE_CHAR
    | ACCESS_FS_MAKE_SOCK
    | ACCESS_FS_MAKE_FIFO
    | ACCESS_FS_MAKE_BLOCK;
/// What a read-only grant allows.
const ACCESS_READ: u64 = ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR;
/// What a read-write grant allows: no executing, no special files.
const ACCESS_WRITE: u64 = ACCESS_READ
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_REMOVE_DIR
    | ACCESS_FS_REMOVE_FILE
    | ACCESS_FS_MAKE_DIR
    | ACCESS_FS_MAKE_REG
    | ACCESS_FS_MAKE_SYM
    | ACCESS_FS_REFER
    | ACCESS_FS_TRUNCATE;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// Rights that apply to a file (a rule on a file may hold no other).
const ACCESS_FILE: u64 =
    ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_READ_FILE | ACCESS_FS_TRUNCATE;

/// Where the HTTP client's certificate loader (`rustls-native-certs`, as
/// OpenSSL does) finds the trusted authorities, the files their hashed
/// links point at included, on Debian, Fedora, Alpine and Arch.
const CA_STORES: &[&str] = &[
    "/etc/ssl/certs",
    "/etc/ssl/cert.pem",
    "/usr/share/ca-certificates",
    "/usr/local/share/ca-certificates",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/tls/cert.pem",
    "/etc/pki/ca-trust/extracted",
];

/// One host path this process was granted: a mount's directory, or the
/// file of an image its sessions map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: String,
    pub writable: bool,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: libc::c_int,
}

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// Enter the domain, with a rule per grant and, with `network`, the
/// certificate stores (needs `no_new_privs` first).
pub fn restrict(grants: &[Grant], network: bool) -> Result<(), String> {
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
        handled_access_fs: ACCESS_FS_ABI_1,
        handled_access_net: 0,
        scoped: 0,
    };
    // The attribute's size tells the kernel which fields it may read.
    let mut size = std::mem::size_of::<u64>();
    if abi >= 2 {
        attr.handled_access_fs |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        attr.handled_access_fs |= ACCESS_FS_TRUNCATE;
    }
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
    let stores = CA_STORES.iter().filter(|_| network).map(|path| Grant {
        path: path.to_string(),
        writable: false,
    });
    for grant in grants.iter().cloned().chain(stores) {
        let access = if grant.writable {
            ACCESS_WRITE
        } else {
            ACCESS_READ
        };
        add_rule(fd as libc::c_int, &grant, access & attr.handled_access_fs);
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

/// Allow `access` beneath the grant's directory (on it, for a file). One
/// that cannot be opened or is refused gets no rule: its mount then fails
/// for want of access, never the whole domain.
fn add_rule(ruleset: libc::c_int, grant: &Grant, access: u64) {
    let Ok(path) = std::ffi::CString::new(grant.path.as_str()) else {
        return;
    };
    // SAFETY: a null-terminated path; the descriptor is closed below.
    let dir = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if dir < 0 {
        return;
    }
    // SAFETY: `stat` is plain data the call fills; `dir` is open.
    let is_dir = unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        libc::fstat(dir, &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFDIR
    };
    let rule = PathBeneathAttr {
        allowed_access: if is_dir { access } else { access & ACCESS_FILE },
        parent_fd: dir,
    };
    // SAFETY: `rule` is a valid path-beneath attribute for the call, `dir`
    // an open descriptor closed right after.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &rule as *const PathBeneathAttr,
            0u32,
        );
        libc::close(dir);
    }
}

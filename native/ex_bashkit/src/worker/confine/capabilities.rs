//! Dropping every capability: the bounding set (so no execve could bring
//! one back), the ambient set, and the effective, permitted and inheritable
//! sets. Run after the user namespace is entered (the worker holds every
//! capability there at that moment, and CAP_SETPCAP is what dropping the
//! bounding set needs) and, where the VM runs as root without namespaces,
//! it takes away root's.

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Past the last capability any kernel defines (63 bits fit the sets).
const MAX_CAPABILITY: libc::c_ulong = 63;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drop them all; an error names the step that failed.
pub fn drop_all() -> Result<(), String> {
    for cap in 0..=MAX_CAPABILITY {
        // SAFETY: prctl on this process; past the last capability it fails
        // with EINVAL, which ends the loop.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            // EPERM without CAP_SETPCAP: then the process has no capability
            // to lose, and no_new_privs keeps it from gaining one.
            if error.raw_os_error() != Some(libc::EPERM) {
                return Err(format!("dropping bounding capability {cap}: {error}"));
            }
        }
    }
    // SAFETY: prctl on this process with constant arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: `header` and `data` are the layout capset(2) reads.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

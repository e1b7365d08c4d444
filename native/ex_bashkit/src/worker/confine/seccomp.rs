//! The worker's seccomp-bpf allowlist: the system calls the interpreter,
//! its runtime (tokio, mimalloc, the std library) and the host mounts use,
//! found by running the worker-mode test suite under `strace -f -c`, and
//! nothing else. A call off the list fails with EPERM (the process lives on
//! and the script gets an error) rather than killing the worker: off the
//! list are process creation (`fork`, `vfork`, `clone` without
//! `CLONE_THREAD`; `clone3`, whose flags a filter cannot read, answers
//! ENOSYS so the C library falls back to `clone`), `execve`, `ptrace`,
//! `process_vm_*`, `mount` and the namespace calls, `bpf`, `perf_event_open`,
//! `keyctl`, `userfaultfd`, `io_uring_*`, module and reboot calls, and
//! signals to any other process. `socket` is limited to IPv4, IPv6 and
//! netlink (no unix sockets: the VM's host may have privileged ones),
//! `ioctl` to a handful of descriptor requests, `prctl` to thread names.
//! A call made for another architecture's ABI (x32, or 32-bit) kills the
//! process: the filter's numbers would not mean what they say.
//!
//! This is the filter Firecracker's `seccompiler` would compile from the
//! same list; written out here (a few dozen lines of BPF) so the worker
//! needs no extra crate.

use libc::{sock_filter, sock_fprog};

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
/// `struct seccomp_data` offsets: the call's number, its ABI, argument i's
/// low 32 bits (little-endian).
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}
/// Set on the numbers of the x32 ABI's calls.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

const PR_SET_VMA: u32 = 0x5356_4d41;

/// Calls allowed whatever their arguments.
fn plain() -> Vec<libc::c_long> {
    use libc::*;
    let mut calls = vec![
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_pread64,
        SYS_pwrite64,
        SYS_preadv,
        SYS_pwritev,
        SYS_close,
        SYS_close_range,
        SYS_fstat,
        SYS_newfstatat,
        SYS_statx,
        SYS_statfs,
        SYS_fstatfs,
        SYS_lseek,
        SYS_mmap,
        SYS_munmap,
        SYS_mprotect,
        SYS_mremap,
        SYS_madvise,
        SYS_brk,
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_rt_sigreturn,
        SYS_sigaltstack,
        SYS_futex,
        SYS_sched_yield,
        SYS_sched_getaffinity,
        SYS_getrandom,
        SYS_clock_gettime,
        SYS_clock_getres,
        SYS_clock_nanosleep,
        SYS_nanosleep,
        SYS_gettimeofday,
        SYS_getpid,
        SYS_gettid,
        SYS_getuid,
        SYS_geteuid,
        SYS_getgid,
        SYS_getegid,
        SYS_getpriority,
        SYS_setpriority,
        SYS_getrusage,
        SYS_exit,
        SYS_exit_group,
        SYS_restart_syscall,
        SYS_set_robust_list,
        SYS_set_tid_address,
        SYS_rseq,
        SYS_membarrier,
        SYS_prlimit64,
        SYS_uname,
        SYS_sysinfo,
        SYS_getcwd,
        SYS_epoll_create1,
        SYS_epoll_ctl,
        SYS_epoll_pwait,
        SYS_eventfd2,
        SYS_pipe2,
        SYS_fcntl,
        SYS_dup,
        SYS_dup3,
        SYS_ppoll,
        SYS_openat,
        SYS_openat2,
        SYS_mkdirat,
        SYS_unlinkat,
        SYS_renameat,
        SYS_renameat2,
        SYS_linkat,
        SYS_symlinkat,
        SYS_readlinkat,
        SYS_fchmod,
        SYS_fchmodat,
        SYS_utimensat,
        SYS_ftruncate,
        SYS_fallocate,
        SYS_fsync,
        SYS_fdatasync,
        SYS_getdents64,
        SYS_faccessat,
        SYS_faccessat2,
        SYS_copy_file_range,
        SYS_sendfile,
        SYS_connect,
        SYS_bind,
        SYS_getsockopt,
        SYS_setsockopt,
        SYS_getsockname,
        SYS_getpeername,
        SYS_sendto,
        SYS_recvfrom,
        SYS_sendmsg,
        SYS_recvmsg,
        SYS_sendmmsg,
        SYS_recvmmsg,
        SYS_shutdown,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        SYS_open,
        SYS_stat,
        SYS_lstat,
        SYS_access,
        SYS_readlink,
        SYS_mkdir,
        SYS_rmdir,
        SYS_rename,
        SYS_unlink,
        SYS_symlink,
        SYS_link,
        SYS_chmod,
        SYS_pipe,
        SYS_poll,
        SYS_dup2,
        SYS_epoll_wait,
        SYS_arch_prctl,
        SYS_time,
    ]);
    calls
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// `if <loaded word> == k { return ret }`.
fn return_if(k: u32, ret: u32) -> [sock_filter; 2] {
    [jump(JEQ_K, k, 0, 1), stmt(RET_K, ret)]
}

/// `if nr == call { block }`, the block ending in a return on every path.
fn on_call(program: &mut Vec<sock_filter>, call: libc::c_long, block: Vec<sock_filter>) {
    let len = u8::try_from(block.len()).expect("a short block");
    program.push(jump(JEQ_K, call as u32, 0, len));
    program.extend(block);
}

/// A block: load argument `i`, allow the listed values, else `otherwise`.
fn arg_in(i: u32, allowed: &[u32], otherwise: u32) -> Vec<sock_filter> {
    let mut block = vec![stmt(LD_W_ABS, arg(i))];
    for value in allowed {
        block.extend(return_if(*value, RET_ALLOW));
    }
    block.push(stmt(RET_K, otherwise));
    block
}

/// The whole program, for a process whose pid is `pid`.
fn program(pid: u32) -> Vec<sock_filter> {
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut program = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
    ];
    #[cfg(target_arch = "x86_64")]
    program.extend([
        jump(JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(RET_K, RET_KILL_PROCESS),
    ]);
    for call in plain() {
        program.extend(return_if(call as u32, RET_ALLOW));
    }
    // Threads only: a new process would start outside nothing, but it
    // would be one more thing to confine.
    on_call(
        &mut program,
        libc::SYS_clone,
        vec![
            stmt(LD_W_ABS, arg(0)),
            jump(JSET_K, libc::CLONE_THREAD as u32, 0, 1),
            stmt(RET_K, RET_ALLOW),
            stmt(RET_K, eperm),
        ],
    );
    on_call(
        &mut program,
        libc::SYS_clone3,
        vec![stmt(RET_K, RET_ERRNO | libc::ENOSYS as u32)],
    );
    on_call(
        &mut program,
        libc::SYS_socket,
        arg_in(
            0,
            &[
                libc::AF_INET as u32,
                libc::AF_INET6 as u32,
                libc::AF_NETLINK as u32,
            ],
            RET_ERRNO | libc::EAFNOSUPPORT as u32,
        ),
    );
    on_call(
        &mut program,
        libc::SYS_ioctl,
        arg_in(
            1,
            &[
                libc::FIONBIO as u32,
                libc::FIOCLEX as u32,
                libc::FIONCLEX as u32,
                libc::FIONREAD as u32,
                libc::TCGETS as u32,
                libc::TIOCGWINSZ as u32,
            ],
            RET_ERRNO | libc::ENOTTY as u32,
        ),
    );
    // Thread names and anonymous-mapping names only: not
    // PR_SET_DUMPABLE, which would undo the confinement.
    on_call(
        &mut program,
        libc::SYS_prctl,
        arg_in(
            0,
            &[
                libc::PR_SET_NAME as u32,
                libc::PR_GET_NAME as u32,
                PR_SET_VMA,
            ],
            eperm,
        ),
    );
    // Signals to this process's own threads (a panic's abort) only.
    for call in [libc::SYS_tgkill, libc::SYS_kill] {
        on_call(&mut program, call, arg_in(0, &[pid], eperm));
    }
    program.push(stmt(RET_K, eperm));
    program
}

/// Install the filter (needs `no_new_privs`; before any thread starts, so
/// that every thread inherits it).
pub fn install() -> Result<(), String> {
    let filter = program(std::process::id());
    let prog = sock_fprog {
        len: u16::try_from(filter.len()).map_err(|_| "filter too long")?,
        filter: filter.as_ptr() as *mut sock_filter,
    };
    // SAFETY: `prog` points at `filter`, alive for the call; the kernel
    // copies it.
    let installed = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const sock_fprog,
            0,
            0,
        )
    };
    if installed != 0 {
        return Err(format!(
            "installing the filter: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_stays_inside_the_program() {
        let program = program(1);
        for (i, insn) in program.iter().enumerate() {
            if insn.code & 0x07 == 0x05 {
                let furthest = i + 1 + insn.jt.max(insn.jf) as usize;
                assert!(furthest < program.len(), "jump at {i} leaves the program");
            }
        }
        assert_eq!(program.last().unwrap().code, RET_K);
    }
}

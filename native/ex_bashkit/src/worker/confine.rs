//! The worker's OS-level confinement, applied by `worker::main` while the
//! process is still single-threaded, before it reads a frame. Layer by
//! layer, in order (each one is what SECURITY.md, "Worker confinement",
//! describes and `test/security/confinement_test.exs` checks from outside):
//!
//! 1. an empty environment, `/` as working directory, SIGKILL when the
//!    parent dies, nice 10, first in line for the OOM killer, and the
//!    address-space, CPU-time and core-dump (0) limits;
//! 2. no inherited descriptors beyond its pipes: everything above 2 is
//!    closed, and fd 2 (the VM's stderr until now) becomes a pipe whose
//!    lines the worker forwards to the VM as `{:ex_bashkit_log, 0, line}`;
//! 3. its own user, mount, IPC and UTS namespaces, and its own (empty)
//!    network namespace unless it was started with `--network`, with a
//!    tmpfs of its own for temporary files (`namespaces.rs`);
//! 4. no capabilities in any set, bounding and ambient included
//!    (`capabilities.rs`), not dumpable, `no_new_privs`;
//! 5. a Landlock domain (`landlock.rs`) and last a seccomp-bpf allowlist
//!    (`seccomp.rs`).
//!
//! A layer the kernel refuses is left out and named in the report; with
//! `--require-confinement` the worker then refuses to build sessions or run
//! one-shot scripts (`worker.rs`), which makes `new/1` and
//! `ExBashkit.exec/2` fail with the report's message.

pub(crate) mod capabilities;
pub(crate) mod landlock;
pub(crate) mod namespaces;
pub(crate) mod seccomp;
pub(crate) mod self_test;

use std::os::fd::OwnedFd;

use crate::term::value::Value;

/// What the worker was asked to apply, from its command line.
#[derive(Debug, Default, Clone)]
pub struct Request {
    pub max_memory: Option<u64>,
    pub max_cpu_seconds: Option<u64>,
    /// Keep the VM's network namespace (some session was granted network).
    pub network: bool,
    /// The host directories its sessions were granted (`--grant-read`,
    /// `--grant-write`): the only files Landlock lets it open.
    pub grants: Vec<landlock::Grant>,
    /// A missing layer makes the worker refuse work.
    pub require: bool,
    /// Layers not to apply (`--without NAME`): how tests get a worker that
    /// lacks one on a kernel that has them all.
    pub without: Vec<String>,
    /// Forked by the zygote (`worker/zygote.rs`): no parent-death signal,
    /// the process ends when the VM closes its pipes, not with the zygote.
    pub forked: bool,
}

/// The layers in force, as `ExBashkit.Session.info/1` reports them.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub seccomp: bool,
    pub landlock: bool,
    pub namespaces: Vec<&'static str>,
    pub no_new_privs: bool,
    pub capabilities_dropped: bool,
    pub memory_limit: Option<u64>,
    /// One line per layer left out, saying why.
    pub missing: Vec<String>,
}

impl Report {
    /// `%{seccomp: bool, landlock: bool, namespaces: [atom], ...}`.
    pub fn to_value(&self) -> Value {
        Value::map([
            ("seccomp", self.seccomp.into()),
            ("landlock", self.landlock.into()),
            (
                "namespaces",
                Value::List(self.namespaces.iter().map(|n| Value::atom(n)).collect()),
            ),
            ("no_new_privs", self.no_new_privs.into()),
            ("capabilities_dropped", self.capabilities_dropped.into()),
            ("memory_limit", self.memory_limit.into()),
            (
                "missing",
                Value::List(self.missing.iter().map(|m| m.as_str().into()).collect()),
            ),
        ])
    }

    /// Why the worker refuses work under `--require-confinement`, if it does.
    pub fn refusal(&self) -> Option<String> {
        (!self.missing.is_empty()).then(|| {
            format!(
                "require_confinement: the worker process lacks {}",
                self.missing.join("; ")
            )
        })
    }
}

static REPORT: std::sync::OnceLock<(Report, bool)> = std::sync::OnceLock::new();

/// The report of this process's confinement (empty before `apply`).
pub fn report() -> Report {
    REPORT.get().map(|(r, _)| r.clone()).unwrap_or_default()
}

/// Why this worker refuses work, when it was required to be confined and
/// is not wholly.
pub fn refusal() -> Option<String> {
    REPORT
        .get()
        .filter(|(_, require)| *require)
        .and_then(|(r, _)| r.refusal())
}

/// Apply every layer; returns the read end of the new fd 2, if made. A
/// limit that cannot be set is an error: the worker does not start.
pub fn apply(request: &Request) -> Result<Option<OwnedFd>, String> {
    let vars: Vec<_> = std::env::vars_os().map(|(k, _)| k).collect();
    for key in vars {
        std::env::remove_var(key);
    }
    let _ = std::env::set_current_dir("/");
    let (report, stderr) = os::apply(request)?;
    let _ = REPORT.set((report, request.require));
    Ok(stderr)
}

#[cfg(target_os = "linux")]
mod os {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::{capabilities, landlock, namespaces, seccomp, Report, Request};

    pub fn apply(request: &Request) -> Result<(Report, Option<OwnedFd>), String> {
        let skip = |layer: &str| request.without.iter().any(|w| w == layer);
        let mut report = Report::default();
        // SAFETY: plain syscalls on this process with constant arguments.
        unsafe {
            if !request.forked {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            }
            libc::setpriority(libc::PRIO_PROCESS, 0, 10);
            // No transparent huge pages from here on: with a process per
            // session, an idle one measured 7.5 MB PSS without them and
            // 14 MB with them (2 MiB per region it touched).
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
        // When the machine runs out of memory, the kernel should end a
        // worker, never the VM. Written before the user namespace, whose
        // root may not lower it again.
        let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
        if let Some(bytes) = request.max_memory {
            report.memory_limit = Some(set_limit(libc::RLIMIT_AS, "RLIMIT_AS", bytes)?);
        }
        if let Some(seconds) = request.max_cpu_seconds {
            set_limit(libc::RLIMIT_CPU, "RLIMIT_CPU", seconds)?;
        }
        set_limit(libc::RLIMIT_CORE, "RLIMIT_CORE", 0)?;
        let stderr = private_stderr();
        close_inherited(stderr.as_ref().map(AsRawFd::as_raw_fd));

        if skip("namespaces") {
            report
                .missing
                .push("namespaces (left out by request)".into());
        } else {
            match namespaces::enter(request.network) {
                Ok(entered) => report.namespaces = entered,
                Err(e) => report.missing.push(format!("namespaces ({e})")),
            }
        }
        let mut grants = request.grants.clone();
        if !report.namespaces.is_empty() && namespaces::private_tmp() {
            grants.push(landlock::Grant {
                path: namespaces::TMP.into(),
                writable: true,
            });
        }
        match capabilities::drop_all() {
            Ok(()) => report.capabilities_dropped = true,
            Err(e) => report.missing.push(format!("capabilities ({e})")),
        }
        // SAFETY: prctl on this process with constant arguments.
        unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            report.no_new_privs = libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
        }
        if !report.no_new_privs {
            report.missing.push("no_new_privs".into());
        }
        if skip("landlock") {
            report.missing.push("landlock (left out by request)".into());
        } else {
            match landlock::restrict(&grants, request.network) {
                Ok(()) => report.landlock = true,
                Err(e) => report.missing.push(format!("landlock ({e})")),
            }
        }
        if skip("seccomp") {
            report.missing.push("seccomp (left out by request)".into());
        } else {
            match seccomp::install() {
                Ok(()) => report.seccomp = true,
                Err(e) => report.missing.push(format!("seccomp ({e})")),
            }
        }
        Ok((report, stderr))
    }

    /// Set `resource` to `value`, or to the present hard limit where that
    /// is lower (it cannot be raised); returns the limit set.
    fn set_limit(
        resource: libc::__rlimit_resource_t,
        name: &str,
        value: u64,
    ) -> Result<u64, String> {
        let mut present = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `present` is a valid rlimit to write for the call.
        if unsafe { libc::getrlimit(resource, &mut present) } != 0 {
            let error = std::io::Error::last_os_error();
            return Err(format!("cannot read {name}: {error}"));
        }
        let value = (value as libc::rlim_t).min(present.rlim_max);
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: `limit` is a valid rlimit for the duration of the call.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            let error = std::io::Error::last_os_error();
            return Err(format!("cannot set {name} to {value}: {error}"));
        }
        Ok(value)
    }

    /// Swap fd 2 (the VM's stderr, a terminal or log file the worker has no
    /// business holding) for a pipe of the worker's own; returns its read
    /// end, whose lines `worker::forward_stderr` sends to the VM.
    fn private_stderr() -> Option<OwnedFd> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made by pipe2 and are ours.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::close(fds[1]);
            Some(OwnedFd::from_raw_fd(fds[0]))
        }
    }

    /// Close every descriptor above 2 the VM's port left open, except
    /// `keep` (the read end of the stderr pipe just made).
    fn close_inherited(keep: Option<i32>) {
        let ranges = match keep {
            Some(fd) if fd > 3 => vec![(3, fd as u32 - 1), (fd as u32 + 1, u32::MAX)],
            Some(fd) => vec![(fd as u32 + 1, u32::MAX)],
            None => vec![(3, u32::MAX)],
        };
        for (first, last) in ranges {
            // SAFETY: closes descriptors nothing in this process uses yet.
            unsafe {
                libc::close_range(first, last, 0);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    use std::os::fd::OwnedFd;

    use super::{Report, Request};

    pub fn apply(request: &Request) -> Result<(Report, Option<OwnedFd>), String> {
        let mut report = Report::default();
        #[cfg(unix)]
        for (resource, value) in [
            (libc::RLIMIT_AS, request.max_memory),
            (libc::RLIMIT_CPU, request.max_cpu_seconds),
            (libc::RLIMIT_CORE, Some(0)),
        ] {
            if let Some(value) = value {
                let limit = libc::rlimit {
                    rlim_cur: value as libc::rlim_t,
                    rlim_max: value as libc::rlim_t,
                };
                // SAFETY: `limit` is valid for the duration of the call.
                if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                    return Err(format!(
                        "cannot set a limit: {}",
                        std::io::Error::last_os_error()
                    ));
                }
            }
        }
        report.memory_limit = request.max_memory;
        report.missing = ["namespaces", "capabilities", "landlock", "seccomp"]
            .iter()
            .map(|l| format!("{l} (Linux only)"))
            .collect();
        Ok((report, None))
    }
}

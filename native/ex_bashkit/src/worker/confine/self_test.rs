//! `ex_bashkit_worker --self-test ...`: the attempts
//! `ExBashkit.Worker.self_test/1` makes from inside a process confined as a
//! session's would be, each a real system call whose outcome is reported
//! (0, or the errno it failed with) in one frame on stdout:
//! `{:self_test, [{name, 0 | errno}, ...]}`, then, after a last attempt to
//! execute `/bin/sh` (which, if it works, replaces the process), a second
//! frame `{:self_test, [{"exec_binary", errno}]}`.

use std::ffi::CString;

use crate::run::reply::FrameWriter;
use crate::term::{etf, value::Value};

/// What to try, from the command line.
#[derive(Debug, Default, Clone)]
pub struct Targets {
    pub host_file: String,
    pub host_dir: String,
    pub read_mount: String,
    pub write_mount: String,
    pub loopback_port: u16,
    pub ptrace_pid: i32,
}

fn outcome(result: libc::c_long) -> i64 {
    if result < 0 {
        i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
    } else {
        0
    }
}

fn open(path: &str, flags: libc::c_int) -> i64 {
    let Ok(path) = CString::new(path) else {
        return i64::from(libc::EINVAL);
    };
    // SAFETY: a null-terminated path; the descriptor is closed at once.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, 0o600);
        let result = outcome(fd as libc::c_long);
        if fd >= 0 {
            libc::close(fd);
        }
        result
    }
}

fn read_dir(path: &str) -> i64 {
    match std::fs::read_dir(path) {
        Ok(mut dir) => match dir.next() {
            Some(Err(e)) => i64::from(e.raw_os_error().unwrap_or(-1)),
            _ => 0,
        },
        Err(e) => i64::from(e.raw_os_error().unwrap_or(-1)),
    }
}

fn write_into(dir: &str) -> i64 {
    let path = format!("{dir}/.ex_bashkit_self_test");
    let result = open(&path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY);
    if result == 0 {
        let _ = std::fs::remove_file(&path);
    }
    result
}

fn connect_loopback(port: u16) -> i64 {
    // SAFETY: a socket of our own, closed before returning; `address` is a
    // valid sockaddr_in for the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return outcome(-1);
        }
        let address = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&address as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let result = outcome(r as libc::c_long);
        libc::close(fd);
        result
    }
}

fn ptrace(pid: i32) -> i64 {
    // SAFETY: attaching is the attempt; detached at once if it worked.
    unsafe {
        let r = libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0);
        let result = outcome(r);
        if r == 0 {
            libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        }
        result
    }
}

fn frame(out: &FrameWriter, results: Vec<(&'static str, i64)>) {
    let list = results
        .into_iter()
        .map(|(name, result)| Value::tuple([name.into(), result.into()]))
        .collect();
    out.write(&etf::encode(&Value::tuple([
        Value::atom("self_test"),
        Value::List(list),
    ])));
}

/// Make every attempt and report; returns the exit code.
pub fn run(targets: &Targets, out: &FrameWriter) -> i32 {
    let results = vec![
        ("open_host_file", open(&targets.host_file, libc::O_RDONLY)),
        (
            "open_host_dir",
            open(&targets.host_dir, libc::O_RDONLY | libc::O_DIRECTORY),
        ),
        ("read_mount", read_dir(&targets.read_mount)),
        ("write_mount", write_into(&targets.write_mount)),
        ("connect_loopback", connect_loopback(targets.loopback_port)),
        ("ptrace_parent", ptrace(targets.ptrace_pid)),
    ];
    frame(out, results);
    let sh = c"/bin/sh";
    let argv = [
        sh.as_ptr(),
        c"-c".as_ptr(),
        c"exit 0".as_ptr(),
        std::ptr::null(),
    ];
    let envp = [std::ptr::null()];
    // SAFETY: null-terminated argv and envp of static strings.
    let r = unsafe { libc::execve(sh.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    frame(out, vec![("exec_binary", outcome(r as libc::c_long))]);
    0
}

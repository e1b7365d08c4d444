//! The zygote: a worker OS process that forks each session's process from
//! itself, on the VM's request, instead of the VM starting the executable
//! again (`ExBashkit.Worker.Zygote`).
//!
//! Why: a process the VM starts pays the dynamic loader and its own copy of
//! every page the loader writes. The worker's relocated read-only data
//! alone is 2 MiB a process; a fork shares it (and the loaded libraries,
//! and the allocator's start) copy-on-write until written, which they
//! never are. The zygote is single-threaded and runs nothing of a
//! session's: it forks before any thread or interpreter exists, and the
//! child confines itself (`worker/confine.rs`) as a started worker does.
//!
//! Linux only: elsewhere the VM starts every worker from the executable.
//!
//! The zygote is `serve` here (started as `ex_bashkit_worker --zygote`);
//! the other end is `zygote/spawn.rs`, the small `ex_bashkit_spawn`
//! executable the VM opens a session's port on (small, so that starting it
//! costs little: the worker executable is 51 MB of relocated code).
//!
//! - The zygote listens on an abstract unix seqpacket socket. Its first
//!   frame on stdout names it and a random token, `{:zygote, name, token}`.
//! - The VM opens a port on `ex_bashkit_spawn NAME ARGS...`, with the
//!   token in its environment: it connects and sends one message, the token and the
//!   process's arguments NUL-separated, with two descriptors: its own
//!   stdin and stdout, the port's pipes. A message without the token is
//!   dropped unread, so only the VM can ask (not a session process, not
//!   another program of the VM's user).
//! - The zygote forks; the child takes those descriptors as its stdin and
//!   stdout. The zygote writes `{:forked, asker_pid, child_pid}` on its
//!   stdout, then answers the asker, which exits. The port stays open on
//!   the child's pipes, so the VM owns them as for any port it spawned, and
//!   they close with the port.
//! - When a forked process ends, the zygote writes `{:exited, pid, status}`:
//!   its exit code, or 128 + the signal that ended it (a port's
//!   `exit_status` would be the asker's).
//! - The zygote ends when its stdin closes. Its children outlive it: each
//!   ends when the VM's ends of its pipes close (not with the zygote, so
//!   that the zygote's end costs no session its process).

use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::{
    self, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, SocketAddrUnix,
    SocketFlags,
};

use crate::term::etf;
use crate::term::value::Value;

/// The longest message a request may be.
const MAX_REQUEST_BYTES: usize = 64 * 1024;

// Its entry point is `ex_bashkit_spawn`'s: the library uses its protocol.
#[allow(dead_code)]
pub(crate) mod spawn;

use spawn::seqpacket;

/// Whether the arguments ask for the zygote (`--zygote`).
pub fn requested(args: &[String]) -> bool {
    matches!(args, [flag] if flag == "--zygote")
}

/// Serve until the VM closes stdin; a forked child runs `start` with its
/// arguments and exits with what it returns.
pub fn serve(start: fn(Vec<String>) -> i32) -> i32 {
    let mut token = [0u8; 16];
    if getrandom::fill(&mut token).is_err() {
        eprintln!("ex_bashkit_worker: zygote: no random token");
        return 71;
    }
    // Hex: it travels in an environment variable.
    let token: Vec<u8> = token
        .iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect();
    match listen() {
        Ok((listener, name)) => {
            write_frame(&Value::tuple([
                Value::atom("zygote"),
                Value::Binary(name.into_bytes()),
                Value::Binary(token.clone()),
            ]));
            serve_on(&listener, token, start)
        }
        Err(error) => {
            eprintln!("ex_bashkit_worker: zygote: cannot listen: {error}");
            71
        }
    }
}

fn listen() -> rustix::io::Result<(OwnedFd, String)> {
    let name = format!("ex_bashkit_zygote.{}", std::process::id());
    let listener = seqpacket()?;
    net::bind(
        &listener,
        &SocketAddrUnix::new_abstract_name(name.as_bytes())?,
    )?;
    net::listen(&listener, 128)?;
    Ok((listener, name))
}

fn serve_on(listener: &OwnedFd, mut token: Vec<u8>, start: fn(Vec<String>) -> i32) -> i32 {
    let children = ChildSignals::block();
    let stdin = rustix::stdio::stdin();
    loop {
        let mut fds = [
            PollFd::new(&stdin, PollFlags::IN),
            PollFd::new(listener, PollFlags::IN),
            PollFd::new(&children.fd, PollFlags::IN),
        ];
        if let Err(error) = poll(&mut fds, None) {
            if error == rustix::io::Errno::INTR {
                continue;
            }
            eprintln!("ex_bashkit_worker: zygote: poll: {error}");
            return 74;
        }
        let [stdin_ready, listener_ready, children_ready] = fds.map(|fd| !fd.revents().is_empty());
        if children_ready {
            children.reap();
        }
        if listener_ready {
            if let Ok(connection) = net::accept_with(listener, SocketFlags::CLOEXEC) {
                spawn(connection, &mut token, start, listener, &children);
            }
        }
        if stdin_ready && stdin_closed() {
            return 0;
        }
    }
}

/// Whether the VM closed the zygote's stdin (anything it writes is read
/// and dropped).
fn stdin_closed() -> bool {
    let mut buffer = [0u8; 512];
    !matches!(rustix::io::read(rustix::stdio::stdin(), &mut buffer), Ok(n) if n > 0)
}

/// Handle one request on `connection`.
fn spawn(
    connection: OwnedFd,
    token: &mut [u8],
    start: fn(Vec<String>) -> i32,
    listener: &OwnedFd,
    children: &ChildSignals,
) {
    let Ok(asker) = net::sockopt::socket_peercred(&connection) else {
        return;
    };
    // The zygote serves one request at a time: one that connects and says
    // nothing must not hold up the next.
    let timeout = Some(std::time::Duration::from_secs(1));
    if net::sockopt::set_socket_timeout(&connection, net::sockopt::Timeout::Recv, timeout).is_err()
    {
        return;
    }
    let Some((args, stdin, stdout)) = receive(&connection, token) else {
        return;
    };
    // SAFETY: the zygote is single-threaded, so the child may go on running
    // ordinary code (no lock is held by a thread it did not inherit).
    match unsafe { libc::fork() } {
        0 => {
            // The child never needs the token: no copy of it stays in a
            // session's process.
            token.fill(0);
            let code = become_child(&[listener, &children.fd, &connection], stdin, stdout)
                .map(|()| start(args))
                .unwrap_or(71);
            std::process::exit(code);
        }
        -1 => {}
        pid => {
            write_frame(&Value::tuple([
                Value::atom("forked"),
                Value::Int(asker.pid.as_raw_nonzero().get().into()),
                Value::Int(pid.into()),
            ]));
            let _ = net::send(&connection, &pid.to_ne_bytes(), SendFlags::empty());
        }
    }
}

/// The arguments and the two descriptors of one request, if it carries
/// the token.
fn receive(connection: &OwnedFd, token: &[u8]) -> Option<(Vec<String>, OwnedFd, OwnedFd)> {
    let mut bytes = vec![0u8; MAX_REQUEST_BYTES];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let message = net::recvmsg(
        connection,
        &mut [IoSliceMut::new(&mut bytes)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for ancillary in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = ancillary {
            fds.extend(received);
        }
    }
    if message
        .flags
        .intersects(net::ReturnFlags::TRUNC | net::ReturnFlags::CTRUNC)
    {
        return None;
    }
    let mut fields = bytes[..message.bytes].split(|&b| b == spawn::SEPARATOR);
    if fields.next()? != token {
        return None;
    }
    let [stdin, stdout]: [OwnedFd; 2] = fds.try_into().ok()?;
    let mut args: Vec<String> = fields
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    args.push(super::FORKED.into());
    Some((args, stdin, stdout))
}

/// In the forked child: drop the zygote's descriptors, take `stdin` and
/// `stdout` as fds 0 and 1, and let signals through again.
fn become_child(zygote_fds: &[&OwnedFd], stdin: OwnedFd, stdout: OwnedFd) -> Result<(), ()> {
    for fd in zygote_fds {
        // SAFETY: closing the child's copy; the zygote's own stays open
        // and nothing here uses these again.
        unsafe { libc::close(fd.as_raw_fd()) };
    }
    rustix::stdio::dup2_stdin(&stdin).map_err(|_| ())?;
    rustix::stdio::dup2_stdout(&stdout).map_err(|_| ())?;
    drop((stdin, stdout));
    ChildSignals::unblock();
    Ok(())
}

/// SIGCHLD, taken through a signalfd so that the loop can poll for it.
struct ChildSignals {
    fd: OwnedFd,
}

impl ChildSignals {
    fn mask() -> libc::sigset_t {
        // SAFETY: sigemptyset and sigaddset write the set they are given.
        unsafe {
            let mut mask = MaybeUninit::<libc::sigset_t>::zeroed().assume_init();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGCHLD);
            mask
        }
    }

    fn block() -> Self {
        let mask = Self::mask();
        // SAFETY: `mask` is a valid set; signalfd returns a new descriptor
        // this value owns.
        let fd = unsafe {
            libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
            let raw = libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            assert!(raw >= 0, "zygote: signalfd failed");
            <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw as RawFd)
        };
        Self { fd }
    }

    fn unblock() {
        let mask = Self::mask();
        // SAFETY: `mask` is a valid set.
        unsafe { libc::sigprocmask(libc::SIG_UNBLOCK, &mask, std::ptr::null_mut()) };
    }

    /// Reap every child that has ended and say how it ended.
    fn reap(&self) {
        let mut info = [0u8; 128];
        while matches!(rustix::io::read(&self.fd, &mut info), Ok(n) if n > 0) {}
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status it is given.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            let code = if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                libc::WEXITSTATUS(status)
            };
            write_frame(&Value::tuple([
                Value::atom("exited"),
                Value::Int(pid.into()),
                Value::Int(code.into()),
            ]));
        }
    }
}

/// Write one frame to the zygote's stdout (the VM's port).
fn write_frame(term: &Value) {
    let body = etf::encode(term);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut written = 0;
    while written < frame.len() {
        match rustix::io::write(rustix::stdio::stdout(), &frame[written..]) {
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

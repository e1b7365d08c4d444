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
//! Both ends of the protocol are here: `serve` (the zygote, started as
//! `ex_bashkit_worker --zygote VM_PID`) and `zygote_spawn` (the NIF the
//! VM's `ExBashkit.Worker` calls).
//!
//! - The zygote listens on an abstract unix seqpacket socket and names it
//!   in its first frame on stdout, `{:zygote, name}`.
//! - A spawn is one connection from the VM's OS process: `SO_PEERCRED` must
//!   name `VM_PID`, so nothing else (a session process in the VM's network
//!   namespace included) can ask. One message: the new process's arguments,
//!   NUL-separated, with two descriptors, its stdin and its stdout. The
//!   answer is its pid, 4 bytes in native byte order.
//! - When a forked process ends, the zygote writes `{:exited, pid, status}`
//!   on stdout: its exit code, or 128 + the signal that ended it (as a
//!   port's `exit_status`).
//! - The zygote ends when its stdin closes. Its children outlive it: each
//!   ends when the VM closes its pipes (not with the zygote, so that the
//!   zygote's end costs no session its process).

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags,
    SocketType,
};

use crate::term::etf;
use crate::term::value::Value;

/// The flag a forked child's arguments end with (`confine::Request::forked`).
pub const FORKED: &str = "--forked";

/// The longest argument list a spawn may carry.
const MAX_ARGS_BYTES: usize = 64 * 1024;

/// `--zygote VM_PID` as the first arguments: the VM's OS pid.
pub fn requested(args: &[String]) -> Option<i32> {
    match args {
        [flag, pid, ..] if flag == "--zygote" => pid.parse().ok(),
        _ => None,
    }
}

/// Run the zygote until its stdin closes; each forked child runs `start`
/// with its arguments and exits with what it returns.
pub fn serve(vm_pid: i32, start: fn(Vec<String>) -> i32) -> i32 {
    match listen() {
        Ok((listener, name)) => {
            write_frame(&Value::tuple([
                Value::atom("zygote"),
                Value::Binary(name.into_bytes()),
            ]));
            serve_on(&listener, vm_pid, start)
        }
        Err(error) => {
            eprintln!("ex_bashkit_worker: zygote: cannot listen: {error}");
            71
        }
    }
}

fn listen() -> rustix::io::Result<(OwnedFd, String)> {
    let name = format!("ex_bashkit_zygote.{}", std::process::id());
    let listener = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    net::bind(&listener, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
    net::listen(&listener, 128)?;
    Ok((listener, name))
}

fn serve_on(listener: &OwnedFd, vm_pid: i32, start: fn(Vec<String>) -> i32) -> i32 {
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
                spawn(connection, vm_pid, start, listener, &children);
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

/// Handle one spawn request on `connection`.
fn spawn(
    connection: OwnedFd,
    vm_pid: i32,
    start: fn(Vec<String>) -> i32,
    listener: &OwnedFd,
    children: &ChildSignals,
) {
    let from_vm = net::sockopt::socket_peercred(&connection)
        .is_ok_and(|cred| cred.pid.as_raw_nonzero().get() == vm_pid);
    if !from_vm {
        return;
    }
    let Some((args, stdin, stdout)) = receive(&connection) else {
        return;
    };
    // SAFETY: the zygote is single-threaded, so the child may go on running
    // ordinary code (no lock is held by a thread it did not inherit).
    match unsafe { libc::fork() } {
        0 => {
            let code = become_child(&[listener, &children.fd, &connection], stdin, stdout)
                .map(|()| start(args))
                .unwrap_or(71);
            std::process::exit(code);
        }
        -1 => {}
        pid => {
            let _ = net::send(&connection, &pid.to_ne_bytes(), SendFlags::empty());
        }
    }
}

/// The arguments and the two descriptors of one spawn message.
fn receive(connection: &OwnedFd) -> Option<(Vec<String>, OwnedFd, OwnedFd)> {
    let mut bytes = vec![0u8; MAX_ARGS_BYTES];
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
    if message.flags.intersects(net::ReturnFlags::TRUNC | net::ReturnFlags::CTRUNC) {
        return None;
    }
    let [stdin, stdout]: [OwnedFd; 2] = fds.try_into().ok()?;
    let mut args: Vec<String> = bytes[..message.bytes]
        .split(|&b| b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect();
    args.push(FORKED.into());
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

/// Ask the zygote named `name` for a session process with `args`; answers
/// `(read_fd, write_fd, os_pid)`: the VM reads the child's stdout from the
/// first and writes its stdin to the second (`Port.open({:fd, r, w}, ...)`
/// takes them over).
#[rustler::nif(schedule = "DirtyIo")]
fn zygote_spawn(name: String, args: Vec<String>) -> Result<(i32, i32, i32), String> {
    let (child_stdin, vm_writes) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let (vm_reads, child_stdout) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| format!("pipe: {e}"))?;
    let connection = net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| format!("socket: {e}"))?;
    let address =
        SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(|e| format!("name: {e}"))?;
    net::connect(&connection, &address).map_err(|e| format!("connect: {e}"))?;

    let payload = args.join("\0");
    let fds = [child_stdin.as_fd(), child_stdout.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    net::sendmsg(
        &connection,
        &[IoSlice::new(payload.as_bytes())],
        &mut control,
        SendFlags::empty(),
    )
    .map_err(|e| format!("send: {e}"))?;
    drop((child_stdin, child_stdout));

    let mut pid = [0u8; 4];
    match net::recv(&connection, &mut pid, RecvFlags::empty()) {
        Ok((4, _)) => {}
        _ => return Err("the zygote did not start the process".into()),
    }
    let into_raw = |fd: OwnedFd| std::os::fd::IntoRawFd::into_raw_fd(fd);
    Ok((
        into_raw(vm_reads),
        into_raw(vm_writes),
        i32::from_ne_bytes(pid),
    ))
}

/// Close the VM's ends of a forked process's pipes (`zygote_spawn`'s
/// `read_fd` and `write_fd`) once the port that used them is gone: a port
/// on descriptors leaves them open, and the process ends when its stdin
/// closes.
#[rustler::nif]
fn zygote_release(read_fd: i32, write_fd: i32) {
    for fd in [read_fd, write_fd] {
        // SAFETY: these are the descriptors `zygote_spawn` gave the VM; the
        // port that read and wrote them is closed (its monitor fired).
        unsafe { libc::close(fd) };
    }
}

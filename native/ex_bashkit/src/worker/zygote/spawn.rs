//! `ex_bashkit_spawn NAME ARGS...`: the process the VM opens a session's
//! port on (`ExBashkit.Worker.Zygote`). It asks the zygote `NAME` for a
//! worker with `ARGS`, handing it this process's stdin and stdout (the
//! port's pipes), and exits once the worker is forked: the port stays open
//! on the worker's pipes. The protocol is described in `worker/zygote.rs`.
//!
//! Self-contained (std and rustix only): the executable
//! (`bin/ex_bashkit_spawn.rs`) includes this file and not the library, so
//! that it starts in a fraction of the worker executable's time.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;

use rustix::net::{
    self, AddressFamily, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketAddrUnix, SocketFlags, SocketType,
};

/// Where the token the zygote gave the VM is found.
pub const TOKEN_VAR: &str = "EX_BASHKIT_ZYGOTE_TOKEN";

/// Between the token and the arguments of a request, and between arguments.
pub const SEPARATOR: u8 = 0;

/// A socket of the zygote's kind.
pub fn seqpacket() -> rustix::io::Result<OwnedFd> {
    net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
}

/// The executable's entry point; returns its exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.split_first() {
        Some((name, rest)) => request(name, rest),
        None => Err("usage: ex_bashkit_spawn NAME ARGS...".into()),
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("ex_bashkit_spawn: {error}");
            71
        }
    }
}

fn request(name: &str, args: &[String]) -> Result<(), String> {
    let token = std::env::var(TOKEN_VAR).map_err(|_| format!("no {TOKEN_VAR}"))?;
    let connection = seqpacket().map_err(|e| format!("socket: {e}"))?;
    let address =
        SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(|e| format!("name: {e}"))?;
    net::connect(&connection, &address).map_err(|e| format!("connect: {e}"))?;

    let mut payload = token.into_bytes();
    for arg in args {
        payload.push(SEPARATOR);
        payload.extend_from_slice(arg.as_bytes());
    }
    let fds = [rustix::stdio::stdin(), rustix::stdio::stdout()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    net::sendmsg(
        &connection,
        &[IoSlice::new(&payload)],
        &mut control,
        SendFlags::empty(),
    )
    .map_err(|e| format!("send: {e}"))?;

    let mut pid = [0u8; 4];
    match net::recv(&connection, &mut pid, RecvFlags::empty()) {
        Ok((4, _)) => Ok(()),
        _ => Err("the zygote did not fork the worker".into()),
    }
}

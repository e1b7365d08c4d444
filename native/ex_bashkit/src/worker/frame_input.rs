//! The worker's stdin, where the VM's frames arrive: when they come back to
//! back, the reading thread looks for the next one for a moment before it
//! sleeps.
//!
//! A thread asleep in `read` is woken by the kernel when the VM writes, and
//! a worker pays that wake-up on every exec, before the script starts, and
//! on every back-call answer. On some hosts it is dear: virtual machines
//! whose idle vCPUs halt take 30 µs or more per wake-up. On a 2-core
//! machine a pipe ping-pong between two processes took
//! 61–77 µs a round trip, and a worker `Session.exec("echo hi")` took
//! about 100–140 µs with the reader sleeping at once, 45–75 µs with this,
//! for no more CPU per exec (bench/DECISIONS.md). The VM's schedulers spin
//! before they sleep for the same reason.
//!
//! So after a frame that came within [`SPIN`] of the read that waited for
//! it (the VM is sending one request after another), the next read polls
//! the pipe without blocking for up to [`SPIN`], and sleeps only if nothing
//! came. After a longer wait it sleeps at once: a worker that gets a frame
//! now and then never spins, and one whose caller has stopped spins once.
//! Between polls the reader yields its CPU (`sched_yield`) to any other
//! thread runnable there (the VM's, the worker's runners): on 2 cores a
//! reader that spun without yielding made two worker sessions slower
//! together than one alone.

use std::io::{self, Read};
#[cfg(unix)]
use std::os::fd::RawFd;
#[cfg(unix)]
use std::time::{Duration, Instant};

/// How long the reader looks for the next frame before it sleeps, after a
/// short wait. Above the VM's turnaround between two execs of one caller
/// (50–150 µs on the slow-wake-up host; 50 µs saved nothing there, 100 µs
/// part of it), and what a reader burns at most when its caller stops.
#[cfg(unix)]
const SPIN: Duration = Duration::from_micros(200);

/// Frames from the VM, read as the module says.
#[cfg(unix)]
pub struct FrameInput {
    fd: RawFd,
    /// Whether the last read's data came within [`SPIN`] of its start:
    /// then the next read looks for a while before it sleeps.
    back_to_back: bool,
}

#[cfg(unix)]
impl FrameInput {
    /// The worker's stdin.
    pub fn stdin() -> Self {
        Self::new(0)
    }

    /// Read `fd`, switched to non-blocking reads (the reader sleeps in
    /// `poll` instead). The worker's stdin is its own pipe: the VM holds
    /// the other end, so the switch changes nothing for anyone else.
    fn new(fd: RawFd) -> Self {
        // SAFETY: fcntl on a descriptor this process keeps open.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        Self {
            fd,
            back_to_back: false,
        }
    }

    /// Sleep until `fd` has data, its end or an error (the next `read`
    /// reports which).
    fn wait_readable(&self) -> io::Result<()> {
        let mut readable = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut readable, 1, -1) } == -1 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
        Ok(())
    }
}

#[cfg(unix)]
impl Read for FrameInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let started = Instant::now();
        let mut looking = self.back_to_back;
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if let Ok(n) = usize::try_from(n) {
                self.back_to_back = started.elapsed() <= SPIN;
                return Ok(n);
            }
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock if looking && started.elapsed() < SPIN => {
                    // SAFETY: no arguments; it only gives up the CPU.
                    unsafe { libc::sched_yield() };
                }
                io::ErrorKind::WouldBlock => {
                    looking = false;
                    self.wait_readable()?;
                }
                _ => return Err(error),
            }
        }
    }
}

/// Elsewhere, stdin as it is.
#[cfg(not(unix))]
pub struct FrameInput(io::Stdin);

#[cfg(not(unix))]
impl FrameInput {
    pub fn stdin() -> Self {
        Self(io::stdin())
    }
}

#[cfg(not(unix))]
impl Read for FrameInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};

    fn pipe() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe() returns.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors are fresh and owned here alone.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn reads_what_comes_soon_and_late_then_the_end() {
        let (reader, mut writer) = pipe();
        let mut input = FrameInput::new(reader.as_raw_fd());
        let sender = std::thread::spawn(move || {
            writer.write_all(b"first").unwrap();
            // Within the spin after a short wait: found by looking.
            std::thread::sleep(Duration::from_micros(50));
            writer.write_all(b"second").unwrap();
            // Past it: the reader looks, then sleeps in poll until this.
            std::thread::sleep(Duration::from_millis(20));
            writer.write_all(b"third").unwrap();
        });
        let mut got = Vec::new();
        input.read_to_end(&mut got).unwrap();
        sender.join().unwrap();
        assert_eq!(got, b"firstsecondthird");
        // The end of the pipe reads as the end, not as an error.
        assert_eq!(input.read(&mut [0; 8]).unwrap(), 0);
    }

    #[test]
    fn a_frame_split_across_reads_is_read_whole() {
        let (reader, mut writer) = pipe();
        let mut input = io::BufReader::new(FrameInput::new(reader.as_raw_fd()));
        let sender = std::thread::spawn(move || {
            writer.write_all(&[0, 0, 0, 6, b'a', b'b']).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            writer.write_all(b"cdef").unwrap();
        });
        let mut frame = [0u8; 10];
        input.read_exact(&mut frame).unwrap();
        sender.join().unwrap();
        assert_eq!(&frame, b"\0\0\0\x06abcdef");
    }
}

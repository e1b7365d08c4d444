//! The CPU time this OS process has used, every thread's (dead ones
//! included), in nanoseconds: `CLOCK_PROCESS_CPUTIME_ID`. The harness's CPU
//! per exec reads it, and so does `bench/run.exs` through the bare NIF
//! (`Bench.BareNif.process_cpu_ns/0`), so both sides of a ratio count
//! alike. `/proc/self/stat`, read before, counts 10 ms clock ticks: ±4 % on
//! the 20 000 `echo hi` of the `cpu` group.

/// Nanoseconds of CPU, user and system, of this process so far.
pub fn process_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

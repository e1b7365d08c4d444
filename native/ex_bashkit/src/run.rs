//! How a script runs: the tokio runtime and its runner pool, how a script's
//! future is driven (inline for a slice, then parked or on the runners),
//! which scripts may run where (their shape, bounded loops), cancellation
//! and deadlines, the one reply path, panics on our threads, and
//! interpreters built ahead of need and torn down off the callers' path.

pub(crate) mod bounded_steps;
pub(crate) mod guard;
pub(crate) mod interrupt;
pub(crate) mod reply;
pub(crate) mod runner;
pub(crate) mod runtime;
pub(crate) mod shape;
pub(crate) mod teardown;
pub(crate) mod warm;
pub(crate) mod watchdog;

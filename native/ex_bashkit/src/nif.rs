//! The NIF boundary's own plumbing: its error type, the move to a dirty
//! scheduler, the allocator, and (for `cargo test`) stand-ins for the
//! `enif_*` symbols a running BEAM provides.

pub(crate) mod allocator;
pub(crate) mod dirty;
#[cfg(test)]
pub(crate) mod enif_stubs;
pub(crate) mod error;

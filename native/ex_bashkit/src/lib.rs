//! ExBashkit's native library: the bashkit interpreter core, served to the
//! VM as NIFs (`isolation: :in_node`) and to worker OS processes
//! (`isolation: :process`, `src/bin/ex_bashkit_worker.rs`) over a port.
//!
//! NIFs live in the file of their domain; `ARCHITECTURE.md` at the
//! repository root tells the life of an exec and of a back-call.

// Values that cross the boundary, and how they are framed for a worker.
pub mod etf;
mod value;

// The session core both transports share.
mod bashkit_errors;
mod bombs;
mod bounded_steps;
mod changes;
mod config_cache;
mod dirty;
mod error;
mod fs_api;
mod guard;
mod host_fs;
mod interrupt;
mod lifecycle;
mod line;
mod mounts;
mod nested;
mod net;
mod options;
mod outcome;
mod parse;
mod policy;
mod policy_help;
mod python;
mod reply;
mod runner;
mod runtime;
mod runtime_mounts;
mod script_shape;
mod search;
mod session;
mod snapshot;
mod soft_delete;
mod strict_commands;
mod teardown;
mod tools;
mod warm;
mod watchdog;
mod word_hash;

// Tar images and shared base images (`rootfs:`, `export_tar`, `base:`).
mod base_layer;
mod base_snapshot;
mod export;
mod image;
mod tar_io;

// Back-calls into Elixir, and their two users.
mod builtins;
mod callbacks;
mod vfs;

// The worker process (its main loop, how it waits for frames) and the
// node's handle on its sessions.
mod frame_input;
mod remote;
pub mod worker;

mod allocator;
#[cfg(test)]
mod enif_stubs;
#[cfg(test)]
mod instruction_probe;

pub use value::Value;

rustler::init!("Elixir.ExBashkit.Native", load = runtime::load);

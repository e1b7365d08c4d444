//! ExBashkit's native library: the bashkit interpreter core, served to the
//! VM as NIFs (`isolation: :in_node`) and to worker OS processes
//! (`isolation: :process`, `src/bin/ex_bashkit_worker.rs`) over a port.
//!
//! One folder a concept, named as on the Elixir side where there is one;
//! NIFs live in the file of their domain. `ARCHITECTURE.md` at the
//! repository root maps the folders and tells the life of an exec and of a
//! back-call.

/// The NIF boundary's plumbing: its error type, dirty scheduling, allocator.
mod nif;
/// Terms that cross the boundary, and how they are framed for a worker.
pub mod term;

/// Commands we add to or wrap in bashkit's set.
mod commands;
/// A session's configuration, decoded, and the `Bash` built from it.
mod config;
/// Host directories, mounts and change tracking.
mod fs;
/// Shared base images and tar archives in.
mod image;
/// What a session may do: commands, network, known bombs.
mod policy;

/// Back-calls into Elixir: custom builtins and `virtual_fs`.
mod callbacks;
/// What an exec answers: `%ExBashkit.Result{}` or `%ExBashkit.Error{}`.
mod result;
/// How a script is driven, where it runs, how it is stopped and answered.
mod run;
/// glob and grep over a session's filesystem.
mod search;
/// The session core both transports share, and its calls.
mod session;
/// The interactive shell's parser verdict.
mod shell;

/// The worker process and the node's handle on its sessions.
pub mod worker;

#[cfg(test)]
mod instruction_probe;

pub use term::value::Value;

rustler::init!("Elixir.ExBashkit.Native", load = run::runtime::load);

//! A session's filesystem beyond bashkit's in-memory one: host directories
//! resolved beneath their root, how mounts are laid, and file-change
//! tracking for `track_changes: true`
//! and for recovery points, and a layer shared by a session's forks.

pub(crate) mod changes;
pub(crate) mod host;
pub(crate) mod mounts;
pub(crate) mod shared;
pub(crate) mod written;

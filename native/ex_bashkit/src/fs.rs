//! A session's filesystem beyond bashkit's in-memory one: host directories
//! resolved beneath their root, how mounts are laid, and file-change
//! tracking for `track_changes: true`
//! and for recovery points.

pub(crate) mod changes;
pub(crate) mod host;
pub(crate) mod mounts;
pub(crate) mod written;

//! The allocator for everything Rust allocates in the NIF: mimalloc.
//!
//! Why not the system allocator: a bashkit interpreter is ~600 small
//! allocations (its builtin table, the root filesystem's command set, shell
//! variables). Measured with the raw harness (`bench/raw --features
//! mimalloc`) on glibc 2.36, mimalloc builds one 30% faster (38 -> 26 µs) and
//! keeps it in 20% less memory (35.7 -> 28.5 KB per idle session). The BEAM
//! keeps its own allocators; only the NIF's Rust heap changes.
//!
//! `no_thp`: mimalloc does not ask for transparent huge pages. A session's
//! worker process touches its heap before it can turn them off
//! (`worker/confine.rs`), and each 2 MiB page it got then stayed: an idle
//! one held 6.6 MB private with them, 2.9 MB without.
//!
//! `local_dynamic_tls` is required because the library is `dlopen`ed by the
//! VM (the default initial-exec TLS model can fail to load there).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    // mimalloc's own API, from the C library the allocator links in.
    fn mi_collect(force: bool);
}

/// Return memory freed by this thread to the OS now. mimalloc purges freed
/// pages lazily, on later allocations: after a one-off burst of large
/// transient copies (a worker loading a base image) that could leave tens
/// of MB resident in an otherwise idle worker.
pub fn give_back() {
    // SAFETY: mi_collect has no preconditions; it only walks mimalloc's
    // own structures for the calling thread and its arenas.
    unsafe { mi_collect(true) }
}

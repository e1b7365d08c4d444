//! The allocator for everything Rust allocates in the NIF: mimalloc.
//!
//! Why not the system allocator: a bashkit interpreter is ~600 small
//! allocations (its builtin table, the root filesystem's command set, shell
//! variables). Measured with the raw harness (`bench/raw --features
//! mimalloc`) on glibc 2.36, mimalloc builds one 30% faster (38 -> 26 µs) and
//! keeps it in 20% less memory (35.7 -> 28.5 KB per idle session). The BEAM
//! keeps its own allocators; only the NIF's Rust heap changes.
//!
//! `local_dynamic_tls` is required because the library is `dlopen`ed by the
//! VM (the default initial-exec TLS model can fail to load there).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

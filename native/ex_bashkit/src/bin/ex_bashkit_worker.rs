//! `ex_bashkit_worker`: runs ExBashkit sessions in an OS process of their own
//! (`isolation: :process`), spoken to by `ExBashkit.Worker` over a port.
//! Everything but the entry point lives in the library (`worker.rs`).

// The library links the NIF glue, whose `enif_*` symbols only a running
// BEAM provides; the worker never calls them (see `nif/enif_stubs.rs`).
#[path = "../nif/enif_stubs.rs"]
mod enif_stubs;

fn main() {
    std::process::exit(ex_bashkit::worker::main());
}

//! The bare NIF: bashkit behind the thinnest NIF that runs a script the way
//! the issue-12 design must (on the caller's scheduler, polled inline on a
//! big stack so that deep recursion cannot overflow a thread stack), and
//! nothing else: no options, no call queue, no ticket, no metering, no
//! teardown thread, a three-element tuple for an answer (bashkit's own
//! limits still apply). `bench/run.exs`
//! loads it as `Bench.BareNif` (bench/lib/bare_nif.exs) and times it beside
//! `Session.exec/2` and `Session.new/0`: what any NIF over bashkit pays in
//! the VM, so the part of ours above it is ours.
//!
//! A benchmark baseline, not a product: a script that waits (a `sleep`, the
//! network) blocks the scheduler it runs on.

use std::sync::{Mutex, OnceLock};

use rustler::{Binary, Env, NewBinary, ResourceArc};
use tokio::runtime::Runtime;

mod same_as_nif;
use same_as_nif::{build_bash, poll_inline};

/// The same allocator as the NIF (see native/ex_bashkit/src/allocator.rs).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An interpreter held by the VM; dropped by its destructor, on the
/// scheduler that collects the handle (the NIF drops on a runner instead).
struct BareBash(Mutex<bashkit::Bash>);

#[rustler::resource_impl]
impl rustler::Resource for BareBash {}

fn rt() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(same_as_nif::runtime)
}

/// A new interpreter, built during the call with the NIF's settings.
#[rustler::nif]
fn new() -> ResourceArc<BareBash> {
    ResourceArc::new(BareBash(Mutex::new(build_bash())))
}

/// Run `script` to completion here: `{stdout, stderr, exit_code}`.
#[rustler::nif]
fn exec<'a>(
    env: Env<'a>,
    bash: ResourceArc<BareBash>,
    script: &str,
) -> (Binary<'a>, Binary<'a>, i32) {
    // A poisoned lock means an earlier exec panicked: the benchmark is void.
    let mut bash = bash.0.lock().expect("an earlier exec panicked");
    match poll_inline(rt(), bash.exec(script)).0 {
        Ok(result) => (
            binary(env, result.stdout.as_bytes()),
            binary(env, result.stderr.as_bytes()),
            result.exit_code,
        ),
        Err(error) => (
            binary(env, b""),
            binary(env, error.to_string().as_bytes()),
            -1,
        ),
    }
}

fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Binary<'a> {
    let mut out = NewBinary::new(env, bytes.len());
    out.as_mut_slice().copy_from_slice(bytes);
    out.into()
}

rustler::init!("Elixir.Bench.BareNif");

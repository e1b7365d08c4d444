//! Moving a NIF call from the caller's scheduler to a dirty CPU scheduler
//! once it has looked at its arguments (`enif_schedule_nif`), and telling
//! the VM how much of its time slice a call that stayed used.
//!
//! An exec NIF decides where it runs from the script and the session
//! (`session/cost.rs`): a quick script on a session whose measured cost fits
//! runs where it was called, as any short NIF does; anything else moves to a
//! dirty scheduler with its arguments unchanged. `callback_reply`, which
//! resumes the script it answers, follows the script (`callbacks.rs`).
//! rustler's `schedule` attribute fixes a NIF's scheduler at load time, so
//! the dirty half is an entry point of our own, [`entry`], that does what
//! rustler's generated wrapper does (decode nothing, catch panics, encode
//! the result).

use std::ffi::CStr;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use rustler::codegen_runtime::handle_nif_result;
use rustler::sys::{enif_schedule_nif, ErlNifEnv, ErlNifTerm, ERL_NIF_DIRTY_JOB_CPU_BOUND};
use rustler::{Encoder, Env, NifResult, Term};

/// A NIF's C entry point.
pub type RawNif = unsafe extern "C" fn(*mut ErlNifEnv, i32, *const ErlNifTerm) -> ErlNifTerm;

/// A NIF body, called with the arguments of the NIF that moved it: its
/// term is the NIF's answer; an error raises as rustler raises it.
pub type Body = for<'a> fn(Env<'a>, &[Term<'a>]) -> NifResult<Term<'a>>;

/// Return this from a NIF to have `fun` called with `args` on a dirty CPU
/// scheduler instead; its result is then the NIF's.
pub fn to_dirty_cpu<'a>(
    env: Env<'a>,
    name: &'static CStr,
    fun: RawNif,
    args: &[Term<'a>],
) -> Term<'a> {
    let raw: Vec<ErlNifTerm> = args.iter().map(|term| term.as_c_arg()).collect();
    // SAFETY: `env` is the calling NIF's, the terms belong to it, `name` is
    // static and `fun` is a NIF entry point that takes `args.len()` terms.
    unsafe {
        let scheduled = enif_schedule_nif(
            env.as_c_arg(),
            name.as_ptr(),
            ERL_NIF_DIRTY_JOB_CPU_BOUND as i32,
            fun,
            raw.len() as i32,
            raw.as_ptr(),
        );
        Term::new(env, scheduled)
    }
}

/// The body of a dirty entry point: `body` with the raw arguments as
/// terms, a panic turned into an exception as rustler does for its NIFs.
///
/// # Safety
/// The arguments are those the VM passes a NIF (`env`, `argc`, `argv`).
pub unsafe fn entry(
    env: *mut ErlNifEnv,
    argc: i32,
    argv: *const ErlNifTerm,
    body: Body,
) -> ErlNifTerm {
    let lifetime = ();
    let env = Env::new(&lifetime, env);
    let args: Vec<Term> = std::slice::from_raw_parts(argv, usize::try_from(argc).unwrap_or(0))
        .iter()
        .map(|term| Term::new(env, *term))
        .collect();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| body(env, &args)));
    handle_nif_result(result, env).apply(env)
}

/// Define `$name`, a dirty entry point (a [`RawNif`] for [`to_dirty_cpu`])
/// that runs `$body`, a [`Body`], through [`entry`].
#[macro_export]
macro_rules! dirty_entry {
    ($name:ident, $body:expr) => {
        unsafe extern "C" fn $name(
            env: *mut rustler::sys::ErlNifEnv,
            argc: i32,
            argv: *const rustler::sys::ErlNifTerm,
        ) -> rustler::sys::ErlNifTerm {
            $crate::nif::dirty::entry(env, argc, argv, $body)
        }
    };
}

/// Run `body` here, on the caller's normal scheduler (a quick script,
/// known as such to the runner: `runner::on_normal_scheduler`), and charge
/// the time it took to the calling process's slice ([`account`]).
pub fn run_here<'a, T: Encoder>(env: Env<'a>, body: impl FnOnce() -> T) -> Term<'a> {
    let started = Instant::now();
    let answer = crate::run::runner::on_normal_scheduler(body);
    account(env, started);
    answer.encode(env)
}

/// Tell the VM how much of the calling process's time slice a NIF that ran
/// on a normal scheduler since `started` used (a slice is about 1 ms), so
/// that it is scheduled out as if it had run Erlang code that long.
pub fn account(env: Env, started: Instant) {
    let percent = (started.elapsed().as_micros() / 10).clamp(1, 100);
    rustler::schedule::consume_timeslice(env, percent as i32);
}

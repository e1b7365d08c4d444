//! The bare NIF: bashkit behind the thinnest NIF that runs a script the way
//! the issue-12 design must (on the caller's scheduler, polled inline on a
//! big stack so that deep recursion cannot overflow a thread stack), and
//! nothing else: no options, no call queue, no ticket, no metering, no
//! teardown thread, a three-element tuple for an answer (bashkit's own
//! limits still apply). `bench/run.exs`
//! loads it as `Bench.BareNif` (bench/lib/bare_nif.exs) and times it beside
//! `Session.exec/2` and `Session.new/0`: what any NIF over bashkit pays in
//! the VM, so the part of ours above it is ours. `shaped_exec/5` does the
//! same behind the library's exec arguments and answer (`Session.exec/2`'s
//! shape, none of its work): what the API's shape costs on top.
//!
//! A back-call the same way: an interpreter whose builtin `answer` asks
//! Elixir (`new_calling/0`). Its exec returns the request instead of an
//! answer, the script's future is kept, and `call_resume/2` hands the
//! answer over and polls it again, on the caller's scheduler as the NIF does
//! for a quick script. The Elixir side answers in a fresh process, as the
//! library does (bench/lib/bare_nif.exs): the floor of a builtin round trip
//! for this design.
//!
//! A benchmark baseline, not a product: a script that waits (a `sleep`, the
//! network) blocks the scheduler it runs on.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::Instant;

use bashkit::{async_trait, Bash, Builtin, BuiltinContext, ExecResult, ExecutionLimits};
use rustler::{Binary, Encoder, Env, LocalPid, NewBinary, NifResult, ResourceArc, Term};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

mod cpu_clock;
mod same_as_nif;
use same_as_nif::{build_bash, builder, finish, poll_inline, poll_until_wait};

/// The same allocator as the NIF (see native/ex_bashkit/src/nif/allocator.rs).
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
    outcome(env, poll_inline(rt(), bash.exec(script)).0)
}

/// An exec's result as `{stdout, stderr, exit_code}` (an error: its
/// message on stderr, exit code -1).
fn outcome<'a>(env: Env<'a>, result: bashkit::Result<ExecResult>) -> (Binary<'a>, Binary<'a>, i32) {
    match result {
        Ok(r) => (
            binary(env, r.stdout.as_bytes()),
            binary(env, r.stderr.as_bytes()),
            r.exit_code,
        ),
        Err(e) => (binary(env, b""), binary(env, e.to_string().as_bytes()), -1),
    }
}

/// `exec/2` behind `Session.exec/2`'s shape, and nothing of its work: it
/// takes the library's arguments (the session, the script, the call map,
/// the caller's pid and a reference) and answers as the library's exec NIF
/// does for a script run within the call, `{:ok, {:done, id, {:ok,
/// %ExBashkit.Result{}}}}`, the eleven fields built here. It reads the call
/// map's fields but acts on none (the bench calls it without options);
/// `commands` is not counted (always 1). What it costs over `exec/2` is what
/// the API's shape alone costs any NIF; ours over it, what the rest of our
/// layer (cancel, per-call timeouts, the session's call order, the quick
/// budget, metering) costs.
#[rustler::nif]
fn shaped_exec<'a>(
    env: Env<'a>,
    bash: ResourceArc<BareBash>,
    script: &str,
    call: Term<'a>,
    caller: LocalPid,
    _reference: Term<'a>,
) -> NifResult<Term<'a>> {
    static EXEC_IDS: AtomicU64 = AtomicU64::new(1);
    let stdin: Option<Binary> = call.map_get(atoms::stdin())?.decode()?;
    let stream: bool = call.map_get(atoms::stream())?.decode()?;
    let timeout_ms: Option<u64> = call.map_get(atoms::timeout_ms())?.decode()?;
    let track_changes: bool = call.map_get(atoms::track_changes())?.decode()?;
    let _ = (stdin, stream, timeout_ms, track_changes, caller);
    let id = EXEC_IDS.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let mut bash = bash.0.lock().expect("an earlier exec panicked");
    let outcome = match poll_inline(rt(), bash.exec(script)).0 {
        Ok(r) => {
            let wall_time_us = started.elapsed().as_micros() as u64;
            (atoms::ok(), result_struct(env, &r, wall_time_us)?).encode(env)
        }
        Err(e) => (atoms::error(), e.to_string()).encode(env),
    };
    Ok((atoms::ok(), (atoms::done(), id, outcome)).encode(env))
}

/// `%ExBashkit.Result{}` of `r`, its keys in the VM's term order (as the
/// library builds it: `result.rs`).
fn result_struct<'a>(env: Env<'a>, r: &ExecResult, wall_time_us: u64) -> NifResult<Term<'a>> {
    let (stdout, stderr) = (r.stdout.as_bytes(), r.stderr.as_bytes());
    let keys = [
        atoms::__struct__(),
        atoms::changes(),
        atoms::commands(),
        atoms::exit_code(),
        atoms::stderr(),
        atoms::stderr_bytes(),
        atoms::stderr_truncated(),
        atoms::stdout(),
        atoms::stdout_bytes(),
        atoms::stdout_truncated(),
        atoms::wall_time_us(),
    ]
    .map(|key| key.encode(env));
    let values = [
        atoms::result_module().encode(env),
        atoms::nil().encode(env),
        1u64.encode(env),
        r.exit_code.encode(env),
        binary(env, stderr).encode(env),
        stderr.len().encode(env),
        r.stderr_truncated.encode(env),
        binary(env, stdout).encode(env),
        stdout.len().encode(env),
        r.stdout_truncated.encode(env),
        wall_time_us.encode(env),
    ];
    Term::map_from_term_arrays(env, &keys, &values)
}

/// What the builtin `answer` asks Elixir, and where the answer goes: the
/// library's request (`{:builtin, name, args, stdin, env, cwd}`, built in
/// `callbacks.rs`) carries the same fields.
#[derive(Default)]
struct BackCall {
    request: Option<Request>,
    reply: Option<oneshot::Sender<String>>,
}

struct Request {
    args: Vec<String>,
    stdin: Vec<u8>,
    env: HashMap<String, String>,
    cwd: String,
}

/// The builtin `answer`: records its request and waits for the answer.
struct AskElixir(Arc<Mutex<BackCall>>);

#[async_trait]
impl Builtin for AskElixir {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let (reply, answer) = oneshot::channel();
        *self.0.lock().expect("back-call") = BackCall {
            request: Some(Request {
                args: ctx.args.to_vec(),
                stdin: ctx.stdin.map(|s| s.as_bytes().to_vec()).unwrap_or_default(),
                env: ctx.env.clone(),
                cwd: ctx.cwd.to_string_lossy().into_owned(),
            }),
            reply: Some(reply),
        };
        Ok(match answer.await {
            Ok(stdout) => ExecResult::ok(stdout),
            Err(_) => ExecResult::err("answer: no answer\n".to_string(), 1),
        })
    }
}

/// A script's exec, owning its interpreter while it waits for an answer.
type Exec = Pin<Box<dyn Future<Output = (Box<Bash>, bashkit::Result<ExecResult>)> + Send>>;

/// An interpreter with the builtin `answer`.
struct CallingBash {
    back_call: Arc<Mutex<BackCall>>,
    /// `None` only while a call polls the script.
    state: Mutex<Option<Calling>>,
}

enum Calling {
    Idle(Box<Bash>),
    /// Its script waits for a back-call's answer.
    Waiting(Exec),
}

#[rustler::resource_impl]
impl rustler::Resource for CallingBash {}

/// A new interpreter whose builtin `answer` asks Elixir.
#[rustler::nif]
fn new_calling() -> ResourceArc<CallingBash> {
    let back_call = Arc::new(Mutex::new(BackCall::default()));
    let bash = finish(
        builder(ExecutionLimits::new())
            .builtin("answer", Box::new(AskElixir(Arc::clone(&back_call))))
            .build(),
    );
    ResourceArc::new(CallingBash {
        back_call,
        state: Mutex::new(Some(Calling::Idle(Box::new(bash)))),
    })
}

/// Start `script`: `{:done, {stdout, stderr, exit_code}}`, or `{:call,
/// {:builtin, "answer", args, stdin, env, cwd}}` when it waits for Elixir.
#[rustler::nif]
fn call_exec<'a>(env: Env<'a>, calling: ResourceArc<CallingBash>, script: String) -> Term<'a> {
    let mut state = calling.state.lock().expect("an earlier exec panicked");
    let Some(Calling::Idle(mut bash)) = state.take() else {
        panic!("an exec is already waiting");
    };
    let exec: Exec = Box::pin(async move {
        let result = bash.exec(&script).await;
        (bash, result)
    });
    step(env, &calling, &mut state, exec)
}

/// Hand `answer` to the waiting builtin and go on with the script, as
/// `call_exec/2` answers.
#[rustler::nif]
fn call_resume<'a>(env: Env<'a>, calling: ResourceArc<CallingBash>, answer: String) -> Term<'a> {
    let mut state = calling.state.lock().expect("an earlier exec panicked");
    let Some(Calling::Waiting(exec)) = state.take() else {
        panic!("no exec is waiting");
    };
    if let Some(reply) = calling.back_call.lock().expect("back-call").reply.take() {
        let _ = reply.send(answer);
    }
    step(env, &calling, &mut state, exec)
}

/// Poll `exec` here until it ends or waits; keep it if it waits.
fn step<'a>(
    env: Env<'a>,
    calling: &CallingBash,
    state: &mut Option<Calling>,
    mut exec: Exec,
) -> Term<'a> {
    match poll_until_wait(rt(), &mut exec) {
        Poll::Ready((bash, result)) => {
            *state = Some(Calling::Idle(bash));
            (atoms::done(), outcome(env, result)).encode(env)
        }
        Poll::Pending => {
            *state = Some(Calling::Waiting(exec));
            let request = calling.back_call.lock().expect("back-call").request.take();
            let Some(r) = request else {
                // A wait that is not a back-call (`sleep`): not this baseline's.
                return (atoms::error(), "the script waits for something else").encode(env);
            };
            let request = (
                atoms::builtin(),
                "answer",
                r.args,
                binary(env, &r.stdin),
                r.env,
                r.cwd,
            );
            (atoms::call(), request).encode(env)
        }
    }
}

/// CPU nanoseconds this OS process has used, every thread's
/// (`cpu_clock.rs`): the bench's CPU per exec, counted as the harness
/// counts raw bashkit's.
#[rustler::nif]
fn process_cpu_ns() -> u64 {
    cpu_clock::process_cpu_ns()
}

mod atoms {
    rustler::atoms! {
        done, call, builtin, error, ok, nil,
        stdin, stream, timeout_ms, track_changes,
        __struct__, changes, commands, exit_code, stderr, stderr_bytes,
        stderr_truncated, stdout, stdout_bytes, stdout_truncated, wall_time_us,
        result_module = "Elixir.ExBashkit.Result",
    }
}

fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Binary<'a> {
    let mut out = NewBinary::new(env, bytes.len());
    out.as_mut_slice().copy_from_slice(bytes);
    out.into()
}

rustler::init!("Elixir.Bench.BareNif");

//! The worker process (`isolation: :process`): the same session core as the
//! NIF, driven by frames on stdin/stdout instead of NIF calls, so that a
//! crash, a stack overflow, an allocation failure or a thread that never
//! stops takes down this process and not the VM.
//!
//! # Frames
//! Each frame is a 4-byte big-endian length and a term in the external term
//! format (`term/etf.rs`); the VM side is an Erlang port opened with
//! `{:packet, 4}` by `ExBashkit.Worker`. Requests (VM → worker), `id` being
//! the VM's integer id for the request and `sid` a session id the VM chose:
//!
//! ```text
//! {:new, id, sid, config}          {:drop, sid}
//! {:exec, id, sid, script, call}   {:exec_once, id, config, script}
//! {:cancel, id, sid}               {:cancel_exec, sid, exec_id}
//! {:cancel_once, id}
//! {:state, id, sid, call}          {:reset, id, sid, call}
//! {:snapshot, id, sid, request, call}
//! {:restore, id, sid, bytes, key, call}
//! {:fs, id, sid, request}          {:info, id, sid}
//! {:glob, id, sid, request}        {:grep, id, sid, request}
//! {:mount, id, sid, spec}          {:unmount, id, sid, vfs_path}
//! {:describe, id, sid}
//! {:history_commit, id, sid, request, call}
//! {:history_checkout, id, sid, commit, objects, kept, limit, call}
//! {:history_diff, id, sid, from, to | nil, objects, call}
//! {:fork, id, sid, child_sid, call}
//! {:history_kept, id, sid}         {:history_roots, id, nil}
//! {:recovery_point, id, sid, call}
//! {:recover, id, sid, %{fs, shell, head, kept}, objects}
//! {:export_tar, id, sid, request}
//! {:map_image, image_id, path}   {:drop_image, image_id}
//! {:live_sessions, id}            {:running_scripts, id}
//! {:callback_reply, call_id, answer}
//! {:output_so_far, id, sid | nil, exec_id}
//! {:confinement, id}
//! ```
//!
//! `output_so_far` answers, from the reading thread: `{stdout, stderr}`,
//! what exec `exec_id` of session `sid` (or one-shot exec `exec_id`) has
//! written so far, if it should have ended by now (stopped by its deadline
//! or a cancel, or past its session's own timeout, counted from its
//! start); `{:running, ms | nil}` if it should not have yet (in `ms`, or
//! it still waits for its turn); `nil` if it has ended. `ExBashkit.Worker`
//! asks when an exec has not answered by its deadline.
//!
//! `map_image` and `drop_image` have no answer: a `map_image` is handled
//! on the reading thread before the frames after it, so a `new` that names
//! the image finds it (or fails saying it is not loaded).
//!
//! Every message back is `{tag, id, payload}` with the tags and payloads of
//! the NIF transport (`run/reply.rs`): `ExBashkit.Worker` only swaps `id` for
//! the caller's reference and forwards it, so the code waiting for an
//! answer is the same in both modes. An exec's id is also its exec id
//! (`cancel_exec`), and so is the id of a lifecycle call (`state`, `reset`,
//! `snapshot`, `restore`: `session/lifecycle.rs`), whose `call` is `%{timeout_ms:
//! ms | nil}`.
//!
//! `{:confinement, id}` answers the layers this process holds
//! (`worker/confine.rs`: `%{seccomp: bool, landlock: bool, namespaces:
//! [atom], ...}`). Lines the worker writes to stderr reach the VM as
//! `{:ex_bashkit_log, 0, line}`.
//!
//! # Confinement
//! Before it reads a frame the worker confines itself (`worker/confine.rs`):
//! an empty environment, no inherited descriptors, its own user, mount and
//! (unless started with `--network`) network namespaces, no capabilities,
//! not dumpable, no core dumps, `no_new_privs`, a Landlock domain and a
//! seccomp-bpf allowlist, under the address-space and CPU-time limits it was
//! started with (`--max-memory`, `--max-cpu-seconds`).

pub(crate) mod confine;
pub(crate) mod frame_input;
pub(crate) mod remote;
#[cfg(target_os = "linux")]
pub(crate) mod zygote;

use std::io::{self, Read};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::callbacks::{self, Answer};
use crate::config::MountSpec;
use crate::run::reply::{Caller, FrameWriter, ReplyTo};
use crate::run::runtime::{self, RuntimeConfig};
use crate::run::watchdog::ExecTicket;
use crate::search;
use crate::session::history;
use crate::session::lifecycle::{Op, OpCallOptions};
use crate::session::recovery;
use crate::session::snapshot::{self, SnapshotRequest};
use crate::session::{self, ExecCallOptions, Session};
use crate::term::value::{Bytes, FromValue, Value};
use crate::term::word_hash::IdMap;
use crate::worker::frame_input::FrameInput;
use crate::{run::warm, term::etf};

/// Frames larger than this are refused (a snapshot or file of a session is
/// bounded well below it by the session's own limits).
const MAX_FRAME: usize = 1 << 30;

type Sessions = Arc<Mutex<IdMap<Arc<Session>>>>;

/// One-shot execs (`{:exec_once, ...}`) by id, for `{:cancel_once, id}`.
static ONE_SHOTS: std::sync::LazyLock<Mutex<IdMap<std::sync::Weak<ExecTicket>>>> =
    std::sync::LazyLock::new(|| Mutex::new(IdMap::default()));

/// What the worker was started with, from its command line.
#[derive(Debug, Default)]
struct Settings {
    confine: confine::Request,
    runtime: RuntimeConfig,
    /// `--self-test`: make the attempts of `confine/self_test.rs` and exit.
    self_test: Option<confine::self_test::Targets>,
}

fn targets(
    self_test: &mut Option<confine::self_test::Targets>,
) -> &mut confine::self_test::Targets {
    self_test.get_or_insert_with(Default::default)
}

/// Room in the address space for what is neither heap nor interpreter
/// stacks: the binary, the runtime's own threads, mimalloc's arenas.
const MAPPING_SLACK: u64 = 1 << 30;

/// The worker's settings; flags it does not know are skipped, a flag it
/// knows with a bad value is an error.
fn parse_args(args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings::default();
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        // Flags without a value.
        match flag.as_str() {
            "--network" => {
                settings.confine.network = true;
                continue;
            }
            "--require-confinement" => {
                settings.confine.require = true;
                continue;
            }
            FORKED => {
                settings.confine.forked = true;
                continue;
            }
            "--self-test" => {
                settings.self_test.get_or_insert_with(Default::default);
                continue;
            }
            _ => {}
        }
        let Some(text) = args.next() else {
            return match LIMITS.contains(&flag.as_str()) {
                true => Err(format!("{flag} needs a value")),
                false => Ok(settings),
            };
        };
        if LIMITS.contains(&flag.as_str()) {
            set_limit_flag(&mut settings, &flag, &text)?;
            continue;
        }
        let value = text.parse::<u64>().ok();
        match (flag.as_str(), value) {
            ("--without", _) => settings.confine.without.push(text),
            ("--grant-read" | "--grant-write", _) => {
                settings.confine.grants.push(confine::landlock::Grant {
                    writable: flag == "--grant-write",
                    path: text,
                })
            }
            ("--probe-file", _) => targets(&mut settings.self_test).host_file = text,
            ("--probe-dir", _) => targets(&mut settings.self_test).host_dir = text,
            ("--read-mount", _) => targets(&mut settings.self_test).read_mount = text,
            ("--write-mount", _) => targets(&mut settings.self_test).write_mount = text,
            ("--loopback-port", Some(v)) => {
                targets(&mut settings.self_test).loopback_port = v as u16
            }
            ("--ptrace-pid", Some(v)) => targets(&mut settings.self_test).ptrace_pid = v as i32,
            _ => {}
        }
    }
    Ok(settings)
}

/// The flags that set a limit: a bad value for one ends the worker at
/// start, as a limit that cannot be set does (`confine.rs`).
const LIMITS: [&str; 4] = [
    "--max-memory",
    "--max-cpu-seconds",
    "--stack-size",
    "--max-script-threads",
];

fn set_limit_flag(settings: &mut Settings, flag: &str, raw: &str) -> Result<(), String> {
    let v = match raw.parse::<u64>() {
        Ok(v) if v > 0 => v,
        _ => return Err(format!("{flag} needs a positive number, got {raw:?}")),
    };
    let size = usize::try_from(v).unwrap_or(usize::MAX);
    match flag {
        "--max-memory" => settings.confine.max_memory = Some(v),
        "--max-cpu-seconds" => settings.confine.max_cpu_seconds = Some(v),
        "--stack-size" if v >= 1 << 20 => settings.runtime.stack_size = size,
        "--stack-size" => return Err(format!("--stack-size must be at least 1 MiB, got {v}")),
        _ => settings.runtime.max_script_threads = size,
    }
    Ok(())
}

/// The address-space limit for a heap of `max_memory`: that, every
/// interpreter thread's stack reservation and `MAPPING_SLACK`.
fn address_space(max_memory: u64, runtime: &RuntimeConfig) -> u64 {
    let stacks = (runtime.stack_size as u64).saturating_mul(runtime.max_script_threads as u64);
    max_memory
        .saturating_add(stacks)
        .saturating_add(MAPPING_SLACK)
}

/// The port's end of stdout, without `Stdout`'s line buffering: that
/// splits a frame at its last newline byte and flushes the rest, two or
/// more `write`s per frame where one does (`FrameWriter` writes each frame
/// whole).
fn unbuffered_stdout() -> Box<dyn io::Write + Send> {
    use std::os::fd::AsFd;
    match io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(io::stdout()),
    }
}

/// A worker that cannot hold its limits does not start: exit 78
/// (`EX_CONFIG`), the reason on stderr.
fn refuse_to_start(message: &str) -> i32 {
    eprintln!("ex_bashkit_worker: {message}");
    78
}

/// The worker's entry point; returns the process exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    #[cfg(target_os = "linux")]
    if zygote::requested(&args) {
        return zygote::serve(start);
    }
    start(args)
}

/// The flag a child forked by the zygote gets last (`confine::Request::forked`).
pub(crate) const FORKED: &str = "--forked";

/// A worker with `args`, started by the VM or forked by the zygote.
fn start(args: Vec<String>) -> i32 {
    runtime::set_worker_process();
    let mut settings = match parse_args(args.into_iter()) {
        Ok(settings) => settings,
        Err(message) => return refuse_to_start(&message),
    };
    // `--max-memory` is the heap the docs name; the cap covers the
    // interpreter threads' stacks too.
    settings.confine.max_memory = settings
        .confine
        .max_memory
        .map(|bytes| address_space(bytes, &settings.runtime));
    let stderr = match confine::apply(&settings.confine) {
        Ok(stderr) => stderr,
        Err(message) => return refuse_to_start(&message),
    };
    let frames = FrameWriter::new(unbuffered_stdout());
    if let Some(targets) = &settings.self_test {
        return confine::self_test::run(targets, &frames);
    }
    if let Some(read_end) = stderr {
        forward_stderr(read_end, Arc::clone(&frames));
    }
    runtime::configure(settings.runtime);
    crate::run::guard::install_panic_hook();

    let sessions: Sessions = Arc::new(Mutex::new(IdMap::default()));
    let mut stdin = io::BufReader::new(FrameInput::stdin());
    loop {
        match read_frame(&mut stdin) {
            Ok(Some(frame)) => match etf::decode(&frame) {
                Ok(request) => {
                    // The decoded request owns copies of everything in the
                    // frame: free the frame first, so that a large one (an
                    // image's archive) is not held twice while handled.
                    drop(frame);
                    handle(request, &sessions, &frames)
                }
                Err(message) => eprintln!("ex_bashkit_worker: bad frame: {message}"),
            },
            // The VM closed the port (it stopped us, or it is gone).
            Ok(None) => return 0,
            Err(error) => {
                eprintln!("ex_bashkit_worker: reading stdin: {error}");
                return 74;
            }
        }
    }
}

/// Send each line written to fd 2 (a pipe since `confine::apply`) to the
/// VM as `{:ex_bashkit_log, 0, line}`, where `ExBashkit.Worker` logs it.
fn forward_stderr(read_end: std::os::fd::OwnedFd, frames: Arc<FrameWriter>) {
    use std::io::BufRead;
    let spawned = std::thread::Builder::new()
        .name("stderr".into())
        .spawn(move || {
            let lines = io::BufReader::new(std::fs::File::from(read_end)).split(b'\n');
            for line in lines.map_while(Result::ok) {
                let frame = Value::tuple([
                    Value::atom("ex_bashkit_log"),
                    Value::Int(0),
                    Value::Binary(line),
                ]);
                frames.write(&etf::encode(&frame));
            }
        });
    if spawned.is_err() {
        // Nobody reads the pipe: writes to it would block once it is full.
        // SAFETY: fd 2 is ours; /dev/null cannot be opened any more, so
        // closing is what is left.
        unsafe {
            libc::close(2);
        }
    }
}

fn read_frame(input: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("frame of {len} bytes")));
    }
    let mut frame = vec![0u8; len];
    input.read_exact(&mut frame)?;
    Ok(Some(frame))
}

fn reply_to(id: u64, frames: &Arc<FrameWriter>) -> ReplyTo {
    ReplyTo::new(Caller::Port {
        id,
        frames: Arc::clone(frames),
    })
}

fn answer(id: u64, frames: &Arc<FrameWriter>, value: Value) {
    reply_to(id, frames).finish(&value);
}

/// Decode field `i` of a request tuple.
fn arg<T: FromValue>(items: &[Value], i: usize) -> Result<T, String> {
    T::from_value(items.get(i).ok_or("missing argument")?)
}

fn handle(request: Value, sessions: &Sessions, frames: &Arc<FrameWriter>) {
    let Ok(items) = request.elements() else {
        return;
    };
    let tag = items.first().and_then(Value::as_atom).unwrap_or("");
    // Requests without a reply first.
    match tag {
        "drop" => {
            if let Ok(sid) = arg::<u64>(items, 1) {
                // Torn down on a runner, not on this thread (`run/teardown.rs`).
                let removed = sessions.lock().remove(&sid);
                if let Some(session) = removed {
                    crate::run::teardown::later(session);
                }
            }
            return;
        }
        "map_image" => {
            match (arg::<String>(items, 1), arg::<String>(items, 2)) {
                (Ok(image_id), Ok(path)) => {
                    if let Err(message) = crate::image::map_pinned(&image_id, &path) {
                        eprintln!("ex_bashkit_worker: image {image_id}: {message}");
                    }
                }
                _ => eprintln!("ex_bashkit_worker: malformed map_image"),
            }
            return;
        }
        "drop_image" => {
            if let Ok(image_id) = arg::<String>(items, 1) {
                crate::image::unpin(&image_id);
            }
            return;
        }
        "cancel_exec" => {
            if let (Ok(sid), Ok(exec_id)) = (arg::<u64>(items, 1), arg::<u64>(items, 2)) {
                if let Some(session) = sessions.lock().get(&sid) {
                    session.cancel_exec(exec_id);
                }
            }
            return;
        }
        "cancel_once" => {
            if let Ok(id) = arg::<u64>(items, 1) {
                let ticket = ONE_SHOTS.lock().get(&id).and_then(std::sync::Weak::upgrade);
                if let Some(ticket) = ticket {
                    ticket.cancel();
                }
            }
            return;
        }
        "callback_reply" => {
            if let (Ok(call_id), Some(value)) = (arg::<u64>(items, 1), items.get(2)) {
                let answer = callbacks::decode_answer(value).unwrap_or_else(|| {
                    Answer::Failed("malformed answer from the builtin or virtual_fs handler".into())
                });
                callbacks::reply_on_reader(call_id, answer);
            }
            return;
        }
        _ => {}
    }
    let Ok(id) = arg::<u64>(items, 1) else {
        eprintln!("ex_bashkit_worker: request without an id: {tag}");
        return;
    };
    if let Err(message) = dispatch(tag, id, items, sessions, frames) {
        answer(id, frames, Value::error(message));
    }
}

fn dispatch(
    tag: &str,
    id: u64,
    items: &[Value],
    sessions: &Sessions,
    frames: &Arc<FrameWriter>,
) -> Result<(), String> {
    if tag == "confinement" {
        answer(id, frames, confine::report().to_value());
        return Ok(());
    }
    if tag == "new" || tag == "exec_once" {
        if let Some(refusal) = confine::refusal() {
            return Err(refusal);
        }
    }
    if tag == "new" {
        let sid: u64 = arg(items, 2)?;
        let decoded = crate::config::cache::decode_value(items.get(3).ok_or("missing config")?)?;
        // Built on the reading thread, so that requests for this session
        // that follow it (a rebuild after a crash sends them back to back)
        // find it. Building takes tens of microseconds, or as long as its
        // `:files` and host mounts take to set up.
        let reply = reply_to(id, frames);
        match Session::new(&decoded) {
            Ok(session) => {
                let _ = session.worker_sid.set(sid);
                sessions.lock().insert(sid, session);
                reply.finish(&Value::ok());
            }
            Err(message) => reply.finish(&Value::error(message)),
        }
        return Ok(());
    }
    if tag == "canonical_tar" {
        // `{:canonical_tar, id, spec}` (`Image.build/1`): off the reading
        // thread, which a large archive would hold for seconds.
        let spec = crate::image::BuildSpec::from_value(items.get(2).ok_or("missing spec")?)?;
        let reply = reply_to(id, frames);
        runtime::spawn_job(async move {
            let answer = match crate::image::canonical_tar_of(spec).await {
                Ok(tar) => Value::ok_with(Value::Binary(tar)),
                Err(message) => Value::error(message),
            };
            reply.finish(&answer);
        });
        return Ok(());
    }
    if tag == "live_sessions" {
        answer(id, frames, session::live_sessions().into());
        return Ok(());
    }
    if tag == "output_so_far" {
        // `{:output_so_far, id, sid | nil, exec_id}`: answered here, on the
        // reading thread, however busy the runners are.
        let exec_id: u64 = arg(items, 3)?;
        let given_up = match arg::<u64>(items, 2) {
            Ok(sid) => sessions
                .lock()
                .get(&sid)
                .cloned()
                .and_then(|session| session.give_up_if_overdue(exec_id)),
            // A one-shot never waits for a turn: its deadline counts from
            // its start, as the owner's does.
            Err(_) => ONE_SHOTS
                .lock()
                .get(&exec_id)
                .and_then(std::sync::Weak::upgrade)
                .and_then(|ticket| ticket.give_up().map(Ok)),
        };
        answer(id, frames, crate::result::give_up_value(given_up));
        return Ok(());
    }
    if tag == "history_roots" {
        answer(id, frames, history::ids_value(&history::roots()));
        return Ok(());
    }
    if tag == "running_scripts" {
        answer(id, frames, runtime::running_scripts().into());
        return Ok(());
    }
    if tag == "exec_once" {
        let decoded = crate::config::cache::decode_value(items.get(2).ok_or("missing config")?)?;
        let script: String = arg(items, 3)?;
        // A quick script runs right here when an interpreter is ready.
        let prebuilt = session::once_quick_fits(&script)
            .then(|| warm::take_ready(&decoded.key, &decoded.config))
            .flatten();
        let ticket = ExecTicket::new();
        ONE_SHOTS.lock().insert(id, Arc::downgrade(&ticket));
        let on_end = Box::new(move || {
            ONE_SHOTS.lock().remove(&id);
        });
        let reply = reply_to(id, frames);
        if let Some(outcome) = session::exec_once_job(
            decoded,
            prebuilt,
            script,
            ticket,
            reply,
            Some(on_end),
            || {},
        ) {
            reply_to(id, frames).finish(&outcome);
        }
        return Ok(());
    }
    let sid: u64 = arg(items, 2)?;
    let session = sessions
        .lock()
        .get(&sid)
        .cloned()
        .ok_or("no such session in this worker")?;
    let reply = reply_to(id, frames);
    match tag {
        "exec" => {
            let call = ExecCallOptions::from_value(items.get(4).ok_or("missing options")?)?;
            // Answered here when it ran inline: a quick script that fits
            // the budget (`Session::quick_call_fits`).
            if let Some(outcome) =
                session::exec(session, id, arg(items, 3)?, call, reply, || {}, || {})
            {
                reply_to(id, frames).finish(&outcome);
            }
        }
        "cancel" => reply.finish(&Value::from(session.cancel())),
        "info" => reply.finish(&session.info()),
        "state" => session::state(op(session, "state/1", id, items, 3)?, reply),
        "reset" => {
            // Answered here when it swapped in an interpreter built in
            // advance (`session::reset`).
            if let Some(answer) = session::reset(op(session, "reset/1", id, items, 3)?, reply) {
                reply_to(id, frames).finish(&answer);
            }
        }
        "snapshot" => {
            let request = SnapshotRequest::from_value(items.get(3).ok_or("missing options")?)?;
            let op = op(session, "snapshot/2", id, items, 4)?;
            snapshot::snapshot(op, request, reply);
        }
        "restore" => {
            let Bytes(bytes) = arg(items, 3)?;
            let key: Option<Bytes> = arg(items, 4)?;
            let op = op(session, "restore/3", id, items, 5)?;
            snapshot::restore(op, bytes, key.map(|k| k.0), reply);
        }
        "history_commit" => {
            let request =
                history::CommitRequest::from_value(items.get(3).ok_or("missing options")?)?;
            history::commit(op(session, "commit/2", id, items, 4)?, request, reply);
        }
        "history_checkout" => {
            let objects: Vec<(String, Bytes)> = arg(items, 4)?;
            let op = op(session, "checkout/2", id, items, 7)?;
            history::checkout(
                op,
                arg(items, 3)?,
                objects,
                arg(items, 5)?,
                arg(items, 6)?,
                reply,
            );
        }
        "history_diff" => {
            let objects: Vec<(String, Bytes)> = arg(items, 5)?;
            let op = op(session, "diff/3", id, items, 6)?;
            history::diff(op, arg(items, 3)?, arg(items, 4)?, objects, reply);
        }
        "fork" => {
            let child_sid: u64 = arg(items, 3)?;
            let child = sessions
                .lock()
                .get(&child_sid)
                .cloned()
                .ok_or("no such session in this worker")?;
            crate::session::fork::fork(op(session, "fork/2", id, items, 4)?, child, reply);
        }
        "history_kept" => reply.finish(&history::ids_value(&session.history.kept())),
        "recovery_point" => recovery::point_call(op(session, "recovery", id, items, 3)?, reply),
        "recover" => {
            let request =
                recovery::RecoverRequest::from_value(items.get(3).ok_or("missing point")?)?;
            let objects: Vec<(String, Bytes)> = arg(items, 4)?;
            reply.finish(&recovery::recover(&session, request, objects));
        }
        "glob" => {
            let request = search::GlobRequest::from_value(items.get(3).ok_or("missing request")?)?;
            search::glob(session, request, reply);
        }
        "grep" => {
            let request = search::GrepRequest::from_value(items.get(3).ok_or("missing request")?)?;
            search::grep(session, request, reply);
        }
        "mount" => {
            let spec = MountSpec::from_value(items.get(3).ok_or("missing mount")?)?;
            crate::session::mounts::mount(session, spec, reply);
        }
        "unmount" => crate::session::mounts::unmount(session, arg(items, 3)?, reply),
        "describe" => reply.finish(&crate::session::mounts::describe(&session)),
        "export_tar" => {
            let request = crate::session::tar::ExportRequest::from_value(
                items.get(3).ok_or("missing request")?,
            )?;
            crate::session::tar::export_tar(session, request, reply);
        }
        "fs" => {
            let request = items.get(3).cloned().ok_or("missing request")?;
            runtime::spawn_blocking(move || {
                let trash = session.config().soft_delete.as_deref();
                reply.finish(&crate::session::fs::call(&session.fs(), trash, &request))
            });
        }
        other => reply.finish(&Value::error(format!("unknown request {other}"))),
    }
    Ok(())
}

/// Lifecycle call `id` on `session`, its options at field `at`.
fn op(
    session: Arc<Session>,
    name: &'static str,
    id: u64,
    items: &[Value],
    at: usize,
) -> Result<Op, String> {
    let call = OpCallOptions::from_value(items.get(at).ok_or("missing call options")?)?;
    Ok(Op::new(session, name, id, call, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_frames_and_stops_at_a_clean_end() {
        let mut input: &[u8] = &[0, 0, 0, 2, 131, 106];
        assert_eq!(read_frame(&mut input).unwrap(), Some(vec![131, 106]));
        assert_eq!(read_frame(&mut input).unwrap(), None);
        let mut huge: &[u8] = &[255, 255, 255, 255];
        assert!(read_frame(&mut huge).is_err());
    }

    fn parsed(args: &[&str]) -> Result<Settings, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn settings_skip_unknown_flags_and_refuse_bad_limits() {
        let settings = parsed(&["--max-memory", "1024", "--bogus", "x", "--network"]).unwrap();
        assert_eq!(settings.confine.max_memory, Some(1024));
        assert!(settings.confine.network);
        for bad in [
            &["--max-memory", "abc"][..],
            &["--max-memory", "0"],
            &["--max-cpu-seconds"],
            &["--stack-size", "10"],
        ] {
            assert!(parsed(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_address_space_is_the_heap_plus_stacks_and_slack() {
        let runtime = RuntimeConfig {
            stack_size: 16 << 20,
            max_script_threads: 256,
            ..RuntimeConfig::default()
        };
        assert_eq!(
            address_space(4 << 30, &runtime),
            (4 << 30) + (4 << 30) + (1 << 30)
        );
    }
}

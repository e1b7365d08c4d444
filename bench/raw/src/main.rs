//! The raw-bashkit baseline for ExBashkit's benchmarks: the physical limit of
//! what the NIF can reach.
//!
//! Every case runs the same scripts as `bench/*.exs`, on a `Bash` built with
//! the same builder settings as `native/ex_bashkit/src/config.rs::build_bash`
//! (`same_as_nif.rs`, shared with the bare NIF in `lib.rs`; keep the two in
//! step) and on the same tokio setup
//! as `native/ex_bashkit/src/run/runtime.rs` (multi-thread runtime, one worker per
//! core and at least two, 64 MiB stacks), with the same allocator (mimalloc;
//! build with `--no-default-features` for glibc's).
//!
//! Output (stdout), one Erlang term per line so that Elixir reads it with
//! `:file.consult/1` (no JSON library is available there):
//!
//! ```text
//! {sample, <<"echo_hi.exec">>, [Ns, ...]}.              per-operation latencies
//! {throughput, <<"concurrency.8">>, Sessions, Ops, ElapsedNs, CpuNs, [LatencyNs, ...]}.
//! {memory, <<"idle_session">>, Count, BytesPerSession, RssBeforeKb, RssAfterKb}.
//! {info, <<"key">>, <<"text">>}.
//! ```
//!
//! `--ping PORT MILLIS` is the outside client of the responsiveness case;
//! `--realistic CASES [--quick]` runs the realistic case set (`realistic.rs`).
//! `--json` prints the same data as JSON with percentiles, for people.
//! `--quick` shrinks every budget (a smoke run). Arguments name the case
//! groups to run (default: all but `construct`, `handoff`, `sched`,
//! `phases`, `gaps` and `history`, the investigation groups).

use std::fmt::Write as _;
use std::future::IntoFuture as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bashkit::{
    async_trait, Bash, Builtin, BuiltinContext, ExecOptions, ExecResult, ExecutionLimits,
    InMemoryFs,
};
use tokio::runtime::Runtime;

mod cpu_clock;
mod realistic;
mod same_as_nif;
use cpu_clock::process_cpu_ns;
use same_as_nif::{build_bash, builder, finish, poll_inline, runtime, runtime_builder};

/// The same allocator as the NIF (see native/ex_bashkit/src/nif/allocator.rs).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Groups run only when named: investigations behind bench/DECISIONS.md.
const INVESTIGATIONS: &str = "construct handoff sched phases gaps history";

const GROUPS: &[&str] = &[
    "echo",
    "new",
    "loop",
    "pipeline",
    "vfs",
    "builtin",
    "vfs_backend",
    "snapshot",
    "cpu",
    "concurrency",
    "memory",
];

/// A short CPU-bound script: 50 iterations of a `while` loop (the issue's
/// per-command cost case; the Elixir side runs the same).
const LOOP50: &str = "i=0; while [ $i -lt 50 ]; do i=$((i + 1)); done; echo $i";

/// The scripts, shared with `bench/cases.exs` (keep them identical).
const ECHO: &str = "echo hi";
const LOOP: &str = "s=0; for ((i=0; i<10000; i++)); do s=$((s + i)); done; echo $s";
const PIPELINE: &str = "seq 1 10000 | grep 7 | wc -l";
const BUILTIN: &str = "answer";
const VFS_BACKEND: &str = "cat /api/blob | wc -c";
const MB: usize = 1024 * 1024;
/// Execs per concurrency level, split between the sessions.
const CONCURRENCY_OPS: usize = 60_000;
/// Sessions kept alive by the memory case, and the ones created before.
const MEMORY_SESSIONS: usize = 10_000;
const MEMORY_BASE: usize = 1_000;

/// Incompressible bytes (xorshift), so that the snapshot is as big as the
/// files it holds.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The same interpreter and runtime as the NIF (`same_as_nif.rs`), and the
// cases' own builders.

/// A named way of building an interpreter (the construction cases).
type MakeBash = Box<dyn Fn() -> Bash>;

/// The memory work of the `phases` and `gaps` calibrators, which runs no
/// interpreter code: the `memmove` of bashkit's history trim, four times.
fn history_trims(buffer: &mut [u8]) {
    for _ in 0..4 {
        buffer.copy_within(72.., 0);
    }
}

/// Limits the loop case needs (it runs 20 000 commands); the Elixir side
/// passes the same `:limits`.
fn loop_limits() -> ExecutionLimits {
    ExecutionLimits::new()
        .max_commands(1_000_000)
        .max_loop_iterations(1_000_000)
}

// ---------------------------------------------------------------------------
// The scheduler investigation (group `sched`): what running a script on the
// calling thread costs, on a big stack switched in with corosensei, polled
// with a waker that only records a wake-up (as the NIF's inline path does).

/// Submissions so far: an idle worker spinning before it parks watches it.
static SUBMITTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// `runtime()` whose idle workers spin up to `spin_us` before parking,
/// returning early once a new task was submitted.
fn spin_runtime(spin_us: u64) -> Runtime {
    let mut b = runtime_builder();
    if spin_us > 0 {
        b.on_thread_park(move || {
            use std::sync::atomic::Ordering::Relaxed;
            let seen = SUBMITTED.load(Relaxed);
            let t0 = Instant::now();
            let limit = Duration::from_micros(spin_us);
            'spin: loop {
                for _ in 0..64 {
                    if SUBMITTED.load(Relaxed) != seen {
                        break 'spin;
                    }
                    std::hint::spin_loop();
                }
                if t0.elapsed() >= limit {
                    break;
                }
            }
        });
    }
    b.build().expect("runtime")
}

// ---------------------------------------------------------------------------
// Sampling.

#[derive(Clone, Copy)]
struct Budget {
    warmup: usize,
    min: usize,
    max: usize,
    time: Duration,
}

impl Budget {
    const fn new(warmup: usize, min: usize, max: usize, millis: u64) -> Self {
        Self {
            warmup,
            min,
            max,
            time: Duration::from_millis(millis),
        }
    }

    fn scaled(self, quick: bool) -> Self {
        if quick {
            Self {
                warmup: self.warmup.min(20),
                min: self.min.min(20),
                max: self.max.min(200),
                time: self.time / 10,
            }
        } else {
            self
        }
    }
}

/// Run `op` until the budget is spent; each call returns its own duration
/// (so that set-up and tear-down stay outside the measurement).
fn sample(budget: Budget, mut op: impl FnMut() -> Duration) -> Vec<u64> {
    for _ in 0..budget.warmup {
        op();
    }
    let start = Instant::now();
    let mut out = Vec::with_capacity(budget.max.min(1 << 20));
    while out.len() < budget.max && (out.len() < budget.min || start.elapsed() < budget.time) {
        out.push(op().as_nanos() as u64);
    }
    out
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t0 = Instant::now();
    let value = f();
    (t0.elapsed(), value)
}

/// How many interpreters `session_new.new_dropped_elsewhere` hands to its
/// dropper thread at once: the NIF's teardown batch (`run/teardown.rs`).
const DROP_BATCH: usize = 8;

/// How much memory `echo_hi.exec_disturbed` writes between two execs: half
/// of this CPU's per-core L2 cache (an AMD EPYC's 512 KiB).
const DISTURBANCE_BYTES: usize = 256 * 1024;

/// Write one word per cache line of `memory`.
fn disturb(memory: &mut [u64]) {
    for (i, word) in memory.iter_mut().enumerate().step_by(8) {
        *word = word.wrapping_add(i as u64);
    }
    std::hint::black_box(memory);
}

// ---------------------------------------------------------------------------
// Output.

enum Record {
    Sample(String, Vec<u64>),
    Throughput {
        name: String,
        sessions: usize,
        ops: u64,
        elapsed_ns: u64,
        /// CPU time the whole process used meanwhile (all threads).
        cpu_ns: u64,
        latencies: Vec<u64>,
    },
    Memory {
        name: String,
        count: usize,
        bytes_per_session: u64,
        rss_before_kb: u64,
        rss_after_kb: u64,
    },
    Info(String, String),
}

impl Record {
    /// `sessions` callers' `latencies` (one per op), `elapsed` in all, and
    /// the CPU time the whole process used meanwhile.
    fn throughput(
        name: String,
        sessions: usize,
        latencies: Vec<u64>,
        elapsed: Duration,
        cpu_ns: u64,
    ) -> Self {
        Record::Throughput {
            name,
            sessions,
            ops: latencies.len() as u64,
            elapsed_ns: elapsed.as_nanos() as u64,
            cpu_ns,
            latencies,
        }
    }
}

fn erl_bin(s: &str) -> String {
    // <<"...">> with the bytes escaped Erlang-style.
    let mut out = String::from("<<\"");
    for b in s.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{:03o}", b);
            }
        }
    }
    out.push_str("\">>");
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn list(xs: &[u64]) -> String {
    let mut out = String::with_capacity(xs.len() * 8);
    for (i, x) in xs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn stats_json(xs: &[u64]) -> String {
    let mut s = xs.to_vec();
    s.sort_unstable();
    format!(
        "{{\"n\":{},\"median_ns\":{},\"p90_ns\":{},\"p99_ns\":{},\"min_ns\":{},\"samples_ns\":[{}]}}",
        s.len(),
        percentile(&s, 50.0),
        percentile(&s, 90.0),
        percentile(&s, 99.0),
        s.first().copied().unwrap_or(0),
        list(xs)
    )
}

fn emit(record: &Record, json: bool) -> String {
    match (record, json) {
        (Record::Sample(name, xs), false) => format!("{{sample, {}, [{}]}}.", erl_bin(name), list(xs)),
        (Record::Sample(name, xs), true) => {
            format!("{}: {}", json_str(name), stats_json(xs))
        }
        (
            Record::Throughput {
                name,
                sessions,
                ops,
                elapsed_ns,
                cpu_ns,
                latencies,
            },
            false,
        ) => format!(
            "{{throughput, {}, {sessions}, {ops}, {elapsed_ns}, {cpu_ns}, [{}]}}.",
            erl_bin(name),
            list(latencies)
        ),
        (
            Record::Throughput {
                name,
                sessions,
                ops,
                elapsed_ns,
                cpu_ns,
                latencies,
            },
            true,
        ) => format!(
            "{}: {{\"sessions\":{sessions},\"ops\":{ops},\"elapsed_ns\":{elapsed_ns},\"cpu_ns\":{cpu_ns},\"ops_per_s\":{:.0},\"latency\":{}}}",
            json_str(name),
            *ops as f64 / (*elapsed_ns as f64 / 1e9),
            stats_json(latencies)
        ),
        (
            Record::Memory {
                name,
                count,
                bytes_per_session,
                rss_before_kb,
                rss_after_kb,
            },
            false,
        ) => format!(
            "{{memory, {}, {count}, {bytes_per_session}, {rss_before_kb}, {rss_after_kb}}}.",
            erl_bin(name)
        ),
        (
            Record::Memory {
                name,
                count,
                bytes_per_session,
                rss_before_kb,
                rss_after_kb,
            },
            true,
        ) => format!(
            "{}: {{\"count\":{count},\"bytes_per_session\":{bytes_per_session},\"rss_before_kb\":{rss_before_kb},\"rss_after_kb\":{rss_after_kb}}}",
            json_str(name)
        ),
        (Record::Info(key, value), false) => format!("{{info, {}, {}}}.", erl_bin(key), erl_bin(value)),
        (Record::Info(key, value), true) => format!("{}: {}", json_str(key), json_str(value)),
    }
}

// ---------------------------------------------------------------------------
// Cases.

struct Bench {
    rt: Arc<Runtime>,
    quick: bool,
    records: Vec<Record>,
}

fn exec_ok(rt: &Runtime, bash: &mut Bash, script: &str) -> ExecResult {
    rt.block_on(bash.exec(script))
        .unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// A custom builtin that answers at once: the Rust floor of a builtin round
/// trip (ours goes through an Elixir function).
struct Answer;

#[async_trait]
impl Builtin for Answer {
    async fn execute(&self, _ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        Ok(ExecResult::ok("x\n".to_string()))
    }
}

/// A custom builtin whose answer comes from another thread, which sleeps
/// until asked: the Rust floor of a back-call that leaves the script's
/// thread (ours goes to an Elixir process and back), two thread wake-ups.
struct AnswerFromThread {
    requests: tokio::sync::mpsc::UnboundedSender<tokio::sync::oneshot::Sender<String>>,
}

impl AnswerFromThread {
    fn start() -> Self {
        let (requests, mut incoming) =
            tokio::sync::mpsc::unbounded_channel::<tokio::sync::oneshot::Sender<String>>();
        std::thread::spawn(move || {
            while let Some(answer) = incoming.blocking_recv() {
                let _ = answer.send("x\n".to_string());
            }
        });
        Self { requests }
    }
}

#[async_trait]
impl Builtin for AnswerFromThread {
    async fn execute(&self, _ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.requests.send(tx).expect("answering thread");
        Ok(ExecResult::ok(rx.await.expect("answer")))
    }
}

/// Live execution of `script` polled inline, its stdout collected by a sink
/// (as the NIF's runner does, without bashkit's `capture`).
fn execute_with_sink(rt: &Runtime, bash: &mut Bash, script: &str) -> Vec<u8> {
    let out = std::sync::Mutex::new(Vec::new());
    let _ = poll_inline(
        rt,
        bash.execute(script)
            .stdout_fn(|bytes| {
                out.lock().unwrap().extend_from_slice(&bytes);
                std::future::ready(Ok(()))
            })
            .into_future(),
    );
    out.into_inner().unwrap()
}

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Bench {
    fn budget(&self, b: Budget) -> Budget {
        b.scaled(self.quick)
    }

    fn push_sample(&mut self, name: &str, xs: Vec<u64>) {
        self.records.push(Record::Sample(name.to_string(), xs));
    }

    fn info(&mut self, key: &str, value: impl Into<String>) {
        self.records
            .push(Record::Info(key.to_string(), value.into()));
    }

    fn echo(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        // exec on an existing interpreter, driven from this thread: the
        // interpreter's own cost.
        let mut bash = build_bash();
        assert_eq!(exec_ok(rt, &mut bash, ECHO).stdout.as_bytes(), b"hi\n");
        let b = self.budget(Budget::new(2_000, 2_000, 200_000, 1_500));
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(ECHO))).0);
        self.push_sample("echo_hi.exec", xs);

        // The same exec with a per-command output callback that keeps what
        // was written in a shared buffer: how the NIF runs a short script,
        // so that an exec stopped by a limit, a timeout or a cancel still
        // answers with its output so far (bashkit's `Err` carries none).
        let kept = Arc::new(parking_lot::Mutex::new(Vec::<u8>::new()));
        let xs = sample(b, || {
            let sink = Arc::clone(&kept);
            let options = ExecOptions::new().streaming(Box::new(move |stdout, stderr| {
                let mut sink = sink.lock();
                sink.extend_from_slice(stdout.as_bytes());
                sink.extend_from_slice(stderr.as_bytes());
            }));
            let d = timed(|| rt.block_on(bash.exec_with_options(ECHO, options))).0;
            kept.lock().clear();
            d
        });
        self.push_sample("echo_hi.exec_kept_output", xs);

        // The same exec after other work has run through the caches, as it
        // does between two execs in the VM (the caller's loop, the result
        // term, its GC): 256 KiB written, untimed, before each exec.
        let mut other_work = vec![0u64; DISTURBANCE_BYTES / 8];
        let xs = sample(b, || {
            disturb(&mut other_work);
            timed(|| rt.block_on(bash.exec(ECHO))).0
        });
        self.push_sample("echo_hi.exec_disturbed", xs);

        // The same exec handed to a runtime worker and answered to this
        // thread (mutex + spawn + channel): the NIF's path without the BEAM.
        let shared = Arc::new(tokio::sync::Mutex::new(build_bash()));
        let b = self.budget(Budget::new(2_000, 2_000, 200_000, 1_500));
        let xs = sample(b, || {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let session = Arc::clone(&shared);
            timed(|| {
                rt.spawn(async move {
                    let mut bash = session.lock().await;
                    let r = bash.exec(ECHO).await;
                    let _ = tx.send(r.is_ok());
                });
                rx.recv().unwrap()
            })
            .0
        });
        self.push_sample("echo_hi.exec_spawn", xs);

        // A fresh interpreter per script (ExBashkit.exec/1).
        let b = self.budget(Budget::new(500, 1_000, 100_000, 1_500));
        let xs = sample(b, || {
            let (d, bash) = timed(|| {
                rt.block_on(async {
                    let mut bash = build_bash();
                    let _ = bash.exec(ECHO).await;
                    bash
                })
            });
            drop(bash);
            d
        });
        self.push_sample("echo_hi.new_exec", xs);

        // The first exec of an interpreter built beforehand: what
        // `ExBashkit.exec/1` pays when a warm interpreter is ready.
        let xs = sample(b, || {
            let mut bash = build_bash();
            let (d, _) = timed(|| rt.block_on(bash.exec(ECHO)));
            drop(bash);
            d
        });
        self.push_sample("echo_hi.first_exec", xs);
    }

    fn session_new(&mut self) {
        let b = self.budget(Budget::new(500, 1_000, 100_000, 1_500));
        let xs = sample(b, || {
            let (d, bash) = timed(build_bash);
            drop(bash);
            d
        });
        self.push_sample("session_new.new", xs);

        // The same build when the interpreters before it are dropped on
        // another thread, in batches of 8: what the NIF's teardown
        // (`run/teardown.rs`) does to a session built on the caller's scheduler.
        // The allocator then reuses memory another core freed and wrote.
        let (batches, dropped) = std::sync::mpsc::channel::<Vec<Bash>>();
        let dropper = std::thread::spawn(move || dropped.into_iter().for_each(drop));
        let mut batch = Vec::with_capacity(DROP_BATCH);
        let xs = sample(b, || {
            let (d, bash) = timed(build_bash);
            batch.push(bash);
            if batch.len() == DROP_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(DROP_BATCH));
                batches.send(full).expect("the dropper thread runs");
            }
            d
        });
        drop((batch, batches));
        dropper.join().expect("the dropper thread ends");
        self.push_sample("session_new.new_dropped_elsewhere", xs);

        // One build a millisecond, the pause not timed: a call after a
        // pause starts with the caches the pause left cold.
        let b = self.budget(Budget::new(20, 200, 1_000, 1_500));
        let xs = sample(b, || {
            std::thread::sleep(Duration::from_millis(1));
            let (d, bash) = timed(build_bash);
            drop(bash);
            d
        });
        self.push_sample("session_new.paced", xs);
    }

    fn script_case(&mut self, name: &str, script: &str, limits: ExecutionLimits, budget: Budget) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = finish(builder(limits).build());
        let out = exec_ok(rt, &mut bash, script);
        let stdout = String::from_utf8_lossy(out.stdout.as_bytes()).into_owned();
        let b = self.budget(budget);
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(script))).0);
        self.info(&format!("{name}.stdout"), stdout);
        self.push_sample(&format!("{name}.exec"), xs);
    }

    fn vfs(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let bash = build_bash();
        let fs = bash.fs();
        let data = vec![b'x'; MB];
        let path = std::path::Path::new("/data/blob.bin");
        rt.block_on(fs.mkdir(std::path::Path::new("/data"), true))
            .unwrap();
        let b = self.budget(Budget::new(20, 100, 10_000, 1_500));
        // As fs_api does it: one block_on per call, write then read back.
        let xs = sample(b, || {
            timed(|| {
                rt.block_on(fs.write_file(path, &data)).unwrap();
                let back = rt.block_on(fs.read_file(path)).unwrap();
                assert_eq!(back.len(), MB);
            })
            .0
        });
        self.push_sample("vfs_1mb.write_read", xs);
    }

    fn builtin(&mut self) {
        self.builtin_case("builtin.exec", Box::new(Answer));
        self.builtin_case(
            "builtin.exec_from_thread",
            Box::new(AnswerFromThread::start()),
        );
    }

    /// The script `answer` against an interpreter where `answer` is `builtin`.
    fn builtin_case(&mut self, name: &str, builtin: Box<dyn Builtin>) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = finish(
            builder(ExecutionLimits::new())
                .builtin("answer", builtin)
                .build(),
        );
        assert_eq!(exec_ok(rt, &mut bash, BUILTIN).stdout.as_bytes(), b"x\n");
        let b = self.budget(Budget::new(2_000, 2_000, 200_000, 1_500));
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(BUILTIN))).0);
        self.push_sample(name, xs);
    }

    fn vfs_backend(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = build_bash();
        let api = InMemoryFs::new();
        api.add_file("/blob", vec![b'x'; MB], 0o644);
        bash.mount("/api", Arc::new(api)).unwrap();
        let out = exec_ok(rt, &mut bash, VFS_BACKEND);
        self.info(
            "vfs_backend_1mb.stdout",
            String::from_utf8_lossy(out.stdout.as_bytes()).into_owned(),
        );
        let b = self.budget(Budget::new(20, 100, 10_000, 1_500));
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(VFS_BACKEND))).0);
        self.push_sample("vfs_backend_1mb.exec", xs);
    }

    fn snapshot(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = build_bash();
        // 1 MiB of files: 16 files of 64 KiB (the Elixir side seeds the same).
        let fs = bash.fs();
        rt.block_on(async {
            fs.mkdir(std::path::Path::new("/state"), true)
                .await
                .unwrap();
            for i in 0..16 {
                let path = format!("/state/f{i}.bin");
                fs.write_file(std::path::Path::new(&path), &noise(MB / 16, i as u64 + 1))
                    .await
                    .unwrap();
            }
        });
        exec_ok(rt, &mut bash, "x=42; greet() { echo hi; }");
        let bytes = bash.snapshot().unwrap();
        self.info("snapshot_1mb.bytes", bytes.len().to_string());
        let b = self.budget(Budget::new(5, 30, 2_000, 1_500));
        let xs = sample(b, || timed(|| bash.snapshot().unwrap()).0);
        self.push_sample("snapshot_1mb.snapshot", xs);
        let mut fresh = build_bash();
        let b = self.budget(Budget::new(5, 30, 2_000, 1_500));
        let xs = sample(b, || timed(|| fresh.restore_snapshot(&bytes).unwrap()).0);
        let check = exec_ok(rt, &mut fresh, "echo $x; wc -c < /state/f3.bin");
        self.info(
            "snapshot_1mb.restored",
            String::from_utf8_lossy(check.stdout.as_bytes()).into_owned(),
        );
        self.push_sample("snapshot_1mb.restore", xs);
    }

    /// CPU time per exec of one interpreter exec'ing back to back on this
    /// thread: `echo hi` and the 50-iteration loop (bench/lib/cases.exs
    /// `cpu`).
    fn cpu(&mut self) {
        let rt = Arc::clone(&self.rt);
        let ops = if self.quick { 2_000 } else { 20_000 };
        for (name, script) in [("echo", ECHO), ("loop50", LOOP50)] {
            let mut bash = build_bash();
            exec_ok(&rt, &mut bash, script);
            let cpu0 = process_cpu_ns();
            let start = Instant::now();
            let latencies: Vec<u64> = (0..ops)
                .map(|_| timed(|| rt.block_on(bash.exec(script))).0.as_nanos() as u64)
                .collect();
            let (elapsed, cpu) = (start.elapsed(), process_cpu_ns() - cpu0);
            let name = format!("cpu.{name}");
            self.records
                .push(Record::throughput(name, 1, latencies, elapsed, cpu));
        }
    }

    /// `n` sessions exec'ing "echo hi" back to back, `TOTAL_OPS` execs in
    /// all split evenly between them (the Elixir side does the same).
    fn concurrency(&mut self) {
        let levels: &[usize] = &[1, 2, 8, 64, 512];
        let total = if self.quick { 5_000 } else { CONCURRENCY_OPS };
        for &n in levels {
            let per = total.div_ceil(n);
            // Sessions are built before the clock starts.
            let sessions: Vec<Bash> = (0..n).map(|_| build_bash()).collect();
            let cpu0 = process_cpu_ns();
            let start = Instant::now();
            let handles: Vec<_> = sessions
                .into_iter()
                .map(|mut bash| {
                    self.rt.spawn(async move {
                        let mut lat = Vec::with_capacity(per);
                        for _ in 0..per {
                            let t0 = Instant::now();
                            let _ = bash.exec(ECHO).await;
                            lat.push(t0.elapsed().as_nanos() as u64);
                        }
                        lat
                    })
                })
                .collect();
            let mut latencies = Vec::new();
            for h in handles {
                latencies.extend(self.rt.block_on(h).unwrap());
            }
            let elapsed = start.elapsed();
            let cpu = process_cpu_ns() - cpu0;
            let name = format!("concurrency.{n}");
            self.records
                .push(Record::throughput(name, n, latencies, elapsed, cpu));
        }
        self.concurrency_threads(64, total);
    }

    /// The 64-session goal's baseline as issue 12 words it: raw bashkit on
    /// `n` OS threads, each with its own interpreter, polled as the NIF
    /// polls a quick script. The tokio tasks above run one after another
    /// (an `echo hi` never yields), so each interpreter keeps the caches
    /// to itself for all its execs. Threads are preempted by the kernel
    /// and interleave, as the VM's processes do.
    fn concurrency_threads(&mut self, n: usize, total: usize) {
        let per = total.div_ceil(n);
        let sessions: Vec<Bash> = (0..n).map(|_| build_bash()).collect();
        let start_line = std::sync::Barrier::new(n + 1);
        let rt = &self.rt;
        let (latencies, elapsed, cpu) = std::thread::scope(|scope| {
            let threads: Vec<_> = sessions
                .into_iter()
                .map(|mut bash| {
                    let start_line = &start_line;
                    scope.spawn(move || {
                        let mut lat = Vec::with_capacity(per);
                        start_line.wait();
                        for _ in 0..per {
                            let t0 = Instant::now();
                            let _ = poll_inline(rt, bash.exec(ECHO));
                            lat.push(t0.elapsed().as_nanos() as u64);
                        }
                        lat
                    })
                })
                .collect();
            let cpu0 = process_cpu_ns();
            let start = Instant::now();
            start_line.wait();
            let latencies: Vec<u64> = threads
                .into_iter()
                .flat_map(|t| t.join().expect("thread"))
                .collect();
            (latencies, start.elapsed(), process_cpu_ns() - cpu0)
        });
        let name = format!("concurrency_threads.{n}");
        self.records
            .push(Record::throughput(name, n, latencies, elapsed, cpu));
    }

    /// RSS growth while `count` more sessions are created and kept, after
    /// `MEMORY_BASE` sessions already exist (so that allocator start-up is
    /// not counted): the marginal cost of one idle session.
    fn memory(&mut self) {
        let count = if self.quick { 1_000 } else { MEMORY_SESSIONS };
        let base: Vec<Bash> = (0..MEMORY_BASE).map(|_| build_bash()).collect();
        let before = rss_kb();
        let sessions: Vec<Bash> = (0..count).map(|_| build_bash()).collect();
        let after = rss_kb();
        std::hint::black_box((&base, &sessions));
        self.records.push(Record::Memory {
            name: "idle_session".to_string(),
            count,
            bytes_per_session: (after.saturating_sub(before) * 1024) / count as u64,
            rss_before_kb: before,
            rss_after_kb: after,
        });
    }

    /// Investigation: what does handing a script to a runtime worker cost,
    /// and does letting idle workers spin briefly before parking help?
    fn handoff(&mut self) {
        for spin_us in [0u64, 20, 50, 200] {
            let rt = spin_runtime(spin_us);
            for spin_recv in [false, true] {
                let shared = Arc::new(tokio::sync::Mutex::new(build_bash()));
                let b = self.budget(Budget::new(2_000, 2_000, 100_000, 1_000));
                let xs = sample(b, || {
                    let (tx, rx) = std::sync::mpsc::sync_channel(1);
                    let session = Arc::clone(&shared);
                    timed(|| {
                        SUBMITTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        rt.spawn(async move {
                            let mut bash = session.lock().await;
                            let r = bash.exec(ECHO).await;
                            let _ = tx.send(r.is_ok());
                        });
                        if spin_recv {
                            // Like a BEAM scheduler: busy-wait a while first.
                            loop {
                                match rx.try_recv() {
                                    Ok(v) => break v,
                                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                                        std::hint::spin_loop()
                                    }
                                    Err(e) => panic!("{e}"),
                                }
                            }
                        } else {
                            rx.recv().unwrap()
                        }
                    })
                    .0
                });
                let recv = if spin_recv { "spinrecv" } else { "blockrecv" };
                self.push_sample(&format!("handoff.spin{spin_us}.{recv}"), xs);
            }
        }
    }

    /// Investigation: the building blocks of the runner (see bench/DECISIONS.md).
    fn sched(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let b = self.budget(Budget::new(2_000, 2_000, 200_000, 1_000));
        let mut bash = build_bash();
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(ECHO))).0);
        self.push_sample("sched.echo.block_on", xs);
        let xs = sample(b, || timed(|| poll_inline(rt, bash.exec(ECHO))).0);
        self.push_sample("sched.echo.inline_exec", xs);
        let xs = sample(b, || {
            timed(|| poll_inline(rt, bash.execute(ECHO).capture(usize::MAX).into_future())).0
        });
        self.push_sample("sched.echo.inline_execute", xs);
        // As the NIF does it: no `capture` (it allocates both output caps
        // on every exec), output collected by sinks.
        let xs = sample(b, || timed(|| execute_with_sink(rt, &mut bash, ECHO)).0);
        self.push_sample("sched.echo.inline_execute_sinks", xs);
        // The same with a 5 ms ticker on the runtime: live execution's
        // cancel watcher arms a 10 ms sleep on its second poll, and a timer
        // earlier than the one the driver sleeps for wakes the driver (an
        // eventfd write and a thread wake-up on every exec). With a ticker
        // the driver never sleeps past 5 ms, so that sleep wakes nobody.
        let ticker = rt.spawn(async {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        });
        let xs = sample(b, || timed(|| execute_with_sink(rt, &mut bash, ECHO)).0);
        ticker.abort();
        self.push_sample("sched.echo.inline_execute_sinks_ticker", xs);
        let (out, _) = poll_inline(rt, bash.execute(ECHO).capture(usize::MAX).into_future());
        self.info(
            "sched.echo.execute_stdout",
            String::from_utf8_lossy(out.unwrap().stdout.as_bytes()).into_owned(),
        );
        // Per-command cost: a 50-iteration loop, exec vs live execution.
        let b = self.budget(Budget::new(200, 500, 50_000, 1_000));
        let xs = sample(b, || timed(|| rt.block_on(bash.exec(LOOP50))).0);
        self.push_sample("sched.loop50.block_on", xs);
        let xs = sample(b, || {
            timed(|| poll_inline(rt, bash.execute(LOOP50).capture(usize::MAX).into_future())).0
        });
        self.push_sample("sched.loop50.inline_execute", xs);
        // The 10 000-iteration loop: how often does live execution yield?
        let mut heavy = finish(builder(loop_limits()).build());
        let b = self.budget(Budget::new(2, 10, 200, 1_000));
        let mut pendings = 0;
        let xs = sample(b, || {
            timed(|| {
                let (r, p) = poll_inline(rt, heavy.execute(LOOP).capture(usize::MAX).into_future());
                assert!(r.is_ok());
                pendings = p;
            })
            .0
        });
        self.push_sample("sched.loop10k.inline_execute", xs);
        self.info("sched.loop10k.pendings", pendings.to_string());
        let xs = sample(b, || timed(|| rt.block_on(heavy.exec(LOOP))).0);
        self.push_sample("sched.loop10k.block_on", xs);
        // Deep recursion on the inline big stack (bounded by bashkit's own
        // depth limit; it must end with an error, not a crash).
        let (r, _) = poll_inline(
            rt,
            bash.execute("f() { f; }; f")
                .capture(usize::MAX)
                .into_future(),
        );
        self.info("sched.recursion", format!("{:?}", r.map(|r| r.exit_code)));
    }

    /// Investigation: does the machine's speed change while a run goes on?
    /// `echo hi` and a calibrator that does no interpreter work (a 72 KB
    /// memmove, bashkit's history trim, four times, and 50 small strings)
    /// alternate call by call for 12 s (1 s with `--quick`, as
    /// `scripts/bench` runs it before and after a run); every 400 pairs
    /// the medians of both are noted. When the calibrator slows down with
    /// the exec, the machine did (other tenants of the host), not the
    /// interpreter. `PHASES_DISTURB_KIB=N` writes N KiB before each exec,
    /// untimed (as `echo_hi.exec_disturbed` does with 256).
    fn phases(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = build_bash();
        let mut buffer = vec![0u8; 80_000];
        let disturbance_kib: usize = std::env::var("PHASES_DISTURB_KIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut other_work = vec![0u64; disturbance_kib * 1024 / 8];
        let (mut execs, mut calibrations) = (String::new(), String::new());
        let start = Instant::now();
        let span = if self.quick { 1 } else { 12 };
        while start.elapsed() < Duration::from_secs(span) {
            let (mut e, mut c) = (Vec::with_capacity(400), Vec::with_capacity(400));
            for _ in 0..400 {
                disturb(&mut other_work);
                e.push(timed(|| rt.block_on(bash.exec(ECHO))).0);
                c.push(
                    timed(|| {
                        history_trims(&mut buffer);
                        let words: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
                        std::hint::black_box((&buffer, words));
                    })
                    .0,
                );
            }
            e.sort_unstable();
            c.sort_unstable();
            let _ = write!(execs, "{} ", e[200].as_nanos() / 1000);
            let _ = write!(calibrations, "{} ", c[200].as_nanos() / 1000);
        }
        self.info("phases.echo_us", execs.trim_end());
        self.info("phases.calibrator_us", calibrations.trim_end());
    }

    /// Investigation: what bashkit's history trim costs an exec (the
    /// upstream reproducer of bench/DECISIONS.md's history trim). Once
    /// the history holds `max_history_entries` (default 1 000) entries,
    /// every exec drops the oldest by shifting the whole `Vec`: 72 KB.
    /// Interpreters capped at 1 000, 100 and 0 entries, each past 1 500
    /// execs, run `echo hi` in alternating blocks of 1 000, ten rounds.
    fn history(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let caps = [1_000usize, 100, 0];
        let mut sessions: Vec<Bash> = caps
            .iter()
            .map(|&cap| finish(builder(ExecutionLimits::new().max_history_entries(cap)).build()))
            .collect();
        for bash in &mut sessions {
            for _ in 0..1_500 {
                let _ = poll_inline(rt, bash.exec(ECHO));
            }
        }
        let (rounds, block) = if self.quick { (2, 100) } else { (10, 1_000) };
        let mut samples = vec![Vec::with_capacity(rounds * block); caps.len()];
        for _ in 0..rounds {
            for (bash, out) in sessions.iter_mut().zip(&mut samples) {
                for _ in 0..block {
                    let took = timed(|| poll_inline(rt, bash.exec(ECHO))).0;
                    out.push(took.as_nanos() as u64);
                }
            }
        }
        for (cap, xs) in caps.iter().zip(samples) {
            self.records
                .push(Record::Sample(format!("history.cap_{cap}"), xs));
        }
    }

    /// Investigation: `echo hi` after a pause, as an agent calls it (a model
    /// thinks between two calls). For each pause (0, 1, 2, 10 ms) the median
    /// exec of 400, and of a calibrator that does no interpreter work (a
    /// 72 KB `memmove` ×4, as `phases`), both timed right after the pause.
    /// On a VM whose host idles or lends the core away, both come back
    /// slower after a pause.
    fn gaps(&mut self) {
        let rt = Arc::clone(&self.rt);
        let rt = &*rt;
        let mut bash = build_bash();
        let mut buffer = vec![0u8; 80_000];
        let calls = if self.quick { 50 } else { 400 };
        for pause_ms in [0u64, 1, 2, 10] {
            let (mut execs, mut calibrations) = (Vec::new(), Vec::new());
            for i in 0..calls * 2 {
                std::thread::sleep(Duration::from_millis(pause_ms));
                // The two in turn, each right after a pause of its own:
                // both see the machine as a pause leaves it.
                if i % 2 == 0 {
                    execs.push(timed(|| rt.block_on(bash.exec(ECHO))).0);
                } else {
                    calibrations.push(
                        timed(|| {
                            history_trims(&mut buffer);
                            std::hint::black_box(&buffer);
                        })
                        .0,
                    );
                }
            }
            execs.sort_unstable();
            calibrations.sort_unstable();
            let median = |xs: &[Duration]| xs[xs.len() / 2].as_nanos() / 1000;
            self.info(
                &format!("gaps.{pause_ms}ms"),
                format!(
                    "echo {} us, calibrator {} us",
                    median(&execs),
                    median(&calibrations)
                ),
            );
        }
    }

    /// Investigation: where does construction time go?
    fn construct(&mut self) {
        let b = self.budget(Budget::new(500, 1_000, 50_000, 1_000));
        let cases: Vec<(&str, MakeBash)> = vec![
            ("construct.bash_new", Box::new(Bash::new)),
            (
                "construct.builder_no_alias",
                Box::new(|| builder(ExecutionLimits::new()).build()),
            ),
            ("construct.build_bash", Box::new(build_bash)),
            (
                "construct.no_rootfs",
                Box::new(|| finish(builder(ExecutionLimits::new()).rootfs(false).build())),
            ),
        ];
        for (name, f) in cases {
            let xs = sample(b, || {
                let (d, bash) = timed(&f);
                drop(bash);
                d
            });
            self.push_sample(name, xs);
        }
        let mut bash = build_bash();
        let xs = sample(b, || {
            timed(|| {
                let mut state = bash.shell_state();
                state
                    .variables
                    .insert("SHOPT_expand_aliases".to_string(), "1".to_string());
                bash.restore_shell_state(&state);
            })
            .0
        });
        self.push_sample("construct.alias_state_roundtrip", xs);
        let xs = sample(b, || {
            let bash = build_bash();
            timed(|| drop(bash)).0
        });
        self.push_sample("construct.drop", xs);

        // Memory of the variants: what the root filesystem layer costs.
        let count = if self.quick { 500 } else { 5_000 };
        let variants: Vec<(&str, MakeBash)> = vec![
            ("construct.memory.build_bash", Box::new(build_bash)),
            (
                "construct.memory.no_rootfs",
                Box::new(|| finish(builder(ExecutionLimits::new()).rootfs(false).build())),
            ),
        ];
        // Everything stays alive until the end, so that no variant reuses
        // memory another one freed.
        let mut held: Vec<Vec<Bash>> = Vec::new();
        for (name, f) in variants {
            let base: Vec<Bash> = (0..200).map(|_| f()).collect();
            let before = rss_kb();
            let kept: Vec<Bash> = (0..count).map(|_| f()).collect();
            let after = rss_kb();
            held.push(base);
            held.push(kept);
            self.records.push(Record::Memory {
                name: name.to_string(),
                count,
                bytes_per_session: (after.saturating_sub(before) * 1024) / count as u64,
                rss_before_kb: before,
                rss_after_kb: after,
            });
        }
        std::hint::black_box(&held);
    }
}

/// `--ping PORT MILLIS`: send a UDP datagram to 127.0.0.1:PORT every
/// millisecond for MILLIS ms, wait for the echo, and print the round trips.
/// The Elixir side answers from a plain process (`bench/lib/cases.exs`), so
/// this measures how fast the BEAM serves an outside request.
fn udp_ping(port: u16, millis: u64) {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.connect(("127.0.0.1", port)).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let deadline = Instant::now() + Duration::from_millis(millis);
    let mut rtts = Vec::new();
    let mut lost = 0u64;
    let mut buf = [0u8; 64];
    let mut seq = 0u64;
    while Instant::now() < deadline {
        seq += 1;
        let t0 = Instant::now();
        socket.send(&seq.to_be_bytes()).expect("send");
        // Skip stale echoes of pings that timed out earlier.
        loop {
            match socket.recv(&mut buf) {
                Ok(8) if buf[..8] == seq.to_be_bytes() => {
                    rtts.push(t0.elapsed().as_nanos() as u64);
                    break;
                }
                Ok(_) => continue,
                Err(_) => {
                    lost += 1;
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("{}", emit(&Record::Sample("ping.udp".into(), rtts), false));
    println!(
        "{}",
        emit(
            &Record::Info("ping.udp.lost".into(), lost.to_string()),
            false
        )
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 3 && args[1] == "--realistic" {
        let mut bench = Bench {
            rt: Arc::new(runtime()),
            quick: args.get(3).is_some_and(|a| a == "--quick"),
            records: Vec::new(),
        };
        bench.realistic(&args[2]);
        for r in &bench.records {
            println!("{}", emit(r, false));
        }
        return;
    }
    if args.len() == 4 && args[1] == "--ping" {
        udp_ping(
            args[2].parse().expect("port"),
            args[3].parse().expect("millis"),
        );
        return;
    }
    let mut json = false;
    let mut quick = false;
    let mut groups: Vec<String> = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => json = true,
            "--quick" => quick = true,
            "-h" | "--help" => {
                println!(
                    "usage: ex_bashkit_raw_bench [--json] [--quick] [GROUP...]\ngroups: {} {INVESTIGATIONS}",
                    GROUPS.join(" ")
                );
                return;
            }
            g => groups.push(g.to_string()),
        }
    }
    if groups.is_empty() {
        groups = GROUPS.iter().map(|s| s.to_string()).collect();
    }
    let mut bench = Bench {
        rt: Arc::new(runtime()),
        quick,
        records: Vec::new(),
    };
    for g in &groups {
        match g.as_str() {
            "echo" => bench.echo(),
            "new" => bench.session_new(),
            "loop" => bench.script_case(
                "loop_10k",
                LOOP,
                loop_limits(),
                Budget::new(3, 20, 500, 1_500),
            ),
            "pipeline" => bench.script_case(
                "pipeline",
                PIPELINE,
                ExecutionLimits::new(),
                Budget::new(10, 30, 5_000, 1_500),
            ),
            "vfs" => bench.vfs(),
            "builtin" => bench.builtin(),
            "vfs_backend" => bench.vfs_backend(),
            "snapshot" => bench.snapshot(),
            "cpu" => bench.cpu(),
            "concurrency" => bench.concurrency(),
            "memory" => bench.memory(),
            "construct" => bench.construct(),
            "handoff" => bench.handoff(),
            "sched" => bench.sched(),
            "phases" => bench.phases(),
            "gaps" => bench.gaps(),
            "history" => bench.history(),
            other => {
                eprintln!(
                    "unknown group {other}; groups: {} {INVESTIGATIONS}",
                    GROUPS.join(" ")
                );
                std::process::exit(2);
            }
        }
    }
    let mut out = String::new();
    if json {
        out.push_str("{\n");
        let body: Vec<String> = bench.records.iter().map(|r| emit(r, true)).collect();
        out.push_str(&body.join(",\n"));
        out.push_str("\n}\n");
    } else {
        for r in &bench.records {
            out.push_str(&emit(r, false));
            out.push('\n');
        }
    }
    print!("{out}");
}

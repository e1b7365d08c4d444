//! The interpreter, runtime and inline poll the NIF uses, shared by the
//! raw harness (`main.rs`) and the bare NIF (`lib.rs`), so that both measure
//! bashkit as `native/ex_bashkit` runs it. Keep it in step with
//! `config.rs::build_bash`, `run/runtime.rs::runtime` and `run/runner.rs`.

use std::sync::Arc;

use bashkit::{Bash, ExecutionLimits, SessionLimits};
use tokio::runtime::{Builder, Runtime};

/// `config.rs::build_bash` with a default `SessionConfig`: cwd "/",
/// username, hostname, limits, cumulative limits unlimited, alias expansion.
pub fn builder(limits: ExecutionLimits) -> bashkit::BashBuilder {
    Bash::builder()
        .cwd("/")
        .username("sandbox")
        .hostname("bashkit-sandbox")
        .limits(limits)
        .session_limits(
            SessionLimits::new()
                .max_total_commands(u64::MAX)
                .max_exec_calls(u64::MAX),
        )
}

pub fn finish(mut bash: Bash) -> Bash {
    // config.rs::enable_alias_expansion.
    let mut state = bash.shell_state();
    state
        .variables
        .insert("SHOPT_expand_aliases".to_string(), "1".to_string());
    bash.restore_shell_state(&state);
    bash
}

pub fn build_bash() -> Bash {
    finish(builder(ExecutionLimits::new()).build())
}

/// `run/runtime.rs::runtime`'s settings, for variants that add to them.
pub fn runtime_builder() -> Builder {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut builder = Builder::new_multi_thread();
    builder
        .worker_threads(cores.max(2))
        .thread_stack_size(64 * 1024 * 1024)
        .thread_name("ex_bashkit")
        .enable_all();
    builder
}

/// `run/runtime.rs::runtime`.
pub fn runtime() -> Runtime {
    runtime_builder().build().expect("runtime")
}

/// A waker that records that it was woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

thread_local! {
    /// One big stack per thread, reused by every inline run.
    static BIG_STACK: std::cell::RefCell<Option<corosensei::stack::DefaultStack>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` on this thread's big stack, inside `rt`'s context.
fn on_big_stack<R>(rt: &Runtime, f: impl FnOnce() -> R) -> R {
    let _ctx = rt.enter();
    BIG_STACK.with(|cell| {
        let mut slot = cell.borrow_mut();
        let stack = slot.get_or_insert_with(|| {
            corosensei::stack::DefaultStack::new(64 * 1024 * 1024).expect("stack")
        });
        corosensei::on_stack(stack, f)
    })
}

/// Poll `fut` on this thread's big stack until it completes, counting the
/// times it returned Pending (bashkit's live execution yields every 64
/// commands).
pub fn poll_inline<F: std::future::Future>(rt: &Runtime, fut: F) -> (F::Output, u64) {
    on_big_stack(rt, || {
        let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(Arc::clone(&flag));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        let mut pendings = 0;
        loop {
            if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return (v, pendings);
            }
            pendings += 1;
            if !flag.0.swap(false, std::sync::atomic::Ordering::Relaxed) {
                // Nothing woke it: a real wait. Block like a runner would.
                std::thread::yield_now();
            }
        }
    })
}

/// Poll `fut` on this thread's big stack until it completes or really
/// waits (Pending with nothing woken during the poll), as the NIF polls a
/// quick script that may make a back-call: the future is then kept, and
/// polled again when the answer arrives.
#[allow(dead_code)] // the bare NIF's (lib.rs); the raw harness never waits
pub fn poll_until_wait<F: std::future::Future + Unpin>(
    rt: &Runtime,
    fut: &mut F,
) -> std::task::Poll<F::Output> {
    on_big_stack(rt, || {
        let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let waker = std::task::Waker::from(Arc::clone(&flag));
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            match std::pin::Pin::new(&mut *fut).poll(&mut cx) {
                std::task::Poll::Ready(v) => return std::task::Poll::Ready(v),
                std::task::Poll::Pending => {
                    if !flag.0.swap(false, std::sync::atomic::Ordering::Relaxed) {
                        return std::task::Poll::Pending;
                    }
                }
            }
        }
    })
}

//! `cargo test` only, run by `scripts/bench-instructions` under valgrind:
//! what our exec path adds to bashkit's own, counted in instructions and
//! simulated cache misses rather than timed.
//!
//! Why count: this VM's host has long slow stretches in which the same
//! call takes up to twice as long (bench/DECISIONS.md on measuring), so
//! a few µs between two builds are hard to time. A count hardly depends on
//! the host: instructions repeat within 0.2 % from run to run (simulated
//! misses vary more, the runtime's other threads being counted too).
//!
//! `instructions_per_exec` (ignored, so the test suite never runs it) runs
//! `echo hi` `PROBE_CALLS` times, after enough calls to fill the history
//! (1,000 entries), in one of two ways (`PROBE_MODE`):
//! - `ours`: [`session::exec`] on a session, inline, as `Session.exec/2`
//!   runs a quick script (its reply unused, as the exec NIF's own answer;
//!   the reply target and the script string made for each call stand in
//!   for the NIF's argument decoding);
//! - `bashkit`: the same configuration's interpreter, bashkit's plain
//!   `exec` polled on a big stack, as the bare NIF of bench/raw does.
//!
//! Both use `SessionConfig::default()`, the configuration with no options.
//!
//! `PROBE_HISTORY`, when set, is the sessions' `max_history_entries`.
//! The script runs each mode twice with different call counts and divides
//! the difference, so setup and teardown cancel out.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bashkit::Bash;
use corosensei::stack::DefaultStack;

use crate::config::cache::DecodedConfig;
use crate::config::SessionConfig;
use crate::run::reply::{Caller, FrameWriter, ReplyTo};
use crate::run::warm::Prebuilt;
use crate::session::{self, ExecCallOptions, Session};
use crate::term::value::Value;

/// Calls before the counted ones: past the history's 1,000 entries, where
/// every exec also drops one.
const WARM_UP: usize = 1_500;

fn env_usize(name: &str) -> Option<usize> {
    let value = std::env::var(name).ok().filter(|v| !v.is_empty())?;
    Some(value.parse().expect(name))
}

#[inline(never)]
fn ours(session: &Arc<Session>, calls: usize) {
    for id in 0..calls {
        let reply = ReplyTo::new(Caller::Port {
            id: 1,
            frames: FrameWriter::new(Box::new(std::io::sink())),
        });
        let call = ExecCallOptions::default();
        let script = "echo hi".to_string();
        let outcome = session::exec(
            Arc::clone(session),
            id as u64,
            script,
            call,
            reply,
            || {},
            || {},
        );
        std::hint::black_box(outcome.expect("completes inline"));
    }
}

#[inline(never)]
fn bashkit(bash: &mut Bash, stack: &mut DefaultStack, calls: usize) {
    for _ in 0..calls {
        let result = corosensei::on_stack(&mut *stack, || {
            let mut cx = Context::from_waker(Waker::noop());
            let mut exec = std::pin::pin!(bash.exec("echo hi"));
            loop {
                if let Poll::Ready(result) = exec.as_mut().poll(&mut cx) {
                    break result;
                }
            }
        });
        std::hint::black_box(result.expect("echo hi"));
    }
}

#[test]
#[ignore = "run by scripts/bench-instructions under valgrind"]
fn instructions_per_exec() {
    let calls = env_usize("PROBE_CALLS").unwrap_or(1_000);
    let mut config = SessionConfig::default();
    config.limits.max_history_entries = env_usize("PROBE_HISTORY").map(|n| n as u64);
    let config = Arc::new(config);
    let _runtime = crate::run::runtime::runtime().enter();
    match std::env::var("PROBE_MODE").as_deref() {
        Ok("ours") => {
            let decoded = Arc::new(DecodedConfig {
                key: Value::bin(b"instruction probe"),
                config,
            });
            let session = Session::new(&decoded).unwrap();
            ours(&session, WARM_UP + calls);
        }
        Ok("bashkit") => {
            let mut bash = Prebuilt::build(&config).unwrap().bash;
            let mut stack = DefaultStack::new(64 << 20).unwrap();
            bashkit(&mut bash, &mut stack, WARM_UP + calls);
        }
        other => panic!("PROBE_MODE must be ours or bashkit, got {other:?}"),
    }
}

//! Interrupting a command that is waiting, for `cancel/1` and per-call
//! timeouts.
//!
//! bashkit checks its cancellation token between commands and inside its
//! budget checks, which stops busy scripts. A command that *waits* (bashkit's
//! `sleep`, a back-call into Elixir) would still run to its end, so a 100 ms
//! timeout around `sleep 10` would take 10 s. bashkit can abort a waiting
//! command only from its terminal front end, and dropping the exec future
//! from outside would skip its state reconciliation. So the waits we own
//! listen to an [`Interrupt`] instead: back-calls race it, and the session
//! registers a `sleep` with GNU semantics and bashkit's 60 s cap that does
//! too. Once woken, the command returns and the token stops the script.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bashkit::{Builtin, BuiltinContext, ExecResult};
use tokio::sync::Notify;

/// bashkit's own cap on one `sleep`.
const MAX_SLEEP_SECONDS: f64 = 60.0;

/// The "stop waiting" signal of one session, and the deadline of the exec
/// it belongs to (for commands whose own budget must not outlast it:
/// `commands/program.rs`).
#[derive(Debug, Default)]
pub struct Interrupt {
    raised: AtomicBool,
    notify: Notify,
    deadline: parking_lot::Mutex<Option<Instant>>,
}

impl Interrupt {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Wake every wait now and make later waits return at once.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Re-arm for the next exec.
    pub fn clear(&self) {
        self.raised.store(false, Ordering::SeqCst);
    }

    /// The running exec's per-call deadline (`None`: only the session's).
    pub fn set_deadline(&self, deadline: Option<Instant>) {
        *self.deadline.lock() = deadline;
    }

    /// What is left of the running exec's per-call deadline (at least a
    /// millisecond, so that a budget made from it still counts), if it has
    /// one.
    pub fn remaining(&self) -> Option<Duration> {
        let deadline = (*self.deadline.lock())?;
        Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        )
    }

    /// What a command run under a budget cut to the per-call deadline
    /// answers: past that deadline the command stopped for it, so the exec
    /// ends as timed out, as it would at any other command's boundary
    /// (`Err(Cancelled)` once the watchdog has marked the call timed out
    /// and raised this interrupt; it does so at the deadline). Before it,
    /// the command's own answer.
    pub async fn or_timed_out(
        &self,
        answer: bashkit::Result<bashkit::ExecResult>,
    ) -> bashkit::Result<bashkit::ExecResult> {
        let past = (*self.deadline.lock()).is_some_and(|d| Instant::now() >= d);
        if !past {
            return answer;
        }
        // The watchdog raises at the deadline; a bound keeps a missed raise
        // from holding the exec.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.wait()).await;
        Err(bashkit::Error::Cancelled)
    }

    /// Resolves once the interrupt is raised.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking the flag, so a raise in between is
            // not lost.
            notified.as_mut().enable();
            if self.raised.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// `sleep`, interruptible.
pub struct InterruptibleSleep {
    interrupt: Arc<Interrupt>,
}

impl InterruptibleSleep {
    pub fn new(interrupt: Arc<Interrupt>) -> Self {
        Self { interrupt }
    }
}

fn err(message: String) -> ExecResult {
    ExecResult::err(format!("sleep: {message}\n"), 1)
}

/// One `sleep` operand in seconds, read as bashkit's own `sleep` reads it
/// (C `strtod`: leading blanks, decimal or hex-float digits, `inf`), with
/// an optional `s`, `m`, `h` or `d` suffix. `None` if invalid or negative.
pub fn parse_interval(arg: &str) -> Option<f64> {
    let (value, used) = strtod(arg.as_bytes())?;
    let multiplier = match &arg[used..] {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    (!value.is_nan() && value >= 0.0).then_some(value * multiplier)
}

/// C `strtod` on a prefix of `s`: the value and the bytes it took.
fn strtod(s: &[u8]) -> Option<(f64, usize)> {
    let blanks = s
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
        .count();
    let mut i = blanks;
    let sign = match s.get(i) {
        Some(b'-') => {
            i += 1;
            -1.0
        }
        Some(b'+') => {
            i += 1;
            1.0
        }
        _ => 1.0,
    };
    let rest = &s[i..];
    let starts =
        |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    if starts(b"infinity") {
        return Some((sign * f64::INFINITY, i + 8));
    }
    if starts(b"inf") {
        return Some((sign * f64::INFINITY, i + 3));
    }
    if starts(b"nan") {
        return Some((f64::NAN, i + 3));
    }
    let (radix, start) = match rest {
        [b'0', b'x' | b'X', next, ..] if next.is_ascii_hexdigit() || *next == b'.' => (16, 2),
        _ => (10, 0),
    };
    let digit = |j: usize| rest.get(j).and_then(|b| (*b as char).to_digit(radix));
    let (mut j, mut value, mut digits) = (start, 0.0f64, 0);
    while let Some(d) = digit(j) {
        value = value * f64::from(radix) + f64::from(d);
        (j, digits) = (j + 1, digits + 1);
    }
    if rest.get(j) == Some(&b'.') {
        let mut scale = 1.0 / f64::from(radix);
        j += 1;
        while let Some(d) = digit(j) {
            value += f64::from(d) * scale;
            (scale, j, digits) = (scale / f64::from(radix), j + 1, digits + 1);
        }
    }
    if digits == 0 {
        return None;
    }
    let (marker, base) = if radix == 16 {
        (b'p', 2.0f64)
    } else {
        (b'e', 10.0)
    };
    if rest.get(j).map(u8::to_ascii_lowercase) == Some(marker) {
        let mut k = j + 1;
        let negative = rest.get(k) == Some(&b'-');
        if matches!(rest.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        let exponent_digits = rest[k..].iter().take_while(|b| b.is_ascii_digit()).count();
        if exponent_digits > 0 {
            let exponent: i32 = std::str::from_utf8(&rest[k..k + exponent_digits])
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(i32::MAX);
            value *= base.powi(if negative { -exponent } else { exponent });
            j = k + exponent_digits;
        }
    }
    Some((sign * value, i + j))
}

#[bashkit::async_trait]
impl Builtin for InterruptibleSleep {
    async fn execute(&self, ctx: BuiltinContext<'_>) -> bashkit::Result<ExecResult> {
        let mut seconds = 0.0;
        let mut operands = 0;
        let mut args = ctx.args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--help" => {
                    return Ok(ExecResult::ok(
                        "Usage: sleep NUMBER[SUFFIX]...\nPause for the sum of the intervals \
                         (s, m, h, d suffixes). At most 60 seconds.\n",
                    ))
                }
                "--version" => return Ok(ExecResult::ok("sleep (ex_bashkit) 0.1\n")),
                "--" => {
                    for operand in args.by_ref() {
                        operands += 1;
                        match parse_interval(operand) {
                            Some(s) => seconds += s,
                            None => return Ok(err(format!("invalid time interval '{operand}'"))),
                        }
                    }
                }
                option if option.len() > 1 && option.starts_with('-') => {
                    let flag = option.chars().nth(1).unwrap_or('-');
                    return Ok(err(format!("invalid option -- '{flag}'")));
                }
                operand => {
                    operands += 1;
                    match parse_interval(operand) {
                        Some(s) => seconds += s,
                        None => return Ok(err(format!("invalid time interval '{operand}'"))),
                    }
                }
            }
        }
        if operands == 0 {
            return Ok(err("missing operand".to_string()));
        }
        let seconds = seconds.min(MAX_SLEEP_SECONDS);
        if seconds > 0.0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {}
                _ = self.interrupt.wait() => {
                    return Ok(ExecResult::err("sleep: interrupted\n", 130));
                }
            }
        }
        Ok(ExecResult::ok(String::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn parses_gnu_intervals() {
        assert_eq!(parse_interval("1.5"), Some(1.5));
        assert_eq!(parse_interval("2m"), Some(120.0));
        assert_eq!(parse_interval("1h"), Some(3600.0));
        assert_eq!(parse_interval("0.5d"), Some(43200.0));
        assert_eq!(parse_interval("inf"), Some(f64::INFINITY));
        assert_eq!(parse_interval("-1"), None);
        assert_eq!(parse_interval("abc"), None);
        assert_eq!(parse_interval("1x"), None);
        // As bashkit's own sleep reads them (its sleep.rs tests).
        assert_eq!(parse_interval("0x0"), Some(0.0));
        assert_eq!(parse_interval("0x10"), Some(16.0));
        assert_eq!(parse_interval("0x.8p1"), Some(1.0));
        assert_eq!(parse_interval(" 3"), Some(3.0));
        assert_eq!(parse_interval(".5"), Some(0.5));
        assert_eq!(parse_interval("1e1"), Some(10.0));
        assert_eq!(parse_interval("1ss"), None);
        assert_eq!(parse_interval("3 "), None);
        assert_eq!(parse_interval("nan"), None);
        assert_eq!(parse_interval(""), None);
        assert_eq!(parse_interval("infinity"), Some(f64::INFINITY));
    }

    #[test]
    fn a_raise_wakes_current_and_later_waits() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let interrupt = Interrupt::new();
        let waker = Arc::clone(&interrupt);
        let start = Instant::now();
        rt.block_on(async {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waker.raise();
            });
            tokio::select! {
                _ = interrupt.wait() => {}
                _ = tokio::time::sleep(Duration::from_secs(10)) => panic!("not woken"),
            }
            interrupt.wait().await;
        });
        assert!(start.elapsed() < Duration::from_secs(5));
        interrupt.clear();
        assert!(!interrupt.raised.load(Ordering::SeqCst));
    }
}

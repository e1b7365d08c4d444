//! Panic containment for work that runs on our own threads: the futures
//! that run scripts (and the parser's thread). A panic there would kill the
//! thread and leave the caller waiting for an answer that never comes, so it
//! becomes an error value carrying the panic's message, answered like any
//! other failure. NIF bodies need nothing from here: rustler's own
//! `catch_unwind` around every NIF turns a panic into an exception.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Once;
use std::task::{Context, Poll};

thread_local! {
    /// Depth of guarded regions on this thread: inside one, a panic is
    /// reported to the caller, so the hook stays quiet.
    static GUARDED: RefCell<usize> = const { RefCell::new(0) };
}

static HOOK: Once = Once::new();

/// Install a panic hook that is silent for panics we catch and report, and
/// defers to the previous hook for everything else.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let guarded = GUARDED.with(|g| *g.borrow() > 0);
            if !guarded {
                previous(info);
            }
        }));
    });
}

struct GuardScope;

impl GuardScope {
    fn enter() -> Self {
        GUARDED.with(|g| *g.borrow_mut() += 1);
        GuardScope
    }
}

impl Drop for GuardScope {
    fn drop(&mut self) {
        GUARDED.with(|g| *g.borrow_mut() -= 1);
    }
}

/// The message a panic payload carries, for the error the caller sees.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Run `f`, turning a panic into `Err(message)`.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _scope = GuardScope::enter();
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
}

/// A future that turns a panic during any poll into `Err(message)`.
///
/// It holds `inner` in place rather than boxed: an exec's future is about
/// 3 KB, and boxing it cost an allocation and copies of all of it on
/// every exec.
pub struct CatchUnwind<F> {
    inner: F,
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `inner` is pinned whenever `self` is: it is never moved
        // out of `self`, `CatchUnwind` has no `Drop` of its own, and it is
        // `Unpin` only when `F` is.
        let inner = unsafe { self.map_unchecked_mut(|this| &mut this.inner) };
        match catch(move || inner.poll(cx)) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(message) => Poll::Ready(Err(message)),
        }
    }
}

/// Wrap `future` so that a panic inside it becomes `Err(message)`.
pub fn catch_future<F: Future>(future: F) -> CatchUnwind<F> {
    CatchUnwind { inner: future }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_returns_the_panic_message() {
        install_panic_hook();
        assert_eq!(catch(|| 1 + 1), Ok(2));
        let err = catch(|| -> i32 { panic!("boom {}", 7) }).unwrap_err();
        assert_eq!(err, "boom 7");
    }

    #[test]
    fn catch_future_returns_the_panic_message() {
        install_panic_hook();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ok = rt.block_on(catch_future(async { 5 }));
        assert_eq!(ok, Ok(5));
        let err = rt.block_on(catch_future(async {
            tokio::task::yield_now().await;
            panic!("late panic");
        }));
        assert_eq!(err, Err("late panic".to_string()));
    }
}

//! A call's place in its session's line for the interpreter.
//!
//! The calls on one session (`exec`, `state`, `reset`, snapshots) run one
//! at a time, in the order they were submitted: an `exec/3` a process calls
//! right after its `exec_async/3` sees that script's effects. The
//! interpreter sits behind a `tokio::sync::Mutex`, which is fair: it goes
//! to the `lock` futures in the order they were first polled. A call's job,
//! though, may first be polled by any runner thread (two jobs submitted
//! back to back, picked up by two runners at once, race), so that order is
//! not the submission order. A call therefore asks for the lock when it is
//! submitted: its `lock` future is polled once there, which queues it in
//! the mutex, and the job awaits that same future wherever it runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bashkit::Bash;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The interpreter, held: the call's turn.
pub type Turn = OwnedMutexGuard<Bash>;

/// A queued request for the interpreter; await it for the turn.
pub struct Place(State);

enum State {
    Queued(Pin<Box<dyn Future<Output = Turn> + Send>>),
    /// The interpreter was free when the place was taken.
    Served(Option<Turn>),
}

impl Place {
    /// Join `bash`'s line now.
    pub fn take(bash: &Arc<Mutex<Bash>>) -> Self {
        // A free interpreter is taken at once, with no future to allocate.
        // This cannot jump the line: the mutex hands itself to a queued
        // `lock` directly, so it is never free while one waits.
        if let Ok(turn) = Arc::clone(bash).try_lock_owned() {
            return Self(State::Served(Some(turn)));
        }
        let mut lock: Pin<Box<dyn Future<Output = Turn> + Send>> =
            Box::pin(Arc::clone(bash).lock_owned());
        // Nothing is woken through this waker: the job polls the place
        // again with its own, which the mutex keeps in its stead.
        match lock.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(turn) => Self(State::Served(Some(turn))),
            Poll::Pending => Self(State::Queued(lock)),
        }
    }
}

impl Future for Place {
    type Output = Turn;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Turn> {
        match &mut self.0 {
            State::Queued(lock) => lock.as_mut().poll(cx),
            State::Served(turn) => match turn.take() {
                Some(turn) => Poll::Ready(turn),
                None => panic!("a place in line was awaited after its turn came"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three places in one fresh interpreter's line, in the order taken.
    fn three_places() -> [Place; 3] {
        let bash = Arc::new(Mutex::new(Bash::new()));
        [(); 3].map(|()| Place::take(&bash))
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn places_are_served_in_the_order_they_were_taken() {
        let [first, second, third] = three_places();
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        runtime().block_on(async {
            // Polled in the opposite order: the places decide, not this.
            let jobs = [(3, third), (2, second), (1, first)].map(|(n, place)| {
                let order = Arc::clone(&order);
                tokio::spawn(async move {
                    let _turn = place.await;
                    order.lock().push(n);
                    tokio::task::yield_now().await;
                })
            });
            for job in jobs {
                job.await.unwrap();
            }
        });
        assert_eq!(*order.lock(), vec![1, 2, 3]);
    }

    #[test]
    fn a_place_let_go_of_unserved_does_not_hold_the_line() {
        let [first, dropped, third] = three_places();
        drop(dropped);
        drop(first);
        runtime().block_on(third);
    }
}

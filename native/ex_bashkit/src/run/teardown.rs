//! Dropping sessions and interpreters off the threads that must not wait.
//!
//! Tearing a session down frees everything it holds, and that takes time in
//! proportion: a few µs for an idle interpreter, about 3 ms for one holding
//! 20 000 files and 14 ms for 100 000 (bench/DECISIONS.md). The last
//! reference often goes where nothing may take that long: the VM runs a NIF
//! resource's destructor on the normal scheduler that garbage-collects (or
//! ends) the process holding it, and a worker drops a session (or an image,
//! on `drop_image`) on the thread that reads every frame. So those places
//! hand what they let go of to [`later`], and a runner drops it. An image's
//! handle (`image.rs`) and an interpreter used once (`ExBashkit.exec/1`) go
//! the same way.
//!
//! Waking a sleeping runner costs the waker about 7 µs on this 2-core VM
//! (`run/warm.rs`), more than an idle session's teardown. So nothing wakes a
//! runner per drop: a batch is dropped once it holds [`BATCH`] items, or
//! [`WITHIN`] after the first one arrived, whichever comes first (and by a
//! build run of `run/warm.rs`, which is on a runner anyway).
//!
//! A drop that panics is caught and the rest of its batch still dropped: it
//! must not end the task it runs in (a build run would leave its shelf
//! marked as building, and get no build run again).

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Items let go of before a runner is woken to drop them.
const BATCH: usize = 8;
/// The longest an item waits to be dropped.
const WITHIN: Duration = Duration::from_millis(100);

static PENDING: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());
/// Whether a task will drop [`PENDING`] within [`WITHIN`].
static DROP_DUE: AtomicBool = AtomicBool::new(false);

/// Drop `item` on a runner, within [`WITHIN`].
pub fn later(item: impl Send + 'static) {
    let batch = {
        let mut pending = PENDING.lock();
        pending.push(Box::new(item));
        (pending.len() >= BATCH).then(|| std::mem::take(&mut *pending))
    };
    if let Some(batch) = batch {
        crate::run::runtime::spawn(async move { drop_each(batch) });
    } else if !DROP_DUE.swap(true, Ordering::AcqRel) {
        crate::run::runtime::spawn(async {
            tokio::time::sleep(WITHIN).await;
            DROP_DUE.store(false, Ordering::Release);
            drop_pending();
        });
    }
}

/// Drop what waits now, here: for code that already runs on a runner.
pub fn drop_pending() {
    let batch = std::mem::take(&mut *PENDING.lock());
    drop_each(batch);
}

/// Drop every item of `batch`, each on its own: a panic in one drop is
/// caught (nobody waits for a teardown to report it to), and the others
/// are dropped still.
fn drop_each(batch: Vec<Box<dyn Send>>) {
    for item in batch {
        let _ = crate::run::guard::catch(move || drop(item));
    }
}

/// A value that is dropped by [`later`] when its holder drops it.
pub struct DropLater<T: Send + 'static>(ManuallyDrop<T>);

impl<T: Send + 'static> DropLater<T> {
    pub fn new(value: T) -> Self {
        Self(ManuallyDrop::new(value))
    }
}

impl<T: Send + 'static> Deref for DropLater<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Send + 'static> Drop for DropLater<T> {
    fn drop(&mut self) {
        // SAFETY: this is the holder's drop, so the value is never read
        // again after it is taken.
        later(unsafe { ManuallyDrop::take(&mut self.0) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread::{self, ThreadId};

    /// Reports the thread it is dropped on.
    struct Probe(mpsc::Sender<ThreadId>);

    impl Drop for Probe {
        fn drop(&mut self) {
            let _ = self.0.send(thread::current().id());
        }
    }

    /// How long a test waits for a drop before it fails (not a timing
    /// assertion: a hang guard).
    const HANG: Duration = Duration::from_secs(10);

    #[test]
    fn what_is_let_go_of_is_dropped_on_another_thread() {
        let (tx, rx) = mpsc::channel();
        drop(DropLater::new(Probe(tx)));
        let dropped_on = rx.recv_timeout(HANG).expect("dropped");
        assert_ne!(dropped_on, thread::current().id());
    }

    #[test]
    fn a_full_batch_is_dropped_on_a_runner() {
        let (tx, rx) = mpsc::channel();
        for _ in 0..BATCH {
            later(Probe(tx.clone()));
        }
        for _ in 0..BATCH {
            let dropped_on = rx.recv_timeout(HANG).expect("dropped");
            assert_ne!(dropped_on, thread::current().id());
        }
    }

    /// Panics when it is dropped.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("a drop that panics");
        }
    }

    #[test]
    fn a_drop_that_panics_is_caught_and_the_rest_is_dropped() {
        crate::run::guard::install_panic_hook();
        let (tx, rx) = mpsc::channel();
        let batch: Vec<Box<dyn Send>> = vec![Box::new(Bomb), Box::new(Probe(tx))];
        drop_each(batch);
        assert_eq!(rx.try_recv(), Ok(thread::current().id()));
    }

    #[test]
    fn the_value_is_reached_through_its_holder() {
        let held = DropLater::new(vec![1, 2, 3]);
        assert_eq!(held.len(), 3);
    }
}

//! Interpreters built ahead of need, off the caller's path.
//!
//! Building an interpreter with our layers takes 20–30 µs (bashkit's
//! builtin table, the command policy, the contained commands): most of
//! `Session.new/1`, and most of `ExBashkit.exec/1`, whose interpreter is
//! used once. A configuration asked for again soon (a loop creating
//! sessions, an agent's stream of one-shot calls) gets interpreters built
//! in advance by a runner thread, at the lowest CPU priority, while the
//! caller does other work; the caller then only takes one.
//!
//! Wake-ups are the cost to avoid. Waking a sleeping runner thread takes
//! 7 µs of the waker's time on this 2-core VM (and 20–30 µs measured inside
//! the NIF, where the woken runner competes with the VM's threads), more
//! than the rest of an `ExBashkit.exec("echo hi")`. So nothing is asked of a
//! runner per call: a build run is started when a shelf runs low (half its
//! target or less, [`LOW_WATER`]) and fills it up; an interpreter used
//! once is dropped in a batch (`run/teardown.rs`), which a build run drops on
//! its way.
//!
//! What qualifies: configurations built from memory alone, with nothing to
//! prepare after the build and no back-call route ([`eligible`]). Anything
//! else (mounts, `:files`, a base image, builtins) is built on the caller's
//! path as before.
//!
//! Freshness. An interpreter fixes a little state when it is built
//! (`$SECONDS` counts from then, the home directory's times), so one kept
//! longer than [`MAX_AGE`] is dropped rather than handed out. And a
//! configuration gets builds in advance only when it was asked for twice
//! within [`MAX_AGE`], and as many as it was asked for within that window
//! (between 2 and [`DEPTH`]): a caller that asks rarely never pays for
//! builds that go stale unused.
//!
//! Memory: at most [`SHELVES`] configurations with [`DEPTH`] interpreters
//! each (an idle interpreter is about 30 KB), swept once they are older
//! than [`MAX_AGE`].

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bashkit::Bash;
use parking_lot::Mutex;

use crate::config::{Layer, SessionConfig};
use crate::policy::egress::RequestLog;
use crate::run::interrupt::Interrupt;
use crate::term::value::Value;

/// How long a built interpreter may wait to be used. `$SECONDS` of a
/// session may so count from up to this long before `new/1` returned, as
/// if the shell had started that much earlier; under a second it never
/// shows in the first reading.
const MAX_AGE: Duration = Duration::from_millis(500);
/// Configurations kept ready at once (the most recently asked for).
const SHELVES: usize = 4;
/// Interpreters kept ready per configuration, at most.
const DEPTH: usize = 8;
/// A shelf holding 1/`LOW_WATER` of its target or less (half) gets a
/// build run: one runner wake-up per several takes, not per take.
const LOW_WATER: usize = 2;

/// An interpreter built for a configuration, with what a session keeps
/// beside it.
pub struct Prebuilt {
    pub bash: Bash,
    pub layer: Layer,
    pub interrupt: Arc<Interrupt>,
    /// Where its transport records requests (`policy/egress.rs`).
    pub requests: Arc<RequestLog>,
}

impl Prebuilt {
    /// Build one now, on the calling thread.
    pub fn build(config: &SessionConfig) -> Result<Self, String> {
        let interrupt = Interrupt::new();
        let layer = Layer::new(config);
        let requests = RequestLog::new();
        let bash = crate::config::build_bash_on(config, None, Some(&interrupt), &layer, &requests)?;
        Ok(Self {
            bash,
            layer,
            interrupt,
            requests,
        })
    }
}

/// The interpreters ready for one configuration.
struct Shelf {
    /// The configuration as Elixir sent it: what a request is matched by.
    key: Value,
    config: Arc<SessionConfig>,
    last_asked: Instant,
    /// Asks since the first of a run of asks less than [`MAX_AGE`] apart.
    asks: usize,
    ready: Vec<(Instant, Prebuilt)>,
    /// Whether a build run fills this shelf now.
    building: bool,
}

impl Shelf {
    /// How many this shelf keeps ready: as many as were asked for lately.
    fn target(&self) -> usize {
        self.asks.clamp(2, DEPTH)
    }

    /// Whether a build run should add one more now.
    fn wants_more(&self, now: Instant) -> bool {
        now.duration_since(self.last_asked) <= MAX_AGE && self.ready.len() < self.target()
    }

    /// Take out the interpreters older than [`MAX_AGE`] (for the caller
    /// to drop outside the lock).
    fn remove_stale(&mut self, now: Instant) -> Vec<(Instant, Prebuilt)> {
        let (fresh, stale) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|(built, _)| now.duration_since(*built) <= MAX_AGE);
        self.ready = fresh;
        stale
    }
}

static SHELF_LIST: LazyLock<Mutex<Vec<Shelf>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// Whether `config` is built from memory alone (see the module doc).
pub fn eligible(config: &SessionConfig) -> bool {
    config.builtins.is_empty()
        && config.virtual_fs.is_empty()
        && !config.egress
        && config.base.is_none()
        && !crate::config::needs_prepare(config)
}

/// An interpreter for `config` (whose term is `key`): one built in advance
/// if it is ready, else one built now. Either way, a configuration asked
/// for again within [`MAX_AGE`] gets interpreters built in advance.
pub fn take_or_build(key: &Value, config: &Arc<SessionConfig>) -> Result<Prebuilt, String> {
    match take_ready(key, config) {
        Some(prebuilt) => Ok(prebuilt),
        None => Prebuilt::build(config),
    }
}

/// An interpreter built in advance for `config`, if one is ready: nothing
/// is built on the calling thread (a normal scheduler, `ExBashkit.exec/1`'s
/// quick path); asking still keeps the shelf filled.
pub fn take_ready(key: &Value, config: &Arc<SessionConfig>) -> Option<Prebuilt> {
    match eligible(config) {
        true => take(key, config),
        false => None,
    }
}

fn take(key: &Value, config: &Arc<SessionConfig>) -> Option<Prebuilt> {
    let now = Instant::now();
    let mut stale = Vec::new();
    let (taken, start_run) = {
        let mut shelves = SHELF_LIST.lock();
        // The configuration the shelf was made with (in the node, what
        // `config/cache.rs` hands out again for the same term) is found
        // without comparing the whole term.
        let same = |shelf: &Shelf| Arc::ptr_eq(&shelf.config, config) || &shelf.key == key;
        match shelves.iter().position(same) {
            Some(i) => {
                let shelf = &mut shelves[i];
                let recent = now.duration_since(shelf.last_asked) <= MAX_AGE;
                shelf.last_asked = now;
                shelf.asks = if recent { shelf.asks + 1 } else { 1 };
                stale.extend(shelf.remove_stale(now));
                let taken = shelf.ready.pop().map(|(_, prebuilt)| prebuilt);
                let start_run = (recent || taken.is_some())
                    && !shelf.building
                    && shelf.ready.len() * LOW_WATER <= shelf.target();
                if start_run {
                    shelf.building = true;
                }
                (taken, start_run.then(|| Arc::clone(&shelf.config)))
            }
            None => {
                if shelves.len() >= SHELVES {
                    // Forget the configuration asked for least recently.
                    if let Some(oldest) = (0..shelves.len()).min_by_key(|&i| shelves[i].last_asked)
                    {
                        let shelf = shelves.swap_remove(oldest);
                        stale.extend(shelf.ready);
                    }
                }
                shelves.push(Shelf {
                    key: key.clone(),
                    config: Arc::clone(config),
                    last_asked: now,
                    asks: 1,
                    ready: Vec::new(),
                    building: false,
                });
                (None, None)
            }
        }
    };
    // Dropped outside the lock (tearing an interpreter down takes µs).
    drop(stale);
    if let Some(config) = start_run {
        let key = key.clone();
        crate::run::runtime::spawn(async move {
            build_run(&key, &config).await;
            // What nobody took is dropped, not kept for the node's lifetime.
            tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
            sweep();
        });
    }
    taken
}

/// Fill the shelf `key` up to its target, one build at a time (on a
/// runner), and drop what waits in `run/teardown.rs` on the way.
async fn build_run(key: &Value, config: &SessionConfig) {
    loop {
        crate::run::teardown::drop_pending();
        let wanted = {
            let mut shelves = SHELF_LIST.lock();
            match shelves.iter_mut().find(|shelf| &shelf.key == key) {
                Some(shelf) if shelf.wants_more(Instant::now()) => true,
                Some(shelf) => {
                    shelf.building = false;
                    false
                }
                // Forgotten meanwhile: nothing more to build for it.
                None => false,
            }
        };
        if !wanted {
            return;
        }
        let built = crate::run::guard::catch(|| Prebuilt::build(config))
            .ok()
            .and_then(Result::ok);
        {
            let mut shelves = SHELF_LIST.lock();
            let Some(shelf) = shelves.iter_mut().find(|shelf| &shelf.key == key) else {
                return;
            };
            match built {
                Some(prebuilt) => shelf.ready.push((Instant::now(), prebuilt)),
                None => {
                    shelf.building = false;
                    return;
                }
            }
        }
        // Other tasks (scripts' timers, back-calls) go between two builds.
        tokio::task::yield_now().await;
    }
}

/// Drop what is older than [`MAX_AGE`], and forget configurations nobody
/// asked for within it; what waits in `run/teardown.rs` goes too.
fn sweep() {
    let now = Instant::now();
    let mut stale = Vec::new();
    {
        let mut shelves = SHELF_LIST.lock();
        for shelf in shelves.iter_mut() {
            stale.extend(shelf.remove_stale(now));
        }
        shelves.retain(|shelf| {
            !shelf.ready.is_empty()
                || shelf.building
                || now.duration_since(shelf.last_asked) <= MAX_AGE
        });
    }
    drop(stale);
    crate::run::teardown::drop_pending();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of its own per test (the shelves are process-wide).
    fn key(name: &str) -> Value {
        Value::bin(name.as_bytes())
    }

    /// Ask for `key` until an interpreter built in advance is handed out.
    fn take_ready(key: &Value, config: &Arc<SessionConfig>) -> Option<Prebuilt> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(prebuilt) = take(key, config) {
                return Some(prebuilt);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    #[test]
    fn a_configuration_asked_for_again_gets_one_built_in_advance() {
        let config = Arc::new(SessionConfig::default());
        let key = key("again");
        assert!(
            take(&key, &config).is_none(),
            "nothing is built before a second request"
        );
        assert!(take_ready(&key, &config).is_some());
    }

    #[test]
    fn each_interpreter_is_built_for_its_own_configuration() {
        let config = Arc::new(SessionConfig {
            env: vec![("WHO".into(), "first".into())],
            ..SessionConfig::default()
        });
        let first = key("first");
        take(&first, &config);
        let mut built = take_ready(&first, &config).expect("built in advance").bash;
        // Another configuration never gets the first one's interpreters.
        assert!(take(&key("second"), &Arc::new(SessionConfig::default())).is_none());
        let out = crate::run::runtime::block_on(built.exec("echo $WHO")).unwrap();
        assert_eq!(out.stdout, "first\n");
    }

    #[test]
    fn a_configuration_asked_for_often_gets_several_built_in_advance() {
        let config = Arc::new(SessionConfig::default());
        let key = key("often");
        for _ in 0..6 {
            take(&key, &config);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let ready = || {
            let shelves = SHELF_LIST.lock();
            shelves
                .iter()
                .find(|shelf| shelf.key == key)
                .map_or(0, |shelf| shelf.ready.len())
        };
        while ready() < 4 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(ready() >= 4, "one build run fills the shelf up");
    }

    #[test]
    fn what_nobody_takes_is_swept() {
        let config = Arc::new(SessionConfig::default());
        let key = key("swept");
        take(&key, &config);
        take(&key, &config);
        std::thread::sleep(MAX_AGE * 2 + Duration::from_millis(200));
        let shelves = SHELF_LIST.lock();
        assert!(shelves.iter().all(|shelf| shelf.key != key));
    }

    #[test]
    fn configurations_that_need_preparing_do_not_qualify() {
        assert!(eligible(&SessionConfig::default()));
        let with_files = SessionConfig {
            files: vec![("/f".into(), crate::term::value::Bytes(b"x".to_vec()))],
            ..SessionConfig::default()
        };
        assert!(!eligible(&with_files));
        let with_builtins = SessionConfig {
            builtins: vec!["answer".into()],
            ..SessionConfig::default()
        };
        assert!(!eligible(&with_builtins));
    }
}

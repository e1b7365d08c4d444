//! Interpreters built ahead of need, off the caller's path.
//!
//! Building an interpreter with our layers takes 50–150 µs (bashkit's
//! builtin table, the command policy, the contained commands): most of
//! `Session.new/1`, and most of `ExBashkit.exec/1`, whose interpreter is
//! used once. A configuration asked for again soon (a loop creating
//! sessions, an agent's stream of one-shot calls) gets its next interpreter
//! built in advance by a runner thread, at the lowest CPU priority, while
//! the caller does other work; the caller then only takes it.
//!
//! What qualifies: configurations built from memory alone, with nothing to
//! prepare after the build and no back-call route ([`eligible`]). Anything
//! else (mounts, `:files`, a base image, builtins) is built on the caller's
//! path as before.
//!
//! Freshness. An interpreter fixes a little state when it is built
//! (`$SECONDS` counts from then, the home directory's times), so one kept
//! longer than [`MAX_AGE`] is dropped rather than handed out. And a
//! configuration gets a build in advance only when it was asked for twice
//! within [`MAX_AGE`]: a caller that asks rarely never pays for builds that
//! go stale unused.
//!
//! Memory: at most [`SHELVES`] configurations with [`DEPTH`] interpreters
//! each (an idle interpreter is about 30 KB), swept once they are older
//! than [`MAX_AGE`].

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bashkit::Bash;
use parking_lot::Mutex;

use crate::interrupt::Interrupt;
use crate::options::{self, Layer, SessionConfig};
use crate::value::Value;

/// How long a built interpreter may wait to be used. `$SECONDS` of a
/// session may so count from up to this long before `new/1` returned, as
/// if the shell had started that much earlier; under a second it never
/// shows in the first reading.
const MAX_AGE: Duration = Duration::from_millis(500);
/// Configurations kept ready at once (the most recently asked for).
const SHELVES: usize = 4;
/// Interpreters kept ready per configuration.
const DEPTH: usize = 2;

/// An interpreter built for a configuration, with what a session keeps
/// beside it.
pub struct Prebuilt {
    pub bash: Bash,
    pub layer: Layer,
    pub interrupt: Arc<Interrupt>,
}

impl Prebuilt {
    /// Build one now, on the calling thread.
    pub fn build(config: &SessionConfig) -> Result<Self, String> {
        let interrupt = Interrupt::new();
        let layer = Layer::new(config);
        let bash = options::build_bash_on(config, None, Some(&interrupt), &layer)?;
        Ok(Self {
            bash,
            layer,
            interrupt,
        })
    }
}

/// The interpreters ready for one configuration.
struct Shelf {
    /// The configuration as Elixir sent it: what a request is matched by.
    key: Value,
    config: Arc<SessionConfig>,
    last_asked: Instant,
    ready: Vec<(Instant, Prebuilt)>,
    /// Builds under way for this shelf.
    building: usize,
}

impl Shelf {
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
        && config.base.is_none()
        && !options::needs_prepare(config)
}

/// An interpreter for `config` (whose term is `key`): one built in advance
/// if it is ready, else one built now. Either way, a configuration asked
/// for again within [`MAX_AGE`] gets its next one built in advance.
pub fn take_or_build(key: &Value, config: &SessionConfig) -> Result<Prebuilt, String> {
    if !eligible(config) {
        return Prebuilt::build(config);
    }
    match take(key, config) {
        Some(prebuilt) => Ok(prebuilt),
        None => Prebuilt::build(config),
    }
}

fn take(key: &Value, config: &SessionConfig) -> Option<Prebuilt> {
    let now = Instant::now();
    let mut stale = Vec::new();
    let (taken, refill) = {
        let mut shelves = SHELF_LIST.lock();
        match shelves.iter_mut().position(|shelf| &shelf.key == key) {
            Some(i) => {
                let shelf = &mut shelves[i];
                let recent = now.duration_since(shelf.last_asked) <= MAX_AGE;
                shelf.last_asked = now;
                stale.extend(shelf.remove_stale(now));
                let taken = shelf.ready.pop().map(|(_, prebuilt)| prebuilt);
                let refill =
                    (recent || taken.is_some()) && shelf.ready.len() + shelf.building < DEPTH;
                if refill {
                    shelf.building += 1;
                }
                (taken, refill.then(|| Arc::clone(&shelf.config)))
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
                    config: Arc::new(config.clone()),
                    last_asked: now,
                    ready: Vec::new(),
                    building: 0,
                });
                (None, None)
            }
        }
    };
    // Dropped outside the lock (tearing an interpreter down takes µs).
    drop(stale);
    if let Some(config) = refill {
        let key = key.clone();
        crate::runtime::spawn(async move {
            refill_shelf(key, &config);
            // What nobody took is dropped, not kept for the node's lifetime.
            tokio::time::sleep(MAX_AGE + Duration::from_millis(50)).await;
            sweep();
        });
    }
    taken
}

/// Build one interpreter for the shelf `key` (on a runner thread).
fn refill_shelf(key: Value, config: &SessionConfig) {
    let built = crate::guard::catch(|| Prebuilt::build(config))
        .ok()
        .and_then(Result::ok);
    let mut shelves = SHELF_LIST.lock();
    // The shelf may have been forgotten meanwhile: the build is then dropped.
    if let Some(shelf) = shelves.iter_mut().find(|shelf| shelf.key == key) {
        shelf.building = shelf.building.saturating_sub(1);
        if let Some(prebuilt) = built {
            shelf.ready.push((Instant::now(), prebuilt));
        }
    }
}

/// Drop what is older than [`MAX_AGE`], and forget configurations nobody
/// asked for within it.
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
                || shelf.building > 0
                || now.duration_since(shelf.last_asked) <= MAX_AGE
        });
    }
    drop(stale);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of its own per test (the shelves are process-wide).
    fn key(name: &str) -> Value {
        Value::bin(name.as_bytes())
    }

    /// Ask for `key` until an interpreter built in advance is handed out.
    fn take_ready(key: &Value, config: &SessionConfig) -> Option<Prebuilt> {
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
        let config = SessionConfig::default();
        let key = key("again");
        assert!(
            take(&key, &config).is_none(),
            "nothing is built before a second request"
        );
        assert!(take_ready(&key, &config).is_some());
    }

    #[test]
    fn each_interpreter_is_built_for_its_own_configuration() {
        let config = SessionConfig {
            env: vec![("WHO".into(), "first".into())],
            ..SessionConfig::default()
        };
        let first = key("first");
        take(&first, &config);
        let mut built = take_ready(&first, &config).expect("built in advance").bash;
        // Another configuration never gets the first one's interpreters.
        assert!(take(&key("second"), &SessionConfig::default()).is_none());
        let out = crate::runtime::block_on(built.exec("echo $WHO")).unwrap();
        assert_eq!(out.stdout, "first\n");
    }

    #[test]
    fn what_nobody_takes_is_swept() {
        let config = SessionConfig::default();
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
            files: vec![("/f".into(), crate::value::Bytes(b"x".to_vec()))],
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

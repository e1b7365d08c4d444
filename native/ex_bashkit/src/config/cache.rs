//! Session configurations decoded once, remembered by their term.
//!
//! `ExBashkit.exec/1` passes the configuration of a default session, a map
//! of some fifty keys, on every call, and `Session.new/1` one per session.
//! Decoding it copies out about a hundred atom names into a `Value` tree
//! and builds the `SessionConfig` from that: 9 % of the dirty scheduler's
//! time in a loop of `ExBashkit.exec("echo hi")` (`perf`). The
//! default configuration is one persistent term on the Elixir side, so the
//! same term comes again and again: the last few configurations are kept
//! with a copy of their term, and a term identical to one of them (the
//! VM's exact comparison, no allocation) reuses its decoding.
//!
//! Only configurations built from memory alone are kept
//! ([`warm::eligible`]): they are small, and they are the ones a caller
//! passes many times. One carrying files, mounts or builtins is decoded
//! each time, as before.
//!
//! A worker receives configurations as `Value`s, in its frames: it keeps
//! the last one so remembered ([`decode_value`]). Sessions of one
//! configuration (a pool's) then share its decoding, term included, which
//! a session built from memory alone keeps for its resets.

use std::sync::Arc;

use parking_lot::Mutex;
use rustler::env::{OwnedEnv, SavedTerm};
use rustler::Term;

use crate::config::SessionConfig;
use crate::nif::error::NifResult;
use crate::run::warm;
use crate::term::value::{FromValue, Value};

/// Configurations remembered at once (the most recently used first).
const KEPT: usize = 4;

/// A session configuration as Elixir sent it (`key`, what the pre-built
/// interpreters of `run/warm.rs` are matched by) and as the core reads it.
pub struct DecodedConfig {
    pub key: Value,
    pub config: Arc<SessionConfig>,
}

impl DecodedConfig {
    /// Decode a configuration received as a `Value` (the worker's path).
    pub fn from_value(key: Value) -> Result<Self, String> {
        let config = Arc::new(SessionConfig::from_value(&key)?);
        Ok(Self { key, config })
    }
}

/// A remembered configuration: its term, copied into an env of its own.
struct Remembered {
    env: OwnedEnv,
    term: SavedTerm,
    decoded: Arc<DecodedConfig>,
}

static RECENT: Mutex<Vec<Remembered>> = Mutex::new(Vec::new());

/// The configuration `term` decodes to: remembered, or decoded now.
pub fn decode(term: Term<'_>) -> NifResult<Arc<DecodedConfig>> {
    if let Some(found) = recall(term) {
        return Ok(found);
    }
    let decoded = Arc::new(DecodedConfig::from_value(Value::from_term(term)?)?);
    if warm::eligible(&decoded.config) {
        remember(term, &decoded);
    }
    Ok(decoded)
}

/// The last configuration [`decode_value`] remembered.
static LAST_VALUE: Mutex<Option<Arc<DecodedConfig>>> = Mutex::new(None);

/// The configuration a worker received as `key`: the last one remembered
/// if it is the same term, else decoded now (and remembered if it is built
/// from memory alone).
pub fn decode_value(key: &Value) -> Result<Arc<DecodedConfig>, String> {
    let mut last = LAST_VALUE.lock();
    if let Some(decoded) = last.as_ref().filter(|decoded| decoded.key == *key) {
        return Ok(Arc::clone(decoded));
    }
    let decoded = Arc::new(DecodedConfig::from_value(key.clone())?);
    if warm::eligible(&decoded.config) {
        *last = Some(Arc::clone(&decoded));
    }
    Ok(decoded)
}

/// Where `term` is in `recent`, compared with the VM's exact comparison.
fn position(recent: &[Remembered], term: Term<'_>) -> Option<usize> {
    recent
        .iter()
        .position(|kept| kept.env.run(|env| kept.term.load(env) == term))
}

/// The configuration `term` decodes to, if it is remembered: no decoding,
/// one exact comparison per remembered term (for a normal scheduler).
pub fn recall(term: Term<'_>) -> Option<Arc<DecodedConfig>> {
    let mut recent = RECENT.lock();
    let i = position(&recent, term)?;
    let found = Arc::clone(&recent[i].decoded);
    // Most recently used first: the search usually ends at the first one.
    recent[..=i].rotate_right(1);
    Some(found)
}

fn remember(term: Term<'_>, decoded: &Arc<DecodedConfig>) {
    let env = OwnedEnv::new();
    let saved = env.save(term);
    let forgotten = {
        let mut recent = RECENT.lock();
        // Another thread decoding the same term may have come first.
        if position(&recent, term).is_some() {
            return;
        }
        recent.insert(
            0,
            Remembered {
                env,
                term: saved,
                decoded: Arc::clone(decoded),
            },
        );
        let kept = KEPT.min(recent.len());
        recent.split_off(kept)
    };
    // Freed outside the lock.
    drop(forgotten);
}

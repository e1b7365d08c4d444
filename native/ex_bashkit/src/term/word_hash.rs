//! Hashing for maps whose keys this library makes itself: the ids it hands
//! out (execs, back-calls, sessions) and the addresses of its own literals.
//!
//! Nobody outside chooses such keys, so SipHash, the standard library's
//! default, which resists keys chosen to collide, buys nothing here; a
//! multiply per word is enough. On an exec's path SipHash was 0.7 % of a
//! 64-session `echo hi` exec's CPU (`perf`), and a session's ticket map
//! hashed by it about 600 of the 7 000 instructions our layer added to
//! bashkit's own per exec (`scripts/bench-instructions`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map whose keys this library makes itself, hashed by [`WordHasher`].
pub type WordMap<K, V> = HashMap<K, V, BuildHasherDefault<WordHasher>>;

/// A map keyed by ids this library hands out (counters, never reused).
pub type IdMap<V> = WordMap<u64, V>;

/// A rotate, xor and multiply per machine word (the multiplier is FxHash's).
#[derive(Default)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.write_u64(u64::from(*byte));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_map_holds_consecutive_ids_apart() {
        let mut map: IdMap<u64> = IdMap::default();
        for id in 1..=10_000u64 {
            map.insert(id, id * 2);
        }
        assert_eq!(map.len(), 10_000);
        assert!((1..=10_000u64).all(|id| map.get(&id) == Some(&(id * 2))));
        assert_eq!(map.remove(&5_000), Some(10_000));
        assert!(!map.contains_key(&5_000));
    }
}

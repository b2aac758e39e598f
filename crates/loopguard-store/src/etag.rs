//! Entity tags: a unique 64-bit number per stored state, for compare-and-swap.
//!
//! Every state a store writes gets a fresh tag, and a write succeeds only when the tag
//! in the backend is the one the state was computed from. Tags are unique (not just
//! increasing) so that two writers that computed different states from the same old one
//! can never both succeed, and a write derived from a state that never reached the backend
//! (its transaction failed) can never succeed either.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// An odd step: adding it visits all 2^64 values before repeating.
const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

static NEXT: OnceLock<AtomicU64> = OnceLock::new();

/// A tag no other write of this process has used, and that another process is
/// astronomically unlikely to use (each process starts at a random point of the cycle).
pub(crate) fn next() -> u64 {
    let counter = NEXT.get_or_init(|| {
        let seed = std::collections::hash_map::RandomState::new().hash_one((
            std::process::id(),
            std::time::SystemTime::now(),
            std::thread::current().id(),
        ));
        AtomicU64::new(seed)
    });
    counter
        .fetch_add(STEP, Ordering::Relaxed)
        .wrapping_add(STEP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tags_are_unique() {
        let tags: HashSet<u64> = (0..10_000).map(|_| next()).collect();
        assert_eq!(tags.len(), 10_000);
    }
}

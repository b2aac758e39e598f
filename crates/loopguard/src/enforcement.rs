//! Enforcement (SPEC §5): when a warning is surfaced to the model.
//!
//! Per scope and warning key, a warning is surfaced when floor(count / W) exceeds the last
//! value surfaced for that key: at W = 10, on counts 10, 20, 30… At most
//! [`MAX_WARNING_KEYS`] keys are kept per scope, the oldest inserted evicted first.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use crate::fingerprint::{Fingerprint, Signature};

/// Warning keys kept per scope.
pub const MAX_WARNING_KEYS: usize = 256;

/// What identifies "the same warning" for surfacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WarningKey {
    /// Generic repeat of one signature.
    Generic(Signature),
    /// A poll of one signature stuck on one outcome (a new outcome starts a new key).
    Poll(Signature, Option<Fingerprint>),
    /// An alternation between two signatures, whichever side is called.
    PingPong(Signature, Signature),
    /// A cycle, by the (order-free) combination of its signatures.
    Cycle(u128),
    /// An error cascade, by the sequence number of its first failure.
    Cascade(u64),
    /// Failures on one (tool, target), whatever the arguments.
    Target(u64),
    /// Any other detector's warning on one signature.
    Other(crate::verdict::Detector, Signature),
}

impl WarningKey {
    /// The unordered pair key for a ping-pong between `a` and `b`.
    pub fn ping_pong(a: Signature, b: Signature) -> Self {
        if a <= b {
            Self::PingPong(a, b)
        } else {
            Self::PingPong(b, a)
        }
    }

    fn digest(self) -> u128 {
        let mut bytes = [0u8; 1 + 16 + 16 + 1];
        let (tag, x, y) = match self {
            Self::Generic(s) => (b'g', s.as_u128(), 0),
            Self::Poll(s, f) => (
                if f.is_some() { b'p' } else { b'q' },
                s.as_u128(),
                f.map_or(0, Fingerprint::as_u128),
            ),
            Self::PingPong(a, b) => (b'x', a.as_u128(), b.as_u128()),
            Self::Cycle(set) => (b'c', set, 0),
            Self::Cascade(start) => (b'e', u128::from(start), 0),
            Self::Target(key) => (b't', u128::from(key), 0),
            Self::Other(detector, s) => (b'0' + detector as u8, s.as_u128(), 0),
        };
        bytes[0] = tag;
        bytes[1..17].copy_from_slice(&x.to_le_bytes());
        bytes[17..33].copy_from_slice(&y.to_le_bytes());
        xxh3_128(&bytes)
    }
}

/// The last surfaced bucket per warning key of one scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotifyBuckets {
    keys: VecDeque<(u128, u32)>,
}

impl NotifyBuckets {
    /// Whether a warning with `count` at threshold `w` is surfaced now; remembers it.
    pub(crate) fn surface(&mut self, key: WarningKey, count: u32, w: u32) -> bool {
        let bucket = count / w.max(1);
        let key = key.digest();
        if let Some(entry) = self.keys.iter_mut().find(|(k, _)| *k == key) {
            if bucket > entry.1 {
                entry.1 = bucket;
                return true;
            }
            return false;
        }
        if self.keys.len() >= MAX_WARNING_KEYS {
            self.keys.pop_front();
        }
        self.keys.push_back((key, bucket));
        bucket > 0
    }

    /// Number of keys kept.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<(u128, u32)>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(n: u128) -> Signature {
        crate::fingerprint::Signature::new(&n.to_string(), Fingerprint::from_u128(n))
    }

    #[test]
    fn multiples_of_w() {
        let mut b = NotifyBuckets::default();
        let k = WarningKey::Generic(sig(1));
        let surfaced: Vec<u32> = (3..=10).filter(|&c| b.surface(k, c, 3)).collect();
        assert_eq!(surfaced, [3, 6, 9]);
    }

    #[test]
    fn keys_are_separate_and_pairs_unordered() {
        let mut b = NotifyBuckets::default();
        assert!(b.surface(WarningKey::ping_pong(sig(1), sig(2)), 10, 10));
        assert!(!b.surface(WarningKey::ping_pong(sig(2), sig(1)), 11, 10));
        assert!(b.surface(WarningKey::Poll(sig(1), None), 10, 10));
        assert!(b.surface(
            WarningKey::Poll(sig(1), Some(Fingerprint::from_u128(5))),
            10,
            10
        ));
        assert!(b.surface(WarningKey::Generic(sig(1)), 10, 10));
    }

    #[test]
    fn oldest_key_evicted_at_cap() {
        let mut b = NotifyBuckets::default();
        for i in 0..=MAX_WARNING_KEYS as u128 {
            assert!(b.surface(WarningKey::Generic(sig(i)), 1, 1));
        }
        assert_eq!(b.len(), MAX_WARNING_KEYS);
        // k0 was evicted: it surfaces again at the same bucket; the newest does not.
        assert!(b.surface(WarningKey::Generic(sig(0)), 1, 1));
        assert!(!b.surface(WarningKey::Generic(sig(MAX_WARNING_KEYS as u128)), 1, 1));
    }
}

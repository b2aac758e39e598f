//! The post-compaction guard (SPEC §6).
//!
//! After the host compacts an overflowing context and retries, the guard watches the next
//! `windowSize` outcomes of the run. If all of them are the same (tool, args, result)
//! triple, compaction did not break the loop, and the run is aborted with
//! `compaction_loop_persisted`. Changing results never abort.

use serde::{Deserialize, Serialize};

use crate::fingerprint::{Fingerprint, Signature};

/// The guard of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionGuard {
    /// Outcomes still to observe; 0 when dormant.
    remaining: u32,
    /// Window size at arming time.
    size: u32,
    /// Triples observed since arming.
    window: Vec<(Signature, Fingerprint)>,
}

impl CompactionGuard {
    /// Arms for `size` attempts, discarding any open window.
    pub(crate) fn arm(&mut self, size: u32) {
        self.remaining = size;
        self.size = size;
        self.window.clear();
    }

    /// Outcomes still to observe (0: dormant).
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Observes an outcome; returns the identical-triple count when the run must abort.
    pub(crate) fn observe(&mut self, signature: Signature, outcome: Fingerprint) -> Option<u32> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        self.window.push((signature, outcome));
        let first = self.window[0];
        let identical =
            self.window.len() as u32 >= self.size && self.window.iter().all(|t| *t == first);
        if self.remaining == 0 {
            self.window = Vec::new();
        }
        identical.then_some(self.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u128) -> (Signature, Fingerprint) {
        (
            Signature::new("t", Fingerprint::from_u128(n)),
            Fingerprint::from_u128(n),
        )
    }

    #[test]
    fn identical_window_aborts() {
        let mut g = CompactionGuard::default();
        assert_eq!(g.observe(t(1).0, t(1).1), None, "dormant");
        g.arm(3);
        assert_eq!(g.observe(t(1).0, t(1).1), None);
        assert_eq!(g.observe(t(1).0, t(1).1), None);
        assert_eq!(g.observe(t(1).0, t(1).1), Some(3));
        assert_eq!(g.remaining(), 0);
    }

    #[test]
    fn changing_results_and_closed_window() {
        let mut g = CompactionGuard::default();
        g.arm(3);
        g.observe(t(1).0, t(1).1);
        g.observe(t(1).0, t(1).1);
        assert_eq!(g.observe(t(1).0, t(2).1), None);
        assert_eq!(g.observe(t(1).0, t(1).1), None, "dormant after the window");
    }

    #[test]
    fn rearm_discards_open_window() {
        let mut g = CompactionGuard::default();
        g.arm(3);
        g.observe(t(1).0, t(1).1);
        g.observe(t(1).0, t(1).1);
        g.arm(3);
        assert_eq!(g.observe(t(1).0, t(1).1), None);
        assert_eq!(g.observe(t(1).0, t(1).1), None);
        assert_eq!(g.observe(t(1).0, t(1).1), Some(3));
    }
}

//! `target_thrash`: repeated failures on one target (a file, a URL) whatever else the
//! arguments say. An agent that fails to edit a file, changes the old text a little and
//! fails again makes a new call pattern every time, so the repeat detectors never see it;
//! the target it keeps failing on is what repeats.
//!
//! The target is the first non-blank string argument among the names the tool policy
//! gives (`path`, `file_path`, `url`, …), keyed together with the tool. Each record of the
//! history gets its call's key here, aligned with the history by sequence number; the
//! count is the failed outcomes with the call's key in the window.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::history::History;

/// The key of a call's (tool, target), never 0.
pub(crate) fn target_key(tool: &str, target: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(tool.as_bytes());
    h.update(&[0]);
    h.update(target.as_bytes());
    h.digest().max(1)
}

/// The (tool, target) key of each history record (0: none), by sequence number.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Targets {
    /// Sequence number of `keys[0]`.
    base: u64,
    keys: VecDeque<u64>,
}

impl Targets {
    /// Records the key of the record with sequence number `seq` (the newest), and forgets
    /// keys of records the history no longer holds.
    pub(crate) fn push(&mut self, history: &History, seq: u64, key: u64) {
        if self.base.checked_add(self.keys.len() as u64) != Some(seq) {
            // Lost step (state from an older format, or thrash detection just turned on):
            // earlier records count as having no target.
            self.keys.clear();
            self.base = seq;
        }
        self.keys.push_back(key);
        let oldest = history.seq_of(0);
        while self.base < oldest && !self.keys.is_empty() {
            self.keys.pop_front();
            self.base += 1;
        }
    }

    fn key_at(&self, seq: u64) -> u64 {
        seq.checked_sub(self.base)
            .and_then(|i| self.keys.get(i as usize))
            .copied()
            .unwrap_or(0)
    }

    /// Failed outcomes of calls with `key` in the window.
    pub(crate) fn failures(&self, history: &History, key: u64) -> u32 {
        history
            .records()
            .iter()
            .enumerate()
            .filter(|(i, r)| r.failed() && self.key_at(history.seq_of(*i)) == key)
            .count() as u32
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.keys.capacity() * 8
    }
}

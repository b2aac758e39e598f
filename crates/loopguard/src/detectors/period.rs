//! Period detection on the call sequence, for `cycle`.
//!
//! The newest calls repeat with period p when sig[j] = sig[j − p] for each of the last r
//! positions: the periodic tail is r + p calls long and holds (r + p) / p repetitions,
//! whatever the steps inside the period (a step may come back within it). For every p up
//! to the longest period the track keeps r for the tail that ends at the newest record,
//! and updates it in O(longest period) per record from a ring of the last two periods'
//! worth of records. So a long cycle is counted even when its repetitions no longer fit in
//! the history window (a 17-step sweep repeated three times is 51 calls; the window is
//! 30), and judging a call costs the same whatever the window.
//!
//! The ring also holds each record's outcome, for the evidence a block needs: every
//! position of the last period returned what it returned one period earlier.
//!
//! The track follows the history by sequence number. A state that lost step (read back
//! from an older format, or kept while `cycle` was off) is rebuilt from the history.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::fingerprint::{Fingerprint, Signature};
use crate::history::{History, RecordState};

/// A cycle the current call would continue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Period {
    /// Calls per repetition.
    pub length: u32,
    /// Full repetitions in the periodic tail, the current call included.
    pub repeats: u32,
}

/// The periodic runs of one scope's call sequence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PeriodTrack {
    /// Longest period tracked; 0 until built.
    max: u32,
    /// Sequence number of the first record the track has seen.
    first: u64,
    /// Sequence number the next record must have; any other means the track lost step.
    next: u64,
    /// Signature and outcome of the last `2 * max` records, at `seq % len`.
    #[serde(with = "slots")]
    ring: Vec<Slot>,
    /// `runs[p - 1]`, p = 1..=max: the unbroken newest positions j with sig[j] = sig[j − p].
    runs: Vec<u32>,
}

/// A record as the track sees it: its signature and outcome folded to 64 bits (equality
/// is all that is asked of them), the outcome 0 while there is none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    signature: u64,
    outcome: u64,
}

/// The ring index `p` records before index `at` (p < len).
fn back(at: usize, p: usize, len: usize) -> usize {
    if at >= p {
        at - p
    } else {
        at + len - p
    }
}

fn fold(raw: u128) -> u64 {
    (raw as u64) ^ ((raw >> 64) as u64)
}

fn outcome_tag(state: RecordState) -> u64 {
    match state {
        RecordState::Done(fp) => outcome_of(fp),
        RecordState::Pending | RecordState::Veto => 0,
    }
}

fn outcome_of(fp: Fingerprint) -> u64 {
    fold(fp.as_u128()).max(1)
}

impl PeriodTrack {
    /// Brings the track up to the history's newest record, for periods up to `max`.
    pub(crate) fn sync(&mut self, history: &History, max: u32) {
        let end = history.seq_of(history.len());
        if self.max == max && self.next == end && self.consistent() {
            return;
        }
        let start = history.seq_of(0);
        if self.max != max || self.next < start || self.next > end || !self.consistent() {
            self.max = max;
            self.ring = vec![Slot::default(); 2 * max as usize];
            self.runs = vec![0; max as usize];
            self.first = start;
            self.next = start;
        }
        let records = history.records();
        while self.next < end {
            let r = &records[(self.next - start) as usize];
            self.push(r.signature(), outcome_tag(r.state()));
        }
    }

    /// Whether the parts agree with each other (a state read from bytes may not): every
    /// index the track computes then stays in bounds.
    fn consistent(&self) -> bool {
        self.ring.len() == 2 * self.max as usize
            && self.runs.len() == self.max as usize
            && self.first <= self.next
    }

    /// Appends the record with sequence number `self.next`.
    fn push(&mut self, signature: Signature, outcome: u64) {
        let seq = self.next;
        let len = self.ring.len();
        if len == 0 {
            self.next = seq.saturating_add(1);
            return;
        }
        let signature = fold(signature.as_u128());
        let at = (seq % len as u64) as usize;
        // Periods reaching back before the first record seen have no run yet.
        let known = (seq - self.first).min(u64::from(self.max)) as usize;
        for (p, run) in self.runs.iter_mut().enumerate().map(|(i, r)| (i + 1, r)) {
            let matched = p <= known && self.ring[back(at, p, len)].signature == signature;
            *run = if matched { run.saturating_add(1) } else { 0 };
        }
        self.ring[at] = Slot { signature, outcome };
        self.next = seq.saturating_add(1);
    }

    /// Records that the record with sequence number `seq` got its outcome.
    pub(crate) fn settle(&mut self, seq: u64, state: RecordState) {
        let len = self.ring.len() as u64;
        if len > 0 && seq < self.next && seq >= self.first && self.next - seq <= len {
            self.ring[(seq % len) as usize].outcome = outcome_tag(state);
        }
    }

    /// Records a record appended after the track was synced (`sync` otherwise catches up).
    pub(crate) fn appended(&mut self, seq: u64, signature: Signature, state: RecordState) {
        if seq == self.next && self.max > 0 && self.consistent() {
            self.push(signature, outcome_tag(state));
        }
    }

    fn slot(&self, seq: u64) -> Option<Slot> {
        let len = self.ring.len() as u64;
        (len > 0 && seq >= self.first && seq < self.next && self.next - seq <= len)
            .then(|| self.ring[(seq % len) as usize])
    }

    /// The shortest period in `min..=max` (the track's max) the current call `signature`
    /// continues with at least `repeats` repetitions, not counting runs of one call
    /// pattern (period 1: `consecutive_repeat`'s). The track must be synced.
    pub(crate) fn find(&self, signature: Signature, min: u32, repeats: u32) -> Option<Period> {
        let len = self.ring.len();
        if len == 0 || !self.consistent() {
            return None;
        }
        let signature = fold(signature.as_u128());
        let at = (self.next % len as u64) as usize;
        let known = (self.next - self.first).min(u64::from(self.max)) as usize;
        // The run the current call would extend, for period p.
        let run = |p: usize| -> u32 {
            if p <= known && self.ring[back(at, p, len)].signature == signature {
                self.runs[p - 1] + 1
            } else {
                0
            }
        };
        let same_as_last = run(1);
        for p in (min.max(2) as usize)..=self.max as usize {
            let r = run(p);
            if r == 0 {
                continue;
            }
            let length = p as u32;
            let reps = r.saturating_add(length) / length;
            // The last p calls are one pattern: a run, not a cycle.
            if reps >= repeats && same_as_last < length - 1 {
                return Some(Period {
                    length,
                    repeats: reps,
                });
            }
        }
        None
    }

    /// Whether each of the last `length` positions returned what it returned one period
    /// earlier (every one of them with an outcome).
    pub(crate) fn stable(&self, length: u32) -> bool {
        let p = u64::from(length);
        (1..=p).all(|back| {
            let Some(j) = self.next.checked_sub(back) else {
                return false;
            };
            match (self.slot(j), j.checked_sub(p).and_then(|q| self.slot(q))) {
                (Some(a), Some(b)) => a.outcome != 0 && a.outcome == b.outcome,
                _ => false,
            }
        })
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ring.capacity() * std::mem::size_of::<Slot>() + self.runs.capacity() * 4
    }
}

/// The ring as raw little-endian bytes (16 per slot): variable-length integers would
/// only make random 64-bit values longer.
mod slots {
    use super::*;

    pub(super) fn serialize<S: Serializer>(ring: &[Slot], s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(ring.len() * 16);
        for slot in ring {
            bytes.extend_from_slice(&slot.signature.to_le_bytes());
            bytes.extend_from_slice(&slot.outcome.to_le_bytes());
        }
        s.serialize_bytes(&bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Slot>, D::Error> {
        let bytes: &[u8] = Deserialize::deserialize(d)?;
        if !bytes.len().is_multiple_of(16) {
            return Err(serde::de::Error::invalid_length(
                bytes.len(),
                &"a multiple of 16 bytes",
            ));
        }
        Ok(bytes
            .chunks_exact(16)
            .map(|c| Slot {
                signature: u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                outcome: u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::OutcomeRule;
    use crate::history::NewRecord;
    use serde_json::json;

    fn sig(name: &str) -> Signature {
        Signature::new(name, Fingerprint::from_u128(0))
    }

    fn push(h: &mut History, c: char, capacity: u32) {
        let tool = c.to_string();
        h.push(
            capacity,
            NewRecord {
                tool: &tool,
                signature: sig(&tool),
                call_id: None,
                state: RecordState::Done(Fingerprint::from_u128(c as u128)),
                unknown_tool: None,
                rule: OutcomeRule::for_call(&tool, &json!({})),
                now_ms: crate::Millis::ZERO,
                newest: None,
                failure: None,
            },
        );
    }

    fn history(calls: &str, capacity: u32) -> History {
        let mut h = History::default();
        for c in calls.chars() {
            push(&mut h, c, capacity);
        }
        h
    }

    /// The period of `calls` followed by `next`, by brute force over the whole sequence.
    fn reference(calls: &str, next: char, min: u32, max: u32, repeats: u32) -> Option<Period> {
        let seq: Vec<char> = calls.chars().chain([next]).collect();
        let n = seq.len();
        for p in min as usize..=max as usize {
            if p > n {
                break;
            }
            let mut run = 0;
            while run + p < n && seq[n - 1 - run] == seq[n - 1 - run - p] {
                run += 1;
            }
            let reps = ((run + p) / p) as u32;
            let constant = seq[n - p..].iter().all(|c| *c == next);
            if run > 0 && reps >= repeats && !constant {
                return Some(Period {
                    length: p as u32,
                    repeats: reps,
                });
            }
        }
        None
    }

    #[test]
    fn finds_the_shortest_period_with_repeated_steps() {
        let cases = [
            ("abcabcab", 'c', Some((3, 3))),
            // A step repeated inside the period: a a b.
            ("aabaabaa", 'b', Some((3, 3))),
            // A run of one pattern is not a cycle.
            ("aaaaaaaa", 'a', None),
            ("abababab", 'a', Some((2, 4))),
            ("abcdefgabcdefgabcdef", 'g', Some((7, 3))),
            ("abcabd", 'a', None),
        ];
        for (calls, next, expected) in cases {
            let h = history(calls, 1000);
            let mut t = PeriodTrack::default();
            t.sync(&h, 16);
            let found = t.find(sig(&next.to_string()), 2, 3);
            assert_eq!(
                found.map(|p| (p.length, p.repeats)),
                expected,
                "{calls} + {next}"
            );
            assert_eq!(found, reference(calls, next, 2, 16, 3), "{calls} + {next}");
        }
    }

    #[test]
    fn counts_repetitions_beyond_the_window() {
        // 17 distinct steps, three times: 51 calls, a window of 30.
        let sweep: String = ('A'..='Q').collect();
        let calls = format!("{sweep}{sweep}{}", &sweep[..16]);
        let mut h = History::default();
        let mut t = PeriodTrack::default();
        for c in calls.chars() {
            push(&mut h, c, 30);
            t.sync(&h, 20);
        }
        assert_eq!(h.len(), 30);
        let found = t.find(sig("Q"), 2, 3).unwrap();
        assert_eq!((found.length, found.repeats), (17, 3));
        assert!(t.stable(17), "identical outcomes at every position");
        // A rebuild from the window alone sees two repetitions at most.
        let mut fresh = PeriodTrack::default();
        fresh.sync(&h, 20);
        assert_eq!(fresh.find(sig("Q"), 2, 3), None);
    }

    #[test]
    fn agrees_with_brute_force_on_random_sequences() {
        let mut seed = 7u64;
        for _ in 0..400 {
            let len = (seed % 60) as usize;
            let mut calls = String::new();
            for _ in 0..len {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                calls.push((b'a' + ((seed >> 33) % 3) as u8) as char);
            }
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let next = (b'a' + ((seed >> 33) % 3) as u8) as char;
            let h = history(&calls, 1000);
            let mut t = PeriodTrack::default();
            t.sync(&h, 8);
            assert_eq!(
                t.find(sig(&next.to_string()), 2, 2),
                reference(&calls, next, 2, 8, 2),
                "{calls} + {next}"
            );
        }
    }

    #[test]
    fn stability_needs_every_position_to_keep_its_outcome() {
        let mut h = history("abcabc", 100);
        let mut t = PeriodTrack::default();
        t.sync(&h, 6);
        assert!(t.stable(3));
        // A new outcome at one position breaks it.
        let last = h.len() - 1;
        h.settle(
            last,
            RecordState::Done(Fingerprint::from_u128(9999)),
            None,
            None,
        );
        t.settle(
            h.seq_of(last),
            RecordState::Done(Fingerprint::from_u128(9999)),
        );
        assert!(!t.stable(3));
        // A pending record is no evidence.
        t.settle(h.seq_of(last), RecordState::Pending);
        assert!(!t.stable(3));
    }

    #[test]
    fn state_round_trips() {
        let h = history("abcabcab", 100);
        let mut t = PeriodTrack::default();
        t.sync(&h, 4);
        let bytes = postcard::to_allocvec(&t).unwrap();
        let back: PeriodTrack = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, t);
    }
}

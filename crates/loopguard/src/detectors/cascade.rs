//! `error_cascade`: a run of failures across calls, which no repeat detector sees because
//! every call is different.
//!
//! A count of failures alone cannot tell a loop from work: an agent that probes invalid
//! inputs on purpose, or installs one missing module after another, fails as often as one
//! that keeps hitting the same wall. So a run blocks only on two kinds of evidence:
//!
//! - **count**: at least `criticalThreshold` failures in the run, or `permanentThreshold`
//!   when the failure that repeats is a permanent one (a missing file, a refusal, a syntax
//!   error: retrying does not change it; a timeout or a rate limit may pass);
//! - **repetition**: one failure signature (the normalised error line,
//!   [`crate::fingerprint::Failure`]) makes up at least `repeats` of them, met by
//!   different calls or the same one.
//!
//! A run whose failures keep changing is converging (each failure tells the agent
//! something new) and is only warned about. A run also ends when it converges the other
//! way: a success on what a failed call of the run worked on (the same (tool, target), or
//! the same call) means the failures were iteration towards it.
//!
//! Failures of one run may be separated by up to `maxGap` successes; the run is live while
//! the newest outcome failed.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::Finding;
use crate::config::extensions::Cascade;
use crate::history::History;
use crate::policy::FailureClass;
use crate::verdict::{Detector, Level};

/// What the cascade keeps of each history record, by sequence number: what the call worked
/// on, and the signature of its failure.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FailureTrack {
    /// Sequence number of `notes[0]`.
    base: u64,
    notes: VecDeque<Note>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Note {
    /// The call's (tool, target) key, else (a hash of) its signature.
    work: u64,
    /// The failure's signature (0: none, or no failure).
    error: u64,
}

impl FailureTrack {
    /// Records what the record with sequence number `seq` (the newest) works on, and
    /// forgets notes of records the history no longer holds.
    pub(crate) fn push(&mut self, history: &History, seq: u64, work: u64) {
        if self.base.checked_add(self.notes.len() as u64) != Some(seq) {
            // Lost step (a state from an older format, or the detector just turned on):
            // earlier records count as working on nothing known.
            self.notes.clear();
            self.base = seq;
        }
        self.notes.push_back(Note { work, error: 0 });
        let oldest = history.seq_of(0);
        while self.base < oldest && !self.notes.is_empty() {
            self.notes.pop_front();
            self.base += 1;
        }
    }

    /// Sets the failure signature of the record with sequence number `seq`.
    pub(crate) fn settle(&mut self, seq: u64, error: u64) {
        if let Some(note) = seq
            .checked_sub(self.base)
            .and_then(|i| self.notes.get_mut(i as usize))
        {
            note.error = error;
        }
    }

    fn note(&self, seq: u64) -> Note {
        seq.checked_sub(self.base)
            .and_then(|i| self.notes.get(i as usize))
            .copied()
            .unwrap_or_default()
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.notes.capacity() * std::mem::size_of::<Note>()
    }
}

/// The live run of failures, as the cascade judges it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Run {
    /// Failures in the run.
    pub failures: u32,
    /// Outcomes from its first failure to the newest.
    pub spread: u32,
    /// Sequence number of its first failure.
    pub start: u64,
    /// Failures with its most frequent signature.
    pub repeated: u32,
    /// Whether that signature's failures are permanent ones (with no signature at all:
    /// whether every failure is).
    pub permanent: bool,
}

/// The live run of failures ending at the newest outcome, if that outcome failed.
pub(crate) fn run(history: &History, track: &FailureTrack, max_gap: u32) -> Option<Run> {
    let records = history.records();
    // Back from the newest outcome to the first record of the run: at most `max_gap`
    // successes between two failures.
    let mut first = None;
    let mut gap = 0u32;
    for (i, r) in records.iter().enumerate().rev() {
        if r.outcome().is_none() {
            continue;
        }
        if r.failed() {
            first = Some(i);
            gap = 0;
        } else {
            // The newest outcome succeeded: no live run.
            first?;
            gap += 1;
            if gap > max_gap {
                break;
            }
        }
    }
    let first = first?;
    // Forward: a success on what a failed call of the run worked on ends the run there.
    let mut failed_work: Vec<u64> = Vec::new();
    let mut from = first;
    for (i, r) in records.iter().enumerate().skip(first) {
        if r.outcome().is_none() {
            continue;
        }
        let work = track.note(history.seq_of(i)).work;
        if r.failed() {
            if work != 0 && !failed_work.contains(&work) {
                failed_work.push(work);
            }
        } else if work != 0 && failed_work.contains(&work) {
            failed_work.clear();
            from = i + 1;
        }
    }
    let mut run = Run {
        permanent: true,
        ..Run::default()
    };
    // (signature, failures, permanent ones)
    let mut signatures: Vec<(u64, u32, u32)> = Vec::new();
    for (i, r) in records.iter().enumerate().skip(from) {
        if r.outcome().is_none() {
            continue;
        }
        if run.failures > 0 {
            run.spread += 1;
        }
        let Some(class) = r.failure() else { continue };
        let seq = history.seq_of(i);
        if run.failures == 0 {
            run.start = seq;
            run.spread = 1;
        }
        run.failures += 1;
        let permanent = class == FailureClass::Permanent;
        run.permanent &= permanent;
        let error = track.note(seq).error;
        if error == 0 {
            continue;
        }
        match signatures.iter_mut().find(|(s, _, _)| *s == error) {
            Some((_, n, p)) => {
                *n += 1;
                *p += u32::from(permanent);
            }
            None => signatures.push((error, 1, u32::from(permanent))),
        }
    }
    if run.failures == 0 {
        return None;
    }
    // The most frequent signature; between two as frequent, the more permanent one.
    if let Some(&(_, n, p)) = signatures.iter().max_by_key(|(_, n, p)| (*n, *p)) {
        run.repeated = n;
        run.permanent = 2 * p > n;
    }
    Some(run)
}

/// The cascade's finding for the call about to run.
pub(crate) fn cascade(history: &History, track: &FailureTrack, c: Cascade) -> Option<Finding> {
    let run = run(history, track, c.max_gap)?;
    let n = run.failures;
    let repeated = c.repeats == 0 || run.repeated >= c.repeats;
    let level =
        if repeated && (n >= c.levels.critical || (run.permanent && n >= c.permanent_threshold)) {
            Level::Critical
        } else if n >= c.levels.warning {
            Level::Warning
        } else {
            return None;
        };
    let mut f = Finding::new(level, Detector::ErrorCascade, n);
    f.cascade_start = run.start;
    f.spread = (run.spread > n).then_some(run.spread);
    f.repeated = (run.repeated > 1).then_some(run.repeated);
    Some(f)
}

//! loopguard's own detectors (the `loopguard.detectors` block), for the loops SPEC's
//! exact-repeat detectors miss:
//!
//! - `consecutive_repeat`: an unbroken run of one call pattern, whatever the outcomes
//!   (known polls exempt);
//! - `cycle`: the newest calls repeat a cycle of 2 to 6 distinct patterns; critical only
//!   when every position of the cycle keeps one outcome (ping-pong, generalised);
//! - `error_cascade`: consecutive failed outcomes, across any tools;
//! - `batch_duplicates`: a call identical to an earlier one of the same parallel batch.
//!
//! Each walks back from the newest record and stops at the first record that breaks its
//! pattern, so its cost grows with the pattern, not with the window.

use super::Finding;
use crate::config::extensions::{CycleLevels, Extensions, Levels};
use crate::fingerprint::{CallPrint, Fingerprint, Signature};
use crate::history::History;
use crate::verdict::{Detector, Level};

/// Runs the extension detectors; `batch_repeat` is the call's occurrence number within
/// its batch when an identical call came earlier in the batch.
pub(crate) fn detect(
    ext: &Extensions,
    history: &History,
    call: &CallPrint<'_>,
    batch_repeat: Option<u32>,
) -> Option<Finding> {
    let mut warning = None;
    let mut consider = |f: Option<Finding>| -> Option<Finding> {
        match f {
            Some(f) if f.level == Level::Critical => Some(f),
            Some(f) => {
                warning.get_or_insert(f);
                None
            }
            None => None,
        }
    };
    if let Some(n) = batch_repeat.filter(|_| ext.batch_duplicates) {
        return Some(Finding::new(Level::Critical, Detector::BatchDuplicates, n));
    }
    if let Some(levels) = ext.consecutive_repeat.filter(|_| !call.known_poll) {
        let n = consecutive(history, call.signature);
        if let Some(f) = consider(leveled(Detector::ConsecutiveRepeat, n, levels)) {
            return Some(f);
        }
    }
    if let Some(levels) = ext.cycle {
        if let Some(f) = consider(cycle(history, call.signature, levels)) {
            return Some(f);
        }
    }
    if let Some(levels) = ext.error_cascade {
        let (n, start) = failures(history);
        let found = leveled(Detector::ErrorCascade, n, levels).map(|mut f| {
            f.cascade_start = start;
            f
        });
        if let Some(f) = consider(found) {
            return Some(f);
        }
    }
    warning
}

fn leveled(detector: Detector, n: u32, levels: Levels) -> Option<Finding> {
    let level = if n >= levels.critical {
        Level::Critical
    } else if n >= levels.warning {
        Level::Warning
    } else {
        return None;
    };
    Some(Finding::new(level, detector, n))
}

/// Newest records of `signature` in an unbroken run (any state).
pub(crate) fn consecutive(history: &History, signature: Signature) -> u32 {
    history
        .records()
        .iter()
        .rev()
        .take_while(|r| r.signature() == signature)
        .count() as u32
}

/// Consecutive failed outcomes, newest first (pending records and vetoes are skipped),
/// and the sequence number of the oldest failure: a new cascade is a new warning.
pub(crate) fn failures(history: &History) -> (u32, u64) {
    let mut n = 0;
    let mut start = 0;
    for (i, r) in history.records().iter().enumerate().rev() {
        if r.outcome().is_none() {
            continue;
        }
        if !r.failed() {
            break;
        }
        n += 1;
        start = history.seq_of(i);
    }
    (n, start)
}

/// The longest-repeating cycle the current call would continue: for each length k, the
/// sequence (history + current call) is periodic with period k over its last P entries,
/// and one period holds k distinct signatures. `count` is the number of full repetitions.
pub(crate) fn cycle(
    history: &History,
    signature: Signature,
    levels: CycleLevels,
) -> Option<Finding> {
    let records = history.records();
    let n = records.len() + 1;
    let sig_at = |i: usize| {
        if i == n - 1 {
            signature
        } else {
            records[i].signature()
        }
    };
    let mut best: Option<(u32, usize)> = None; // (repetitions, k)
    for k in levels.min_length as usize..=levels.max_length as usize {
        if n < 2 * k {
            break;
        }
        // One period of distinct signatures.
        let distinct = (n - k..n).all(|i| (i + 1..n).all(|j| sig_at(i) != sig_at(j)));
        if !distinct {
            continue;
        }
        let mut run = 0;
        while run + k < n && sig_at(n - 1 - run) == sig_at(n - 1 - run - k) {
            run += 1;
        }
        let reps = ((run + k) / k) as u32;
        if reps >= 2 && best.is_none_or(|(r, _)| reps > r) {
            best = Some((reps, k));
        }
    }
    let (reps, k) = best?;
    if reps < levels.repeats.warning {
        return None;
    }
    let level = if reps >= levels.repeats.critical && stable(history, k, reps as usize * k - 1) {
        Level::Critical
    } else {
        Level::Warning
    };
    let mut f = Finding::new(level, Detector::Cycle, reps);
    f.cycle_len = k as u8;
    Some(f)
}

/// Whether each of the k positions of the cycle kept one outcome over the `span` newest
/// records (every one of them completed).
fn stable(history: &History, k: usize, span: usize) -> bool {
    let records = history.records();
    let mut seen: [Option<Fingerprint>; 6] = [None; 6];
    for (back, r) in records.iter().rev().take(span).enumerate() {
        // The current call is position 0; the newest record is position 1 (mod k).
        let position = (back + 1) % k;
        match (r.outcome(), seen[position]) {
            (None, _) => return false,
            (Some(fp), None) => seen[position] = Some(fp),
            (Some(fp), Some(s)) if fp == s => {}
            _ => return false,
        }
    }
    true
}

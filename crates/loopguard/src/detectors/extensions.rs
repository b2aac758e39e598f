//! loopguard's own detectors (the `loopguard.detectors` block), for the loops SPEC's
//! exact-repeat detectors miss:
//!
//! - `consecutive_repeat`: an unbroken run of one call pattern, whatever the outcomes
//!   (known polls exempt);
//! - `stale_repeat`: the same call returning the same outcome again and again, other calls
//!   in between (SPEC's no-progress streak at a threshold for agents, and lower still when
//!   the outcome is a permanent failure; known polls exempt unless they keep failing);
//! - `cycle`: the newest calls repeat a period of calls, whatever its steps ([`period`]);
//!   critical only when every position of the period keeps its outcome;
//! - `target_thrash`: failures piling up on one (tool, target) ([`thrash`]);
//! - `error_cascade`: a run of failed outcomes across any tools that repeats one failure
//!   ([`cascade`]);
//! - `batch_duplicates`: a call identical to an earlier one of the same parallel batch.
//!
//! Each walks back from the newest record and stops at the first record that breaks its
//! pattern, or reads counters kept as records come in.
//!
//! [`period`]: super::period
//! [`thrash`]: super::thrash
//! [`cascade`]: super::cascade

use super::cascade::{self, FailureTrack};
use super::period::PeriodTrack;
use super::thrash::Targets;
use super::Finding;
use crate::config::extensions::{CycleLevels, Extensions, Levels, StaleLevels};
use crate::fingerprint::{CallPrint, Signature};
use crate::history::History;
use crate::policy::FailureClass;
use crate::verdict::{Detector, Level};

/// What the extension detectors look at for one call.
pub(crate) struct Context<'a> {
    pub history: &'a History,
    pub call: &'a CallPrint<'a>,
    /// The newest record of the call's signature.
    pub newest: Option<usize>,
    /// The call's copy number within its batch, when an identical call came earlier in it.
    pub batch_repeat: Option<u32>,
    /// The period track, synced with the history (when `cycle` is on).
    pub period: &'a PeriodTrack,
    /// The longest period the track follows (`cycle.maxLength`, capped at `historySize`).
    pub max_period: u32,
    /// The (tool, target) keys of the history's records, and the call's.
    pub targets: &'a Targets,
    pub target: Option<u64>,
    /// What the calls of the history worked on and how they failed (when `error_cascade`
    /// is on).
    pub failures: &'a FailureTrack,
}

/// Runs the extension detectors: the first critical finding, else the first warning.
pub(crate) fn detect(ext: &Extensions, cx: &Context<'_>) -> Option<Finding> {
    if let Some(n) = cx.batch_repeat.filter(|_| ext.batch_duplicates) {
        return Some(Finding::new(Level::Critical, Detector::BatchDuplicates, n));
    }
    let call = cx.call;
    // The first critical finding decides; the first warning is kept until then. Each
    // detector runs only when none before it blocked.
    let mut warning = None;
    let mut consider = |f: Option<Finding>| match f {
        Some(f) if f.level == Level::Critical => Some(f),
        Some(f) => {
            warning.get_or_insert(f);
            None
        }
        None => None,
    };
    if let Some(levels) = ext.consecutive_repeat.filter(|_| !call.known_poll) {
        let n = consecutive(cx.history, call.signature);
        if let Some(f) = consider(leveled(Detector::ConsecutiveRepeat, n, levels)) {
            return Some(f);
        }
    }
    if let Some(levels) = ext.stale_repeat {
        // A known poll may return the same "still running" many times; one that keeps
        // failing the same way is a failing repeat like any other call.
        let finding = stale(cx.history, cx.newest, levels).filter(|f| !call.known_poll || f.failed);
        if let Some(f) = consider(finding) {
            return Some(f);
        }
    }
    if let Some(levels) = ext.cycle {
        if let Some(f) = consider(cycle(cx.period, call.signature, levels, cx.max_period)) {
            return Some(f);
        }
    }
    if let (Some(levels), Some(key)) = (ext.target_thrash, cx.target) {
        let n = cx.targets.failures(cx.history, key);
        if let Some(f) = consider(leveled(Detector::TargetThrash, n, levels)) {
            return Some(f);
        }
    }
    if let Some(c) = ext.error_cascade {
        if let Some(f) = consider(cascade::cascade(cx.history, cx.failures, c)) {
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

/// Earlier calls of the signature that returned its newest outcome, in a row (pending
/// calls and vetoes skipped, other calls in between ignored); blocks sooner when that
/// outcome is a permanent failure: an identical error does not go away by itself (a
/// timeout may).
fn stale(history: &History, newest: Option<usize>, levels: StaleLevels) -> Option<Finding> {
    let mut latest = None;
    let mut failure = None;
    let mut n = 0;
    for (_, r) in history.chain_from(newest) {
        let Some(fp) = r.outcome() else { continue };
        match latest {
            None => {
                latest = Some(fp);
                failure = r.failure();
            }
            Some(l) if l != fp => break,
            Some(_) => {}
        }
        n += 1;
    }
    let failed = failure.is_some();
    let critical = match failure {
        Some(FailureClass::Permanent) => levels.failure_critical,
        _ => levels.levels.critical,
    };
    let level = if n >= critical {
        Level::Critical
    } else if n >= levels.levels.warning {
        Level::Warning
    } else {
        return None;
    };
    let mut f = Finding::new(level, Detector::StaleRepeat, n);
    f.failed = failed;
    Some(f)
}

/// The shortest period the current call continues with enough repetitions; critical when
/// it has the repetitions to block and every position kept its outcome.
fn cycle(
    track: &PeriodTrack,
    signature: Signature,
    levels: CycleLevels,
    max_period: u32,
) -> Option<Finding> {
    if max_period < levels.min_length {
        return None;
    }
    let period = track.find(signature, levels.min_length, levels.warning_repeats)?;
    let level = if period.repeats >= levels.critical_repeats && track.stable(period.length) {
        Level::Critical
    } else {
        Level::Warning
    };
    let mut f = Finding::new(level, Detector::Cycle, period.repeats);
    f.cycle_len = period.length;
    Some(f)
}

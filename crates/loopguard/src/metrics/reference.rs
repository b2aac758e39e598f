//! The metrics of SPEC §4 computed the plain way: scanning the whole window, exactly as the
//! SPEC words them. The engine uses the incremental versions in the parent module; these
//! stay as the reference the property tests compare them with.

use super::{PingPong, Streak};
use crate::fingerprint::{Fingerprint, Signature};
use crate::history::{History, RecordState};

/// Newest to oldest over the signature's records, pending ones skipped: the first outcome
/// starts the streak, each further identical one adds to it, a different one ends it.
/// Vetoes count once an outcome at least as old continues the streak; with no outcome at
/// all, the streak is the number of vetoes.
pub fn no_progress_streak(history: &History, signature: Signature) -> Streak {
    let mut count = 0u32;
    let mut vetoes = 0u32;
    let mut latest: Option<Fingerprint> = None;
    for r in history
        .records()
        .iter()
        .rev()
        .filter(|r| r.signature() == signature)
    {
        match r.state() {
            RecordState::Pending => {}
            RecordState::Veto => vetoes += 1,
            RecordState::Done(fp) => match latest {
                None => {
                    latest = Some(fp);
                    count = 1 + vetoes;
                    vetoes = 0;
                }
                Some(l) if l == fp => {
                    count += 1 + vetoes;
                    vetoes = 0;
                }
                Some(_) => break,
            },
        }
    }
    if latest.is_none() {
        count = vetoes;
    }
    Streak { count, latest }
}

/// Records of the signature in the window: pending, completed or vetoed.
pub fn repeat_count(history: &History, signature: Signature) -> u32 {
    history
        .records()
        .iter()
        .filter(|r| r.signature() == signature)
        .count() as u32
}

/// `last` = newest record; `other` = newest earlier record of a different signature. The
/// tail reads last, other, last, … backwards; it counts when it is at least 2 long and the
/// current call has `other`'s signature.
pub fn ping_pong(history: &History, signature: Signature) -> PingPong {
    let records = history.records();
    let Some(last) = records.back() else {
        return PingPong::default();
    };
    let Some(other) = records
        .iter()
        .rev()
        .skip(1)
        .find(|r| r.signature() != last.signature())
    else {
        return PingPong::default();
    };
    let (a, b) = (last.signature(), other.signature());
    let tail = records
        .iter()
        .rev()
        .enumerate()
        .take_while(|(i, r)| r.signature() == if i.is_multiple_of(2) { a } else { b })
        .count();
    if tail < 2 || signature != b {
        return PingPong::default();
    }
    let mut sides: [Option<Fingerprint>; 2] = [None, None];
    let mut no_progress = true;
    for r in records.iter().rev().take(tail) {
        let side = usize::from(r.signature() != a);
        match (r.outcome(), sides[side]) {
            (None, _) => no_progress = false,
            (Some(fp), None) => sides[side] = Some(fp),
            (Some(fp), Some(seen)) if fp == seen => {}
            (Some(_), Some(_)) => no_progress = false,
        }
        if !no_progress {
            break;
        }
    }
    PingPong {
        count: tail as u32 + 1,
        paired: Some((a, last.tool())),
        no_progress: no_progress && sides[0].is_some() && sides[1].is_some(),
    }
}

//! The metrics of SPEC §4, measured over a scope's history for the call about to run (the
//! call itself is not in the history yet).
//!
//! Each metric follows only what it needs: the records of one signature (linked newest to
//! oldest), the counts kept by the history, or the newest records. Their cost grows with
//! the pattern being measured, not with the window; `reference` (built for tests) computes the same values
//! by scanning the window, and the property tests hold the two equal.

#[cfg(test)]
mod reference;

use crate::fingerprint::{Fingerprint, Signature};
use crate::history::{History, NameId, RecordState};

/// The no-progress streak of a signature and the outcome it repeats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    /// Identical outcomes in a row (calls of other signatures in between do not break
    /// it), plus the vetoes that extend them.
    pub count: u32,
    /// The newest outcome fingerprint of the signature, if any.
    pub latest: Option<Fingerprint>,
}

/// Newest to oldest over the signature's records, pending ones skipped: the first outcome
/// starts the streak, each further identical one adds to it, a different one ends it.
/// Vetoes count once an outcome at least as old continues the streak; with no outcome at
/// all, the streak is the number of vetoes.
#[cfg(test)]
pub fn no_progress_streak(history: &History, signature: Signature) -> Streak {
    streak_from(history, history.newest_of(signature))
}

/// [`no_progress_streak`], given the signature's newest record.
pub(crate) fn streak_from(history: &History, newest: Option<usize>) -> Streak {
    let mut count = 0u32;
    let mut vetoes = 0u32;
    let mut latest: Option<Fingerprint> = None;
    for (_, r) in history.chain_from(newest) {
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
#[cfg(test)]
pub fn repeat_count(history: &History, signature: Signature) -> u32 {
    history.count_of(signature)
}

/// Consecutive newest records of `tool` that failed because one unavailable tool was
/// missing (veto records are skipped), and that missing tool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnknownToolStreak {
    /// How many.
    pub count: u32,
    /// The missing tool.
    pub missing: Option<NameId>,
}

/// See [`UnknownToolStreak`]. Walks back from the newest record and stops at the first
/// record that does not continue the streak (so it needs no incremental version).
pub fn unknown_tool_streak(history: &History, tool: Option<NameId>) -> UnknownToolStreak {
    let mut streak = UnknownToolStreak::default();
    let Some(tool) = tool else { return streak };
    for r in history.records().iter().rev().filter(|r| !r.is_veto()) {
        match (r.tool() == tool, r.unknown_tool(), streak.missing) {
            (true, Some(u), None) => {
                streak.missing = Some(u);
                streak.count = 1;
            }
            (true, Some(u), Some(m)) if u == m => streak.count += 1,
            _ => break,
        }
    }
    streak
}

/// An alternation between two call patterns that the current call would continue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PingPong {
    /// Alternating tail length + 1 (the current call), or 0 when there is none.
    pub count: u32,
    /// The newest record's signature and tool: the other side of the pair.
    pub paired: Option<(Signature, NameId)>,
    /// Every tail record has an outcome, each side one stable outcome.
    pub no_progress: bool,
}

/// `last` = newest record; `other` = newest earlier record of a different signature. The
/// tail reads last, other, last, … backwards; it counts when it is at least 2 long and the
/// current call has `other`'s signature. The tail length is kept by the history; the
/// evidence walk stops at the first record that disproves it.
pub fn ping_pong(history: &History, signature: Signature) -> PingPong {
    let tail = history.alternating_tail();
    let records = history.records();
    if tail < 2 {
        return PingPong::default();
    }
    let last = &records[records.len() - 1];
    let other = &records[records.len() - 2];
    if signature != other.signature() {
        return PingPong::default();
    }
    let a = last.signature();
    let mut sides: [Option<Fingerprint>; 2] = [None, None];
    let mut no_progress = true;
    for r in records.iter().rev().take(tail) {
        let side = usize::from(r.signature() != a);
        match (r.outcome(), sides[side]) {
            (Some(fp), None) => sides[side] = Some(fp),
            (Some(fp), Some(seen)) if fp == seen => {}
            _ => {
                no_progress = false;
                break;
            }
        }
    }
    PingPong {
        count: tail as u32 + 1,
        paired: Some((a, last.tool())),
        no_progress: no_progress && sides[0].is_some() && sides[1].is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigSet, LoopDetectionBlock};
    use crate::fingerprint::{CallPrint, Outcome};
    use crate::run::RunState;
    use crate::{Call, CallRef, Millis, Scope};
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[derive(Clone, Debug)]
    enum Step {
        Call {
            tool: u8,
            args: u8,
            id: u8,
        },
        Result {
            tool: u8,
            args: u8,
            id: Option<u8>,
            outcome: u8,
        },
        Compaction,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (0..4u8, 0..3u8, 0..40u8).prop_map(|(tool, args, id)| Step::Call { tool, args, id }),
            5 => (0..4u8, 0..3u8, prop::option::of(0..40u8), 0..7u8)
                .prop_map(|(tool, args, id, outcome)| Step::Result { tool, args, id, outcome }),
            1 => Just(Step::Compaction),
        ]
    }

    const TOOLS: [&str; 4] = ["read", "process", "exec", "list"];

    fn outcome(n: u8) -> (bool, Value) {
        match n {
            0 => (false, json!("same")),
            1 => (false, json!("other")),
            2 => (true, json!("Unknown tool: ghost")),
            3 => (true, json!("Tool phantom not found")),
            4 => (
                false,
                json!({"details": {"status": "blocked", "deniedReason": "tool-loop"}}),
            ),
            5 => (true, json!("boom")),
            _ => (false, json!({"content": [{"type": "text", "text": "x"}]})),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The incremental metrics equal the reference scans on random streams, across
        /// evictions, vetoes, out-of-order results and both sides of the index threshold.
        #[test]
        fn fast_metrics_equal_the_reference(
            steps in prop::collection::vec(step(), 1..400),
            history in prop_oneof![1u32..10, 60u32..80, 120u32..160],
            thresholds in (1u32..6, 2u32..9, 3u32..12, 1u32..5),
        ) {
            let (w, c, g, u) = thresholds;
            let set = ConfigSet::from_blocks(
                LoopDetectionBlock {
                    enabled: Some(true),
                    history_size: Some(history),
                    warning_threshold: Some(w),
                    critical_threshold: Some(c),
                    global_circuit_breaker_threshold: Some(g),
                    unknown_tool_threshold: Some(u),
                    ..Default::default()
                },
                [],
            );
            let cfg = set.global();
            let mut run = RunState::default();
            let mut session = crate::SessionState::default();
            let scope = Scope::new("s");
            for (now, step) in steps.iter().enumerate() {
                let now = now as u64;
                match step {
                    Step::Call { tool, args, id } => {
                        let args = json!({ "a": args });
                        let print = CallPrint::new(TOOLS[*tool as usize], &args);
                        let h = run.history();
                        let sig = print.signature;
                        prop_assert_eq!(no_progress_streak(h, sig), reference::no_progress_streak(h, sig));
                        prop_assert_eq!(repeat_count(h, sig), reference::repeat_count(h, sig));
                        prop_assert_eq!(ping_pong(h, sig), reference::ping_pong(h, sig));
                        let id = format!("c{id}");
                        let call = Call::new(TOOLS[*tool as usize], &args).with_id(Some(&id));
                        run.begin(&mut session, cfg, &scope, &call, Millis::new(now)).cancel();
                    }
                    Step::Result { tool, args, id, outcome: n } => {
                        let args = json!({ "a": args });
                        let (is_error, value) = outcome(*n);
                        let out = if is_error { Outcome::Error(&value) } else { Outcome::Result(&value) };
                        let id = id.map(|i| format!("c{i}"));
                        let call = Call::new(TOOLS[*tool as usize], &args).with_id(id.as_deref());
                        let ticket = run.resume(cfg, &scope, CallRef::Call(call));
                        prop_assert!(run.finish(&mut crate::SessionState::default(), cfg, ticket, out, Millis::new(now)).is_ok());
                    }
                    Step::Compaction => {
                        run.compaction(cfg, &scope, Millis::new(now));
                    }
                }
                prop_assert!(run.history().len() <= history as usize);
            }
            // A state read back from bytes answers the same.
            let back = RunState::from_bytes(&run.to_bytes()).unwrap();
            prop_assert_eq!(&back, &run);
            for t in TOOLS {
                for a in 0..3 {
                    let args = json!({ "a": a });
                    let sig = CallPrint::new(t, &args).signature;
                    prop_assert_eq!(no_progress_streak(back.history(), sig), reference::no_progress_streak(run.history(), sig));
                    prop_assert_eq!(repeat_count(back.history(), sig), reference::repeat_count(run.history(), sig));
                }
            }
        }
    }
}

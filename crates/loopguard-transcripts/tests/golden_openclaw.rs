//! Golden test against the real OpenClaw detector.
//!
//! `openclaw-derived/anchor-call-streams.json` holds per-call streams of real OpenClaw
//! sessions; `replay-results.json` holds the verdicts the shipped OpenClaw detector gave
//! them (`tools.loopDetection: {enabled: true}`). Read through this crate's reader and
//! replayed through loopguard with detection on and default thresholds, the streams must
//! give the same verdicts up to and including the first block. After the first block the
//! two differ on purpose (SPEC §8), as explained in `p1_r5_after_the_first_block`.
//!
//! The corpus is read in place from the shared folder (`LOOPGUARD_SHARED_DIR`, else
//! `../shared` beside the repository); without it these tests print SKIPPED and pass.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use loopguard::{ConfigSet, Detector, Level, Verdict};
use loopguard_events::{Answer, Event, OwnedOutcome, Replayer};
use loopguard_transcripts::{read, Format, Item, Pos, ReadOptions};
use serde_json::Value;

fn derived(name: &str) -> Option<PathBuf> {
    let shared = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let path = shared.join("corpus/openclaw-derived").join(name);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} not found (set LOOPGUARD_SHARED_DIR to the shared folder)",
            path.display()
        );
        None
    }
}

/// The events of one stream (by session id), in order.
fn stream_events(session: &str) -> Option<Vec<Event>> {
    let path = derived("anchor-call-streams.json")?;
    let mut items: Vec<(Pos, Item)> = Vec::new();
    let stats = read(
        Format::OpenClawCalls,
        BufReader::new(File::open(path).unwrap()),
        &ReadOptions::new("anchor-call-streams"),
        &mut items,
    )
    .unwrap();
    assert!(stats.skipped.is_empty(), "{:?}", stats.skipped);
    Some(
        items
            .into_iter()
            .filter_map(|(_, item)| match item {
                Item::Event(e) if e.ids().session == session => Some(e),
                _ => None,
            })
            .collect(),
    )
}

/// One verdict: (ordinal, level, detector, count).
type Verdicts = Vec<(u64, Level, Detector, u32)>;

/// Replays events with detection on and default thresholds; returns the warn/block
/// verdicts by call ordinal (1-based) and the aborts by call ordinal.
fn replay(events: &[Event]) -> (Verdicts, Vec<(u64, u32)>) {
    let mut replayer = Replayer::new(ConfigSet::enabled_defaults(), None);
    let mut ordinal = 0;
    let mut verdicts = Vec::new();
    let mut aborts = Vec::new();
    for (seq, event) in events.iter().enumerate() {
        if matches!(event, Event::Call { .. }) {
            ordinal += 1;
        }
        match replayer.apply(seq as u64 + 1, &event.as_ref()) {
            Answer::Call {
                verdict: Verdict::Warn { detection, .. } | Verdict::Block { detection, .. },
                ..
            } => verdicts.push((
                ordinal,
                detection.level,
                detection.detector,
                detection.count,
            )),
            Answer::Result {
                recorded:
                    loopguard::Recorded {
                        abort: Some(abort), ..
                    },
                ..
            } => aborts.push((ordinal, abort.count)),
            _ => {}
        }
    }
    (verdicts, aborts)
}

fn golden() -> Option<Value> {
    let path = derived("replay-results.json")?;
    Some(serde_json::from_reader(File::open(path).unwrap()).unwrap())
}

fn level(v: &Value) -> Level {
    match v["level"].as_str() {
        Some("warning") => Level::Warning,
        _ => Level::Critical,
    }
}

fn detector(v: &Value) -> Detector {
    serde_json::from_value(v["detector"].clone()).unwrap()
}

#[test]
fn p1_r5_first_warning_and_first_block_match_openclaw() {
    let (Some(events), Some(golden)) = (
        stream_events("dd7d0e87-5311-475d-af2c-386d309920a3"),
        golden(),
    ) else {
        return;
    };
    let golden = &golden["P1-r5"];
    let calls = events
        .iter()
        .filter(|e| matches!(e, Event::Call { .. }))
        .count();
    assert_eq!(calls as u64, golden["observedCalls"].as_u64().unwrap());
    let (verdicts, aborts) = replay(&events);
    assert!(aborts.is_empty());

    let first_warning = verdicts.iter().find(|v| v.1 == Level::Warning).unwrap();
    let w = &golden["firstWarning"];
    assert_eq!(
        *first_warning,
        (
            w["ordinal"].as_u64().unwrap(),
            level(w),
            detector(w),
            w["count"].as_u64().unwrap() as u32
        )
    );
    let first_block = verdicts.iter().find(|v| v.1 == Level::Critical).unwrap();
    let c = &golden["firstCritical"];
    assert_eq!(
        *first_block,
        (
            c["ordinal"].as_u64().unwrap(),
            level(c),
            detector(c),
            c["count"].as_u64().unwrap() as u32
        )
    );
    assert_eq!(
        *first_block,
        (24, Level::Critical, Detector::GenericRepeat, 20)
    );

    // Every verdict up to the first block is OpenClaw's, ordinal for ordinal, count for count
    // (the warnings at 13..23, with 21 skipped because it was another call).
    let before: Vec<(u64, Level, u32)> = verdicts
        .iter()
        .take_while(|v| v.0 <= first_block.0)
        .map(|v| (v.0, v.1, v.3))
        .collect();
    let expected: Vec<(u64, Level, u32)> = golden["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["ordinal"].as_u64().unwrap(),
                level(e),
                e["count"].as_u64().unwrap() as u32,
            )
        })
        .take_while(|e| e.0 <= first_block.0)
        .collect();
    assert_eq!(before, expected);
    assert_eq!(before.len(), 11);
}

/// After the first block, loopguard and the shipped detector part ways by design (SPEC §8):
///
/// - OpenClaw ends the run at its second critical (ordinal 27); its recorded events go on
///   because the stream was replayed offline, with counts that fall as old calls leave its
///   window of 30 recorded calls (23 → 20 over ordinals 35–51), since a blocked call
///   leaves no record there.
/// - loopguard records every blocked call as a veto and vetoes extend the no-progress
///   streak (SPEC §4, §8), so a retried blocked call stays blocked, and the global circuit
///   breaker (30) stops the run once the streak reaches it; from then on every call of the
///   run is blocked with `terminal: true`, exec and progress calls included.
///
/// What must hold: every later identical `read` is blocked (as in OpenClaw, whose 97
/// criticals are all that read), the breaker fires exactly when the streak reaches 30, and
/// the run stays stopped.
#[test]
fn p1_r5_after_the_first_block() {
    let (Some(events), Some(golden)) = (
        stream_events("dd7d0e87-5311-475d-af2c-386d309920a3"),
        golden(),
    ) else {
        return;
    };
    let (verdicts, _) = replay(&events);
    let read_ordinals: Vec<u64> = {
        let mut ordinal = 0;
        let mut out = Vec::new();
        for e in &events {
            if let Event::Call { tool, args, .. } = e {
                ordinal += 1;
                if tool == "read"
                    && args["path"]
                        .as_str()
                        .is_some_and(|p| p.contains('\u{2026}'))
                {
                    out.push(ordinal);
                }
            }
        }
        out
    };
    assert_eq!(read_ordinals.len(), 117);
    let blocked: Vec<u64> = verdicts
        .iter()
        .filter(|v| v.1 == Level::Critical)
        .map(|v| v.0)
        .collect();
    for ordinal in read_ordinals.iter().filter(|&&o| o >= 24) {
        assert!(
            blocked.contains(ordinal),
            "read at ordinal {ordinal} should be blocked"
        );
    }
    assert_eq!(
        golden["P1-r5"]["criticals"].as_u64().unwrap(),
        read_ordinals.iter().filter(|&&o| o >= 24).count() as u64,
        "OpenClaw's criticals are exactly the identical reads from ordinal 24 on"
    );
    let breaker = verdicts
        .iter()
        .find(|v| v.2 == Detector::GlobalCircuitBreaker)
        .expect("the global breaker stops the run");
    assert_eq!((breaker.1, breaker.3), (Level::Critical, 30));
    let after: Vec<_> = verdicts.iter().filter(|v| v.0 > breaker.0).collect();
    assert!(after.iter().all(|v| v.2 == Detector::GlobalCircuitBreaker));
    let calls_after = events
        .iter()
        .filter(|e| matches!(e, Event::Call { .. }))
        .count() as u64
        - breaker.0;
    assert_eq!(
        after.len() as u64,
        calls_after,
        "every call after the stop is blocked"
    );
}

/// P2-r7: OpenClaw's rolling detectors stayed quiet, and so do loopguard's; the real run
/// was ended by the post-compaction guard instead. The stream carries no compaction
/// marker (it happened between ordinals 13 and 14, FORMATS §4), and the result of the
/// third identical read after it is recorded as "Aborted": the runtime replaced it when
/// the guard fired. With the compaction put back and that result restored to the error the
/// two reads before it returned, loopguard's guard aborts at the same call.
#[test]
fn p2_r7_quiet_detectors_and_the_post_compaction_abort() {
    let (Some(events), Some(golden)) = (
        stream_events("083ea86c-9602-4aff-a9c3-e84d8225f0e0"),
        golden(),
    ) else {
        return;
    };
    assert!(golden["P2-r7"]["firstWarning"].is_null());
    assert!(golden["P2-r7"]["firstCritical"].is_null());
    let (verdicts, aborts) = replay(&events);
    assert!(verdicts.is_empty(), "{verdicts:?}");
    assert!(
        aborts.is_empty(),
        "no compaction in the stream, so nothing to abort"
    );

    let mut restored = Vec::new();
    let mut ordinal = 0;
    let mut error_15 = None;
    for event in events {
        if let Event::Call { ids, .. } = &event {
            ordinal += 1;
            if ordinal == 14 {
                restored.push(Event::Compaction { ids: ids.clone() });
            }
        }
        match event {
            Event::Result {
                outcome: OwnedOutcome::Error(e),
                ids,
                call_id,
                tool,
                args,
            } if ordinal == 16 => {
                assert_eq!(e, "Aborted");
                let outcome = OwnedOutcome::Error(error_15.clone().unwrap());
                restored.push(Event::Result {
                    ids,
                    call_id,
                    tool,
                    args,
                    outcome,
                });
            }
            Event::Result {
                outcome: OwnedOutcome::Error(e),
                ids,
                call_id,
                tool,
                args,
            } => {
                if ordinal == 15 {
                    error_15 = Some(e.clone());
                }
                restored.push(Event::Result {
                    ids,
                    call_id,
                    tool,
                    args,
                    outcome: OwnedOutcome::Error(e),
                });
            }
            other => restored.push(other),
        }
    }
    let (verdicts, aborts) = replay(&restored);
    assert!(verdicts.is_empty());
    assert_eq!(
        aborts,
        [(16, 3)],
        "tool read repeated 3 times within 3 attempts after the compaction"
    );
}

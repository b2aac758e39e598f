//! Laws the engine must keep, checked on random inputs.

use loopguard::config::{ConfigSet, DetectorsBlock, LoopDetectionBlock};
use loopguard::fingerprint::{args_fingerprint, Fingerprint};
use loopguard::{
    Call, CallRef, Detector, Guard, Limits, ManualClock, Millis, Outcome, Recorded, ResultError,
    Scope, Verdict,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Number, Value};

/// Arbitrary JSON values, a few levels deep.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| Value::Number(i.into())),
        any::<u64>().prop_map(|u| Value::Number(u.into())),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z \\u{e9}\\u{1F600}\"\\\\]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-e]{1,3}", inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON text of `v` with every object's members in an order chosen by `seed`.
fn shuffled_text(v: &Value, seed: &mut u64) -> String {
    let mut next = || {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    };
    fn go(v: &Value, next: &mut dyn FnMut() -> u64, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut members: Vec<_> = map.iter().collect();
                for i in (1..members.len()).rev() {
                    let j = (next() as usize) % (i + 1);
                    members.swap(i, j);
                }
                out.push('{');
                for (i, (k, v)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(k).unwrap());
                    out.push(':');
                    go(v, next, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go(item, next, out);
                }
                out.push(']');
            }
            // Integral doubles are written as integers or with an exponent at random.
            Value::Number(n)
                if n.is_f64() && n.as_f64().unwrap().fract() == 0.0 && next().is_multiple_of(2) =>
            {
                out.push_str(&format!("{:e}", n.as_f64().unwrap()));
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    go(v, &mut next, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Member order and number spelling never change a fingerprint.
    #[test]
    fn key_order_never_changes_a_fingerprint(v in json(), seed in any::<u64>()) {
        let mut s = seed;
        let text = shuffled_text(&v, &mut s);
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(Fingerprint::of(&v), Fingerprint::of(&reparsed));
        prop_assert_eq!(args_fingerprint("read", &v), args_fingerprint("read", &reparsed));
    }

    /// Different values (as JSON values) get different fingerprints.
    #[test]
    fn different_values_differ(a in json(), b in json()) {
        prop_assume!(a != b);
        // `1` and `1.0` are equal values but unequal `Value`s; compare canonical texts.
        let same_value = loopguard::canonical::json_text(&a) == loopguard::canonical::json_text(&b);
        prop_assert_eq!(same_value, Fingerprint::of(&a) == Fingerprint::of(&b));
    }
}

/// A random event stream over a few tools and argument sets.
#[derive(Clone, Debug)]
enum Step {
    Call { tool: usize, args: usize },
    Compaction,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            12 => (0..4usize, 0..3usize).prop_map(|(tool, args)| Step::Call { tool, args }),
            1 => Just(Step::Compaction),
        ],
        1..300,
    )
}

const TOOLS: [&str; 4] = ["read", "process", "command_status", "message"];

fn args_for(tool: &str, n: usize) -> Value {
    match tool {
        "process" => {
            let action = ["poll", "log", "poll"][n];
            serde_json::json!({"action": action, "sessionId": n})
        }
        "message" => serde_json::json!({"action": "send", "to": "x", "text": n}),
        _ => serde_json::json!({ "n": n }),
    }
}

fn config(history: u32, w: u32, c: u32, g: u32) -> ConfigSet {
    ConfigSet::from_blocks(
        LoopDetectionBlock {
            enabled: Some(true),
            history_size: Some(history),
            warning_threshold: Some(w),
            critical_threshold: Some(c),
            global_circuit_breaker_threshold: Some(g),
            detectors: DetectorsBlock::default(),
            ..Default::default()
        },
        [],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Outcomes that keep changing never make a no-progress detector block, and the history
    /// never holds more than `historySize` records.
    ///
    /// The critical threshold starts at 4: a ping-pong count of 3 has a tail of one record
    /// per side, and one record is all the "stable outcome" evidence SPEC §4 asks for.
    #[test]
    fn changing_outcomes_never_block(
        steps in steps(),
        history in 1u32..40,
        w in 1u32..6,
        c in 4u32..10,
        g in 1u32..12,
    ) {
        let mut guard = Guard::with_clock(config(history, w, c, g), Limits::default(), ManualClock::new(Millis::ZERO));
        let scope = Scope::new("s").with_run(Some("r"));
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Compaction => {
                    guard.on_compaction(&scope);
                }
                Step::Call { tool, args } => {
                    let tool = TOOLS[*tool];
                    let args = args_for(tool, *args);
                    let id = format!("c{i}");
                    let call = Call::new(tool, &args).with_id(Some(&id));
                    let ticket = guard.begin(&scope, &call);
                    if let Verdict::Block { detection, .. } = ticket.verdict() {
                        prop_assert!(
                            !matches!(
                                detection.detector,
                                Detector::GenericRepeat
                                    | Detector::KnownPollNoProgress
                                    | Detector::PingPong
                                    | Detector::GlobalCircuitBreaker
                                    | Detector::CompactionLoopPersisted
                            ),
                            "step {i}: {detection:?}"
                        );
                    }
                    // Every outcome is new: progress, in every field the rules keep.
                    let result = serde_json::json!({
                        "content": [{"type": "text", "text": format!("output {i}")}],
                        "details": {"status": "running", "aggregated": format!("{i}"), "ok": i},
                    });
                    let recorded = guard.finish(ticket, Outcome::Result(&result));
                    prop_assert!(recorded.abort.is_none());
                }
            }
            let len = guard.run_state(&scope).map_or(0, |s| s.history().len());
            prop_assert!(len <= history as usize, "{len} records with historySize {history}");
        }
    }

    /// With identical outcomes, a repeated call is blocked no later than the critical
    /// threshold allows, and a stopped run stays stopped.
    #[test]
    fn identical_outcomes_block_and_stop(repeats in 1usize..80) {
        let mut guard = Guard::with_clock(config(30, 10, 20, 30), Limits::default(), ManualClock::new(Millis::ZERO));
        let scope = Scope::new("s");
        let args = serde_json::json!({"p": 1});
        let mut first_block = None;
        let mut stopped = false;
        for i in 0..repeats {
            let id = format!("c{i}");
            let call = Call::new("read", &args).with_id(Some(&id));
            let ticket = guard.begin(&scope, &call);
            match ticket.verdict() {
                Verdict::Block { terminal, .. } => {
                    first_block.get_or_insert(i);
                    if stopped {
                        prop_assert!(*terminal);
                    }
                    stopped |= *terminal;
                }
                _ => prop_assert!(!stopped, "a stopped run allowed call {i}"),
            }
            let out = serde_json::json!("same");
            // The outcome of a blocked call is ignored: finishing its ticket records nothing.
            guard.finish(ticket, Outcome::Result(&out));
        }
        if repeats > 20 {
            prop_assert_eq!(first_block, Some(20));
        } else {
            prop_assert_eq!(first_block, None);
        }
    }
}

/// Random streams for the extension laws: a few tools, arguments, outcomes and batches.
#[derive(Clone, Debug)]
struct ExtStep {
    tool: usize,
    args: usize,
    outcome: u8,
    batch: Option<u8>,
    compaction: bool,
}

fn ext_steps() -> impl Strategy<Value = Vec<ExtStep>> {
    prop::collection::vec(
        (
            0..4usize,
            0..3usize,
            0..4u8,
            prop::option::of(0..3u8),
            prop::bool::weighted(0.03),
        )
            .prop_map(|(tool, args, outcome, batch, compaction)| ExtStep {
                tool,
                args,
                outcome,
                batch,
                compaction,
            }),
        1..250,
    )
}

/// Replays `steps` and returns every verdict; `changing` gives every outcome new content.
fn verdicts(config: &ConfigSet, steps: &[ExtStep], changing: bool) -> Vec<Verdict> {
    let mut guard = Guard::with_clock(
        config.clone(),
        Limits::default(),
        ManualClock::new(Millis::ZERO),
    );
    let scope = Scope::new("s").with_run(Some("r"));
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        if step.compaction {
            guard.on_compaction(&scope);
        }
        let tool = TOOLS[step.tool];
        let args = args_for(tool, step.args);
        let id = format!("c{i}");
        let batch = step.batch.map(|b| format!("b{}", i / 3 + b as usize));
        let call = Call::new(tool, &args)
            .with_id(Some(&id))
            .with_batch(batch.as_deref());
        let ticket = guard.begin(&scope, &call);
        let verdict = ticket.verdict().clone();
        if !verdict.is_blocked() {
            let result = if changing {
                // A meaningful change (a word count), not a volatile token.
                serde_json::json!({"content": [{"type": "text", "text": format!("{i} lines matched")}], "details": {"status": "running", "aggregated": format!("{i} lines")}})
            } else {
                serde_json::json!({"content": [{"type": "text", "text": format!("out {}", step.outcome)}]})
            };
            guard.finish(ticket, Outcome::Result(&result));
        }
        out.push(verdict);
    }
    out
}

const SPEC_CONFIG: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5, globalCircuitBreakerThreshold: 8, historySize: 20 } } }";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A `loopguard` block whose features are all off answers exactly like SPEC's engine.
    #[test]
    fn extensions_off_equal_the_spec_engine(steps in ext_steps()) {
        let spec = ConfigSet::parse(SPEC_CONFIG).unwrap();
        let off = ConfigSet::parse(&SPEC_CONFIG.replacen(
            "} } }",
            "} }, loopguard: { mode: 'enforce', masking: { enabled: false }, policy: { tools: [] }, detectors: { consecutiveRepeat: { enabled: false }, cycle: { enabled: false }, errorCascade: { enabled: false }, staleRepeat: { enabled: false }, targetThrash: { enabled: false }, escalation: { enabled: false }, batchDuplicates: { enabled: false } } } }",
            1,
        ))
        .unwrap();
        prop_assert!(off.global().extensions().is_some());
        prop_assert_eq!(verdicts(&spec, &steps, false), verdicts(&off, &steps, false));
    }

    /// With every extension on, outcomes that keep changing in a meaningful field never
    /// make an outcome-based detector block (consecutive runs, failures and batch
    /// duplicates do not look at outcomes, so they are not part of this law).
    #[test]
    fn changing_outcomes_never_block_with_extensions(steps in ext_steps()) {
        let config = ConfigSet::parse(&SPEC_CONFIG.replacen(
            "} } }",
            "} }, loopguard: { masking: {}, detectors: { consecutiveRepeat: { warningThreshold: 2, criticalThreshold: 1000 }, cycle: { warningRepeats: 2, criticalRepeats: 3 }, errorCascade: {}, batchDuplicates: { enabled: false } } } }",
            1,
        ))
        .unwrap();
        for (i, v) in verdicts(&config, &steps, true).iter().enumerate() {
            if let Verdict::Block { detection, .. } = v {
                prop_assert!(
                    !matches!(
                        detection.detector,
                        Detector::GenericRepeat
                            | Detector::KnownPollNoProgress
                            | Detector::PingPong
                            | Detector::GlobalCircuitBreaker
                            | Detector::Cycle
                            | Detector::CompactionLoopPersisted
                    ),
                    "step {i}: {detection:?}"
                );
            }
        }
    }

    /// Shadow mode never blocks, and reports a detection wherever enforce mode warns.
    #[test]
    fn shadow_mode_always_allows(steps in ext_steps()) {
        let enforce = ConfigSet::parse(&SPEC_CONFIG.replacen(
            "} } }",
            "} }, loopguard: { detectors: { consecutiveRepeat: {}, cycle: {}, batchDuplicates: {} } } }",
            1,
        ))
        .unwrap();
        let shadow = ConfigSet::parse(&SPEC_CONFIG.replacen(
            "} } }",
            "} }, loopguard: { mode: 'shadow', detectors: { consecutiveRepeat: {}, cycle: {}, batchDuplicates: {} } } }",
            1,
        ))
        .unwrap();
        let e = verdicts(&enforce, &steps, false);
        let s = verdicts(&shadow, &steps, false);
        for (i, (e, s)) in e.iter().zip(&s).enumerate() {
            prop_assert!(!s.is_blocked(), "step {i}: shadow blocked");
            prop_assert!(matches!(s, Verdict::Allow | Verdict::Shadow { .. }), "step {i}: {s:?}");
            // Until enforce mode first blocks, both modes see the same history. A run the
            // compaction guard aborted is reported on the result in shadow mode
            // (`would_abort`), not on the next call.
            if let Verdict::Block { detection, .. } = e {
                if detection.detector == Detector::CompactionLoopPersisted {
                    break;
                }
            }
            if e.is_blocked() {
                prop_assert!(matches!(s, Verdict::Shadow { detection, .. } if detection.level == loopguard::Level::Critical), "step {i}: {s:?}");
                break;
            }
            if let Verdict::Warn { detection, .. } = e {
                prop_assert!(matches!(s, Verdict::Shadow { detection: d, .. } if d == detection), "step {i}: {s:?}");
            }
        }
    }
}

/// One step of a stream whose results arrive late and out of order: a call, or the
/// result of the `n`-th oldest call still waiting for one.
#[derive(Clone, Debug)]
enum LateStep {
    Call { tool: usize, args: usize },
    Result { waiting: usize, by_id: bool },
    Compaction,
}

fn late_steps() -> impl Strategy<Value = Vec<LateStep>> {
    prop::collection::vec(
        prop_oneof![
            6 => (0..4usize, 0..2usize).prop_map(|(tool, args)| LateStep::Call { tool, args }),
            5 => (0..8usize, any::<bool>()).prop_map(|(waiting, by_id)| LateStep::Result { waiting, by_id }),
            1 => Just(LateStep::Compaction),
        ],
        1..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No result of a blocked call is ever recorded, whatever the window, the thresholds
    /// and the order results arrive in (SPEC §7), as long as fewer calls than
    /// `BLOCKED_IDS_KEPT` were blocked since; a result of a call that ran always is.
    #[test]
    fn results_of_blocked_calls_are_never_recorded(
        steps in late_steps(),
        history in 1u32..12,
        w in 1u32..4,
        c in 1u32..6,
        g in 1u32..8,
    ) {
        let mut guard = Guard::with_clock(config(history, w, c, g), Limits::default(), ManualClock::new(Millis::ZERO));
        let scope = Scope::new("s").with_run(Some("r"));
        // Calls waiting for their result: (id, tool, args, blocked), oldest first.
        let mut waiting: Vec<(String, usize, usize, bool)> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            match *step {
                LateStep::Call { tool, args } => {
                    let id = format!("c{i}");
                    let args_value = args_for(TOOLS[tool], args);
                    let call = Call::new(TOOLS[tool], &args_value).with_id(Some(&id));
                    // The ticket is left with the run, as a `call` event leaves it.
                    let blocked = guard.begin(&scope, &call).is_blocked();
                    waiting.push((id, tool, args, blocked));
                }
                LateStep::Result { waiting: n, by_id } => {
                    if waiting.is_empty() {
                        continue;
                    }
                    let (id, tool, args, blocked) = waiting.remove(n % waiting.len());
                    let args_value = args_for(TOOLS[tool], args);
                    let result = serde_json::json!("same");
                    let call = Call::new(TOOLS[tool], &args_value).with_id(Some(&id));
                    let named = if by_id { CallRef::Id(&id) } else { CallRef::Call(call) };
                    let recorded = result_event(&mut guard, &scope, named, Outcome::Result(&result));
                    match recorded {
                        Ok(r) => prop_assert_eq!(r.recorded, !blocked, "step {}: result of {} (blocked: {})", i, id, blocked),
                        // By id only, a call that ran but left the window is unknown: it
                        // is refused, never recorded.
                        Err(_) => prop_assert!(by_id && !blocked, "step {}: {} refused", i, id),
                    }
                }
                LateStep::Compaction => {
                    guard.on_compaction(&scope);
                }
            }
        }
    }
}

/// A `result` event as the protocol applies it: the ticket of the call it names, resumed
/// from the run, finished with `outcome`.
fn result_event(
    guard: &mut Guard<ManualClock>,
    scope: &Scope<'_>,
    call: CallRef<'_>,
    outcome: Outcome<'_>,
) -> Result<Recorded, ResultError> {
    guard.with_run(scope, |cfg, run, session, now| {
        let ticket = run.resume(cfg, scope, call);
        run.finish(session, cfg, ticket, outcome, now)
    })
}

/// The recommended preset over SPEC's small thresholds, with the given escalation limit.
fn preset(stop_after: u32) -> ConfigSet {
    ConfigSet::parse(&SPEC_CONFIG.replacen(
        "} } }",
        &format!("}} }}, loopguard: {{ preset: 'recommended', detectors: {{ escalation: {{ stopAfter: {stop_after} }}, targetThrash: {{ warningThreshold: 2, criticalThreshold: 3 }} }} }} }}"),
        1,
    ))
    .unwrap()
}

/// A call of the random streams below: a few tools, some with a target argument.
fn mixed_call(tool: usize, args: usize) -> (&'static str, Value) {
    const MIXED: [&str; 5] = ["read", "edit", "exec", "process", "list"];
    let tool = MIXED[tool];
    let args = match tool {
        "edit" => serde_json::json!({"path": format!("f{}", args % 2), "old": args}),
        "process" => args_for("process", args % 3),
        _ => serde_json::json!({ "n": args }),
    };
    (tool, args)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// With the recommended preset, outcomes that keep changing (and never fail) never
    /// make a detector that judges outcomes block: only runs of one call, duplicates in a
    /// batch, and the escalation of those can.
    #[test]
    fn changing_outcomes_never_block_with_the_preset(steps in ext_steps()) {
        for (i, v) in verdicts(&preset(3), &steps, true).iter().enumerate() {
            if let Verdict::Block { detection, .. } = v {
                prop_assert!(
                    matches!(
                        detection.detector,
                        Detector::ConsecutiveRepeat | Detector::BatchDuplicates | Detector::Escalation
                    ),
                    "step {i}: {detection:?}"
                );
            }
        }
    }

    /// Escalation only blocks a call that continues a loop blocked earlier: the same
    /// signature, the other side of a blocked ping-pong, a step of a blocked cycle (one of
    /// the calls of its last period), a call on a blocked thrash's target, or any call
    /// after a blocked run of failures. A call outside them is judged as usual.
    #[test]
    fn escalation_never_blocks_a_call_outside_a_blocked_loop(
        steps in prop::collection::vec((0..5usize, 0..4usize, 0..5u8), 1..200),
        stop_after in 1u32..5,
    ) {
        escalations(&steps, stop_after)?;
    }
}

/// Replays a stream of (tool, args, outcome) with the preset and checks that every
/// escalation continues a loop blocked earlier; returns how many escalations there were.
fn escalations(steps: &[(usize, usize, u8)], stop_after: u32) -> Result<usize, TestCaseError> {
    let config = preset(stop_after);
    // The preset's longest period, capped at the window (historySize 20).
    let max_period = 20;
    let mut guard = Guard::with_clock(config, Limits::default(), ManualClock::new(Millis::ZERO));
    let scope = Scope::new("s").with_run(Some("r"));
    // (signature, target) of every call so far, and the loops blocked so far.
    let mut seen: Vec<(loopguard::Signature, Option<String>)> = Vec::new();
    let mut blocked: Vec<(
        Detector,
        usize,
        loopguard::Signature,
        Option<loopguard::Signature>,
    )> = Vec::new();
    let mut stopped = false;
    let mut count = 0;
    for (i, (tool, args, outcome)) in steps.iter().enumerate() {
        let (tool, args) = mixed_call(*tool, *args);
        let target = args
            .get("path")
            .and_then(Value::as_str)
            .map(|p| format!("{tool}:{p}"));
        let id = format!("c{i}");
        let call = Call::new(tool, &args).with_id(Some(&id));
        let ticket = guard.begin(&scope, &call);
        let verdict = ticket.verdict().clone();
        let signature = loopguard::CallPrint::new(tool, &args).signature;
        if let (
            Verdict::Block {
                detection,
                terminal,
            },
            false,
        ) = (&verdict, stopped)
        {
            if detection.detector == Detector::Escalation {
                let continues = blocked.iter().any(|(d, at, sig, paired)| match d {
                    Detector::ErrorCascade => true,
                    Detector::Cycle => {
                        *sig == signature
                            || seen[at.saturating_sub(max_period)..*at]
                                .iter()
                                .any(|(s, _)| *s == signature)
                    }
                    Detector::TargetThrash => target.is_some() && seen[*at].1 == target,
                    _ => *sig == signature || *paired == Some(signature),
                });
                prop_assert!(continues, "step {i}: {verdict:?} after {blocked:?}");
                count += 1;
            } else if !*terminal && detection.detector != Detector::BatchDuplicates {
                blocked.push((
                    detection.detector,
                    i,
                    detection.signature,
                    detection.evidence.paired_signature(),
                ));
            }
            stopped = *terminal;
        }
        seen.push((signature, target));
        if !verdict.is_blocked() {
            let value = serde_json::json!({"content": [{"type": "text", "text": format!("out {outcome}")}]});
            let error = serde_json::json!(format!("failed {outcome}"));
            let out = if *outcome >= 3 {
                Outcome::Error(&error)
            } else {
                Outcome::Result(&value)
            };
            guard.finish(ticket, out);
        }
    }
    Ok(count)
}

#[test]
fn the_escalation_law_is_exercised() {
    // An edit failing on one path with new arguments, then a read repeated with one result.
    let steps: Vec<(usize, usize, u8)> = (0..12)
        .map(|i| (1, 2 * i, 4))
        .chain((0..12).map(|_| (0, 1, 0)))
        .collect();
    assert!(escalations(&steps, 3).unwrap() >= 2);
}

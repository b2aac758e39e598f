//! Engine benchmarks on the project's workloads (`bench/workloads.sh` writes them into
//! `target/bench-data`; `LOOPGUARD_BENCH_DATA` points elsewhere).
//!
//! - `per_call/{small,medium,large}`: the full host cycle `begin` + `finish` (the call
//!   fingerprinted once, its ticket kept while the tool runs), JSON already parsed into
//!   `serde_json` values; `…_raw`: the cycle from the JSON text of the arguments and the
//!   result, tokenized into reused tapes and fingerprinted without a value tree (what
//!   replay, serve, the hooks and the MCP proxy do; the comparison with OpenClaw's
//!   detector);
//! - `history/{30,300,5000}` and `history_one_run/{30,300,5000}`: the same on `small` with a
//!   larger window, with the workload's runs of 1,000 calls and with every call in one run
//!   (so that the window really fills);
//! - `fingerprint_large`: outcome fingerprints of the ~1 MB results (from values, and from
//!   their JSON text) next to XXH3-128 over the same number of raw bytes (the hashing
//!   limit);
//! - `extensions_{small,medium}`: SPEC's engine next to the engine with every extension of
//!   the `loopguard` block on, and with the `recommended` preset (with and without
//!   `run_storm`);
//! - `period/{spec,cycle}_{30,1000}`: period detection (`cycle`, periods up to 16) at
//!   `historySize` 30 and 1,000, every call in one run so that the window fills, on `small`
//!   and on a synthetic 14-step cycle (`period_loop/…`) that keeps every period counter
//!   busy; `cycle_max_1000` tracks every period up to the window (the O(window) bound).
//!
//! Per-call time = time per iteration / calls per iteration (criterion's throughput line
//! shows calls per second).

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use loopguard::config::{ConfigSet, LoopDetectionBlock};
use loopguard::fingerprint::{OutcomePrint, OutcomeRule};
use loopguard::json::Tape;
use loopguard::{Call, Guard, Limits, ManualClock, Millis, Outcome, OutcomeOf, Scope};
use serde_json::Value;

/// One call of a workload and the result that follows it.
struct Pair {
    run: String,
    call_id: String,
    tool: String,
    args: Value,
    result: Value,
    /// The JSON text of `args` and `result`, as the event line has them.
    args_text: String,
    result_text: String,
}

fn data_dir() -> PathBuf {
    std::env::var_os("LOOPGUARD_BENCH_DATA").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data"),
        PathBuf::from,
    )
}

fn ensure_workloads() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/workloads.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .env("LOOPGUARD_BENCH_DATA", data_dir())
        .status()
        .expect("run bench/workloads.sh");
    assert!(status.success(), "bench/workloads.sh failed");
}

/// The first `limit` call/result pairs of a workload.
fn load(name: &str, limit: usize) -> Vec<Pair> {
    let file = File::open(data_dir().join(format!("{name}.jsonl"))).expect("workload file");
    let mut pairs = Vec::new();
    let mut lines = BufReader::with_capacity(1 << 20, file).lines();
    while pairs.len() < limit {
        let (Some(Ok(call)), Some(Ok(result))) = (lines.next(), lines.next()) else {
            break;
        };
        #[derive(serde::Deserialize)]
        struct Texts<'a> {
            #[serde(borrow)]
            args: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
        }
        let call_texts: Texts<'_> = serde_json::from_str(&call).unwrap();
        let result_texts: Texts<'_> = serde_json::from_str(&result).unwrap();
        let args_text = call_texts.args.get().to_owned();
        let result_text = result_texts.result.unwrap().get().to_owned();
        let mut call: Value = serde_json::from_str(&call).unwrap();
        let mut result: Value = serde_json::from_str(&result).unwrap();
        let s = |v: &Value, k: &str| v[k].as_str().unwrap().to_owned();
        pairs.push(Pair {
            run: s(&call, "run"),
            call_id: s(&call, "call_id"),
            tool: s(&call, "tool"),
            args: call["args"].take(),
            result: result["result"].take(),
            args_text,
            result_text,
        });
    }
    pairs
}

fn config(history: u32) -> ConfigSet {
    ConfigSet::from_blocks(
        LoopDetectionBlock {
            enabled: Some(true),
            history_size: Some(history),
            ..Default::default()
        },
        [],
    )
}

fn new_guard(history: u32) -> Guard<ManualClock> {
    Guard::with_clock(
        config(history),
        Limits::default(),
        ManualClock::new(Millis::ZERO),
    )
}

/// The host cycle from JSON text, as front ends that read events run it: the arguments
/// and the result are tokenized (into reused tapes, no value tree) and fingerprinted from
/// the text.
fn host_cycle_raw(guard: &mut Guard<ManualClock>, pairs: &[Pair], tapes: &mut (Tape, Tape)) {
    for p in pairs {
        let scope = Scope::new("perf").with_run(Some(&p.run));
        let args = tapes.0.parse(&p.args_text).unwrap();
        let call = Call::with_args(&p.tool, args).with_id(Some(&p.call_id));
        let ticket = guard.begin(&scope, &call);
        if !ticket.is_blocked() {
            let result = tapes.1.parse(&p.result_text).unwrap();
            black_box(guard.finish(ticket, OutcomeOf::Result(result)));
        }
    }
}

/// The host cycle for every pair: the ticket, then (unless blocked) the outcome.
fn host_cycle(guard: &mut Guard<ManualClock>, pairs: &[Pair], one_run: bool) {
    for p in pairs {
        let scope = Scope::new("perf").with_run(Some(if one_run { "all" } else { &p.run }));
        let call = Call::new(&p.tool, &p.args).with_id(Some(&p.call_id));
        let ticket = guard.begin(&scope, &call);
        if !ticket.is_blocked() {
            black_box(guard.finish(ticket, Outcome::Result(&p.result)));
        }
    }
}

fn per_call(c: &mut Criterion) {
    ensure_workloads();
    let mut group = c.benchmark_group("per_call");
    for (name, limit, samples) in [
        ("small", 20_000, 30),
        ("medium", 4_000, 20),
        ("large", 200, 10),
    ] {
        let pairs = load(name, limit);
        group.sample_size(samples);
        group.throughput(Throughput::Elements(pairs.len() as u64));
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || new_guard(30),
                |guard| host_cycle(guard, &pairs, false),
                BatchSize::PerIteration,
            )
        });
        let mut tapes = (Tape::new(), Tape::new());
        group.bench_function(format!("{name}_raw"), |b| {
            b.iter_batched_ref(
                || new_guard(30),
                |guard| host_cycle_raw(guard, &pairs, &mut tapes),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn history(c: &mut Criterion) {
    ensure_workloads();
    let pairs = load("small", 20_000);
    for (group_name, one_run) in [("history", false), ("history_one_run", true)] {
        let mut group = c.benchmark_group(group_name);
        group.sample_size(20);
        group.throughput(Throughput::Elements(pairs.len() as u64));
        for size in [30u32, 300, 5000] {
            group.bench_function(size.to_string(), |b| {
                b.iter_batched_ref(
                    || new_guard(size),
                    |guard| host_cycle(guard, &pairs, one_run),
                    BatchSize::PerIteration,
                )
            });
        }
        group.finish();
    }
}

fn fingerprint_large(c: &mut Criterion) {
    ensure_workloads();
    let pairs = load("large", 200);
    let raw: Vec<Vec<u8>> = pairs
        .iter()
        .map(|p| serde_json::to_vec(&p.result).unwrap())
        .collect();
    let bytes: usize = raw.iter().map(Vec::len).sum();
    let rules: Vec<OutcomeRule> = pairs
        .iter()
        .map(|p| OutcomeRule::for_call(&p.tool, &p.args))
        .collect();
    let mut group = c.benchmark_group("fingerprint_large");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("outcome_fingerprint", |b| {
        b.iter(|| {
            for (p, rule) in pairs.iter().zip(&rules) {
                black_box(OutcomePrint::new(*rule, Outcome::Result(&p.result)));
            }
        })
    });
    let mut tape = Tape::new();
    group.bench_function("outcome_fingerprint_from_text", |b| {
        b.iter(|| {
            for (p, rule) in pairs.iter().zip(&rules) {
                let result = tape.parse(&p.result_text).unwrap();
                black_box(OutcomePrint::new(*rule, OutcomeOf::Result(result)));
            }
        })
    });
    group.bench_function("xxh3_128_raw_bytes", |b| {
        b.iter(|| {
            for r in &raw {
                black_box(xxhash_rust::xxh3::xxh3_128(r));
            }
        })
    });
    group.finish();
}

/// Every extension of the `loopguard` block on (masking of every outcome, all four
/// detectors, a tool policy), next to SPEC's engine alone.
const ALL_EXTENSIONS: &str = "{
  tools: { loopDetection: { enabled: true } },
  loopguard: {
    masking: {},
    policy: { tools: [
      { match: 'web_*', ignoreArgs: ['why'], ignoreResult: ['details.bytes'] },
      { match: 'command_status', class: 'poll', warningThreshold: 5, criticalThreshold: 9 },
    ] },
    detectors: { consecutiveRepeat: {}, cycle: {}, errorCascade: {}, batchDuplicates: {} },
  },
}";

/// The `recommended` preset, in one line.
const PRESET: &str =
    "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }";

/// The `recommended` preset without `run_storm`: what the storm adds to a call.
const PRESET_WITHOUT_STORM: &str = "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended', detectors: { runStorm: { enabled: false } } } }";

fn extensions(c: &mut Criterion) {
    ensure_workloads();
    let all = ConfigSet::parse(ALL_EXTENSIONS).expect("valid config");
    let preset = ConfigSet::parse(PRESET).expect("valid config");
    let without_storm = ConfigSet::parse(PRESET_WITHOUT_STORM).expect("valid config");
    for (name, limit) in [("small", 20_000), ("medium", 4_000)] {
        let pairs = load(name, limit);
        let mut group = c.benchmark_group(format!("extensions_{name}"));
        group.sample_size(20);
        group.throughput(Throughput::Elements(pairs.len() as u64));
        group.bench_function("spec", |b| {
            b.iter_batched_ref(
                || new_guard(30),
                |guard| host_cycle(guard, &pairs, false),
                BatchSize::PerIteration,
            )
        });
        group.bench_function("all_on", |b| {
            b.iter_batched_ref(
                || {
                    Guard::with_clock(
                        all.clone(),
                        Limits::default(),
                        ManualClock::new(Millis::ZERO),
                    )
                },
                |guard| host_cycle(guard, &pairs, false),
                BatchSize::PerIteration,
            )
        });
        for (label, config) in [
            ("preset", &preset),
            ("preset_without_run_storm", &without_storm),
        ] {
            group.bench_function(label, |b| {
                b.iter_batched_ref(
                    || {
                        Guard::with_clock(
                            config.clone(),
                            Limits::default(),
                            ManualClock::new(Millis::ZERO),
                        )
                    },
                    |guard| host_cycle(guard, &pairs, false),
                    BatchSize::PerIteration,
                )
            });
        }
        group.finish();
    }
}

/// `calls` calls going round a 14-step cycle of views with stable results, like the
/// SWE-agent loops of the corpus.
fn cycle_pairs(calls: usize) -> Vec<Pair> {
    (0..calls)
        .map(|i| {
            let step = i % 14;
            Pair {
                run: "all".into(),
                call_id: format!("c{i}"),
                tool: "str_replace_editor".into(),
                args: serde_json::json!({"command": "view", "path": "/repo/cm.py", "view_range": [step * 30, step * 30 + 30]}),
                result: serde_json::json!({"content": [{"type": "text", "text": format!("lines of view {step}")}]}),
                args_text: String::new(),
                result_text: String::new(),
            }
        })
        .collect()
}

fn period(c: &mut Criterion) {
    ensure_workloads();
    let small = load("small", 20_000);
    let looping = cycle_pairs(20_000);
    let config = |history: u32, cycle: &str| {
        ConfigSet::parse(&format!(
            "{{ tools: {{ loopDetection: {{ enabled: true, historySize: {history} }} }}, loopguard: {{ detectors: {{ cycle: {{ {cycle} }} }} }} }}"
        ))
        .expect("valid config")
    };
    for (group_name, pairs) in [("period", &small), ("period_loop", &looping)] {
        let mut group = c.benchmark_group(group_name);
        group.sample_size(20);
        group.throughput(Throughput::Elements(pairs.len() as u64));
        for history in [30u32, 1000] {
            group.bench_function(format!("spec_{history}"), |b| {
                b.iter_batched_ref(
                    || new_guard(history),
                    |guard| host_cycle(guard, pairs, true),
                    BatchSize::PerIteration,
                )
            });
            let cycle = config(history, "");
            group.bench_function(format!("cycle_{history}"), |b| {
                b.iter_batched_ref(
                    || {
                        Guard::with_clock(
                            cycle.clone(),
                            Limits::default(),
                            ManualClock::new(Millis::ZERO),
                        )
                    },
                    |guard| host_cycle(guard, pairs, true),
                    BatchSize::PerIteration,
                )
            });
        }
        let widest = config(1000, "maxLength: 1000");
        group.bench_function("cycle_max_1000", |b| {
            b.iter_batched_ref(
                || {
                    Guard::with_clock(
                        widest.clone(),
                        Limits::default(),
                        ManualClock::new(Millis::ZERO),
                    )
                },
                |guard| host_cycle(guard, pairs, true),
                BatchSize::PerIteration,
            )
        });
        group.finish();
    }
}

/// A run's state with 30 records, to bytes and back (what durable stores pay per event).
fn state_bytes(c: &mut Criterion) {
    ensure_workloads();
    let pairs = load("small", 30);
    let mut guard = new_guard(30);
    host_cycle(&mut guard, &pairs, true);
    let state = guard
        .run_state(&Scope::new("perf").with_run(Some("all")))
        .expect("the run exists")
        .clone();
    let bytes = state.to_bytes();
    println!(
        "run state with {} records: {} bytes",
        state.history().len(),
        bytes.len()
    );
    let mut group = c.benchmark_group("state_bytes");
    group.bench_function("to_bytes", |b| b.iter(|| black_box(state.to_bytes())));
    group.bench_function("from_bytes", |b| {
        b.iter(|| black_box(loopguard::RunState::from_bytes(&bytes).unwrap()))
    });
    group.finish();
}

criterion_group!(
    benches,
    per_call,
    history,
    fingerprint_large,
    extensions,
    period,
    state_bytes
);
criterion_main!(benches);

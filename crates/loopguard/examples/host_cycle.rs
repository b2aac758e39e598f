//! Runs the host cycle (`begin`, then `finish` when the call may run) over the first N calls of a workload
//! and prints the time per call: a harness for profilers (`perf`, `valgrind --tool=callgrind`).
//!
//! ```sh
//! bench/workloads.sh
//! cargo run --release -p loopguard --example host_cycle -- target/bench-data/small.jsonl 20000 30
//! ```
//!
//! With `LOOPGUARD_CYCLE=raw` in the environment the cycle starts from the JSON text of the
//! arguments and the result (tokenized into reused tapes, as `per_call/<w>_raw` and the
//! front ends that read events do).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::time::Instant;

use loopguard::config::{ConfigSet, LoopDetectionBlock};
use loopguard::json::Tape;
use loopguard::{Call, Guard, Limits, ManualClock, Millis, Outcome, OutcomeOf, Scope};
use serde_json::Value;

type Pair = (String, String, String, Value, Value);

/// The JSON text of a pair's arguments and result.
type Texts = (String, String);

/// The measured part (a separate function so that profilers can select it).
#[inline(never)]
fn cycle(guard: &mut Guard<ManualClock>, pairs: &[Pair]) {
    for (run, id, tool, args, result) in pairs {
        let scope = Scope::new("perf").with_run(Some(run));
        let call = Call::new(tool, args).with_id(Some(id));
        let ticket = guard.begin(&scope, &call);
        if !ticket.is_blocked() {
            std::hint::black_box(guard.finish(ticket, Outcome::Result(result)));
        }
    }
}

/// The measured part from JSON text (a separate function so that profilers can select it).
#[inline(never)]
fn cycle_raw(
    guard: &mut Guard<ManualClock>,
    pairs: &[Pair],
    texts: &[Texts],
    tapes: &mut (Tape, Tape),
) {
    for ((run, id, tool, _, _), (args, result)) in pairs.iter().zip(texts) {
        let scope = Scope::new("perf").with_run(Some(run));
        let args = tapes.0.parse(args).expect("JSON");
        let call = Call::with_args(tool, args).with_id(Some(id));
        let ticket = guard.begin(&scope, &call);
        if !ticket.is_blocked() {
            let result = tapes.1.parse(result).expect("JSON");
            std::hint::black_box(guard.finish(ticket, OutcomeOf::Result(result)));
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: host_cycle WORKLOAD.jsonl [CALLS] [HISTORY_SIZE] [REPEAT] [one-run]");
    let limit: usize = args.next().map_or(20_000, |s| s.parse().expect("CALLS"));
    let history: u32 = args.next().map_or(30, |s| s.parse().expect("HISTORY_SIZE"));
    let repeat: usize = args.next().map_or(1, |s| s.parse().expect("REPEAT"));
    // "one-run": every call in one run, so that long windows really fill.
    let one_run = args.next().as_deref() == Some("one-run");
    // "quiet": thresholds out of reach, so every call is allowed and runs to its outcome
    // whatever the window (the cost of the window alone).
    let quiet = args.next().as_deref() == Some("quiet");
    // A config file to use instead (for example one with the `loopguard` block).
    let config_file = args.next();
    let mut lines = BufReader::new(File::open(&path).expect("workload")).lines();
    let mut pairs = Vec::new();
    let mut texts = Vec::new();
    while pairs.len() < limit {
        let (Some(Ok(c)), Some(Ok(r))) = (lines.next(), lines.next()) else {
            break;
        };
        // The texts as the lines have them (member order and spelling kept).
        #[derive(serde::Deserialize)]
        struct Raw<'a> {
            #[serde(borrow)]
            args: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
        }
        let (rc, rr): (Raw<'_>, Raw<'_>) = (
            serde_json::from_str(&c).unwrap(),
            serde_json::from_str(&r).unwrap(),
        );
        texts.push((
            rc.args.get().to_owned(),
            rr.result.expect("a result").get().to_owned(),
        ));
        let mut c: Value = serde_json::from_str(&c).unwrap();
        let mut r: Value = serde_json::from_str(&r).unwrap();
        pairs.push((
            if one_run {
                "all".to_owned()
            } else {
                c["run"].as_str().unwrap().to_owned()
            },
            c["call_id"].as_str().unwrap().to_owned(),
            c["tool"].as_str().unwrap().to_owned(),
            c["args"].take(),
            r["result"].take(),
        ));
    }
    let config = match &config_file {
        Some(path) => {
            ConfigSet::parse(&std::fs::read_to_string(path).expect("config")).expect("valid config")
        }
        None => ConfigSet::from_blocks(
            LoopDetectionBlock {
                enabled: Some(true),
                history_size: Some(history),
                warning_threshold: quiet.then_some(1_000_000),
                ..Default::default()
            },
            [],
        ),
    };
    let raw = std::env::var("LOOPGUARD_CYCLE").as_deref() == Ok("raw");
    let mut tapes = (Tape::new(), Tape::new());
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let mut guard = Guard::with_clock(
            config.clone(),
            Limits::default(),
            ManualClock::new(Millis::ZERO),
        );
        let start = Instant::now();
        if raw {
            cycle_raw(&mut guard, &pairs, &texts, &mut tapes);
        } else {
            cycle(&mut guard, &pairs);
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{} calls, best of {repeat}: {:.3} µs per call",
        pairs.len(),
        best * 1e6 / pairs.len() as f64
    );
}

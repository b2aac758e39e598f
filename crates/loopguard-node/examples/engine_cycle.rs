//! The Rust side of `packages/node/bench/bench.mjs`: the host cycle (`begin`, then
//! `finish` when the call may run) of the engine alone over the first N calls of a
//! workload, JSON already parsed, with the binding's config and clock. Prints the CPU time
//! and the wall time per call: on a shared machine the CPU time is the comparable figure
//! (the benchmark measures the Node side the same way).
//!
//! With `text`, the lines are kept as JSON text and each is parsed and applied through the
//! replay protocol (`Replayer::apply_line`), which is what the binding's native side does
//! with the events JavaScript sends it.
//!
//! ```sh
//! cargo run --release -p loopguard-node --example engine_cycle -- target/bench-data/small.jsonl 20000 [text]
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::time::Instant;

use loopguard::{Call, ConfigSet, Guard, Outcome, Scope};
use loopguard_events::Replayer;
use serde_json::Value;

struct Pair {
    run: String,
    id: String,
    tool: String,
    args: Value,
    result: Value,
}

/// CPU time of this thread in nanoseconds (Linux: the first field of schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[inline(never)]
fn cycle(guard: &mut Guard, pairs: &[Pair]) {
    for p in pairs {
        let scope = Scope::new("perf").with_run(Some(&p.run));
        let call = Call::new(&p.tool, &p.args).with_id(Some(&p.id));
        let ticket = guard.begin(&scope, &call);
        if !ticket.is_blocked() {
            std::hint::black_box(guard.finish(ticket, Outcome::Result(&p.result)));
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: engine_cycle WORKLOAD.jsonl [CALLS]")?;
    let limit: usize = args.next().map_or(Ok(20_000), |s| s.parse())?;
    let text = args.next().as_deref() == Some("text");
    let config = ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }")?;
    let mut lines = BufReader::new(File::open(&path)?).lines();
    if text {
        let lines: Vec<String> = lines.take(limit * 2).collect::<Result<_, _>>()?;
        let mut replayer = Replayer::with_guard(Guard::new(config), None);
        let (cpu, wall) = (thread_cpu_ns(), Instant::now());
        for (i, line) in lines.iter().enumerate() {
            std::hint::black_box(replayer.apply_line(i as u64, line.as_bytes()));
        }
        report(
            lines.len() / 2,
            thread_cpu_ns() - cpu,
            wall.elapsed().as_nanos(),
        );
        return Ok(());
    }
    let mut pairs = Vec::new();
    while pairs.len() < limit {
        let (Some(call), Some(result)) = (lines.next(), lines.next()) else {
            break;
        };
        let mut call: Value = serde_json::from_str(&call?)?;
        let mut result: Value = serde_json::from_str(&result?)?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        pairs.push(Pair {
            run: text(&call["run"]),
            id: text(&call["call_id"]),
            tool: text(&call["tool"]),
            args: call["args"].take(),
            result: result["result"].take(),
        });
    }
    let mut guard = Guard::new(config);
    let (cpu, wall) = (thread_cpu_ns(), Instant::now());
    cycle(&mut guard, &pairs);
    report(
        pairs.len(),
        thread_cpu_ns() - cpu,
        wall.elapsed().as_nanos(),
    );
    Ok(())
}

fn report(calls: usize, cpu_ns: u64, wall_ns: u128) {
    let n = calls.max(1) as f64;
    println!(
        "{calls} calls: {:.3} µs CPU per call, {:.3} µs wall per call",
        cpu_ns as f64 / 1e3 / n,
        wall_ns as f64 / 1e3 / n
    );
}

//! `loopguard replay`'s work on the first N lines of a workload, in process, next to the
//! floor of any reader of the same lines (`serde_json` checking each line without building
//! anything): a harness for instruction counts, which other load on the machine does not
//! change (`valgrind --tool=callgrind`, see `bench/instructions.sh`).
//!
//! ```sh
//! cargo build --release -p loopguard-events --example replay_floor
//! target/release/examples/replay_floor replay target/bench-data/small.jsonl 40000
//! target/release/examples/replay_floor validate target/bench-data/small.jsonl 40000
//! ```

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::time::Instant;

use loopguard::ConfigSet;
use loopguard_events::{replay, Replayer, DEFAULT_MAX_LINE};

/// The measured part of `replay` (a separate function so that profilers can select it).
#[inline(never)]
fn run_replay(input: &[u8]) -> u64 {
    let config =
        ConfigSet::parse("{ tools: { loopDetection: { enabled: true } } }").expect("valid config");
    let mut replayer = Replayer::new(config, None);
    let summary = replay(&mut replayer, input, std::io::sink(), DEFAULT_MAX_LINE)
        .expect("no I/O error in memory");
    summary.events
}

/// The measured part of the floor: every line checked to be JSON, nothing built.
#[inline(never)]
fn run_validate(input: &[u8]) -> u64 {
    let mut n = 0;
    for line in input.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        serde_json::from_slice::<serde::de::IgnoredAny>(line).expect("JSON");
        n += 1;
    }
    n
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: replay_floor replay|validate WORKLOAD.jsonl [LINES]";
    let mode = args.next().expect(usage);
    let path = args.next().expect(usage);
    let lines: usize = args.next().map_or(40_000, |s| s.parse().expect("LINES"));
    // The lines, read before the clock (both measure the same bytes from memory).
    let mut input = Vec::new();
    let mut reader = BufReader::new(File::open(&path).expect("workload"));
    for _ in 0..lines {
        if reader.read_until(b'\n', &mut input).expect("read") == 0 {
            break;
        }
    }
    let _ = reader.read(&mut []);
    let start = Instant::now();
    let n = match mode.as_str() {
        "replay" => run_replay(&input),
        "validate" => run_validate(&input),
        _ => panic!("{usage}"),
    };
    let took = start.elapsed();
    println!(
        "{mode}: {n} lines, {} bytes, {:.3} µs per line",
        input.len(),
        took.as_secs_f64() * 1e6 / n.max(1) as f64
    );
}

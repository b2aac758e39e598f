//! `loopguard replay` end to end, next to the parsing floor, on the project's workloads
//! (`bench/workloads.sh` writes them into `target/bench-data`).
//!
//! - `replay_e2e/{small,medium,large}`: the whole process (`loopguard replay --config …
//!   FILE > /dev/null`, detection enabled);
//! - `parse_floor/{small,medium,large}`: a plain `serde_json` parse of every line of the same
//!   file into values, streamed the same way;
//! - `validate_floor/{small,medium,large}`: the same lines checked by `serde_json` without
//!   building anything (`IgnoredAny`): the floor for any reader of the file;
//! - after the timings, the peak RSS of `replay` on each workload, and the CPU time
//!   (user and system) of `replay` next to that of the validation-only floor on the same
//!   file, five runs each: a ratio that other load on the machine inflates far less than
//!   wall time (a process that waits for a core is not charged for the wait).

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const WORKLOADS: [&str; 3] = ["small", "medium", "large"];

fn data_dir() -> PathBuf {
    std::env::var_os("LOOPGUARD_BENCH_DATA").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data"),
        PathBuf::from,
    )
}

fn ensure_workloads() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/workloads.sh");
    let status = Command::new("bash")
        .arg(script)
        .env("LOOPGUARD_BENCH_DATA", data_dir())
        .status()
        .expect("run bench/workloads.sh");
    assert!(status.success(), "bench/workloads.sh failed");
}

fn config_file() -> PathBuf {
    let path = std::env::temp_dir().join("loopguard-bench-enabled.json5");
    let mut f = File::create(&path).unwrap();
    f.write_all(b"{ tools: { loopDetection: { enabled: true } } }")
        .unwrap();
    path
}

fn replay_once(file: &PathBuf, config: &PathBuf) {
    let status = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .arg("--config")
        .arg(config)
        .arg(file)
        .stdout(Stdio::null())
        .status()
        .expect("run loopguard");
    assert!(status.success());
}

/// A floor: read every line and deserialize it as `T`, streamed as replay streams it.
fn floor<T: serde::de::DeserializeOwned>(file: &PathBuf) -> usize {
    let mut reader = BufReader::with_capacity(1 << 16, File::open(file).unwrap());
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            return n;
        }
        black_box(serde_json::from_slice::<T>(&line).unwrap());
        n += 1;
    }
}

/// The floor of any reader that builds values: every line parsed into a `Value`.
fn parse_floor(file: &PathBuf) -> usize {
    floor::<serde_json::Value>(file)
}

/// The floor of any reader: every line checked to be JSON, building nothing.
fn validate_floor(file: &PathBuf) -> usize {
    floor::<serde::de::IgnoredAny>(file)
}

fn end_to_end(c: &mut Criterion) {
    ensure_workloads();
    let config = config_file();
    for name in WORKLOADS {
        let file = data_dir().join(format!("{name}.jsonl"));
        let bytes = std::fs::metadata(&file).unwrap().len();
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        group.throughput(Throughput::Bytes(bytes));
        group.bench_function("replay_e2e", |b| b.iter(|| replay_once(&file, &config)));
        group.bench_function("parse_floor", |b| b.iter(|| parse_floor(&file)));
        group.bench_function("validate_floor", |b| b.iter(|| validate_floor(&file)));
        group.finish();
    }
    for name in WORKLOADS {
        let file = data_dir().join(format!("{name}.jsonl"));
        println!(
            "peak RSS of replay on {name}: {} KiB",
            peak_rss_kib(&file, &config)
        );
    }
    for name in WORKLOADS {
        let file = data_dir().join(format!("{name}.jsonl"));
        let runs = 5;
        let replay = cpu_of(runs, Charged::Children, || replay_once(&file, &config));
        let validate = cpu_of(runs, Charged::Own, || {
            validate_floor(&file);
        });
        match replay.zip(validate) {
            Some((r, v)) => println!(
                "CPU time on {name}, {runs} runs each: replay {} ms, validation only {} ms: {:.2}x",
                r.as_millis(),
                v.as_millis(),
                r.as_secs_f64() / v.as_secs_f64()
            ),
            None => println!("CPU time on {name}: not readable here (/proc/self/stat)"),
        }
    }
}

/// Whose CPU time a run is charged by.
#[derive(Clone, Copy)]
enum Charged {
    /// This process's (the floors run in it).
    Own,
    /// Its children's, once waited for (`replay` runs as a child).
    Children,
}

/// The CPU time `runs` calls of `f` take.
fn cpu_of(runs: usize, charged: Charged, mut f: impl FnMut()) -> Option<Duration> {
    let read = || {
        let (own, children) = cpu_times()?;
        Some(match charged {
            Charged::Own => own,
            Charged::Children => children,
        })
    };
    let before = read()?;
    for _ in 0..runs {
        f();
    }
    Some(read()?.saturating_sub(before))
}

/// CPU time (user and system) of this process and of its children waited for, from
/// `/proc/self/stat` (Linux only): fields 14 to 17, in clock ticks (USER_HZ, 100).
fn cpu_times() -> Option<(Duration, Duration)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let tick = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let ticks = |a: usize, b: usize| Some(Duration::from_millis((tick(a)? + tick(b)?) * 10));
    Some((ticks(11, 12)?, ticks(13, 14)?))
}

/// Peak resident set of one `loopguard replay` run, in KiB: the child's `VmHWM`, read
/// from `/proc` while it runs. (`getrusage` would not do: a child started with vfork
/// semantics inherits the parent's high-water mark.)
fn peak_rss_kib(file: &PathBuf, config: &PathBuf) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("replay")
        .arg("--config")
        .arg(config)
        .arg(file)
        .stdout(Stdio::null())
        .spawn()
        .expect("run loopguard");
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(status) = std::fs::read_to_string(&status_file) {
            if let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kib);
            }
        }
        if child.try_wait().expect("wait").is_some() {
            return peak;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

criterion_group!(benches, end_to_end);
criterion_main!(benches);

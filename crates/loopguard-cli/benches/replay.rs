//! `loopguard replay` end to end, next to the parsing floor, on the project's workloads
//! (`bench/workloads.sh` writes them into `target/bench-data`).
//!
//! - `replay_e2e/{small,medium,large}`: the whole process (`loopguard replay --config …
//!   FILE > /dev/null`, detection enabled);
//! - `parse_floor/{small,medium,large}`: a plain `serde_json` parse of every line of the same
//!   file into values, streamed the same way;
//! - `validate_floor/{small,medium,large}`: the same lines checked by `serde_json` without
//!   building anything (`IgnoredAny`): the floor for any reader of the file;
//! - after the timings, the peak RSS of `replay` on each workload (from `getrusage`).

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

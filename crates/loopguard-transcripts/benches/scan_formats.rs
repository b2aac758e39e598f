//! Throughput of `loopguard scan` per transcript format, on the real files of the shared
//! corpus read in place (one file per format, scanned from memory so that only reading
//! and the guard are measured). Prints SKIPPED when the corpus is absent.
//!
//! ```text
//! cargo bench -p loopguard-transcripts --bench scan_formats
//! ```
//!
//! Run as a test (`cargo test --benches`), it scans each file once.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use loopguard_transcripts::{scan_bytes, ScanOptions};

/// One file per format: the largest of its folder in the corpus.
const FILES: &[(&str, &str)] = &[
    (
        "swe-agent",
        "swe-agent-more/matplotlib__matplotlib-25479.traj",
    ),
    (
        "mini-swe-agent",
        "mini-swe-agent/deepseek_lite_dev__marshmallow-code__marshmallow-1343.traj.json",
    ),
    (
        "gemini-cli",
        "gemini-cli/session-2026-01-26T14-29-aa70d223.json",
    ),
    (
        "claude-code",
        "claude-code/7ef4b236-d946-48a6-a856-e45b02af7be7.jsonl",
    ),
    (
        "codex-rollout",
        "codex-rollout/rollout-2026-02-16T16-46-56-019c6722-2553-7a22-a1f0-1e7eb66e9fce.jsonl",
    ),
    ("openhands-v1", "openhands-v1/state_safety-relocation.json"),
    (
        "openhands-v0-output",
        "openhands-output-v0/gorilla_output_gpt-4o-2024-05-13_torch.jsonl",
    ),
    ("openai-chat", "openai-chat/gpt-4o-airline.json"),
];

fn corpus() -> Option<PathBuf> {
    let shared = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let corpus = shared.join("corpus");
    corpus.is_dir().then_some(corpus)
}

fn main() {
    let Some(corpus) = corpus() else {
        println!("SKIPPED: no shared corpus (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let bench = std::env::args().any(|a| a == "--bench");
    let options = ScanOptions::default();
    let files: Vec<(&str, String, Vec<u8>)> = FILES
        .iter()
        .filter_map(|(format, path)| {
            let bytes = std::fs::read(corpus.join(path)).ok()?;
            let name = path.rsplit('/').next().unwrap_or(path).to_owned();
            Some((*format, name, bytes))
        })
        .collect();
    for (format, name, bytes) in &files {
        let scan = scan_bytes(bytes, None, name, &options).unwrap();
        let calls: u64 = scan.sessions.iter().map(|s| s.calls).sum();
        println!(
            "{format}: {name}, {:.1} kB, {calls} calls",
            bytes.len() as f64 / 1e3
        );
    }
    if !bench {
        return;
    }
    let mut criterion = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let mut group = criterion.benchmark_group("scan_formats");
    for (format, name, bytes) in &files {
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(format), bytes, |b, bytes| {
            b.iter(|| scan_bytes(bytes, None, name, &options).unwrap())
        });
    }
    group.finish();
    criterion.final_summary();
}

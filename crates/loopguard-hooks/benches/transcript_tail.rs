//! What reading the session transcript costs a Claude Code hook, on the largest Claude Code
//! transcript of the shared corpus read in place: the first read of the whole file (a hook
//! installed in the middle of a session), and the read at each tool call of the session
//! (what the transcript gained since the call before: the response and the result lines).
//! Prints SKIPPED when the corpus is absent.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use loopguard_hooks::transcript::{events_in, read_tail};
use loopguard_transcripts::Format;

const FILE: &str = "claude-code/7ef4b236-d946-48a6-a856-e45b02af7be7.jsonl";

fn corpus() -> Option<PathBuf> {
    let shared = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let file = shared.join("corpus").join(FILE);
    file.is_file().then_some(file)
}

/// The byte ranges the hook reads at each tool call: from the end of one `tool_result`
/// line to the end of the next (the response that made the call, its result).
fn steps(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut from, mut at) = (0, 0);
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        at += line.len();
        if memchr_find(line, b"\"tool_result\"") {
            out.push((from, at));
            from = at;
        }
    }
    out
}

fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn main() {
    let Some(file) = corpus() else {
        println!("SKIPPED: no shared corpus (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let path = file.to_str().unwrap().to_owned();
    let bytes = std::fs::read(&file).unwrap();
    let steps = steps(&bytes);
    let whole = read_tail(&path, Format::ClaudeCode, "s", None, true).unwrap();
    let sizes: Vec<usize> = steps.iter().map(|(a, b)| b - a).collect();
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    println!(
        "{FILE}: {:.1} kB, {} events, {} tool calls, median step {} bytes, largest {}",
        bytes.len() as f64 / 1e3,
        whole.events.len(),
        steps.len(),
        sorted.get(sorted.len() / 2).copied().unwrap_or(0),
        sorted.last().copied().unwrap_or(0)
    );
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut criterion = Criterion::default()
        .configure_from_args()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    let mut group = criterion.benchmark_group("transcript_tail");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_with_input(
        BenchmarkId::from_parameter("whole_file"),
        &path,
        |b, path| b.iter(|| read_tail(path, Format::ClaudeCode, "s", None, true).unwrap()),
    );
    // Every tool call's tail in turn: the time per call is the time of one pass over them
    // divided by their number.
    group.throughput(Throughput::Elements(steps.len() as u64));
    group.bench_with_input(
        BenchmarkId::from_parameter("every_call"),
        &steps,
        |b, steps| {
            b.iter(|| {
                for (from, to) in steps {
                    events_in(&bytes[*from..*to], Format::ClaudeCode, "s", false).unwrap();
                }
            })
        },
    );
    group.finish();
    criterion.final_summary();
}

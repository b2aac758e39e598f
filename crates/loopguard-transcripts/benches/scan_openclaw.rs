//! Throughput of `loopguard scan` on OpenClaw transcripts: MB/s and calls/s, on one
//! thread and on every core.
//!
//! The corpus is generated at bench time under the target directory (never committed):
//! files of about 16 MB, each the concatenation of copies of a real OpenClaw transcript
//! from the shared corpus with every entry id, parent id and session id rewritten, so that
//! each file is one long session whose active branch runs through all the copies. Without
//! the shared corpus a synthetic transcript of the same shape is used instead.
//!
//! ```text
//! cargo bench -p loopguard-transcripts --bench scan_openclaw
//! LOOPGUARD_BENCH_MB=256 cargo bench -p loopguard-transcripts --bench scan_openclaw
//! ```
//!
//! The same transcripts are also put into one database as OpenClaw 2026.9 keeps them
//! (`openclaw-agent.sqlite`: each file a transcript, each line an event, lines of 1 KiB or
//! more compressed with zstd as OpenClaw's maintenance stores them), and the database is
//! scanned too (`scan_openclaw_database`: one file, its transcripts read in parallel).
//!
//! Run as a test (`cargo test --benches`), it scans a small corpus once, as files and as a
//! database, and checks that both find the same calls.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use loopguard_transcripts::{scan_path, ScanOptions};
use rayon::prelude::*;
use serde_json::{json, Value};

/// Size of one generated file.
const FILE_BYTES: usize = 16 << 20;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let megabytes: usize = std::env::var("LOOPGUARD_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench { 1024 } else { 8 });
    let (files, bytes) = corpus(megabytes);
    let options = ScanOptions::default();
    let calls: u64 = files
        .iter()
        .map(|f| {
            scan_path(f, &options)
                .sessions
                .iter()
                .map(|s| s.calls)
                .sum::<u64>()
        })
        .sum();
    println!(
        "corpus: {} files, {:.1} MB, {} tool calls ({:.0} calls per MB)",
        files.len(),
        bytes as f64 / 1e6,
        calls,
        calls as f64 / (bytes as f64 / 1e6)
    );
    let database = database(&files);
    let in_database: u64 = scan_path(&database, &options)
        .sessions
        .iter()
        .map(|s| s.calls)
        .sum();
    assert_eq!(in_database, calls, "the database holds the files' calls");
    if !bench {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut threads = vec![1];
    if cores > 1 {
        threads.push(cores);
    }
    let mut criterion = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20));
    {
        let mut group = criterion.benchmark_group("scan_openclaw");
        group.throughput(Throughput::Bytes(bytes));
        for &n in &threads {
            let pool = pool(n);
            group.bench_with_input(BenchmarkId::new("threads", n), &n, |b, _| {
                b.iter(|| pool.install(|| scan_all(&files, &options)))
            });
        }
        group.finish();
    }
    {
        // The transcript bytes, as in the files: what the database holds uncompressed.
        let mut group = criterion.benchmark_group("scan_openclaw_database");
        group.throughput(Throughput::Bytes(bytes));
        for &n in &threads {
            let pool = pool(n);
            group.bench_with_input(BenchmarkId::new("threads", n), &n, |b, _| {
                b.iter(|| {
                    let scan = pool.install(|| scan_path(&database, &options));
                    scan.sessions.iter().map(|s| s.calls).sum::<u64>()
                })
            });
        }
        group.finish();
    }
    criterion.final_summary();
    println!("\nsummary (best of 3 timed runs each; per CPU second: the CPU time the process used, which other load on the machine does not inflate as it does the wall time):");
    for &n in &threads {
        let pool = pool(n);
        let (best, cpu) = (0..3)
            .map(|_| {
                let (start, cpu) = (Instant::now(), cpu_time());
                let scanned = pool.install(|| scan_all(&files, &options));
                assert_eq!(scanned, calls);
                let cpu = cpu.zip(cpu_time()).map(|(a, b)| b.saturating_sub(a));
                (start.elapsed(), cpu)
            })
            .min()
            .unwrap_or_default();
        let best = best.as_secs_f64();
        let per_cpu_second = cpu.map_or_else(
            || "n/a".to_owned(),
            |c| format!("{:.1} MB", bytes as f64 / 1e6 / c.as_secs_f64()),
        );
        println!(
            "  {n} thread{}: {:7.1} MB/s  {:10.0} calls/s  ({:.1} MB/s per thread; {per_cpu_second} per CPU second)",
            if n == 1 { " " } else { "s" },
            bytes as f64 / 1e6 / best,
            calls as f64 / best,
            bytes as f64 / 1e6 / best / n as f64
        );
    }
}

/// A pool of `threads` threads for one measurement.
fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// CPU time (user and system) this process has used so far: `/proc/self/stat`, Linux only.
fn cpu_time() -> Option<Duration> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces): state is field 3, utime and
    // stime fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Scans every file in parallel on the current pool; returns the calls seen.
fn scan_all(files: &[PathBuf], options: &ScanOptions) -> u64 {
    files
        .par_iter()
        .map(|f| {
            let scan = scan_path(f, options);
            scan.sessions.iter().map(|s| s.calls).sum::<u64>()
        })
        .sum()
}

/// The generated corpus: its files and their total size. Reused when already there.
fn corpus(megabytes: usize) -> (Vec<PathBuf>, u64) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("openclaw-bench-{megabytes}mb"));
    let count = (megabytes << 20).div_ceil(FILE_BYTES).max(1);
    let files: Vec<PathBuf> = (0..count)
        .map(|i| dir.join(format!("bench-{i:04}.jsonl")))
        .collect();
    if !files.iter().all(|f| f.is_file()) {
        fs::create_dir_all(&dir).unwrap();
        let sample = sample();
        let per_file = (megabytes << 20).min(FILE_BYTES);
        for (i, path) in files.iter().enumerate() {
            write_file(path, &sample, i, per_file);
        }
    }
    let bytes = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    (files, bytes)
}

/// The corpus's files as the transcripts of one OpenClaw database, beside them. Reused
/// when already there.
fn database(files: &[PathBuf]) -> PathBuf {
    use loopguard_transcripts::readers::openclaw::database::{fixture, FILE_NAME};
    let path = files[0].with_file_name(FILE_NAME);
    if path.is_file() {
        return path;
    }
    let partial = path.with_extension("partial");
    let _ = fs::remove_file(&partial);
    let mut db = rusqlite::Connection::open(&partial).unwrap();
    fixture::create(&db).unwrap();
    let tx = db.transaction().unwrap();
    for (n, file) in files.iter().enumerate() {
        let session = file.file_stem().unwrap().to_str().unwrap();
        let key = format!("agent:main:bench-{n}");
        fixture::add_window(&tx, session, &key, n as i64, None).unwrap();
        let text = fs::read_to_string(file).unwrap();
        fixture::add_events(&tx, session, text.lines()).unwrap();
    }
    tx.commit().unwrap();
    drop(db);
    fs::rename(&partial, &path).unwrap();
    path
}

/// The lines of a real OpenClaw transcript, or of a synthetic one, as written (key order
/// matters: OpenClaw writes `type`, `id`, `parentId` first).
fn sample() -> Vec<String> {
    let shared = std::env::var_os("LOOPGUARD_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let path = shared.join("corpus/openclaw/08237d46-d6c7-42a2-ab47-87ff3939da71.jsonl");
    match fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
        Err(_) => {
            eprintln!(
                "shared corpus not found at {}: using a synthetic transcript",
                path.display()
            );
            synthetic()
        }
    }
}

/// A transcript shaped like a real one: prompts, thinking, tool calls with results of a
/// few kilobytes, usage on every response.
fn synthetic() -> Vec<String> {
    let mut lines = vec![r#"{"type":"session","version":3,"id":"synthetic"}"#.to_owned()];
    let mut parent = Value::Null;
    let mut n = 0;
    let mut push = |lines: &mut Vec<String>, parent: &mut Value, message: Value| {
        n += 1;
        let id = format!("{n:08x}");
        lines.push(format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-04-02T05:00:00.000Z","message":{message}}}"#
        ));
        *parent = Value::String(id);
    };
    for turn in 0..40 {
        push(
            &mut lines,
            &mut parent,
            json!({"role": "user", "content": [{"type": "text", "text": format!("task {turn}: {}", "please look into this. ".repeat(20))}]}),
        );
        for call in 0..6 {
            let id = format!("call_{turn}_{call}");
            push(
                &mut lines,
                &mut parent,
                json!({"role": "assistant", "stopReason": "toolUse",
                "content": [{"type": "thinking", "thinking": "thinking about it ".repeat(40), "thinkingSignature": "x".repeat(600)},
                            {"type": "toolCall", "id": id, "name": "read", "arguments": {"path": format!("/src/file{call}.rs")}}],
                "usage": {"input": 12000, "output": 300, "cacheRead": 8000, "cacheWrite": 0, "totalTokens": 20300, "cost": {"total": 0.02}}}),
            );
            push(
                &mut lines,
                &mut parent,
                json!({"role": "toolResult", "toolCallId": id, "toolName": "read",
                "content": [{"type": "text", "text": format!("fn main() {{ println!(\"{call}\"); }}\n").repeat(80)}],
                "details": {"status": "ok"}, "isError": false}),
            );
        }
    }
    lines
}

/// Writes about `target` bytes of copies of `sample`, with fresh ids, as one session: the
/// first entry of each copy continues the branch where the previous copy ended.
fn write_file(path: &Path, sample: &[String], file: usize, target: usize) {
    let mut out = std::io::BufWriter::new(fs::File::create(path).unwrap());
    let header = format!(
        r#"{{"type":"session","version":3,"id":"bench-{file:04}","timestamp":"2026-04-02T05:00:00.000Z"}}"#
    );
    let mut written = write_line(&mut out, &header);
    let mut last_id: Option<String> = None;
    let mut copy = 0;
    while written < target {
        let mut first = true;
        for line in sample {
            let Ok(value) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if value["type"] == "session" {
                continue;
            }
            let (Some(id), Some(parent)) = (value["id"].as_str(), value.get("parentId")) else {
                written += write_line(&mut out, line);
                continue;
            };
            let old = format!(r#""id":"{id}","parentId":{parent}"#);
            let new_id = format!("{copy:x}-{id}");
            let new_parent = match parent.as_str() {
                Some(p) => Value::String(format!("{copy:x}-{p}")),
                None if first => last_id.clone().map_or(Value::Null, Value::String),
                None => Value::Null,
            };
            let new = format!(r#""id":"{new_id}","parentId":{new_parent}"#);
            written += write_line(&mut out, &line.replacen(&old, &new, 1));
            last_id = Some(new_id);
            first = false;
        }
        copy += 1;
    }
    out.flush().unwrap();
}

fn write_line(out: &mut impl Write, line: &str) -> usize {
    out.write_all(line.as_bytes()).unwrap();
    out.write_all(b"\n").unwrap();
    line.len() + 1
}

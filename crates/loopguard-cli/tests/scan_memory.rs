//! `scan` keeps within `--max-live-bytes` per file: with 100,000 (and, in CI, 500,000)
//! sessions open at once, the process's peak memory is the live budget, the reports
//! (about a kilobyte per session, kept until they are written) and a fixed base, however
//! many sessions there are; a line whose parsing could pass the budget is skipped and
//! reported with its size instead of being parsed. Linux only: the peak is read from
//! `/proc/<pid>/status`.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::peak_memory_and_output;
use serde_json::Value;

/// Bytes a session's report may take in the process, allocator overhead included.
const REPORT_BYTES: u64 = 1536;
/// The process without any session: the binary, the failure rules, buffers.
const BASE_BYTES: u64 = 48 << 20;

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lg-scan-memory-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `sessions` sessions, each a call; with `results`, every call's result after all the
/// calls, so that every session is open at once.
fn interleaved(dir: &Path, sessions: usize, results: bool) -> PathBuf {
    let path = dir.join(format!("sessions-{sessions}.jsonl"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for s in 0..sessions {
        writeln!(out, r#"{{"type":"call","session":"session-{s}","call_id":"c1","tool":"read","args":{{"path":"/x/{s}"}}}}"#).unwrap();
    }
    if results {
        for s in 0..sessions {
            writeln!(out, r#"{{"type":"result","session":"session-{s}","call_id":"c1","result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#).unwrap();
        }
    }
    out.flush().unwrap();
    path
}

/// Scans `file` with `extra` flags on one worker; the peak memory and the document.
fn scan(file: &Path, extra: &[&str]) -> (u64, Value) {
    let path = file.display().to_string();
    let mut args = vec!["scan", "--json", "-j", "1"];
    args.extend_from_slice(extra);
    args.push(&path);
    let started = Instant::now();
    let (code, peak, out) = peak_memory_and_output(&args);
    assert_eq!(code, 0, "scan {args:?}");
    let doc: Value = serde_json::from_slice(&out).expect("a JSON document");
    println!(
        "scan {}: peak {} MiB in {:.1} s, {} sessions, {} closed early",
        extra.join(" "),
        peak >> 20,
        started.elapsed().as_secs_f64(),
        doc["summary"]["sessions"],
        doc["summary"]["sessions_closed_early"]
    );
    (peak, doc)
}

fn within_budget(sessions: usize, results: bool) {
    let dir = tempdir(&sessions.to_string());
    let file = interleaved(&dir, sessions, results);
    let budget: u64 = 32 << 20;
    let (peak, doc) = scan(&file, &["--max-live-bytes", &budget.to_string()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(peak > 0, "no peak read");
    assert_eq!(doc["summary"]["sessions"], sessions as u64);
    assert_eq!(doc["summary"]["calls"], sessions as u64);
    // The budget held far fewer sessions than there were: most were closed early.
    let closed = doc["summary"]["sessions_closed_early"].as_u64().unwrap();
    assert!(closed > sessions as u64 / 2, "{closed} closed early");
    let bound = budget + sessions as u64 * REPORT_BYTES + BASE_BYTES;
    assert!(
        peak <= bound,
        "{sessions} sessions: peak {} MiB, more than the budget, the reports and the base ({} MiB)",
        peak >> 20,
        bound >> 20
    );
}

#[test]
fn one_hundred_thousand_open_sessions_stay_within_the_budget() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    within_budget(100_000, true);
}

/// Half a million sessions take a minute or two in a test build: in CI, or with
/// LOOPGUARD_TEST_HEAVY=1.
#[test]
fn half_a_million_sessions_stay_within_the_budget() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    if std::env::var_os("CI").is_none() && std::env::var_os("LOOPGUARD_TEST_HEAVY").is_none() {
        eprintln!("skipped: set LOOPGUARD_TEST_HEAVY=1 (CI runs it)");
        return;
    }
    within_budget(500_000, false);
}

/// One event line of `len` bytes or more whose arguments are `item` repeated.
fn long_line(dir: &Path, item: &str, len: usize) -> PathBuf {
    let path = dir.join("long.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let event = r#"{"type":"call","session":"s","call_id":"c","tool":"read","args":{"path":"/x"}}"#;
    writeln!(out, "{event}").unwrap();
    write!(
        out,
        r#"{{"type":"call","session":"s","call_id":"big","tool":"read","args":{{"rows":["#
    )
    .unwrap();
    let mut written = 0;
    while written < len {
        if written > 0 {
            out.write_all(b",").unwrap();
        }
        out.write_all(item.as_bytes()).unwrap();
        written += item.len() + 1;
    }
    writeln!(out, "]}}}}").unwrap();
    writeln!(out, "{event}").unwrap();
    out.flush().unwrap();
    path
}

/// A 64 MiB line of small objects would take several gigabytes as values: with the
/// default budget it is skipped and reported with its size and cost, and the scan stays
/// near the line's own size. A 64 MiB line of text costs little more than itself: it is
/// read.
#[test]
fn a_line_whose_parsing_would_pass_the_budget_is_skipped_with_its_size() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    let dir = tempdir("long");
    let len = 64 << 20;
    let objects = long_line(&dir, r#"{"a":0}"#, len);
    let (peak, doc) = scan(&objects, &[]);
    let skipped = &doc["files"][0]["read"]["skipped"][0];
    assert_eq!(skipped["reason"], "line_too_costly", "{doc}");
    assert_eq!(skipped["first_line"], 2);
    let example = skipped["example"].as_str().unwrap();
    let (size, cost) = example
        .split_once(" bytes; parsing it could take ")
        .unwrap_or_else(|| panic!("{example}"));
    assert!(size.parse::<usize>().unwrap() > len, "{example}");
    let cost: u64 = cost.split_whitespace().next().unwrap().parse().unwrap();
    assert!(cost > 1 << 30, "more than the default budget: {example}");
    assert_eq!(doc["summary"]["calls"], 2, "the lines around it are read");
    assert!(peak < 3 * len as u64, "peak {} MiB", peak >> 20);
    let text = long_line(&dir, &format!("\"{}\"", "x".repeat(1 << 20)), len);
    let (peak, doc) = scan(&text, &[]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(doc["summary"]["calls"], 3, "{}", doc["files"][0]["read"]);
    assert!(peak < 8 * len as u64, "peak {} MiB", peak >> 20);
}

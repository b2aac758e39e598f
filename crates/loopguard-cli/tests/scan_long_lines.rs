//! A line longer than `--max-line-bytes` is skipped without being held, by `scan` and by
//! `replay` reading a file: the process's peak memory stays far below the line (and below
//! the limit), not at the limit. Linux only: the peak is read from `/proc/<pid>/status`.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::bin;

/// A file with a valid event, a `len`-byte line, and another valid event.
fn file_with_a_long_line(dir: &Path, len: usize) -> PathBuf {
    let path = dir.join("long.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let event = r#"{"type":"call","session":"s","call_id":"c","tool":"read","args":{"path":"/x"}}"#;
    writeln!(out, "{event}").unwrap();
    out.write_all(b"{\"type\":\"call\",\"session\":\"s\",\"tool\":\"")
        .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut written = 0;
    while written < len {
        out.write_all(&chunk).unwrap();
        written += chunk.len();
    }
    out.write_all(b"\"}\n").unwrap();
    writeln!(out, "{event}").unwrap();
    path
}

/// Runs `loopguard ARGS`, watching its peak resident memory (`VmHWM`) until it exits.
/// Returns the exit code and the highest peak seen, in bytes.
fn peak_memory(args: &[&str]) -> (i32, u64) {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status) {
            let kb = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            peak = peak.max(kb.unwrap_or(0) * 1024);
        }
        if let Some(exit) = child.try_wait().unwrap() {
            return (exit.code().unwrap_or(-1), peak);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_over_long_line_is_skipped_without_being_held() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    let dir = std::env::temp_dir().join(format!("lg-long-line-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A 192 MiB line against a 128 MiB limit: holding the line up to the limit would
    // show as 128 MiB or more.
    let path = file_with_a_long_line(&dir, 192 << 20);
    let path = path.to_str().unwrap();
    let limit = (128u64 << 20).to_string();
    let (code, scan_peak) = peak_memory(&["scan", "--json", "--max-line-bytes", &limit, path]);
    assert_eq!(code, 0, "the two events around the line are read");
    let (code, replay_peak) = peak_memory(&["replay", "--max-line-bytes", &limit, path]);
    assert_eq!(code, 2, "replay answers the long line with an error");
    let _ = std::fs::remove_dir_all(&dir);
    for (what, peak) in [("scan", scan_peak), ("replay", replay_peak)] {
        assert!(peak > 0, "{what}: no peak read");
        assert!(
            peak < 48 << 20,
            "{what} held the over-long line: peak {} MiB",
            peak >> 20
        );
    }
}

//! A line longer than `--max-line-bytes` is skipped without being held, by `scan` and by
//! `replay` reading a file: the process's peak memory stays far below the line (and below
//! the limit), not at the limit. Linux only: the peak is read from `/proc/<pid>/status`.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::peak_memory;

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

//! Arbitrary bytes through format detection, every transcript reader and the scan on top
//! of it (guard included): nothing may panic, hang or recurse without bound, whatever the
//! input.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::{detect, scan_bytes, Format, RunWindows, ScanOptions};

fuzz_target!(|data: &[u8]| {
    let _ = detect(data, Some("fuzz.jsonl"));
    let _ = detect(data, Some("fuzz.traj"));
    let _ = RunWindows::read(Cursor::new(data));
    let options = ScanOptions {
        max_line: 1 << 16,
        ..ScanOptions::default()
    };
    for format in Format::ALL {
        let scan =
            scan_bytes(data, Some(format), "fuzz", &options).expect("in-memory scans do not fail");
        for session in &scan.sessions {
            assert_eq!(session.timeline.marks.len() as u64, session.calls);
            assert!(session.blocked_calls <= session.calls);
        }
    }
    let _ = scan_bytes(data, None, "fuzz", &options);
});

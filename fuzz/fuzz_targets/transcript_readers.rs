//! Arbitrary bytes through format detection, every transcript reader (each format forced,
//! and detected) and the scan on top of it (guard included), and through the failure
//! rules a user may give: nothing may panic, hang or recurse without bound, whatever the
//! input.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::{
    detect, scan_bytes, FailureRules, FileStatus, Format, RunWindows, ScanOptions,
};

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
        let calls: u64 = scan.sessions.iter().map(|s| s.calls).sum();
        for session in &scan.sessions {
            assert_eq!(session.timeline.marks.len() as u64, session.calls);
            assert!(session.blocked_calls <= session.calls);
            assert!(session.failed_outcomes <= session.outcomes);
            for l in &session.loops {
                assert!(l.calls[0] <= l.calls[1] && l.calls[1] <= session.calls);
            }
        }
        // A file is unread exactly when it gave no call although it has entries.
        if calls > 0 {
            assert_eq!(scan.status, FileStatus::Scanned);
        }
    }
    let _ = scan_bytes(data, None, "fuzz", &options);
    // A rules document, and the rules it makes, on the same bytes.
    if let Ok(text) = std::str::from_utf8(data) {
        let mut rules = FailureRules::none();
        if rules.add_document(text).is_ok() {
            let value = serde_json::from_slice(data).unwrap_or(serde_json::Value::Null);
            for format in Format::ALL {
                let _ = rules.failed(format, &value, text);
            }
        }
        let _ = FailureRules::none().add_text_flag(text);
    }
});

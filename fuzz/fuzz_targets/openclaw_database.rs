//! OpenClaw's agent database (2026.9 and later) with arbitrary transcript rows: the input
//! is cut at 0xFF bytes into events; an event whose first byte is odd is stored as zstd
//! (the rest as the "compressed" blob, its size taken from the next two bytes, so sizes
//! that lie are tried too), the others as JSON text (invalid UTF-8 made valid). A spawned
//! second transcript links to the first. The database is scanned as a user's would be.
#![no_main]

use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::readers::openclaw::database::{fixture, FILE_NAME};
use loopguard_transcripts::{scan_path, ScanOptions};

fn database_path() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lg-fuzz-openclaw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(FILE_NAME)
}

fuzz_target!(|data: &[u8]| {
    let path = database_path();
    let _ = std::fs::remove_file(&path);
    let db = rusqlite::Connection::open(&path).unwrap();
    fixture::create(&db).unwrap();
    fixture::add_window(&db, "p", "agent:main:main", 1, None).unwrap();
    fixture::add_window(
        &db,
        "c",
        "agent:main:subagent:1",
        2,
        Some("agent:main:main"),
    )
    .unwrap();
    for (seq, event) in data.split(|&b| b == 0xFF).enumerate() {
        let session = if seq % 2 == 0 { "p" } else { "c" };
        match event.split_first() {
            Some((flag, rest)) if flag % 2 == 1 && rest.len() >= 2 => {
                let size = i64::from(u16::from_le_bytes([rest[0], rest[1]]));
                db.execute(
                    "INSERT INTO transcript_events VALUES (?1, ?2, NULL, 0, ?3, ?4)",
                    rusqlite::params![session, seq as i64, &rest[2..], size],
                )
                .unwrap();
            }
            _ => {
                db.execute(
                    "INSERT INTO transcript_events VALUES (?1, ?2, ?3, 0, NULL, NULL)",
                    rusqlite::params![session, seq as i64, String::from_utf8_lossy(event)],
                )
                .unwrap();
            }
        }
    }
    drop(db);
    let _ = scan_path(&path, &ScanOptions::default());
});

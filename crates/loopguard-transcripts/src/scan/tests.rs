use super::*;

#[test]
fn each_file_counts_its_size_once_in_the_progress() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let seen = Arc::new(AtomicU64::new(0));
    let options = ScanOptions {
        progress: Some(Arc::new({
            let seen = Arc::clone(&seen);
            move |n| {
                seen.fetch_add(n, Ordering::Relaxed);
            }
        })),
        ..ScanOptions::default()
    };
    let dir = std::env::temp_dir().join(format!("lg-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // OpenClaw is read twice; a file of unknown format is not read past its prefix.
    let mut openclaw = String::from(r#"{"type":"session","version":3,"id":"s"}"#);
    for i in 0..3000 {
        openclaw.push_str(&format!(
            "\n{{\"type\":\"message\",\"id\":\"a{i}\",\"parentId\":{},\"message\":{{\"role\":\"assistant\",\"content\":[{{\"type\":\"toolCall\",\"id\":\"c{i}\",\"name\":\"read\",\"arguments\":{{\"path\":\"/{i}\"}}}}]}}}}",
            if i == 0 { "null".to_owned() } else { format!("\"a{}\"", i - 1) }
        ));
    }
    let files = [
        ("s.jsonl", openclaw.into_bytes()),
        ("notes.json", b"{\"hello\": 1}".to_vec()),
        ("chat.json", br#"[{"role":"user","content":"x"}]"#.to_vec()),
    ];
    let mut total = 0;
    for (name, bytes) in &files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        total += bytes.len() as u64;
        scan_path(&path, &options);
    }
    assert_eq!(seen.load(Ordering::Relaxed), total);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_without_calls_are_unread_unless_every_record_was_understood() {
    let options = ScanOptions::default();
    // Every line of an unknown type: unread, with the reason.
    let scan = scan_bytes(
        b"{\"type\":\"x\",\"sessionId\":\"s\"}\n{\"type\":\"y\",\"sessionId\":\"s\"}\n",
        Some(Format::ClaudeCode),
        "f.jsonl",
        &options,
    )
    .unwrap();
    match &scan.status {
        FileStatus::Unread { reason } => {
            assert!(
                reason.contains("read as claude-code")
                    && reason.contains("2 unknown_entry_type")
                    && reason.contains("from line 1, e.g. x"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No record of the format at all.
    let scan = scan_bytes(b"{\"x\": 1}", Some(Format::SweAgent), "f.traj", &options).unwrap();
    assert!(
        matches!(&scan.status, FileStatus::Unread { reason } if reason.contains("no swe-agent record in 1 line")),
        "{:?}",
        scan.status
    );
    // A chat without tools is a readable transcript without calls.
    let scan = scan_bytes(
        br#"[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]"#,
        None,
        "chat.json",
        &options,
    )
    .unwrap();
    assert_eq!(scan.status, FileStatus::Scanned);
    assert_eq!(scan.calls(), 0);
}

/// Writes `transcript` (a transcript file's lines) into a database of OpenClaw 2026.9's
/// shape, as the session `session`, each line an event, the long ones compressed as
/// OpenClaw stores them.
fn openclaw_database(dir: &Path, session: &str, transcript: &[u8]) -> std::path::PathBuf {
    use crate::readers::openclaw::database::{fixture, FILE_NAME};
    let path = dir.join(FILE_NAME);
    let db = rusqlite::Connection::open(&path).unwrap();
    fixture::create(&db).unwrap();
    fixture::add_window(&db, session, "agent:main:main", 1, None).unwrap();
    let text = std::str::from_utf8(transcript).unwrap();
    fixture::add_events(&db, session, text.split('\n')).unwrap();
    path
}

/// The real OpenClaw transcripts of the corpus (labelled loops and healthy sessions), each
/// moved into a database as OpenClaw 2026.9 keeps it: the database scans exactly as the
/// file, findings, loops, runs and spend alike.
#[test]
fn a_database_scans_like_the_transcript_files_it_replaced() {
    let mut compared = 0;
    for name in [
        "08237d46-d6c7-42a2-ab47-87ff3939da71.jsonl",
        "21596f48-a8a0-43df-8e8d-387a0f1709a8.jsonl",
        "44de2062-6cdd-4d8c-917e-41a2bb188a7a.jsonl",
        "de164575-fc39-43d3-b0f9-7781fe07e46d.jsonl",
        "f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1.jsonl",
    ] {
        let Some(file) = crate::testing::corpus(&format!("openclaw/{name}")) else {
            continue;
        };
        let options = ScanOptions::default();
        let from_file = scan_path(&file, &options);
        assert_eq!(from_file.status, FileStatus::Scanned, "{name}");
        let session = name.trim_end_matches(".jsonl");
        let dir = tempfile::tempdir().unwrap();
        let database = openclaw_database(dir.path(), session, &std::fs::read(&file).unwrap());
        let from_database = scan_path(&database, &options);
        assert_eq!(from_database.status, FileStatus::Scanned, "{name}");
        assert_eq!(from_database.read.records, from_file.read.records, "{name}");
        assert_eq!(from_database.read.lines, from_file.read.lines, "{name}");
        let (a, b) = (&from_file.sessions, &from_database.sessions);
        assert!(
            !a.is_empty() && a.iter().map(|s| s.calls).sum::<u64>() > 0,
            "{name}"
        );
        assert_eq!(a, b, "{name}");
        compared += 1;
    }
    eprintln!("{compared} corpus transcripts compared");
}

/// A parent transcript that spawned one sub-agent in each of its two runs, and the two
/// sub-agents, in one database: each child names its parent and the parent's run, however
/// the transcripts are split between the threads that read them.
#[test]
fn a_database_links_each_sub_agent_to_the_run_that_spawned_it() {
    use crate::readers::openclaw::database::{fixture, FILE_NAME};
    let prompt = |id: &str, text: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","message":{{"role":"user","content":[{{"type":"text","text":"{text}"}}]}}}}"#
        )
    };
    let spawn = |id: &str, child: &str| {
        [
            format!(
                r#"{{"type":"message","id":"{id}c","message":{{"role":"assistant","content":[{{"type":"toolCall","id":"call-{id}","name":"sessions_spawn","arguments":{{"task":"look"}}}}]}}}}"#
            ),
            format!(
                r#"{{"type":"message","id":"{id}r","message":{{"role":"toolResult","toolCallId":"call-{id}","toolName":"sessions_spawn","content":[{{"type":"text","text":"{{\"status\":\"accepted\",\"childSessionKey\":\"{child}\"}}"}}]}}}}"#
            ),
        ]
    };
    let read = |id: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","message":{{"role":"assistant","content":[{{"type":"toolCall","id":"call-{id}","name":"read","arguments":{{"path":"a.txt"}}}}]}}}}"#
        )
    };
    let mut parent = vec![
        r#"{"type":"session","id":"p"}"#.to_owned(),
        prompt("u1", "first"),
    ];
    parent.extend(spawn("s1", "agent:main:subagent:a"));
    parent.push(prompt("u2", "second"));
    parent.extend(spawn("s2", "agent:main:subagent:b"));
    // Each entry the child of the one before: the active branch.
    let chain = |lines: &[String]| -> Vec<String> {
        let mut previous = serde_json::Value::Null;
        lines
            .iter()
            .map(|line| {
                let mut entry: serde_json::Value = serde_json::from_str(line).unwrap();
                entry["parentId"] = std::mem::replace(&mut previous, entry["id"].clone());
                entry.to_string()
            })
            .collect()
    };
    let parent = chain(&parent);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let db = rusqlite::Connection::open(&path).unwrap();
    fixture::create(&db).unwrap();
    fixture::add_window(&db, "p", "agent:main:main", 1, None).unwrap();
    fixture::add_events(&db, "p", parent.iter().map(String::as_str)).unwrap();
    for (n, child) in ["a", "b"].into_iter().enumerate() {
        let key = format!("agent:main:subagent:{child}");
        fixture::add_window(&db, child, &key, 2 + n as i64, Some("agent:main:main")).unwrap();
        let lines = chain(&[prompt("c0", "look"), read("c1")]);
        fixture::add_events(&db, child, lines.iter().map(String::as_str)).unwrap();
    }
    drop(db);
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let scan = pool.install(|| scan_path(&path, &ScanOptions::default()));
        assert_eq!(scan.status, FileStatus::Scanned);
        let links: Vec<_> = scan
            .sessions
            .iter()
            .map(|s| {
                (
                    s.session.as_str(),
                    s.parent_session.as_deref(),
                    s.parent_run.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            links,
            [
                ("p", None, None),
                ("a", Some("p"), Some("turn-1")),
                ("b", Some("p"), Some("turn-2")),
            ],
            "{threads} threads"
        );
    }
}

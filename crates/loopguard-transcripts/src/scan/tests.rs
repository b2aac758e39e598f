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

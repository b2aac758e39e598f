//! `loopguard scan` keeps every session whose run may go on: with hundreds or thousands of
//! other sessions interleaved between the calls of a looping one, it finds what `loopguard
//! replay` finds; and when the live memory budget is too small for them, the sessions it
//! closes are reported, never dropped silently.

mod common;

use std::path::PathBuf;

use common::{json_lines, run};
use serde_json::{json, Value};

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lg-scan-sessions-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// 25 identical failing reads in session `looping`, with `others` fresh sessions (a call
/// and its result each) between every two of them.
fn interleaved(others: usize) -> String {
    let mut lines = Vec::new();
    let mut n = 0;
    for i in 1..=25 {
        let id = format!("c{i}");
        lines.push(json!({"type": "call", "session": "looping", "call_id": id, "tool": "read", "args": {"path": "/x"}}));
        lines.push(
            json!({"type": "result", "session": "looping", "call_id": id, "error": "ENOENT: /x"}),
        );
        for _ in 0..others {
            n += 1;
            let session = format!("other-{n}");
            lines.push(json!({"type": "call", "session": session, "call_id": "o", "tool": "ls", "args": {}}));
            lines.push(json!({"type": "result", "session": session, "call_id": "o", "result": {"content": []}}));
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// (warned, blocked) calls of session `looping` as `replay` answers them.
fn replayed(events: &str, config: &str) -> (u64, u64) {
    let out = run(&["replay", "--config", config, "-"], events.as_bytes());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers = json_lines(&out.stdout);
    let count = |verdict: &str| {
        answers
            .iter()
            .filter(|a| a["session"] == "looping" && a["verdict"] == verdict)
            .count() as u64
    };
    (count("warn"), count("block"))
}

fn scanned(events: &std::path::Path, config: &str, extra: &[&str]) -> Value {
    let path = events.display().to_string();
    let mut args = vec!["scan", "--json", "--config", config];
    args.extend_from_slice(extra);
    args.push(&path);
    let out = run(&args, b"");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)))
}

fn looping(doc: &Value) -> &Value {
    doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == "looping")
        .unwrap()
}

#[test]
fn interleaved_sessions_find_what_replay_finds() {
    let dir = tempdir("interleaved");
    let config = dir.join("loops.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true } } }").unwrap();
    let config = config.display().to_string();
    for others in [100, 1000] {
        let events = interleaved(others);
        let file = dir.join(format!("events-{others}.jsonl"));
        std::fs::write(&file, &events).unwrap();
        let (warned, blocked) = replayed(&events, &config);
        assert_eq!(
            (warned, blocked),
            (10, 5),
            "replay with {others} other sessions"
        );
        let doc = scanned(&file, &config, &[]);
        let s = looping(&doc);
        assert_eq!(
            (
                s["warned_calls"].as_u64().unwrap(),
                s["blocked_calls"].as_u64().unwrap()
            ),
            (warned, blocked),
            "scan with {others} other sessions"
        );
        assert_eq!(s["closed_early"], false);
        assert_eq!(doc["summary"]["sessions"], 25 * others as u64 + 1);
        assert_eq!(doc["summary"]["sessions_closed_early"], 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_budget_too_small_closes_sessions_and_says_so() {
    let dir = tempdir("budget");
    let config = dir.join("loops.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true } } }").unwrap();
    let config = config.display().to_string();
    let file = dir.join("events.jsonl");
    std::fs::write(&file, interleaved(1000)).unwrap();
    // About 100 open runs fit in 1 MB: the looping session is closed between its calls.
    let doc = scanned(&file, &config, &["--max-live-bytes", "1000000"]);
    let closed = doc["summary"]["sessions_closed_early"].as_u64().unwrap();
    assert!(closed > 20_000, "{closed}");
    assert_eq!(looping(&doc)["closed_early"], true);
    assert_eq!(
        looping(&doc)["blocked_calls"],
        0,
        "its history was forgotten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

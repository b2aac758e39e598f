//! Bad input to `loopguard hook`: whatever arrives, the hook never crashes, never exits 2
//! (which the agents read as "block") for bad input, and fails open with exit 1 and one
//! line on stderr; and what the hook cannot write or store still does its job.

mod common;
mod hook_common;

use hook_common::Env;
use serde_json::json;

const AGENTS: [&str; 3] = ["claude-code", "codex", "gemini"];

fn assert_fails_open(h: &hook_common::Hook, what: &str) {
    assert_eq!(h.code, 1, "{what}: {h:?}");
    assert_eq!(h.stdout, "", "{what}");
    assert_eq!(h.stderr.lines().count(), 1, "{what}: {:?}", h.stderr);
    assert!(
        h.stderr.starts_with("loopguard hook "),
        "{what}: {:?}",
        h.stderr
    );
}

#[test]
fn garbage_on_stdin() {
    let env = Env::new();
    let mut deep = String::new();
    for _ in 0..10_000 {
        deep.push('[');
    }
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("text", b"PreToolUse Read /etc/passwd".to_vec()),
        ("truncated JSON", br#"{"session_id":"s","hook_event_name":"PreTo"#.to_vec()),
        ("not UTF-8", vec![0xff, 0xfe, b'{', 0x80]),
        ("an array", b"[1,2,3]".to_vec()),
        ("a string", b"\"PreToolUse\"".to_vec()),
        ("deep nesting", deep.into_bytes()),
        ("no event name", br#"{"session_id":"s","tool_name":"Read"}"#.to_vec()),
        ("event name not a string", br#"{"hook_event_name":7}"#.to_vec()),
        ("session id not a string", br#"{"hook_event_name":"PreToolUse","session_id":{"a":1},"tool_name":"Read"}"#.to_vec()),
        ("call without a tool", br#"{"hook_event_name":"PreToolUse","session_id":"s","tool_input":{}}"#.to_vec()),
        ("tool name not a string", br#"{"hook_event_name":"PreToolUse","session_id":"s","tool_name":["Read"]}"#.to_vec()),
        ("tool use id not a string", br#"{"hook_event_name":"PreToolUse","session_id":"s","tool_name":"Read","tool_use_id":12}"#.to_vec()),
    ];
    for agent in AGENTS {
        // Each agent's name for "a tool call is about to run".
        let before = if agent == "gemini" {
            "BeforeTool"
        } else {
            "PreToolUse"
        };
        for (what, input) in &inputs {
            let input = String::from_utf8_lossy(input).replace("PreToolUse", before);
            let input = if what == &"not UTF-8" {
                vec![0xff, 0xfe, b'{', 0x80]
            } else {
                input.into_bytes()
            };
            let h = hook_common::run(env.command(agent), &input);
            assert_fails_open(&h, &format!("{agent} / {what}"));
        }
    }
    assert!(!env.db.exists(), "nothing reached the database");
}

#[test]
fn unknown_hook_events_do_nothing() {
    let env = Env::new();
    for (agent, nothing) in [("claude-code", ""), ("codex", ""), ("gemini", "{}")] {
        for event in ["TeammateIdle", "Notification", "NoSuchEvent", "pretooluse"] {
            let h = env.hook(agent, &json!({"session_id": "s", "hook_event_name": event}));
            assert_eq!((h.code, h.stdout.as_str()), (0, nothing), "{agent} {event}");
            assert!(h.stderr.contains(event), "{}", h.stderr);
        }
    }
    assert!(!env.db.exists());
}

#[test]
fn unusable_config_or_database_fail_open() {
    let call = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {}});
    // An invalid config.
    let env = Env::with_config("{ tools: { loopDetection: { enabled: 'yes' } } }");
    assert_fails_open(&env.hook("claude-code", &call), "invalid config");
    // A missing config file.
    let mut env = Env::new();
    env.config = Some(env.dir.path().join("nope.json5"));
    let mut before = call.clone();
    before["hook_event_name"] = json!("BeforeTool");
    assert_fails_open(&env.hook("gemini", &before), "missing config");
    // A database path under a regular file.
    let mut env = Env::new();
    std::fs::write(env.dir.path().join("file"), "x").unwrap();
    env.db = env.dir.path().join("file/loopguard.db");
    assert_fails_open(&env.hook("codex", &call), "database under a file");
    // A file that is not a database.
    let mut env = Env::new();
    env.db = env.dir.path().join("not.db");
    std::fs::write(&env.db, vec![b'x'; 8192]).unwrap();
    let h = env.hook("claude-code", &call);
    assert_fails_open(&h, "not a database");
    assert!(h.stderr.contains("not.db"), "{}", h.stderr);
    // No default location: neither XDG_DATA_HOME nor HOME.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"));
    cmd.args(["hook", "claude-code"])
        .env_remove("LOOPGUARD_DB")
        .env_remove("XDG_DATA_HOME")
        .env_remove("HOME");
    assert_fails_open(
        &hook_common::run(cmd, call.to_string().as_bytes()),
        "no default database",
    );
}

#[test]
fn odd_but_valid_payloads_are_handled() {
    let env = Env::new();
    for payload in [
        // No session id: the session "default".
        json!({"hook_event_name": "PreToolUse", "tool_name": "Read"}),
        // Null input, extra fields, unicode.
        json!({"session_id": "sé", "hook_event_name": "PreToolUse", "tool_name": "Write", "tool_input": null, "extra": [1, 2], "tool_use_id": "✓"}),
        // A huge argument.
        json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Write", "tool_input": {"content": "x".repeat(5 << 20)}}),
        // A response of an unexpected type.
        json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_input": {}, "tool_response": 42}),
    ] {
        let h = env.hook("claude-code", &payload);
        assert_eq!((h.code, h.stdout.as_str()), (0, ""), "{h:?}");
    }
    assert_eq!(env.runs("default").len(), 1);
    assert_eq!(env.runs("sé").len(), 1);
}

/// Gemini CLI's `AfterModel` carries the whole conversation (`llm_request`) with every
/// chunk: a huge one, or one nested 100,000 deep, is read for its model only, and the
/// chunk is still judged (it chants here: the run is stopped at its 10th chunk).
#[test]
fn a_gemini_chunk_with_a_huge_or_deep_conversation_is_judged() {
    let env = Env::with_config(
        r#"{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: "recommended" } }"#,
    );
    let response = r#"{"text":"Checking the same file once more.\n","candidates":[{"content":{"role":"model","parts":["Checking the same file once more.\n"]}}]}"#;
    let huge = format!(
        r#"{{"model":"gemini-2.5-pro","messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(20 << 20)
    );
    let deep = format!(
        r#"{{"model":"gemini-2.5-pro","messages":{}1{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    for (what, request) in [("huge", &huge), ("deep", &deep)] {
        let session = format!("g-{what}");
        let payload = format!(
            r#"{{"session_id":"{session}","hook_event_name":"AfterModel","llm_request":{request},"llm_response":{response}}}"#
        );
        let mut last = None;
        for n in 1..=10 {
            let h = hook_common::run(env.command("gemini"), payload.as_bytes());
            assert_eq!(h.code, 0, "{what} chunk {n}: {}", h.stderr);
            last = Some(h.json());
        }
        assert_eq!(last.unwrap()["continue"], false, "{what}");
    }
}

#[test]
fn a_payload_over_the_limit_is_refused() {
    let env = Env::new();
    let mut big =
        br#"{"hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{"x":""#.to_vec();
    big.resize(big.len() + (64 << 20) + 10, b'a');
    big.extend_from_slice(br#""}}"#);
    let h = hook_common::run(env.command("codex"), &big);
    assert_fails_open(&h, "oversized payload");
    assert!(h.stderr.contains("larger than"), "{}", h.stderr);
}

/// Ids are stored bounded: a 1 MB session id (and tool name) leaves a row key of at most
/// 256 bytes in the file `serve` shares, and the same id keeps finding its run.
#[test]
fn huge_ids_are_stored_bounded() {
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }");
    let session = "s".repeat(1 << 20);
    let tool = "T".repeat(1 << 20);
    let mut denied = None;
    for i in 1..=4 {
        let id = format!("toolu_{i}");
        let pre = json!({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": {"a": 1}, "tool_use_id": id});
        let h = env.hook("claude-code", &pre);
        assert_eq!(h.code, 0, "{h:?}");
        if h.stdout.contains("\"deny\"") {
            denied = Some(i);
            break;
        }
        let post = json!({"session_id": session, "hook_event_name": "PostToolUse", "tool_name": tool, "tool_input": {"a": 1}, "tool_use_id": id, "tool_response": "same"});
        assert_eq!(env.hook("claude-code", &post).code, 0);
    }
    assert_eq!(
        denied,
        Some(4),
        "the loop is still caught under the bounded ids"
    );
    let db = rusqlite::Connection::open(&env.db).unwrap();
    let longest: i64 = db
        .query_row(
            "SELECT max(length(CAST(session AS BLOB))) FROM runs",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(longest <= 256, "{longest}");
}

/// A decision the agent cannot be given on stdout (disk full, pipe closed) is not lost:
/// a deny becomes exit status 2 with the reason on stderr, which every agent reads as a
/// block; an allow that cannot be written is a plain failure (exit 1).
#[test]
fn a_deny_that_cannot_be_written_still_blocks() {
    use std::process::Stdio;
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2 } } }");
    let pre = |i: u32| json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {"p": 1}, "tool_use_id": format!("t{i}")});
    let post = |i: u32| json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Read", "tool_input": {"p": 1}, "tool_use_id": format!("t{i}"), "tool_response": "same"});
    for i in 1..=2 {
        env.hook("claude-code", &pre(i));
        env.hook("claude-code", &post(i));
    }
    // stdout on a full disk.
    let out = with_stdout(env.command("claude-code"), Stdio::from(full()), &pre(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("CRITICAL: Read was called"), "{stderr}");
    // stdout a pipe whose reader is gone.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = with_stdout(env.command("claude-code"), Stdio::from(writer), &pre(4));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Gemini answers `{}` to an allowed call: that it cannot be written is a failure.
    let allow = json!({"session_id": "g", "hook_event_name": "BeforeTool", "tool_name": "read_file", "tool_input": {}});
    let out = with_stdout(env.command("gemini"), Stdio::from(full()), &allow);
    assert_eq!(out.status.code(), Some(1));
}

fn full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// Runs a hook with `payload` on stdin and its stdout sent to `stdout`.
fn with_stdout(
    mut cmd: std::process::Command,
    stdout: std::process::Stdio,
    payload: &serde_json::Value,
) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        payload.to_string().as_bytes(),
    )
    .unwrap();
    child.wait_with_output().unwrap()
}

/// `rows` rows of a database tool's structured result, as JSON text (about 36 bytes a row).
fn rows_json(rows: usize) -> String {
    let mut out = String::with_capacity(rows * 40 + 32);
    out.push_str(r#"{"structuredContent":{"rows":["#);
    for i in 0..rows {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!(r#"{{"id":{i},"name":"row {i}","score":0.5}}"#));
    }
    out.push_str("]}}");
    out
}

/// A 50 MB structured tool response through the real hook: read at about its own size
/// (a value tree of it would take gigabytes), within the 10 s timeout `hook install`
/// writes, and its outcome recorded, so that the same call returning the same rows again
/// is the same no-progress loop.
#[test]
fn a_50_mb_structured_response_is_fingerprinted_within_memory_and_time() {
    if !std::path::Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
    );
    let response = rows_json(1_150_000);
    let size = response.len() as u64;
    assert!(size >= 50_000_000, "{size}");
    let mut decisions = Vec::new();
    for i in 0..3 {
        let pre = json!({"session_id": "big", "hook_event_name": "PreToolUse", "tool_name": "mcp__db__query",
            "tool_input": {"sql": "select * from rows"}, "tool_use_id": format!("t{i}")});
        let h = env.hook("claude-code", &pre);
        assert_eq!(h.code, 0, "{h:?}");
        decisions.push(if h.stdout.contains("additionalContext") {
            "warn"
        } else {
            "allow"
        });
        let post = format!(
            r#"{{"session_id":"big","hook_event_name":"PostToolUse","tool_name":"mcp__db__query","tool_input":{{"sql":"select * from rows"}},"tool_use_id":"t{i}","tool_response":{response}}}"#
        );
        let started = std::time::Instant::now();
        let (code, peak, _) = common::peak_memory_of(env.command("claude-code"), post.as_bytes());
        let elapsed = started.elapsed();
        println!(
            "PostToolUse of {} MB: peak {} MiB ({:.2}x), {:.2} s",
            size / 1_000_000,
            peak >> 20,
            peak as f64 / size as f64,
            elapsed.as_secs_f64()
        );
        assert_eq!(code, 0);
        assert!(
            peak < 3 * size,
            "peak {} MiB for a {} MB payload",
            peak >> 20,
            size / 1_000_000
        );
        assert!(elapsed < std::time::Duration::from_secs(10), "{elapsed:?}");
    }
    // Every outcome was recorded, and they are one outcome: the third call repeats.
    let runs = env.runs("big");
    let history = runs[0].1.history();
    assert_eq!(history.len(), 3);
    let outcomes: Vec<_> = history.records().iter().map(|r| r.outcome()).collect();
    assert!(
        outcomes.iter().all(|o| o.is_some() && *o == outcomes[0]),
        "{outcomes:?}"
    );
    assert_eq!(decisions, ["allow", "allow", "warn"]);
}

//! `loopguard sessions list|show|reset` over the SQLite file the hooks and the server
//! share, and over a running server (`--url`).

mod common;
mod serve_common;

use std::path::Path;

use common::{bin, run_command};
use serde_json::{json, Value};
use serve_common::Server;

fn lg(args: &[&str], db: &Path) -> std::process::Output {
    let mut cmd = bin();
    cmd.args(args)
        .env("LOOPGUARD_DB", db)
        .env_remove("LOOPGUARD_CONFIG")
        .env_remove("LOOPGUARD_TOKEN");
    run_command(cmd, b"")
}

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One Claude Code hook event into `db`.
fn hook(db: &Path, config: &Path, payload: Value) {
    let mut cmd = bin();
    cmd.args(["hook", "claude-code", "--db"])
        .arg(db)
        .arg("--config")
        .arg(config);
    let out = run_command(cmd, payload.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Session `s`: a prompt, then `n` identical reads (warn at 2, block at 3, stop at 4).
fn loop_in(db: &Path, config: &Path, session: &str, n: usize) {
    hook(
        db,
        config,
        json!({"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": "go"}),
    );
    for i in 0..n {
        let id = format!("t{i}");
        hook(
            db,
            config,
            json!({"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "/x"}, "tool_use_id": id}),
        );
        hook(
            db,
            config,
            json!({"session_id": session, "hook_event_name": "PostToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "/x"}, "tool_response": "same", "tool_use_id": id}),
        );
    }
}

#[test]
fn list_show_and_reset_what_the_hooks_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("lg.db");
    let config = dir.path().join("c.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3, globalCircuitBreakerThreshold: 4 } } }",
    )
    .unwrap();

    // Nothing yet, and reading does not create the file.
    let empty = json_of(&lg(&["sessions", "list", "--json"], &db));
    assert_eq!(empty["sessions"], json!([]));
    assert!(!db.exists());

    loop_in(&db, &config, "looping", 6);
    loop_in(&db, &config, "calm", 1);

    let list = json_of(&lg(&["sessions", "list"], &db));
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    let looping = sessions.iter().find(|s| s["session"] == "looping").unwrap();
    assert_eq!(
        (looping["runs"].as_u64(), looping["stopped_runs"].as_u64()),
        (Some(1), Some(1))
    );
    let calm = sessions.iter().find(|s| s["session"] == "calm").unwrap();
    assert_eq!(calm["stopped_runs"], 0);
    // Most recently active first.
    assert_eq!(sessions[0]["session"], "calm");

    let view = json_of(&lg(&["sessions", "show", "looping"], &db));
    assert_eq!(view["session"], "looping");
    let run = &view["runs"][0];
    assert_eq!(run["run"], "prompt-1");
    assert_eq!(run["stopped"]["detector"], "global_circuit_breaker");
    let recent = run["recent"].as_array().unwrap();
    // Newest first: the blocked calls, then the allowed ones with their results.
    assert_eq!(
        recent[0],
        json!({"tool": "Read", "blocked": true, "outcome": "none", "repeats": 6})
    );
    assert!(
        recent
            .iter()
            .any(|c| c["blocked"] == false && c["outcome"] == "result"),
        "{recent:?}"
    );
    assert!(run["history"]["vetoes"].as_u64().unwrap() >= 2);

    // For people: a table and a story.
    let out = lg(&["sessions", "show", "looping", "--json"], &db);
    assert_eq!(json_of(&out), view);
    let missing = lg(&["sessions", "show", "nope"], &db);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no live session \"nope\""));

    // Reset one run, then the session.
    let reset = json_of(&lg(
        &[
            "sessions", "reset", "looping", "--run", "prompt-1", "--json",
        ],
        &db,
    ));
    assert_eq!(reset["removed_runs"], 1);
    assert_eq!(
        lg(&["sessions", "show", "looping"], &db).status.code(),
        Some(1)
    );
    // The next call of that session starts clean: allowed.
    let mut cmd = bin();
    cmd.args(["hook", "claude-code", "--db"])
        .arg(&db)
        .arg("--config")
        .arg(&config);
    let out = run_command(
        cmd,
        json!({"session_id": "looping", "hook_event_name": "PreToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "/x"}, "tool_use_id": "again"})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let reset = json_of(&lg(&["sessions", "reset", "calm"], &db));
    assert_eq!(reset["removed_runs"], 1);
    let list = json_of(&lg(&["sessions", "list"], &db));
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
}

#[test]
fn show_and_reset_through_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }").unwrap();
    let server = Server::start(&["--memory", "--config", config.to_str().unwrap()]);
    let mut client = server.client();
    for i in 0..4 {
        client.post("/v1/events", &json!({"type": "call", "session": "s 1", "run": "r", "call_id": format!("c{i}"), "tool": "read", "args": {"p": 1}}).to_string());
        client.post("/v1/events", &json!({"type": "result", "session": "s 1", "run": "r", "call_id": format!("c{i}"), "result": "same"}).to_string());
    }
    let url = format!("http://{}", server.addr);
    let nowhere = dir.path().join("unused.db");
    let view = json_of(&lg(&["sessions", "show", "s 1", "--url", &url], &nowhere));
    assert_eq!(view["runs"][0]["run"], "r");
    assert_eq!(view["runs"][0]["recent"][0]["blocked"], true);
    assert_eq!(view, client.get("/v1/sessions/s%201").json());
    let reset = json_of(&lg(
        &["sessions", "reset", "s 1", "--run", "r", "--url", &url],
        &nowhere,
    ));
    assert_eq!(reset["removed_runs"], 1);
    assert_eq!(client.get("/v1/sessions/s%201").status, 404);
    let out = lg(&["sessions", "show", "s 1", "--url", &url], &nowhere);
    assert_eq!(out.status.code(), Some(1));
    assert!(!nowhere.exists());
    server.stop();
}

/// `sessions reset` on the SQLite file while `loopguard serve` runs on it: the server's
/// `GET /v1/sessions/{id}` shows the reset at once, not the state it last saw, and the
/// next event of the run starts clean.
#[test]
fn a_reset_in_the_file_shows_in_the_running_server_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("guard.db");
    let config = dir.path().join("c.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }").unwrap();
    let server = Server::start(&[
        "--db",
        db.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let mut client = server.client();
    let call = |client: &mut serve_common::Client, run: &str, i: usize| {
        let v = client.post("/v1/events", &json!({"type": "call", "session": "s1", "run": run, "call_id": format!("{run}{i}"), "tool": "read", "args": {"p": 1}}).to_string()).json();
        client.post("/v1/events", &json!({"type": "result", "session": "s1", "run": run, "call_id": format!("{run}{i}"), "result": "same"}).to_string());
        v["verdict"].as_str().unwrap().to_owned()
    };
    for i in 0..4 {
        call(&mut client, "r1", i);
        call(&mut client, "r2", i);
    }
    let runs = |client: &mut serve_common::Client| -> Vec<String> {
        let got = client.get("/v1/sessions/s1");
        if got.status == 404 {
            return Vec::new();
        }
        let mut runs: Vec<String> = got.json()["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run"].as_str().unwrap().to_owned())
            .collect();
        runs.sort();
        runs
    };
    assert_eq!(runs(&mut client), ["r1", "r2"]);
    let reset = json_of(&lg(&["sessions", "reset", "s1", "--run", "r1"], &db));
    assert_eq!(reset["removed_runs"], 1);
    assert_eq!(
        runs(&mut client),
        ["r2"],
        "the server reads the reset at once"
    );
    // The run starts clean: its next identical call is allowed, not blocked.
    assert_eq!(call(&mut client, "r1", 9), "allow");
    assert_eq!(runs(&mut client), ["r1", "r2"]);
    json_of(&lg(&["sessions", "reset", "s1"], &db));
    assert_eq!(client.get("/v1/sessions/s1").status, 404);
    server.stop();
}

/// `sessions list --url`: the server has no list endpoint; the answer says so and what to
/// do instead, rather than clap's bare "unexpected argument".
#[test]
fn list_with_a_url_says_why_not_and_what_instead() {
    let dir = tempfile::tempdir().unwrap();
    let out = lg(
        &["sessions", "list", "--url", "http://127.0.0.1:7671"],
        &dir.path().join("none.db"),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a server cannot list its sessions"),
        "{stderr}"
    );
    assert!(
        stderr.contains("loopguard sessions list --db PATH"),
        "{stderr}"
    );
    assert!(
        stderr.contains("loopguard sessions show SESSION --url http://127.0.0.1:7671"),
        "{stderr}"
    );
    assert!(!stderr.contains("unexpected argument"), "{stderr}");
}

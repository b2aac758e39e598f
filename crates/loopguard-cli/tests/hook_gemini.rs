//! `loopguard hook gemini` through the real binary, with the payload shapes of Gemini CLI's
//! hooks reference (`BeforeTool`, `AfterTool` with `{llmContent, returnDisplay}`,
//! `BeforeAgent`, `PreCompress` …).

mod common;
mod hook_common;

use hook_common::{counts, Env};
use serde_json::{json, Value};

const AGENT: &str = "gemini";
const SESSION: &str = "gemini-session-1";

fn base(event: &str) -> Value {
    json!({
        "session_id": SESSION,
        "transcript_path": "/home/user/.gemini/tmp/abc/chats/session.json",
        "cwd": "/home/user/site",
        "hook_event_name": event,
        "timestamp": "2026-01-28T10:00:00.000Z",
    })
}

fn before(tool: &str, input: Value) -> Value {
    let mut v = base("BeforeTool");
    v["tool_name"] = json!(tool);
    v["tool_input"] = input;
    v
}

fn after(tool: &str, input: Value, response: Value) -> Value {
    let mut v = base("AfterTool");
    v["tool_name"] = json!(tool);
    v["tool_input"] = input;
    v["tool_response"] = response;
    v
}

#[test]
fn a_loop_is_warned_with_the_result_then_denied() {
    let env = Env::new();
    let mut agent = base("BeforeAgent");
    agent["prompt"] = json!("Why does the build fail?");
    let h = env.hook(AGENT, &agent);
    assert_eq!(
        (h.code, h.stdout.as_str()),
        (0, "{}"),
        "Gemini reads JSON on stdout: {{}} when there is nothing to say"
    );
    let input = json!({"command": "npm run build", "description": "Build the site"});
    let mut warned_with_result = None;
    let mut denied_at = None;
    for n in 1..=25 {
        let b = env
            .hook(AGENT, &before("run_shell_command", input.clone()))
            .json();
        if b["decision"] == "deny" {
            let reason = b["reason"].as_str().unwrap();
            assert!(
                reason.starts_with("CRITICAL: run_shell_command was called 20 times"),
                "{reason}"
            );
            assert!(b.get("continue").is_none());
            denied_at = Some(n);
            break;
        }
        if n == 11 {
            // BeforeTool cannot add context for the model: the user sees the warning now …
            assert!(
                b["systemMessage"]
                    .as_str()
                    .unwrap()
                    .starts_with("[loopguard] WARNING"),
                "{b}"
            );
        } else {
            assert_eq!(b, json!({}), "call {n}");
        }
        let a = env.hook(
            AGENT,
            &after("run_shell_command", input.clone(), json!({"llmContent": "Command: npm run build\nExit Code: 1\nError: Cannot find module 'vite'", "returnDisplay": "Exit Code: 1"})),
        )
        .json();
        if let Some(context) = a.pointer("/hookSpecificOutput/additionalContext") {
            // … and the model with the result of that same call.
            assert_eq!(a["hookSpecificOutput"]["hookEventName"], "AfterTool");
            assert!(context
                .as_str()
                .unwrap()
                .starts_with("[loopguard] WARNING: you have called run_shell_command 10 times"));
            warned_with_result = Some(n);
        } else {
            assert_eq!(a, json!({}));
        }
    }
    assert_eq!((warned_with_result, denied_at), (Some(11), Some(21)));
    // BeforeAgent started run 1.
    assert_eq!(counts(&env.run(SESSION, "prompt-1").unwrap()), (21, 1));
}

#[test]
fn errors_count_as_errors_and_a_compression_arms_the_guard() {
    let env = Env::new();
    let mut compress = base("PreCompress");
    compress["trigger"] = json!("auto");
    assert_eq!(env.hook(AGENT, &compress).json(), json!({}));
    let input = json!({"absolute_path": "/home/user/site/missing.md"});
    let mut last = Value::Null;
    for _ in 0..3 {
        assert_eq!(
            env.hook(AGENT, &before("read_file", input.clone())).json(),
            json!({})
        );
        last = env
            .hook(
                AGENT,
                &after("read_file", input.clone(), json!({"llmContent": "", "returnDisplay": "", "error": {"message": "File not found: /home/user/site/missing.md", "type": "file_not_found"}})),
            )
            .json();
    }
    assert_eq!(last["continue"], false);
    let reason = last["stopReason"].as_str().unwrap();
    assert!(
        reason.contains("tool read_file repeated 3 times")
            && reason.contains("compaction_loop_persisted"),
        "{reason}"
    );
    assert_eq!(last["hookSpecificOutput"]["additionalContext"], reason);
    let state = env.run(SESSION, "prompt-0").unwrap();
    let error = loopguard::fingerprint::OutcomePrint::new(
        loopguard::fingerprint::OutcomeRule::for_call("read_file", &input),
        loopguard::Outcome::Error(
            &json!({"message": "File not found: /home/user/site/missing.md", "type": "file_not_found"}),
        ),
    );
    let loopguard::fingerprint::OutcomePrint::Hashed { fingerprint, .. } = error else {
        panic!("errors are hashed")
    };
    assert!(
        state
            .history()
            .records()
            .iter()
            .all(|r| r.outcome() == Some(fingerprint)),
        "recorded as errors"
    );
    // The run is over: the next call is denied and the agent loop stopped.
    let next = env.hook(AGENT, &before("read_file", input)).json();
    assert_eq!(
        (next["decision"].as_str(), next["continue"].as_bool()),
        (Some("deny"), Some(false))
    );
}

#[test]
fn session_events_and_print_config() {
    let env = Env::new();
    let mut start = base("SessionStart");
    start["source"] = json!("startup");
    assert_eq!(env.hook(AGENT, &start).json(), json!({}));
    env.hook(
        AGENT,
        &before("list_directory", json!({"path": "/home/user/site"})),
    );
    assert_eq!(env.runs(SESSION).len(), 1);
    let mut end = base("SessionEnd");
    end["reason"] = json!("exit");
    assert_eq!(env.hook(AGENT, &end).json(), json!({}));
    assert!(env.runs(SESSION).is_empty());
    let unknown = env.hook(AGENT, &base("BeforeModel"));
    assert_eq!((unknown.code, unknown.stdout.as_str()), (0, "{}"));

    let mut cmd = env.command(AGENT);
    cmd.arg("--print-config");
    let v = hook_common::run(cmd, b"").json();
    for event in [
        "SessionStart",
        "BeforeAgent",
        "BeforeTool",
        "AfterTool",
        "PreCompress",
        "SessionEnd",
    ] {
        let hook = &v["hooks"][event][0]["hooks"][0];
        assert!(hook["command"]
            .as_str()
            .unwrap()
            .contains("/loopguard-hook gemini "));
        assert_eq!(hook["timeout"], 10000, "Gemini timeouts are milliseconds");
    }
}

//! `loopguard hook codex` through the real binary, with the payload shapes of Codex's hook
//! input schemas (`session_id`, `turn_id`, `model`, `tool_use_id` …).

mod common;
mod hook_common;

use hook_common::{counts, Env};
use serde_json::{json, Value};

const AGENT: &str = "codex";
const SESSION: &str = "019a1c0e-7d7b-7c31-b0a5-5f0c2a3e9d11";

fn base(event: &str) -> Value {
    json!({
        "session_id": SESSION,
        "turn_id": "turn-1",
        "transcript_path": null,
        "cwd": "/home/user/repo",
        "hook_event_name": event,
        "model": "gpt-5-codex",
        "permission_mode": "default",
    })
}

fn pre(id: &str, command: &str) -> Value {
    let mut v = base("PreToolUse");
    v["tool_name"] = json!("Bash");
    v["tool_input"] = json!({"command": command});
    v["tool_use_id"] = json!(id);
    v
}

fn post(id: &str, command: &str, response: Value) -> Value {
    let mut v = base("PostToolUse");
    v["tool_name"] = json!("Bash");
    v["tool_input"] = json!({"command": command});
    v["tool_response"] = response;
    v["tool_use_id"] = json!(id);
    v
}

/// The fields Codex accepts in a PreToolUse answer (its output schema refuses others,
/// and continue/stopReason/suppressOutput on this event).
const PRE_TOOL_USE_FIELDS: &[&str] = &["hookSpecificOutput", "systemMessage", "decision", "reason"];
const PRE_TOOL_USE_SPECIFIC: &[&str] = &[
    "hookEventName",
    "permissionDecision",
    "permissionDecisionReason",
    "updatedInput",
    "additionalContext",
];

fn assert_codex_pre_tool_use(out: &Value) {
    for key in out.as_object().unwrap().keys() {
        assert!(
            PRE_TOOL_USE_FIELDS.contains(&key.as_str()),
            "Codex would refuse {key}: {out}"
        );
    }
    for key in out["hookSpecificOutput"].as_object().unwrap().keys() {
        assert!(
            PRE_TOOL_USE_SPECIFIC.contains(&key.as_str()),
            "Codex would refuse {key}: {out}"
        );
    }
}

#[test]
fn a_looping_turn_is_warned_then_denied() {
    let env = Env::new();
    let mut start = base("SessionStart");
    start["source"] = json!("startup");
    for payload in [start, {
        let mut p = base("UserPromptSubmit");
        p["prompt"] = json!("make the tests pass");
        p
    }] {
        let h = env.hook(AGENT, &payload);
        assert_eq!((h.code, h.stdout.as_str(), h.stderr.as_str()), (0, "", ""));
    }
    let mut warned_at = None;
    let mut denied_at = None;
    for n in 1..=25 {
        let id = format!("call_{n}");
        let h = env.hook(AGENT, &pre(&id, "cargo test"));
        assert_eq!(h.code, 0);
        if !h.stdout.is_empty() {
            let out = h.json();
            assert_codex_pre_tool_use(&out);
            if out["hookSpecificOutput"]["permissionDecision"] == "deny" {
                let reason = out["hookSpecificOutput"]["permissionDecisionReason"]
                    .as_str()
                    .unwrap();
                assert!(
                    reason.starts_with("CRITICAL: Bash was called 20 times"),
                    "{reason}"
                );
                denied_at = Some(n);
                break;
            }
            assert!(out["hookSpecificOutput"]["additionalContext"]
                .as_str()
                .unwrap()
                .starts_with("[loopguard] WARNING"));
            warned_at.get_or_insert(n);
        }
        // A failed command reaches PostToolUse with its output (Codex has no
        // PostToolUseFailure).
        let p = env.hook(AGENT, &post(&id, "cargo test", json!("error[E0425]: cannot find value `x` in this scope\nerror: could not compile `app`")));
        assert_eq!((p.code, p.stdout.as_str()), (0, ""));
    }
    assert_eq!((warned_at, denied_at), (Some(11), Some(21)));
    assert_eq!(counts(&env.run(SESSION, "prompt-2").unwrap()), (21, 1));
}

#[test]
fn a_terminal_block_stays_within_what_codex_accepts() {
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2, globalCircuitBreakerThreshold: 3 } } }");
    let mut last = Value::Null;
    for n in 0..6 {
        let id = format!("c{n}");
        let h = env.hook(AGENT, &pre(&id, "make"));
        if !h.stdout.is_empty() {
            last = h.json();
            assert_codex_pre_tool_use(&last);
        }
        if h.stdout.is_empty() || last["hookSpecificOutput"]["permissionDecision"] != "deny" {
            env.hook(
                AGENT,
                &post(
                    &id,
                    "make",
                    json!({"output": "make: *** No rule to make target", "exit_code": 2}),
                ),
            );
        }
    }
    assert!(
        last["systemMessage"]
            .as_str()
            .unwrap()
            .starts_with("loopguard stopped this run"),
        "{last}"
    );
}

#[test]
fn the_same_loop_after_a_compaction_stops_the_turn() {
    let env = Env::new();
    let mut compact = base("PreCompact");
    compact["trigger"] = json!("auto");
    let h = env.hook(AGENT, &compact);
    assert_eq!((h.code, h.stdout.as_str()), (0, ""));
    let mut last = None;
    for n in 0..3 {
        let id = format!("c{n}");
        assert_eq!(env.hook(AGENT, &pre(&id, "pytest -x")).stdout, "");
        last = Some(env.hook(
            AGENT,
            &post(
                &id,
                "pytest -x",
                json!("FAILED tests/test_app.py::test_login"),
            ),
        ));
    }
    let out = last.unwrap().json();
    // Only fields Codex accepts on PostToolUse: it stops and feeds stopReason to the model.
    assert_eq!(out.as_object().unwrap().len(), 2);
    assert_eq!(out["continue"], false);
    assert!(out["stopReason"]
        .as_str()
        .unwrap()
        .contains("compaction_loop_persisted"));
}

#[test]
fn events_codex_has_but_loopguard_does_not_use_are_ignored() {
    let env = Env::new();
    for event in ["PermissionRequest", "PostCompact", "SubagentStart"] {
        let h = env.hook(AGENT, &base(event));
        assert_eq!((h.code, h.stdout.as_str()), (0, ""), "{event}");
        assert!(h.stderr.contains(event));
    }
    assert!(!env.db.exists(), "nothing was stored");
}

#[test]
fn print_config_gives_the_hooks_json_snippet() {
    let env = Env::new();
    let mut cmd = env.command(AGENT);
    cmd.arg("--print-config");
    let out = hook_common::run(cmd, b"");
    let v = out.json();
    let events: Vec<&String> = v["hooks"].as_object().unwrap().keys().collect();
    assert_eq!(events.len(), 7);
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PreCompact",
        "Stop",
        "SubagentStop",
    ] {
        assert!(v["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .contains("/loopguard-hook codex "));
    }
    assert!(out.stderr.contains("hooks.json"));
}

/// Calls inside a thread-spawned subagent (`agent_id`) are the subagent's, in a session of
/// its own under the turn that spawned it; `SubagentStop` ends its run, so it no longer
/// counts as running.
#[test]
fn subagent_stop_ends_a_subagents_run_in_its_tree() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { agentTree: { maxConcurrent: 2 } } } }",
    );
    let in_child = |mut payload: Value, agent: &str| {
        payload["agent_id"] = json!(agent);
        payload["agent_type"] = json!("worker");
        payload
    };
    let first_call = |agent: &str, id: &str| {
        env.hook(
            AGENT,
            &in_child(pre(id, &format!("cat src/{agent}.rs")), agent),
        )
    };
    let stop = |agent: &str| {
        let mut p = in_child(base("SubagentStop"), agent);
        p["stop_hook_active"] = json!(false);
        p["agent_transcript_path"] = json!(null);
        p["last_assistant_message"] = json!("Done.");
        env.hook(AGENT, &p)
    };
    let mut prompt = base("UserPromptSubmit");
    prompt["prompt"] = json!("Review every module");
    env.hook(AGENT, &prompt);
    let denied = |h: &hook_common::Hook| h.stdout.contains("\"permissionDecision\":\"deny\"");
    assert_eq!(first_call("c1", "t1").stdout, "", "child 1: allowed");
    assert!(!denied(&first_call("c2", "t2")), "child 2: at the limit");
    // c1 and c2 still run: a third child is past maxConcurrent, denied.
    let denied3 = first_call("c3", "t3").json();
    assert_codex_pre_tool_use(&denied3);
    assert_eq!(
        denied3["hookSpecificOutput"]["permissionDecision"], "deny",
        "{denied3}"
    );
    let child = format!("{SESSION}/agent-c1");
    assert!(env.run(&child, "prompt-1").is_some());
    let stopped = stop("c1");
    assert_eq!((stopped.code, stopped.stdout.as_str()), (0, ""));
    assert!(
        env.run(&child, "prompt-1").is_none(),
        "its run is forgotten"
    );
    // c1 finished: the next child runs.
    let next = first_call("c4", "t4");
    assert!(!denied(&next), "child 4 runs: {}", next.stdout);
}

//! This project's own vectors (spec/vectors: late results of blocked calls, retried
//! events) through the real `loopguard hook claude-code` and `loopguard-hook claude-code`
//! (the hook's own binary), one process per event as Claude
//! Code runs it: each call is denied exactly when `replay` blocks it and warned exactly
//! when `replay` surfaces a warning, and each result ends the run exactly when `replay`
//! reports an abort.
//!
//! The vectors are translated event by event: a prompt starts the run, `call` is
//! `PreToolUse`, `result` is `PostToolUse` (with the tool and input of the call its id
//! names, as Claude Code always sends them), `compaction` is `PreCompact`.

mod common;
mod hook_common;

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use common::vectors::{config_of, name, own_cases};
use hook_common::{check_call_answer, claude_code_payload, env_of_case};
use serde_json::{json, Value};

fn payload(session: &str, event: &str, fields: Value) -> Value {
    let transcript = format!("/home/user/.claude/projects/-home-user-app/{session}.jsonl");
    claude_code_payload(session, &transcript, event, fields)
}

fn check_case(case: &Path, slim: bool) -> Result<(), String> {
    let env = env_of_case(config_of(case));
    let events = common::json_lines(&fs::read(case.join("events.jsonl")).unwrap());
    let expected = common::json_lines(&fs::read(case.join("expected.jsonl")).unwrap());
    let session = format!("vector-{}", name(case));
    let hook = |payload: &Value| match slim {
        true => env.hook_only("claude-code", payload),
        false => env.hook("claude-code", payload),
    };
    let start = hook(&payload(
        &session,
        "UserPromptSubmit",
        json!({"prompt": "go"}),
    ));
    if start.code != 0 {
        return Err(format!("prompt: {start:?}"));
    }
    let mut calls: HashMap<String, (Value, Value)> = HashMap::new();
    for (event, want) in events.iter().zip(&expected) {
        let seq = &want["seq"];
        let id = event["call_id"].as_str().unwrap_or_default().to_owned();
        match event["type"].as_str() {
            Some("call") => {
                let (tool, args) = (event["tool"].clone(), event["args"].clone());
                calls.insert(id.clone(), (tool.clone(), args.clone()));
                let h = hook(&payload(
                    &session,
                    "PreToolUse",
                    json!({"tool_name": tool, "tool_input": args, "tool_use_id": id}),
                ));
                check_call_answer(&h, want)?;
            }
            Some("result") => {
                let (tool, args) = match (event.get("tool"), event.get("args")) {
                    (Some(t), Some(a)) => (t.clone(), a.clone()),
                    _ => calls[&id].clone(),
                };
                let h = hook(&payload(
                    &session,
                    "PostToolUse",
                    json!({"tool_name": tool, "tool_input": args, "tool_use_id": id, "tool_response": event["result"]}),
                ));
                if h.code != 0 {
                    return Err(format!("seq {seq}: {h:?}"));
                }
                let stopped = !h.stdout.is_empty() && h.json()["continue"] == false;
                // A line replay refuses (a second, different outcome by id only) has no
                // counterpart here: Claude Code always sends the tool and its input.
                let aborted = !want["abort"].is_null();
                if want.get("error").is_none() && stopped != aborted {
                    return Err(format!("seq {seq}: stopped {stopped}, replay says {want}"));
                }
            }
            Some("compaction") => {
                let h = hook(&payload(&session, "PreCompact", json!({"trigger": "auto"})));
                if h.code != 0 {
                    return Err(format!("seq {seq}: {h:?}"));
                }
            }
            other => return Err(format!("seq {seq}: event type {other:?}")),
        }
    }
    Ok(())
}

fn check_all(slim: bool) {
    let failures: Vec<String> = own_cases()
        .iter()
        .filter_map(|case| {
            check_case(case, slim)
                .err()
                .map(|e| format!("{}: {e}", name(case)))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn own_vectors_through_the_claude_code_hook() {
    check_all(false);
}

#[test]
fn own_vectors_through_the_hooks_own_binary() {
    check_all(true);
}

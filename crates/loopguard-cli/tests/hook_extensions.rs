//! The extension vectors (`spec/extensions`: budgets, run storms, messages, the extra
//! detectors) through the real `loopguard hook claude-code`, one process per event as
//! Claude Code runs it, with what the model spent and said written to the session
//! transcript the payload names, as Claude Code writes it: each call is denied exactly when
//! `replay` blocks it and warned exactly when `replay` surfaces a warning.
//!
//! The events are translated one by one: a new run of a session is a `UserPromptSubmit`,
//! `call` a `PreToolUse`, `result` a `PostToolUse`, `compaction` a `PreCompact`; a `usage`
//! is an assistant line of the transcript with the response's id, model and token counts
//! (read by the hook before its next event); an assistant `message` is an assistant line
//! with the answer's text, followed by `Stop` (the answer is whole), or, for an answer
//! with calls, with a `tool_use` block too and no `Stop` (the turn goes on); the calls and results
//! of a sub-agent (session `PARENT/agent-ID`) are its parent's payloads with `agent_id`
//! ID, sent in the parent's run that spawned it (a new prompt of the parent when that run
//! is new). The hook says nothing at `Stop`, so when a vector ends with an answer, one
//! more call of its run checks what the answers made of the run (stopped or not). What a
//! Claude Code
//! session cannot say is listed in [`inexpressible`], and a vector holding it is skipped by
//! name, with the reason.

mod common;
mod hook_common;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::vectors::{cases, config_of, name};
use hook_common::{check_call_answer, claude_code_payload, env_of_case};
use serde_json::{json, Value};

/// Why a Claude Code session cannot carry an event, if it cannot.
fn inexpressible(event: &Value) -> Option<&'static str> {
    let has = |key: &str| event.get(key).is_some_and(|v| !v.is_null());
    if has("agent") {
        return Some("an agent id: Claude Code names none but its sub-agents'");
    }
    if has("parent_session") && subagent_of(event).is_none() {
        return Some("a sub-agent of a sub-agent, or one not named `PARENT/agent-ID`: Claude Code's sub-agents spawn none, and the hook names a sub-agent's session `SESSION/agent-ID` from its `agent_id`");
    }
    if has("parent_session") && !matches!(event["type"].as_str(), Some("call" | "result")) {
        return Some("a sub-agent's usage, message or compaction: the transcript the hook reads is the parent's");
    }
    if has("batch") {
        return Some("a batch: PreToolUse does not say which calls the model asked for together");
    }
    if let Some(details) = event["result"].get("details") {
        if event["result"]["content"].is_array() && !reshapes_back(details) {
            return Some("a result whose details hold what the hook drops or reshapes (timings, usage, `content`)");
        }
    }
    match event["type"].as_str() {
        Some("usage") if has("cost") => {
            Some("a response's cost: a transcript records tokens, not dollars")
        }
        Some("usage")
            if ["input_tokens", "output_tokens"]
                .iter()
                .any(|k| !event[*k].is_u64()) =>
        {
            Some("a usage replay refuses: a transcript's token counts are whole numbers")
        }
        Some("message") if event["role"] == "user" => Some(
            "a prompt inside a run: in Claude Code each prompt starts a run (UserPromptSubmit)",
        ),
        Some("message") if event["role"] != "assistant" => {
            Some("harness feedback: Claude Code sends none (a text-only answer ends the turn)")
        }
        Some("message") if has("delta") || has("reasoning") => {
            Some("a piece of a stream or its reasoning: the transcript holds whole answers")
        }
        Some("call" | "result" | "compaction" | "usage" | "message") => None,
        _ => Some("a line replay refuses: a hook payload is always a whole event"),
    }
}

/// The parent session and agent id of an event of a sub-agent whose session is named
/// `PARENT/agent-ID`, the name the hook gives the calls of `agent_id` ID in session PARENT
/// (a top-level session: Claude Code's sub-agents spawn none).
fn subagent_of(event: &Value) -> Option<(&str, &str)> {
    let parent = event["parent_session"].as_str()?;
    let id = event["session"]
        .as_str()?
        .strip_prefix(parent)?
        .strip_prefix("/agent-")?;
    (!id.is_empty() && !id.contains('/') && !parent.contains('/')).then_some((parent, id))
}

/// Whether a result's `details` come back from the hook as they are when sent as the keys
/// of a tool response beside its `content` (the hook keeps them, less the keys it drops).
fn reshapes_back(details: &Value) -> bool {
    let Some(map) = details.as_object() else {
        return false;
    };
    let text = details.to_string();
    !map.contains_key("content")
        && !map.contains_key("_meta")
        && !loopguard_hooks::outcome::VOLATILE_KEYS
            .iter()
            .any(|k| text.contains(&format!("\"{k}\"")))
}

/// One session of a vector: its Claude Code session id, transcript and current run.
struct Session {
    id: String,
    transcript: PathBuf,
    run: Option<Option<String>>,
    lines: usize,
}

impl Session {
    fn payload(&self, event: &str, fields: Value) -> Value {
        claude_code_payload(&self.id, &self.transcript.to_string_lossy(), event, fields)
    }

    fn line(&mut self, line: Value) {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.transcript)
            .unwrap();
        writeln!(f, "{line}").unwrap();
        self.lines += 1;
    }

    /// One API response's line: `id` is the response's (a retried usage sends it again).
    fn assistant(&mut self, id: Option<&str>, content: Value, usage: Value, model: &Value) {
        let n = self.lines;
        let id = id.map_or_else(|| format!("msg_{n}"), str::to_owned);
        self.line(
            json!({"type": "assistant", "sessionId": self.id, "uuid": format!("a-{n}"),
            "message": {"id": id, "type": "message", "role": "assistant",
                "model": if model.is_string() { model.clone() } else { json!("claude-sonnet-4-6") },
                "content": content, "usage": usage}}),
        );
    }
}

fn check_case(case: &Path) -> Result<(), String> {
    let env = env_of_case(config_of(case));
    let events = common::json_lines(&fs::read(case.join("events.jsonl")).unwrap());
    let expected = common::json_lines(&fs::read(case.join("expected.jsonl")).unwrap());
    let dir = env.dir.path().join("projects/-home-user-app");
    fs::create_dir_all(&dir).unwrap();
    let mut sessions: HashMap<String, Session> = HashMap::new();
    let mut calls: HashMap<String, (Value, Value)> = HashMap::new();
    // Claude Code sends no PostToolUse for a call a hook denied: it never ran.
    let mut denied_ids: HashSet<String> = HashSet::new();
    let hook_as = |s: &Session, agent: Option<&str>, event: &str, fields: Value| {
        let mut payload = s.payload(event, fields);
        if let Some(agent) = agent {
            payload["agent_id"] = json!(agent);
            payload["agent_type"] = json!("general-purpose");
        }
        let h = env.hook("claude-code", &payload);
        match h.code {
            0 => Ok(h),
            _ => Err(format!("{event}: {h:?}")),
        }
    };
    let hook = |s: &Session, event: &str, fields: Value| hook_as(s, None, event, fields);
    for (event, want) in events.iter().zip(&expected) {
        let seq = &want["seq"];
        if want.get("error").is_some() {
            continue;
        }
        // A sub-agent's events are its parent session's, with its `agent_id`, in the
        // parent's run that spawned it.
        let (key, agent, run) = match subagent_of(event) {
            Some((parent, agent)) => (parent, Some(agent), &event["parent_run"]),
            None => (
                event["session"].as_str().unwrap_or_default(),
                None,
                &event["run"],
            ),
        };
        let key = key.to_owned();
        let session = sessions.entry(key.clone()).or_insert_with(|| {
            let id = format!("{}-{key}", name(case));
            Session {
                transcript: dir.join(format!("{id}.jsonl")),
                id,
                run: None,
                lines: 0,
            }
        });
        // A new run of the session is a new prompt.
        let run = run.as_str().map(str::to_owned);
        if session.run.as_ref() != Some(&run) {
            hook(session, "UserPromptSubmit", json!({"prompt": "go"}))?;
            session.line(json!({"type": "user", "sessionId": session.id, "uuid": format!("p-{}", session.lines),
                "message": {"role": "user", "content": "go"}}));
            session.run = Some(run);
        }
        let id = event["call_id"].as_str().unwrap_or_default().to_owned();
        match event["type"].as_str() {
            Some("call") => {
                let (tool, args) = (event["tool"].clone(), event["args"].clone());
                calls.insert(id.clone(), (tool.clone(), args.clone()));
                let h = hook_as(
                    session,
                    agent,
                    "PreToolUse",
                    json!({"tool_name": tool, "tool_input": args, "tool_use_id": id}),
                )?;
                if check_call_answer(&h, want)? {
                    denied_ids.insert(id.clone());
                }
            }
            Some("result") if denied_ids.contains(&id) => {}
            Some("result") => {
                let (tool, args) = match (event.get("tool"), event.get("args")) {
                    (Some(t), Some(a)) => (t.clone(), a.clone()),
                    _ => calls[&id].clone(),
                };
                let mut fields = json!({"tool_name": tool, "tool_input": args, "tool_use_id": id});
                let name = match event.get("error") {
                    Some(e) => {
                        fields["error"] = e.clone();
                        fields["is_interrupt"] = json!(false);
                        "PostToolUseFailure"
                    }
                    None => {
                        // The protocol's {content, details} is a response whose keys beside
                        // `content` are the details.
                        let mut response = event["result"].clone();
                        if let (Some(obj), Some(details)) = (
                            response.as_object_mut(),
                            event["result"]["details"].as_object(),
                        ) {
                            obj.remove("details");
                            obj.extend(details.clone());
                        }
                        fields["tool_response"] = response;
                        "PostToolUse"
                    }
                };
                let h = hook_as(session, agent, name, fields)?;
                let stopped = !h.stdout.is_empty() && h.json()["continue"] == false;
                if stopped == want["abort"].is_null() {
                    return Err(format!("seq {seq}: stopped {stopped}, replay says {want}"));
                }
            }
            Some("compaction") => {
                hook(session, "PreCompact", json!({"trigger": "auto"}))?;
            }
            Some("usage") => {
                let usage = json!({
                    "input_tokens": event["input_tokens"],
                    "output_tokens": event["output_tokens"],
                    "cache_read_input_tokens": event.get("cache_read_tokens").cloned().unwrap_or(json!(0)),
                    "cache_creation_input_tokens": event.get("cache_write_tokens").cloned().unwrap_or(json!(0)),
                });
                session.assistant(
                    event["id"].as_str(),
                    json!([{"type": "text", "text": ""}]),
                    usage,
                    &event["model"],
                );
            }
            Some("message") => {
                let usage = json!({"input_tokens": 0, "output_tokens": 0});
                let mut content = vec![json!({"type": "text", "text": event["text"]})];
                // An answer with calls: its response holds them too, and the turn goes on
                // (the hook reads it at its next event).
                let with_calls = event["has_tool_calls"] == true;
                if with_calls {
                    let id = format!("toolu_{}", session.lines);
                    content
                        .push(json!({"type": "tool_use", "id": id, "name": "Read", "input": {}}));
                }
                session.assistant(event["id"].as_str(), json!(content), usage, &Value::Null);
                if !with_calls {
                    hook(session, "Stop", json!({"stop_hook_active": false}))?;
                }
            }
            other => return Err(format!("seq {seq}: event type {other:?}")),
        }
    }
    // At `Stop` the hook says nothing, so a vector's last answers would go unchecked: a
    // call in the same run after them shows what they made of it (a critical finding on
    // a message stops the run, and the call is denied).
    let last = events
        .iter()
        .zip(&expected)
        .rev()
        .find(|(e, _)| subagent_of(e).is_none());
    if let Some((event, want)) = last.filter(|(e, _)| e["type"] == "message") {
        let session = &sessions[event["session"].as_str().unwrap_or_default()];
        let probe =
            json!({"tool_name": "loopguard_probe", "tool_input": {}, "tool_use_id": "probe"});
        let h = hook(session, "PreToolUse", probe)?;
        let stopped = !h.stdout.is_empty()
            && h.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
            && h.json()["continue"] == false;
        if stopped != (want["verdict"] == "block") {
            return Err(format!(
                "a call after the last answer: stopped {stopped}, replay says {want}"
            ));
        }
    }
    Ok(())
}

#[test]
fn extension_vectors_through_the_claude_code_hook() {
    let mut todo = Vec::new();
    let mut skipped = Vec::new();
    for case in cases(&common::repo_root().join("spec/extensions")) {
        if case.join("expected-exit").exists() {
            // A config the guard refuses: the hook's refusal is hook_bad_input's.
            continue;
        }
        let events = common::json_lines(&fs::read(case.join("events.jsonl")).unwrap());
        if std::env::var("VECTOR").is_ok_and(|only| !name(&case).contains(&only)) {
            continue;
        }
        match events.iter().find_map(inexpressible) {
            Some(why) => skipped.push(format!("{}: {why}", name(&case))),
            None => todo.push(case),
        }
    }
    // A process per hook event: the vectors run four at a time.
    let next = AtomicUsize::new(0);
    let results: Vec<(String, Result<(), String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some(case) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
                        out.push((name(case), check_case(case)));
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let checked: Vec<String> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(n, _)| n.clone())
        .collect();
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    eprintln!(
        "{} vectors through the hook; skipped:\n  {}",
        checked.len(),
        skipped.join("\n  ")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if std::env::var("VECTOR").is_ok() {
        return;
    }
    for family in [
        "budget-",
        "run-storm-",
        "repeated-message",
        "content-chanting-",
        "agent-tree-",
    ] {
        assert!(
            checked.iter().any(|n| n.starts_with(family)),
            "no {family} vector went through the hook: {checked:?}"
        );
    }
}

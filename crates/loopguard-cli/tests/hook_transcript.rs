//! `loopguard hook claude-code` reads the session transcript the payload names: a scripted
//! Claude Code session (the transcript written line by line as Claude Code writes it, one
//! content block per line, the hook payloads fed to the real binary between the lines) is
//! stopped by a run cost budget priced from the transcript's own usage, and another by the
//! model repeating one answer; a last line still being written is not read early, and a
//! response read twice counts once.

mod common;
mod hook_common;

use std::io::Write;
use std::path::Path;

use hook_common::{claude_code_payload, Env, Hook};
use serde_json::{json, Value};

const AGENT: &str = "claude-code";

/// A session and its transcript file.
struct Session<'e> {
    env: &'e Env,
    id: String,
    transcript: String,
}

impl<'e> Session<'e> {
    fn new(env: &'e Env, id: &str) -> Self {
        let dir = env.dir.path().join("projects/-home-user-app");
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            env,
            id: id.to_owned(),
            transcript: dir.join(format!("{id}.jsonl")).to_str().unwrap().to_owned(),
        }
    }

    fn payload(&self, event: &str, fields: Value) -> Value {
        claude_code_payload(&self.id, &self.transcript, event, fields)
    }

    fn hook(&self, event: &str, fields: Value) -> Hook {
        let out = self.env.hook(AGENT, &self.payload(event, fields));
        assert_eq!(out.code, 0, "{out:?}");
        out
    }

    /// Appends `text` to the transcript as it is (no newline added).
    fn append(&self, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.transcript)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn line(&self, line: Value) {
        self.append(&format!("{line}\n"));
    }

    fn prompt(&self, text: &str) {
        self.hook("UserPromptSubmit", json!({"prompt": text}));
        self.line(
            json!({"type": "user", "sessionId": self.id, "uuid": format!("p-{text}"),
            "message": {"role": "user", "content": text}}),
        );
    }

    /// The lines of one API response: a text block, then a tool_use block when `call`.
    fn response(
        &self,
        msg: &str,
        text: &str,
        call: Option<(&str, Value)>,
        usage: Value,
    ) -> Vec<Value> {
        let line = |content: Value| {
            json!({"type": "assistant", "sessionId": self.id, "uuid": format!("{msg}-{}", content[0]["type"]),
                "message": {"id": msg, "type": "message", "role": "assistant",
                    "model": "claude-sonnet-4-6", "content": content, "usage": usage}})
        };
        let mut lines = vec![line(json!([{"type": "text", "text": text}]))];
        if let Some((id, input)) = call {
            lines.push(line(
                json!([{"type": "tool_use", "id": id, "name": "Bash", "input": input}]),
            ));
        }
        lines
    }

    fn pre(&self, id: &str, input: &Value) -> Hook {
        self.hook(
            "PreToolUse",
            json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": id}),
        )
    }

    /// The call's result: its transcript line, then PostToolUse.
    fn result(&self, id: &str, input: &Value, output: &str) {
        self.line(json!({"type": "user", "sessionId": self.id,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]},
            "toolUseResult": {"stdout": output, "stderr": "", "interrupted": false}}));
        let post = self.hook(
            "PostToolUse",
            json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": id,
                "tool_response": {"stdout": output, "stderr": "", "interrupted": false}}),
        );
        assert_eq!(post.stdout, "", "{post:?}");
    }
}

fn decision(out: &Hook) -> Option<String> {
    if out.stdout.is_empty() {
        return None;
    }
    let v = out.json();
    let specific = &v["hookSpecificOutput"];
    if specific["permissionDecision"] == "deny" {
        Some(format!("deny: {}", specific["permissionDecisionReason"]))
    } else {
        specific["additionalContext"]
            .as_str()
            .map(|c| format!("warn: {c}"))
    }
}

/// Every response reads 20,000 fresh input tokens and 100,000 from the cache and writes
/// 2,000: at Sonnet 4.6's prices ($3, $0.30 and $15 per million) $0.12. A run budget of
/// $0.50 warns at 80 % ($0.40: the fourth response) and stops the run at the fifth, whose
/// call is denied; the transcript's half-written last line is read only once whole.
#[test]
fn a_cost_budget_stops_a_session_by_its_transcripts_usage() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 0.5 } } } }",
    );
    let s = Session::new(&env, "budget-session");
    s.hook(
        "SessionStart",
        json!({"source": "startup", "model": "claude-sonnet-4-6"}),
    );
    s.prompt("Make the tests pass");
    let usage = json!({"input_tokens": 20000, "cache_read_input_tokens": 100000,
        "cache_creation_input_tokens": 0, "output_tokens": 2000});
    let mut decisions = Vec::new();
    for i in 1..=8 {
        let id = format!("toolu_{i}");
        let input = json!({"command": format!("cargo test --test t{i}")});
        let lines = s.response(
            &format!("msg_{i}"),
            &format!("Running test file {i} now."),
            Some((&id, input.clone())),
            usage.clone(),
        );
        for line in &lines {
            s.line(line.clone());
        }
        if i == 2 {
            // A line still being written when the hook runs: not read, not lost.
            s.append(r#"{"type":"system","subtype":"informational","content":"#);
        }
        let out = s.pre(&id, &input);
        if i == 2 {
            s.append("\"half a line\"}\n");
            // The same hook again (an agent retrying it): the response is not counted twice.
            assert_eq!(s.pre(&id, &input).stdout, out.stdout);
        }
        let d = decision(&out);
        decisions.push(d.clone());
        if d.as_deref().is_some_and(|d| d.starts_with("deny")) {
            let v = out.json();
            assert_eq!(v["continue"], false, "{v}");
            break;
        }
        s.result(&id, &input, &format!("test file {i}: ok"));
    }
    assert_eq!(decisions.len(), 5, "{decisions:?}");
    assert!(decisions[..3].iter().all(Option::is_none), "{decisions:?}");
    let warn = decisions[3].as_deref().unwrap();
    assert!(
        warn.starts_with("warn:") && warn.contains("budget"),
        "{warn}"
    );
    let deny = decisions[4].as_deref().unwrap();
    assert!(
        deny.starts_with("deny:") && deny.contains("budget"),
        "{deny}"
    );
    // The run's spend is what the five responses cost, each counted once.
    let run = env.run("budget-session", "prompt-2").expect("the run");
    let cost = run.spend().cost.usd();
    assert!((cost - 0.60).abs() < 1e-9, "{cost}");
    // A new prompt is a new run: within budget again.
    s.prompt("Now something else");
    let input = json!({"command": "ls"});
    for line in s.response("msg_9", "Listing.", Some(("toolu_9", input.clone())), usage) {
        s.line(line);
    }
    assert_eq!(decision(&s.pre("toolu_9", &input)), None);
}

/// The model answers the same text again and again without calling a tool, each answer
/// ending its turn (`Stop`) and the session carrying on without a prompt (a Stop hook
/// that asks for more): the fourth copy stops the run (`repeated_message`), and the call
/// the model tries next is denied with the detector's message.
#[test]
fn a_repeated_answer_stops_the_session_and_blocks_the_next_call() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { repeatedMessage: {} } } }",
    );
    let s = Session::new(&env, "repeat-session");
    s.hook(
        "SessionStart",
        json!({"source": "startup", "model": "claude-sonnet-4-6"}),
    );
    s.prompt("Fix the build");
    let usage = json!({"input_tokens": 100, "output_tokens": 20});
    for i in 1..=4 {
        for line in s.response(
            &format!("msg_{i}"),
            &format!(
                "I have checked the build configuration and it looks correct.\n\nRun {} done.",
                7
            ),
            None,
            usage.clone(),
        ) {
            s.line(line);
        }
        // Stop reads the answer whole, and lets the model stop.
        let stop = s.hook("Stop", json!({"stop_hook_active": i > 1}));
        assert_eq!(stop.stdout, "", "{stop:?}");
    }
    let run = env.run("repeat-session", "prompt-2").expect("the run");
    assert!(run.stop().is_some(), "the run is stopped");
    let input = json!({"command": "make"});
    for line in s.response(
        "msg_5",
        "Let me run make.",
        Some(("toolu_5", input.clone())),
        usage,
    ) {
        s.line(line);
    }
    let out = s.pre("toolu_5", &input);
    let deny = decision(&out).expect("denied");
    assert!(
        deny.starts_with("deny:") && deny.contains("repeated_message"),
        "{deny}"
    );
}

/// A transcript that is rewritten shorter (a rotated file) is read again from its start:
/// responses counted before are known by their ids and count once.
#[test]
fn a_rewritten_transcript_is_read_again_without_counting_twice() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 1000000 } } } }",
    );
    let s = Session::new(&env, "rotated-session");
    s.prompt("Go");
    let usage = json!({"input_tokens": 1000, "output_tokens": 100});
    let input = json!({"command": "ls"});
    for line in s.response(
        "msg_1",
        "Listing.",
        Some(("toolu_1", input.clone())),
        usage.clone(),
    ) {
        s.line(line);
    }
    s.pre("toolu_1", &input);
    s.result("toolu_1", &input, "a b");
    let tokens = |env: &Env| {
        env.run("rotated-session", "prompt-1")
            .unwrap()
            .spend()
            .tokens()
    };
    assert_eq!(tokens(&env), 1100);
    // The file is replaced by one holding the same response and a new one.
    std::fs::remove_file(Path::new(&s.transcript)).unwrap();
    for (msg, id) in [("msg_1", "toolu_1"), ("msg_2", "toolu_2")] {
        for line in s.response(
            msg,
            "Listing.",
            Some((id, json!({"command": msg}))),
            usage.clone(),
        ) {
            s.line(line);
        }
    }
    s.pre("toolu_2", &json!({"command": "msg_2"}));
    assert_eq!(tokens(&env), 2200);
}

/// Codex names its rollout in every payload: each response's `token_count` (cached input
/// apart, the turn's model) is a usage event, so a run cost budget stops a scripted Codex
/// session. gpt-5-codex at $1.25 / $0.125 / $10 per million: 40,000 fresh input tokens,
/// 60,000 cached and 5,000 out cost $0.1075 a response; $0.40 warns at the third
/// response and denies the fourth's call.
#[test]
fn a_cost_budget_stops_a_codex_session_by_its_rollouts_token_counts() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 0.4 } } } }",
    );
    let s = Session::new(&env, "codex-session");
    let hook = |event: &str, fields: Value| {
        let mut v = json!({"session_id": s.id, "turn_id": "turn-1", "transcript_path": s.transcript,
            "cwd": "/repo", "hook_event_name": event, "model": "gpt-5-codex", "permission_mode": "default"});
        for (k, x) in fields.as_object().unwrap() {
            v[k] = x.clone();
        }
        let out = env.hook("codex", &v);
        assert_eq!(out.code, 0, "{out:?}");
        out
    };
    s.line(
        json!({"timestamp": "t", "type": "session_meta", "payload": {"id": s.id, "cwd": "/repo"}}),
    );
    hook("UserPromptSubmit", json!({"prompt": "fix it"}));
    s.line(json!({"timestamp": "t", "type": "turn_context", "payload": {"cwd": "/repo", "model": "gpt-5-codex"}}));
    s.line(json!({"timestamp": "t", "type": "event_msg", "payload": {"type": "user_message", "message": "fix it"}}));
    let mut total = 0;
    let mut decisions = Vec::new();
    for i in 1..=6 {
        let id = format!("call_{i}");
        let command = format!("cargo test t{i}");
        s.line(json!({"timestamp": "t", "type": "response_item", "payload": {"type": "function_call",
            "name": "shell", "arguments": json!({"command": ["bash", "-lc", command]}).to_string(), "call_id": id}}));
        total += 105_000;
        s.line(json!({"timestamp": "t", "type": "event_msg", "payload": {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": total, "total_tokens": total},
            "last_token_usage": {"input_tokens": 100000, "cached_input_tokens": 60000, "output_tokens": 5000,
                "reasoning_output_tokens": 1000, "total_tokens": 105000}}}}));
        let input = json!({"command": command});
        let out = hook(
            "PreToolUse",
            json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": id}),
        );
        let d = decision(&out);
        decisions.push(d.clone());
        if d.as_deref().is_some_and(|d| d.starts_with("deny")) {
            break;
        }
        s.line(json!({"timestamp": "t", "type": "response_item", "payload": {"type": "function_call_output",
            "call_id": id, "output": "ok"}}));
        hook(
            "PostToolUse",
            json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": id, "tool_response": "ok"}),
        );
    }
    assert_eq!(decisions.len(), 4, "{decisions:?}");
    assert!(decisions[..2].iter().all(Option::is_none), "{decisions:?}");
    assert!(
        decisions[2].as_deref().unwrap().starts_with("warn:"),
        "{decisions:?}"
    );
    let deny = decisions[3].as_deref().unwrap();
    assert!(
        deny.contains("run_budget") || deny.contains("cost budget"),
        "{deny}"
    );
    let cost = env
        .run("codex-session", "prompt-1")
        .unwrap()
        .spend()
        .cost
        .usd();
    assert!((cost - 4.0 * 0.1075).abs() < 1e-9, "{cost}");
}

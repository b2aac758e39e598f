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
    compress["trigger"] = json!("manual");
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
        "AfterModel",
        "BeforeTool",
        "AfterTool",
        "AfterAgent",
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

const PRESET: &str =
    r#"{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: "recommended" } }"#;

/// One streamed chunk of an answer, as `AfterModel` carries it: `text` without thoughts,
/// the parts with them; the last chunk has a `finishReason` and the response's usage.
fn chunk(text: &str, thoughts: &str, last: Option<(u64, u64)>) -> Value {
    let mut v = base("AfterModel");
    v["llm_request"] = json!({
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "Why does the build fail?"}],
        "config": {"temperature": 1},
    });
    let parts: Vec<&str> = [thoughts, text]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect();
    v["llm_response"] = json!({
        "text": text,
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
    });
    if let Some((prompt, total)) = last {
        v["llm_response"]["candidates"][0]["finishReason"] = json!("STOP");
        v["llm_response"]["usageMetadata"] =
            json!({"promptTokenCount": prompt, "totalTokenCount": total});
    }
    v
}

fn turn_end(text: &str) -> Value {
    let mut v = base("AfterAgent");
    v["prompt"] = json!("Why does the build fail?");
    v["prompt_response"] = json!(text);
    v["stop_hook_active"] = json!(false);
    v
}

#[test]
fn an_answer_chanting_as_it_streams_is_stopped_before_it_ends() {
    let env = Env::with_config(PRESET);
    env.hook(AGENT, &base("BeforeAgent"));
    let thinking = env.hook(
        AGENT,
        &chunk("", "**Checking the build**\n\nThe log should say.", None),
    );
    assert_eq!(thinking.json(), json!({}));
    let opening = env.hook(
        AGENT,
        &chunk("The build fails in the linker step.\n", "", None),
    );
    assert_eq!(opening.json(), json!({}));
    let (mut warned, mut stopped) = (None, None);
    for n in 1..=30 {
        let out = env
            .hook(
                AGENT,
                &chunk("I will run the build again to see the error.\n", "", None),
            )
            .json();
        if out.get("continue") == Some(&json!(false)) {
            let reason = out["stopReason"].as_str().unwrap();
            assert!(reason.starts_with("CRITICAL"), "{reason}");
            assert!(
                out["systemMessage"]
                    .as_str()
                    .unwrap()
                    .contains("content_chanting"),
                "{out}"
            );
            stopped = Some(n);
            break;
        }
        if let Some(note) = out.get("systemMessage") {
            assert!(note.as_str().unwrap().starts_with("[loopguard] WARNING"));
            warned.get_or_insert(n);
        } else {
            assert_eq!(out, json!({}), "chunk {n}");
        }
    }
    // The recommended preset: a warning at 6 occurrences, the stop at 10.
    assert_eq!((warned, stopped), (Some(6), Some(10)));
    // The run is over: the rest of the stream, its end and its calls are refused.
    let after = env.hook(AGENT, &chunk("Running it now.\n", "", Some((900, 1000))));
    assert_eq!(after.json()["continue"], false);
    assert_eq!(env.hook(AGENT, &turn_end("…")).json()["continue"], false);
    let call = env.hook(
        AGENT,
        &before("run_shell_command", json!({"command": "make"})),
    );
    assert_eq!(call.json()["decision"], "deny");
    // A new prompt is a new run.
    env.hook(AGENT, &base("BeforeAgent"));
    assert_eq!(
        env.hook(AGENT, &chunk("Fixed.", "", Some((900, 1000))))
            .json(),
        json!({})
    );
}

#[test]
fn a_warning_about_an_answer_reaches_the_model_with_the_next_result() {
    let env = Env::with_config(PRESET);
    env.hook(AGENT, &base("BeforeAgent"));
    for _ in 0..5 {
        env.hook(AGENT, &chunk("Let me look at the log again.\n", "", None));
    }
    let warned = env
        .hook(
            AGENT,
            &chunk("Let me look at the log again.\n", "", Some((500, 600))),
        )
        .json();
    let note = warned["systemMessage"].as_str().unwrap().to_owned();
    assert!(note.starts_with("[loopguard] WARNING"), "{note}");
    // The answer carried a call: the model reads the warning with its result.
    let input = json!({"command": "cat build.log"});
    assert_eq!(
        env.hook(AGENT, &before("run_shell_command", input.clone()))
            .json(),
        json!({})
    );
    let result = env
        .hook(
            AGENT,
            &after(
                "run_shell_command",
                input.clone(),
                json!({"llmContent": "ld: undefined symbol", "returnDisplay": ""}),
            ),
        )
        .json();
    assert_eq!(
        result["hookSpecificOutput"]["additionalContext"].as_str(),
        Some(note.as_str())
    );
    // Once.
    env.hook(AGENT, &before("run_shell_command", input.clone()));
    let again = env
        .hook(
            AGENT,
            &after(
                "run_shell_command",
                input,
                json!({"llmContent": "ld: undefined symbol", "returnDisplay": ""}),
            ),
        )
        .json();
    assert_eq!(again, json!({}));
}

#[test]
fn what_an_answer_spends_counts_against_the_budgets() {
    let env = Env::with_config(
        r#"{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 30000 } } } }"#,
    );
    env.hook(AGENT, &base("BeforeAgent"));
    // Every chunk carries the usage so far; only the last one counts.
    for _ in 0..3 {
        let mut c = chunk("Reading the file.", "", None);
        c["llm_response"]["usageMetadata"] =
            json!({"promptTokenCount": 12777, "totalTokenCount": 12790});
        assert_eq!(env.hook(AGENT, &c).json(), json!({}));
    }
    assert_eq!(
        env.hook(AGENT, &chunk("", "", Some((12777, 12802)))).json(),
        json!({})
    );
    let input = json!({"absolute_path": "/w/a.txt"});
    env.hook(AGENT, &before("read_file", input.clone()));
    env.hook(
        AGENT,
        &after(
            "read_file",
            input,
            json!({"llmContent": "a", "returnDisplay": ""}),
        ),
    );
    // The second response passes 30,000 tokens in the run: the agent loop stops.
    let out = env
        .hook(AGENT, &chunk("Done.", "", Some((18000, 18100))))
        .json();
    assert_eq!(out["continue"], false, "{out}");
    assert!(
        out["stopReason"].as_str().unwrap().contains("budget"),
        "{out}"
    );
}

#[test]
fn the_turns_answer_ends_its_stream_or_is_judged_whole() {
    let env = Env::with_config(PRESET);
    env.hook(AGENT, &base("BeforeAgent"));
    assert_eq!(
        env.hook(AGENT, &chunk("The build passes now.", "", Some((100, 120))))
            .json(),
        json!({})
    );
    assert_eq!(
        env.hook(AGENT, &turn_end("The build passes now.")).json(),
        json!({})
    );
    // Without AfterModel (not registered), the turn's answer is judged whole: a chant in it
    // stops the session's agent loop.
    env.hook(AGENT, &base("BeforeAgent"));
    let chant = "I will run the build again to see the error.\n".repeat(12);
    let out = env
        .hook(AGENT, &turn_end(&format!("The build fails.\n{chant}")))
        .json();
    assert_eq!(out["continue"], false, "{out}");
    assert!(out["stopReason"].as_str().unwrap().starts_with("CRITICAL"));
}

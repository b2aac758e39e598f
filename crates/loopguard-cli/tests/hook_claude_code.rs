//! `loopguard hook claude-code` through the real binary, with the payload shapes of Claude
//! Code's hooks reference: a session that loops until the hook blocks it, the same after a
//! `PreCompact`, and the state each step leaves in the database (read back with the store
//! that `loopguard serve` uses).

mod common;
mod hook_common;

use hook_common::{counts, Env};
use loopguard::Detector;
use serde_json::{json, Value};

const AGENT: &str = "claude-code";

fn base(session: &str, event: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": format!("/home/user/.claude/projects/-home-user-app/{session}.jsonl"),
        "cwd": "/home/user/app",
        "permission_mode": "default",
        "hook_event_name": event,
    })
}

fn with(mut v: Value, fields: Value) -> Value {
    for (k, x) in fields.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn session_start(session: &str, source: &str) -> Value {
    with(
        base(session, "SessionStart"),
        json!({"source": source, "model": "claude-sonnet-4-6"}),
    )
}

fn prompt(session: &str, text: &str) -> Value {
    with(base(session, "UserPromptSubmit"), json!({"prompt": text}))
}

fn read_input(path: &str) -> Value {
    json!({"file_path": path})
}

fn pre(session: &str, id: &str, tool: &str, input: Value) -> Value {
    with(
        base(session, "PreToolUse"),
        json!({"tool_name": tool, "tool_input": input, "tool_use_id": id}),
    )
}

fn post(session: &str, id: &str, tool: &str, input: Value, response: Value) -> Value {
    with(
        base(session, "PostToolUse"),
        json!({"tool_name": tool, "tool_input": input, "tool_response": response, "tool_use_id": id}),
    )
}

fn read_response(path: &str, content: &str) -> Value {
    // Claude Code's Read response.
    json!({"type": "text", "file": {"filePath": path, "content": content, "numLines": 1, "startLine": 1, "totalLines": 1}})
}

/// Runs a Read of `path` through PreToolUse and, when it is not denied, PostToolUse with
/// the same content each time. Returns the PreToolUse answer.
fn read(env: &Env, session: &str, id: &str, path: &str) -> hook_common::Hook {
    let pre = env.hook(AGENT, &pre(session, id, "Read", read_input(path)));
    assert_eq!(pre.code, 0, "{pre:?}");
    let denied =
        !pre.stdout.is_empty() && pre.json()["hookSpecificOutput"]["permissionDecision"] == "deny";
    if !denied {
        let post = env.hook(
            AGENT,
            &post(
                session,
                id,
                "Read",
                read_input(path),
                read_response(path, "the same content"),
            ),
        );
        assert_eq!((post.code, post.stdout.as_str()), (0, ""), "{post:?}");
    }
    pre
}

#[test]
fn a_looping_session_is_warned_then_blocked_then_stopped() {
    let env = Env::new();
    let s = "7f3c2a1e-loop";
    for payload in [
        session_start(s, "startup"),
        prompt(s, "Read the config until it changes"),
    ] {
        let h = env.hook(AGENT, &payload);
        // Anything on stdout would become context for the model: nothing is printed.
        assert_eq!((h.code, h.stdout.as_str(), h.stderr.as_str()), (0, "", ""));
    }
    let mut answers = Vec::new();
    for i in 1..=21 {
        answers.push(read(
            &env,
            s,
            &format!("toolu_{i:02}"),
            "/home/user/app/config.yaml",
        ));
    }
    for (i, a) in answers.iter().enumerate() {
        let n = i + 1;
        match n {
            11 => {
                let out = a.json();
                let note = out["hookSpecificOutput"]["additionalContext"]
                    .as_str()
                    .unwrap();
                assert_eq!(out["hookSpecificOutput"]["hookEventName"], "PreToolUse");
                assert!(out["hookSpecificOutput"]
                    .get("permissionDecision")
                    .is_none());
                assert!(
                    note.starts_with("[loopguard] WARNING: you have called Read 10 times"),
                    "{note}"
                );
            }
            21 => {
                let out = a.json();
                assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
                let reason = out["hookSpecificOutput"]["permissionDecisionReason"]
                    .as_str()
                    .unwrap();
                assert!(reason.starts_with("CRITICAL: Read was called 20 times with identical arguments and identical results"), "{reason}");
                assert_eq!(
                    out["systemMessage"],
                    "loopguard blocked Read (generic_repeat, 20)"
                );
                assert!(
                    out.get("continue").is_none(),
                    "a non-terminal block lets Claude go on"
                );
            }
            _ => assert_eq!(a.stdout, "", "call {n}"),
        }
    }
    // Should Claude Code report the denied call as a failure, it is not recorded: its id
    // names a vetoed call.
    let denied = with(
        base(s, "PostToolUseFailure"),
        json!({"tool_name": "Read", "tool_input": read_input("/home/user/app/config.yaml"),
               "tool_use_id": "toolu_21", "error": "Denied by a PreToolUse hook"}),
    );
    assert_eq!(env.hook(AGENT, &denied).stdout, "");
    // The state on disk: the loop lives in the run of the prompt (SessionStart started
    // run 1, the prompt run 2), 20 calls with their results and one veto.
    let state = env.run(s, "prompt-2").expect("the prompt's run");
    assert_eq!(counts(&state), (21, 1));
    assert!(state.stop().is_none());

    // Retrying the blocked call keeps it blocked, and vetoes extend the streak until the
    // global circuit breaker ends the run (streak 30 = 20 results + 10 vetoes).
    let mut terminal_at = None;
    for n in 22..=31 {
        let out = read(&env, s, &format!("toolu_{n}"), "/home/user/app/config.yaml").json();
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
        if out.get("continue") == Some(&json!(false)) {
            assert!(
                out["stopReason"]
                    .as_str()
                    .unwrap()
                    .contains("global circuit breaker"),
                "{out}"
            );
            terminal_at = Some(n);
            break;
        }
    }
    assert_eq!(terminal_at, Some(31));
    let state = env.run(s, "prompt-2").unwrap();
    assert_eq!(
        state.stop().map(|s| s.detector),
        Some(Detector::GlobalCircuitBreaker)
    );
    // Every later call of the run is blocked, whatever it is.
    let other = env
        .hook(
            AGENT,
            &pre(s, "toolu_x", "Grep", json!({"pattern": "TODO"})),
        )
        .json();
    assert_eq!(other["continue"], false);
    assert!(other["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap()
        .contains("this run was stopped by global_circuit_breaker"));

    // The next prompt is a new run: the same call is allowed again.
    env.hook(AGENT, &prompt(s, "Try something else"));
    assert_eq!(
        read(&env, s, "toolu_new", "/home/user/app/config.yaml").stdout,
        ""
    );
    assert_eq!(counts(&env.run(s, "prompt-3").unwrap()), (1, 0));

    // SessionEnd forgets the session.
    let end = env.hook(
        AGENT,
        &with(
            base(s, "SessionEnd"),
            json!({"reason": "prompt_input_exit"}),
        ),
    );
    assert_eq!((end.code, end.stdout.as_str()), (0, ""));
    assert!(env.runs(s).is_empty());
}

#[test]
fn the_same_loop_after_a_compaction_aborts_the_run() {
    // With the default config (no thresholds crossed), only the post-compaction guard acts.
    let env = Env::new();
    let s = "c0mpact-session";
    env.hook(AGENT, &session_start(s, "startup"));
    env.hook(AGENT, &prompt(s, "Fix the failing test"));
    // Some ordinary work first.
    for (i, path) in ["/app/a.rs", "/app/b.rs", "/app/c.rs"].iter().enumerate() {
        assert_eq!(read(&env, s, &format!("toolu_w{i}"), path).stdout, "");
    }
    // The context overflows and is compacted.
    let compact = env.hook(
        AGENT,
        &with(
            base(s, "PreCompact"),
            json!({"trigger": "auto", "custom_instructions": ""}),
        ),
    );
    assert_eq!(
        (compact.code, compact.stdout.as_str()),
        (0, ""),
        "never exit 2 on PreCompact: it would block the compaction"
    );
    assert_eq!(
        env.run(s, "prompt-2")
            .unwrap()
            .compaction_guard()
            .remaining(),
        3
    );
    // Claude Code reports the compaction with SessionStart(compact): not a new run.
    env.hook(AGENT, &session_start(s, "compact"));

    // ... and the model falls straight back into the same call with the same result.
    let input = json!({"command": "cargo test -p app", "description": "Run the tests"});
    let response = json!({"stdout": "test result: FAILED. 0 passed; 1 failed", "stderr": "", "interrupted": false, "isImage": false});
    let mut last = None;
    for i in 1..=3 {
        let id = format!("toolu_c{i}");
        let pre_out = env.hook(AGENT, &pre(s, &id, "Bash", input.clone()));
        assert_eq!(pre_out.stdout, "", "call {i} is allowed");
        last = Some(env.hook(
            AGENT,
            &post(s, &id, "Bash", input.clone(), response.clone()),
        ));
        if i < 3 {
            assert_eq!(last.as_ref().unwrap().stdout, "");
        }
    }
    let out = last.unwrap().json();
    assert_eq!(out["continue"], false);
    let reason = out["stopReason"].as_str().unwrap();
    assert!(
        reason.contains("tool Bash repeated 3 times")
            && reason.contains("compaction_loop_persisted"),
        "{reason}"
    );
    assert_eq!(out["hookSpecificOutput"]["hookEventName"], "PostToolUse");
    assert_eq!(out["hookSpecificOutput"]["additionalContext"], reason);
    let state = env.run(s, "prompt-2").unwrap();
    assert_eq!(
        state.stop().map(|s| s.detector),
        Some(Detector::CompactionLoopPersisted)
    );
    // The run is over: the next call is denied and Claude is stopped.
    let next = env.hook(AGENT, &pre(s, "toolu_c4", "Bash", input)).json();
    assert_eq!(next["hookSpecificOutput"]["permissionDecision"], "deny");
    assert_eq!(next["continue"], false);
}

#[test]
fn failures_are_recorded_as_errors() {
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }");
    let s = "failing";
    env.hook(AGENT, &prompt(s, "Deploy"));
    let input = json!({"command": "./deploy.sh", "description": "Deploy"});
    for i in 0..3 {
        let id = format!("toolu_f{i}");
        assert_eq!(env.hook(AGENT, &pre(s, &id, "Bash", input.clone())).code, 0);
        let fail = with(
            base(s, "PostToolUseFailure"),
            json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": id,
                   "error": "Command exited with non-zero status code 1", "is_interrupt": false}),
        );
        let h = env.hook(AGENT, &fail);
        assert_eq!((h.code, h.stdout.as_str()), (0, ""));
    }
    let blocked = env
        .hook(AGENT, &pre(s, "toolu_f3", "Bash", input.clone()))
        .json();
    assert_eq!(blocked["hookSpecificOutput"]["permissionDecision"], "deny");
    let state = env.run(s, "prompt-1").unwrap();
    // Each outcome is the fingerprint of the error, not of a result.
    let error = loopguard::fingerprint::OutcomePrint::new(
        loopguard::fingerprint::OutcomeRule::for_call("Bash", &input),
        loopguard::Outcome::Error(&json!("Command exited with non-zero status code 1")),
    );
    let loopguard::fingerprint::OutcomePrint::Hashed { fingerprint, .. } = error else {
        panic!("errors are hashed")
    };
    let records = state.history().records();
    assert!(
        records
            .iter()
            .take(3)
            .all(|r| r.outcome() == Some(fingerprint)),
        "errors are recorded as errors"
    );
    // An interrupted call records nothing.
    let interrupted = with(
        base(s, "PostToolUseFailure"),
        json!({"tool_name": "Bash", "tool_input": {"command": "sleep 100"}, "tool_use_id": "toolu_i", "error": "Interrupted by user", "is_interrupt": true}),
    );
    assert_eq!(env.hook(AGENT, &interrupted).code, 0);
    assert_eq!(counts(&env.run(s, "prompt-1").unwrap()).0, 4);
}

#[test]
fn subagents_loop_in_runs_of_their_own() {
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }");
    let s = "with-subagents";
    env.hook(AGENT, &prompt(s, "Explore the repo"));
    let sub = |id: &str| {
        let mut p = pre(s, id, "Grep", json!({"pattern": "fn main"}));
        p["agent_id"] = json!("agent-7");
        p["agent_type"] = json!("Explore");
        p
    };
    for i in 0..3 {
        let id = format!("toolu_s{i}");
        assert_eq!(env.hook(AGENT, &sub(&id)).code, 0);
        let mut p = post(
            s,
            &id,
            "Grep",
            json!({"pattern": "fn main"}),
            json!({"mode": "files_with_matches", "filenames": ["src/main.rs"], "numFiles": 1, "durationMs": i}),
        );
        p["agent_id"] = json!("agent-7");
        assert_eq!(env.hook(AGENT, &p).stdout, "");
    }
    let out = env.hook(AGENT, &sub("toolu_s3")).json();
    assert_eq!(
        out["hookSpecificOutput"]["permissionDecision"], "deny",
        "durations do not make a result new"
    );
    // The main conversation's run saw none of it.
    assert!(env.run(s, "prompt-1").is_none());
    // The subagent's calls are a session of its own, named as the transcript readers name it.
    let child = format!("{s}/agent-7");
    assert_eq!(counts(&env.run(&child, "prompt-1").unwrap()), (4, 1));
    assert_eq!(
        env.hook(
            AGENT,
            &pre(s, "toolu_m", "Grep", json!({"pattern": "fn main"}))
        )
        .stdout,
        ""
    );
}

#[test]
fn hooks_running_at_once_lose_no_update() {
    let env = Env::new();
    let s = "parallel";
    env.hook(AGENT, &prompt(s, "Read everything"));
    // Claude Code runs the hooks of parallel tool calls at the same time.
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let payload = pre(
                s,
                &format!("toolu_p{i}"),
                "Read",
                read_input(&format!("/app/file{i}.rs")),
            );
            let cmd = env.command(AGENT);
            std::thread::spawn(move || hook_common::run(cmd, payload.to_string().as_bytes()))
        })
        .collect();
    for h in handles {
        let h = h.join().unwrap();
        assert_eq!((h.code, h.stdout.as_str()), (0, ""), "{h:?}");
    }
    assert_eq!(counts(&env.run(s, "prompt-1").unwrap()), (12, 0));
}

#[test]
fn print_config_gives_the_settings_snippet() {
    let env = Env::new();
    let mut cmd = env.command(AGENT);
    cmd.arg("--print-config");
    let out = hook_common::run(cmd, b"");
    assert_eq!(out.code, 0);
    let v = out.json();
    let events: Vec<&str> = v["hooks"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PreCompact",
        "SessionEnd",
    ] {
        assert!(events.contains(&event), "{event}");
        let command = v["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        // The hook's own binary, installed beside `loopguard` (as cargo builds it).
        assert!(
            command.contains("/loopguard-hook claude-code --db "),
            "{command}"
        );
        let exe = command.split(' ').next().unwrap();
        assert!(std::path::Path::new(exe).is_absolute(), "{exe}");
    }
    assert!(out.stderr.contains("settings.json"));
    // The command in the snippet works.
    let command = v["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    let h = hook_common::run(
        {
            let mut c = std::process::Command::new("sh");
            c.arg("-c").arg(command);
            c
        },
        pre("via-snippet", "toolu_1", "Read", read_input("/x"))
            .to_string()
            .as_bytes(),
    );
    assert_eq!((h.code, h.stdout.as_str()), (0, ""), "{h:?}");
    assert_eq!(env.runs("via-snippet").len(), 1);
}

#[test]
fn config_and_database_come_from_the_environment_too() {
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2 } } }");
    let xdg = env.dir.path().join("xdg");
    let mut last = None;
    for i in 0..3 {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"));
        cmd.args(["hook", AGENT])
            .env_remove("LOOPGUARD_DB")
            .env("XDG_DATA_HOME", &xdg)
            .env("LOOPGUARD_CONFIG", env.config.as_ref().unwrap());
        let id = format!("t{i}");
        last = Some(hook_common::run(
            cmd,
            pre("env", &id, "Read", read_input("/x"))
                .to_string()
                .as_bytes(),
        ));
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"));
        cmd.args(["hook", AGENT])
            .env_remove("LOOPGUARD_DB")
            .env("XDG_DATA_HOME", &xdg)
            .env("LOOPGUARD_CONFIG", env.config.as_ref().unwrap());
        hook_common::run(
            cmd,
            post(
                "env",
                &id,
                "Read",
                read_input("/x"),
                read_response("/x", "same"),
            )
            .to_string()
            .as_bytes(),
        );
    }
    let db = xdg.join("loopguard/loopguard.db");
    assert!(
        db.is_file(),
        "the default database is under $XDG_DATA_HOME/loopguard/"
    );
    // warningThreshold 1, criticalThreshold 2: the third identical call is blocked.
    assert_eq!(
        last.unwrap().json()["hookSpecificOutput"]["permissionDecision"],
        "deny"
    );
    assert_eq!(hook_common::runs(&db, "env").len(), 1);
}

#[test]
fn state_written_by_the_server_store_is_continued_by_hooks() {
    // The store of `loopguard serve` writes three identical calls, the last ones as deltas
    // in its change log, and is still running; the hook continues the same run (its row
    // and the deltas) and blocks the fourth.
    use loopguard_events::{apply_event, parse_line};
    use loopguard_store::{Limits, RunKey, SqliteOptions, SqliteStore, Store};
    let env = Env::with_config("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }");
    env.hook(AGENT, &prompt("shared", "go")); // run prompt-1
    let config = loopguard::ConfigSet::parse("{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = SqliteOptions {
        idle_fold: std::time::Duration::from_secs(3600),
        ..SqliteOptions::default()
    };
    let store = rt.block_on(async {
        let store = SqliteStore::open(&env.db, Limits::default(), std::sync::Arc::new(loopguard::SystemClock), options).unwrap();
        for i in 0..3 {
            for line in [
                format!(r#"{{"type":"call","session":"shared","run":"prompt-1","call_id":"c{i}","tool":"Read","args":{{"file_path":"/x"}}}}"#),
                format!(r#"{{"type":"result","session":"shared","run":"prompt-1","call_id":"c{i}","result":{{"content":[{{"type":"text","text":"same"}}]}}}}"#),
            ] {
                let event = parse_line(line.as_bytes()).unwrap();
                let scope = event.as_ref().scope(None);
                store
                    .update(RunKey::of(&scope), |run, session, now| apply_event(run, session, config.for_agent(None), &scope, &event.as_ref(), now).into_answer(1, &scope))
                    .await
                    .unwrap();
            }
        }
        store
    });
    let logged: i64 = rusqlite::Connection::open(&env.db)
        .unwrap()
        .query_row(
            "SELECT (SELECT count(*) FROM run_deltas_0) + (SELECT count(*) FROM run_deltas_1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(logged > 0, "the server's last writes are in its change log");
    let out = env
        .hook(AGENT, &pre("shared", "c3", "Read", read_input("/x")))
        .json();
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
    rt.block_on(store.close()).unwrap();
    assert_eq!(counts(&env.run("shared", "prompt-1").unwrap()), (4, 1));
}

#[test]
fn full_durability_is_a_flag_away() {
    let env = Env::new();
    let mut cmd = env.command(AGENT);
    cmd.args(["--sync", "full"]);
    let h = hook_common::run(
        cmd,
        pre("durable", "toolu_1", "Read", read_input("/x"))
            .to_string()
            .as_bytes(),
    );
    assert_eq!((h.code, h.stdout.as_str()), (0, ""), "{h:?}");
    assert_eq!(env.runs("durable").len(), 1);
    let mut cmd = env.command(AGENT);
    cmd.args(["--sync", "full", "--print-config"]);
    let v = hook_common::run(cmd, b"").json();
    assert!(v["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with(" --sync full"));
}

#[test]
fn a_fan_out_of_subagents_past_the_tree_limits_is_denied() {
    let env = Env::with_config(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { agentTree: { maxChildren: 2, maxConcurrent: 2 } } } }",
    );
    let s = "fan-out";
    env.hook(AGENT, &prompt(s, "Review every module"));
    // The first call of subagent `agent` (a Task Claude Code spawned in this prompt).
    let first_call = |agent: &str, id: &str| {
        let mut p = pre(s, id, "Read", read_input(&format!("/src/{agent}.rs")));
        p["agent_id"] = json!(agent);
        p["agent_type"] = json!("Explore");
        env.hook(AGENT, &p)
    };
    let stop = |agent: &str| {
        let mut p = with(base(s, "SubagentStop"), json!({"stop_hook_active": false}));
        p["agent_id"] = json!(agent);
        p["agent_type"] = json!("Explore");
        env.hook(AGENT, &p)
    };
    assert_eq!(first_call("a1", "t1").stdout, "", "child 1: allowed");
    let second = first_call("a2", "t2").json();
    assert!(
        second["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .is_some_and(|n| n.contains("agent_tree") && n.contains("child 2")),
        "child 2 is warned at maxChildren: {second}"
    );
    // Both are still running: a third is past maxChildren (and maxConcurrent) and denied,
    // terminally: the subagent may not run.
    let third = first_call("a3", "t3").json();
    assert_eq!(
        third["hookSpecificOutput"]["permissionDecision"], "deny",
        "{third}"
    );
    let reason = third["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("agent_tree") && reason.contains("child 3"),
        "{reason}"
    );
    // The subagent's later calls are denied too; its own session holds them.
    let again = first_call("a3", "t4").json();
    assert_eq!(again["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(env.run(&format!("{s}/agent-a1"), "prompt-1").is_some());
    // SubagentStop ends a subagent's run: it is forgotten and no longer running.
    assert_eq!(stop("a1").code, 0);
    assert!(env.run(&format!("{s}/agent-a1"), "prompt-1").is_none());
    // A new prompt is a new parent run, with children of its own.
    env.hook(AGENT, &prompt(s, "Now the tests"));
    assert_eq!(first_call("b1", "t5").stdout, "", "a child of the next run");
}

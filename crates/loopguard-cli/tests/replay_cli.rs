//! `loopguard replay` and `loopguard config` driven as a user would: real binary, real files,
//! bad input of every kind.

mod common;

use std::io::Write;

use common::{json_lines, run};
use serde_json::{json, Value};

fn temp_file(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("loopguard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(contents)
        .unwrap();
    path
}

const ENABLED: &str =
    "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }";

/// `loopguard replay --config CONFIG -` on `input`, which must succeed: its answers and
/// what it wrote on stderr.
fn replayed(config: &std::path::Path, input: &str) -> (Vec<Value>, Vec<u8>) {
    let out = run(
        &["replay", "--config", config.to_str().unwrap(), "-"],
        input.as_bytes(),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (json_lines(&out.stdout), out.stderr)
}

fn call(id: &str, args: Value) -> String {
    json!({"type": "call", "session": "s", "call_id": id, "tool": "read", "args": args}).to_string()
}

#[test]
fn reads_stdin_and_applies_the_config() {
    let cfg = temp_file("enabled.json5", ENABLED.as_bytes());
    let mut input = String::new();
    for i in 0..4 {
        input += &call(&format!("c{i}"), json!({"p": 1}));
        input += "\n";
        input += &json!({"type": "result", "session": "s", "call_id": format!("c{i}"), "result": "same"}).to_string();
        input += "\n";
    }
    let (answers, stderr) = replayed(&cfg, &input);
    let verdicts: Vec<_> = answers
        .iter()
        .filter_map(|a| a["verdict"].as_str())
        .collect();
    assert_eq!(verdicts, ["allow", "allow", "warn", "block"]);
    assert!(stderr.is_empty());
}

/// A host that sends every call under one `call_id` and never a result: the first five
/// repeats are answered as retries (the first answer again), every later one is counted
/// as a new call and says so, and the loop is still caught, as with an id per call behind
/// by those five retries.
#[test]
fn an_id_reused_without_results_is_retried_five_times_then_counted_and_told() {
    let same = |id: &str| call(id, json!({"p": 1}));
    let reused: String = (0..30).map(|_| same("x") + "\n").collect();
    let unique: String = (0..30).map(|i| same(&format!("u{i}")) + "\n").collect();
    let cfg = temp_file(
        "live.json5",
        b"{ tools: { loopDetection: { enabled: true } } }",
    );
    let (reused, unique) = (replayed(&cfg, &reused).0, replayed(&cfg, &unique).0);
    let retries = loopguard::RETRIES_PER_CALL as usize;
    for (i, a) in reused.iter().enumerate() {
        let mut a = a.clone();
        let warning = a.as_object_mut().unwrap().remove("call_id_warning");
        let sent = a.as_object_mut().unwrap().remove("call_id_reused");
        // The answer a host with an id per call gets, `retries` calls later.
        let mut want = unique[i.saturating_sub(retries)].clone();
        want["seq"] = json!(i + 1);
        assert_eq!(a, want, "answer {i}");
        match i {
            i if i <= retries => assert!(warning.is_none() && sent.is_none(), "answer {i}"),
            _ => {
                assert_eq!(sent, Some(json!(i + 1)), "answer {i}");
                let warning = warning.unwrap();
                assert!(
                    warning
                        .as_str()
                        .unwrap()
                        .starts_with(&format!("call_id sent {} times", i + 1)),
                    "{warning}"
                );
            }
        }
    }
    let verdicts: Vec<&str> = reused
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts.iter().position(|&v| v == "warn"),
        Some(10 + retries)
    );
    assert_eq!(
        verdicts.iter().filter(|&&v| v == "warn").count(),
        30 - 10 - retries
    );
    // The figure the docs give is this one.
    let root = common::repo_root();
    let figure = format!("at most {retries} times");
    for doc in [
        "docs/replay-format.md",
        "docs/serve.md",
        "docs/decisions.md",
    ] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        assert!(text.contains(&figure), "{doc} does not say {figure:?}");
    }
    let openapi =
        std::fs::read_to_string(root.join("crates/loopguard-server/src/openapi.json")).unwrap();
    assert!(openapi.contains(&format!("more than {retries} times")));
}

#[test]
fn agent_flag_selects_a_config_and_events_override_it() {
    let cfg = temp_file(
        "agents.json5",
        b"{ tools: { loopDetection: { enabled: false } }, agents: { list: [ { id: 'strict', tools: { loopDetection: { enabled: true, warningThreshold: 1 } } } ] } }",
    );
    let lines = [
        call("a", json!({})),
        call("b", json!({})),
        json!({"type": "call", "session": "t", "agent": "other", "tool": "read"}).to_string(),
        json!({"type": "call", "session": "t", "agent": "other", "tool": "read"}).to_string(),
    ]
    .join("\n");
    let out = run(
        &[
            "replay",
            "--config",
            cfg.to_str().unwrap(),
            "--agent",
            "strict",
        ],
        lines.as_bytes(),
    );
    let answers = json_lines(&out.stdout);
    assert_eq!(answers[1]["verdict"], "warn", "--agent strict applies");
    assert_eq!(answers[3]["verdict"], "allow", "the event's own agent wins");
}

#[test]
fn bad_lines_are_answered_and_the_stream_goes_on() {
    let deep = format!(
        "{{\"type\":\"call\",\"tool\":\"t\",\"args\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let mut input: Vec<u8> = Vec::new();
    input.extend(b"{\"type\":\"compaction\"}\n");
    input.extend(deep.as_bytes());
    input.push(b'\n');
    input.extend(b"{\"type\":\"call\",\"tool\":\"t\xff\"}\n");
    input.extend(b"{\"type\":\"call\",\"tool\":\"read\",\"args\":{\"n\":18446744073709551615}}\n");
    input.extend(b"{\"type\":\"call\",\"tool\":\"read\",\"args\":{\"n\":1");
    let out = run(&["replay"], &input);
    assert_eq!(out.status.code(), Some(2));
    let a = json_lines(&out.stdout);
    assert_eq!(a.len(), 5);
    assert_eq!(a[0]["armed"], 3);
    // Arguments nested 100,000 deep are valid JSON: read without a depth limit and
    // fingerprinted like any other call.
    assert_eq!(a[1]["verdict"], "allow", "{}", a[1]);
    assert!(
        a[2]["error"].as_str().unwrap().contains("UTF-8"),
        "{}",
        a[2]
    );
    assert_eq!(a[3]["verdict"], "allow");
    assert!(
        a[4]["error"].as_str().unwrap().starts_with("invalid JSON"),
        "{}",
        a[4]
    );
    assert_eq!(a[4]["seq"], 5);
}

#[test]
fn a_50_mb_result_is_fingerprinted() {
    let big = "x".repeat(50 << 20);
    let result = json!({"content": [{"type": "text", "text": big}]});
    let mut input = String::new();
    for i in 0..2 {
        input += &call(&format!("c{i}"), json!({}));
        input += "\n";
        input += &json!({"type": "result", "session": "s", "call_id": format!("c{i}"), "result": result}).to_string();
        input += "\n";
    }
    drop(result);
    let out = run(&["replay"], input.as_bytes());
    assert_eq!(out.status.code(), Some(0));
    let a = json_lines(&out.stdout);
    assert_eq!(a.len(), 4);
    assert!(a.iter().all(|x| x.get("error").is_none()));
    assert_eq!(a[3]["recorded"], true);
}

#[test]
fn fatal_errors_print_one_line_and_nothing_on_stdout() {
    let missing = run(&["replay", "/definitely/not/here.jsonl"], b"");
    assert_eq!(missing.status.code(), Some(1));
    assert!(missing.stdout.is_empty());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(err.trim().lines().count(), 1);
    assert!(
        err.contains("cannot read /definitely/not/here.jsonl"),
        "{err}"
    );

    let bad = temp_file(
        "bad.json5",
        b"{ tools: { loopDetection: { enabled: 1, bogus: 2 } } }",
    );
    let out = run(
        &["replay", "--config", bad.to_str().unwrap()],
        b"{\"type\":\"compaction\"}\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // The first problem, where it is, and how many more `config check` lists.
    assert!(
        err.contains("enabled") && err.contains("(and 1 more: loopguard config check"),
        "{err}"
    );
}

#[test]
fn config_check_lists_every_problem_with_positions() {
    let good = temp_file(
        "good.json5",
        b"// ok\n{ tools: { loopDetection: { enabled: true, historySize: 5 } } }\n",
    );
    let out = run(&["config", "check", good.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("valid"), "{text}");
    assert!(
        text.contains(
            "warning: global: warningThreshold 10 can never be reached with historySize 5"
        ),
        "{text}"
    );

    let bad = temp_file(
        "bad2.json5",
        b"{\n  tools: {\n    loopDetection: {\n      repeatThreshold: 5,\n      historySize: 0,\n      detectors: { pingpong: true },\n    },\n  },\n}\n",
    );
    let out = run(&["config", "check", bad.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let name = bad.display().to_string();
    assert!(
        err.contains(&format!(
            "{name}:4:7: unknown key `repeatThreshold` in tools.loopDetection (did you mean `"
        )),
        "{err}"
    );
    assert!(err.contains(&format!("{name}:5:7: tools.loopDetection.historySize: expected a positive integer, found the number 0")), "{err}");
    assert!(err.contains("did you mean `pingPong`"), "{err}");
    assert!(err.contains("3 problems found"), "{err}");

    let syntax = temp_file(
        "syntax.json5",
        b"{ tools: { loopDetection: { enabled: true }\n",
    );
    let out = run(&["config", "check", syntax.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid JSON5"));
}

/// Budgets that cannot hold everywhere are named, with why, by `config check` and the
/// startup summary; `config explain` shows the limits, the config's prices and the table.
#[test]
fn budgets_that_cannot_be_enforced_are_named() {
    let cfg = temp_file(
        "budgets.json5",
        b"{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 2 }, day: { wallSeconds: 3600 } }, prices: { 'acme/my-model': { input: 1, output: 3 } } } }",
    );
    let out = run(&["config", "check", cfg.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "warning: global: budgets.run.cost cannot be enforced for models without a price"
        ) && text.contains("1 in loopguard.prices")
            && text.contains("set a token budget too"),
        "{text}"
    );
    assert!(
        text.contains("wallSeconds runs on the host's clock"),
        "{text}"
    );
    assert!(text.contains("2 warnings"), "{text}");
    assert!(
        text.contains("budgets run $2.00; withoutProgress 20 calls; day 3,600 s (cost counts priced responses only"),
        "{text}"
    );
    let out = run(&["config", "explain", cfg.to_str().unwrap(), "--json"], b"");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = doc["configs"][0]["explanations"].to_string();
    assert!(notes.contains("budgets.run: $2.00."), "{notes}");
    assert!(
        notes.contains("prices.my-model: $1.00 in, $3.00 out"),
        "{notes}"
    );
    let table = doc["prices"].as_array().unwrap();
    assert!(table.len() >= 60);
    assert!(table.iter().all(
        |row| row["source"].as_str().unwrap().starts_with("https://")
            && row["asOf"].as_str().unwrap().len() == 10
    ));
}

#[test]
fn config_explain_prints_json_when_piped() {
    let cfg = temp_file(
        "explain.json5",
        b"{ tools: { loopDetection: { enabled: true, warningThreshold: 12 } }, agents: { entries: { w: { tools: { loopDetection: { historySize: 8 } } } } } }",
    );
    let out = run(&["config", "explain", cfg.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["fingerprintVersion"], "lg1");
    let configs = doc["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2);
    assert_eq!(configs[0]["scope"], "global");
    assert_eq!(configs[0]["effective"]["criticalThreshold"], 20);
    assert_eq!(configs[0]["effective"]["warningThreshold"], 12);
    assert_eq!(configs[1]["effective"]["historySize"], 8);
    let notes = configs[1]["explanations"].to_string();
    assert!(
        notes.contains("can never be reached with historySize 8"),
        "{notes}"
    );
    assert!(doc["policy"]["knownPolls"].as_array().unwrap().len() >= 2);

    let one = run(
        &[
            "config",
            "explain",
            cfg.to_str().unwrap(),
            "--agent",
            "nobody",
            "--json",
        ],
        b"",
    );
    let doc: Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(doc["configs"].as_array().unwrap().len(), 1);
    assert!(doc["configs"][0]["scope"]
        .as_str()
        .unwrap()
        .contains("global settings"));
}

#[test]
fn help_teaches_with_examples() {
    let out = run(&["replay", "--help"], b"");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Examples:") && text.contains("Exit status"),
        "{text}"
    );
    let out = run(&["--help"], b"");
    assert!(String::from_utf8_lossy(&out.stdout).contains("replay"));
}

#[test]
fn structured_logs_name_session_run_tool_detector_and_count() {
    let cfg = temp_file("logs.json5", ENABLED.as_bytes());
    let mut input = String::from("{\"type\":\"compaction\",\"session\":\"s\",\"run\":\"r\"}\n");
    for i in 0..4 {
        input += &json!({"type": "call", "session": "s", "run": "r", "call_id": format!("c{i}"), "tool": "read"}).to_string();
        input += "\n";
        input += &json!({"type": "result", "session": "s", "run": "r", "call_id": format!("c{i}"), "result": "same"}).to_string();
        input += "\n";
    }
    let out = common::bin()
        .args(["replay", "--config", cfg.to_str().unwrap(), "-"])
        .env("LOOPGUARD_LOG", "info")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(input.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains("post-compaction guard armed for 3 attempts"),
        "{logs}"
    );
    let warn = logs
        .lines()
        .find(|l| l.contains("loop warning"))
        .expect("a warning event");
    for field in [
        "session=\"s\"",
        "run=\"r\"",
        "tool=\"read\"",
        "detector=\"generic_repeat\"",
        "count=2",
    ] {
        assert!(warn.contains(field), "{field} missing in {warn}");
    }
    assert!(
        logs.contains("run aborted: compaction_loop_persisted"),
        "{logs}"
    );
    assert!(
        logs.lines().any(|l| l.contains("tool call blocked")),
        "{logs}"
    );
}

//! No bypass for JSON a `serde_json::Value` cannot hold: arguments with a number beyond the
//! double range (`1e999`), a lone surrogate escape (`"\ud800"`) or nesting deeper than 128
//! levels are valid JSON that tools run, so every front end fingerprints them like any
//! other call; so are the non-finite literals clients built on Python's `json` send
//! (`NaN`, `Infinity`, `-Infinity`, and the signed spellings of JSON5), each value under
//! one fingerprint however it is spelled. Eight identical such calls are warned, then
//! blocked, through the real binary: `mcp-proxy` (the blocked call never reaches the
//! server), `serve`, the hooks and `replay`.

mod common;
mod hook_common;
mod mcp_common;
mod serve_common;

use serde_json::Value;

/// Warn at 3 identical calls, block at 5 (no-progress: the outcomes are identical too).
const CONFIG: &str =
    "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5 } } }";

/// The argument shapes, each as the JSON texts of one value that call `i` takes in turn.
fn shapes() -> Vec<(&'static str, Vec<String>)> {
    vec![
        (
            "a number beyond the double range",
            vec![r#"{"n":1e999}"#.to_owned()],
        ),
        ("a lone surrogate", vec![r#"{"s":"x\ud800y"}"#.to_owned()]),
        (
            "nesting 300 levels deep",
            vec![format!(
                r#"{{"deep":{}1{}}}"#,
                "[".repeat(300),
                "]".repeat(300)
            )],
        ),
        (
            "non-finite literals, spelled three ways",
            vec![
                r#"{"x":NaN,"y":[Infinity,-Infinity]}"#.to_owned(),
                r#"{"x":-NaN,"y":[+Infinity,-Infinity]}"#.to_owned(),
                r#"{"y":[Infinity,-Infinity],"x":+NaN}"#.to_owned(),
            ],
        ),
    ]
}

/// The arguments of call `i` of a shape.
fn args_of(variants: &[String], i: usize) -> &str {
    &variants[i % variants.len()]
}

/// The verdicts of eight identical calls must include a warning and end in a block.
fn check(front: &str, shape: &str, verdicts: &[&str]) {
    assert_eq!(verdicts.len(), 8, "{front}, {shape}: {verdicts:?}");
    assert!(
        verdicts.contains(&"warn"),
        "{front}, {shape}: never warned: {verdicts:?}"
    );
    assert_eq!(
        verdicts.last(),
        Some(&"block"),
        "{front}, {shape}: not blocked: {verdicts:?}"
    );
}

#[test]
fn mcp_proxy_screens_them() {
    for (shape, variants) in shapes() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.json5");
        std::fs::write(&config, CONFIG).unwrap();
        let log = dir.path().join("server.log");
        let server = mcp_common::scripted("echo", &log);
        let server: Vec<&str> = server.iter().map(String::as_str).collect();
        let config = config.display().to_string();
        let mut p = mcp_common::Proxy::start(&["--config", &config], &server);
        let mut verdicts = Vec::new();
        for id in 1..=8 {
            // The first spelling only: the server, Python's `json`, reads no other (a
            // request it cannot read it never answers).
            let args = &variants[0];
            p.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read","arguments":{args}}}}}"#
            ));
            let answer = p.recv_json();
            assert_eq!(answer["id"], id, "{shape}: {answer}");
            let texts = answer["result"]["content"].to_string();
            verdicts.push(if answer["result"]["isError"] == true {
                "block"
            } else if texts.contains("[loopguard] WARNING") {
                "warn"
            } else {
                "allow"
            });
        }
        check("mcp-proxy", shape, &verdicts);
        // A blocked call never reached the server.
        let seen = std::fs::read_to_string(&log).unwrap();
        assert!(
            !seen.contains(r#""id":8,"#),
            "{shape}: call 8 reached the server"
        );
        assert!(seen.contains(r#""id":1,"#), "{shape}: call 1 did not");
    }
}

#[test]
fn serve_fingerprints_them() {
    let dir = serve_common::tempdir();
    let config = dir.path().join("config.json5");
    std::fs::write(&config, CONFIG).unwrap();
    let config = config.display().to_string();
    let server = serve_common::Server::start(&["--memory", "--config", &config]);
    let mut client = server.client();
    for (n, (shape, variants)) in shapes().into_iter().enumerate() {
        let mut verdicts = Vec::new();
        for i in 0..8 {
            let args = args_of(&variants, i);
            let call = format!(
                r#"{{"type":"call","session":"s{n}","call_id":"c{i}","tool":"read","args":{args}}}"#
            );
            let response = client.post("/v1/events", &call);
            assert_eq!(response.status, 200, "{shape}: {}", response.text());
            let answer = response.json();
            verdicts.push(match answer["verdict"].as_str() {
                Some("warn") => "warn",
                Some("block") => "block",
                _ => "allow",
            });
            if answer["verdict"] != "block" {
                let result = format!(
                    r#"{{"type":"result","session":"s{n}","call_id":"c{i}","result":{{"content":[{{"type":"text","text":"same \udc00"}}],"details":{{"n":-1e999}}}}}}"#
                );
                let response = client.post("/v1/events", &result);
                assert_eq!(response.status, 200, "{shape}: {}", response.text());
                assert_eq!(response.json()["recorded"], true);
            }
        }
        check("serve", shape, &verdicts);
    }
}

#[test]
fn hooks_judge_them() {
    let env = hook_common::Env::with_config(CONFIG);
    for (n, (shape, variants)) in shapes().into_iter().enumerate() {
        let mut verdicts = Vec::new();
        for i in 0..8 {
            let args = args_of(&variants, i);
            let pre = format!(
                r#"{{"session_id":"s{n}","hook_event_name":"PreToolUse","tool_name":"Read","tool_input":{args},"tool_use_id":"t{i}"}}"#
            );
            let hook = hook_common::run(env.command("claude-code"), pre.as_bytes());
            assert_eq!(hook.code, 0, "{shape}: {}", hook.stderr);
            verdicts.push(if hook.stdout.contains(r#""deny""#) {
                "block"
            } else if hook.stdout.contains("additionalContext") {
                "warn"
            } else {
                "allow"
            });
            let post = format!(
                r#"{{"session_id":"s{n}","hook_event_name":"PostToolUse","tool_name":"Read","tool_input":{args},"tool_use_id":"t{i}","tool_response":"same \udc00"}}"#
            );
            let hook = hook_common::run(env.command("claude-code"), post.as_bytes());
            assert_eq!(hook.code, 0, "{shape}: {}", hook.stderr);
        }
        check("hook", shape, &verdicts);
    }
}

#[test]
fn replay_fingerprints_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json5");
    std::fs::write(&config, CONFIG).unwrap();
    for (shape, variants) in shapes() {
        let mut input = String::new();
        for i in 0..8 {
            let args = args_of(&variants, i);
            input.push_str(&format!(
                r#"{{"type":"call","call_id":"c{i}","tool":"read","args":{args}}}"#
            ));
            input.push('\n');
            input.push_str(&format!(
                r#"{{"type":"result","call_id":"c{i}","result":"same \ud800"}}"#
            ));
            input.push('\n');
        }
        let out = common::run(
            &["replay", "--config", config.to_str().unwrap(), "-"],
            input.as_bytes(),
        );
        assert_eq!(out.status.code(), Some(0), "{shape}");
        let answers: Vec<Value> = common::json_lines(&out.stdout);
        let verdicts: Vec<&str> = answers
            .iter()
            .filter_map(|a| a["verdict"].as_str())
            .map(|v| if v == "allow" { "allow" } else { v })
            .collect();
        check("replay", shape, &verdicts);
    }
}

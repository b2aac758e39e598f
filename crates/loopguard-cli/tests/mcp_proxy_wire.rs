//! `loopguard mcp-proxy` on the wire, against a scripted stdio peer: every message that is
//! not a screened `tools/call` passes through byte for byte, a loop is answered by the
//! proxy without reaching the server, and bad input on either side (a server that writes
//! non-JSON, a server that exits mid-call, a client that disconnects, servers that will
//! not stop) is handled the way the MCP stdio transport expects.

mod mcp_common;

use std::time::Duration;

use mcp_common::{scripted, Proxy};
use serde_json::json;

fn server(mode: &str, dir: &tempfile::TempDir) -> (Vec<String>, std::path::PathBuf) {
    let log = dir.path().join("server.log");
    (scripted(mode, &log), log)
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn messages_pass_through_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log) = server("echo", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    let emitted = [
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1,"total":3,"message":"step 1"}}"#,
        r#"{"jsonrpc":"2.0","id":"s-1","method":"roots/list"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"srv","data":"hello"}}"#,
        r#"{"jsonrpc":"2.0","id":"s-2","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"6x7?"}}],"maxTokens":5}}"#,
    ];
    let sent = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"wire-test","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "script/emit", "params": {"lines": emitted}}).to_string(),
        r#"{"jsonrpc":"2.0","id":"s-1","result":{"roots":[{"uri":"file:///p","name":"p"}]}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":"s-2","result":{"role":"assistant","content":{"type":"text","text":"42"},"model":"m"}}"#.to_owned(),
        r#"[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"c","progress":1}}]"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"path":"/x"},"_meta":{"progressToken":7}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"user"}}"#.to_owned(),
        r#"this line is not JSON: the server answers it, not the proxy"#.to_owned(),
        r#"{ "jsonrpc" : "2.0", "id" : 4, "method" : "ping", "params" : { } }"#.to_owned(),
    ];
    p.send(&sent[0]);
    assert_eq!(p.recv(), r#"{"jsonrpc":"2.0","id":0,"result":{}}"#);
    p.send(&sent[1]);
    p.send(&sent[2]);
    for line in emitted {
        assert_eq!(p.recv(), line, "server messages reach the client unchanged");
    }
    assert_eq!(p.recv(), r#"{"jsonrpc":"2.0","id":1,"result":{}}"#);
    p.send(&sent[3]);
    p.send(&sent[4]);
    p.send(&sent[5]);
    assert_eq!(p.recv(), r#"[{"jsonrpc":"2.0","id":2,"result":{}}]"#);
    p.send(&sent[6]);
    assert_eq!(
        p.recv(),
        r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"same output"}],"isError":false}}"#
    );
    p.send(&sent[7]);
    p.send(&sent[8]);
    p.send(&sent[9]);
    assert_eq!(p.recv(), r#"{"jsonrpc":"2.0","id":4,"result":{}}"#);
    p.close();
    let (code, _) = p.wait(Duration::from_secs(10));
    assert_eq!(
        code, 0,
        "the server exited 0 when its stdin closed (not SIGTERM: 143)"
    );
    let received = std::fs::read_to_string(log).unwrap();
    let expected: String = sent.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(
        received, expected,
        "client messages reach the server unchanged"
    );
}

#[test]
fn a_loop_is_answered_by_the_proxy_and_never_reaches_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }").unwrap();
    let (cmd, log) = server("echo", &dir);
    let mut p = Proxy::start(&["--config", config.to_str().unwrap()], &refs(&cmd));
    let call = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/x"}}}).to_string()
    };
    let mut answers = Vec::new();
    for id in 1..=5 {
        p.send(&call(id));
        answers.push(p.recv_json());
    }
    // 1, 2: as the server sent them; 3: warned (note appended); 4, 5: blocked.
    assert_eq!(answers[0]["result"]["content"].as_array().unwrap().len(), 1);
    assert_eq!(answers[1]["result"]["content"].as_array().unwrap().len(), 1);
    let warned = &answers[2]["result"];
    assert_eq!(warned["isError"], false);
    assert_eq!(warned["content"][0]["text"], "same output");
    assert!(warned["content"][1]["text"]
        .as_str()
        .unwrap()
        .starts_with("[loopguard] WARNING: you have called read 2 times"));
    for (answer, id) in answers[3..].iter().zip([4, 5]) {
        assert_eq!(answer["id"], id);
        assert_eq!(answer["result"]["isError"], true);
        let text = answer["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.starts_with("CRITICAL: read was called"), "{text}");
    }
    // A call with other arguments goes through.
    p.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "read", "arguments": {"path": "/y"}}}).to_string());
    assert_eq!(p.recv_json()["result"]["content"][0]["text"], "same output");
    p.close();
    assert_eq!(p.wait(Duration::from_secs(10)).0, 0);
    let received = std::fs::read_to_string(log).unwrap();
    assert_eq!(
        received
            .lines()
            .filter(|l| l.contains("tools/call"))
            .count(),
        4,
        "the blocked calls never reached the server"
    );
}

#[test]
fn non_json_from_the_server_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = server("garbage", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    for id in 1..=3 {
        p.send(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
        assert_eq!(
            p.recv(),
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#)
        );
    }
    p.close();
    assert_eq!(p.wait(Duration::from_secs(10)).0, 0);
}

#[test]
fn non_json_from_the_server_is_reported_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = server("garbage", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    p.recv();
    p.close();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        p.stderr().contains("loopguard mcp-proxy: dropped a line from the server that is not JSON: DEBUG this is not JSON-RPC"),
        "{}",
        p.stderr()
    );
}

#[test]
fn a_server_that_exits_mid_call() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = server("die-on-call", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#);
    assert_eq!(p.recv_json()["id"], 1);
    p.send(r#"{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{"name":"deploy","arguments":{}}}"#);
    // The open request is answered the way the MCP SDKs report a closed connection.
    let answer = p.recv_json();
    assert_eq!(answer["id"], "call-7");
    assert_eq!(answer["error"]["code"], -32000);
    assert_eq!(
        answer["error"]["message"],
        "Connection closed: the MCP server exited (exit status 3)"
    );
    assert!(
        p.ends_within(Duration::from_secs(10)),
        "then the proxy's stdout ends"
    );
    let (code, _) = p.wait(Duration::from_secs(10));
    assert_eq!(code, 3, "the proxy exits with the server's status");
}

#[test]
fn a_server_killed_by_a_signal() {
    let mut p = Proxy::start(&[], &["sh", "-c", "read line; kill -9 $$"]);
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#);
    let answer = p.recv_json();
    assert_eq!(answer["error"]["code"], -32000);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("signal"),
        "{answer}"
    );
    assert_eq!(p.wait(Duration::from_secs(10)).0, 128 + 9);
}

#[test]
fn signals_to_the_proxy_are_passed_on_to_the_server() {
    for (signal, number) in [("TERM", 15), ("INT", 2), ("HUP", 1)] {
        // A server that says hello, then exits with 40 + N when signal N arrives.
        let script = format!(
            r#"trap 'echo "server: got {signal}" >&2; exit {code}' {signal}
echo '{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"up"}}}}'
while :; do sleep 0.05; done"#,
            code = 40 + number
        );
        let mut p = Proxy::start(&[], &["sh", "-c", &script]);
        p.send(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{}}}"#,
        );
        // The hello went through: the server runs, and so does the signal handling,
        // which the proxy installs before it starts the server.
        assert_eq!(p.recv_json()["params"]["data"], "up");
        p.signal(signal);
        // The request the server never answered gets the closed-connection error.
        let answer = p.recv_json();
        assert_eq!(answer["id"], 1, "{answer}");
        assert_eq!(answer["error"]["code"], -32000);
        p.stderr_contains(&format!("passed SIG{signal} on to the MCP server"));
        p.stderr_contains(&format!("server: got {signal}"));
        let (code, _) = p.wait(Duration::from_secs(10));
        assert_eq!(code, 40 + number, "the proxy ends with the server's status");
    }
}

#[test]
fn the_client_going_away_stops_the_server() {
    let dir = tempfile::tempdir().unwrap();
    // A server that exits at the end of its input: at once.
    let (cmd, _) = server("echo", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    p.recv();
    p.close();
    let (code, _) = p.wait(Duration::from_secs(10));
    assert_eq!(
        code, 0,
        "it exited by itself, before the grace period ran out"
    );

    // A server that ignores the end of its input gets SIGTERM after the grace period.
    let (cmd, _) = server("ignore-eof", &dir);
    let mut p = Proxy::start(&["--shutdown-grace-ms", "300"], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    p.recv();
    p.close();
    let (code, took) = p.wait(Duration::from_secs(10));
    assert_eq!(code, 128 + 15, "ended by SIGTERM");
    assert!(took >= Duration::from_millis(300), "{took:?}");

    // One that ignores SIGTERM too is killed after a second grace period.
    let (cmd, _) = server("ignore-term", &dir);
    let mut p = Proxy::start(&["--shutdown-grace-ms", "300"], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    p.recv();
    p.close();
    let (code, took) = p.wait(Duration::from_secs(10));
    assert_eq!(code, 128 + 9, "ended by SIGKILL");
    assert!(took >= Duration::from_millis(600), "{took:?}");
}

#[test]
fn a_client_that_disconnects_mid_call() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log) = server("echo", &dir);
    // The scripted server is a Python process: on a loaded machine it can take longer
    // than the default 2 s to exit once its stdin closes, and is then stopped by SIGTERM.
    let mut p = Proxy::start(&["--shutdown-grace-ms", "15000"], &refs(&cmd));
    p.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{}}}"#,
    );
    p.close();
    let (code, _) = p.wait(Duration::from_secs(40));
    assert_eq!(code, 0);
    assert!(std::fs::read_to_string(log).unwrap().contains("tools/call"));
}

#[test]
fn bad_command_lines_fail_with_a_message() {
    // A server that cannot be started.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["mcp-proxy", "--", "/nonexistent/mcp-server", "--flag"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot start the MCP server \"/nonexistent/mcp-server\""),
        "{stderr}"
    );
    // No server at all.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args(["mcp-proxy"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    // An invalid config.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { historySize: 0 } } }").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .args([
            "mcp-proxy",
            "--config",
            config.to_str().unwrap(),
            "--",
            "cat",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("historySize"));
}

/// docs/mcp-proxy.md, "Check that it works": four identical calls piped at once, before
/// any answer. Calls in flight are part of the loop: id 4 carries the warning, id 5 is the
/// proxy's own answer, and the server ran the call three times.
#[test]
fn the_documented_pipelined_check_gives_the_documented_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("check.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
    )
    .unwrap();
    let (cmd, log) = server("echo", &dir);
    let mut p = Proxy::start(&["--config", config.to_str().unwrap()], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"check","version":"1"}}}"#);
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    for id in 2..=5 {
        p.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}).to_string());
    }
    let answers: Vec<serde_json::Value> = (0..5).map(|_| p.recv_json()).collect();
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no answer for {id}: {answers:?}"))
    };
    for id in [2, 3] {
        assert_eq!(by_id(id)["result"]["content"].as_array().unwrap().len(), 1);
    }
    assert!(by_id(4)["result"]["content"][1]["text"]
        .as_str()
        .unwrap()
        .starts_with("[loopguard] WARNING: you have called echo 2 times"));
    assert_eq!(by_id(5)["result"]["isError"], true);
    p.close();
    p.wait(Duration::from_secs(10));
    let received = std::fs::read_to_string(log).unwrap();
    assert_eq!(received.matches("tools/call").count(), 3, "{received}");
}

/// A request longer than the proxy reads is answered with an error at once (the client
/// would otherwise wait forever); the server never sees it.
#[test]
fn a_request_too_long_to_read_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log) = server("echo", &dir);
    let mut p = Proxy::start(&["--max-line-bytes", "10000"], &refs(&cmd));
    let big = json!({"jsonrpc":"2.0","id":"w-1","method":"tools/call","params":{"name":"write","arguments":{"text":"x".repeat(50_000)}}}).to_string();
    p.send(&big);
    let answer = p.recv_json();
    assert_eq!(answer["id"], "w-1");
    assert_eq!(answer["error"]["code"], -32600);
    p.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    assert_eq!(p.recv(), r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
    p.stderr_contains("its line of");
    p.close();
    p.wait(Duration::from_secs(10));
    let received = std::fs::read_to_string(log).unwrap();
    assert!(!received.contains("w-1"), "the server never sees it");
}

/// The ids of the JSON-RPC responses among `lines`, in order.
fn answered_ids(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|answer| answer["id"].as_u64())
        .collect()
}

fn identical_call(id: u64) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"read","arguments":{"path":"/x"}}}).to_string()
}

/// 25 identical calls sent at once, then the end of the client's input: the calls held
/// behind the one in flight are still screened as the answers come, and every id is
/// answered exactly once before the proxy exits, as the server alone would answer them.
#[test]
fn pipelined_calls_then_eof_are_each_answered_once() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log) = server("echo", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    for id in 1..=25 {
        p.send(&identical_call(id));
    }
    p.close();
    let lines = p.rest(Duration::from_secs(60));
    let mut ids = answered_ids(&lines);
    ids.sort_unstable();
    assert_eq!(ids, (1..=25).collect::<Vec<_>>(), "{lines:#?}");
    // The default thresholds: 20 reach the server, the 11th is warned, 21 to 25 blocked.
    let answers: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let blocked = answers
        .iter()
        .filter(|a| a["result"]["isError"] == true)
        .map(|a| a["id"].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(blocked, (21..=25).collect::<Vec<_>>());
    let (code, _) = p.wait(Duration::from_secs(20));
    assert_eq!(code, 0);
    let received = std::fs::read_to_string(log).unwrap();
    assert_eq!(received.matches("tools/call").count(), 20, "{received}");
}

/// A server that dies with calls still held: each of them, and the one in flight, is
/// answered with the closed-connection error, and the proxy exits with the server's status.
#[test]
fn calls_held_at_eof_are_answered_when_the_server_dies() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = server("die-on-call", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    for id in 1..=3 {
        p.send(&identical_call(id));
    }
    p.close();
    let lines = p.rest(Duration::from_secs(30));
    let mut ids = answered_ids(&lines);
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3], "{lines:#?}");
    for line in &lines {
        let answer: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(answer["error"]["code"], -32000, "{answer}");
    }
    assert_eq!(p.wait(Duration::from_secs(10)).0, 3);
}

/// A server that exits with 0 but answered nothing: the requests get the closed-connection
/// error, stderr counts them, and the exit status says that not everything was answered.
#[test]
fn a_clean_exit_that_left_requests_unanswered_is_not_success() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, _) = server("quit-on-call", &dir);
    let mut p = Proxy::start(&[], &refs(&cmd));
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(p.recv_json()["id"], 1);
    for id in 2..=3 {
        p.send(&identical_call(id));
    }
    p.close();
    let lines = p.rest(Duration::from_secs(30));
    assert_eq!(answered_ids(&lines), vec![2, 3], "{lines:#?}");
    p.stderr_contains(
        "2 requests the MCP server did not answer were answered with a Connection closed error",
    );
    assert_eq!(p.wait(Duration::from_secs(10)).0, 1);
}

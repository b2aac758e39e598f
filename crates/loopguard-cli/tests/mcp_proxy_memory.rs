//! `mcp-proxy` against tool results far larger than usual: a 50 MB structured result goes
//! through at about its own size in memory (not a value tree of a hundred times it), is
//! recorded, and its loop is warned (the note inserted into the result) then blocked.
//! Linux only: the peak is read from `/proc/<pid>/status`.

mod common;
mod mcp_common;

use std::path::Path;
use std::time::Instant;

use common::peak_resident as peak;
use mcp_common::{fixtures, Proxy};

/// The `tools/call` of the rows server's tool, as request `id`.
fn query(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"query","arguments":{{"sql":"select * from rows"}}}}}}"#
    )
}

#[test]
fn a_50_mb_structured_result_goes_through_at_about_its_size() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
    )
    .unwrap();
    let server = fixtures().join("rows_server.py").display().to_string();
    let config = config.display().to_string();
    let mut p = Proxy::start(&["--config", &config], &["python3", &server, "1150000"]);
    let mut verdicts = Vec::new();
    let mut size = 0;
    for id in 1..=4 {
        let started = Instant::now();
        p.send(&query(id));
        let line = p.recv();
        if line.len() < 10_000 {
            // The proxy's own answer: the call never reached the server.
            let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["id"], id, "{line}");
            assert_eq!(answer["result"]["isError"], true, "{line}");
            verdicts.push("blocked");
            continue;
        }
        let head = &line[..200];
        assert!(
            head.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"#)),
            "{head}"
        );
        size = size.max(line.len() as u64);
        // The result's content, then its rows, as the server wrote them.
        let tail = &line[line.len() - 200..];
        assert!(
            tail.ends_with(r#"{"id":1149999,"name":"row 1149999","score":0.5}]}}}"#),
            "{tail}"
        );
        let content = &line[..line.find(r#""structuredContent""#).unwrap()];
        verdicts.push(if content.contains("WARNING") {
            "warned"
        } else {
            "allowed"
        });
        println!(
            "call {id}: {} MB answered in {:.2} s, proxy peak so far {} MiB",
            line.len() / 1_000_000,
            started.elapsed().as_secs_f64(),
            peak(p.pid()) >> 20
        );
    }
    let peak = peak(p.pid());
    assert_eq!(verdicts, ["allowed", "allowed", "warned", "blocked"]);
    assert!(size >= 50_000_000, "{size}");
    assert!(
        peak < 3 * size,
        "peak {} MiB for a result of {} MB",
        peak >> 20,
        size / 1_000_000
    );
}

/// A response cut short (its id readable, its JSON broken) answers its request with an
/// error, and the identical call the proxy held behind it goes on to the server.
#[test]
fn a_broken_response_is_answered_and_the_held_call_goes_on() {
    let server = fixtures().join("rows_server.py").display().to_string();
    let mut p = Proxy::start(&[], &["python3", &server, "3", "broken-first"]);
    // The second, identical, is held until the first is answered.
    p.send(&query(1));
    p.send(&query(2));
    let first = p.recv_json();
    assert_eq!(first["id"], 1, "{first}");
    assert_eq!(first["error"]["code"], -32603, "{first}");
    let second = p.recv_json();
    assert_eq!(second["id"], 2, "{second}");
    assert_eq!(second["result"]["content"][0]["text"], "ok", "{second}");
    p.stderr_contains("the server's response is not JSON");
}

/// A request line longer than `--max-line-bytes` is answered with an error without
/// reaching the server, and the proxy never holds more of it than the limit (a 100 MiB
/// line against a 16 MiB limit).
#[test]
fn an_over_long_line_is_refused_at_the_limit_without_being_held() {
    if !Path::new("/proc/self/status").exists() {
        println!("SKIPPED: no /proc to read peak memory from");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let server = mcp_common::scripted("echo", &log);
    let server: Vec<&str> = server.iter().map(String::as_str).collect();
    let limit: u64 = 16 << 20;
    let mut p = Proxy::start(&["--max-line-bytes", &limit.to_string()], &server);
    // Up and running: a request answered.
    p.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
    assert_eq!(p.recv_json()["id"], 1);
    let base = peak(p.pid());
    let len = 100 << 20;
    let mut line = String::with_capacity(len + 200);
    line.push_str(r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"write","arguments":{"text":""#);
    line.extend(std::iter::repeat_n('x', len));
    line.push_str(r#""}}}"#);
    p.send(&line);
    drop(line);
    let answer = p.recv_json();
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let grown = peak(p.pid()).saturating_sub(base);
    println!(
        "a {} MiB line against a {} MiB limit: the proxy grew by {} MiB",
        len >> 20,
        limit >> 20,
        grown >> 20
    );
    // The line up to the limit, never more.
    assert!(grown <= limit + (8 << 20), "grew by {} MiB", grown >> 20);
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!seen.contains(r#""id":9"#), "the server saw it");
}

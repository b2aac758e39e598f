//! `loopguard mcp-proxy` between a real MCP client and a real MCP server, both from the
//! official Python SDK (PyPI `mcp`, pinned in `scripts/setup/mcp-python.sh`, which installs
//! it into `target/mcp-venv`; `LOOPGUARD_MCP_PYTHON` names another interpreter that has it).
//!
//! The client initializes, lists and reads resources and prompts, pings, runs a tool that
//! reports progress and logs, one that asks the client's model (sampling) and one that
//! lists the client's roots; then it calls the same tool with the same arguments until the
//! proxy blocks it, and prints the transcript. Without the SDK the test prints SKIPPED,
//! except on CI (`CI` set), where that is a failure.

mod mcp_common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// A Python interpreter that can import the MCP SDK.
fn python_with_sdk() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("LOOPGUARD_MCP_PYTHON").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import mcp.client.stdio, mcp.server.fastmcp"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn run_client(python: &PathBuf, proxy_args: &[&str]) -> (Vec<String>, Value, String) {
    let fixtures = mcp_common::fixtures();
    let out = Command::new(python)
        .arg(fixtures.join("loop_client.py"))
        .arg(env!("CARGO_BIN_EXE_loopguard"))
        .arg(python)
        .arg(fixtures.join("loop_server.py"))
        .args(proxy_args)
        .env_remove("LOOPGUARD_CONFIG")
        .output()
        .expect("run the MCP client");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    let mut lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let summary: Value =
        serde_json::from_str(&lines.pop().expect("a summary line")).expect("the summary is JSON");
    (lines, summary, stderr)
}

#[test]
fn the_sdk_client_loops_until_the_proxy_blocks_it() {
    let Some(python) = python_with_sdk() else {
        if std::env::var_os("CI").is_some() {
            panic!("the MCP Python SDK is missing on CI: scripts/setup/mcp-python.sh should have installed it into target/mcp-venv");
        }
        println!("SKIPPED: the MCP Python SDK is not installed (scripts/setup/mcp-python.sh installs it)");
        return;
    };
    let (transcript, s, stderr) = run_client(&python, &[]);
    println!("--- transcript: an MCP client through loopguard mcp-proxy (default thresholds) ---");
    for line in &transcript {
        println!("{line}");
    }
    println!(
        "--- proxy stderr ---\n{}",
        stderr
            .lines()
            .filter(|l| l.starts_with("loopguard"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // Everything that is not a looping tools/call passed through intact.
    assert_eq!(s["server_name"], "loop-demo");
    assert_eq!(
        s["tools"],
        serde_json::json!(["ask_model", "count", "executions", "read_config", "roots"])
    );
    assert_eq!(s["resources"], serde_json::json!(["config://app"]));
    assert_eq!(s["resource_text"], "retries=3");
    assert_eq!(s["prompts"], serde_json::json!(["fix"]));
    assert_eq!(s["prompt_text"], "Please fix: the loop");
    assert_eq!(s["count"], serde_json::json!(["counted to 3"]));
    assert_eq!(
        s["progress"],
        serde_json::json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ]),
        "progress notifications"
    );
    assert_eq!(
        s["logs"],
        serde_json::json!(["counted 1", "counted 2", "counted 3"]),
        "log notifications"
    );
    assert_eq!(
        s["sampling"],
        serde_json::json!(["What is 6 x 7?"]),
        "a sampling request from the server"
    );
    assert_eq!(
        s["ask_model"],
        serde_json::json!(["the model said 42"]),
        "and the client's answer to it"
    );
    assert_eq!(
        s["roots"],
        serde_json::json!(["file:///srv/project"]),
        "a roots request from the server"
    );

    // The loop: warned at the 11th identical call (10 before it), blocked at the 21st
    // (20 identical results), and the blocked calls never reached the server.
    assert_eq!(s["warned_at"], serde_json::json!([11]));
    assert_eq!(s["blocked_at"], 21);
    let blocked = s["blocked_text"][0].as_str().unwrap();
    assert!(blocked.starts_with("CRITICAL: read_config was called 20 times with identical arguments and identical results."), "{blocked}");
    assert_eq!(s["executions"], serde_json::json!(["20"]));
    assert_eq!(s["retry_blocked"], true);
    assert_eq!(s["other_ok"], true, "other arguments are another call");
    assert!(
        stderr.contains("loopguard mcp-proxy: blocked tools/call read_config (generic_repeat, 20)"),
        "{stderr}"
    );
}

#[test]
fn the_config_sets_the_thresholds() {
    let Some(python) = python_with_sdk() else {
        if std::env::var_os("CI").is_some() {
            panic!("the MCP Python SDK is missing on CI: scripts/setup/mcp-python.sh should have installed it into target/mcp-venv");
        }
        println!("SKIPPED: the MCP Python SDK is not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5 } } }").unwrap();
    let (_, s, _) = run_client(&python, &["--config", config.to_str().unwrap()]);
    assert_eq!(s["warned_at"], serde_json::json!([4]));
    assert_eq!(s["blocked_at"], 6);
    assert_eq!(s["executions"], serde_json::json!(["5"]));
}

//! The first hour of a new user, driven through the real binary: one rule for the defaults,
//! a startup line that says what runs, configs that leave detection off reported with the
//! line that turns it on, config errors one per line, LOOPGUARD_CONFIG everywhere,
//! `--version` everywhere, and commands that say what they wait for on a terminal.

mod common;
mod serve_common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::{bin, json_lines, repo_root, run_command};
use serde_json::{json, Value};
use serve_common::Server;

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `loopguard ARGS` with no ambient LOOPGUARD_* variables, stdin from `stdin`.
fn lg(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut cmd = bin();
    cmd.args(args)
        .env_remove("LOOPGUARD_CONFIG")
        .env_remove("LOOPGUARD_DB")
        .env_remove("LOOPGUARD_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_command(cmd, stdin)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A real OpenClaw gateway config: no `tools.loopDetection` (OpenClaw's default is off).
const OPENCLAW: &str = r#"{
  "gateway": { "port": 18789, "bind": "loopback", "auth": { "mode": "token" } },
  "agents": { "defaults": { "workspace": "~/clawd", "model": { "primary": "anthropic/claude-opus-4-5" } } },
  "channels": { "telegram": { "enabled": true, "dmPolicy": "pairing" } },
}"#;

/// A config with two problems on lines 2 and 3.
const BAD: &str =
    "{ tools: { loopDetection: {\n  warningThreshold: -1,\n  repeatThreshold: 3 } } }";

fn assert_one_problem_per_line(err: &str, file: &std::path::Path) {
    let name = file.display().to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{name}:2:3: tools.loopDetection.warningThreshold"))),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{name}:3:3: unknown key `repeatThreshold`"))),
        "{err}"
    );
    // Not joined into one line: each line names the file once.
    assert!(lines.iter().all(|l| l.matches(&name).count() <= 1), "{err}");
}

/// 22 identical `read` calls, each followed by the same result; the verdicts.
fn identical_reads(server: &Server, session: &str) -> Vec<String> {
    let mut client = server.client();
    (1..=22)
        .map(|i| {
            let call = json!({"type": "call", "session": session, "run": "r", "call_id": format!("c{i}"),
                "tool": "read", "args": {"path": "/x"}});
            let verdict = client.post("/v1/events", &call.to_string()).json()["verdict"]
                .as_str()
                .unwrap()
                .to_owned();
            let result = json!({"type": "result", "session": session, "run": "r", "call_id": format!("c{i}"),
                "result": "same text"});
            client.post("/v1/events", &result.to_string());
            verdict
        })
        .collect()
}

#[test]
fn serve_without_a_config_guards_and_says_so() {
    let server = Server::start_with_env(&["--memory"], &[("LOOPGUARD_LOG", "info")]);
    let verdicts = identical_reads(&server, "s1");
    assert_eq!(verdicts[9], "allow");
    assert_eq!(verdicts[10], "warn", "{verdicts:?}");
    assert_eq!(verdicts[20], "block", "{verdicts:?}");
    let log = server.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("loopguard serve started"))
        .unwrap_or_else(|| panic!("{log}"));
    for part in [
        "config=\"no config file (live defaults)\"",
        "detection=\"detection on (warn at 10, block at 20, unknown tool 10, breaker 30, history 30)\"",
        "store=\"memory",
    ] {
        assert!(line.contains(part), "{part} in {line}");
    }
    server.stop();
}

#[test]
fn serve_honours_a_config_that_leaves_detection_off_and_warns() {
    let dir = temp();
    let config = write(&dir, "openclaw.json", OPENCLAW);
    let server = Server::start_with_env(
        &["--memory", "--config", config.to_str().unwrap()],
        &[("LOOPGUARD_LOG", "info")],
    );
    // The same file means the same in OpenClaw and here: rolling detectors off.
    assert!(identical_reads(&server, "s1").iter().all(|v| v == "allow"));
    let log = server.stderr();
    assert!(log.contains("detection off (enabled unset"), "{log}");
    assert!(
        log.contains("the rolling detectors are off")
            && log.contains("tools: { loopDetection: { enabled: true } }"),
        "{log}"
    );
    server.stop();
}

#[test]
fn config_check_says_whether_detection_runs() {
    let dir = temp();
    let config = write(&dir, "openclaw.json", OPENCLAW);
    let out = lg(&["config", "check", config.to_str().unwrap()], &[], b"");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("valid (0 agent blocks, 0 warnings)"),
        "{text}"
    );
    assert!(
        text.contains("note: ") && text.contains("the rolling detectors are off"),
        "{text}"
    );
    assert!(
        text.trim_end()
            .ends_with("tools: { loopDetection: { enabled: true } }"),
        "{text}"
    );
    let example = repo_root().join("examples/openclaw.json5");
    let out = lg(&["config", "check", example.to_str().unwrap()], &[], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("detection on (warn at 3, block at 5"),
        "{text}"
    );
}

/// A typo in the block's own name: the document is valid (it may hold anything else), but
/// `config check` and every command that loads it warn with the key, where it is, and the
/// name it resembles.
#[test]
fn a_misspelt_block_name_is_warned_about_wherever_the_config_is_loaded() {
    let dir = temp();
    for (name, text, said) in [
        (
            "lower.json5",
            "{ tools: {\n  loopdetection: { enabled: true } } }",
            ":2:3: unknown key `loopdetection` in tools (did you mean `loopDetection`?)",
        ),
        (
            "tool.json5",
            "{ tool: { loopDetection: { enabled: true } } }",
            ":1:3: unknown key `tool` (did you mean `tools`?): the loopDetection block in it is not read",
        ),
    ] {
        let config = write(&dir, name, text);
        let file = config.to_str().unwrap();
        let warning = format!("warning: {file}{said}");
        let out = lg(&["config", "check", file], &[], b"");
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(&warning), "{text}");
        assert!(text.contains("valid (0 agent blocks, 1 warning)"), "{text}");
        // The commands that load a config say it on stderr.
        for args in [
            vec!["mcp-proxy", "--config", file, "--", "true"],
            vec!["hook", "claude-code", "--print-config", "--config", file],
            vec!["scan", "--config", file, "-", "--format", "loopguard"],
        ] {
            let out = lg(&args, &[], b"");
            assert!(stderr(&out).contains(&warning), "{args:?}: {}", stderr(&out));
        }
        let server = Server::start_with_env(
            &["--memory", "--config", file],
            &[("LOOPGUARD_LOG", "info")],
        );
        // The log is read by a thread of its own: give it a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !server.stderr().contains(&warning) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(server.stderr().contains(&warning), "{}", server.stderr());
        server.stop();
    }
}

#[test]
fn replay_keeps_spec_defaults_and_reads_loopguard_config() {
    let example = repo_root().join("examples/stuck-read.jsonl");
    let config = repo_root().join("examples/openclaw.json5");
    // Without a config: SPEC §7, nothing but allows; nothing on stderr when piped.
    let out = lg(&["replay", example.to_str().unwrap()], &[], b"");
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let verdicts: Vec<Value> = json_lines(&out.stdout)
        .iter()
        .filter_map(|a| a.get("verdict").cloned())
        .collect();
    assert!(verdicts.iter().all(|v| v == "allow"), "{verdicts:?}");
    // LOOPGUARD_CONFIG is read: the README's answers.
    let out = lg(
        &["replay", example.to_str().unwrap()],
        &[("LOOPGUARD_CONFIG", config.to_str().unwrap())],
        b"",
    );
    let answers = json_lines(&out.stdout);
    assert_eq!(answers[6]["verdict"], "warn");
    assert_eq!(answers[10]["verdict"], "block");
    // --config wins over the variable.
    let dir = temp();
    let bad = write(&dir, "bad.json5", BAD);
    let out = lg(
        &[
            "replay",
            "--config",
            config.to_str().unwrap(),
            example.to_str().unwrap(),
        ],
        &[("LOOPGUARD_CONFIG", bad.to_str().unwrap())],
        b"",
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn config_errors_come_one_per_line_from_every_command() {
    let dir = temp();
    let bad = write(&dir, "bad.json5", BAD);
    let events = write(
        &dir,
        "events.jsonl",
        "{\"type\":\"call\",\"session\":\"s\",\"tool\":\"read\"}\n",
    );
    let b = bad.to_str().unwrap();
    // replay's stderr is SPEC §7's contract: one line, the first problem, where it is.
    let out = lg(
        &["replay", "--config", b, events.to_str().unwrap()],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr(&out),
        format!(
            "{}:2:3: tools.loopDetection.warningThreshold: expected a positive integer, found the number -1 \
(and 1 more: loopguard config check {} lists them all)\n",
            bad.display(),
            bad.display()
        )
    );
    for args in [
        vec!["scan", "--config", b, events.to_str().unwrap()],
        vec![
            "serve",
            "--memory",
            "--listen",
            "127.0.0.1:0",
            "--config",
            b,
        ],
        vec!["mcp-proxy", "--config", b, "--", "true"],
        vec!["hook", "claude-code", "--print-config", "--config", b],
        vec!["config", "explain", b],
    ] {
        let out = lg(&args, &[], b"");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_one_problem_per_line(&stderr(&out), &bad);
    }
    // The variable is read by every command, replay and scan included.
    let out = lg(
        &["scan", events.to_str().unwrap()],
        &[("LOOPGUARD_CONFIG", b)],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_one_problem_per_line(&stderr(&out), &bad);
    let out = lg(
        &["replay", events.to_str().unwrap()],
        &[("LOOPGUARD_CONFIG", b)],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).starts_with(&format!("{}:2:3: ", bad.display())));
}

#[test]
fn print_config_refuses_a_config_the_hook_could_not_use() {
    let dir = temp();
    // Missing: no snippet (it would fail at every event).
    let out = lg(
        &[
            "hook",
            "claude-code",
            "--print-config",
            "--config",
            "/nonexistent/c.json5",
        ],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("cannot read /nonexistent/c.json5"),
        "{}",
        stderr(&out)
    );
    // The same from the variable.
    let out = lg(
        &["hook", "codex", "--print-config"],
        &[("LOOPGUARD_CONFIG", "/nonexistent/c.json5")],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    // Detection off: refused unless asked for.
    let openclaw = write(&dir, "openclaw.json", OPENCLAW);
    let o = openclaw.to_str().unwrap();
    let out = lg(
        &["hook", "gemini", "--print-config", "--config", o],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("--allow-detection-off"),
        "{}",
        stderr(&out)
    );
    let out = lg(
        &[
            "hook",
            "gemini",
            "--print-config",
            "--config",
            o,
            "--allow-detection-off",
        ],
        &[],
        b"",
    );
    assert!(out.status.success());
    let snippet: Value = serde_json::from_slice(&out.stdout).unwrap();
    let command = snippet["hooks"]["BeforeTool"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(
        command.ends_with(&format!("/loopguard-hook gemini --config {o}")),
        "{command}"
    );
}

#[test]
fn the_hook_on_an_event_uses_loopguard_config_and_fails_open_line_by_line() {
    let dir = temp();
    let bad = write(&dir, "bad.json5", BAD);
    let db = dir.path().join("lg.db");
    let payload = json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read",
        "tool_input": {"file_path": "/x"}, "tool_use_id": "t1"});
    let out = lg(
        &["hook", "claude-code", "--db", db.to_str().unwrap()],
        &[("LOOPGUARD_CONFIG", bad.to_str().unwrap())],
        payload.to_string().as_bytes(),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.lines()
            .all(|l| l.starts_with("loopguard hook claude-code: ")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
}

#[test]
fn mcp_proxy_says_what_it_runs_with() {
    let dir = temp();
    let config = write(&dir, "openclaw.json", OPENCLAW);
    let out = lg(&["mcp-proxy", "--session", "m1", "--", "true"], &[], b"");
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.starts_with("loopguard mcp-proxy: no config file (live defaults); detection on (warn at 10, block at 20"),
        "{err}"
    );
    assert!(
        err.lines()
            .next()
            .unwrap()
            .ends_with("store memory (session m1)"),
        "{err}"
    );
    let out = lg(
        &[
            "mcp-proxy",
            "--config",
            config.to_str().unwrap(),
            "--",
            "true",
        ],
        &[],
        b"",
    );
    let err = stderr(&out);
    assert!(
        err.contains("detection off")
            && err.contains("tools: { loopDetection: { enabled: true } }"),
        "{err}"
    );
}

#[test]
fn every_subcommand_answers_version() {
    let want = format!(" {}\n", env!("CARGO_PKG_VERSION"));
    for args in [
        &["--version"][..],
        &["replay", "--version"],
        &["scan", "--version"],
        &["serve", "--version"],
        &["hook", "--version"],
        &["hook", "install", "--version"],
        &["mcp-proxy", "--version"],
        &["config", "check", "--version"],
        &["sessions", "show", "--version"],
        &["completions", "--version"],
    ] {
        let out = lg(args, &[], b"");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.starts_with("loopguard") && text.ends_with(&want),
            "{args:?}: {text:?}"
        );
    }
}

#[test]
fn the_help_states_the_defaults_rule_and_the_readme_repeats_it() {
    let out = lg(&["--help"], &[], b"");
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains(
            "serve, hook, mcp-proxy, scan: detection on at OpenClaw's documented thresholds"
        ),
        "{help}"
    );
    assert!(
        help.contains("replay: SPEC §7 defaults (rolling detectors off, post-compaction guard on)"),
        "{help}"
    );
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    for row in [
        "| `serve`, `hook`, `mcp-proxy`, `scan` | **on**: warn at 10 identical calls, block at 20, stop the run at 30 |",
        "| `replay` | SPEC §7: rolling detectors off, post-compaction guard on |",
    ] {
        assert!(readme.contains(row), "README lacks the row {row}");
    }
}

/// Runs `loopguard ARGS` on a pseudo-terminal (`script`, util-linux), typing `input` then
/// Ctrl-D; what the terminal showed.
fn on_a_terminal(args: &str, input: &str) -> String {
    let command = format!("{} {args}", env!("CARGO_BIN_EXE_loopguard"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("LOOPGUARD_CONFIG")
        .env_remove("LOOPGUARD_DB")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs commands on a pseudo-terminal; scripts/setup/tty.sh installs it");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        stdin.write_all(b"\x04").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

#[test]
fn replay_and_hook_say_what_they_wait_for_on_a_terminal() {
    let screen = on_a_terminal(
        "replay -",
        "{\"type\":\"call\",\"session\":\"s\",\"tool\":\"read\"}\n",
    );
    assert!(
        screen.contains("loopguard replay: no config file (SPEC §7 defaults); detection off"),
        "{screen}"
    );
    assert!(
        screen.contains("reading events from the terminal, one JSON object per line (Ctrl-D ends)"),
        "{screen}"
    );
    assert!(
        screen.contains(
            "give --config FILE holding: { tools: { loopDetection: { enabled: true } } }"
        ),
        "{screen}"
    );
    assert!(
        screen.contains(
            "{\"seq\":1,\"type\":\"call\",\"session\":\"s\",\"run\":null,\"verdict\":\"allow\"}"
        ),
        "{screen}"
    );

    let dir = temp();
    let db = dir.path().join("lg.db");
    let screen = on_a_terminal(&format!("hook claude-code --db {}", db.display()), "");
    assert!(
        screen.contains("waiting for one hook payload (JSON) on stdin"),
        "{screen}"
    );
    assert!(screen.contains("loopguard hook install --help"), "{screen}");
    assert!(screen.contains("detection on (warn at 10"), "{screen}");
}

//! `loopguard scan` driven as a user would: the real binary on the synthetic fixtures in
//! `tests/fixtures/scan/`, on generated bad input, and on the shared corpus (read in
//! place; the corpus tests print SKIPPED when it is absent).

mod common;

use std::path::{Path, PathBuf};

use common::{bin, run, shared_dir};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scan")
}

/// Runs `loopguard scan ARGS --json` and parses its document.
fn scan(args: &[&str]) -> (Value, i32, String) {
    let mut all = vec!["scan", "--json"];
    all.extend_from_slice(args);
    let out = run(&all, b"");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}); stderr: {stderr}"));
    (doc, out.status.code().unwrap_or(-1), stderr)
}

/// The session of `doc` whose file ends with `file` (and whose id is `session`, if given).
fn session<'a>(doc: &'a Value, file: &str, session: Option<&str>) -> &'a Value {
    doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["file"].as_str().unwrap().ends_with(file)
                && session.is_none_or(|id| s["session"] == id)
        })
        .unwrap_or_else(|| panic!("no session for {file} {session:?}"))
}

fn file<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"].as_str().unwrap().ends_with(name))
        .unwrap_or_else(|| panic!("no file {name}"))
}

/// (detector, level, tool, count, call_index, line) of each finding.
fn findings(session: &Value) -> Vec<(String, String, String, u64, u64, u64)> {
    session["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["detector"].as_str().unwrap().to_owned(),
                f["level"].as_str().unwrap().to_owned(),
                f["tool"].as_str().unwrap().to_owned(),
                f["count"].as_u64().unwrap(),
                f["call_index"].as_u64().unwrap(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn f(
    detector: &str,
    level: &str,
    tool: &str,
    count: u64,
    call: u64,
    line: u64,
) -> (String, String, String, u64, u64, u64) {
    (
        detector.into(),
        level.into(),
        tool.into(),
        count,
        call,
        line,
    )
}

#[test]
fn fixtures_every_format_and_the_documented_schema() {
    let (doc, code, _) = scan(&[fixtures().to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(doc["schema"], "loopguard-scan/1");
    assert_eq!(doc["config"]["source"], "defaults");
    assert!(doc["config"]["note"]
        .as_str()
        .unwrap()
        .contains("default thresholds"));

    let loop_session = session(&doc, "openclaw-loop.jsonl", Some("demo-loop"));
    assert_eq!(loop_session["format"], "openclaw");
    assert_eq!(
        loop_session["calls"], 24,
        "the abandoned branch's call is not counted"
    );
    assert_eq!(
        findings(loop_session),
        [
            f("generic_repeat", "warning", "read", 10, 11, 24),
            f("generic_repeat", "critical", "read", 20, 21, 44)
        ]
    );
    let l = &loop_session["loops"][0];
    assert_eq!(l["repeats_after_block"], 2);
    assert_eq!(l["saved"]["calls"], 3);
    assert_eq!(
        l["saved"]["tokens"],
        3 * 2050,
        "the three responses to blocked calls"
    );
    assert_eq!(
        file(&doc, "openclaw-loop.jsonl")["read"]["skipped"][0]["reason"],
        "off_branch"
    );

    let compaction = session(&doc, "openclaw-compaction.jsonl", None);
    assert_eq!(
        findings(compaction),
        [f("compaction_loop_persisted", "critical", "exec", 3, 6, 15)]
    );
    assert_eq!(compaction["loops"][0]["stopped_run"], true);
    assert_eq!(compaction["blocked_calls"], 1, "the call after the abort");

    let codex = session(&doc, "codex-rollout.jsonl", None);
    assert_eq!(codex["session"], "demo-codex");
    assert_eq!(
        findings(codex),
        [f("generic_repeat", "warning", "shell", 10, 11, 34)]
    );
    assert_eq!(codex["usage"]["tokens"], 12 * 3020);

    let claude = session(&doc, "claude-code.jsonl", Some("demo-claude"));
    assert_eq!(
        (claude["calls"].as_u64(), claude["runs"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(claude["compactions"], 1);
    assert!(findings(claude).is_empty());
    // The subagent's sidechain is a session of its own.
    let subagent = session(&doc, "claude-code.jsonl", Some("demo-claude/agent-1"));
    assert_eq!(subagent["calls"], 1);

    let alpha = session(&doc, "events.jsonl", Some("alpha"));
    assert_eq!(
        findings(alpha),
        [f(
            "known_poll_no_progress",
            "warning",
            "process",
            10,
            11,
            41
        )]
    );
    assert!(
        findings(session(&doc, "events.jsonl", Some("beta"))).is_empty(),
        "changing results are progress"
    );
    assert_eq!(session(&doc, "anthropic-messages.json", None)["calls"], 1);

    assert_eq!(
        doc["summary"]["sessions"], 8,
        "the Claude Code subagent is a session"
    );
    assert_eq!(doc["summary"]["compaction_aborts"], 1);
    assert_eq!(doc["summary"]["files"], 6);
}

#[test]
fn fail_on_and_exit_statuses() {
    let loop_file = fixtures().join("openclaw-loop.jsonl");
    let healthy = fixtures().join("claude-code.jsonl");
    let (_, code, _) = scan(&[loop_file.to_str().unwrap(), "--fail-on", "critical"]);
    assert_eq!(code, 3);
    let (_, code, _) = scan(&[healthy.to_str().unwrap(), "--fail-on", "warning"]);
    assert_eq!(code, 0);
    let out = run(
        &[
            "scan",
            "--config",
            "/nonexistent/openclaw.json5",
            healthy.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("loopguard: error: cannot read"));
    let out = run(
        &["scan", "--format", "nonsense", healthy.to_str().unwrap()],
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "clap rejects the value");
    assert!(String::from_utf8_lossy(&out.stderr).contains("openclaw"));
}

#[test]
fn a_config_changes_the_thresholds_and_says_so() {
    let dir = tempdir();
    let config = dir.join("openclaw.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 5, criticalThreshold: 8 } } }",
    )
    .unwrap();
    let loop_file = fixtures().join("openclaw-loop.jsonl");
    let (doc, _, _) = scan(&[
        "--config",
        config.to_str().unwrap(),
        loop_file.to_str().unwrap(),
    ]);
    assert_eq!(doc["config"]["source"], "file");
    assert_eq!(doc["config"]["effective"]["warning_threshold"], 5);
    let s = session(&doc, "openclaw-loop.jsonl", None);
    assert_eq!(findings(s)[0].4, 6);
    assert_eq!(findings(s)[1].4, 9);
    // A config that leaves detection off: only the post-compaction guard runs.
    std::fs::write(&config, "{ tools: {} }").unwrap();
    let (doc, _, _) = scan(&[
        "--config",
        config.to_str().unwrap(),
        fixtures().to_str().unwrap(),
    ]);
    assert_eq!(doc["summary"]["warned_calls"], 0);
    assert_eq!(doc["summary"]["compaction_aborts"], 1);
}

#[test]
fn standard_input_and_format_override() {
    let events = std::fs::read(fixtures().join("events.jsonl")).unwrap();
    let out = run(&["scan", "-"], &events);
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["files"][0]["file"], "-");
    assert_eq!(doc["summary"]["sessions"], 2);
    // Detection would say "loopguard" too; --format makes it explicit, and wins.
    let out = run(&["scan", "--format", "openai-chat", "-"], &events);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["files"][0]["format"], "openai-chat");
    assert_eq!(doc["summary"]["calls"], 0);
    // Read as the wrong format, its entries give no call: unread, with the reason.
    assert_eq!(doc["files"][0]["status"], "unread");
    assert_eq!(out.status.code(), Some(2));
    // Nothing on standard input: an empty file, reported as of no known format.
    let out = run(&["scan", "-"], b"");
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["files"][0]["status"], "unknown_format");
    let reason = doc["files"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("empty file; tried every reader"),
        "{reason}"
    );
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "loopguard-scan-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every kind of bad input is counted and reported, never a crash, never a dropped file.
#[test]
fn bad_input_is_counted_per_file() {
    let dir = tempdir();
    let openclaw = std::fs::read(fixtures().join("openclaw-loop.jsonl")).unwrap();
    let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    // A transcript cut off mid-line (still being written).
    write("cut.jsonl", &openclaw[..openclaw.len() - 40]);
    // Corrupt lines, bytes that are not UTF-8, unknown entry types, a result without its
    // call, a call without its result.
    let mut corrupt = openclaw.clone();
    corrupt.extend_from_slice(b"{{{ not json\n");
    corrupt.extend_from_slice(b"{\"type\":\"message\",\"message\":{\"role\":\"toolResult\",\"toolCallId\":\"call_01\",\"content\":[{\"type\":\"text\",\"text\":\"bad \xff\xfe bytes\"}]}}\n");
    corrupt.extend_from_slice(b"{\"type\":\"teleport\"}\n");
    corrupt.extend_from_slice(b"{\"type\":\"message\",\"message\":{\"role\":\"toolResult\",\"toolCallId\":\"ghost\",\"content\":[]}}\n");
    corrupt.extend_from_slice(b"{\"type\":\"message\",\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"toolCall\",\"id\":\"lonely\",\"name\":\"read\",\"arguments\":{}}]}}\n");
    write("corrupt.jsonl", &corrupt);
    write("notes.json", b"{\"title\": \"not a transcript\"}");
    write("binary.jsonl", &[0x89, b'P', b'N', b'G', 0, 0, 0, 13]);
    write("empty.jsonl", b"");
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    std::fs::write(
        dir.join("nested/deeper/events.jsonl"),
        std::fs::read(fixtures().join("events.jsonl")).unwrap(),
    )
    .unwrap();
    write("README.md", b"# not considered");

    let (doc, code, _) = scan(&[dir.to_str().unwrap()]);
    assert_eq!(code, 2, "files of no known format");
    assert_eq!(doc["summary"]["files"], 6);
    assert_eq!(doc["summary"]["ignored_files"], 1);
    let cut = file(&doc, "cut.jsonl");
    assert_eq!(cut["status"], "scanned");
    assert_eq!(cut["read"]["skipped"][1]["reason"], "truncated_last_line");
    let corrupt_file = file(&doc, "corrupt.jsonl");
    let reasons: Vec<&str> = corrupt_file["read"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        ["off_branch", "invalid_json", "unknown_entry_type"]
    );
    assert_eq!(corrupt_file["read"]["repaired"], 1);
    let s = session(&doc, "corrupt.jsonl", None);
    assert_eq!(
        s["orphan_results"], 2,
        "a second result for call_01, and the result for `ghost`"
    );
    assert_eq!(s["unpaired_calls"], 1, "the `lonely` call");
    for (name, reason) in [
        ("notes.json", "no known transcript shape"),
        ("binary.jsonl", "binary"),
        ("empty.jsonl", "empty"),
    ] {
        let f = file(&doc, name);
        assert_eq!(f["status"], "unknown_format", "{name}");
        assert!(
            f["reason"].as_str().unwrap().contains(reason),
            "{name}: {}",
            f["reason"]
        );
    }
    assert_eq!(
        file(&doc, "nested/deeper/events.jsonl")["status"],
        "scanned"
    );
    // A missing file beside a readable one is listed; alone, there is nothing to scan.
    let missing = dir.join("missing.jsonl");
    let events = fixtures().join("events.jsonl");
    let (doc, code, _) = scan(&[missing.to_str().unwrap(), events.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(doc["files"][0]["status"], "unreadable");
    let out = run(&["scan", "--json", missing.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to scan"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A 100 MB file with a 100 MB line: skipped unbuffered, and the transcript around it read.
#[test]
fn a_hundred_megabyte_line_is_skipped_not_buffered() {
    let dir = tempdir();
    let path = dir.join("huge.jsonl");
    {
        use std::io::Write;
        let openclaw = std::fs::read(fixtures().join("openclaw-loop.jsonl")).unwrap();
        let text = String::from_utf8(openclaw).unwrap();
        let mut lines = text.lines();
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        writeln!(out, "{}", lines.next().unwrap()).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        out.write_all(b"{\"type\":\"custom\",\"data\":\"").unwrap();
        for _ in 0..100 {
            out.write_all(&chunk).unwrap();
        }
        out.write_all(b"\"}\n").unwrap();
        for line in lines {
            writeln!(out, "{line}").unwrap();
        }
    }
    let (doc, code, _) = scan(&["--max-line-bytes", "1048576", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    let f = file(&doc, "huge.jsonl");
    assert!(f["size"].as_u64().unwrap() > 100 << 20);
    assert_eq!(f["read"]["skipped"][0]["reason"], "line_too_long");
    assert_eq!(f["read"]["skipped"][0]["first_line"], 2);
    let s = session(&doc, "huge.jsonl", None);
    assert_eq!(
        findings(s).len(),
        2,
        "the loop after the long line is found"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn overlapping_openclaw_copies_are_scanned_once() {
    let dir = tempdir();
    let openclaw = std::fs::read(fixtures().join("openclaw-loop.jsonl")).unwrap();
    std::fs::write(dir.join("demo-loop.jsonl"), &openclaw).unwrap();
    std::fs::write(
        dir.join("demo-loop.jsonl.reset.2026-01-05T10-00-00.000Z"),
        &openclaw,
    )
    .unwrap();
    std::fs::write(
        dir.join("demo-loop.jsonl.bak-1-2"),
        &openclaw[..openclaw.len() / 2],
    )
    .unwrap();
    let (doc, code, _) = scan(&[dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(doc["summary"]["sessions"], 1);
    assert_eq!(doc["summary"]["skipped_files"], 2);
    let skipped = file(&doc, ".reset.2026-01-05T10-00-00.000Z");
    assert_eq!(skipped["status"], "skipped");
    assert!(skipped["reason"]
        .as_str()
        .unwrap()
        .contains("demo-loop.jsonl"));
    let (doc, _, _) = scan(&["--all-copies", dir.to_str().unwrap()]);
    assert_eq!(doc["summary"]["sessions"], 3, "one report per file");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_teaches_with_examples() {
    let out = bin().args(["scan", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Examples:",
        "--html",
        "--fail-on",
        "Exit status",
        "loopguard scan ~/.openclaw/agents/main/sessions",
        "--budget run.cost=2",
    ] {
        assert!(help.contains(needle), "missing {needle:?} in:\n{help}");
    }
}

/// The whole shared corpus: the loops SOURCES.md lists are found where it says, and the
/// healthy sessions get no block.
#[test]
fn corpus_loops_are_found_where_sources_md_says() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let corpus = shared.join("corpus");
    let (doc, code, _) = scan(&[corpus.to_str().unwrap()]);
    assert_eq!(code, 2, "replay-results.json is not a transcript");
    assert_eq!(
        file(&doc, "openclaw-derived/replay-results.json")["status"],
        "unknown_format"
    );
    for companion in [".trajectory.jsonl", ".trajectory-path.json"] {
        assert_eq!(file(&doc, companion)["status"], "companion");
    }

    // 08237d46: 22 identical failing edits on lines 63..105 (a call every other line):
    // warning at the 11th (line 83), block at the 21st (line 103); the 22nd repeats it.
    let s = session(&doc, "08237d46-d6c7-42a2-ab47-87ff3939da71.jsonl", None);
    assert_eq!(
        findings(s),
        [
            f("generic_repeat", "warning", "edit", 10, 34, 83),
            f("generic_repeat", "critical", "edit", 20, 44, 103)
        ]
    );
    assert_eq!(s["loops"][0]["repeats_after_block"], 1);
    assert!(
        s["saved"]["tokens"].as_u64().unwrap() > 0,
        "the transcript carries usage"
    );

    // 44de2062: 15 identical failing edits from line 31: warnings from the 11th (line 51), no block.
    let s = session(&doc, "44de2062-6cdd-4d8c-917e-41a2bb188a7a.jsonl", None);
    assert_eq!(
        findings(s),
        [f("generic_repeat", "warning", "edit", 10, 26, 51)]
    );

    // 634fd029: session_status {} repeated with changing results: warnings, never a block.
    let s = session(
        &doc,
        "634fd029-a15c-4d93-80f7-33e1758c26eb.jsonl.reset.2026-04-09T22-52-03.638Z",
        None,
    );
    let found = findings(s);
    assert!(!found.is_empty());
    assert!(found
        .iter()
        .all(|f| f.0 == "generic_repeat" && f.1 == "warning" && f.2 == "session_status"));
    assert_eq!(found[0].5, 27, "inside the 38-call turn (lines 8..80)");
    assert_eq!(s["blocked_calls"], 0);

    // 21596f48: process poll without progress in turn 41 (lines 614..656), and in turn 40.
    let s = session(&doc, "21596f48-a8a0-43df-8e8d-387a0f1709a8.jsonl", None);
    let found = findings(s);
    assert!(found
        .iter()
        .all(|f| f.0 == "known_poll_no_progress" && f.1 == "warning" && f.2 == "process"));
    assert!(
        found.iter().any(|f| (614..=656).contains(&f.5)),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| (558..=603).contains(&f.5)),
        "{found:?}"
    );
    assert_eq!(
        file(&doc, "21596f48-a8a0-43df-8e8d-387a0f1709a8.jsonl")["read"]["skipped"][0]
            ["first_line"],
        955
    );

    // SWE-agent seaborn: the same grep 64 times from step 12 (SOURCES counts steps from 0).
    let s = session(&doc, "mwaskom__seaborn-3187.traj", None);
    let found = findings(s);
    assert_eq!(
        (
            found[0].0.as_str(),
            found[0].1.as_str(),
            found[0].2.as_str(),
            found[0].4
        ),
        ("generic_repeat", "warning", "grep", 22)
    );
    assert_eq!(
        (found[1].1.as_str(), found[1].3, found[1].4),
        ("critical", 20, 32)
    );
    assert_eq!(s["loops"][0]["stopped_run"], true);

    // P1-r5 (derived stream): OpenClaw's first warning and first block.
    let s = session(
        &doc,
        "anchor-call-streams.json",
        Some("dd7d0e87-5311-475d-af2c-386d309920a3"),
    );
    let found = findings(s);
    assert_eq!((found[0].4, found[0].3), (13, 10));
    assert_eq!(
        (found[1].0.as_str(), found[1].4, found[1].3),
        ("generic_repeat", 24, 20)
    );

    // Healthy sessions: no block anywhere, and no finding at all.
    let healthy = [
        "0ff7b343-fcdb-4bc2-8504-ccc296c7e85b.checkpoint.016e7403-3ec8-4366-a5f3-f7fed9fa357c.jsonl",
        "f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1.jsonl",
        "de164575-fc39-43d3-b0f9-7781fe07e46d.jsonl",
        "5e9096eb-a13b-48ae-990d-ca9d6f231b05.jsonl",
        "marshmallow-code__marshmallow-1867.function_calling_replace.traj",
        "basic_gui_mode.json",
        "eval-13_without_skill_run-2_codex_stdout.jsonl",
        "gpt-4o-airline.json",
    ];
    for (name, s) in doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["file"].as_str().unwrap(), s))
    {
        if healthy.iter().any(|h| name.ends_with(h)) {
            assert!(
                findings(s).is_empty(),
                "{name} {}: {:?}",
                s["session"],
                findings(s)
            );
        }
    }
    assert!(findings(session(
        &doc,
        "anchor-call-streams.json",
        Some("083ea86c-9602-4aff-a9c3-e84d8225f0e0")
    ))
    .is_empty());

    // The heartbeat trap: 573 identical reads across heartbeat runs, each run on its own.
    let heartbeat = session(&doc, "0ff7b343-fcdb-4bc2-8504-ccc296c7e85b.checkpoint.016e7403-3ec8-4366-a5f3-f7fed9fa357c.jsonl", None);
    assert!(heartbeat["runs"].as_u64().unwrap() > 200);
    assert_eq!(heartbeat["blocked_calls"], 0);
    let sidecar = file(
        &doc,
        "openclaw-trajectory/5e9096eb-a13b-48ae-990d-ca9d6f231b05.jsonl",
    );
    assert_eq!(sidecar["sidecar_runs"], 4);
    assert_eq!(
        session(&doc, "de164575-fc39-43d3-b0f9-7781fe07e46d.jsonl", None)["unpaired_calls"],
        1
    );
    assert_eq!(
        session(&doc, "f8c3e7a8-7dc1-43cc-8ce0-a9d268c29be1.jsonl", None)["compactions"],
        2
    );
    assert_eq!(doc["summary"]["sessions_with_blocks"], 3);
}

/// A loop without tool calls in replay events: the model answering in text and the
/// harness answering "no tool call" each time. With the preset, the scan reports one text
/// loop (no_tool_turns, the run stopped at the 8th feedback in a row) with the messages it
/// spans and the text repeated, and the HTML page shows that text.
#[test]
fn a_loop_without_tool_calls_is_reported_with_its_text() {
    let dir = tempdir();
    let config = dir.join("preset.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
    )
    .unwrap();
    let mut events = String::new();
    let line = |v: Value| format!("{v}\n");
    events.push_str(&line(serde_json::json!({"type": "call", "session": "s", "run": "r", "call_id": "c1", "tool": "bash", "args": {"command": "make"}})));
    events.push_str(&line(serde_json::json!({"type": "result", "session": "s", "run": "r", "call_id": "c1", "tool": "bash", "args": {"command": "make"}, "result": "ok"})));
    let feedback = "No tool calls found in the response. Every response MUST include a tool call.";
    for i in 1..=10 {
        events.push_str(&line(serde_json::json!({"type": "message", "session": "s", "run": "r", "role": "assistant", "text": format!("Done, I think ({i})."), "has_tool_calls": false})));
        events.push_str(&line(serde_json::json!({"type": "message", "session": "s", "run": "r", "role": "tool_feedback", "text": feedback})));
    }
    let path = dir.join("events.jsonl");
    std::fs::write(&path, events).unwrap();
    let page = dir.join("page.html");
    let (doc, code, stderr) = scan(&[
        "--config",
        config.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let s = session(&doc, "events.jsonl", Some("s"));
    assert_eq!(
        (s["calls"].as_u64(), s["messages"].as_u64()),
        (Some(1), Some(20))
    );
    assert_eq!(s["blocked_messages"], 1);
    let loops = s["loops"].as_array().unwrap();
    assert_eq!(loops.len(), 1);
    let l = &loops[0];
    assert_eq!(l["detectors"], serde_json::json!(["no_tool_turns"]));
    assert_eq!(l["text"], feedback);
    assert_eq!(l["messages"], serde_json::json!([6, 20]));
    assert_eq!(l["first_block"]["message_index"], 16);
    assert_eq!(l["first_block"]["call_index"], 1);
    assert_eq!(l["stopped_run"], true);
    assert_eq!(doc["summary"]["blocked_messages"], 1);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("repeated in messages 6–20: <q>No tool calls found in the response."),
        "the page shows the repeated text"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--budget KEY=VALUE` on the real binary: a run cost budget stops the fixture's loop where
/// its spend ($0.0025 a response) reaches it, laid over a config file's budgets block (whose
/// other keys stay); a bad flag is refused with exit status 2 and says what is wrong.
#[test]
fn budget_flags_set_budgets_over_the_config() {
    let loop_file = fixtures().join("openclaw-loop.jsonl");
    let loop_file = loop_file.to_str().unwrap();
    let stop_of = |doc: &Value| {
        let s = session(doc, "openclaw-loop.jsonl", None);
        s["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["detector"] == "run_budget" && f["level"] == "critical")
            .map(|f| f["call_index"].as_u64().unwrap())
    };
    let dir = tempdir();
    let page = dir.join("page.html");
    let (doc, code, stderr) = scan(&[
        "--budget",
        "run.cost=0.01",
        "--html",
        page.to_str().unwrap(),
        loop_file,
    ]);
    assert_eq!(code, 0, "{stderr}");
    let html = std::fs::read_to_string(&page).unwrap();
    for needle in [
        "spent 53.3k tokens, $0.07 · inside loops 0 tokens, $0.00 · <b>budget stop: run_budget at message 5 after call 3</b>, saving 20 calls, 41.0k tokens, $0.05",
        "stopped by budgets",
    ] {
        assert!(html.contains(needle), "the page shows {needle:?}");
    }
    // Four responses of $0.0025 use $0.01 up: the fourth response, after three calls, is
    // blocked, and the run stops.
    assert_eq!(stop_of(&doc), Some(3), "{}", doc["sessions"][0]["findings"]);
    assert_eq!(doc["config"]["effective"]["budgets"]["run"]["cost"], 0.01);
    // The stop, and what it saves: the 20 later responses of the run ($0.0025 each) and
    // its 20 later calls.
    let s = session(&doc, "openclaw-loop.jsonl", None);
    assert_eq!(
        s["budget_stop"],
        serde_json::json!({"detector": "run_budget", "call_index": 3, "message_index": 5,
            "line": 10, "stops": 1, "saved": {"calls": 20, "tokens": 41000, "cost": 0.05}})
    );
    assert_eq!(doc["summary"]["sessions_stopped_by_budgets"], 1);
    assert_eq!(doc["summary"]["saved_by_budgets"]["cost"], 0.05);
    // At its default, withoutProgress is on with any budgets block.
    assert_eq!(
        doc["config"]["effective"]["budgets"]["withoutProgress"]["calls"],
        20
    );

    let config = dir.join("budgets.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 100, calls: 1000 }, withoutProgress: { enabled: false } } } }",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let (doc, code, stderr) = scan(&["--config", config, loop_file]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stop_of(&doc), None, "a budget of $100 stops nothing");
    let (doc, code, stderr) = scan(&[
        "--config",
        config,
        "--budget",
        "run.cost=1",
        "--budget",
        "run.cost=0.01",
        loop_file,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stop_of(&doc), Some(3), "the last flag wins over the file");
    let budgets = &doc["config"]["effective"]["budgets"];
    assert_eq!(budgets["run"]["calls"], 1000, "the file's other keys stay");
    assert_eq!(budgets["withoutProgress"], serde_json::json!({}));

    for (flag, says) in [
        ("run.cst=2", "did you mean `run.cost`?"),
        ("runn.cost=2", "did you mean `run.cost`?"),
        (
            "run.cost=-1",
            "run.cost: expected a finite number, not negative",
        ),
        ("run.cost=NaN", "expected a finite number, found `NaN`"),
        ("run.cost=inf", "expected a finite number, found `inf`"),
        ("withoutProgress.calls=0", "withoutProgress.calls"),
        ("cost=2", "unknown budget key `cost`"),
    ] {
        let out = run(&["scan", "--json", "--budget", flag, loop_file], b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(says), "{flag}: {stderr}");
        assert!(out.stdout.is_empty(), "{flag}: nothing scanned");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Spend per session: the transcript's tokens and cost, and what the responses inside the
/// loop spent (calls 11 to 23, one response of 2,050 tokens and $0.0025 each); no budget,
/// no budget stop. A transcript without usage says so (null), and so does the table.
#[test]
fn sessions_report_their_spend_and_the_spend_inside_loops() {
    let (doc, code, stderr) = scan(&[fixtures().join("openclaw-loop.jsonl").to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let s = session(&doc, "openclaw-loop.jsonl", None);
    assert_eq!(s["loops"][0]["calls"], serde_json::json!([11, 23]));
    assert_eq!(
        s["usage"],
        serde_json::json!({"tokens": 53300, "cost": 0.065})
    );
    assert_eq!(
        s["loop_spend"],
        serde_json::json!({"tokens": 13 * 2050, "cost": 0.0325})
    );
    assert_eq!(s["budget_stop"], Value::Null);
    assert_eq!(doc["summary"]["loop_tokens"], 13 * 2050);
    assert_eq!(doc["config"]["effective"]["budgets"], Value::Null);

    let dir = tempdir();
    let events = dir.join("events.jsonl");
    let mut text = String::new();
    for i in 0..12 {
        text.push_str(&format!(
            "{{\"type\":\"call\",\"session\":\"s\",\"call_id\":\"c{i}\",\"tool\":\"read\",\"args\":{{}}}}\n"
        ));
    }
    std::fs::write(&events, text).unwrap();
    let (doc, _, _) = scan(&[events.to_str().unwrap()]);
    let s = session(&doc, "events.jsonl", None);
    assert_eq!(
        (&s["usage"], &s["loop_spend"]),
        (&Value::Null, &Value::Null)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

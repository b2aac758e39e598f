//! What `loopguard scan` reads: the usual folders when no path is given (tested with a
//! fake HOME holding copies made here), `--since`, empty and wrong directories, and
//! symbolic links inside a scanned folder.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use common::{bin, run_command};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scan")
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lg-scan-inputs-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `loopguard scan --json ARGS` with HOME set to `home`, from `cwd`.
fn scan_in(home: &Path, cwd: &Path, args: &[&str]) -> (Output, Value) {
    let mut cmd = bin();
    cmd.arg("scan").arg("--json").args(args);
    cmd.env("HOME", home).current_dir(cwd);
    let out = run_command(cmd, b"");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, doc)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn copy(from: &Path, to: &Path) {
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::copy(from, to).unwrap();
}

/// Writes `transcript` (a transcript file's lines) as the session `session` of an OpenClaw
/// 2026.9 agent database at `path` (the tables and columns its reader uses).
fn openclaw_database(path: &Path, session: &str, transcript: &str) {
    use loopguard_transcripts::readers::openclaw::database::fixture;
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let db = rusqlite::Connection::open(path).unwrap();
    fixture::create(&db).unwrap();
    fixture::add_window(&db, session, "agent:ops:main", now_ms(), None).unwrap();
    fixture::add_events(&db, session, transcript.lines()).unwrap();
}

fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    since_epoch.as_millis() as i64
}

/// A Gemini CLI chat session with one tool call.
const GEMINI: &str = r#"{"sessionId": "gemini-demo", "projectHash": "h", "startTime": "2026-01-01T00:00:00Z", "messages": [
  {"id": "1", "type": "user", "content": "read it"},
  {"id": "2", "type": "gemini", "content": "", "toolCalls": [{"id": "read_file-1-a", "name": "read_file", "args": {"file_path": "a"}, "status": "success",
   "result": [{"functionResponse": {"id": "read_file-1-a", "name": "read_file", "response": {"output": "A"}}}]}]}
]}"#;

#[test]
fn no_path_scans_the_usual_folders_under_home() {
    let root = tempdir("home");
    let home = root.join("home");
    // One transcript per agent, where each agent keeps them.
    copy(
        &fixtures().join("openclaw-loop.jsonl"),
        &home.join(".openclaw/agents/main/sessions/demo-loop.jsonl"),
    );
    fs::create_dir_all(home.join(".openclaw/agents/main/agent")).unwrap();
    fs::write(home.join(".openclaw/agents/main/agent/models.json"), "{}").unwrap();
    // An agent of OpenClaw 2026.9, whose transcripts are in its database.
    openclaw_database(
        &home.join(".openclaw/agents/ops/agent/openclaw-agent.sqlite"),
        "demo-db",
        &fs::read_to_string(fixtures().join("openclaw-loop.jsonl"))
            .unwrap()
            .replace("demo-loop", "demo-db"),
    );
    copy(
        &fixtures().join("claude-code.jsonl"),
        &home.join(".claude/projects/-home-demo/demo-claude.jsonl"),
    );
    copy(
        &fixtures().join("codex-rollout.jsonl"),
        &home.join(".codex/sessions/2026/01/07/rollout-2026-01-07T10-00-00-demo.jsonl"),
    );
    let chats = home.join(".gemini/tmp/demo/chats");
    fs::create_dir_all(&chats).unwrap();
    fs::write(chats.join("session-2026-01-01T00-00-demo.json"), GEMINI).unwrap();
    fs::write(
        home.join(".gemini/tmp/demo/logs.json"),
        r#"[{"sessionId": "gemini-demo", "messageId": 0, "type": "user", "message": "read it", "timestamp": "t"}]"#,
    )
    .unwrap();
    let (out, doc) = scan_in(&home, &root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    for folder in [
        ".openclaw/agents/main/sessions (OpenClaw)",
        ".openclaw/agents/ops/agent/openclaw-agent.sqlite (OpenClaw)",
        ".claude/projects (Claude Code)",
        ".codex/sessions (Codex)",
        ".gemini/tmp (Gemini CLI)",
    ] {
        assert!(err.contains(folder), "stderr names {folder}: {err}");
    }
    let searched = doc["searched"].as_array().unwrap();
    assert_eq!(searched.len(), 5);
    assert!(searched.iter().all(|s| s["found"] == true));
    let sessions: Vec<&str> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    for id in [
        "demo-loop",
        "demo-db",
        "demo-claude",
        "demo-codex",
        "gemini-demo",
    ] {
        assert!(sessions.contains(&id), "{id} in {sessions:?}");
    }
    // The agent's own config files are not transcripts; the prompt log is a companion.
    assert!(!doc.to_string().contains("models.json"));
    let logs = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["file"].as_str().unwrap().ends_with("logs.json"))
        .unwrap();
    assert_eq!(logs["status"], "companion");
    assert_eq!(logs["kind"], "gemini-cli-logs");

    // --since leaves out what did not change since then, and says so.
    let old = SystemTime::now() - Duration::from_secs(10 * 86_400);
    let rollout = home.join(".codex/sessions/2026/01/07/rollout-2026-01-07T10-00-00-demo.jsonl");
    fs::File::options()
        .append(true)
        .open(&rollout)
        .unwrap()
        .set_modified(old)
        .unwrap();
    // A transcript of the database that last changed a month ago is left out too.
    let db =
        rusqlite::Connection::open(home.join(".openclaw/agents/ops/agent/openclaw-agent.sqlite"))
            .unwrap();
    loopguard_transcripts::readers::openclaw::database::fixture::add_window(
        &db,
        "demo-old",
        "agent:ops:old",
        now_ms() - 30 * 86_400_000,
        None,
    )
    .unwrap();
    db.execute(
        "INSERT INTO transcript_events SELECT 'demo-old', seq, replace(event_json, 'demo-db', 'demo-old'), created_at, NULL, NULL FROM transcript_events WHERE session_id = 'demo-db'",
        [],
    )
    .unwrap();
    drop(db);
    let (out, doc) = scan_in(&home, &root, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(doc.to_string().contains("demo-old"));
    let (out, doc) = scan_in(&home, &root, &["--since", "7d"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(doc["summary"]["older_files"], 2);
    assert!(!doc.to_string().contains("demo-codex"));
    assert!(!doc.to_string().contains("demo-old"));
    assert!(doc.to_string().contains("demo-db"));
    let database = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            f["file"]
                .as_str()
                .unwrap()
                .ends_with("openclaw-agent.sqlite")
        })
        .unwrap();
    assert_eq!(database["older_sessions"], 1);
    let (out, _) = scan_in(&home, &root, &["--since", "last tuesday"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));

    // A HOME without any of the folders: nothing to scan, and where it looked.
    let empty = root.join("empty-home");
    fs::create_dir_all(&empty).unwrap();
    let (out, _) = scan_in(&empty, &root, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("none of the usual transcript folders exists")
            && err.contains(".claude/projects (Claude Code)"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn empty_and_wrong_directories_are_not_a_clean_scan() {
    let root = tempdir("empty");
    let empty = root.join("empty");
    fs::create_dir_all(&empty).unwrap();
    let notes = root.join("notes");
    fs::create_dir_all(&notes).unwrap();
    fs::write(notes.join("README.md"), "# notes").unwrap();
    for (path, needle) in [
        (empty.clone(), "no transcript found in"),
        (notes.clone(), "1 file ignored"),
        (root.join("missing"), "cannot read"),
    ] {
        let (out, _) = scan_in(&root, &root, &[path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{}", path.display());
        let err = stderr(&out);
        assert!(
            err.contains("nothing to scan") && err.contains(needle),
            "{err}"
        );
    }
    let _ = fs::remove_dir_all(&root);
}

#[cfg(unix)]
#[test]
fn symbolic_links_are_followed_once_and_loops_are_listed() {
    use std::os::unix::fs::symlink;
    let root = tempdir("links");
    let tree = root.join("tree");
    let outside = root.join("outside");
    fs::create_dir_all(&tree).unwrap();
    fs::create_dir_all(&outside).unwrap();
    copy(&fixtures().join("events.jsonl"), &tree.join("a.jsonl"));
    copy(
        &fixtures().join("codex-rollout.jsonl"),
        &outside.join("c.jsonl"),
    );
    symlink(tree.join("a.jsonl"), tree.join("b.jsonl")).unwrap();
    symlink(&outside, tree.join("linked")).unwrap();
    symlink(&tree, tree.join("loop")).unwrap();
    symlink(root.join("nowhere.jsonl"), tree.join("dangling.jsonl")).unwrap();
    let (out, doc) = scan_in(&root, &root, &[tree.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "the dangling link is unreadable"
    );
    let status = |name: &str| -> (String, String) {
        let f = doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["file"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("{name} is listed: {doc}"));
        let why = f["reason"].as_str().or(f["error"].as_str()).unwrap_or("");
        (f["status"].as_str().unwrap().to_owned(), why.to_owned())
    };
    assert_eq!(status("tree/a.jsonl").0, "scanned");
    let (b, why) = status("tree/b.jsonl");
    assert_eq!(b, "skipped");
    assert!(
        why.contains("the same file as") && why.ends_with("symbolic link)"),
        "{why}"
    );
    assert_eq!(
        status("linked/c.jsonl").0,
        "scanned",
        "a linked directory is read"
    );
    let (l, why) = status("tree/loop");
    assert_eq!(l, "skipped");
    assert!(why.contains("a symbolic link back to"), "{why}");
    assert_eq!(status("dangling.jsonl").0, "unreadable");
    assert_eq!(doc["summary"]["scanned_files"], 2);
    let _ = fs::remove_dir_all(&root);
}

/// Agents' files under names that are not transcript names are never passed over: aider's
/// history is read (by its name, or by its first line under another name), goose's and
/// OpenCode's databases are listed as unread with the reason (exit 2, `unread_files`),
/// aider's prompt history is a companion; only files that are no transcript by name or
/// content are ignored.
#[test]
fn agent_files_under_other_names_are_read_or_listed_unread() {
    let root = tempdir("agents");
    let tree = root.join("tree");
    let aider = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../loopguard-transcripts/tests/fixtures/aider/2024-08-07.aider.chat.history.md");
    copy(&aider, &tree.join("project/.aider.chat.history.md"));
    copy(&aider, &tree.join("notes/chat-log.txt"));
    fs::write(
        tree.join("project/.aider.input.history"),
        "\n# 2024-08-07\n+/add a.py\n",
    )
    .unwrap();
    fs::write(tree.join("project/README.md"), "# project\n").unwrap();
    let sqlite = b"SQLite format 3\0\x10\0\x01\x01\0\x40\x20\x20";
    fs::create_dir_all(tree.join("goose/sessions")).unwrap();
    fs::write(tree.join("goose/sessions/sessions.db"), sqlite).unwrap();
    fs::create_dir_all(tree.join("opencode")).unwrap();
    fs::write(tree.join("opencode/opencode.db"), sqlite).unwrap();
    let (out, doc) = scan_in(&root, &root, &[tree.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let file = |name: &str| -> Value {
        doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["file"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("{name} is listed: {doc}"))
            .clone()
    };
    for name in [".aider.chat.history.md", "chat-log.txt"] {
        let f = file(name);
        assert_eq!(
            (f["status"].as_str(), f["format"].as_str()),
            (Some("scanned"), Some("aider")),
            "{f}"
        );
    }
    assert_eq!(file(".aider.input.history")["status"], "companion");
    for (name, says) in [("sessions.db", "goose"), ("opencode.db", "opencode export")] {
        let f = file(name);
        assert_eq!(f["status"], "unread", "{f}");
        assert!(f["reason"].as_str().unwrap().contains(says), "{f}");
    }
    assert_eq!(doc["summary"]["unread_files"], 2);
    assert_eq!(doc["summary"]["ignored_files"], 1, "README.md only");

    // Named alone, the database gets the same reason on the terminal's report.
    let db = tree.join("goose/sessions/sessions.db");
    let mut cmd = bin();
    cmd.arg("scan")
        .arg(&db)
        .current_dir(&root)
        .env("HOME", &root);
    let out = run_command(cmd, b"");
    assert_eq!(out.status.code(), Some(2));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert!(text.contains("goose's session database"), "{text}");
    let _ = fs::remove_dir_all(&root);
}

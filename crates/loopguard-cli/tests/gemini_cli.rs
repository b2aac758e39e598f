//! The Gemini CLI hook inside a real Gemini CLI (0.61.0, installed by
//! scripts/setup/gemini-cli.sh; `LOOPGUARD_GEMINI_CLI` names its `gemini`): the hooks are
//! installed by `loopguard hook install gemini` into a fresh home, and `gemini` runs one
//! prompt against a scripted model (`--fake-responses`: the streamed chunks a Gemini API
//! would send). What is checked is what Gemini CLI did: what it printed of the answer,
//! and why it stopped.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// The installed Gemini CLI, or `None` (outside CI) when it is not there.
fn gemini() -> Option<PathBuf> {
    match std::env::var_os("LOOPGUARD_GEMINI_CLI") {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var_os("CI").is_some() => {
            panic!("LOOPGUARD_GEMINI_CLI is not set: scripts/setup/gemini-cli.sh did not install Gemini CLI")
        }
        None => {
            eprintln!("skipped: no Gemini CLI (run scripts/setup/gemini-cli.sh, or scripts/test)");
            None
        }
    }
}

/// A home with Gemini CLI's settings (an API key login, no folder trust prompt, no update
/// check) and loopguard's hooks installed into them, a project folder, and loopguard's
/// config.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("home/.gemini")).unwrap();
        std::fs::create_dir_all(root.join("project")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        // `hook install` refuses a binary inside a Cargo build directory: installed copies.
        for name in ["loopguard", "loopguard-hook"] {
            let from = match name {
                "loopguard" => env!("CARGO_BIN_EXE_loopguard"),
                _ => env!("CARGO_BIN_EXE_loopguard-hook"),
            };
            std::fs::copy(from, root.join("bin").join(name)).unwrap();
        }
        let settings = json!({
            "general": {"enableAutoUpdate": false},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
            "ide": {"enabled": false, "hasSeenNudge": true},
        });
        std::fs::write(
            root.join("home/.gemini/settings.json"),
            serde_json::to_string_pretty(&settings).unwrap(),
        )
        .unwrap();
        std::fs::write(root.join("config.json5"), config).unwrap();
        let home = Self { dir };
        let install = home
            .command(&home.path("bin/loopguard"))
            .args(["hook", "install", "gemini"])
            .output()
            .unwrap();
        assert!(install.status.success(), "{install:?}");
        home
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `program` in this home, with loopguard's config and database named by the
    /// environment, as a user who exported them (Gemini CLI passes its environment on).
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.path("project"))
            .env("HOME", self.path("home"))
            .env("GEMINI_CLI_HOME", self.path("home"))
            .env("GEMINI_API_KEY", "not-used-with-fake-responses")
            .env("LOOPGUARD_CONFIG", self.path("config.json5"))
            .env("LOOPGUARD_DB", self.path("loopguard.db"))
            .env_remove("LOOPGUARD_LOG");
        cmd
    }

    /// Runs `gemini` on `prompt` with the scripted model's `responses` (each a streamed
    /// response: its chunks); returns (exit status, stdout, stderr).
    fn run(&self, gemini: &Path, responses: &[Vec<Value>], prompt: &str) -> (i32, String, String) {
        let script: String = responses
            .iter()
            .map(|chunks| {
                json!({"method": "generateContentStream", "response": chunks}).to_string() + "\n"
            })
            .collect();
        let file = self.path("responses.jsonl");
        std::fs::write(&file, script).unwrap();
        let out = self
            .command(gemini)
            .args([
                "-m",
                "gemini-2.5-flash",
                "--approval-mode=yolo",
                "--fake-responses",
            ])
            .arg(&file)
            .arg(prompt)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn text(t: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "index": 0}]})
}

/// The last chunk of a response: its finish reason and its usage.
fn last(mut chunk: Value, prompt_tokens: u64, output_tokens: u64) -> Value {
    chunk["candidates"][0]["finishReason"] = json!("STOP");
    chunk["usageMetadata"] = json!({
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": prompt_tokens + output_tokens,
    });
    chunk
}

fn read_call(path: &str) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "read_file", "args": {"file_path": path}}}
    ]}, "index": 0}]})
}

/// A model that reads `build.log` (9,040 tokens), then answers (9,120 tokens); the log is
/// written into the project.
fn reads_the_log_then_answers(home: &Home) -> Vec<Vec<Value>> {
    std::fs::write(
        home.path("project/build.log"),
        "error: undefined symbol foo_init\n",
    )
    .unwrap();
    vec![
        vec![
            text("Let me read the build log.\n"),
            last(read_call("build.log"), 9000, 40),
        ],
        vec![
            text("The linker cannot find "),
            last(text("foo_init: add libfoo to the link line.\n"), 9100, 20),
        ],
    ]
}

const PRESET: &str =
    r#"{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: "recommended" } }"#;
const CHANT: &str = "I will run the build again to see the error.\n";

#[test]
fn a_chanting_answer_is_stopped_mid_stream() {
    let Some(gemini) = gemini() else { return };
    let home = Home::new(PRESET);
    let mut chunks = vec![text("The build fails in the linker step.\n")];
    chunks.extend((0..29).map(|_| text(CHANT)));
    chunks.push(last(text(CHANT), 1200, 400));
    let (_, stdout, stderr) = home.run(&gemini, &[chunks], "Why does the build fail?");
    let shown = stdout.matches(CHANT).count();
    assert_eq!(
        shown, 9,
        "the 10th copy stops the stream (of 30):\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(
            "Agent execution stopped: CRITICAL: the assistant repeated the same text 10 times"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("content_chanting"), "{stderr}");
}

#[test]
fn a_healthy_answer_with_a_tool_call_goes_through() {
    let Some(gemini) = gemini() else { return };
    let home = Home::new(PRESET);
    let script = reads_the_log_then_answers(&home);
    let (code, stdout, stderr) = home.run(&gemini, &script, "Why does the build fail?");
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("The linker cannot find foo_init: add libfoo to the link line."),
        "{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("loopguard"), "{stderr}");
    // `loopguard scan` reads the chat file this Gemini CLI wrote (JSON Lines).
    let chats: Vec<PathBuf> = std::fs::read_dir(home.path("home/.gemini/tmp"))
        .unwrap()
        .flat_map(|project| std::fs::read_dir(project.unwrap().path().join("chats")).unwrap())
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(chats.len(), 1, "{chats:?}");
    let scan = home
        .command(&home.path("bin/loopguard"))
        .arg("scan")
        .arg(&chats[0])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&scan.stdout).unwrap();
    let session = &report["sessions"][0];
    assert_eq!(session["format"], "gemini-cli", "{report}");
    assert_eq!(
        (
            &session["calls"],
            &session["usage"]["tokens"],
            &session["findings"]
        ),
        (&json!(1), &json!(18_160), &json!([])),
        "{report}"
    );
}

#[test]
fn what_gemini_spends_stops_a_run_at_its_budget() {
    let Some(gemini) = gemini() else { return };
    let home = Home::new(
        r#"{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 15000 } } } }"#,
    );
    // 9,040 + 9,120 tokens: the second response's last chunk passes the run's 15,000.
    let script = reads_the_log_then_answers(&home);
    let (_, stdout, stderr) = home.run(&gemini, &script, "Why does the build fail?");
    assert!(
        stderr.contains("Agent execution stopped:") && stderr.contains("budget"),
        "{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("add libfoo"),
        "the chunk that passed the budget is not shown:\n{stdout}"
    );
}

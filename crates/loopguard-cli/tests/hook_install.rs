//! `loopguard hook install|uninstall`: the real binary, copied out of the build directory
//! (as an installed one would be), edits real settings files of Claude Code, Codex and
//! Gemini CLI that already hold other hooks, permissions and comments.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::RwLock;

use serde_json::Value;

/// A home directory, a project, and loopguard "installed" in a bin directory of its own.
/// Copies and spawns exclude each other: a child forked while another test thread still
/// holds a fresh copy open for writing keeps that descriptor until it execs, and running
/// the copy then fails with "Text file busy".
static COPY_OR_SPAWN: RwLock<()> = RwLock::new(());

/// Copies a built binary into a test's directory, as an install would.
fn install_copy(from: &str, to: &Path) {
    let _alone = COPY_OR_SPAWN.write().unwrap_or_else(|e| e.into_inner());
    std::fs::copy(from, to).unwrap();
}

fn spawn(cmd: &mut Command) -> Child {
    let _shared = COPY_OR_SPAWN.read().unwrap_or_else(|e| e.into_inner());
    cmd.spawn().unwrap()
}

struct Home {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin/loopguard");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        install_copy(env!("CARGO_BIN_EXE_loopguard"), &bin);
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        Self { dir, bin }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `loopguard ARGS` run from the "installed" copy, in the project directory.
    fn run(&self, args: &[&str]) -> Output {
        self.run_binary(&self.bin, args)
    }

    fn run_binary(&self, binary: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .current_dir(self.project())
            .env("HOME", self.home())
            .env_remove("LOOPGUARD_CONFIG")
            .env_remove("LOOPGUARD_DB")
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("CODEX_HOME")
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        spawn(&mut cmd).wait_with_output().unwrap()
    }
}

fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

fn failed(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    stderr
}

/// A Claude Code user settings file with permissions, an environment, a status line, and
/// hooks of the user's own on two of loopguard's events and on one other.
const CLAUDE_SETTINGS: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": [
      "Bash(npm run lint)",
      "Bash(npm run test:*)",
      "Read(~/.zshrc)"
    ],
    "deny": [
      "Bash(curl:*)",
      "Read(./.env)",
      "Read(./secrets/**)"
    ],
    "defaultMode": "acceptEdits"
  },
  "env": {
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
    "BASH_DEFAULT_TIMEOUT_MS": "120000"
  },
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check-bash.sh",
            "timeout": 30
          }
        ]
      }
    ],
    "PostToolUse": [
      {
        "matcher": "Write|Edit|MultiEdit",
        "hooks": [
          {
            "type": "command",
            "command": "npx prettier --write \"$(jq -r '.tool_input.file_path')\""
          }
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "afplay /System/Library/Sounds/Glass.aiff"
          }
        ]
      }
    ]
  },
  "statusLine": {
    "type": "command",
    "command": "~/.claude/statusline.sh",
    "padding": 0
  },
  "includeCoAuthoredBy": false
}
"#;

fn commands(doc: &Value, event: &str) -> Vec<String> {
    doc["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h["command"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn claude_code_user_settings_round_trip_byte_for_byte() {
    let h = Home::new();
    let settings = h.write("home/.claude/settings.json", CLAUDE_SETTINGS);
    let config = h.write(
        "loopguard.json5",
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
    );
    let stderr = ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        config.to_str().unwrap(),
    ]));
    assert!(
        stderr.contains("added: SessionStart, UserPromptSubmit, PreToolUse"),
        "{stderr}"
    );
    assert!(
        stderr.contains("detection on (warn at 2, block at 3"),
        "{stderr}"
    );
    let installed = std::fs::read_to_string(&settings).unwrap();
    let backup =
        std::fs::read_to_string(settings.with_file_name("settings.json.loopguard-backup")).unwrap();
    assert_eq!(backup, CLAUDE_SETTINGS);

    let doc: Value = serde_json::from_str(&installed).unwrap();
    let want = format!(
        "{} hook claude-code --config {}",
        h.bin.canonicalize().unwrap().display(),
        config.display()
    );
    for event in [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PreCompact",
        "Stop",
        "SessionEnd",
    ] {
        assert!(
            commands(&doc, event).contains(&want),
            "{event}: {:?}",
            commands(&doc, event)
        );
    }
    // The user's own hooks and settings are untouched and still first.
    assert_eq!(
        commands(&doc, "PreToolUse")[0],
        "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check-bash.sh"
    );
    // The user's own Stop hook stays first; loopguard's reads the transcript after it.
    assert_eq!(
        commands(&doc, "Stop"),
        ["afplay /System/Library/Sounds/Glass.aiff", want.as_str()]
    );
    assert_eq!(doc["permissions"]["deny"][2], "Read(./secrets/**)");
    assert_eq!(doc["includeCoAuthoredBy"], false);

    // The installed command works as Claude Code would run it: four identical reads, the
    // fourth denied (warn at 2, block at 3).
    assert_fourth_read_denied(&want, &h);

    let backup = settings.with_file_name("settings.json.loopguard-backup");
    assert!(
        stderr.contains(&format!("(previous file kept as {})", backup.display())),
        "{stderr}"
    );

    // Idempotent: the same install again changes nothing, not even the backup.
    let stderr = ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        config.to_str().unwrap(),
    ]));
    assert!(stderr.contains("already there"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), installed);
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), CLAUDE_SETTINGS);
    // Another config updates the entries; the backup stays the file from before them.
    let other = h.write(
        "other.json5",
        "{ tools: { loopDetection: { enabled: true } } }",
    );
    let stderr = ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        other.to_str().unwrap(),
    ]));
    assert!(stderr.contains("updated: "), "{stderr}");
    assert!(stderr.contains("is still kept as"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), CLAUDE_SETTINGS);

    // Uninstall gives the original back, byte for byte, and removes the backup.
    let stderr = ok(&h.run(&["hook", "uninstall", "claude-code"]));
    assert!(stderr.contains("removed: "), "{stderr}");
    assert!(
        stderr.contains(&format!("(removed the backup {})", backup.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), CLAUDE_SETTINGS);
    assert!(!backup.exists());
    let stderr = ok(&h.run(&["hook", "uninstall", "claude-code"]));
    assert!(stderr.contains("no loopguard entries"), "{stderr}");
    assert!(!stderr.contains("backup"), "{stderr}");
}

/// Runs a hook command line through the shell, as the agents do.
/// Runs four identical reads (call and result) through `command` as Claude Code would and
/// checks that the fourth call is denied (the tests' config warns at 2 and blocks at 3).
fn assert_fourth_read_denied(command: &str, h: &Home) {
    let mut last = String::new();
    for i in 1..=4 {
        let pre = serde_json::json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "/etc/hosts"}, "tool_use_id": format!("t{i}")});
        last = sh(command, &pre.to_string(), h);
        let post = serde_json::json!({"session_id": "s", "hook_event_name": "PostToolUse", "tool_name": "Read",
            "tool_input": {"file_path": "/etc/hosts"}, "tool_response": {"type": "text", "file": {"content": "x"}},
            "tool_use_id": format!("t{i}")});
        sh(command, &post.to_string(), h);
    }
    assert!(last.contains("\"permissionDecision\":\"deny\""), "{last}");
}

fn sh(command: &str, stdin: &str, h: &Home) -> String {
    use std::io::Write;
    let mut cmd = Command::new("sh");
    cmd.args(["-c", command])
        .env("HOME", h.home())
        .env("XDG_DATA_HOME", h.dir.path().join("data"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = spawn(&mut cmd);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_new_config_updates_the_entries_in_place() {
    let h = Home::new();
    let settings = h.write("project/.claude/settings.json", CLAUDE_SETTINGS);
    ok(&h.run(&["hook", "install", "claude-code", "--project"]));
    let first: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    let bare = format!(
        "{} hook claude-code",
        h.bin.canonicalize().unwrap().display()
    );
    assert_eq!(commands(&first, "SessionEnd"), [bare]);
    let config = h.write("c.json5", "{ tools: { loopDetection: { enabled: true } } }");
    let stderr = ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--project",
        "--config",
        config.to_str().unwrap(),
        "--sync",
        "full",
    ]));
    assert!(stderr.contains("updated: "), "{stderr}");
    let second: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(
        commands(&second, "PreToolUse").len(),
        2,
        "no second loopguard entry"
    );
    assert!(commands(&second, "PreToolUse")[1]
        .ends_with(&format!("--config {} --sync full", config.display())));
    ok(&h.run(&["hook", "uninstall", "claude-code", "--project"]));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), CLAUDE_SETTINGS);
    // The user's settings were never touched.
    assert!(!h.home().join(".claude").exists());
}

#[test]
fn refuses_what_would_not_work_and_writes_nothing() {
    let h = Home::new();
    let settings = h.write("home/.claude/settings.json", CLAUDE_SETTINGS);
    // A config that does not load.
    let bad = h.write(
        "bad.json5",
        "{ tools: { loopDetection: {\n  enabled: true,\n  warningTreshold: 3 } } }",
    );
    let stderr = failed(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        bad.to_str().unwrap(),
    ]));
    assert!(
        stderr.contains(&format!(
            "{}:3:3: unknown key `warningTreshold`",
            bad.display()
        )),
        "{stderr}"
    );
    // A config that is missing.
    let stderr = failed(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        "/nonexistent/c.json5",
    ]));
    assert!(
        stderr.contains("cannot read /nonexistent/c.json5"),
        "{stderr}"
    );
    // A real OpenClaw config without tools.loopDetection: detection would be off.
    let openclaw = h.write("openclaw.json", r#"{ "gateway": { "port": 18789, "bind": "loopback" }, "agents": { "defaults": { "workspace": "~/clawd" } } }"#);
    let stderr = failed(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        openclaw.to_str().unwrap(),
    ]));
    assert!(
        stderr.contains("tools: { loopDetection: { enabled: true } }"),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-detection-off"), "{stderr}");
    // The binary inside a Cargo build directory (the test binary's own place).
    let stderr = failed(&h.run_binary(
        Path::new(env!("CARGO_BIN_EXE_loopguard")),
        &["hook", "install", "claude-code"],
    ));
    assert!(
        stderr.contains("inside a Cargo build directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo install --locked --profile dist --path crates/loopguard-cli"),
        "{stderr}"
    );
    // A settings file Claude Code could not read.
    let broken = h.write(
        "project/.claude/settings.json",
        "{ \"permissions\": { }, }\n",
    );
    let stderr = failed(&h.run(&["hook", "install", "claude-code", "--project"]));
    assert!(stderr.contains("not valid JSON"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap(),
        "{ \"permissions\": { }, }\n"
    );
    // Nothing was written anywhere.
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), CLAUDE_SETTINGS);
    assert!(!settings
        .with_file_name("settings.json.loopguard-backup")
        .exists());
    // Explicitly allowed, detection off installs.
    ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        openclaw.to_str().unwrap(),
        "--allow-detection-off",
    ]));
}

/// Codex's hooks.json, with a hook of the user's own.
const CODEX_HOOKS_JSON: &str = r#"{
  "hooks": {
    "SessionStart": [
      {
        "matcher": "startup|resume",
        "hooks": [
          {
            "type": "command",
            "command": "python3 ~/.codex/hooks/session_start.py",
            "statusMessage": "Loading session notes"
          }
        ]
      }
    ],
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "python3 ~/.codex/hooks/stop.py",
            "timeout": 30
          }
        ]
      }
    ]
  }
}
"#;

/// Codex's config.toml keeping its hooks inline.
const CODEX_CONFIG_TOML: &str = r#"model = "gpt-5-codex"
model_reasoning_effort = "high"
approval_policy = "on-request"
sandbox_mode = "workspace-write"

[features]
hooks = true

# Block shell commands that touch production.
[[hooks.PreToolUse]]
matcher = "^Bash$"

[[hooks.PreToolUse.hooks]]
type = "command"
command = '/usr/bin/python3 "$(git rev-parse --show-toplevel)/.codex/hooks/pre_tool_use_policy.py"'
timeout = 30
statusMessage = "Checking Bash command"

[mcp_servers.context7]
command = "npx"
args = ["-y", "@upstash/context7-mcp"]

[projects."/home/me/src/app"]
trust_level = "trusted"
"#;

#[test]
fn codex_hooks_json_and_config_toml() {
    let h = Home::new();
    let hooks = h.write("home/.codex/hooks.json", CODEX_HOOKS_JSON);
    let stderr = ok(&h.run(&["hook", "install", "codex"]));
    assert!(stderr.contains("trust"), "{stderr}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&hooks).unwrap()).unwrap();
    assert_eq!(commands(&doc, "SessionStart").len(), 2);
    assert!(commands(&doc, "PreCompact")[0].ends_with(" hook codex"));
    let stop = commands(&doc, "Stop");
    assert_eq!(stop[0], "python3 ~/.codex/hooks/stop.py");
    assert!(
        stop.len() == 2 && stop[1].ends_with(" hook codex"),
        "{stop:?}"
    );
    ok(&h.run(&["hook", "uninstall", "codex"]));
    assert_eq!(std::fs::read_to_string(&hooks).unwrap(), CODEX_HOOKS_JSON);

    // A project whose config.toml keeps its hooks inline (and no hooks.json): there.
    let toml = h.write("project/.codex/config.toml", CODEX_CONFIG_TOML);
    ok(&h.run(&["hook", "install", "codex", "--project"]));
    let text = std::fs::read_to_string(&toml).unwrap();
    assert!(!h.project().join(".codex/hooks.json").exists());
    let doc: Value = toml_edit::de::from_str(&text).unwrap();
    assert_eq!(commands(&doc, "PreToolUse").len(), 2);
    assert!(commands(&doc, "UserPromptSubmit")[0].ends_with(" hook codex"));
    assert_eq!(
        doc["projects"]["/home/me/src/app"]["trust_level"],
        "trusted"
    );
    assert!(text.contains("# Block shell commands that touch production."));
    ok(&h.run(&["hook", "uninstall", "codex", "--project"]));
    assert_eq!(std::fs::read_to_string(&toml).unwrap(), CODEX_CONFIG_TOML);

    // CODEX_HOME moves the user's directory.
    let moved = h.dir.path().join("codex-home");
    let mut cmd = Command::new(&h.bin);
    cmd.args(["hook", "install", "codex"])
        .env("HOME", h.home())
        .env("CODEX_HOME", &moved)
        .env_remove("LOOPGUARD_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = spawn(&mut cmd).wait_with_output().unwrap();
    ok(&out);
    assert!(moved.join("hooks.json").exists());
}

/// Gemini CLI's settings, with comments and trailing commas (which Gemini accepts).
const GEMINI_SETTINGS: &str = r#"{
  // Gemini CLI user settings
  "general": { "preferredEditor": "vim", "vimMode": true },
  "ui": { "theme": "GitHub" },
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "$GITHUB_TOKEN" },
    },
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "write_file|replace",
        "hooks": [
          {
            "name": "secret-scanner",
            "type": "command",
            "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/block-secrets.sh",
            "timeout": 5000, // milliseconds
          },
        ],
      },
    ],
  },
}
"#;

#[test]
fn gemini_settings_keep_comments_and_round_trip() {
    let h = Home::new();
    let settings = h.write("home/.gemini/settings.json", GEMINI_SETTINGS);
    ok(&h.run(&["hook", "install", "gemini", "--dry-run"]));
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        GEMINI_SETTINGS,
        "a dry run writes nothing"
    );
    ok(&h.run(&["hook", "install", "gemini"]));
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(
        text.contains("// Gemini CLI user settings")
            && text.contains("\"timeout\": 5000, // milliseconds")
    );
    assert!(text.contains("\"name\": \"loopguard\""));
    assert!(text.contains("\"timeout\": 10000"));
    ok(&h.run(&["hook", "uninstall", "gemini"]));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), GEMINI_SETTINGS);
}

#[test]
fn a_missing_settings_file_is_created() {
    let h = Home::new();
    let stderr = ok(&h.run(&["hook", "install", "claude-code"]));
    // Nothing was there to keep, and the message does not claim a backup.
    assert!(
        stderr.contains("(a new file: there was nothing to keep)"),
        "{stderr}"
    );
    assert!(!stderr.contains("kept as"), "{stderr}");
    let settings = h.home().join(".claude/settings.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(
        doc.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["hooks"]
    );
    assert!(!h
        .home()
        .join(".claude/settings.json.loopguard-backup")
        .exists());
    ok(&h.run(&["hook", "uninstall", "claude-code"]));
    assert_eq!(std::fs::read_to_string(&settings).unwrap().trim(), "{}");
}

/// With `loopguard-hook` installed beside `loopguard` (as `cargo install` puts them), the
/// agent is pointed at it: it starts faster, and it works the same.
#[test]
fn the_hooks_own_binary_is_used_when_installed_beside() {
    let h = Home::new();
    let hook_bin = h.bin.with_file_name("loopguard-hook");
    install_copy(env!("CARGO_BIN_EXE_loopguard-hook"), &hook_bin);
    let settings = h.write("home/.claude/settings.json", CLAUDE_SETTINGS);
    let config = h.write(
        "loopguard.json5",
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }",
    );
    ok(&h.run(&[
        "hook",
        "install",
        "claude-code",
        "--config",
        config.to_str().unwrap(),
    ]));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    let want = format!(
        "{} claude-code --config {}",
        hook_bin.canonicalize().unwrap().display(),
        config.display()
    );
    assert!(
        commands(&doc, "PreToolUse").contains(&want),
        "{:?}",
        commands(&doc, "PreToolUse")
    );
    assert_fourth_read_denied(&want, &h);
    // Uninstall recognises the entries and gives the file back, byte for byte.
    ok(&h.run(&["hook", "uninstall", "claude-code"]));
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), CLAUDE_SETTINGS);
}

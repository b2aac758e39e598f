//! Helpers for the hook tests: run `loopguard hook AGENT` with a payload, and read the
//! state it left in the database through the store `loopguard serve` uses.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use loopguard::{RunState, SystemClock};
use loopguard_store::{Limits, SqliteOptions, SqliteStore, Store};
use serde_json::{json, Value};

/// What one hook invocation printed and how it exited.
#[derive(Debug)]
pub struct Hook {
    pub stdout: String,
    pub stderr: String,
    pub code: i32,
}

impl Hook {
    /// stdout as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }
}

/// A database in a fresh directory, and the environment the hooks run in.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub config: Option<PathBuf>,
}

impl Env {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state/loopguard.db");
        Self {
            dir,
            db,
            config: None,
        }
    }

    /// With a config document.
    pub fn with_config(text: &str) -> Self {
        let mut env = Self::new();
        let path = env.dir.path().join("config.json5");
        std::fs::write(&path, text).unwrap();
        env.config = Some(path);
        env
    }

    /// The command `loopguard hook AGENT --db DB [--config FILE]`, with no ambient
    /// LOOPGUARD_* variables.
    pub fn command(&self, agent: &str) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_loopguard"));
        cmd.arg("hook");
        self.hook_args(cmd, agent)
    }

    /// The command `loopguard-hook AGENT --db DB [--config FILE]` (the hook's own binary),
    /// with no ambient LOOPGUARD_* variables.
    pub fn hook_only_command(&self, agent: &str) -> Command {
        self.hook_args(Command::new(env!("CARGO_BIN_EXE_loopguard-hook")), agent)
    }

    fn hook_args(&self, mut cmd: Command, agent: &str) -> Command {
        cmd.args([agent, "--db"]).arg(&self.db);
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd.env_remove("LOOPGUARD_DB")
            .env_remove("LOOPGUARD_CONFIG")
            .env_remove("LOOPGUARD_LOG");
        cmd
    }

    /// Runs one hook invocation with `payload` on stdin.
    pub fn hook(&self, agent: &str, payload: &Value) -> Hook {
        run(self.command(agent), payload.to_string().as_bytes())
    }

    /// [`Env::hook`] through `loopguard-hook`.
    pub fn hook_only(&self, agent: &str, payload: &Value) -> Hook {
        run(
            self.hook_only_command(agent),
            payload.to_string().as_bytes(),
        )
    }

    /// The live runs of `session`, read by `loopguard_store::SqliteStore` (the store of
    /// `loopguard serve`), most recently active first.
    pub fn runs(&self, session: &str) -> Vec<(Option<String>, RunState)> {
        runs(&self.db, session)
    }

    /// The state of one run.
    pub fn run(&self, session: &str, run: &str) -> Option<RunState> {
        self.runs(session)
            .into_iter()
            .find(|(r, _)| r.as_deref() == Some(run))
            .map(|(_, s)| s)
    }
}

/// Runs `cmd` with `stdin`.
pub fn run(cmd: Command, stdin: &[u8]) -> Hook {
    let out = crate::common::run_command(cmd, stdin);
    Hook {
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code().unwrap_or(-1),
    }
}

/// The live runs of `session` in the database at `db`, through `SqliteStore`.
pub fn runs(db: &Path, session: &str) -> Vec<(Option<String>, RunState)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open(
            db,
            Limits::default(),
            Arc::new(SystemClock),
            SqliteOptions::default(),
        )
        .expect("open the store");
        let runs = store.session(session).await.expect("read the session");
        store.close().await.unwrap();
        runs.into_iter().map(|r| (r.run, r.state)).collect()
    })
}

/// Records (calls) in a run, and how many are vetoes.
pub fn counts(state: &RunState) -> (usize, usize) {
    let records = state.history().records();
    (
        records.len(),
        records.iter().filter(|r| r.is_veto()).count(),
    )
}

/// A Claude Code hook payload: `event` of `session`, whose transcript is `transcript`, with
/// `fields` (the event's own members) added.
pub fn claude_code_payload(session: &str, transcript: &str, event: &str, fields: Value) -> Value {
    let mut v = json!({
        "session_id": session,
        "transcript_path": transcript,
        "cwd": "/home/user/app",
        "permission_mode": "default",
        "hook_event_name": event,
    });
    for (k, x) in fields.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The environment of a vector: with its config, when it has one.
pub fn env_of_case(config: Option<PathBuf>) -> Env {
    match config {
        Some(path) => Env::with_config(&std::fs::read_to_string(path).unwrap()),
        None => Env::new(),
    }
}

/// Checks the hook's answer to a `PreToolUse` against `replay`'s answer `want` to the same
/// call: denied exactly when replay blocks it, warned exactly when replay surfaces a
/// warning. Returns whether it was denied.
pub fn check_call_answer(h: &Hook, want: &Value) -> Result<bool, String> {
    let seq = &want["seq"];
    let denied =
        !h.stdout.is_empty() && h.json()["hookSpecificOutput"]["permissionDecision"] == "deny";
    if denied != (want["verdict"] == "block") {
        return Err(format!("seq {seq}: denied {denied}, replay says {want}"));
    }
    let warned = !denied
        && !h.stdout.is_empty()
        && h.json()["hookSpecificOutput"]["additionalContext"].is_string();
    if warned != (want["verdict"] == "warn" && want["notify"] == true) {
        return Err(format!("seq {seq}: warned {warned}, replay says {want}"));
    }
    Ok(denied)
}

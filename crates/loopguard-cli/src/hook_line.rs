//! The `loopguard hook` command line, shared by running the hook (`hook_cmd`) and writing
//! it into an agent's settings (`hook_install`): its flags, the agents it names, the config
//! check, and the command an agent runs.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use loopguard_hooks::Agent;

use crate::startup::{self, Loaded};
use crate::EXIT_FATAL;

/// What the hook command line carries: the same flags for running, printing and
/// installing it.
#[derive(Args, Debug, Clone)]
pub(crate) struct HookSettings {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it, the
    /// file LOOPGUARD_CONFIG names; without either, detection on at the default thresholds.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// SQLite database file (created if missing; default: the one `loopguard serve` uses).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_DB")]
    pub db: Option<PathBuf>,
    /// Agent id whose config applies to events that name none.
    #[arg(long = "agent", value_name = "ID")]
    pub config_agent: Option<String>,
    /// SQLite durability: normal survives the crash of any process (an OS crash or power
    /// loss may lose the last updates); full waits for the disk at every commit.
    #[arg(long, value_enum, default_value_t = SyncMode::Normal)]
    pub sync: SyncMode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SyncMode {
    Normal,
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum AgentName {
    ClaudeCode,
    Codex,
    Gemini,
}

impl AgentName {
    pub(crate) fn agent(self) -> Agent {
        match self {
            Self::ClaudeCode => Agent::ClaudeCode,
            Self::Codex => Agent::Codex,
            Self::Gemini => Agent::Gemini,
        }
    }
}

/// The config a hook command line will run with, checked: an unusable one is refused (a
/// hook that fails at every event guards nothing), and so is one that leaves the rolling
/// detectors off, unless that is asked for.
pub(crate) fn checked_config(
    command: &str,
    config: Option<PathBuf>,
    allow_detection_off: bool,
) -> Result<Loaded, u8> {
    let loaded = startup::load("hook", config).map_err(|e| startup::config_error(&e))?;
    for warning in startup::config_warnings(&loaded) {
        eprintln!("loopguard {command}: {warning}");
    }
    if let Some(notice) = startup::detection_off_notice(&loaded) {
        eprintln!("loopguard {command}: {notice}");
        if !allow_detection_off {
            eprintln!(
                "loopguard {command}: error: the hook would deny nothing but compaction loops; \
turn detection on, or give --allow-detection-off to go ahead"
            );
            return Err(EXIT_FATAL);
        }
    }
    Ok(loaded)
}

/// The shell command line the agent runs: the binary, `hook AGENT`, and the settings as
/// absolute paths (the agent starts hooks in its own working directory, without this
/// shell's LOOPGUARD_* variables).
pub(crate) fn hook_command(
    exe: &Path,
    agent: Agent,
    loaded: &Loaded,
    settings: &HookSettingsView<'_>,
) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let mut words: Vec<String> = match hook_binary(exe) {
        Some(hook) => vec![hook.to_string_lossy().into_owned(), agent.name().into()],
        None => vec![
            exe.to_string_lossy().into_owned(),
            "hook".into(),
            agent.name().into(),
        ],
    };
    if let Some(config) = loaded.source.path() {
        words.push("--config".into());
        words.push(absolute(config).to_string_lossy().into_owned());
    }
    if let Some(db) = settings.db {
        words.push("--db".into());
        words.push(absolute(db).to_string_lossy().into_owned());
    }
    if let Some(id) = settings.config_agent {
        words.push("--agent".into());
        words.push(id.to_owned());
    }
    if settings.sync == SyncMode::Full {
        words.push("--sync".into());
        words.push("full".into());
    }
    shell_words::join(words)
}

/// `loopguard-hook` installed next to the `loopguard` binary `exe` (as `cargo install`
/// does), when it is there: the command agents should run, since it starts faster.
pub(crate) fn hook_binary(exe: &Path) -> Option<PathBuf> {
    let name = format!("loopguard-hook{}", std::env::consts::EXE_SUFFIX);
    let hook = exe.parent()?.join(name);
    hook.is_file().then_some(hook)
}

/// The parts of [`HookSettings`] a command line carries.
pub(crate) struct HookSettingsView<'a> {
    pub db: Option<&'a Path>,
    pub config_agent: Option<&'a str>,
    pub sync: SyncMode,
}

impl HookSettings {
    pub(crate) fn view(&self) -> HookSettingsView<'_> {
        HookSettingsView {
            db: self.db.as_deref(),
            config_agent: self.config_agent.as_deref(),
            sync: self.sync,
        }
    }
}

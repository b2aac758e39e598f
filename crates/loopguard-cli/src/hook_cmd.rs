//! `loopguard hook AGENT`: the agent's hook protocol on stdin and stdout.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use loopguard::{Clock, SystemClock};
use loopguard_hooks::store::{DbOptions, Synchronous};
use loopguard_hooks::{handle, Agent, Options, EXIT_FAILED, MAX_INPUT_BYTES};
use loopguard_store::default_db_path;

use crate::EXIT_OK;

/// Speak a coding agent's hook protocol: stop its tool-call loops.
///
/// The agent runs this command at each hook event with the event as JSON on stdin; the
/// decision goes to stdout (and the exit status), as that agent documents it. Tool calls
/// are checked before they run (a loop is warned about, then blocked: the model reads
/// why), outcomes are recorded after, a user prompt starts a new run and a compaction
/// arms the post-compaction guard. State lives in the SQLite database that `loopguard
/// serve` uses, one short transaction per invocation, safe with hooks running at once.
///
/// Without --config, detection is on with the default thresholds. Failures (unreadable
/// input, unusable config or database) exit 1 with one line on stderr, which the agents
/// treat as a non-blocking error: the call goes ahead.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard hook claude-code --print-config   # paste into ~/.claude/settings.json\n  \
loopguard hook codex --print-config         # paste into ~/.codex/hooks.json\n  \
loopguard hook gemini --print-config        # paste into ~/.gemini/settings.json\n  \
echo '{\"session_id\":\"s\",\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Read\",\"tool_input\":{}}' | loopguard hook claude-code\n\n\
The database defaults to $XDG_DATA_HOME/loopguard/loopguard.db, else \
~/.local/share/loopguard/loopguard.db.")]
pub struct HookArgs {
    /// The agent whose hook protocol to speak.
    #[arg(value_enum)]
    agent: AgentName,
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it
    /// detection is on with the default thresholds.
    #[arg(long, value_name = "FILE", env = "LOOPGUARD_CONFIG")]
    config: Option<PathBuf>,
    /// SQLite database file (created if missing).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_DB")]
    db: Option<PathBuf>,
    /// Agent id whose config applies to events that name none.
    #[arg(long = "agent", value_name = "ID")]
    config_agent: Option<String>,
    /// SQLite durability: normal survives the crash of any process (an OS crash or power
    /// loss may lose the last updates); full waits for the disk at every commit.
    #[arg(long, value_enum, default_value_t = SyncMode::Normal)]
    sync: SyncMode,
    /// Print the snippet to paste into the agent's settings file, and exit.
    #[arg(long)]
    print_config: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SyncMode {
    Normal,
    Full,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AgentName {
    ClaudeCode,
    Codex,
    Gemini,
}

impl AgentName {
    fn agent(self) -> Agent {
        match self {
            Self::ClaudeCode => Agent::ClaudeCode,
            Self::Codex => Agent::Codex,
            Self::Gemini => Agent::Gemini,
        }
    }
}

pub fn run(args: HookArgs) -> u8 {
    let agent = args.agent.agent();
    if args.print_config {
        return print_config(agent, &args);
    }
    let db = match args.db.clone().map_or_else(default_db_path, Ok) {
        Ok(db) => db,
        Err(_) => {
            return fail(
                agent,
                "no default database location: neither XDG_DATA_HOME nor HOME is an absolute path; give --db PATH (or LOOPGUARD_DB)",
            )
        }
    };
    let mut input = Vec::new();
    let read = std::io::stdin()
        .lock()
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut input);
    if let Err(e) = read {
        return fail(agent, &format!("cannot read stdin: {e}"));
    }
    if input.len() as u64 > MAX_INPUT_BYTES {
        return fail(
            agent,
            &format!("the payload on stdin is larger than {MAX_INPUT_BYTES} bytes"),
        );
    }
    let db_options = DbOptions {
        synchronous: match args.sync {
            SyncMode::Normal => Synchronous::Normal,
            SyncMode::Full => Synchronous::Full,
        },
        ..DbOptions::default()
    };
    let options = Options {
        db,
        config: args.config,
        agent: args.config_agent,
        db_options,
    };
    let response = handle(agent, &input, &options, SystemClock.now_ms());
    response.deliver(std::io::stdout().lock(), std::io::stderr().lock())
}

fn fail(agent: Agent, message: &str) -> u8 {
    eprintln!("loopguard hook {}: {message}", agent.name());
    EXIT_FAILED
}

/// Prints the settings snippet: the command is this very binary (by absolute path), with
/// the --config, --db and --agent given here.
fn print_config(agent: Agent, args: &HookArgs) -> u8 {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.canonicalize().ok())
        .unwrap_or_else(|| PathBuf::from("loopguard"));
    let mut command = vec![
        shell_quote(&exe.to_string_lossy()),
        "hook".into(),
        agent.name().into(),
    ];
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    if let Some(config) = &args.config {
        command.push("--config".into());
        command.push(shell_quote(&absolute(config).to_string_lossy()));
    }
    if let Some(db) = &args.db {
        command.push("--db".into());
        command.push(shell_quote(&absolute(db).to_string_lossy()));
    }
    if let Some(id) = &args.config_agent {
        command.push("--agent".into());
        command.push(shell_quote(id));
    }
    if args.sync == SyncMode::Full {
        command.push("--sync".into());
        command.push("full".into());
    }
    let snippet = agent.settings_snippet(&command.join(" "));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(snippet.as_bytes());
    let _ = stdout.flush();
    eprintln!(
        "loopguard: merge this into {} (its \"hooks\" object)",
        agent.settings_file()
    );
    EXIT_OK
}

/// `word` as one word of a POSIX shell command line.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=@%,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(
            shell_quote("/usr/local/bin/loopguard"),
            "/usr/local/bin/loopguard"
        );
        assert_eq!(shell_quote("/my dir/lg"), "'/my dir/lg'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}

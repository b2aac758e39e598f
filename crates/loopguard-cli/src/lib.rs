//! `loopguard`: the command-line front of the loopguard engine.
//!
//! A library only so that the two binaries share it: `loopguard` (every command) and
//! `loopguard-hook` (the hook alone, which starts faster because it links only what the
//! hook uses). It is not an API.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod config_cmd;
mod docs_cmd;
pub mod hook_cmd;
mod hook_install;
mod hook_line;
mod mcp_cmd;
mod output;
mod replay_cmd;
mod scan_budget;
mod scan_cmd;
mod scan_html;
mod scan_inputs;
mod scan_report;
mod scan_tree;
mod serve_cmd;
mod sessions_cmd;
mod startup;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: a fatal error (unreadable input, invalid config).
pub const EXIT_FATAL: u8 = 1;
/// Exit status: the command ran, but some input lines were invalid.
pub const EXIT_INVALID_LINES: u8 = 2;

pub use hook_cmd::hook_main;

#[derive(Parser, Debug)]
#[command(
    name = "loopguard",
    version,
    propagate_version = true,
    about = "Catch AI agents stuck in tool-call loops",
    long_about = "loopguard watches an agent's tool calls and stops the loops that burn tokens: \
the same call over and over, a poll that never changes, two calls ping-ponging, retries of a \
tool that does not exist, and the same loop again after a context compaction. It implements \
OpenClaw's tools.loopDetection guardrails.",
    after_help = after_help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Replay(replay_cmd::ReplayArgs),
    /// Check or explain a config document.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    Scan(scan_cmd::ScanArgs),
    Serve(Box<serve_cmd::ServeArgs>),
    Hook(hook_cmd::HookArgs),
    McpProxy(mcp_cmd::McpProxyArgs),
    #[command(subcommand)]
    Sessions(sessions_cmd::SessionsCommand),
    Completions(docs_cmd::CompletionsArgs),
    Man(docs_cmd::ManArgs),
}

/// The examples, the defaults rule and where logs go, after `loopguard --help`.
fn after_help() -> String {
    format!(
        "Examples:\n  \
loopguard serve                                   # the sidecar, on 127.0.0.1:7671\n  \
loopguard hook install claude-code                # the hook, into ~/.claude/settings.json\n  \
loopguard mcp-proxy -- npx -y @modelcontextprotocol/server-everything\n  \
loopguard replay --config openclaw.json5 events.jsonl\n  \
loopguard config check openclaw.json5\n  \
loopguard scan ~/.openclaw/agents/main/sessions --html report.html\n  \
loopguard sessions list\n\n\
{}\n\n\
Logs go to stderr; set LOOPGUARD_LOG (e.g. LOOPGUARD_LOG=info) to see them.",
        startup::defaults_help()
    )
}

/// The clap definition of the whole command line (for completions and the manual).
pub fn command() -> clap::Command {
    Cli::command()
}

/// `loopguard`'s `main`.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // `serve` sets up its own logs (on by default, text or JSON).
    if !matches!(cli.command, Command::Serve(_)) {
        init_logging();
    }
    let code = match cli.command {
        Command::Replay(args) => replay_cmd::run(args),
        Command::Config(cmd) => config_cmd::run(cmd),
        Command::Scan(args) => scan_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(*args),
        Command::Hook(args) => hook_cmd::run(args),
        Command::McpProxy(args) => mcp_cmd::run(args),
        Command::Sessions(cmd) => sessions_cmd::run(cmd),
        Command::Completions(args) => docs_cmd::completions(args),
        Command::Man(args) => docs_cmd::man(args),
    };
    ExitCode::from(code)
}

/// Logs to stderr, filtered by `LOOPGUARD_LOG`; silent when it is unset, because stdout
/// and stderr of several commands are contracts.
fn init_logging() {
    let Ok(filter) = std::env::var("LOOPGUARD_LOG") else {
        return;
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        super::command().debug_assert();
    }

    #[test]
    fn every_command_of_the_defaults_rule_exists() {
        let cmd = super::command();
        for (name, _) in crate::startup::DEFAULTS {
            assert!(cmd.find_subcommand(name).is_some(), "{name}");
        }
    }
}

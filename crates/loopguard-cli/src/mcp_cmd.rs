//! `loopguard mcp-proxy -- SERVER ARGS…`: a stdio MCP proxy with the guard in front of the
//! server's tools.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use clap::Args;
use loopguard_mcp::{run as run_proxy, ProxyOptions};

use crate::output::fatal;
use crate::startup::{self, config_error};

/// Run an MCP server behind loopguard: start the proxy where the MCP client starts the
/// server.
///
/// The proxy starts SERVER_COMMAND and passes every message through unchanged, except
/// tools/call: a call the guard blocks is answered by the proxy with a tool result
/// (isError: true) carrying the loop message and never reaches the server; a warned call
/// is forwarded and the warning is appended to its result; every result is recorded.
/// Notifications, cancellations, progress, batches and server requests pass untouched.
/// One proxy process is one session. Every request is answered: when the client's input
/// ends, held calls are still screened and forwarded, the server's stdin is closed after the
/// last one, and the proxy waits for the server's answers before stopping it (stdin closed,
/// then SIGTERM, then SIGKILL). A request the server leaves unanswered (it exits first) gets
/// a "Connection closed" error. Exit status: the server's, or 1 when it exited with 0 but
/// left requests unanswered. SIGTERM, SIGINT and SIGHUP sent to the proxy are passed on to
/// the server.
///
/// Without a config file (--config or LOOPGUARD_CONFIG), detection is on with the default
/// thresholds. At start the proxy says on stderr which config it runs with.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard mcp-proxy -- npx -y @modelcontextprotocol/server-everything\n  \
loopguard mcp-proxy --config openclaw.json5 -- python3 my_server.py\n\n\
In an MCP client's settings, replace the server's command and args:\n  \
\"command\": \"loopguard\", \"args\": [\"mcp-proxy\", \"--\", \"npx\", \"-y\", \"@modelcontextprotocol/server-everything\"]\n\n\
Diagnostics (blocked and warned calls, dropped lines) go to stderr.")]
pub struct McpProxyArgs {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it, the
    /// file LOOPGUARD_CONFIG names; without either, detection on at the default thresholds.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Agent id whose config applies.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Session id for the calls of this proxy (default: mcp-proxy-PID).
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// When the client is done (and what it asked is answered) or gone: how long the server
    /// gets to exit after its stdin is closed, and again after SIGTERM, before SIGKILL
    /// (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    shutdown_grace_ms: u64,
    /// Longest line read from either side; a longer request is answered with an error
    /// (JSON-RPC -32600) without reaching the server, a longer response is replaced by one.
    #[arg(long, value_name = "BYTES", default_value_t = loopguard_mcp::DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
    /// The MCP server to run, and its arguments (after --).
    #[arg(value_name = "SERVER_COMMAND", required = true, num_args = 1.., last = true)]
    server: Vec<OsString>,
}

pub fn run(args: McpProxyArgs) -> u8 {
    let loaded = match startup::load("mcp-proxy", args.config) {
        Ok(loaded) => loaded,
        Err(e) => return config_error(&e),
    };
    let Some((program, rest)) = args.server.split_first() else {
        return fatal("give the MCP server's command after --");
    };
    let mut server = Command::new(program);
    server.args(rest);
    let session = args
        .session
        .filter(|s| !loopguard::text::is_blank(s))
        .unwrap_or_else(|| format!("mcp-proxy-{}", std::process::id()));
    eprintln!(
        "{}",
        startup::startup_line("mcp-proxy", &loaded, &format!("memory (session {session})"))
    );
    for warning in startup::config_warnings(&loaded) {
        eprintln!("loopguard mcp-proxy: {warning}");
    }
    if let Some(notice) = startup::detection_off_notice(&loaded) {
        eprintln!("loopguard mcp-proxy: {notice}");
    }
    let mut options = ProxyOptions::new(loaded.config, session);
    options.agent = args.agent;
    options.shutdown_grace = std::time::Duration::from_millis(args.shutdown_grace_ms);
    options.max_line_bytes = args.max_line_bytes;
    options.forward_signals = true;
    match run_proxy(
        server,
        std::io::stdin(),
        std::io::stdout(),
        std::io::stderr(),
        options,
    ) {
        // Exit now: the thread reading the client may still be blocked on stdin.
        Ok(exit) => std::process::exit(exit.code),
        Err(e) => fatal(&e.to_string()),
    }
}

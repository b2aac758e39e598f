//! `loopguard serve`: the guard as a local HTTP service with durable state.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use loopguard::SystemClock;
use loopguard_server::{App, Options, RequestLimits, TokenSource};
use loopguard_store::{
    default_db_path, Limits, MemoryStore, SharedClock, SqliteOptions, SqliteStore, Store,
    Synchronous,
};

use crate::output::{fatal, load_config};
use crate::EXIT_OK;

/// Environment variable holding the bearer token itself (never shown by --help).
const TOKEN_ENV: &str = "LOOPGUARD_TOKEN";

/// Run the guard as a local HTTP service (the sidecar) with its state on disk.
///
/// Agent runtimes in any language POST each tool call before running it and each outcome
/// after, to /v1/events, in the replay event format; the answers are exactly what
/// `loopguard replay` prints for those events. State is kept per (session, run) in an
/// SQLite file and is durable before each answer is sent, so a restart in the middle of a
/// loop loses nothing. Endpoints are described at /openapi.json.
///
/// On start it prints `listening on http://ADDR` on stdout. SIGHUP (or POST
/// /v1/admin/reload) re-reads the config and token files; an invalid config is refused and
/// the old one stays in force. SIGTERM or Ctrl-C stop it gracefully.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard serve\n  \
loopguard serve --config ~/.openclaw/openclaw.json --listen 127.0.0.1:7671\n  \
loopguard serve --memory --log-format json\n  \
LOOPGUARD_TOKEN=$(cat token) loopguard serve --listen 0.0.0.0:7671\n\n\
The database defaults to $XDG_DATA_HOME/loopguard/loopguard.db, else \
~/.local/share/loopguard/loopguard.db.\n\
Logs go to stderr (level from LOOPGUARD_LOG, default info).")]
pub struct ServeArgs {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it the
    /// defaults apply (rolling detectors off, post-compaction guard on).
    #[arg(long, value_name = "FILE", env = "LOOPGUARD_CONFIG")]
    config: Option<PathBuf>,
    /// Agent whose config applies to events that name none.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:7671",
        env = "LOOPGUARD_LISTEN"
    )]
    listen: String,
    /// SQLite database file (created if missing).
    #[arg(long, value_name = "PATH", env = "LOOPGUARD_DB")]
    db: Option<PathBuf>,
    /// Keep state in memory only: nothing survives a restart (wins over --db).
    #[arg(long)]
    memory: bool,
    /// File holding the bearer token every request must carry (else the LOOPGUARD_TOKEN
    /// variable; without either, requests are not authenticated).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Runs idle this long are forgotten, in memory and on disk (units: ms, s, m, h, d).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
    idle_ttl: Duration,
    /// Live sessions; an event that would open one more is refused with 429.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    max_sessions: usize,
    /// Runs per session; beyond it the least recently active run is forgotten.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_runs_per_session: usize,
    /// Largest request body (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Longest session, run, agent, call_id and tool (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    max_id_bytes: usize,
    /// Most events in one request.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    max_events_per_request: usize,
    /// Requests handled at once; more wait their turn.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_concurrent_requests: usize,
    /// SQLite durability: full fsyncs every commit (an answer survives a power loss);
    /// normal only survives a crash of the process.
    #[arg(long, value_enum, default_value_t = SyncMode::Full)]
    sync: SyncMode,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LOOPGUARD_LOG_FORMAT")]
    log_format: LogFormat,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SyncMode {
    Full,
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

pub fn run(args: ServeArgs) -> u8 {
    init_logging(args.log_format);
    match serve(args) {
        Ok(()) => EXIT_OK,
        Err(message) => fatal(&message.replace('\n', "; ")),
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    for (name, value) in [
        ("--max-sessions", args.max_sessions),
        ("--max-runs-per-session", args.max_runs_per_session),
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-id-bytes", args.max_id_bytes),
        ("--max-events-per-request", args.max_events_per_request),
        ("--max-concurrent-requests", args.max_concurrent_requests),
        ("--threads", args.threads.unwrap_or(1)),
    ] {
        if value == 0 {
            return Err(format!("{name} must be at least 1"));
        }
    }
    if args.idle_ttl.is_zero() {
        return Err("--idle-ttl must be longer than 0".into());
    }
    // Refuse a bad config before touching the database.
    load_config(args.config.as_deref())?;
    let token = match (&args.token_file, std::env::var(TOKEN_ENV)) {
        (Some(_), Ok(_)) => {
            return Err(format!(
                "give the token either with --token-file or with {TOKEN_ENV}, not both"
            ))
        }
        (Some(file), Err(_)) => TokenSource::File(file.clone()),
        (None, Ok(value)) => TokenSource::Value(value),
        (None, Err(_)) => TokenSource::None,
    };
    let options = Options {
        config_path: args.config.clone(),
        token,
        default_agent: args.agent.clone(),
        limits: RequestLimits {
            max_body_bytes: args.max_body_bytes,
            max_id_bytes: args.max_id_bytes,
            max_events_per_request: args.max_events_per_request,
            max_concurrent_requests: args.max_concurrent_requests,
        },
    };
    let limits = Limits {
        max_sessions: args.max_sessions,
        max_runs_per_session: args.max_runs_per_session,
        idle_ttl: args.idle_ttl,
    };
    let sweep_every =
        (args.idle_ttl / 8).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("loopguard-serve");
    if let Some(n) = args.threads {
        runtime.worker_threads(n);
    }
    let runtime = runtime
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let clock: SharedClock = Arc::new(SystemClock);

    if args.memory {
        let store = MemoryStore::new(limits, clock);
        return runtime.block_on(run_with(
            store,
            options,
            &args.listen,
            sweep_every,
            "memory (nothing survives a restart)".into(),
        ));
    }
    let path = match &args.db {
        Some(path) => path.clone(),
        None => default_db_path()?,
    };
    let sqlite = SqliteOptions {
        synchronous: match args.sync {
            SyncMode::Full => Synchronous::Full,
            SyncMode::Normal => Synchronous::Normal,
        },
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open(&path, limits, clock, sqlite).map_err(|e| e.to_string())?;
    let described = format!("sqlite {}", path.display());
    runtime.block_on(run_with(
        store,
        options,
        &args.listen,
        sweep_every,
        described,
    ))
}

async fn run_with<S: Store>(
    store: S,
    options: Options,
    listen: &str,
    sweep_every: Duration,
    store_name: String,
) -> Result<(), String> {
    let app = Arc::new(App::new(store, options)?);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    if !addr.ip().is_loopback() && app.token().is_none() {
        tracing::warn!(
            target: "loopguard::server",
            %addr,
            "listening beyond loopback without a token: anyone who reaches this address can read and change guard state; give --token-file or {TOKEN_ENV}"
        );
    }
    tracing::info!(
        target: "loopguard::server",
        %addr,
        store = store_name.as_str(),
        token = app.token().is_some(),
        config = app.options().config_path.as_ref().map(|p| p.display().to_string()),
        "loopguard serve started"
    );
    // Signal handlers are in place before the server is announced.
    let served = loopguard_server::serve(
        app,
        listener,
        sweep_every,
        loopguard_server::shutdown_signal(),
    );
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening on http://{addr} (store: {store_name})");
    let _ = stdout.flush();
    drop(stdout);
    served.await.map_err(|e| format!("server failed: {e}"))
}

fn init_logging(format: LogFormat) {
    let filter = std::env::var("LOOPGUARD_LOG")
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
}

/// `500ms`, `90s`, `30m`, `24h`, `7d`; a bare number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 500ms, 90s, 30m, 24h or 7d"))?;
    let ms = match unit.trim() {
        "ms" => Some(n),
        "" | "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        other => return Err(format!("unknown unit {other:?}: use ms, s, m, h or d")),
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5 weeks").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }
}

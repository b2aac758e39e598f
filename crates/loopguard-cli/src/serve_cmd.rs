//! `loopguard serve`: the guard as a local HTTP service with durable state.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use loopguard::SystemClock;
use loopguard_server::{
    connection_cap, App, ConnectionLimits, Options, RequestLimits, StoreFailure, TokenSource,
};
use loopguard_store::{
    default_db_path, Limits, MemoryStore, SharedClock, SqliteOptions, SqliteStore, Store,
    Synchronous,
};
#[cfg(feature = "redis")]
use loopguard_store::{ClientCert, RedisOptions, RedisStore, RedisTarget};

use crate::output::fatal;
use crate::startup::{self, config_error};
use crate::EXIT_OK;

/// Environment variable holding the bearer token itself (never shown by --help).
const TOKEN_ENV: &str = "LOOPGUARD_TOKEN";

/// Environment variable holding the Redis password (instead of the URL, where process
/// listings show it).
#[cfg(feature = "redis")]
const REDIS_PASSWORD_ENV: &str = "LOOPGUARD_REDIS_PASSWORD";

/// Store deadline when the store is Redis and `--store-deadline` is not given.
#[cfg(feature = "redis")]
const REDIS_DEFAULT_DEADLINE: Duration = Duration::from_secs(1);

/// Run the guard as a local HTTP service (the sidecar) with its state on disk.
///
/// Agent runtimes in any language POST each tool call before running it and each outcome
/// after, to /v1/events, in the replay event format; the answers are exactly what
/// `loopguard replay` prints for those events. State is kept per (session, run) in an
/// SQLite file and is durable before each answer is sent, so a restart in the middle of a
/// loop loses nothing. With --store redis://… several replicas behind a load balancer share
/// their state in Redis (or a Redis Cluster), so a loop spread over replicas is caught.
/// Endpoints are described at /openapi.json.
///
/// Without a config file, detection is on at OpenClaw's documented thresholds. On start it
/// logs one line on stderr saying which config, detection settings and store are in force,
/// and prints `listening on http://ADDR` on stdout. SIGHUP (or POST
/// /v1/admin/reload) re-reads the config and token files; an invalid config is refused and
/// the old one stays in force. SIGTERM or Ctrl-C stop it gracefully.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
loopguard serve\n  \
loopguard serve --config ~/.openclaw/openclaw.json --listen 127.0.0.1:7671\n  \
loopguard serve --memory --log-format json\n  \
loopguard serve --store redis://10.0.0.5:6379 --listen 0.0.0.0:7671 --on-store-failure fail-open\n  \
loopguard serve --store redis-cluster://r1:7000,r2:7000,r3:7000 --redis-prefix prod:\n  \
LOOPGUARD_TOKEN=$(cat token) loopguard serve --listen 0.0.0.0:7671\n\n\
The database defaults to $XDG_DATA_HOME/loopguard/loopguard.db, else \
~/.local/share/loopguard/loopguard.db.\n\
Logs go to stderr (level from LOOPGUARD_LOG, default info).")]
pub struct ServeArgs {
    /// OpenClaw-style JSON5 config; its tools.loopDetection blocks apply. Without it, the
    /// file LOOPGUARD_CONFIG names; without either, detection on at the default thresholds.
    #[arg(long, value_name = "FILE")]
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
    /// Where state lives, as a URL: redis://HOST:PORT[/DB] (rediss:// with TLS) for a Redis
    /// shared by several replicas, redis-cluster://HOST:PORT,HOST:PORT,... (rediss-cluster://)
    /// for a Redis Cluster; also sqlite:PATH and memory. Instead of --db and --memory.
    /// The Redis password may be in the URL (redis://:PASSWORD@HOST) or, better, in the
    /// LOOPGUARD_REDIS_PASSWORD variable.
    #[arg(
        long,
        value_name = "URL",
        env = "LOOPGUARD_STORE",
        hide_env_values = true
    )]
    store: Option<String>,
    /// Prefix of every Redis key (several deployments can share one Redis).
    #[arg(
        long,
        value_name = "PREFIX",
        default_value = "loopguard:",
        env = "LOOPGUARD_REDIS_PREFIX"
    )]
    #[cfg(feature = "redis")]
    redis_prefix: String,
    /// PEM file of the certificate authority to trust for rediss:// (default: the
    /// system's roots).
    #[arg(long, value_name = "FILE")]
    #[cfg(feature = "redis")]
    redis_ca_file: Option<PathBuf>,
    /// PEM client certificate to present over rediss://, for a Redis that checks client
    /// certificates (tls-auth-clients yes); needs --redis-key-file.
    #[arg(long, value_name = "FILE", requires = "redis_key_file")]
    #[cfg(feature = "redis")]
    redis_cert_file: Option<PathBuf>,
    /// PEM private key of --redis-cert-file.
    #[arg(long, value_name = "FILE", requires = "redis_cert_file")]
    #[cfg(feature = "redis")]
    redis_key_file: Option<PathBuf>,
    /// What /v1/events answers when the store cannot be used (Redis down or too slow, disk
    /// full): fail-closed answers 503 with a JSON error; fail-open answers as if the guard
    /// allowed the event, with "degraded": true, and counts it in
    /// loopguard_degraded_answers_total.
    #[arg(
        long,
        value_enum,
        default_value_t = FailureMode::FailClosed,
        env = "LOOPGUARD_ON_STORE_FAILURE"
    )]
    on_store_failure: FailureMode,
    /// Longest time the store may take over one request (then it has failed for that
    /// request, see --on-store-failure). Default 1s with Redis, none with SQLite or memory.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    store_deadline: Option<Duration>,
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
    /// Requests handled at once (a request counts once its body has arrived); more wait
    /// their turn.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_concurrent_requests: usize,
    /// Connections open at once (kept below the open-file limit, which the server raises
    /// to its hard limit at start). At the limit the connection idle the longest is closed.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_connections: usize,
    /// Longest time a request head may take to arrive, from its first byte.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_timeout: Duration,
    /// Longest time a request body may take to arrive, from the end of its head (408).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    body_timeout: Duration,
    /// Longest time a kept-alive connection may wait for its next request.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// Memory request bodies may hold at once while they arrive and while they are parsed
    /// (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = 512 << 20, long_help = memory_budget_help())]
    memory_budget: usize,
    /// Serve POST /v1/admin/reload without a token (off by default: without a token the
    /// endpoint answers 403; SIGHUP reloads either way).
    #[arg(long)]
    reload_without_token: bool,
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
enum FailureMode {
    FailClosed,
    FailOpen,
}

/// Where `--store`, `--db` and `--memory` say state lives.
#[derive(Debug, PartialEq, Eq)]
enum StoreChoice {
    Memory,
    Sqlite(Option<PathBuf>),
    #[cfg(feature = "redis")]
    Redis(RedisTarget),
}

impl StoreChoice {
    fn of(args: &ServeArgs) -> Result<Self, String> {
        let Some(url) = args.store.as_deref().map(str::trim) else {
            return Ok(if args.memory {
                Self::Memory
            } else {
                Self::Sqlite(args.db.clone())
            });
        };
        if args.memory || args.db.is_some() {
            return Err(
                "give the store either with --store or with --db/--memory, not both".into(),
            );
        }
        if url == "memory" {
            return Ok(Self::Memory);
        }
        if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            return Ok(Self::Sqlite(
                (!path.is_empty()).then(|| PathBuf::from(path)),
            ));
        }
        #[cfg(feature = "redis")]
        return RedisTarget::parse(url)
            .map(Self::Redis)
            .map_err(|e| format!("--store: {e}"));
        #[cfg(not(feature = "redis"))]
        Err(
            "--store: not memory or sqlite:PATH, and this build has no Redis store (its redis feature is off)"
                .into(),
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

pub fn run(args: ServeArgs) -> u8 {
    init_logging(args.log_format);
    // Refuse a bad config before touching the database.
    let loaded = match startup::load("serve", args.config.clone()) {
        Ok(loaded) => loaded,
        Err(e) => return config_error(&e),
    };
    match serve(args, &loaded) {
        Ok(()) => EXIT_OK,
        Err(message) => fatal(&message.replace('\n', "; ")),
    }
}

/// What the startup log line says about the config.
struct Announce {
    config: String,
    detection: String,
    warnings: Vec<String>,
    notice: Option<String>,
}

fn serve(args: ServeArgs, loaded: &startup::Loaded) -> Result<(), String> {
    for (name, value) in [
        ("--max-sessions", args.max_sessions),
        ("--max-runs-per-session", args.max_runs_per_session),
        ("--max-body-bytes", args.max_body_bytes),
        ("--max-id-bytes", args.max_id_bytes),
        ("--max-events-per-request", args.max_events_per_request),
        ("--max-concurrent-requests", args.max_concurrent_requests),
        ("--max-connections", args.max_connections),
        ("--memory-budget", args.memory_budget),
        ("--threads", args.threads.unwrap_or(1)),
    ] {
        if value == 0 {
            return Err(format!("{name} must be at least 1"));
        }
    }
    if args.idle_ttl.is_zero() {
        return Err("--idle-ttl must be longer than 0".into());
    }
    for (name, value) in [
        ("--store-deadline", args.store_deadline),
        ("--header-timeout", Some(args.header_timeout)),
        ("--body-timeout", Some(args.body_timeout)),
        ("--idle-timeout", Some(args.idle_timeout)),
    ] {
        if value.is_some_and(|d| d.is_zero()) {
            return Err(format!("{name} must be longer than 0"));
        }
    }
    let choice = StoreChoice::of(&args)?;
    let announce = Announce {
        config: loaded.source.to_string(),
        detection: startup::detection_summary(loaded.config.global()),
        warnings: startup::config_warnings(loaded),
        notice: startup::detection_off_notice(loaded),
    };
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
    let (max_connections, open_files) = connection_cap(args.max_connections);
    if max_connections < args.max_connections {
        tracing::warn!(
            target: "loopguard::server",
            open_files,
            max_connections,
            "the open-file limit leaves room for fewer connections than --max-connections"
        );
    }
    let options = Options {
        config_path: loaded.source.path().map(ToOwned::to_owned),
        config_defaults: startup::defaults_of("serve"),
        token,
        reload_without_token: args.reload_without_token,
        default_agent: args.agent.clone(),
        limits: RequestLimits {
            max_body_bytes: args.max_body_bytes,
            max_id_bytes: args.max_id_bytes,
            max_events_per_request: args.max_events_per_request,
            max_concurrent_requests: args.max_concurrent_requests,
            body_timeout: args.body_timeout,
            memory_budget_bytes: args.memory_budget,
        },
        connections: ConnectionLimits {
            max_connections,
            header_timeout: args.header_timeout,
            idle_timeout: args.idle_timeout,
        },
        on_store_failure: match args.on_store_failure {
            FailureMode::FailClosed => StoreFailure::FailClosed,
            FailureMode::FailOpen => StoreFailure::FailOpen,
        },
        store_deadline: args.store_deadline,
        release_memory: release_memory(),
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

    let path = match choice {
        StoreChoice::Memory => {
            let store = MemoryStore::new(limits, clock);
            return stop_after(
                runtime,
                run_with(
                    store,
                    options,
                    &args.listen,
                    sweep_every,
                    "memory (nothing survives a restart)".into(),
                    announce,
                ),
            );
        }
        #[cfg(feature = "redis")]
        StoreChoice::Redis(target) => {
            let serve = serve_redis(&args, target, limits, clock, options, sweep_every, announce);
            return stop_after(runtime, serve);
        }
        StoreChoice::Sqlite(Some(path)) => path,
        StoreChoice::Sqlite(None) => default_db_path()?,
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
    stop_after(
        runtime,
        run_with(
            store,
            options,
            &args.listen,
            sweep_every,
            described,
            announce,
        ),
    )
}

/// Runs `serve` on `runtime`, then stops the runtime without waiting long for blocking
/// threads still at work: by then requests have finished and the store is closed, and a
/// thread stuck reading a file on a stalled file system (a reload that gave up on it)
/// must not keep the process from exiting.
fn stop_after(
    runtime: tokio::runtime::Runtime,
    serve: impl std::future::Future<Output = Result<(), String>>,
) -> Result<(), String> {
    let served = runtime.block_on(serve);
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// `serve` on a Redis store.
#[cfg(feature = "redis")]
async fn serve_redis(
    args: &ServeArgs,
    target: RedisTarget,
    limits: Limits,
    clock: SharedClock,
    options: Options,
    sweep_every: Duration,
    announce: Announce,
) -> Result<(), String> {
    let redis = RedisOptions {
        prefix: args.redis_prefix.clone(),
        deadline: args.store_deadline.unwrap_or(REDIS_DEFAULT_DEADLINE),
        password: std::env::var(REDIS_PASSWORD_ENV).ok(),
        ca_pem: read_pem("--redis-ca-file", args.redis_ca_file.as_deref())?,
        client_cert: match (
            read_pem("--redis-cert-file", args.redis_cert_file.as_deref())?,
            read_pem("--redis-key-file", args.redis_key_file.as_deref())?,
        ) {
            (Some(cert_pem), Some(key_pem)) => Some(ClientCert { cert_pem, key_pem }),
            _ => None,
        },
        ..RedisOptions::default()
    };
    let options = Options {
        store_deadline: Some(redis.deadline),
        ..options
    };
    let described = format!(
        "redis {target} (prefix {:?}, {})",
        redis.prefix,
        options.on_store_failure.as_str()
    );
    let store = RedisStore::connect(target, limits, clock, redis)
        .await
        .map_err(|e| e.to_string())?;
    run_with(
        store,
        options,
        &args.listen,
        sweep_every,
        described,
        announce,
    )
    .await
}

async fn run_with<S: Store>(
    store: S,
    options: Options,
    listen: &str,
    sweep_every: Duration,
    store_name: String,
    announce: Announce,
) -> Result<(), String> {
    let app = Arc::new(App::new(store, options).map_err(|e| e.to_string())?);
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
    // The startup line: config source, detection and thresholds, store.
    tracing::info!(
        target: "loopguard::server",
        %addr,
        config = announce.config.as_str(),
        detection = announce.detection.as_str(),
        store = store_name.as_str(),
        token = app.token().is_some(),
        "loopguard serve started"
    );
    for warning in &announce.warnings {
        tracing::warn!(target: "loopguard::server", "{warning}");
    }
    if let Some(notice) = &announce.notice {
        tracing::warn!(target: "loopguard::server", "{notice}");
    }
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

/// How memory freed by a large request goes back to the system. glibc keeps what a large
/// parse freed (a server that parsed one 8 MiB body of small values would stay hundreds of
/// megabytes larger): its trim and mmap thresholds grow with the largest block freed, so
/// they are fixed here (blocks from 1 MiB up are mapped apart and unmapped when freed; a
/// free top of a heap beyond 8 MiB is returned at once), and after a large request the
/// server asks `malloc_trim` for the free pages inside the heaps.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // glibc's allocator has no safe interface (workspace lints: Cargo.toml)
fn release_memory() -> Option<fn()> {
    fn trim() {
        // SAFETY: `malloc_trim` takes no pointer; it only returns glibc's own free pages
        // to the system, under glibc's locks.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    // SAFETY: `mallopt` sets two numbers of glibc's allocator (under its lock) before the
    // runtime starts; it touches no memory of ours.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 8 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    Some(trim)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_memory() -> Option<fn()> {
    None
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

/// `serve --help` on `--memory-budget`, its figure from the budget's own definition.
fn memory_budget_help() -> String {
    format!(
        "Memory request bodies may hold at once while they arrive and while they are parsed \
         (bytes). A body of N bytes holds N while it arrives, then reserves what parsing it may \
         cost, bounded from its text: about 3 N for text, up to {} N for JSON made of many \
         small objects. A body whose bound alone passes the budget is refused (413).",
        loopguard_server::MAX_COST_PER_BODY_BYTE
    )
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

/// Largest PEM file read (1 MiB): a whole system CA bundle is a fifth of it.
#[cfg(feature = "redis")]
const MAX_PEM_BYTES: u64 = 1 << 20;

/// The contents of a PEM file given with `flag`, if any: a regular file (never a FIFO
/// waited on) of at most [`MAX_PEM_BYTES`].
#[cfg(feature = "redis")]
fn read_pem(flag: &str, file: Option<&std::path::Path>) -> Result<Option<Vec<u8>>, String> {
    file.map(|file| {
        loopguard_config::read_capped(file, MAX_PEM_BYTES)
            .map_err(|e| format!("{flag}: cannot read {}: {e}", file.display()))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> ServeArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let argv = std::iter::once("serve").chain(extra.iter().copied());
        <Cli as clap::Parser>::try_parse_from(argv).unwrap().serve
    }

    #[test]
    fn store_choices() {
        assert_eq!(StoreChoice::of(&args(&[])), Ok(StoreChoice::Sqlite(None)));
        assert_eq!(
            StoreChoice::of(&args(&["--memory"])),
            Ok(StoreChoice::Memory)
        );
        assert_eq!(
            StoreChoice::of(&args(&["--store", "sqlite:/tmp/x.db"])),
            Ok(StoreChoice::Sqlite(Some("/tmp/x.db".into())))
        );
        assert_eq!(
            StoreChoice::of(&args(&["--store", "memory"])),
            Ok(StoreChoice::Memory)
        );
        #[cfg(feature = "redis")]
        match StoreChoice::of(&args(&["--store", "redis-cluster://a:1,b:2"])) {
            Ok(StoreChoice::Redis(t)) => assert!(t.is_cluster()),
            other => panic!("{other:?}"),
        }
        let both = StoreChoice::of(&args(&["--store", "memory", "--db", "x"])).unwrap_err();
        assert!(both.contains("not both"));
        let bad = StoreChoice::of(&args(&["--store", "postgres://x"])).unwrap_err();
        #[cfg(feature = "redis")]
        assert!(
            bad.starts_with("--store: unknown Redis URL scheme"),
            "{bad}"
        );
        #[cfg(not(feature = "redis"))]
        assert!(bad.contains("no Redis store"), "{bad}");
    }

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

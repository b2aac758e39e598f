//! [`App`]: what every request handler shares: the store, the config in force, the token,
//! the limits and the metrics; and reloading the config and token.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use loopguard::ConfigSet;
use loopguard_config::Defaults;
use loopguard_store::Store;
use serde::Serialize;

use crate::auth::{Token, TokenError, TokenSource};
use crate::budget::Budget;
use crate::metrics::Metrics;

/// Bounds on what one request may carry and how long it may take to arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Largest request body, in bytes (default 8 MiB).
    pub max_body_bytes: usize,
    /// Longest `session`, `run`, `agent`, `parent_session`, `parent_run`, `call_id` and
    /// `tool`, in bytes (default 256).
    pub max_id_bytes: usize,
    /// Most events in one request (default 1,000).
    pub max_events_per_request: usize,
    /// Requests handled at once, once their body has arrived; more wait their turn
    /// (default 256).
    pub max_concurrent_requests: usize,
    /// Longest time a request body may take to arrive, from the end of its head (default
    /// 10 s); past it the request is answered 408 and the connection closed.
    pub body_timeout: Duration,
    /// Memory that requests may hold at once while they are parsed and answered, in
    /// bytes (default 512 MiB): once its body has arrived, each request reserves what
    /// parsing it costs ([`crate::parse_cost`]), waiting for room when others hold it; a
    /// body that costs more than the whole budget is refused (413). Bodies still arriving
    /// are bounded by the same amount: a body that would pass it is refused (503) rather
    /// than buffered.
    pub memory_budget_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 << 20,
            max_id_bytes: 256,
            max_events_per_request: 1000,
            max_concurrent_requests: 256,
            body_timeout: Duration::from_secs(10),
            memory_budget_bytes: 512 << 20,
        }
    }
}

/// Bounds on connections: how many may be open, and how long each may stay silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once (default 4,096; [`crate::connection_cap`] keeps it below
    /// the process' open-file limit). At the cap, the connection idle the longest is
    /// closed to make room, and when none is idle new connections wait to be accepted.
    pub max_connections: usize,
    /// Longest time from the first byte of a request to the end of its head (default
    /// 10 s).
    pub header_timeout: Duration,
    /// Longest time a kept-alive connection may wait for its next request (default
    /// 60 s), counted from the end of the previous answer (or from the connection).
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// What `POST /v1/events` answers when the store fails (cannot be reached, does not
/// answer within [`Options::store_deadline`], cannot write).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreFailure {
    /// 503 with a JSON error (`Retry-After: 1`); the event is not applied.
    #[default]
    FailClosed,
    /// Answer as if the guard allowed the event (a call is allowed, a result not
    /// recorded, a compaction arms nothing), with `"degraded": true` on the answer; count
    /// it in `loopguard_degraded_answers_total`. The event is usually recorded nowhere; a
    /// write the store applied after the deadline had passed (Redis answering slowly) is
    /// in the history although the answer cannot say so.
    FailOpen,
}

impl StoreFailure {
    /// `fail-closed` or `fail-open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FailClosed => "fail-closed",
            Self::FailOpen => "fail-open",
        }
    }
}

/// How to build an [`App`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The OpenClaw-style JSON5 config; `None` runs on [`Options::config_defaults`].
    /// Re-read on reload (at most `loopguard_config::MAX_CONFIG_BYTES` are read).
    pub config_path: Option<PathBuf>,
    /// What applies without a config file: detection on at the default thresholds
    /// (`Defaults::Live`, the default), or SPEC §7's defaults.
    pub config_defaults: Defaults,
    /// Where the bearer token comes from.
    pub token: TokenSource,
    /// Serve `POST /v1/admin/reload` without a token (default: off). With a token the
    /// endpoint is on, behind it; without one it answers 403 unless this is set, since
    /// anyone who can reach the port could otherwise make the server re-read its files.
    pub reload_without_token: bool,
    /// Agent whose config applies to events that name none.
    pub default_agent: Option<String>,
    /// Request limits.
    pub limits: RequestLimits,
    /// Connection limits.
    pub connections: ConnectionLimits,
    /// What event answers become when the store fails.
    pub on_store_failure: StoreFailure,
    /// Longest time the store may take over the events of one request (and over each
    /// session read or removal); past it the store has failed for that request. `None`:
    /// only the store's own limits apply.
    pub store_deadline: Option<Duration>,
    /// Called (on a blocking thread, at most once a second) after a request that
    /// reserved a large share of memory was answered, to give the freed memory back to
    /// the system: the C allocator keeps what a large parse freed in its arenas otherwise.
    /// The binary passes glibc's `malloc_trim`.
    pub release_memory: Option<fn()>,
}

/// What a reload did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReloadReport {
    /// The config file read, if any.
    pub config: Option<String>,
    /// Agent blocks in it.
    pub agents: usize,
    /// Clamped or unreachable thresholds, budgets that cannot be enforced (the config
    /// applies anyway).
    pub warnings: Vec<String>,
    /// Whether requests now need a token.
    pub token_required: bool,
}

/// Why the config or the token could not be loaded (at start or on a reload).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The config file cannot be read, is too large, or is invalid (every problem, one
    /// per line).
    #[error(transparent)]
    Config(#[from] loopguard_config::LoadError),
    /// The token cannot be loaded.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The reload did not finish (its thread panicked or the runtime is stopping).
    #[error("reload failed: {0}")]
    Interrupted(String),
    /// Reading the files took longer than [`RELOAD_DEADLINE`] (a stalled file system):
    /// the reload gives up rather than hold later reloads and the shutdown behind it.
    #[error("reading the config and token files took longer than {} s", RELOAD_DEADLINE.as_secs())]
    TimedOut,
}

/// Longest a reload waits for the config and token files to be read. Both are small
/// regular files (anything else is refused before it is read), so only a stalled file
/// system (a hung network mount) comes near it.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(5);

/// The shared state of the server.
pub struct App<S> {
    store: S,
    config: RwLock<Arc<ConfigSet>>,
    token: RwLock<Option<Arc<Token>>>,
    options: Options,
    metrics: Arc<Metrics>,
    budget: Budget,
    reload_lock: tokio::sync::Mutex<()>,
}

impl<S> std::fmt::Debug for App<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S: Store> App<S> {
    /// Reads the config and the token (an error, with every problem, if either is
    /// unusable) and puts the server together.
    pub fn new(store: S, options: Options) -> Result<Self, LoadError> {
        let (config, _) = load_config(&options)?;
        let token = options.token.load()?;
        Ok(Self {
            store,
            config: RwLock::new(Arc::new(config)),
            token: RwLock::new(token.map(Arc::new)),
            budget: Budget::new(options.limits.memory_budget_bytes),
            options,
            metrics: Arc::default(),
            reload_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The metrics, shared (with the connection tasks).
    pub(crate) fn metrics_handle(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// The options the server was built with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The request limits.
    pub fn limits(&self) -> &RequestLimits {
        &self.options.limits
    }

    /// The memory budget of request bodies.
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// The config in force (a snapshot: a reload does not change it under a request).
    pub fn config(&self) -> Arc<ConfigSet> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The token in force, if requests need one.
    pub fn token(&self) -> Option<Arc<Token>> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads the config file and the token file. Both must be usable for either to
    /// change: otherwise the old ones stay in force, the problems are logged and returned.
    pub async fn reload(&self) -> Result<ReloadReport, LoadError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let options = self.options.clone();
        let reading = tokio::task::spawn_blocking(move || {
            let config = load_config(&options)?;
            let token = options.token.load()?;
            Ok::<_, LoadError>((config, token))
        });
        // On a timeout the reading thread is left to finish on its own: the runtime does not
        // wait for it at shutdown (`serve` stops with a timeout), and nothing waits on it.
        let loaded = match tokio::time::timeout(RELOAD_DEADLINE, reading).await {
            Ok(joined) => joined.map_err(|e| LoadError::Interrupted(e.to_string())),
            Err(_) => Err(LoadError::TimedOut),
        };
        match loaded.and_then(|r| r) {
            Ok(((config, report), token)) => {
                let report = ReloadReport {
                    token_required: token.is_some(),
                    ..report
                };
                *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
                *self.token.write().unwrap_or_else(|p| p.into_inner()) = token.map(Arc::new);
                self.metrics.reload(true);
                tracing::info!(
                    target: "loopguard::server",
                    config = report.config.as_deref(),
                    agents = report.agents,
                    warnings = report.warnings.len(),
                    "config reloaded"
                );
                for warning in &report.warnings {
                    tracing::warn!(target: "loopguard::server", "config: {warning}");
                }
                Ok(report)
            }
            Err(problems) => {
                self.metrics.reload(false);
                for line in problems.to_string().lines() {
                    tracing::error!(target: "loopguard::server", "reload refused: {line}");
                }
                tracing::error!(
                    target: "loopguard::server",
                    "config not reloaded; the previous config stays in force"
                );
                Err(problems)
            }
        }
    }
}

/// Reads and validates the config file, if any.
fn load_config(options: &Options) -> Result<(ConfigSet, ReloadReport), LoadError> {
    let config = loopguard_config::load(options.config_path.as_deref(), options.config_defaults)?;
    let name = options
        .config_path
        .as_ref()
        .map(|p| p.display().to_string());
    let mut warnings = Vec::new();
    let scopes = std::iter::once(("global".to_owned(), config.global()))
        .chain(config.agents().map(|(id, _, e)| (format!("agent {id}"), e)));
    for (label, effective) in scopes {
        warnings.extend(
            effective
                .clamps()
                .iter()
                .map(|c| format!("{label}: {}", c.reason)),
        );
        warnings.extend(
            effective
                .unreachable()
                .iter()
                .map(|u| format!("{label}: {}", u.reason)),
        );
        warnings.extend(
            effective
                .budget_caveats()
                .into_iter()
                .map(|c| format!("{label}: {c}")),
        );
    }
    let report = ReloadReport {
        config: name,
        agents: config.agents().count(),
        warnings,
        token_required: false,
    };
    Ok((config, report))
}

//! [`RedisStore`]: run states in Redis, shared by every replica of `loopguard serve`
//! (`--store redis://HOST:PORT`, `rediss://…`, `redis-cluster://H1:P1,H2:P2,…`).
//!
//! ## Key layout
//!
//! With the prefix `P` ([`RedisOptions::prefix`], default `loopguard:`) and the session
//! id `S`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{S}:r:RUN` | string | one run: `[layout version 1][etag: 8 bytes][RunState::to_bytes()]`, expiring after the idle TTL |
//! | `P{S}:runs` | sorted set | the session's runs: member = run id (empty for calls outside any run), score = last activity (ms); same TTL |
//! | `P{%}:sessions` | sorted set | live sessions, for the session limit: member = `S`, score = last refresh (ms) |
//!
//! All keys of a session share the hash tag `{S}`, so a session lives on one shard of a
//! Redis Cluster. Inside the tag, `%`, `{` and `}` of the session id are escaped as `%25`,
//! `%7B` and `%7D` (and an empty id is `%00`), so the tag is never empty, always ends
//! where the layout ends it, and never equals the registry's `%`.
//!
//! ## How an event is applied
//!
//! Optimistic concurrency with a server-side compare-and-swap:
//!
//! 1. `GET` the run's value; decode it (missing, unreadable or idle past the TTL: a fresh
//!    state);
//! 2. apply the event to it in Rust (the closure given to [`Store::update`], which is
//!    `loopguard_events::apply_to_run` in the server);
//! 3. `EVALSHA` the compare-and-swap script with the tag read in 1: if the run still holds
//!    that tag, the script stores the new value (with the idle TTL), updates the session's
//!    run index (evicting its least recently active run beyond the per-session limit) and
//!    answers; if another replica wrote in between, it answers with the value it holds
//!    now, and the store goes back to 2 with that value (no second `GET`).
//!
//! So an event costs two round trips to Redis when nobody else writes the run, and one
//! more per lost race. Within one replica, updates of one run take turns (a lock striped
//! by key), so races happen only between replicas. Two replicas that apply events of one run at the same moment give
//! the answers of some sequential order of those events, each computed from the state the
//! previous one left: what a sequential replay gives.
//!
//! Why a script rather than `WATCH`/`MULTI`/`EXEC`: a `WATCH` belongs to a connection, so
//! every update in flight would need a connection of its own (the multiplexed connection
//! that all requests of a replica share cannot carry it), and the transaction takes four
//! round trips (`WATCH`, `GET`, `MULTI`…`EXEC`) where the script takes two. A script runs
//! atomically on the shard that holds the session (all its keys share a hash tag), and
//! costs Redis about as much as the few commands inside it.
//!
//! ## Sessions, limits and expiry across replicas
//!
//! - Every key of a run and its session index expire through Redis TTLs: a session idle
//!   for the TTL disappears from Redis by itself. A run idle past the TTL inside a live
//!   session starts afresh at its next event (the engine's rule), and the scripts drop it
//!   from the index.
//! - `max_runs_per_session`: the compare-and-swap script evicts the least recently active
//!   run of the session when a new one would exceed it.
//! - `max_sessions`: a sorted set of live sessions (the registry), on one shard of its own.
//!   A new session is registered (or refused, 429) before its first state is written; a
//!   live session refreshes its entry at most once per quarter of the TTL, and entries
//!   older than the TTL plus that quarter are dropped. So the count may include a session
//!   idle for up to 1.25 times the TTL, never one that is live.
//!
//! ## Failures
//!
//! Every operation is bounded by [`RedisOptions::deadline`] (retries included) and fails
//! with [`StoreError::Unavailable`] when Redis cannot be reached, refuses the command, or
//! does not answer in time. The connection reconnects by itself with exponential backoff
//! (50 ms doubling up to 1 s, with jitter). Once the link has failed (connection refused
//! or lost, no answer within the deadline), operations fail at once instead of each
//! waiting for the deadline, until a background `PING` (every 100 ms while down, every
//! [`RedisOptions::health_interval`] otherwise) gets through; [`Store::check`]
//! (readiness) follows the same flag. An error Redis answers with (out of memory, say)
//! fails only its operation. Nothing here panics or blocks the runtime.

mod keys;
mod scripts;
mod target;
pub mod testing;
mod value;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, Value};
use loopguard::RunState;

use crate::{etag, Limits, RunKey, RunSnapshot, SharedClock, Store, StoreError, StoreStats};

use keys::{Layout, RunKeys};
use scripts::Scripts;
pub use target::RedisTarget;

/// A client certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCert {
    /// The certificate (and any intermediates).
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never reaches a log.
        f.debug_struct("ClientCert")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .finish_non_exhaustive()
    }
}

/// How a [`RedisStore`] connects and behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisOptions {
    /// Prefix of every key (default `loopguard:`); several deployments can share one Redis
    /// with different prefixes. Must not contain `{` or `}`.
    pub prefix: String,
    /// Longest time one operation of the store may take, retries and reconnection
    /// included (default 1 s). Past it the operation fails with
    /// [`StoreError::Unavailable`]; also the connect and response timeout of the
    /// connection.
    pub deadline: Duration,
    /// Password, instead of the one in the URL (which shows in process listings).
    pub password: Option<String>,
    /// A PEM certificate (or bundle) of the authority to trust for `rediss://`, instead of
    /// the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate to present over `rediss://`, for a Redis that authenticates
    /// its clients by certificate (`tls-auth-clients yes`).
    pub client_cert: Option<ClientCert>,
    /// Attempts of one update while other replicas keep changing the run (default 100;
    /// the deadline bounds them too). A retry needs no extra read: the script that
    /// refuses a write answers with the value to apply the event to.
    pub max_attempts: u32,
    /// How often the store pings Redis when idle, for readiness (default 1 s).
    pub health_interval: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            prefix: "loopguard:".into(),
            deadline: Duration::from_secs(1),
            password: None,
            ca_pem: None,
            client_cert: None,
            max_attempts: 100,
            health_interval: Duration::from_secs(1),
        }
    }
}

/// One connection for the whole store: a managed multiplexed connection to one server
/// (reconnects by itself), or a cluster connection (follows the slot map by itself).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// State shared with the background tasks (health pings, registry refreshes).
#[derive(Default)]
struct Shared {
    healthy: AtomicBool,
    last_error: Mutex<String>,
    /// Live sessions as the registry counted them last.
    sessions: AtomicU64,
    writes: AtomicU64,
    conflicts: AtomicU64,
    failures: AtomicU64,
    write_micros: AtomicU64,
}

impl Shared {
    fn up(&self) {
        if !self.healthy.swap(true, Ordering::AcqRel) {
            tracing::info!(target: "loopguard::store", "redis reachable");
        }
    }

    /// The link to Redis failed (cannot connect, connection lost, no answer in time):
    /// operations fail fast until a health ping gets through again.
    fn down(&self, error: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(target: "loopguard::store", error, "redis unavailable; failing fast until it answers a ping");
        }
        let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
        error.clone_into(&mut last);
    }

    /// A command failed: a link failure takes the store down; an error Redis answered
    /// with (out of memory, say) fails only this operation.
    fn fail(&self, e: &RedisError) -> StoreError {
        let message = redis_error(e);
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            self.down(&message);
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        StoreError::Unavailable(message)
    }

    fn last_error(&self) -> String {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A store whose state lives in Redis, shared by every replica that connects to it. See
/// the module docs for the protocol, the key layout (in `keys`) and the failure modes.
pub struct RedisStore {
    conn: Conn,
    target: RedisTarget,
    layout: Layout,
    registry: Vec<u8>,
    scripts: Arc<Scripts>,
    limits: Limits,
    clock: SharedClock,
    options: RedisOptions,
    shared: Arc<Shared>,
    pinger: Mutex<Option<tokio::task::JoinHandle<()>>>,
    closed: AtomicBool,
    /// Updates of one run from this replica go one at a time (striped by key), so that
    /// races on a run are only between replicas, never between requests of one replica.
    turns: Box<[tokio::sync::Mutex<()>]>,
    hasher: RandomState,
}

/// Stripes of [`RedisStore::turns`] (a power of two).
const TURNS: usize = 4096;

/// How often the health task pings a Redis that is down.
const DOWN_PROBE: Duration = Duration::from_millis(100);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .field("prefix", &self.options.prefix)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What the compare-and-swap script did.
enum Cas {
    /// Stored; the run's activity before this write (0 for a new run of a live session),
    /// `None` for the first run of a new session.
    Stored(Option<u64>),
    /// Another writer got there first: what the run holds now.
    Conflict(Option<Vec<u8>>),
    /// The session is new: register it first.
    Register,
}

fn redis_error(e: &RedisError) -> String {
    format!("redis: {e}")
}

impl RedisStore {
    /// Connects to `target` (from a running Tokio runtime, with timers). Invalid settings
    /// (a URL the client refuses, a prefix with braces, an unreadable CA) and credentials
    /// Redis refuses are errors; a Redis that cannot be reached yet is not: the store
    /// starts unavailable, logs it, and keeps trying to connect in the background.
    pub async fn connect(
        target: RedisTarget,
        limits: Limits,
        clock: SharedClock,
        options: RedisOptions,
    ) -> Result<Self, StoreError> {
        if options.prefix.contains(['{', '}']) {
            return Err(StoreError::Unavailable(format!(
                "the Redis key prefix {:?} must not contain braces (they make hash tags)",
                options.prefix
            )));
        }
        let bad = |e: RedisError| StoreError::Unavailable(format!("cannot use {target}: {e}"));
        if target.is_tls() {
            // The first provider installed wins; a second call is a no-op.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let certs = (options.ca_pem.is_some() || options.client_cert.is_some()).then(|| {
            ::redis::TlsCertificates {
                client_tls: options
                    .client_cert
                    .as_ref()
                    .map(|c| ::redis::ClientTlsConfig {
                        client_cert: c.cert_pem.clone(),
                        client_key: c.key_pem.clone(),
                    }),
                root_cert: options.ca_pem.clone(),
            }
        });
        let deadline = options.deadline.max(Duration::from_millis(1));
        // A direct connection first, to tell refused credentials (fatal) from a Redis not
        // reachable yet (served as unavailable while the managed connection retries).
        let (conn, probed) = if target.is_cluster() {
            let mut builder = ::redis::cluster::ClusterClient::builder(target.node_urls())
                .connection_timeout(deadline)
                .response_timeout(deadline)
                .min_retry_wait(10)
                .max_retry_wait(500);
            if let Some(password) = &options.password {
                builder = builder.password(password);
            }
            if let Some(certs) = certs {
                builder = builder.certs(certs);
            }
            let client = builder.build().map_err(bad)?;
            let config = ::redis::cluster::ClusterConfig::new()
                .set_connection_timeout(deadline)
                .set_response_timeout(deadline);
            let probe = async {
                let mut c = client
                    .get_async_connection_with_config(config.clone())
                    .await?;
                ::redis::cmd("PING").query_async::<Value>(&mut c).await
            };
            let probed = tokio::time::timeout(deadline, probe).await;
            (
                Conn::Cluster(client.get_pending_async_connection_with_config(config)),
                probed,
            )
        } else {
            let url = target.node_urls().into_iter().next().unwrap_or_default();
            let mut info = url.as_str().into_connection_info().map_err(bad)?;
            if let Some(password) = &options.password {
                let settings = info.redis_settings().clone().set_password(password);
                info = info.set_redis_settings(settings);
            }
            let client = match certs {
                Some(certs) => ::redis::Client::build_with_tls(info, certs),
                None => ::redis::Client::open(info),
            }
            .map_err(bad)?;
            let probe = async {
                let config = ::redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(deadline))
                    .set_response_timeout(Some(deadline));
                let mut c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                ::redis::cmd("PING").query_async::<Value>(&mut c).await
            };
            let probed = tokio::time::timeout(deadline, probe).await;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(deadline))
                .set_response_timeout(Some(deadline))
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_secs(1))
                .set_exponent_base(2.0)
                .set_number_of_retries(6);
            let manager = ConnectionManager::new_lazy_with_config(client, config).map_err(bad)?;
            (Conn::Single(manager), probed)
        };
        let shared = Arc::new(Shared::default());
        let store = Self {
            conn,
            layout: Layout::new(&options.prefix),
            registry: Layout::new(&options.prefix).registry(),
            scripts: Arc::new(Scripts::new()),
            limits,
            clock,
            shared,
            pinger: Mutex::new(None),
            closed: AtomicBool::new(false),
            turns: (0..TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: RandomState::new(),
            target,
            options,
        };
        let probed = match probed {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.kind() == ::redis::ErrorKind::AuthenticationFailed => {
                Err(format!("AuthenticationFailed: {e}"))
            }
            Ok(Err(e)) => Err(redis_error(&e)),
            Err(_) => Err(format!(
                "redis did not answer within {} ms",
                deadline.as_millis()
            )),
        };
        match probed {
            Ok(()) => {
                store.shared.up();
                // Count the sessions other replicas already hold.
                if let Err(e) = store.expire_idle().await {
                    tracing::warn!(target: "loopguard::store", error = %e, "cannot read the session registry");
                }
                tracing::info!(target: "loopguard::store", target = %store.target, prefix = store.options.prefix.as_str(), "redis store connected");
            }
            Err(message) if refused_credentials(&message) => {
                return Err(StoreError::Unavailable(format!(
                    "{} refused the credentials: {message}",
                    store.target
                )));
            }
            Err(message) => {
                store.shared.down(&message);
                tracing::warn!(target: "loopguard::store", target = %store.target, error = message.as_str(), "redis not reachable yet; serving as unavailable and retrying in the background");
            }
        }
        store.start_pinger();
        Ok(store)
    }

    /// What the store connects to (the password hidden).
    pub fn target(&self) -> &RedisTarget {
        &self.target
    }

    /// The options it was built with.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    fn start_pinger(&self) {
        let conn = self.conn.clone();
        let shared = Arc::clone(&self.shared);
        let every = self.options.health_interval.max(Duration::from_millis(10));
        let deadline = self.options.deadline;
        let task = tokio::spawn(async move {
            loop {
                // While down, probe often: requests fail fast until a ping gets through.
                let pause = if shared.healthy.load(Ordering::Acquire) {
                    every
                } else {
                    every.min(DOWN_PROBE)
                };
                tokio::time::sleep(pause).await;
                let mut c = conn.clone();
                let cmd = ::redis::cmd("PING");
                let ping = cmd.query_async::<Value>(&mut c);
                match tokio::time::timeout(deadline, ping).await {
                    Ok(Ok(_)) => shared.up(),
                    Ok(Err(e)) => shared.down(&redis_error(&e)),
                    Err(_) => shared.down(&format!(
                        "redis did not answer PING within {} ms",
                        deadline.as_millis()
                    )),
                }
            }
        });
        *self.pinger.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    fn open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable("the store is closed".into()));
        }
        Ok(())
    }

    /// Runs `op` within the deadline, keeping the health flag and failure count. While
    /// the link to Redis is down, fails at once (the health task probes it).
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.open()?;
        if !self.shared.healthy.load(Ordering::Acquire) {
            self.shared.failures.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::Unavailable(format!(
                "{} (failing fast until redis answers again)",
                self.shared.last_error()
            )));
        }
        match tokio::time::timeout(self.options.deadline, op).await {
            Ok(result) => result,
            Err(_) => {
                let message = format!(
                    "redis did not answer within the deadline of {} ms",
                    self.options.deadline.as_millis()
                );
                self.shared.down(&message);
                Err(StoreError::Unavailable(message))
            }
        }
    }

    /// Quarter of the TTL: how often a live session refreshes its registry entry.
    fn epoch_ms(&self) -> u64 {
        (self.limits.ttl_ms() / 4).max(1)
    }

    /// Registry entries refreshed before this are dropped.
    fn stale_before(&self, now: u64) -> u64 {
        now.saturating_sub(self.limits.ttl_ms().saturating_add(self.epoch_ms()))
    }

    fn ttl_arg(&self) -> u64 {
        self.limits.ttl_ms().max(1)
    }

    /// Runs a script with its keys and arguments on the shared connection; a failure
    /// counts against the link (see [`Shared::fail`]).
    async fn invoke(&self, script: &::redis::ScriptInvocation<'_>) -> Result<Value, StoreError> {
        let mut c = self.conn.clone();
        script
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.shared.fail(&e))
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.conn.clone();
        ::redis::cmd("GET")
            .arg(key)
            .query_async::<Option<Vec<u8>>>(&mut c)
            .await
            .map_err(|e| self.shared.fail(&e))
    }

    #[allow(clippy::too_many_arguments)]
    async fn cas(
        &self,
        keys: &RunKeys,
        expected: &[u8],
        value: &[u8],
        score: u64,
        cutoff: u64,
        registered: bool,
    ) -> Result<Cas, StoreError> {
        let reply = self
            .invoke(
                self.scripts
                    .cas
                    .key(&keys.run)
                    .key(&keys.index)
                    .arg(expected)
                    .arg(value)
                    .arg(self.ttl_arg())
                    .arg(score)
                    .arg(cutoff)
                    .arg(self.limits.max_runs_per_session.max(1))
                    .arg(&keys.member)
                    .arg(if registered { "1" } else { "0" })
                    .arg(&keys.run_prefix),
            )
            .await?;
        let items = array(reply)?;
        match items.first().and_then(int) {
            Some(1) => Ok(Cas::Stored(items.get(1).and_then(score_of))),
            Some(0) => Ok(Cas::Conflict(items.get(1).and_then(bytes))),
            Some(2) => Ok(Cas::Register),
            _ => Err(unexpected("the compare-and-swap script")),
        }
    }

    /// Adds (or refreshes, with `force`) a session in the registry; `false` when the
    /// session limit refuses it.
    async fn register(&self, member: &[u8], now: u64, force: bool) -> Result<bool, StoreError> {
        register(
            self.conn.clone(),
            &self.scripts,
            &self.registry,
            RegisterArgs {
                member,
                now,
                stale_before: self.stale_before(now),
                max: self.limits.max_sessions,
                force,
                ttl: self.ttl_arg().saturating_add(self.epoch_ms()),
            },
            &self.shared,
        )
        .await
    }

    /// Refreshes a live session's registry entry in the background.
    fn refresh(&self, session: &str, now: u64) {
        let conn = self.conn.clone();
        let scripts = Arc::clone(&self.scripts);
        let registry = self.registry.clone();
        let shared = Arc::clone(&self.shared);
        let member = keys::escape(session);
        let args = (
            now,
            self.stale_before(now),
            self.limits.max_sessions,
            self.ttl_arg().saturating_add(self.epoch_ms()),
        );
        let deadline = self.options.deadline;
        tokio::spawn(async move {
            let (now, stale_before, max, ttl) = args;
            let refreshed = register(
                conn,
                &scripts,
                &registry,
                RegisterArgs {
                    member: &member,
                    now,
                    stale_before,
                    max,
                    force: true,
                    ttl,
                },
                &shared,
            );
            if let Ok(Err(e)) | Err(e) = tokio::time::timeout(deadline, refreshed)
                .await
                .map_err(|_| StoreError::Unavailable("timed out".into()))
            {
                tracing::debug!(target: "loopguard::store", error = %e, "refreshing a session in the registry failed");
            }
        });
    }

    async fn unregister(&self, member: &[u8]) -> Result<(), StoreError> {
        let mut c = self.conn.clone();
        ::redis::cmd("ZREM")
            .arg(&self.registry)
            .arg(member)
            .query_async::<Value>(&mut c)
            .await
            .map(drop)
            .map_err(|e| self.shared.fail(&e))
    }

    /// One update, retried on conflicts; not bounded (the caller is).
    async fn apply<R, F>(&self, key: RunKey<'_>, f: &mut F) -> Result<R, StoreError>
    where
        F: FnMut(&mut RunState, u64) -> R,
    {
        let keys = self.layout.run(key.session, key.run);
        let turn = self.hasher.hash_one(&keys.run) as usize & (TURNS - 1);
        let _turn = self.turns[turn].lock().await;
        let mut current = self.get(&keys.run).await?;
        let mut registered = false;
        for attempt in 0..self.options.max_attempts.max(1) {
            if attempt > 0 {
                self.shared.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            let now = self.clock.now_ms();
            let cutoff = self.limits.cutoff(now);
            let expected = current
                .as_deref()
                .map(value::tag_of)
                .unwrap_or_default()
                .to_vec();
            let mut state = match current.as_deref() {
                None => RunState::default(),
                Some(bytes) => value::decode(bytes).unwrap_or_else(|error| {
                    crate::warn_unreadable(key, &error);
                    RunState::default()
                }),
            };
            if state.last_active() < cutoff {
                state = RunState::default();
            }
            let result = f(&mut state, now);
            let stored = value::encode(etag::next(), &state);
            let started = Instant::now();
            loop {
                match self
                    .cas(
                        &keys,
                        &expected,
                        &stored,
                        state.last_active(),
                        cutoff,
                        registered,
                    )
                    .await?
                {
                    Cas::Stored(previous) => {
                        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(0);
                        self.shared.writes.fetch_add(1, Ordering::Relaxed);
                        self.shared
                            .write_micros
                            .fetch_add(micros, Ordering::Relaxed);
                        // The first event of a run in each quarter of the TTL refreshes
                        // the session's registry entry (so an entry is never older than
                        // the session's last activity minus a quarter of the TTL).
                        let epoch = self.epoch_ms();
                        if previous.is_some_and(|p| p / epoch != now / epoch) {
                            self.refresh(key.session, now);
                        }
                        return Ok(result);
                    }
                    Cas::Register if !registered => {
                        let member = keys::escape(key.session);
                        if !self.register(&member, now, false).await? {
                            return Err(StoreError::SessionLimit {
                                limit: self.limits.max_sessions,
                            });
                        }
                        registered = true;
                    }
                    Cas::Register => return Err(unexpected("the compare-and-swap script")),
                    Cas::Conflict(now_held) => {
                        current = now_held;
                        break;
                    }
                }
            }
        }
        Err(StoreError::Contention {
            attempts: self.options.max_attempts.max(1),
        })
    }
}

struct RegisterArgs<'a> {
    member: &'a [u8],
    now: u64,
    stale_before: u64,
    max: usize,
    force: bool,
    ttl: u64,
}

async fn register(
    mut conn: Conn,
    scripts: &Scripts,
    registry: &[u8],
    args: RegisterArgs<'_>,
    shared: &Shared,
) -> Result<bool, StoreError> {
    let reply: Value = scripts
        .register
        .key(registry)
        .arg(args.member)
        .arg(args.now)
        .arg(args.stale_before)
        .arg(args.max)
        .arg(if args.force { "1" } else { "0" })
        .arg(args.ttl.max(1))
        .invoke_async(&mut conn)
        .await
        .map_err(|e| shared.fail(&e))?;
    let items = array(reply)?;
    let (Some(ok), Some(live)) = (items.first().and_then(int), items.get(1).and_then(int)) else {
        return Err(unexpected("the registry script"));
    };
    shared
        .sessions
        .store(u64::try_from(live).unwrap_or(0), Ordering::Relaxed);
    Ok(ok == 1)
}

fn refused_credentials(message: &str) -> bool {
    [
        "WRONGPASS",
        "NOAUTH",
        "invalid password",
        "AuthenticationFailed",
        "NOPERM",
    ]
    .iter()
    .any(|m| message.contains(m))
}

fn unexpected(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from {what}"))
}

fn array(v: Value) -> Result<Vec<Value>, StoreError> {
    match v {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        _ => Err(unexpected("a script")),
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

/// A sorted-set score as Redis prints it (`"1700000000000"`, or in exponent form).
fn score_of(v: &Value) -> Option<u64> {
    let text = match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.to_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => return u64::try_from(*n).ok(),
        Value::Double(d) => return (d.is_finite() && *d >= 0.0).then_some(*d as u64),
        _ => return None,
    };
    text.parse::<u64>().ok().or_else(|| {
        text.parse::<f64>()
            .ok()
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map(|d| d as u64)
    })
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        if let Some(task) = self.pinger.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl Store for RedisStore {
    async fn update<R, F>(&self, key: RunKey<'_>, mut f: F) -> Result<R, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, u64) -> R + Send,
    {
        self.bounded(self.apply(key, &mut f)).await
    }

    async fn remove_run(&self, key: RunKey<'_>) -> Result<bool, StoreError> {
        let keys = self.layout.run(key.session, key.run);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        self.bounded(async {
            let reply = self
                .invoke(
                    self.scripts
                        .remove_run
                        .key(&keys.run)
                        .key(&keys.index)
                        .arg(&keys.member)
                        .arg(cutoff),
                )
                .await?;
            let items = array(reply)?;
            let (Some(live), Some(left)) =
                (items.first().and_then(int), items.get(1).and_then(int))
            else {
                return Err(unexpected("the remove-run script"));
            };
            if left == 0 {
                self.unregister(&keys::escape(key.session)).await?;
            }
            Ok(live == 1)
        })
        .await
    }

    async fn remove_session(&self, session: &str) -> Result<usize, StoreError> {
        let keys = self.layout.session(session);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        self.bounded(async {
            let reply = self
                .invoke(
                    self.scripts
                        .remove_session
                        .key(&keys.index)
                        .arg(&keys.run_prefix)
                        .arg(cutoff),
                )
                .await?;
            let live = int(&reply).ok_or_else(|| unexpected("the remove-session script"))?;
            self.unregister(&keys.member).await?;
            Ok(usize::try_from(live).unwrap_or(0))
        })
        .await
    }

    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        let keys = self.layout.session(session);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let items = self
            .bounded(async {
                let reply = self
                    .invoke(
                        self.scripts
                            .session
                            .key(&keys.index)
                            .arg(&keys.run_prefix)
                            .arg(cutoff),
                    )
                    .await?;
                array(reply)
            })
            .await?;
        let mut out = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            let [member, stored] = pair else { continue };
            let (Some(member), Some(stored)) = (bytes(member), bytes(stored)) else {
                continue;
            };
            let Ok(state) = value::decode(&stored) else {
                continue;
            };
            if state.last_active() < cutoff {
                continue;
            }
            let run = String::from_utf8_lossy(&member).into_owned();
            out.push(RunSnapshot {
                run: (!run.is_empty()).then_some(run),
                state,
            });
        }
        out.sort_by(|a, b| {
            b.state
                .last_active()
                .cmp(&a.state.last_active())
                .then_with(|| a.run.cmp(&b.run))
        });
        Ok(out)
    }

    /// Redis expires idle runs and sessions by itself (TTLs); this drops stale entries of
    /// the session registry and refreshes the live-session count. Resolves with 0: no run
    /// is held in memory.
    async fn expire_idle(&self) -> Result<usize, StoreError> {
        let now = self.clock.now_ms();
        let stale_before = self.stale_before(now);
        self.bounded(async {
            let mut c = self.conn.clone();
            let (_, live): (Value, u64) = ::redis::pipe()
                .cmd("ZREMRANGEBYSCORE")
                .arg(&self.registry)
                .arg("-inf")
                .arg(format!("({stale_before}"))
                .cmd("ZCARD")
                .arg(&self.registry)
                .query_async(&mut c)
                .await
                .map_err(|e| self.shared.fail(&e))?;
            self.shared.sessions.store(live, Ordering::Relaxed);
            Ok(0)
        })
        .await
    }

    fn stats(&self) -> StoreStats {
        let s = &self.shared;
        let writes = s.writes.load(Ordering::Relaxed);
        StoreStats {
            sessions: s.sessions.load(Ordering::Relaxed),
            runs: None,
            commits: writes,
            writes,
            deltas: 0,
            conflicts: s.conflicts.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            commit_micros: s.write_micros.load(Ordering::Relaxed),
            expired_runs: 0,
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        self.open()?;
        if self.shared.healthy.load(Ordering::Acquire) {
            return Ok(());
        }
        let last = self
            .shared
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Err(StoreError::Unavailable(if last.is_empty() {
            "redis not reachable yet".into()
        } else {
            last
        }))
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        if let Some(task) = self.pinger.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_defensively() {
        assert_eq!(
            score_of(&Value::BulkString(b"1700000000123".to_vec())),
            Some(1_700_000_000_123)
        );
        assert_eq!(score_of(&Value::BulkString(b"1.5e3".to_vec())), Some(1500));
        assert_eq!(score_of(&Value::BulkString(b"-1".to_vec())), None);
        assert_eq!(score_of(&Value::BulkString(b"nan".to_vec())), None);
        assert_eq!(score_of(&Value::Nil), None);
        assert_eq!(int(&Value::Int(2)), Some(2));
        assert!(array(Value::Okay).is_err());
        assert!(refused_credentials(
            "redis: WRONGPASS invalid username-password pair"
        ));
        assert!(!refused_credentials("redis: Connection refused"));
    }
}

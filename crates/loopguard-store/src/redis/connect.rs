//! Connecting to Redis, and the health of the link: [`RedisOptions`], the connection the
//! whole store shares, the deadline every operation runs within, and the background
//! `PING` that decides when a failed link is usable again.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value,
};

use super::keys::Layout;
use super::scripts::Scripts;
use super::{RedisStore, RedisTarget};
use crate::{Cause, Limits, SharedClock, Store, StoreError};

/// Stripes of [`RedisStore::turns`] (a power of two).
pub(super) const TURNS: usize = 4096;

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
pub(super) enum Conn {
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

/// An error of the Redis client (`redis: …`).
#[derive(Debug, thiserror::Error)]
#[error("redis: {0}")]
pub(super) struct RedisFailure(#[source] pub(super) RedisError);

/// Redis did not answer a health `PING` in time.
#[derive(Debug, thiserror::Error)]
#[error("redis did not answer PING within {} ms", .0.as_millis())]
struct PingTimeout(Duration);

/// Why an operation failed at once: the link is down since `last` (see [`Shared::down`]).
#[derive(Debug, thiserror::Error)]
#[error("{last} (failing fast until redis answers again)")]
struct FailingFast {
    #[source]
    last: Cause,
}

/// Redis did not answer an operation within the deadline.
#[derive(Debug, thiserror::Error)]
#[error("redis did not answer within the deadline of {} ms", .0.as_millis())]
struct DeadlinePassed(Duration);

/// Redis has not been reached since the store started.
#[derive(Debug, thiserror::Error)]
#[error("redis not reachable yet")]
struct NotReachedYet;

/// State shared with the background tasks (health pings, registry refreshes).
#[derive(Default)]
pub(super) struct Shared {
    pub(super) healthy: AtomicBool,
    /// Why the link went down last.
    last_error: Mutex<Option<Cause>>,
    /// Live sessions as the registry counted them last.
    pub(super) sessions: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) conflicts: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) write_micros: AtomicU64,
}

impl Shared {
    pub(super) fn up(&self) {
        if !self.healthy.swap(true, Ordering::AcqRel) {
            tracing::info!(target: "loopguard::store", "redis reachable");
        }
    }

    /// The link to Redis failed (cannot connect, connection lost, no answer in time):
    /// operations fail fast until a health ping gets through again.
    pub(super) fn down(&self, cause: Cause) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::warn!(target: "loopguard::store", error = %cause, "redis unavailable; failing fast until it answers a ping");
        }
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause);
    }

    /// A command failed: a failure of the link (by the error's kind: I/O, timeout,
    /// connection dropped or refused) takes the store down; an error Redis answered with
    /// (out of memory, a read-only replica) fails only this operation.
    pub(super) fn fail(&self, e: &RedisError) -> StoreError {
        let cause: Cause = Arc::new(RedisFailure(e.clone()));
        if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            self.down(Arc::clone(&cause));
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        StoreError::Unavailable { source: cause }
    }

    /// Why the store is unavailable now.
    pub(super) fn last_error(&self) -> Cause {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| Arc::new(NotReachedYet))
    }
}

/// How often the health task pings a Redis that is down.
pub(super) const DOWN_PROBE: Duration = Duration::from_millis(100);

/// What a refusal at connection time says about the settings, by the error's kind: the
/// credentials (a wrong password, none where one is needed, an ACL user without the
/// rights) or another setting Redis refused while setting up the connection (a database
/// number it does not have). `None` for failures that may pass (unreachable, loading).
fn refused_settings(e: &RedisError) -> Option<&'static str> {
    match e.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            Some("refused the credentials")
        }
        ErrorKind::Extension if matches!(e.code(), Some("NOAUTH" | "WRONGPASS")) => {
            Some("refused the credentials")
        }
        ErrorKind::Server(ServerErrorKind::ResponseError) => {
            Some("refused the connection settings")
        }
        ErrorKind::InvalidClientConfig => Some("cannot be used with these settings"),
        _ => None,
    }
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
            return Err(StoreError::invalid(format!(
                "the Redis key prefix {:?} must not contain braces (they make hash tags)",
                options.prefix
            )));
        }
        let bad = |e: RedisError| StoreError::InvalidSettings {
            message: format!("cannot use {target}: {e}"),
            source: Some(Arc::new(RedisFailure(e))),
        };
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
            Ok(Err(e)) => match refused_settings(&e) {
                Some(refused) => {
                    return Err(StoreError::InvalidSettings {
                        message: format!("{} {refused}: {e}", store.target),
                        source: Some(Arc::new(RedisFailure(e))),
                    })
                }
                None => Err::<(), Cause>(Arc::new(RedisFailure(e))),
            },
            Err(_) => Err(Arc::new(PingTimeout(deadline)) as Cause),
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
            Err(cause) => {
                tracing::warn!(target: "loopguard::store", target = %store.target, error = %cause, "redis not reachable yet; serving as unavailable and retrying in the background");
                store.shared.down(cause);
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

    pub(super) fn start_pinger(&self) {
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
                    Ok(Err(e)) => shared.down(Arc::new(RedisFailure(e))),
                    Err(_) => shared.down(Arc::new(PingTimeout(deadline))),
                }
            }
        });
        *self.pinger.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    pub(super) fn open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        Ok(())
    }

    /// Runs `op` within the deadline, keeping the health flag and failure count. While
    /// the link to Redis is down, fails at once (the health task probes it).
    pub(super) async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.open()?;
        if !self.shared.healthy.load(Ordering::Acquire) {
            self.shared.failures.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::unavailable(FailingFast {
                last: self.shared.last_error(),
            }));
        }
        match tokio::time::timeout(self.options.deadline, op).await {
            Ok(result) => result,
            Err(_) => {
                let limit = self.options.deadline;
                self.shared.down(Arc::new(DeadlinePassed(limit)));
                Err(StoreError::Deadline { limit })
            }
        }
    }
}

//! # loopguard-server
//!
//! The loopguard sidecar: an HTTP service that agent runtimes in any language call around
//! each tool call, with its state in a [`Store`] (durable with
//! [`SqliteStore`](loopguard_store::SqliteStore), or in memory).
//!
//! ```no_run
//! use std::sync::Arc;
//! use loopguard::SystemClock;
//! use loopguard_server::{serve, shutdown_signal, App, Options};
//! use loopguard_store::{Limits, MemoryStore};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new(Limits::default(), Arc::new(SystemClock));
//! let app = Arc::new(App::new(store, Options::default())?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7671").await?;
//! let sweep_every = std::time::Duration::from_secs(60);
//! serve(app, listener, sweep_every, shutdown_signal()).await?;
//! # Ok(()) }
//! ```
//!
//! ## Endpoints
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/events` | one event, an array of events, or JSON Lines: the answers `loopguard replay` prints |
//! | `GET /v1/sessions/{session}` | a session's runs: history summary, armed guard, stop |
//! | `DELETE /v1/sessions/{session}` | end a session |
//! | `POST /v1/runs/end` | end a run (`{"session": ..., "run": ...}`) |
//! | `POST /v1/admin/reload` | re-read the config and token files (also on SIGHUP); behind the token |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness (the store takes writes) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /openapi.json` | the OpenAPI 3.1 document of all of the above |
//!
//! With a token configured, every request needs `Authorization: Bearer <token>`.
//!
//! ## What a request goes through
//!
//! A connection is bounded in number and in time ([`ConnectionLimits`],
//! `connections`); a request is authenticated, then its whole body is read within its
//! timeout, its size limit and the memory budget (`extract`), and only then does it
//! take one of the request slots (`tower`'s global concurrency limit) and reach its
//! handler, which answers `Result<AppJson<_>, ApiError>`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod auth;
mod budget;
mod connections;
mod error;
mod events;
mod extract;
mod metrics;
mod openapi;
mod ops;
mod sessions;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use loopguard_store::Store;
use tokio::net::TcpListener;
use tower::limit::GlobalConcurrencyLimitLayer;

pub use app::{
    App, ConnectionLimits, LoadError, Options, ReloadReport, RequestLimits, StoreFailure,
    RELOAD_DEADLINE,
};
pub use auth::{
    AuthError, Token, TokenError, TokenProblem, TokenSource, MAX_TOKEN_BYTES, MAX_TOKEN_FILE_BYTES,
};
pub use budget::{parse_cost, MAX_COST_PER_BODY_BYTE};
pub use error::ApiError;
pub use extract::AppJson;
pub use metrics::{Closed, Metrics, ROUTES};
pub use openapi::document as openapi_document;
pub use sessions::{
    GuardView, HistoryView, RecentCall, RunView, SessionView, StopView, RECENT_CALLS,
};

/// Every (method, path template) the router serves, as the OpenAPI document lists them.
pub const ENDPOINTS: &[(&str, &str)] = &[
    ("post", "/v1/events"),
    ("get", "/v1/sessions/{session}"),
    ("delete", "/v1/sessions/{session}"),
    ("post", "/v1/runs/end"),
    ("post", "/v1/admin/reload"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
];

/// The HTTP routes, with authentication, body reading, the request slots, metrics and
/// logs. The layers run from the last added to the first: `observe`, `authenticate`,
/// `read_body`, then (for the `/v1` routes) the request slots.
pub fn router<S: Store>(app: Arc<App<S>>) -> Router {
    let limits = app.limits();
    let slots = GlobalConcurrencyLimitLayer::new(limits.max_concurrent_requests.max(1));
    let api = Router::new()
        .route("/v1/events", post(events::post_events::<S>))
        .route(
            "/v1/sessions/{session}",
            get(sessions::get_session::<S>).delete(sessions::end_session::<S>),
        )
        .route("/v1/runs/end", post(sessions::end_run::<S>))
        .route("/v1/admin/reload", post(ops::reload::<S>))
        .layer(slots);
    Router::new()
        .merge(api)
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz::<S>))
        .route("/metrics", get(ops::metrics::<S>))
        .route("/openapi.json", get(ops::openapi))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            extract::read_body::<S>,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            authenticate::<S>,
        ))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            observe::<S>,
        ))
        .with_state(app)
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests in flight
/// finish and closes the store. Meanwhile it expires idle runs every `sweep_every` and
/// reloads the config on SIGHUP. The SIGHUP handler is installed when this is called, so
/// call it before announcing the server, then await it.
pub fn serve<S: Store>(
    app: Arc<App<S>>,
    listener: TcpListener,
    sweep_every: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> impl Future<Output = std::io::Result<()>> {
    let hangups = hangup_signal();
    async move {
        let sweeper = tokio::spawn(sweep(Arc::clone(&app), sweep_every));
        let reloader = tokio::spawn(reload_on_hangup(Arc::clone(&app), hangups));
        let limits = app.options().connections;
        connections::accept(
            listener,
            router(Arc::clone(&app)),
            limits,
            app.metrics_handle(),
            shutdown,
        )
        .await;
        sweeper.abort();
        reloader.abort();
        tracing::info!(target: "loopguard::server", "stopped taking requests; closing the store");
        if let Err(e) = app.store().close().await {
            tracing::error!(target: "loopguard::server", error = %e, "closing the store failed");
        }
        Ok(())
    }
}

/// Descriptors kept free below the open-file limit for the store, logs and listeners.
const RESERVED_FILES: u64 = 64;

/// The connection cap that fits the process' open-file limit: `wanted`, or the limit less a
/// reserve for the store's own files. First raises the soft limit to the hard one where
/// the system allows it (a server that may hold thousands of connections should not stop
/// at the common default of 1,024). Returns the cap and the soft limit now in force, when
/// the system has one.
pub fn connection_cap(wanted: usize) -> (usize, Option<u64>) {
    let Some(soft) = raise_open_file_limit() else {
        return (wanted, None);
    };
    let room = usize::try_from(soft.saturating_sub(RESERVED_FILES)).unwrap_or(usize::MAX);
    (wanted.min(room).max(1), Some(soft))
}

#[cfg(unix)]
fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limits = getrlimit(Resource::Nofile);
    let soft = limits.current?;
    let hard = limits.maximum;
    if hard.is_some_and(|h| h <= soft) {
        return Some(soft);
    }
    let raised = rustix::process::Rlimit {
        current: hard,
        maximum: hard,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            let now = getrlimit(Resource::Nofile).current.unwrap_or(soft);
            tracing::debug!(target: "loopguard::server", from = soft, to = now, "raised the open-file limit");
            Some(now)
        }
        Err(_) => Some(soft),
    }
}

#[cfg(not(unix))]
fn raise_open_file_limit() -> Option<u64> {
    None
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is
/// called, not when the future is first polled: a signal that arrives in between is not
/// lost (and does not kill the process with the default action).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let (mut interrupt, mut terminate) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            tokio::select! {
                () = wait(interrupt.as_mut()) => {}
                () = wait(terminate.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!(target: "loopguard::server", "shutdown requested");
    }
}

/// Waits for one delivery of `signal`, or forever when it could not be installed.
#[cfg(unix)]
async fn wait(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

#[cfg(unix)]
fn hangup_signal() -> Hangups {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
fn hangup_signal() -> Hangups {}

async fn sweep<S: Store>(app: Arc<App<S>>, every: Duration) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        match app.store().expire_idle().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(target: "loopguard::server", runs = n, "expired idle runs"),
            Err(e) => {
                tracing::warn!(target: "loopguard::server", error = %e, "expiring idle runs failed")
            }
        }
    }
}

#[cfg(unix)]
async fn reload_on_hangup<S: Store>(app: Arc<App<S>>, hangups: Hangups) {
    let Some(mut hangups) = hangups else {
        tracing::warn!(target: "loopguard::server", "cannot listen for SIGHUP; reload with POST /v1/admin/reload");
        return;
    };
    while hangups.recv().await.is_some() {
        tracing::info!(target: "loopguard::server", "SIGHUP: reloading");
        let _ = app.reload().await;
    }
}

#[cfg(not(unix))]
async fn reload_on_hangup<S: Store>(_app: Arc<App<S>>, _hangups: Hangups) {}

async fn authenticate<S: Store>(
    State(app): State<Arc<App<S>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = app.token() {
        if let Err(refused) = token.check(request.headers()) {
            return refused.into_response();
        }
    }
    next.run(request).await
}

async fn observe<S: Store>(
    State(app): State<Arc<App<S>>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| ROUTES.iter().copied().find(|r| *r == p.as_str()))
        .unwrap_or("other");
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let elapsed = started.elapsed();
    app.metrics().request(route, status.as_u16(), elapsed);
    if status.is_server_error() {
        tracing::warn!(target: "loopguard::server", %method, route, status = status.as_u16(), ms = elapsed.as_secs_f64() * 1e3, "request failed");
    } else {
        tracing::debug!(target: "loopguard::server", %method, route, status = status.as_u16(), ms = elapsed.as_secs_f64() * 1e3, "request");
    }
    response
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod tests;

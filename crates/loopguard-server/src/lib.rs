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
//! | `POST /v1/admin/reload` | re-read the config and token files (also on SIGHUP) |
//! | `GET /healthz`, `GET /readyz` | liveness; readiness (the store takes writes) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /openapi.json` | the OpenAPI 3.1 document of all of the above |
//!
//! With a token configured, every request needs `Authorization: Bearer <token>`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod app;
mod auth;
mod error;
mod events;
mod metrics;
mod sessions;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use loopguard_store::Store;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use app::{App, Options, ReloadReport, RequestLimits, StoreFailure};
pub use auth::{AuthError, Token, TokenSource, MAX_TOKEN_BYTES};
pub use error::ApiError;
pub use metrics::{Metrics, ROUTES};
pub use sessions::{
    GuardView, HistoryView, RecentCall, RunView, SessionView, StopView, RECENT_CALLS,
};

/// The OpenAPI document served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

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

/// The HTTP routes, with authentication, the concurrency limit, metrics and logs.
pub fn router<S: Store>(app: Arc<App<S>>) -> Router {
    let limiter = Arc::new(Semaphore::new(app.limits().max_concurrent_requests.max(1)));
    Router::new()
        .route("/v1/events", post(events::post_events::<S>))
        .route(
            "/v1/sessions/{session}",
            get(sessions::get_session::<S>).delete(sessions::end_session::<S>),
        )
        .route("/v1/runs/end", post(sessions::end_run::<S>))
        .route("/v1/admin/reload", post(reload::<S>))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            authenticate::<S>,
        ))
        .layer(middleware::from_fn_with_state(
            (Arc::clone(&app), limiter),
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
        use axum::serve::ListenerExt;
        let sweeper = tokio::spawn(sweep(Arc::clone(&app), sweep_every));
        let reloader = tokio::spawn(reload_on_hangup(Arc::clone(&app), hangups));
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let served = axum::serve(listener, router(Arc::clone(&app)))
            .with_graceful_shutdown(shutdown)
            .await;
        sweeper.abort();
        reloader.abort();
        tracing::info!(target: "loopguard::server", "stopped taking requests; closing the store");
        if let Err(e) = app.store().close().await {
            tracing::error!(target: "loopguard::server", error = %e, "closing the store failed");
        }
        served
    }
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
    State((app, limiter)): State<(Arc<App<S>>, Arc<Semaphore>)>,
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
    // The semaphore is never closed; should it be, go on without a permit.
    let _permit = limiter.acquire().await.ok();
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

async fn reload<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    match app.reload().await {
        Ok(report) => {
            let mut body = serde_json::to_value(&report).unwrap_or_default();
            body["reloaded"] = json!(true);
            error::json_value(StatusCode::OK, &body)
        }
        Err(problems) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "config not reloaded; the previous config stays in force: {}",
                problems.replace('\n', "; ")
            ),
        )
        .into_response(),
    }
}

async fn healthz() -> Response {
    error::json_value(StatusCode::OK, &json!({"status": "ok"}))
}

/// Ready when the store takes writes. When it does not: 503, unless the server answers
/// fail-open, which it can do without the store: then 200 with `"status": "degraded"`.
async fn readyz<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    match app.store().check() {
        Ok(()) => error::json_value(StatusCode::OK, &json!({"status": "ready"})),
        Err(e) if app.options().on_store_failure == StoreFailure::FailOpen => error::json_value(
            StatusCode::OK,
            &json!({"status": "degraded", "error": e.to_string()}),
        ),
        Err(e) => error::json_value(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unavailable", "error": e.to_string()}),
        ),
    }
}

async fn metrics<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    let store_up = app.store().check().is_ok();
    let text = app.metrics().render(&app.store().stats(), store_up);
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn openapi() -> Response {
    error::json_response(StatusCode::OK, OPENAPI.as_bytes().to_vec())
}

async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {method} {}; see /openapi.json",
            uri.path()
        ),
    )
    .into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {}; see /openapi.json",
            uri.path()
        ),
    )
    .into_response()
}

#[cfg(test)]
mod failure_tests;
#[cfg(test)]
mod tests;

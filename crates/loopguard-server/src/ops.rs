//! The operational endpoints: health, readiness, metrics, the OpenAPI document, config
//! reload, and the JSON answers for unknown routes and methods.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use loopguard_store::Store;
use serde::Serialize;

use crate::app::{App, ReloadReport, StoreFailure};
use crate::error::ApiError;
use crate::extract::AppJson;

/// Answer of `POST /v1/admin/reload`.
#[derive(Serialize)]
pub(crate) struct Reloaded {
    #[serde(flatten)]
    report: ReloadReport,
    reloaded: bool,
}

pub(crate) async fn reload<S: Store>(
    State(app): State<Arc<App<S>>>,
) -> Result<AppJson<Reloaded>, ApiError> {
    if app.token().is_none() && !app.options().reload_without_token {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "POST /v1/admin/reload is off: the server has no token. Reload with SIGHUP, \
             or give the server a token (--token-file or LOOPGUARD_TOKEN), or start it with \
             --reload-without-token",
        ));
    }
    match app.reload().await {
        Ok(report) => Ok(AppJson(Reloaded {
            report,
            reloaded: true,
        })),
        Err(problems) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "config not reloaded; the previous config stays in force: {}",
                problems.to_string().replace('\n', "; ")
            ),
        )),
    }
}

/// Answer of `GET /healthz` and `GET /readyz`.
#[derive(Serialize)]
pub(crate) struct Health {
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(crate) async fn healthz() -> AppJson<Health> {
    AppJson(Health {
        status: "ok",
        error: None,
    })
}

/// Ready when the store takes writes. When it does not: 503, unless the server answers
/// fail-open, which it can do without the store: then 200 with `"status": "degraded"`.
pub(crate) async fn readyz<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    match app.store().check() {
        Ok(()) => AppJson(Health {
            status: "ready",
            error: None,
        })
        .into_response(),
        Err(e) if app.options().on_store_failure == StoreFailure::FailOpen => AppJson(Health {
            status: "degraded",
            error: Some(e.to_string()),
        })
        .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            AppJson(Health {
                status: "unavailable",
                error: Some(e.to_string()),
            }),
        )
            .into_response(),
    }
}

pub(crate) async fn metrics<S: Store>(State(app): State<Arc<App<S>>>) -> Response {
    let store_up = app.store().check().is_ok();
    let text = app.metrics().render(&app.store().stats(), store_up);
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

pub(crate) async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

pub(crate) async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {method} {}; see /openapi.json",
            uri.path()
        ),
    )
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {}; see /openapi.json",
            uri.path()
        ),
    )
}

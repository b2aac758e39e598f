//! Request bodies, the server's way.
//!
//! - [`read_body`] (a middleware, before a request takes a slot): the whole body arrives
//!   within [`RequestLimits::body_timeout`](crate::RequestLimits) and the size limit, and
//!   within the memory budget; then the request reserves what parsing it costs. So a slow
//!   or oversized body holds no request slot and no parse memory.
//! - [`AppJson`]: a JSON body parsed into a type, whatever the `Content-Type` (hosts send
//!   `text/plain` and worse), refused with an [`ApiError`] that says what is wrong; and a
//!   JSON answer.
//! - [`EventsBody`]: the body of `POST /v1/events`: JSON, or JSON Lines by its media type.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::BytesMut;
use http_body_util::BodyExt;
use loopguard::json::Document;
use loopguard_events::json_fault;
use loopguard_store::Store;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::app::App;
use crate::budget::{parse_cost, MAX_COST_PER_BODY_BYTE};
use crate::error::{json_response, ApiError};

/// Media types that select JSON Lines.
const NDJSON_TYPES: &[&str] = &[
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "application/jsonlines",
];

/// Reads the whole body before the request goes on (see the module docs), holding the
/// memory it reserves until the answer is built.
pub(crate) async fn read_body<S: Store>(
    State(app): State<Arc<App<S>>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let limits = app.limits();
    let limit = limits.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = axum::body::HttpBody::size_hint(&body).exact();
    if declared == Some(0) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large().into_response();
    }
    let budget = app.budget();
    let deadline = tokio::time::Instant::now() + limits.body_timeout;
    let mut body = body;
    // A body that comes in one frame is kept as it came; one in several is gathered into
    // one buffer of the declared size (a chunked body grows its own).
    let mut first: Option<Bytes> = None;
    let mut buffer = BytesMut::new();
    let arrived = loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                break Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the request body did not arrive within {} ms",
                        limits.body_timeout.as_millis()
                    ),
                ))
            }
            Ok(None) => break Ok(()),
            Ok(Some(Err(e))) => {
                break Err(ApiError::bad_request(format!(
                    "cannot read the request body: {e}"
                )))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let held = first.as_ref().map_or(buffer.len(), Bytes::len);
        if held + data.len() > limit {
            break Err(too_large());
        }
        if !budget.arrive(data.len()) {
            break Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is receiving too many request bodies at once (its memory budget is full); retry",
            ));
        }
        match first.take() {
            None if buffer.is_empty() => first = Some(data),
            None => buffer.extend_from_slice(&data),
            Some(earlier) => {
                buffer.reserve(
                    declared
                        .map_or(0, |n| n as usize)
                        .max(earlier.len() + data.len()),
                );
                buffer.extend_from_slice(&earlier);
                buffer.extend_from_slice(&data);
            }
        }
    };
    let bytes = first.unwrap_or_else(|| buffer.freeze());
    let size = bytes.len();
    if let Err(refused) = arrived {
        budget.leave(size);
        return refused.into_response();
    }
    let cost = parse_cost(&bytes);
    if cost > budget.limit() {
        budget.leave(size);
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "parsing this body could take {} MiB of memory (bounded from its text: up to {} N for a body of N bytes, by its shape), more than the server's budget of {} MiB; send its events in smaller requests",
                cost >> 20,
                MAX_COST_PER_BODY_BYTE,
                budget.limit() >> 20
            ),
        )
        .into_response();
    }
    let reservation = budget.reserve(cost).await;
    budget.leave(size);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    drop(reservation);
    budget.after(cost, app.options().release_memory);
    response
}

/// A JSON request body or answer. As an extractor it reads the body (any
/// `Content-Type`) and parses it, refusing with 400 and the parser's words; as an answer it
/// is the value serialized with `Content-Type: application/json`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppJson<T>(pub T);

/// Bodies larger than this are parsed on a blocking thread: parsing megabytes takes long
/// enough to hold up the other connections of a runtime worker.
const PARSE_APART_ABOVE: usize = 256 << 10;

impl<T: DeserializeOwned + Send + 'static, S: Send + Sync> FromRequest<S> for AppJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await?;
        if bytes.len() <= PARSE_APART_ABOVE {
            return parse(&bytes).map(Self);
        }
        tokio::task::spawn_blocking(move || parse(&bytes))
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("parsing the body failed: {e}"),
                )
            })?
            .map(Self)
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(if e.is_syntax() || e.is_eof() {
            json_error(&e)
        } else {
            format!("invalid body: {e}")
        })
    })
}

impl<T: Serialize> IntoResponse for AppJson<T> {
    fn into_response(self) -> Response {
        let mut out = Vec::with_capacity(256);
        match serde_json::to_writer(&mut out, &self.0) {
            Ok(()) => json_response(StatusCode::OK, out),
            Err(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the answer: {e}"),
            )
            .into_response(),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        match rejection.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the request body is larger than the limit",
            ),
            _ => Self::bad_request(format!(
                "cannot read the request body: {}",
                rejection.body_text()
            )),
        }
    }
}

/// The body of `POST /v1/events`.
pub(crate) enum EventsBody {
    /// One event or an array of them, tokenized without a value tree: valid JSON that a
    /// `serde_json::Value` cannot hold (nesting past its limit, `1e999`, a lone surrogate
    /// escape) is read and guarded, not refused or waved through.
    Json(Document),
    /// JSON Lines, read line by line as `loopguard replay` reads a file.
    Lines(Bytes),
}

impl<S: Send + Sync> FromRequest<S> for EventsBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if is_ndjson(request.headers()) {
            return Ok(Self::Lines(Bytes::from_request(request, state).await?));
        }
        let bytes = Bytes::from_request(request, state).await?;
        if bytes.len() <= PARSE_APART_ABOVE {
            return parse_document(bytes).map(Self::Json);
        }
        tokio::task::spawn_blocking(move || parse_document(bytes))
            .await
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("parsing the body failed: {e}"),
                )
            })?
            .map(Self::Json)
    }
}

/// A body tokenized into a [`Document`]; invalid JSON is refused in `serde_json`'s words
/// where it has them (as the other endpoints say it).
fn parse_document(bytes: Bytes) -> Result<Document, ApiError> {
    let refuse = |bytes: &[u8], found: String| {
        ApiError::bad_request(match json_fault(bytes) {
            Some(e) => json_error(&e),
            None => format!("invalid JSON: {found}"),
        })
    };
    // `Vec::from` takes the buffer over when the body owns it alone (no copy).
    let text = String::from_utf8(Vec::from(bytes)).map_err(|e| {
        let found = format!(
            "the body is not valid UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        );
        refuse(e.as_bytes(), found)
    })?;
    Document::parse(text).map_err(|(e, text)| refuse(text.as_bytes(), e.to_string()))
}

fn is_ndjson(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = value.split(';').next().unwrap_or("").trim();
    NDJSON_TYPES.iter().any(|t| media.eq_ignore_ascii_case(t))
}

/// A JSON parse error, in words.
pub(crate) fn json_error(e: &serde_json::Error) -> String {
    if e.to_string().contains("recursion limit") {
        return format!(
            "invalid JSON: nested deeper than {} levels (line {}, column {})",
            loopguard_events::MAX_DEPTH,
            e.line(),
            e.column()
        );
    }
    format!("invalid JSON: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn content_types_select_the_mode() {
        let mut h = HeaderMap::new();
        assert!(!is_ndjson(&h));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/X-NDJSON; charset=utf-8"),
        );
        assert!(is_ndjson(&h));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(!is_ndjson(&h));
    }
}

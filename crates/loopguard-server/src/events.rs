//! `POST /v1/events`: the replay event format (SPEC §7) over HTTP.
//!
//! - `application/json` (or any type other than the JSON Lines ones): one event object, or
//!   an array of them (the parallel tool calls of one assistant message, say), evaluated
//!   in order. Every event is checked before any is applied: an invalid one makes the
//!   whole request a 400 whose body is what `loopguard replay` prints for it
//!   (`{"seq": N, "error": "..."}`), and nothing is applied. The answer is the output
//!   object of the event (an array of them for an array), `seq` being the position in the
//!   request (1-based). An event the engine itself refuses (a result naming no pending
//!   call) is answered with its error object in place: status 422 for a single event,
//!   200 inside an array (the other events were applied).
//! - `application/x-ndjson` (also `application/ndjson`, `application/jsonl`,
//!   `application/x-jsonlines`): exactly `loopguard replay` over the body: one answer
//!   line per non-blank line, `seq` the line number, invalid lines answered in place.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use loopguard::{ConfigSet, RunState};
use loopguard_events::{apply_to_run, from_value, parse_line, scope_of, Answer, Event};
use loopguard_store::{RunKey, Store, StoreError};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use crate::app::{App, StoreFailure};
use crate::error::{json_value, status_of, ApiError};

/// Media types that select JSON Lines.
const NDJSON_TYPES: &[&str] = &[
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "application/jsonlines",
];

pub(crate) async fn post_events<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = async {
        let bytes = read_body(body, &headers, app.limits().max_body_bytes).await?;
        if is_ndjson(&headers) {
            ndjson(&app, &bytes).await
        } else {
            json(&app, &bytes).await
        }
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Reads a whole body, refusing (413) one larger than `limit` before reading it when it
/// says its length, and as soon as it passes the limit otherwise.
pub(crate) async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
    }
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

/// Refuses ids longer than `max` bytes.
fn check_ids(event: &Event, max: usize) -> Result<(), String> {
    let ids = event.ids();
    let (call_id, tool) = match event {
        Event::Call { call_id, tool, .. } => (call_id.as_deref(), Some(tool.as_str())),
        Event::Result { call_id, tool, .. } => (call_id.as_deref(), tool.as_deref()),
        Event::Compaction { .. } => (None, None),
    };
    let fields = [
        ("session", Some(ids.session.as_str())),
        ("run", ids.run.as_deref()),
        ("agent", ids.agent.as_deref()),
        ("call_id", call_id),
        ("tool", tool),
    ];
    for (name, value) in fields {
        if let Some(v) = value.filter(|v| v.len() > max) {
            return Err(format!(
                "{name} is {} bytes long, more than the limit of {max}",
                v.len()
            ));
        }
    }
    Ok(())
}

fn check_count(n: usize, max: usize) -> Result<(), ApiError> {
    if n > max {
        return Err(ApiError::bad_request(format!(
            "{n} events in one request, more than the limit of {max}"
        )));
    }
    Ok(())
}

async fn json<S: Store>(app: &App<S>, bytes: &[u8]) -> Result<Response, ApiError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(json_error(&e)))?;
    let (single, values) = match value {
        Value::Object(_) => (true, vec![value]),
        Value::Array(items) => (false, items),
        other => {
            return Err(ApiError::bad_request(format!(
                "the body must be an event object or an array of event objects, not {}",
                loopguard_events::kind_of(&other)
            )))
        }
    };
    check_count(values.len(), app.limits().max_events_per_request)?;
    let max_id = app.limits().max_id_bytes;
    let mut events = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        let seq = i as u64 + 1;
        let event = from_value(value)
            .and_then(|e| check_ids(&e, max_id).map(|()| e))
            .map_err(|message| {
                app.metrics().invalid();
                ApiError::invalid_event(seq, message)
            })?;
        events.push((seq, event));
    }
    let answers = apply(app, &events).await?;
    if single {
        let answer = &answers[0];
        let status = if answer.is_error() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::OK
        };
        return Ok(json_value(status, answer));
    }
    Ok(json_value(StatusCode::OK, &answers))
}

async fn ndjson<S: Store>(app: &App<S>, bytes: &[u8]) -> Result<Response, ApiError> {
    let max_id = app.limits().max_id_bytes;
    let max_events = app.limits().max_events_per_request;
    let mut events = Vec::new();
    let mut invalid = Vec::new();
    let mut count = 0;
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        count += 1;
        check_count(count, max_events)?;
        let seq = i as u64 + 1;
        match parse_line(line).and_then(|e| check_ids(&e, max_id).map(|()| e)) {
            Ok(event) => events.push((seq, event)),
            Err(error) => invalid.push(Answer::Invalid { seq, error }),
        }
    }
    let answers = apply(app, &events).await?;
    for answer in &invalid {
        app.metrics().answer(answer);
    }
    // Both lists are in seq order: merge them.
    let mut out = Vec::with_capacity(bytes.len().min(1 << 20) / 4 + 64);
    let mut invalid = invalid.into_iter().map(Out::Answer).peekable();
    let write = |a: &Out, out: &mut Vec<u8>| -> Result<(), ApiError> {
        serde_json::to_writer(&mut *out, a).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode: {e}"),
            )
        })?;
        out.push(b'\n');
        Ok(())
    };
    for answer in &answers {
        while let Some(bad) = invalid.next_if(|b| b.seq() < answer.seq()) {
            write(&bad, &mut out)?;
        }
        write(answer, &mut out)?;
    }
    for bad in invalid {
        write(&bad, &mut out)?;
    }
    let mut response = (StatusCode::OK, out).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

/// The answer to one valid event: the engine's (through the store), or, when the store
/// failed in fail-open mode, an allowing answer marked `"degraded": true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    /// What `apply_to_run` answered (or an invalid line, in JSON Lines).
    Answer(Answer),
    /// Answered without the store.
    Degraded(Degraded),
}

impl Out {
    fn seq(&self) -> u64 {
        match self {
            Self::Answer(
                Answer::Call { seq, .. }
                | Answer::Result { seq, .. }
                | Answer::Compaction { seq, .. }
                | Answer::Invalid { seq, .. },
            ) => *seq,
            Self::Degraded(d) => d.seq,
        }
    }

    fn is_error(&self) -> bool {
        matches!(self, Self::Answer(a) if a.is_error())
    }
}

impl Serialize for Out {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Answer(a) => a.serialize(serializer),
            Self::Degraded(d) => d.serialize(serializer),
        }
    }
}

/// An event answered without the store (fail-open): the answer of a guard that saw
/// nothing wrong, marked `"degraded": true`. Nothing was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Degraded {
    seq: u64,
    kind: &'static str,
    session: String,
    run: Option<String>,
}

impl Degraded {
    fn of(seq: u64, event: &Event, default_agent: Option<&str>) -> Self {
        let scope = scope_of(event, default_agent);
        let kind = match event {
            Event::Call { .. } => "call",
            Event::Result { .. } => "result",
            Event::Compaction { .. } => "compaction",
        };
        Self {
            seq,
            kind,
            session: scope.session().to_owned(),
            run: scope.run().map(str::to_owned),
        }
    }
}

impl Serialize for Degraded {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(None)?;
        m.serialize_entry("seq", &self.seq)?;
        m.serialize_entry("type", self.kind)?;
        m.serialize_entry("session", &self.session)?;
        m.serialize_entry("run", &self.run)?;
        match self.kind {
            "call" => m.serialize_entry("verdict", "allow")?,
            "result" => {
                m.serialize_entry("recorded", &false)?;
                m.serialize_entry("abort", &())?;
            }
            _ => m.serialize_entry("armed", &0)?,
        }
        m.serialize_entry("degraded", &true)?;
        m.end()
    }
}

/// Runs a store operation within the request's deadline (from `started`), if any.
pub(crate) async fn within<T>(
    deadline: Option<(tokio::time::Instant, Duration)>,
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        None => op.await,
        Some((at, limit)) => tokio::time::timeout_at(at, op)
            .await
            .unwrap_or(Err(StoreError::Deadline { limit })),
    }
}

/// The deadline of a request that starts now.
pub(crate) fn deadline_of<S: Store>(app: &App<S>) -> Option<(tokio::time::Instant, Duration)> {
    app.options()
        .store_deadline
        .map(|d| (tokio::time::Instant::now() + d, d))
}

/// The store operation of one event: its key, and the closure that applies it.
fn operation<'a>(
    config: &'a ConfigSet,
    default_agent: Option<&'a str>,
    seq: u64,
    event: &'a Event,
) -> (
    RunKey<'a>,
    impl FnMut(&mut RunState, u64) -> Answer + Send + 'a,
) {
    let scope = scope_of(event, default_agent);
    let cfg = config.for_agent(scope.agent());
    let f = move |run: &mut RunState, now: u64| apply_to_run(run, cfg, &scope, seq, event, now);
    (RunKey::of(&scope), f)
}

/// Applies valid events in order through the store; each answer is exactly
/// `apply_to_run`'s. When the store fails: fail-closed, the request fails (503); fail-open,
/// the failing event and every later one of the request are answered degraded (once the
/// store failed, waiting for it again for each event would only hold the request up).
async fn apply<S: Store>(app: &App<S>, events: &[(u64, Event)]) -> Result<Vec<Out>, ApiError> {
    let config = app.config();
    let default_agent = app.options().default_agent.as_deref();
    let deadline = deadline_of(app);
    let op = |seq: u64, event| operation(&config, default_agent, seq, event);
    if app.options().on_store_failure == StoreFailure::FailClosed {
        let ops: Vec<_> = events.iter().map(|(seq, event)| op(*seq, event)).collect();
        let answers = within(deadline, app.store().update_all(ops)).await?;
        for answer in &answers {
            app.metrics().answer(answer);
        }
        return Ok(answers.into_iter().map(Out::Answer).collect());
    }
    let mut out = Vec::with_capacity(events.len());
    let mut failed = false;
    for (seq, event) in events {
        if !failed {
            let (key, f) = op(*seq, event);
            match within(deadline, app.store().update(key, f)).await {
                Ok(answer) => {
                    app.metrics().answer(&answer);
                    out.push(Out::Answer(answer));
                    continue;
                }
                Err(e) if status_of(&e) == StatusCode::SERVICE_UNAVAILABLE => {
                    tracing::warn!(target: "loopguard::server", error = %e, events = events.len() - out.len(), "store failed; answering fail-open (degraded)");
                    failed = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let degraded = Degraded::of(*seq, event, default_agent);
        app.metrics().degraded(degraded.kind);
        out.push(Out::Degraded(degraded));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard_events::parse_line;

    #[test]
    fn ids_are_capped() {
        let long = "x".repeat(300);
        let line = format!(r#"{{"type":"call","tool":"t","run":"{long}"}}"#);
        let e = parse_line(line.as_bytes()).unwrap();
        assert_eq!(
            check_ids(&e, 256).unwrap_err(),
            "run is 300 bytes long, more than the limit of 256"
        );
        assert!(check_ids(&e, 300).is_ok());
        let line = format!(r#"{{"type":"result","call_id":"{long}"}}"#);
        assert!(check_ids(&parse_line(line.as_bytes()).unwrap(), 10)
            .unwrap_err()
            .starts_with("call_id"));
    }

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

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
//!
//! ## When the store refuses an event
//!
//! Each event gets its own outcome, so that a client knows which to send again. When the
//! store cannot take an event (the session limit, 429; a failure, 503), that event and the
//! later ones of the request are not applied. If none of the request's events was applied,
//! the whole request is answered with that status (and `Retry-After: 1`), and sending it
//! again is safe. Otherwise the answer is 200 and each event not applied is answered in
//! place with `{"seq", "error", "status"}`: send those again, and only those. (With
//! `fail-open`, an event the store failed is answered degraded instead: allowed, and
//! usually recorded nowhere, unless the store applied it after the deadline.)

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use loopguard::json::{kind_name, Document, Json, Kind, Raw, Tape};
use loopguard::{ConfigSet, Millis, RunState, SessionState};
use loopguard_events::{apply_event, from_raw, parse_raw, Answer, RawEvent};
use loopguard_store::{Deadline, RunKey, Store, StoreError};
use serde::Serialize;

use crate::app::{App, StoreFailure};
use crate::error::{json_response, status_of, ApiError};
use crate::extract::{AppJson, EventsBody};

pub(crate) async fn post_events<S: Store>(
    State(app): State<Arc<App<S>>>,
    body: EventsBody,
) -> Result<Response, ApiError> {
    match body {
        EventsBody::Json(document) => json(&app, &document).await,
        EventsBody::Lines(bytes) => ndjson(&app, &bytes).await,
    }
}

/// Refuses ids longer than `max` bytes.
fn check_ids(event: &RawEvent<'_>, max: usize) -> Result<(), String> {
    let ids = event.ids();
    let (call_id, tool) = event.call_id_and_tool();
    let (usage_id, model) = match event {
        RawEvent::Usage { usage, .. } => (usage.id, usage.model),
        _ => (None, None),
    };
    let fields = [
        ("session", Some(ids.session)),
        ("run", ids.run),
        ("agent", ids.agent),
        ("parent_session", ids.parent_session),
        ("parent_run", ids.parent_run),
        ("call_id", call_id),
        ("tool", tool),
        ("id", usage_id.or(event.message_id())),
        ("model", model),
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

async fn json<S: Store>(app: &App<S>, document: &Document) -> Result<Response, ApiError> {
    let root = document.root();
    let (single, values): (bool, Vec<Raw<'_>>) = match root.kind() {
        Kind::Object(_) => (true, vec![root]),
        Kind::Array(items) => (false, items.collect()),
        _ => {
            return Err(ApiError::bad_request(format!(
                "the body must be an event object or an array of event objects, not {}",
                kind_name(root)
            )))
        }
    };
    check_count(values.len(), app.limits().max_events_per_request)?;
    let max_id = app.limits().max_id_bytes;
    let mut events = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        let seq = i as u64 + 1;
        let event = from_raw(value)
            .and_then(|e| check_ids(&e, max_id).map(|()| e))
            .map_err(|message| {
                app.metrics().invalid();
                ApiError::invalid_event(seq, message)
            })?;
        events.push((seq, event));
    }
    let mut answers = apply(app, &events).await?;
    if single {
        let answer = answers
            .pop()
            .ok_or_else(|| ApiError::bad_request("no event"))?;
        let status = if answer.is_error() {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::OK
        };
        return Ok((status, AppJson(answer)).into_response());
    }
    Ok(AppJson(answers).into_response())
}

async fn ndjson<S: Store>(app: &App<S>, bytes: &[u8]) -> Result<Response, ApiError> {
    let max_id = app.limits().max_id_bytes;
    let max_events = app.limits().max_events_per_request;
    let mut lines = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        check_count(lines.len() + 1, max_events)?;
        lines.push((i as u64 + 1, line));
    }
    // A tape per line: the events of the request are all alive until they are applied.
    let mut tapes: Vec<Tape> = lines.iter().map(|_| Tape::new()).collect();
    let mut events = Vec::with_capacity(lines.len());
    let mut invalid = Vec::new();
    for (&(seq, line), tape) in lines.iter().zip(tapes.iter_mut()) {
        match parse_raw(line, tape).and_then(|e| check_ids(&e, max_id).map(|()| e)) {
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
    let mut response = json_response(StatusCode::OK, out);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

/// The outcome of one valid event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Out {
    /// What `apply_event` answered (or an invalid line, in JSON Lines).
    Answer(Answer),
    /// Answered without the store (fail-open).
    Degraded(Degraded),
    /// Not applied: the store refused it, or an earlier event of the request.
    NotApplied(NotApplied),
}

impl Out {
    fn seq(&self) -> u64 {
        match self {
            Self::Answer(
                Answer::Call { seq, .. }
                | Answer::Result { seq, .. }
                | Answer::Compaction { seq, .. }
                | Answer::Usage { seq, .. }
                | Answer::Message { seq, .. }
                | Answer::Invalid { seq, .. },
            ) => *seq,
            Self::Degraded(d) => d.seq,
            Self::NotApplied(n) => n.seq,
        }
    }

    fn is_error(&self) -> bool {
        matches!(self, Self::Answer(a) if a.is_error())
    }
}

/// An event answered without the store (fail-open): the answer of a guard that saw
/// nothing wrong, marked `"degraded": true`. Usually nothing was recorded; a write the
/// store applied after the deadline had passed is in the history all the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Degraded {
    seq: u64,
    #[serde(rename = "type")]
    kind: &'static str,
    session: String,
    run: Option<String>,
    #[serde(flatten)]
    allowed: Allowed,
    degraded: bool,
}

/// What a guard that saw nothing wrong answers, per event type (a message as a call).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
enum Allowed {
    Call {
        verdict: &'static str,
    },
    Result {
        recorded: bool,
        abort: Option<()>,
    },
    Compaction {
        armed: u32,
    },
    Usage {
        counted: bool,
        cost: Option<()>,
        stop: Option<()>,
    },
}

impl Degraded {
    fn of(seq: u64, event: &RawEvent<'_>, default_agent: Option<&str>) -> Self {
        let scope = event.scope(default_agent);
        let kind = event.kind();
        let allowed = match event {
            RawEvent::Call { .. } | RawEvent::Message { .. } => Allowed::Call { verdict: "allow" },
            RawEvent::Result { .. } => Allowed::Result {
                recorded: false,
                abort: None,
            },
            RawEvent::Compaction { .. } => Allowed::Compaction { armed: 0 },
            // Not counted: a budget cannot hold while its store is down.
            RawEvent::Usage { .. } => Allowed::Usage {
                counted: false,
                cost: None,
                stop: None,
            },
        };
        Self {
            seq,
            kind,
            session: scope.session().to_owned(),
            run: scope.run().map(str::to_owned),
            allowed,
            degraded: true,
        }
    }
}

/// An event the store did not apply: send it again (after `Retry-After`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct NotApplied {
    seq: u64,
    error: String,
    status: u16,
}

/// The store operation of one event: its key, and the closure that applies it.
fn operation<'a>(
    config: &'a ConfigSet,
    default_agent: Option<&'a str>,
    seq: u64,
    event: &'a RawEvent<'a>,
) -> (
    RunKey<'a>,
    impl FnMut(&mut RunState, &mut SessionState, Millis) -> Answer + Send + 'a,
) {
    let scope = event.scope(default_agent);
    let cfg = config.for_agent(scope.agent());
    let f = move |run: &mut RunState, session: &mut SessionState, now: Millis| {
        apply_event(run, session, cfg, &scope, event, now).into_answer(seq, &scope)
    };
    (RunKey::of(&scope), f)
}

/// `agent_tree`: the limits in force, when `event` is a sub-agent's call (a call whose
/// scope names a parent) and the detector is on.
fn sub_agent_call(
    config: &ConfigSet,
    default_agent: Option<&str>,
    event: &RawEvent<'_>,
) -> Option<loopguard::tree::AgentTree> {
    if !matches!(event, RawEvent::Call { .. }) {
        return None;
    }
    let scope = event.scope(default_agent);
    scope.parent_session()?;
    config.for_agent(scope.agent()).agent_tree()
}

/// `agent_tree`, before a sub-agent's call is applied: its session is linked into its tree
/// at its first call, the tree's root judging the spawn, each step an atomic update of one
/// session's state. A step the store fails is left out (the event itself then meets the
/// same store).
async fn link_child<S: Store>(
    app: &App<S>,
    tree: &loopguard::tree::AgentTree,
    scope: &loopguard::Scope<'_>,
    signature: impl FnOnce() -> loopguard::Signature,
) {
    let Some(parent) = scope.parent_session() else {
        return;
    };
    let store = app.store();
    let linked = async {
        let child = store.session_state(scope.session()).await?;
        if child.as_ref().is_some_and(loopguard::tree::is_linked) {
            return Ok(());
        }
        let parent = store.session_state(parent).await?;
        let plan = loopguard::tree::plan_link(scope, signature, None, parent.as_ref());
        let Some((root, task)) = plan else {
            return Ok(());
        };
        let spawn = store
            .update_session(&root, |s, now| s.spawn_child(tree, scope, task, now))
            .await?;
        store
            .update_session(scope.session(), |s, now| s.link_to(&root, spawn, now))
            .await
    };
    if let Err(e) = linked.await {
        tracing::warn!(target: "loopguard::server", error = %e, "agent tree: a sub-agent's spawn was not judged");
    }
}

/// `agent_tree`, after a sub-agent's call was blocked: its root's record is told once that
/// it failed, with the print of the call blocked.
async fn child_blocked<S: Store>(
    app: &App<S>,
    scope: &loopguard::Scope<'_>,
    signature: loopguard::Signature,
) {
    let store = app.store();
    let told = async {
        let root = store
            .update_session(scope.session(), |s, now| s.take_failure(now))
            .await?;
        if let Some(root) = root {
            store
                .update_session(&root, |s, now| {
                    s.child_ended(scope.session(), Some(signature), now)
                })
                .await?;
        }
        Ok::<_, StoreError>(())
    };
    if let Err(e) = told.await {
        tracing::warn!(target: "loopguard::server", error = %e, "agent tree: a sub-agent's failure was not recorded");
    }
}

/// Applies valid events in order through the store; each answer is exactly
/// `apply_event`'s. An event the store does not take is answered as the module docs say;
/// when no event was applied at all, the request fails with the first refusal.
async fn apply<S: Store>(
    app: &App<S>,
    events: &[(u64, RawEvent<'_>)],
) -> Result<Vec<Out>, ApiError> {
    let config = app.config();
    let default_agent = app.options().default_agent.as_deref();
    let deadline = app.options().store_deadline.map(Deadline::after);
    // The events go to the store in one batch, except that a sub-agent's call goes alone,
    // with the agent tree's steps around it, in the order the events came.
    let mut results = Vec::with_capacity(events.len());
    let mut start = 0;
    while start < events.len() {
        let child = sub_agent_call(&config, default_agent, &events[start].1);
        let end = match child {
            Some(_) => start + 1,
            None => (start + 1..events.len())
                .find(|&i| sub_agent_call(&config, default_agent, &events[i].1).is_some())
                .unwrap_or(events.len()),
        };
        let chunk = &events[start..end];
        if let (Some(tree), RawEvent::Call { tool, args, .. }) = (child, &chunk[0].1) {
            let scope = chunk[0].1.scope(default_agent);
            let cfg = config.for_agent(scope.agent());
            // Fingerprinted only at the sub-agent's first call.
            let signature = || match args {
                Some(args) => loopguard::CallPrint::for_config(tool, *args, cfg).signature,
                None => {
                    loopguard::CallPrint::for_config(tool, &serde_json::json!({}), cfg).signature
                }
            };
            link_child(app, &tree, &scope, signature).await;
        }
        let ops: Vec<_> = chunk
            .iter()
            .map(|(seq, event)| operation(&config, default_agent, *seq, event))
            .collect();
        let chunk_results = app.store().update_all(ops, deadline).await;
        let failed = chunk_results.iter().any(Result::is_err);
        if let (Some(_), Some(Ok(Answer::Call { verdict, .. }))) = (child, chunk_results.first()) {
            if let Some(d) = verdict.detection().filter(|_| verdict.is_blocked()) {
                child_blocked(app, &chunk[0].1.scope(default_agent), d.signature).await;
            }
        }
        results.extend(chunk_results);
        start = end;
        if failed {
            // As in one batch: once an update failed, the later ones are not attempted.
            results.extend((start..events.len()).map(|_| Err(StoreError::NotAttempted)));
            break;
        }
    }
    let fail_open = app.options().on_store_failure == StoreFailure::FailOpen;
    let mut out = Vec::with_capacity(events.len());
    let mut refusal: Option<(StatusCode, StoreError)> = None;
    let mut applied = false;
    for ((seq, event), result) in events.iter().zip(results) {
        let e = match result {
            Ok(answer) => {
                app.metrics().answer(&answer);
                if let (RawEvent::Usage { usage, .. }, Answer::Usage { counted, .. }) =
                    (event, &answer)
                {
                    let agent = event.scope(default_agent).agent().map(str::to_owned);
                    let cfg = config.for_agent(agent.as_deref());
                    app.metrics().usage(
                        crate::metrics::agent_label(&config, agent.as_deref()),
                        crate::metrics::model_label(cfg, usage.model),
                        usage.tokens(),
                        counted,
                    );
                }
                applied = true;
                out.push(Out::Answer(answer));
                continue;
            }
            Err(e) => e,
        };
        // The later events were not attempted because of the first refusal: same status.
        let status = match &refusal {
            Some((status, _)) if matches!(e, StoreError::NotAttempted) => *status,
            _ => status_of(&e),
        };
        if refusal.is_none() {
            if status == StatusCode::SERVICE_UNAVAILABLE && fail_open {
                tracing::warn!(target: "loopguard::server", error = %e, events = events.len() - out.len(), "store failed; answering fail-open (degraded)");
            } else {
                tracing::warn!(target: "loopguard::server", error = %e, status = status.as_u16(), "event not applied");
            }
        }
        if status == StatusCode::SERVICE_UNAVAILABLE && fail_open {
            let degraded = Degraded::of(*seq, event, default_agent);
            app.metrics().degraded(degraded.kind);
            applied = true;
            out.push(Out::Degraded(degraded));
        } else {
            out.push(Out::NotApplied(NotApplied {
                seq: *seq,
                error: e.to_string(),
                status: status.as_u16(),
            }));
        }
        if refusal.is_none() {
            refusal = Some((status, e));
        }
    }
    match refusal {
        Some((status, e)) if !applied => Err(ApiError::new(status, e.to_string())),
        _ => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_capped() {
        let long = "x".repeat(300);
        let mut tape = Tape::new();
        let line = format!(r#"{{"type":"call","tool":"t","run":"{long}"}}"#);
        let e = parse_raw(line.as_bytes(), &mut tape).unwrap();
        assert_eq!(
            check_ids(&e, 256).unwrap_err(),
            "run is 300 bytes long, more than the limit of 256"
        );
        assert!(check_ids(&e, 300).is_ok());
        let line = format!(r#"{{"type":"result","call_id":"{long}"}}"#);
        assert!(
            check_ids(&parse_raw(line.as_bytes(), &mut tape).unwrap(), 10)
                .unwrap_err()
                .starts_with("call_id")
        );
    }

    #[test]
    fn degraded_answers_say_allow() {
        let mut tape = Tape::new();
        let line = br#"{"type":"message","session":"s","role":"assistant","text":"x"}"#;
        let event = parse_raw(line, &mut tape).unwrap();
        let text = serde_json::to_string(&Degraded::of(2, &event, None)).unwrap();
        assert_eq!(
            text,
            r#"{"seq":2,"type":"message","session":"s","run":null,"verdict":"allow","degraded":true}"#
        );
        let mut tape = Tape::new();
        let line = br#"{"type":"result","session":"s","call_id":"c"}"#;
        let event = parse_raw(line, &mut tape).unwrap();
        let text = serde_json::to_string(&Degraded::of(4, &event, None)).unwrap();
        assert_eq!(
            text,
            r#"{"seq":4,"type":"result","session":"s","run":null,"recorded":false,"abort":null,"degraded":true}"#
        );
    }
}

//! What the server answers when its store fails or hangs: fail-closed (503), fail-open
//! (degraded answers), the store deadline, readiness and metrics, and recovery.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use loopguard::{ManualClock, Millis, RunState, SessionState};
use loopguard_store::{Limits, MemoryStore, RunKey, RunSnapshot, StoreError, StoreStats};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::*;

const OK: u8 = 0;
const FAIL: u8 = 1;
const HANG: u8 = 2;

/// A memory store that fails (503) or never answers, on demand; `ok_left` updates pass
/// before a failure starts.
struct Faulty {
    inner: MemoryStore,
    mode: AtomicU8,
    ok_left: AtomicUsize,
}

impl Faulty {
    fn new() -> Self {
        Self::with(Limits::default())
    }

    /// A store that takes one session at most.
    fn one_session() -> Self {
        Self::with(Limits {
            max_sessions: 1,
            ..Limits::default()
        })
    }

    fn with(limits: Limits) -> Self {
        Self {
            inner: MemoryStore::new(limits, Arc::new(ManualClock::new(Millis::new(1_000)))),
            mode: AtomicU8::new(OK),
            ok_left: AtomicUsize::new(0),
        }
    }

    async fn gate(&self) -> Result<(), StoreError> {
        match self.mode.load(Ordering::SeqCst) {
            FAIL if self
                .ok_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err() =>
            {
                Err(StoreError::unavailable("redis: connection refused"))
            }
            HANG => std::future::pending().await,
            _ => Ok(()),
        }
    }
}

impl Store for Faulty {
    async fn update<R, F>(&self, key: RunKey<'_>, f: F) -> Result<R, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        self.gate().await?;
        self.inner.update(key, f).await
    }

    async fn remove_run(&self, key: RunKey<'_>) -> Result<bool, StoreError> {
        self.gate().await?;
        self.inner.remove_run(key).await
    }

    async fn remove_session(&self, session: &str) -> Result<usize, StoreError> {
        self.gate().await?;
        self.inner.remove_session(session).await
    }

    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        self.gate().await?;
        self.inner.session(session).await
    }

    async fn session_state(&self, session: &str) -> Result<Option<SessionState>, StoreError> {
        self.gate().await?;
        self.inner.session_state(session).await
    }

    async fn expire_idle(&self) -> Result<usize, StoreError> {
        self.inner.expire_idle().await
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn check(&self) -> Result<(), StoreError> {
        match self.mode.load(Ordering::SeqCst) {
            OK => Ok(()),
            _ => Err(StoreError::unavailable("redis: connection refused")),
        }
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.inner.close().await
    }
}

fn app(on_store_failure: StoreFailure, deadline: Option<Duration>) -> Arc<App<Faulty>> {
    let options = Options {
        on_store_failure,
        store_deadline: deadline,
        ..Options::default()
    };
    Arc::new(App::new(Faulty::new(), options).unwrap())
}

async fn send(
    app: &Arc<App<Faulty>>,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = router(Arc::clone(app)).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

async fn post(app: &Arc<App<Faulty>>, body: &str) -> (StatusCode, Value) {
    let (status, _, body) = send(app, "POST", "/v1/events", "application/json", body).await;
    (status, serde_json::from_slice(&body).unwrap())
}

/// A JSON Lines body; the answer lines.
async fn post_lines(app: &Arc<App<Faulty>>, body: &str) -> (StatusCode, Vec<Value>) {
    let (status, _, out) = send(app, "POST", "/v1/events", "application/x-ndjson", body).await;
    let lines = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (status, lines)
}

async fn text(app: &Arc<App<Faulty>>, path: &str) -> (StatusCode, String) {
    let (status, _, body) = send(app, "GET", path, "text/plain", "").await;
    (status, String::from_utf8(body).unwrap())
}

const CALL: &str =
    r#"{"type":"call","session":"s","run":"r","call_id":"c1","tool":"read","args":{"p":1}}"#;
const RESULT: &str = r#"{"type":"result","session":"s","run":"r","call_id":"c1","result":"ok"}"#;
const COMPACTION: &str = r#"{"type":"compaction","session":" s ","run":"r"}"#;

#[tokio::test]
async fn fail_closed_answers_503_and_applies_nothing() {
    let app = app(StoreFailure::FailClosed, None);
    app.store().mode.store(FAIL, Ordering::SeqCst);
    let (status, headers, body) = send(&app, "POST", "/v1/events", "application/json", CALL).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers[header::RETRY_AFTER], "1");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("store unavailable: redis: connection refused"));
    let (status, ready) = text(&app, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.contains("\"unavailable\""), "{ready}");
    let (_, metrics) = text(&app, "/metrics").await;
    assert!(metrics.contains("loopguard_store_up 0\n"));
    // The refused event and the readiness probe.
    assert!(metrics.contains("loopguard_http_responses_total{code=\"503\"} 2\n"));
    // The session endpoints fail the same way.
    let (status, _, _) = send(&app, "GET", "/v1/sessions/s", "text/plain", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    app.store().mode.store(OK, Ordering::SeqCst);
    let (status, answer) = post(&app, CALL).await;
    assert_eq!(status, StatusCode::OK);
    assert!(answer.get("degraded").is_none());
    let (status, answer) = post(&app, RESULT).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["recorded"], true, "the refused call left no trace");
    let (_, metrics) = text(&app, "/metrics").await;
    assert!(metrics.contains("loopguard_store_up 1\n"));
}

#[tokio::test]
async fn fail_open_allows_and_marks_the_answers_degraded() {
    let app = app(StoreFailure::FailOpen, None);
    app.store().mode.store(FAIL, Ordering::SeqCst);
    let (status, answer) = post(&app, CALL).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer,
        json!({"seq":1,"type":"call","session":"s","run":"r","verdict":"allow","degraded":true})
    );
    let (status, answer) = post(&app, RESULT).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer,
        json!({"seq":1,"type":"result","session":"s","run":"r","recorded":false,"abort":null,"degraded":true})
    );
    let (_, answer) = post(&app, COMPACTION).await;
    assert_eq!(
        answer,
        json!({"seq":1,"type":"compaction","session":"s","run":"r","armed":0,"degraded":true})
    );
    // JSON Lines: invalid lines are still answered in place, valid ones degraded.
    let body = format!("{CALL}\nnot json\n\n{COMPACTION}\n");
    let (status, lines) = post_lines(&app, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["degraded"], true);
    assert_eq!(lines[1]["seq"], 2);
    assert!(lines[1]["error"].is_string());
    assert_eq!(lines[2]["seq"], 4);
    assert_eq!(lines[2]["degraded"], true);

    let (status, ready) = text(&app, "/readyz").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a fail-open server can still answer"
    );
    assert!(ready.contains("\"degraded\""), "{ready}");
    let (_, metrics) = text(&app, "/metrics").await;
    for line in [
        "loopguard_store_up 0",
        "loopguard_degraded_answers_total{type=\"call\"} 2",
        "loopguard_degraded_answers_total{type=\"result\"} 1",
        "loopguard_degraded_answers_total{type=\"compaction\"} 2",
        "loopguard_events_total{type=\"call\"} 2",
        "loopguard_verdicts_total{detector=\"none\",level=\"allow\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }

    // Recovery: real answers again, and nothing of the degraded events was recorded.
    app.store().mode.store(OK, Ordering::SeqCst);
    let (status, answer) = post(&app, RESULT).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    let (_, answer) = post(&app, CALL).await;
    assert_eq!(
        answer,
        json!({"seq":1,"type":"call","session":"s","run":"r","verdict":"allow"})
    );
}

/// In an array, events before the failure keep their real answers; the failing one and
/// the rest are degraded without waiting for the store again.
#[tokio::test]
async fn fail_open_in_an_array_degrades_from_the_failure_on() {
    let app = app(StoreFailure::FailOpen, None);
    app.store().ok_left.store(2, Ordering::SeqCst);
    app.store().mode.store(FAIL, Ordering::SeqCst);
    let body = format!("[{CALL},{RESULT},{COMPACTION},{CALL}]");
    let (status, answers) = post(&app, &body).await;
    assert_eq!(status, StatusCode::OK);
    let answers = answers.as_array().unwrap();
    assert_eq!(answers[0]["verdict"], "allow");
    assert!(answers[0].get("degraded").is_none());
    assert_eq!(answers[1]["recorded"], true);
    assert!(answers[1].get("degraded").is_none());
    assert_eq!(answers[2]["degraded"], true);
    assert_eq!(answers[2]["seq"], 3);
    assert_eq!(answers[3]["degraded"], true);
    assert_eq!(app.store().ok_left.load(Ordering::SeqCst), 0);
}

/// A store that never answers: each request ends at the deadline, as a 503 (fail-closed)
/// or degraded answers (fail-open); the session endpoints end at it too.
#[tokio::test]
async fn a_hanging_store_is_cut_off_at_the_deadline() {
    let deadline = Duration::from_millis(100);
    for mode in [StoreFailure::FailClosed, StoreFailure::FailOpen] {
        let app = app(mode, Some(deadline));
        app.store().mode.store(HANG, Ordering::SeqCst);
        let started = Instant::now();
        let (status, answer) = post(&app, &format!("[{CALL},{COMPACTION}]")).await;
        let took = started.elapsed();
        assert!(
            took >= deadline && took < Duration::from_secs(2),
            "{took:?}"
        );
        match mode {
            StoreFailure::FailClosed => {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                assert!(answer["error"]
                    .as_str()
                    .unwrap()
                    .contains("did not answer within the deadline of 100 ms"));
            }
            _ => {
                assert_eq!(status, StatusCode::OK);
                assert_eq!(answer[0]["degraded"], true);
                assert_eq!(answer[1]["degraded"], true);
            }
        }
        for (method, path) in [("GET", "/v1/sessions/s"), ("DELETE", "/v1/sessions/s")] {
            let started = Instant::now();
            let (status, _, _) = send(&app, method, path, "text/plain", "").await;
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{method} {path}");
            assert!(started.elapsed() < Duration::from_secs(2));
        }
        let started = Instant::now();
        let (status, _, _) = send(
            &app,
            "POST",
            "/v1/runs/end",
            "application/json",
            r#"{"session":"s","run":"r"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}

/// The session limit is not a store failure: 429 in both modes.
#[tokio::test]
async fn the_session_limit_is_refused_in_both_modes() {
    for mode in [StoreFailure::FailClosed, StoreFailure::FailOpen] {
        let store = Faulty::one_session();
        let options = Options {
            on_store_failure: mode,
            ..Options::default()
        };
        let app = Arc::new(App::new(store, options).unwrap());
        assert_eq!(post(&app, CALL).await.0, StatusCode::OK);
        let other = r#"{"type":"call","session":"other","tool":"read"}"#;
        let (status, answer) = post(&app, other).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{mode:?}: {answer}");
    }
}

/// A failure in the middle of an array: the events before it keep their answers (they
/// were applied), the failing one and the later ones are answered in place with their
/// status, so that the client sends again exactly those; the request is a 200.
#[tokio::test]
async fn a_failure_mid_array_answers_each_event_with_its_outcome() {
    let app = app(StoreFailure::FailClosed, None);
    app.store().ok_left.store(2, Ordering::SeqCst);
    app.store().mode.store(FAIL, Ordering::SeqCst);
    let call2 =
        r#"{"type":"call","session":"s","run":"r","call_id":"c2","tool":"read","args":{"p":2}}"#;
    let (status, answers) = post(&app, &format!("[{CALL},{RESULT},{COMPACTION},{call2}]")).await;
    assert_eq!(status, StatusCode::OK, "{answers}");
    let answers = answers.as_array().unwrap();
    assert_eq!(answers[0]["verdict"], "allow");
    assert_eq!(answers[1]["recorded"], true);
    assert_eq!(answers[2]["seq"], 3);
    assert_eq!(answers[2]["status"], 503);
    assert!(answers[2]["error"]
        .as_str()
        .unwrap()
        .starts_with("store unavailable"));
    assert_eq!(
        answers[3],
        json!({"seq": 4, "status": 503, "error": "not applied: an earlier event of the request could not be applied"})
    );

    // Sending again the two that were not applied gives what one clean pass gives.
    app.store().mode.store(OK, Ordering::SeqCst);
    let (status, again) = post(&app, &format!("[{COMPACTION},{call2}]")).await;
    assert_eq!(status, StatusCode::OK);
    let mut clean = loopguard_events::Replayer::new(loopguard::ConfigSet::default(), None);
    let want: Vec<Value> = [CALL, RESULT, COMPACTION, call2]
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let event = loopguard_events::parse_line(line.as_bytes()).unwrap();
            serde_json::to_value(clean.apply(i as u64 + 1, &event.as_ref())).unwrap()
        })
        .collect();
    let mut got = answers[..2].to_vec();
    for (i, mut answer) in again.as_array().unwrap().iter().cloned().enumerate() {
        answer["seq"] = json!(i + 3);
        got.push(answer);
    }
    assert_eq!(got, want);
}

/// The session limit met by a later event of an array no longer hides the events applied
/// before it: they keep their answers, the refused one says 429.
#[tokio::test]
async fn the_session_limit_mid_array_keeps_the_answers_of_applied_events() {
    let store = Faulty::one_session();
    let app = Arc::new(App::new(store, Options::default()).unwrap());
    let other = r#"{"type":"call","session":"other","call_id":"o1","tool":"read"}"#;
    let (status, answers) = post(&app, &format!("[{CALL},{other},{RESULT}]")).await;
    assert_eq!(status, StatusCode::OK, "{answers}");
    assert_eq!(answers[0]["verdict"], "allow");
    assert_eq!(answers[1]["status"], 429);
    assert!(answers[1]["error"]
        .as_str()
        .unwrap()
        .contains("session limit"));
    assert_eq!(answers[2]["status"], 429, "not attempted after the refusal");
    // Only the first was applied: its result is still pending, and is recorded once.
    let (status, answer) = post(&app, RESULT).await;
    assert_eq!(
        (status, &answer["recorded"]),
        (StatusCode::OK, &json!(true))
    );
    // A request none of whose events was applied is refused as a whole.
    let (status, answer) = post(&app, &format!("[{other},{other}]")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("session limit"));
}

/// JSON Lines: the same outcome per line, invalid lines still answered in place.
#[tokio::test]
async fn a_failure_mid_json_lines_answers_each_line() {
    let app = app(StoreFailure::FailClosed, None);
    app.store().ok_left.store(1, Ordering::SeqCst);
    app.store().mode.store(FAIL, Ordering::SeqCst);
    let body = format!("{CALL}\nnot json\n{RESULT}\n");
    let (status, lines) = post_lines(&app, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["verdict"], "allow");
    assert_eq!(lines[1]["seq"], 2);
    assert!(
        lines[1].get("status").is_none(),
        "an invalid line is not retried"
    );
    assert_eq!(lines[2]["seq"], 3);
    assert_eq!(lines[2]["status"], 503);
}

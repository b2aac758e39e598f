//! The router in process: every endpoint, every refusal.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use loopguard::{ManualClock, Millis};
use loopguard_store::{Limits, MemoryStore};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::*;

fn app_with(options: Options) -> Arc<App<MemoryStore>> {
    let store = MemoryStore::new(
        Limits::default(),
        Arc::new(ManualClock::new(Millis::new(1_000))),
    );
    Arc::new(App::new(store, options).unwrap())
}

fn app() -> Arc<App<MemoryStore>> {
    app_with(Options::default())
}

/// A config file of `text` in a new directory (kept while the guard lives).
fn config_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json5");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

async fn send(
    app: &Arc<App<MemoryStore>>,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let response = router(Arc::clone(app)).oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, body.to_vec())
}

async fn post(app: &Arc<App<MemoryStore>>, path: &str, body: &str) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let (status, headers, body) = send(app, request).await;
    assert_eq!(headers[header::CONTENT_TYPE], "application/json", "{path}");
    (status, serde_json::from_slice(&body).unwrap())
}

async fn get(app: &Arc<App<MemoryStore>>, path: &str) -> (StatusCode, Vec<u8>) {
    let (status, _, body) = send(app, Request::get(path).body(Body::empty()).unwrap()).await;
    (status, body)
}

#[tokio::test]
async fn one_event_one_answer() {
    let app = app();
    let (status, body) = post(
        &app,
        "/v1/events",
        r#"{"type":"call","session":"s","run":"r","call_id":"c1","tool":"read","args":{"p":1}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"seq":1,"type":"call","session":"s","run":"r","verdict":"allow"})
    );
    let (status, body) = post(
        &app,
        "/v1/events",
        r#"{"type":"result","session":"s","run":"r","call_id":"c1","result":"ok"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["recorded"], true);
}

#[tokio::test]
async fn arrays_are_evaluated_in_order() {
    let app = app();
    let (status, body) = post(
        &app,
        "/v1/events",
        r#"[{"type":"call","call_id":"a","tool":"read"},
            {"type":"result","call_id":"a","result":"x"},
            {"type":"result","call_id":"a","result":"y"},
            {"type":"result","call_id":"a","result":"x"},
            {"type":"compaction"}]"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let answers = body.as_array().unwrap();
    assert_eq!(answers.len(), 5);
    assert_eq!(answers[1]["recorded"], true);
    assert_eq!(answers[2]["seq"], 3);
    assert!(answers[2]["error"]
        .as_str()
        .unwrap()
        .contains("already has a result"));
    // The first result again is a retry: the same answer.
    assert_eq!(answers[3]["recorded"], true);
    assert_eq!(answers[4]["armed"], 3);
    let (status, body) = post(&app, "/v1/events", "[]").await;
    assert_eq!((status, body), (StatusCode::OK, json!([])));
}

#[tokio::test]
async fn refused_events_say_why() {
    let app = app();
    let cases = [
        ("{", "invalid JSON"),
        ("42", "not a number"),
        (r#""call""#, "not a string"),
        (r#"{"type":"bogus"}"#, "unknown event type"),
        (r#"{"type":"call"}"#, "call without tool"),
        (r#"{"type":"call","tool":5}"#, "tool must be a string"),
        (
            r#"{"type":"call","tool":"t","session":null}"#,
            "session must be a string",
        ),
        (
            r#"[{"type":"compaction"},{"type":"call"}]"#,
            "call without tool",
        ),
    ];
    for (body, why) in cases {
        let (status, answer) = post(&app, "/v1/events", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains(why), "{body}: {error}");
    }
    let (_, answer) = post(
        &app,
        "/v1/events",
        r#"[{"type":"compaction"},{"type":"call"}]"#,
    )
    .await;
    assert_eq!(answer["seq"], 2);
    // Nothing of a refused array was applied.
    assert_eq!(
        get(&app, "/v1/sessions/default").await.0,
        StatusCode::NOT_FOUND
    );

    let deep = format!(
        r#"{{"type":"call","tool":"t","args":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    // Valid at any depth: the arguments are read without a value tree and fingerprinted.
    let (status, answer) = post(&app, "/v1/events", &deep).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["verdict"], "allow");

    let long = "x".repeat(257);
    let (status, answer) = post(
        &app,
        "/v1/events",
        &format!(r#"{{"type":"call","tool":"t","session":"{long}"}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("more than the limit of 256"));

    let (status, answer) = post(
        &app,
        "/v1/events",
        r#"{"type":"result","call_id":"nope","result":1}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["seq"], 1);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("no pending call"));
}

#[tokio::test]
async fn unknown_fields_are_ignored_in_events_and_refused_elsewhere() {
    let app = app();
    let (status, _) = post(
        &app,
        "/v1/events",
        r#"{"type":"compaction","extra":{"x":1}}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = post(&app, "/v1/runs/end", r#"{"session":"s","extra":1}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("unknown field `extra`"));
    let (status, answer) = post(&app, "/v1/runs/end", r#"{"session":5}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"].as_str().unwrap().contains("invalid type"));
}

#[tokio::test]
async fn limits_on_bodies_and_event_counts() {
    let app = app_with(Options {
        limits: RequestLimits {
            max_body_bytes: 100,
            max_events_per_request: 2,
            ..RequestLimits::default()
        },
        ..Options::default()
    });
    let big = format!(
        r#"{{"type":"call","tool":"t","args":"{}"}}"#,
        "x".repeat(200)
    );
    let (status, answer) = post(&app, "/v1/events", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("limit of 100 bytes"));
    // Without a declared length, the limit applies while reading.
    let stream = futures_body(big.into_bytes());
    let (status, _, _) = send(&app, Request::post("/v1/events").body(stream).unwrap()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, answer) = post(&app, "/v1/events", "[{},{},{}]").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(answer["error"].as_str().unwrap().contains("3 events"));
}

/// A body without a Content-Length (streamed in chunks).
fn futures_body(bytes: Vec<u8>) -> Body {
    Body::new(Chunks(
        bytes
            .chunks(16)
            .map(axum::body::Bytes::copy_from_slice)
            .collect(),
    ))
}

struct Chunks(std::collections::VecDeque<axum::body::Bytes>);

impl hyper::body::Body for Chunks {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

#[tokio::test]
async fn ndjson_is_replay_over_http() {
    let app = app();
    let input = concat!(
        r#"{"type":"call","session":"s","call_id":"c1","tool":"read","args":{"path":"/a"}}"#,
        "\n",
        "\n",
        "not json\n",
        r#"{"type":"result","session":"s","call_id":"c1","result":{"content":[]}}"#,
        "\n",
    );
    let request = Request::post("/v1/events")
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from(input))
        .unwrap();
    let (status, headers, body) = send(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "application/x-ndjson");
    // The app runs on the live defaults, as `loopguard serve` without a config does.
    let mut replayer =
        loopguard_events::Replayer::new(loopguard_config::Defaults::Live.config(), None);
    let mut want = Vec::new();
    loopguard_events::replay(&mut replayer, input.as_bytes(), &mut want, 1 << 20).unwrap();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        String::from_utf8(want).unwrap()
    );
}

#[tokio::test]
async fn sessions_can_be_read_and_ended() {
    let app = app_with(Options {
        config_path: None,
        ..Options::default()
    });
    post(
        &app,
        "/v1/events",
        r#"[{"type":"call","session":"s 1","run":"r","call_id":"a","tool":"read"},
        {"type":"call","session":"s 1","call_id":"b","tool":"exec"},
        {"type":"result","session":"s 1","call_id":"b","error":"boom"},
        {"type":"compaction","session":"s 1","run":"r"}]"#,
    )
    .await;
    let (status, body) = get(&app, "/v1/sessions/s%201").await;
    assert_eq!(status, StatusCode::OK);
    let view: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(view["session"], "s 1");
    let runs = view["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let r = runs.iter().find(|r| r["run"] == "r").unwrap();
    assert_eq!(r["history"]["pending"], 1);
    assert_eq!(r["history"]["tools"]["read"], 1);
    assert_eq!(r["guard"], json!({"armed": true, "remaining": 3}));
    assert_eq!(r["stopped"], Value::Null);
    assert_eq!(
        r["recent"],
        json!([{"tool": "read", "blocked": false, "outcome": "pending", "repeats": 1}])
    );
    let unscoped = runs.iter().find(|r| r["run"].is_null()).unwrap();
    assert_eq!(unscoped["history"]["completed"], 1);
    assert_eq!(unscoped["recent"][0]["tool"], "exec");
    assert_eq!(unscoped["recent"][0]["blocked"], false);

    let (status, body) = post(&app, "/v1/runs/end", r#"{"session":"s 1","run":"r"}"#).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"session":"s 1","run":"r","ended":true}));
    let request = Request::delete("/v1/sessions/s%201")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = send(&app, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"session":"s 1","ended_runs":1})
    );
    assert_eq!(
        get(&app, "/v1/sessions/s%201").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn tokens_guard_every_endpoint() {
    let app = app_with(Options {
        token: TokenSource::Value("t0ken".into()),
        ..Options::default()
    });
    for (method, path) in ENDPOINTS {
        let path = path.replace("{session}", "s");
        let request = Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&path)
            .body(Body::from("{}"))
            .unwrap();
        let (status, headers, body) = send(&app, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
        assert!(headers.contains_key(header::WWW_AUTHENTICATE));
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body["error"]
            .as_str()
            .unwrap()
            .contains("missing bearer token"));
    }
    let wrong = Request::get("/healthz")
        .header(header::AUTHORIZATION, "Bearer t0ke")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = send(&app, wrong).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("invalid bearer token"));
    let right = Request::get("/healthz")
        .header(header::AUTHORIZATION, "Bearer t0ken")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, right).await.0, StatusCode::OK);
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let app = app();
    let (status, body) = get(&app, "/v2/nothing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("no such endpoint: GET /v2/nothing"));
    let (status, body) = get(&app, "/v1/events").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(String::from_utf8(body)
        .unwrap()
        .contains("GET is not allowed"));
}

#[tokio::test]
async fn health_metrics_and_the_openapi_document() {
    let app = app();
    assert_eq!(get(&app, "/healthz").await.0, StatusCode::OK);
    assert_eq!(get(&app, "/readyz").await.0, StatusCode::OK);
    post(&app, "/v1/events", r#"{"type":"call","tool":"read"}"#).await;
    let (status, body) = get(&app, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("loopguard_events_total{type=\"call\"} 1"));
    assert!(text.contains("loopguard_live_sessions 1"));
    assert!(text.contains("loopguard_http_request_duration_seconds_count{route=\"/v1/events\"} 1"));

    let (status, body) = get(&app, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "parameters")
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    documented.sort();
    let mut served: Vec<(String, String)> = ENDPOINTS
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    served.sort();
    assert_eq!(
        documented, served,
        "every endpoint is documented, and only those"
    );
    let detectors: Vec<&str> = doc["components"]["schemas"]["Detector"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    let all: Vec<&str> = loopguard::Detector::ALL
        .iter()
        .map(|d| d.as_str())
        .collect();
    assert_eq!(detectors, all, "the served enum is the engine's list");
    for detector in all {
        assert!(
            text.contains(&format!("detector=\"{detector}\",level=\"warning\"")),
            "{detector} has its series in /metrics"
        );
    }
    for (method, path) in ENDPOINTS {
        let path = path.replace("{session}", "s");
        let request = Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{}"))
            .unwrap();
        let (status, _, body) = send(&app, request).await;
        assert_ne!(
            status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path} is routed"
        );
        let body = String::from_utf8_lossy(&body);
        assert!(
            !body.contains("no such endpoint"),
            "{method} {path} is routed"
        );
    }
}

#[tokio::test]
async fn reload_keeps_the_old_config_when_the_new_one_is_invalid() {
    let (_dir, path) =
        config_file("{ tools: { loopDetection: { enabled: true, warningThreshold: 2 } } }");
    // Without a token the endpoint is off unless asked for.
    let off = app_with(Options {
        config_path: Some(path.clone()),
        ..Options::default()
    });
    let (status, body) = post(&off, "/v1/admin/reload", "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(body["error"].as_str().unwrap().contains("SIGHUP"), "{body}");
    let app = app_with(Options {
        config_path: Some(path.clone()),
        reload_without_token: true,
        ..Options::default()
    });
    let call = r#"[{"type":"call","call_id":"1","tool":"t"},{"type":"call","call_id":"2","tool":"t"},{"type":"call","call_id":"3","tool":"t"}]"#;
    let (_, answers) = post(&app, "/v1/events", call).await;
    assert_eq!(answers[2]["verdict"], "warn", "threshold 2 in force");

    std::fs::write(
        &path,
        "{ tools: { loopDetection: { warningThreshhold: 5 } } }",
    )
    .unwrap();
    let (status, body) = post(&app, "/v1/admin/reload", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("warningThreshhold"));
    assert_eq!(
        app.config().global().warning_threshold(),
        2,
        "old config kept"
    );

    std::fs::write(&path, "{ tools: { loopDetection: { enabled: false } } }").unwrap();
    let (status, body) = post(&app, "/v1/admin/reload", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["reloaded"], true);
    let (_, answers) = post(
        &app,
        "/v1/events",
        r#"{"type":"call","call_id":"4","tool":"t"}"#,
    )
    .await;
    assert_eq!(answers["verdict"], "allow", "detectors now off");
    let (_, metrics) = get(&app, "/metrics").await;
    let text = String::from_utf8(metrics).unwrap();
    assert!(text.contains("loopguard_config_reloads_total{result=\"ok\"} 1"));
    assert!(text.contains("loopguard_config_reloads_total{result=\"failed\"} 1"));
}

/// A session's run storm in its view: the runs in a row, then the stop.
#[test]
fn a_session_view_shows_its_run_storm() {
    use loopguard::{config::ConfigSet, Call, Guard, Outcome, Scope};
    let config = ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { runStorm: { cooldownMinutes: 0 } } } }",
    )
    .unwrap();
    let mut guard = Guard::new(config);
    let args = json!({"command": "deploy"});
    let mut views = Vec::new();
    for run in ["r1", "r2", "r3", "r4"] {
        let scope = Scope::new("s").with_run(Some(run));
        let ticket = guard.begin(&scope, &Call::new("exec", &args));
        guard.finish(ticket, Outcome::Error(&json!("permission denied")));
        let state = guard.session_state("s").unwrap();
        views.push(serde_json::to_value(crate::sessions::StormView::of(state)).unwrap());
    }
    assert_eq!(views[0], Value::Null, "no run has ended yet");
    assert_eq!(
        views[1],
        json!({"runs": 1, "stopped": false, "until_ms": null})
    );
    assert_eq!(
        views[3],
        json!({"runs": 3, "stopped": true, "until_ms": null})
    );
}

/// A tree in its sessions' views: the root's counts, each sub-agent's root and spawn.
#[test]
fn session_views_show_their_agent_tree() {
    use loopguard::{config::ConfigSet, Call, Guard, Scope};
    let config = ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { agentTree: { maxChildren: 2 } } } }",
    )
    .unwrap();
    let mut guard = Guard::new(config);
    for k in 1..=3 {
        let child = format!("s/agent-{k}");
        let scope = Scope::new(&child)
            .with_run(Some("r"))
            .with_parent(Some("s"), Some("r"));
        let _ = guard.begin(&scope, &Call::new("read", &json!({"path": k})));
    }
    let view = |s: &str| {
        serde_json::to_value(crate::sessions::TreeView::of(
            guard.session_state(s).unwrap(),
        ))
        .unwrap()
    };
    assert_eq!(
        view("s")["counts"],
        json!({"children": 2, "running": 2, "depth": 1, "failed": 0, "warned": 1, "blocked": 1})
    );
    assert_eq!(view("s")["root"], Value::Null);
    assert_eq!(
        view("s/agent-2"),
        json!({"root": "s", "spawn": {"verdict": "warn", "limit": "children", "count": 2}, "counts": null})
    );
    assert_eq!(view("s/agent-3")["spawn"]["verdict"], "block");
}

/// The tree's steps go through the root's record without a run; its view shows the tree
/// and the runs with calls, not that blank record.
#[tokio::test]
async fn a_tree_root_shows_its_runs_not_a_blank_record() {
    let (_dir, path) = config_file(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { detectors: { agentTree: { maxChildren: 1 } } } }",
    );
    let app = app_with(Options {
        config_path: Some(path),
        ..Options::default()
    });
    let (status, _) = post(
        &app,
        "/v1/events",
        r#"[{"type":"call","session":"s","run":"r","call_id":"a","tool":"Task"},
        {"type":"call","session":"s/agent-1","run":"c","parent_session":"s","parent_run":"r","call_id":"b","tool":"read"},
        {"type":"call","session":"s/agent-2","run":"c","parent_session":"s","parent_run":"r","call_id":"c","tool":"read"}]"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = get(&app, "/v1/sessions/s").await;
    assert_eq!(status, StatusCode::OK);
    let view: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(view["tree"]["counts"]["children"], 1, "{view}");
    assert_eq!(view["tree"]["counts"]["blocked"], 1, "{view}");
    let runs: Vec<&Value> = view["runs"].as_array().unwrap().iter().collect();
    assert_eq!(runs.len(), 1, "{view}");
    assert_eq!(runs[0]["run"], "r");
    // A record without a run that holds calls is shown.
    post(
        &app,
        "/v1/events",
        r#"{"type":"call","session":"s","call_id":"d","tool":"exec"}"#,
    )
    .await;
    let (_, body) = get(&app, "/v1/sessions/s").await;
    let view: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(view["runs"].as_array().unwrap().len(), 2, "{view}");
}

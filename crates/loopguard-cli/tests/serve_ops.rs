//! Operating the server: config reload (SIGHUP and the admin endpoint), metrics, health,
//! the OpenAPI document, JSON logs, idle expiry, the default database location, and the
//! client examples against a real server.

mod common;
mod serve_common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_common::{tempdir, Server};

fn repeat_call(i: usize) -> String {
    format!(
        r#"{{"type":"call","session":"ops","run":"r","call_id":"c{i}","tool":"read","args":{{"p":1}}}}"#
    )
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn config_reloads_on_sighup_and_by_endpoint_and_bad_configs_are_refused() {
    let dir = tempdir();
    let config = dir.path().join("config.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2 } } }",
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let db = dir.path().join("db").display().to_string();
    // Without a token the reload endpoint is off unless asked for; SIGHUP always works.
    let closed = Server::start(&["--memory", "--config", &config_arg]);
    let refused = closed.client().post("/v1/admin/reload", "");
    assert_eq!(refused.status, 403, "{}", refused.text());
    drop(closed);
    let server = Server::start(&[
        "--config",
        &config_arg,
        "--db",
        &db,
        "--log-format",
        "json",
        "--reload-without-token",
    ]);
    let mut client = server.client();
    let verdicts: Vec<Value> = (1..=3)
        .map(|i| client.post("/v1/events", &repeat_call(i)).json())
        .collect();
    assert_eq!(verdicts[1]["verdict"], "allow");
    assert_eq!(verdicts[2]["verdict"], "warn", "warningThreshold 2");

    // An invalid config is refused, with the errors logged; the old one stays.
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { warningThreshhold: 9 } } }",
    )
    .unwrap();
    server.signal("HUP");
    wait_until("the refusal is logged", || {
        server.stderr().contains("reload refused")
    });
    assert!(server.stderr().contains("warningThreshhold"));
    assert_eq!(
        client.post("/v1/events", &repeat_call(4)).json()["verdict"],
        "warn"
    );
    let response = client.post("/v1/admin/reload", "");
    assert_eq!(response.status, 422);
    assert!(response.json()["error"]
        .as_str()
        .unwrap()
        .contains("previous config stays in force"));

    // A valid one takes over, by signal or by endpoint.
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: false } } }").unwrap();
    server.signal("HUP");
    wait_until("the new config is in force", || {
        client
            .post("/v1/events", r#"{"type":"compaction","session":"probe"}"#)
            .json()["armed"]
            == 0
    });
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true, warningThreshold: 50, criticalThreshold: 10 } } }").unwrap();
    let response = client.post("/v1/admin/reload", "");
    assert_eq!(response.status, 200);
    let report = response.json();
    assert_eq!(report["reloaded"], true);
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("criticalThreshold"),
        "{report}"
    );

    let metrics = client.get("/metrics").text();
    assert!(
        metrics.contains("loopguard_config_reloads_total{result=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("loopguard_config_reloads_total{result=\"failed\"} 2"),
        "{metrics}"
    );

    // JSON logs: every line on stderr is a JSON object.
    let logs = server.stderr();
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }
    server.stop();
}

/// A FIFO at `path` (none may exist there), made with `mkfifo(1)`.
#[cfg(unix)]
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The config and the token file must be regular files: a FIFO nobody writes to, a
/// directory or a device is refused at start and on reload, at once and with what it is,
/// and neither a reload nor the shutdown after it waits on one.
#[cfg(unix)]
#[test]
fn config_and_token_files_that_are_not_regular_files_are_refused_without_hanging() {
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let fifo_arg = fifo.display().to_string();
    let dir_arg = dir.path().display().to_string();
    // At start: a clear error, promptly.
    for args in [
        ["--memory", "--config", fifo_arg.as_str()],
        ["--memory", "--token-file", fifo_arg.as_str()],
        ["--memory", "--config", dir_arg.as_str()],
        ["--memory", "--token-file", "/dev/zero"],
    ] {
        let started = Instant::now();
        let said = Server::try_start(&args, &[])
            .err()
            .unwrap_or_else(|| panic!("{args:?} started"));
        assert!(said.contains("not a regular file"), "{args:?}: {said}");
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?}");
    }

    // On reload: the file becomes a FIFO (or a directory) after the start.
    let config = dir.path().join("config.json5");
    let token = dir.path().join("token");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2 } } }",
    )
    .unwrap();
    std::fs::write(&token, "sesame\n").unwrap();
    let server = Server::start(&[
        "--memory",
        "--config",
        &config.display().to_string(),
        "--token-file",
        &token.display().to_string(),
    ]);
    let mut client = server.client().with_token("sesame");
    std::fs::remove_file(&config).unwrap();
    mkfifo(&config);
    server.signal("HUP");
    wait_until("the refusal of the FIFO is logged", || {
        server
            .stderr()
            .contains("is a FIFO (named pipe), not a regular file")
    });
    let started = Instant::now();
    let response = client.post("/v1/admin/reload", "");
    assert_eq!(response.status, 422, "{}", response.text());
    let error = response.json()["error"].as_str().unwrap().to_owned();
    assert!(error.contains("previous config stays in force"), "{error}");
    assert!(
        error.contains("is a FIFO (named pipe), not a regular file"),
        "{error}"
    );
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir(&config).unwrap();
    let response = client.post("/v1/admin/reload", "");
    assert_eq!(response.status, 422, "{}", response.text());
    assert!(
        response.text().contains("is a directory"),
        "{}",
        response.text()
    );
    std::fs::remove_dir(&config).unwrap();
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { enabled: true, warningThreshold: 2 } } }",
    )
    .unwrap();
    std::fs::remove_file(&token).unwrap();
    mkfifo(&token);
    let response = client.post("/v1/admin/reload", "");
    assert_eq!(response.status, 422, "{}", response.text());
    assert!(
        response.text().contains("token file"),
        "{}",
        response.text()
    );
    assert!(
        response.text().contains("not a regular file"),
        "{}",
        response.text()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "reloads took {:?}",
        started.elapsed()
    );
    // The old config and token stay in force, and the server still answers.
    let verdicts: Vec<Value> = (1..=3)
        .map(|i| client.post("/v1/events", &repeat_call(i)).json())
        .collect();
    assert_eq!(verdicts[2]["verdict"], "warn", "warningThreshold 2");
    let metrics = client.get("/metrics").text();
    assert!(
        metrics.contains("loopguard_config_reloads_total{result=\"failed\"} 4"),
        "{metrics}"
    );
    // SIGTERM ends the process at once: no reload is left waiting on a FIFO.
    let started = Instant::now();
    server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop took {:?}",
        started.elapsed()
    );
}

#[test]
fn metrics_health_and_the_openapi_document() {
    let server = Server::start(&[
        "--memory",
        "--config",
        &common::repo_root()
            .join("examples/openclaw.json5")
            .display()
            .to_string(),
    ]);
    let mut client = server.client();
    for i in 1..=6 {
        client.post("/v1/events", &repeat_call(i));
    }
    client.post(
        "/v1/events",
        r#"{"type":"compaction","session":"ops","run":"r"}"#,
    );
    client.post("/v1/events", r#"{"type":"bogus"}"#);
    let health = client.get("/healthz");
    assert_eq!(
        (health.status, health.json()["status"].clone()),
        (200, "ok".into())
    );
    assert_eq!(client.get("/readyz").json()["status"], "ready");

    let metrics = client.get("/metrics");
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = metrics.text();
    for line in [
        "loopguard_events_total{type=\"call\"} 6",
        "loopguard_events_total{type=\"compaction\"} 1",
        "loopguard_events_total{type=\"invalid\"} 1",
        "loopguard_verdicts_total{detector=\"none\",level=\"allow\"} 3",
        "loopguard_verdicts_total{detector=\"generic_repeat\",level=\"warning\"} 3",
        "loopguard_live_sessions 1",
        "loopguard_live_runs 1",
        "loopguard_http_responses_total{code=\"400\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains(
        "loopguard_http_request_duration_seconds_bucket{route=\"/v1/events\",le=\"+Inf\"} 8"
    ));

    let doc = client.get("/openapi.json").json();
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/v1/events",
        "/v1/sessions/{session}",
        "/v1/runs/end",
        "/v1/admin/reload",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} undocumented");
    }

    let session = client.get("/v1/sessions/ops").json();
    assert_eq!(session["runs"][0]["run"], "r");
    assert_eq!(session["runs"][0]["guard"]["armed"], true);
    assert_eq!(session["runs"][0]["history"]["tools"]["read"], 6);
}

#[test]
fn idle_sessions_expire_from_memory_and_disk() {
    let dir = tempdir();
    let db = dir.path().join("db").display().to_string();
    let server = Server::start(&["--db", &db, "--idle-ttl", "1s"]);
    let mut client = server.client();
    client.post(
        "/v1/events",
        r#"{"type":"compaction","session":"idle","run":"r"}"#,
    );
    assert_eq!(client.get("/v1/sessions/idle").status, 200);
    wait_until("the session expires", || {
        client.get("/v1/sessions/idle").status == 404
    });
    wait_until("the sweep is counted", || {
        client
            .get("/metrics")
            .text()
            .contains("loopguard_expired_runs_total 1\n")
    });
    assert!(client
        .get("/metrics")
        .text()
        .contains("loopguard_live_sessions 0\n"));
    server.stop();
    // Gone from disk as well: a server with a long TTL finds nothing to load.
    let server = Server::start(&["--db", &db, "--idle-ttl", "24h"]);
    assert_eq!(server.client().get("/v1/sessions/idle").status, 404);
}

#[test]
fn the_default_database_lives_under_xdg_data_home() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let data_arg = data.display().to_string();
    let server = Server::start_with_env(&[], &[("XDG_DATA_HOME", &data_arg)]);
    server
        .client()
        .post("/v1/events", r#"{"type":"compaction","session":"xdg"}"#);
    server.stop();
    assert!(data.join("loopguard/loopguard.db").is_file());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let server = Server::start_with_env(
        &[],
        &[("XDG_DATA_HOME", ""), ("HOME", &home.display().to_string())],
    );
    server.stop();
    assert!(home.join(".local/share/loopguard/loopguard.db").is_file());
}

fn run_client(program: &str, script: &Path, server: &Server, token: &str) {
    let url = format!("http://{}", server.addr);
    let out = Command::new(program)
        .arg(script)
        .arg(&url)
        .env("LOOPGUARD_TOKEN", token)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {program} (scripts/setup/serve-clients.sh installs it): {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{program} {}: {}\nstdout:\n{stdout}\nstderr:\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("blocked"), "{stdout}");
    assert!(stdout.contains("loop stopped by"), "{stdout}");
}

/// The client examples drive a real server (with a token) through their host loop.
#[test]
fn client_examples_run_against_a_real_server() {
    let root = common::repo_root();
    let config = root.join("examples/openclaw.json5").display().to_string();
    let dir = tempdir();
    let db = dir.path().join("db").display().to_string();
    let server = Server::start_with_env(
        &["--config", &config, "--db", &db],
        &[("LOOPGUARD_TOKEN", "example-token")],
    );
    run_client(
        "python3",
        &root.join("examples/clients/python_client.py"),
        &server,
        "example-token",
    );
    run_client(
        "node",
        &root.join("examples/clients/node_client.mjs"),
        &server,
        "example-token",
    );
    // Both ended their runs.
    let metrics = server
        .client()
        .with_token("example-token")
        .get("/metrics")
        .text();
    assert!(metrics.contains("loopguard_live_runs 0\n"), "{metrics}");
}

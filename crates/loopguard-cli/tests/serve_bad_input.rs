//! Bad input against the real server: every refusal is a JSON error that says what is
//! wrong, and nothing a client sends stops the server.

mod common;
mod serve_common;

use std::io::Write;

use serve_common::{tempdir, Client, Server};

fn error_of(response: &serve_common::Response) -> String {
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{response:?}"
    );
    response.json()["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error string: {}", response.text()))
        .to_owned()
}

#[test]
fn malformed_requests_get_400_with_a_reason() {
    let mut server = Server::start(&["--memory"]);
    let mut client = server.client();
    let cases: &[(&[u8], &str)] = &[
        (b"{", "invalid JSON"),
        (b"", "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
        (b"nul", "invalid JSON"),
        (b"12", "not a number"),
        (b"true", "not a boolean"),
        (b"{}", "event without type"),
        (br#"{"type":7}"#, "event type must be a string"),
        (br#"{"type":"launch"}"#, "unknown event type \"launch\""),
        (br#"{"type":"call"}"#, "call without tool"),
        (
            br#"{"type":"call","tool":["read"]}"#,
            "tool must be a string, not an array",
        ),
        (
            br#"{"type":"call","tool":"t","session":1}"#,
            "session must be a string, not a number",
        ),
        (
            br#"{"type":"call","tool":"t","run":{}}"#,
            "run must be a string, not an object",
        ),
        (
            br#"{"type":"call","tool":"t","call_id":false}"#,
            "call_id must be a string, not a boolean",
        ),
        (
            br#"{"type":"result","result":{}}"#,
            "call_id of a pending call",
        ),
        (
            br#"[{"type":"compaction"}, 5]"#,
            "event must be a JSON object",
        ),
    ];
    for (body, why) in cases {
        let response = client.request(
            "POST",
            "/v1/events",
            &[("Content-Type", "application/json")],
            body,
        );
        assert_eq!(response.status, 400, "{}", String::from_utf8_lossy(body));
        let error = error_of(&response);
        assert!(
            error.contains(why),
            "{}: {error:?} lacks {why:?}",
            String::from_utf8_lossy(body)
        );
    }
    // Nesting far beyond any parser's recursion limit, never closed: read without a depth
    // limit, the fault found is where it is (the body ends inside it).
    let deep = "[".repeat(100_000);
    let response = client.post("/v1/events", &deep);
    assert_eq!(response.status, 400);
    assert!(error_of(&response).contains("EOF while parsing a list"));
    let long_id = "x".repeat(10_000);
    let response = client.post(
        "/v1/events",
        &format!(r#"{{"type":"call","tool":"t","call_id":"{long_id}"}}"#),
    );
    assert_eq!(response.status, 400);
    assert!(error_of(&response).contains("call_id is 10000 bytes long"));
    // The engine refuses a result naming no pending call: 422 with replay's own object.
    let response = client.post(
        "/v1/events",
        r#"{"type":"result","call_id":"ghost","result":1}"#,
    );
    assert_eq!(response.status, 422);
    assert_eq!(response.json()["seq"], 1);
    assert!(server.alive());
}

#[test]
fn unknown_fields_are_ignored_in_events_refused_elsewhere() {
    let server = Server::start(&["--memory"]);
    let mut client = server.client();
    let response = client.post(
        "/v1/events",
        r#"{"type":"call","tool":"read","color":"blue","nested":{"deep":[1,2]},"ts":"2026-01-01"}"#,
    );
    assert_eq!(response.status, 200);
    assert_eq!(response.json()["verdict"], "allow");
    let response = client.post("/v1/runs/end", r#"{"session":"s","run":"r","force":true}"#);
    assert_eq!(response.status, 400);
    assert!(error_of(&response).contains("unknown field `force`"));
    let response = client.post("/v1/runs/end", r#"{"session":["s"]}"#);
    assert_eq!(response.status, 400);
    assert!(error_of(&response).contains("invalid type"));
}

#[test]
fn huge_bodies_get_413() {
    let server = Server::start(&["--memory", "--max-body-bytes", "65536"]);
    let mut client = server.client();
    let big = format!(
        r#"{{"type":"call","tool":"t","args":"{}"}}"#,
        "x".repeat(100_000)
    );
    let response = client.post("/v1/events", &big);
    assert_eq!(response.status, 413);
    assert!(error_of(&response).contains("limit of 65536 bytes"));
    // A body that lies about its length is cut at the limit too (chunked, no length).
    let mut raw = Client::connect(server.addr);
    let chunk = "x".repeat(50_000);
    let body = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    raw.write_raw(body.as_bytes());
    let response = raw.read_response();
    assert_eq!(response.status, 413);
    // The default limit is 8 MiB: 9 MiB is refused, from the declared length.
    let server = Server::start(&["--memory"]);
    let nine = vec![b' '; 9 << 20];
    let response = server.client().request("POST", "/v1/events", &[], &nine);
    assert_eq!(response.status, 413);
    assert!(error_of(&response).contains("8388608"));
    assert_eq!(server.client().get("/healthz").status, 200);
}

/// A body whose parse could pass the memory budget is refused (413), and the figure its
/// answer gives per body byte is the one `serve --help` and the docs give: the budget's
/// own `MAX_COST_PER_BODY_BYTE`.
#[test]
fn the_memory_figure_per_body_is_one_in_the_413_the_help_and_the_docs() {
    let figure = format!("up to {} N", loopguard_server::MAX_COST_PER_BODY_BYTE);
    let server = Server::start(&["--memory", "--memory-budget", "4194304"]);
    // 512 KiB of small objects: bounded near the figure, past a 4 MiB budget.
    let objects = vec![r#"{"a":0}"#; 64 << 10].join(",");
    let body = format!(r#"[{objects}]"#);
    let response = server.client().post("/v1/events", &body);
    assert_eq!(response.status, 413, "{}", response.text());
    let error = error_of(&response);
    assert!(error.contains(&figure), "{error}");
    assert!(error.contains("budget of 4 MiB"), "{error}");
    let help = common::run(&["serve", "--help"], b"");
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains(&figure), "{help}");
    let docs = std::fs::read_to_string(common::repo_root().join("docs/serve.md")).unwrap();
    let docs = docs.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(docs.contains(&format!("{figure} for a body of N bytes")));
}

#[test]
fn tokens_are_required_when_configured() {
    let dir = tempdir();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "correct-horse-battery\n").unwrap();
    let token_arg = token_file.display().to_string();
    let server = Server::start(&["--memory", "--token-file", &token_arg]);

    let response = server
        .client()
        .post("/v1/events", r#"{"type":"compaction"}"#);
    assert_eq!(response.status, 401);
    assert!(response.header("www-authenticate").is_some());
    assert!(error_of(&response).contains("missing bearer token"));
    for wrong in ["correct-horse-batter", "correct-horse-battery2", "x"] {
        let response = server
            .client()
            .with_token(wrong)
            .post("/v1/events", r#"{"type":"compaction"}"#);
        assert_eq!(response.status, 401);
        assert_eq!(error_of(&response), "invalid bearer token");
    }
    let response = server.client().request(
        "GET",
        "/healthz",
        &[("Authorization", "Basic Y29ycmVjdA==")],
        b"",
    );
    assert_eq!(response.status, 401);
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/v1/sessions/s",
    ] {
        assert_eq!(server.client().get(path).status, 401, "{path}");
    }
    let mut ok = server.client().with_token("correct-horse-battery");
    assert_eq!(
        ok.post("/v1/events", r#"{"type":"compaction"}"#).status,
        200
    );
    assert_eq!(ok.get("/healthz").status, 200);

    // Rotate the token file and reload: the old token stops working.
    std::fs::write(&token_file, "new-token").unwrap();
    server.signal("HUP");
    let started = std::time::Instant::now();
    while ok.get("/healthz").status == 200 {
        assert!(
            started.elapsed().as_secs() < 10,
            "the new token never took over"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        server
            .client()
            .with_token("new-token")
            .get("/healthz")
            .status,
        200
    );

    // The token may come from the environment instead.
    let server = Server::start_with_env(&["--memory"], &[("LOOPGUARD_TOKEN", "from-env")]);
    assert_eq!(server.client().get("/healthz").status, 401);
    assert_eq!(
        server
            .client()
            .with_token("from-env")
            .get("/healthz")
            .status,
        200
    );
    // Not both.
    let refused = Server::try_start(
        &["--memory", "--token-file", &token_arg],
        &[("LOOPGUARD_TOKEN", "x")],
    );
    assert!(refused.err().unwrap().contains("not both"));
    // An empty token file is refused at start.
    std::fs::write(&token_file, "\n").unwrap();
    let refused = Server::try_start(&["--memory", "--token-file", &token_arg], &[]);
    assert!(refused.err().unwrap().contains("the token is empty"));
}

#[test]
fn garbage_on_the_wire_does_not_stop_the_server() {
    let mut server = Server::start(&["--memory"]);
    for junk in [
        &b"\x00\x01\x02\x03 not http at all\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST /v1/events HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST /v1/events HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"type\"",
        b"GET /v1/sessions/%ZZ HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let mut stream = std::net::TcpStream::connect(server.addr).unwrap();
        let _ = stream.write_all(junk);
        drop(stream);
    }
    let mut client = server.client();
    let response = client.get("/v1/sessions/%FF%FE");
    assert!(matches!(response.status, 400 | 404), "{}", response.text());
    let response = client.get("/nothing/here");
    assert_eq!(response.status, 404);
    assert!(error_of(&response).contains("no such endpoint"));
    let response = client.request("PUT", "/v1/events", &[], b"{}");
    assert_eq!(response.status, 405);
    assert!(error_of(&response).contains("PUT is not allowed"));
    // A fresh connection: the server may close one whose request body it did not read.
    assert_eq!(server.client().get("/healthz").status, 200);
    assert!(server.alive());
}

#[test]
fn bad_settings_are_refused_at_start() {
    let dir = tempdir();
    let config = dir.path().join("bad.json5");
    std::fs::write(
        &config,
        "{ tools: { loopDetection: { warningThreshold: -1 } } }",
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let err = Server::try_start(&["--memory", "--config", &config_arg], &[])
        .err()
        .unwrap();
    assert!(
        err.contains("exit status: 1") && err.contains("warningThreshold"),
        "{err}"
    );
    let err = Server::try_start(&["--memory", "--max-sessions", "0"], &[])
        .err()
        .unwrap();
    assert!(err.contains("--max-sessions must be at least 1"), "{err}");
    let err = Server::try_start(&["--memory", "--idle-ttl", "soon"], &[])
        .err()
        .unwrap();
    assert!(err.contains("duration"), "{err}");
    let err = Server::try_start(&["--db", "/proc/loopguard/nope.db"], &[])
        .err()
        .unwrap();
    assert!(err.contains("cannot create"), "{err}");
}

/// `--db` on another application's SQLite file (even one with a `runs` table of its own)
/// stops the server at start with a clear error, and adds nothing to the file.
#[test]
fn another_applications_database_is_refused_untouched() {
    let dir = tempdir();
    for (name, schema) in [
        ("notes.db", "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);"),
        ("jobs.db", "CREATE TABLE runs (id INTEGER PRIMARY KEY, cmd TEXT); INSERT INTO runs (cmd) VALUES ('make');"),
    ] {
        let path = dir.path().join(name);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(schema).unwrap();
        let tables = |conn: &rusqlite::Connection| -> Vec<String> {
            conn.prepare("SELECT name FROM sqlite_master ORDER BY name")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let before = tables(&conn);
        let err = Server::try_start(&["--db", &path.display().to_string()], &[])
            .err()
            .unwrap();
        assert!(
            err.contains("exit status: 1") && err.contains("not a loopguard database"),
            "{err}"
        );
        assert_eq!(tables(&conn), before, "{name}: nothing added");
    }
}

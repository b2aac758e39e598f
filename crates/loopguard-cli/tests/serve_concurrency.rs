//! Many sessions from many connections at once: the answers of each session equal a
//! sequential replay of that session's events.

mod common;
mod serve_common;

use loopguard::ConfigSet;
use serde_json::json;
use serve_common::{
    config_file, hammer_sessions, replay_lines, session_events, tempdir, Server, CONFIG,
};

fn hammer(store: &[&str]) {
    let dir = tempdir();
    let config_arg = config_file(dir.path()).display().to_string();
    let mut args = vec!["--config", config_arg.as_str()];
    args.extend_from_slice(store);
    let server = Server::start(&args);
    let config = ConfigSet::parse(CONFIG).unwrap();

    const CONNECTIONS: usize = 24;
    const SESSIONS_PER_CONNECTION: usize = 6;
    hammer_sessions(
        std::slice::from_ref(&server),
        &config,
        CONNECTIONS,
        SESSIONS_PER_CONNECTION,
    );
    let metrics = server.client().get("/metrics").text();
    let live = CONNECTIONS * SESSIONS_PER_CONNECTION;
    assert!(
        metrics.contains(&format!("loopguard_live_sessions {live}\n")),
        "{metrics}"
    );
}

#[test]
fn concurrent_sessions_on_sqlite_answer_like_sequential_replays() {
    let dir = tempdir();
    let db = dir.path().join("db").display().to_string();
    hammer(&["--db", &db]);
}

#[test]
fn concurrent_sessions_in_memory_answer_like_sequential_replays() {
    hammer(&["--memory"]);
}

/// Arrays from many connections at once: each array is evaluated in order.
#[test]
fn concurrent_arrays_are_evaluated_in_order() {
    let dir = tempdir();
    let db = dir.path().join("db").display().to_string();
    let config_arg = config_file(dir.path()).display().to_string();
    let server = Server::start(&["--db", &db, "--config", &config_arg]);
    let config = ConfigSet::parse(CONFIG).unwrap();
    std::thread::scope(|s| {
        for c in 0..16 {
            let server = &server;
            let config = &config;
            s.spawn(move || {
                let events = session_events(&format!("arr{c}"), c);
                let mut client = server.client();
                let mut got = Vec::new();
                for chunk in events.chunks(7) {
                    let body = format!("[{}]", chunk.join(","));
                    let response = client.post("/v1/events", &body);
                    assert_eq!(response.status, 200, "{}", response.text());
                    for mut answer in response.json().as_array().unwrap().clone() {
                        answer["seq"] = json!(1);
                        got.push(answer);
                    }
                }
                assert_eq!(got, replay_lines(config, &events));
            });
        }
    });
}

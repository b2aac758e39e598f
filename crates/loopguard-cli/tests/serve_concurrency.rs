//! Many sessions from many connections at once: the answers of each session equal a
//! sequential replay of that session's events.

mod common;
mod serve_common;

use loopguard::ConfigSet;
use loopguard_replay::{parse_line, Replayer};
use serde_json::{json, Value};
use serve_common::{tempdir, Server};

const CONFIG: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 6, globalCircuitBreakerThreshold: 9, unknownToolThreshold: 4 } } }";

/// The events of one session: several runs mixing loops the detectors catch (identical
/// reads, a stuck poll, ping-pong, an unknown tool, a loop surviving a compaction) with
/// calls that make progress.
fn session_events(session: &str, seed: usize) -> Vec<String> {
    let mut out = Vec::new();
    let call =
        |out: &mut Vec<String>, run: &str, id: String, tool: &str, args: Value, outcome: Value| {
            out.push(
            json!({"type":"call","session":session,"run":run,"call_id":id,"tool":tool,"args":args})
                .to_string(),
        );
            let mut result = json!({"type":"result","session":session,"run":run,"call_id":id});
            match outcome.get("error") {
                Some(error) => result["error"] = error.clone(),
                None => result["result"] = outcome,
            }
            out.push(result.to_string());
        };
    for step in 0..12 {
        let i = step + seed;
        let same = json!({"content":[{"type":"text","text":"same"}]});
        call(
            &mut out,
            "loop",
            format!("a{step}"),
            "read",
            json!({"path": "/x"}),
            same,
        );
        let poll = json!({"action": "poll", "sessionId": "p"});
        let running = json!({"details": {"status": "running", "aggregated": "..."}});
        call(
            &mut out,
            "poll",
            format!("p{step}"),
            "process",
            poll,
            running,
        );
        let (tool, path) = if step % 2 == 0 {
            ("read", "/a")
        } else {
            ("list", "/b")
        };
        call(
            &mut out,
            "pp",
            format!("q{step}"),
            tool,
            json!({"path": path}),
            json!(format!("{tool} same")),
        );
        call(
            &mut out,
            "fresh",
            format!("f{step}"),
            "read",
            json!({"path": format!("/f{i}")}),
            json!(format!("content {i}")),
        );
        call(
            &mut out,
            "missing",
            format!("m{step}"),
            "nope",
            json!({}),
            json!({"error": "Tool nope not found"}),
        );
        if step == 2 {
            out.push(json!({"type":"compaction","session":session,"run":"loop"}).to_string());
        }
    }
    // A result that names no pending call: the engine refuses it in both worlds.
    out.push(
        json!({"type":"result","session":session,"run":"loop","call_id":"zzz","result":1})
            .to_string(),
    );
    out
}

fn replay_session(config: &ConfigSet, lines: &[String]) -> Vec<Value> {
    let mut replayer = Replayer::new(config.clone(), None);
    lines
        .iter()
        .map(|l| {
            let answer = replayer.apply(1, &parse_line(l.as_bytes()).unwrap());
            serde_json::to_value(&answer).unwrap()
        })
        .collect()
}

fn hammer(store: &[&str]) {
    let dir = tempdir();
    let config_path = dir.path().join("config.json5");
    std::fs::write(&config_path, CONFIG).unwrap();
    let config_arg = config_path.display().to_string();
    let mut args = vec!["--config", config_arg.as_str()];
    args.extend_from_slice(store);
    let server = Server::start(&args);
    let config = ConfigSet::parse(CONFIG).unwrap();

    const CONNECTIONS: usize = 24;
    const SESSIONS_PER_CONNECTION: usize = 6;
    std::thread::scope(|s| {
        for c in 0..CONNECTIONS {
            let server = &server;
            let config = &config;
            s.spawn(move || {
                let mut client = server.client();
                let sessions: Vec<(String, Vec<String>)> = (0..SESSIONS_PER_CONNECTION)
                    .map(|k| {
                        let name = format!("c{c}-s{k}");
                        let events = session_events(&name, c * 100 + k);
                        (name, events)
                    })
                    .collect();
                let mut answers: Vec<Vec<Value>> = vec![Vec::new(); sessions.len()];
                // Interleave the sessions of this connection; others run at the same time.
                let longest = sessions.iter().map(|(_, e)| e.len()).max().unwrap();
                for i in 0..longest {
                    for (k, (_, events)) in sessions.iter().enumerate() {
                        let Some(line) = events.get(i) else { continue };
                        let response = client.post("/v1/events", line);
                        assert!(matches!(response.status, 200 | 422), "{}", response.text());
                        answers[k].push(response.json());
                    }
                }
                for ((name, events), got) in sessions.iter().zip(answers) {
                    let want = replay_session(config, events);
                    assert_eq!(got.len(), want.len());
                    for (n, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(g, w, "session {name}, event {n}: {}", events[n]);
                    }
                    let detectors: Vec<&str> =
                        got.iter().filter_map(|a| a["detector"].as_str()).collect();
                    for d in [
                        "generic_repeat",
                        "known_poll_no_progress",
                        "unknown_tool_repeat",
                    ] {
                        assert!(detectors.contains(&d), "{name}: {d} never fired");
                    }
                }
            });
        }
    });
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
    let config_path = dir.path().join("config.json5");
    std::fs::write(&config_path, CONFIG).unwrap();
    let config_arg = config_path.display().to_string();
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
                assert_eq!(got, replay_session(config, &events));
            });
        }
    });
}

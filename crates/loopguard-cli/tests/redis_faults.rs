//! Faults of a deployment of three `loopguard serve` replicas on one Redis:
//!
//! - a replica killed (SIGKILL) mid-stream: the others carry on, and no event is lost;
//! - Redis killed mid-stream and started again (its AOF fsynced at every write): with
//!   fail-closed every event meanwhile is a 503 (JSON error, within the deadline) and,
//!   sent again after recovery, answered as if nothing happened; with fail-open every
//!   event meanwhile is allowed, marked degraded (answers and metrics), and recorded
//!   nowhere, and after recovery the answers are those of a replay without those events;
//! - a Redis that answers slowly (`CLIENT PAUSE`): every request ends at the deadline;
//! - a replica started while Redis is down serves once Redis is up.

mod common;
mod redis_common;
mod serve_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use loopguard::ConfigSet;
use loopguard_store::redis::testing::free_port;
use redis_common::{metric, prefix, replicas, require, RedisServer};
use serde_json::Value;
use serve_common::{
    assert_replays, config_file, detectors, session_events, tempdir, Client, Rng, Server, CONFIG,
};

/// The events of `n` sessions, interleaved: (session index, line).
fn interleaved(label: &str, n: usize) -> (Vec<Vec<String>>, Vec<(usize, String)>) {
    let sessions: Vec<Vec<String>> = (0..n)
        .map(|k| session_events(&format!("{label}-{k}"), k))
        .collect();
    let longest = sessions.iter().map(Vec::len).max().unwrap();
    let mut stream = Vec::new();
    for i in 0..longest {
        for (k, events) in sessions.iter().enumerate() {
            if let Some(line) = events.get(i) {
                stream.push((k, line.clone()));
            }
        }
    }
    (sessions, stream)
}

/// Checks that each session's answers equal a sequential replay of its `applied` events.
fn check_sessions(config: &ConfigSet, applied: &[Vec<String>], answers: &[Vec<Value>]) {
    for (k, (lines, got)) in applied.iter().zip(answers).enumerate() {
        assert_replays(config, &k.to_string(), lines, got);
    }
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < limit, "{what} not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ready(server: &Server) -> (u16, Value) {
    let response = server.client().get("/readyz");
    (response.status, response.json())
}

#[test]
fn killing_one_replica_mid_stream_loses_no_event() {
    if !require("killing_one_replica_mid_stream_loses_no_event") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let dir = tempdir();
    let config_path = config_file(dir.path());
    let config = ConfigSet::parse(CONFIG).unwrap();
    let servers = replicas(3, &redis.url(), &prefix("kill"), Some(&config_path), &[]).unwrap();
    const CLIENTS: usize = 8;
    let killed = AtomicBool::new(false);
    let midpoint = Barrier::new(CLIENTS + 1);
    let resumed = Barrier::new(CLIENTS + 1);
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (servers, killed, midpoint, resumed, config) =
                (&servers, &killed, &midpoint, &resumed, &config);
            s.spawn(move || {
                let (sessions, stream) = interleaved(&format!("kill-c{c}"), 3);
                let mut clients: Vec<Client> = servers.iter().map(Server::client).collect();
                let mut answers = vec![Vec::new(); sessions.len()];
                let half = stream.len() / 2;
                for (i, (k, line)) in stream.iter().enumerate() {
                    if i == half {
                        midpoint.wait();
                        resumed.wait();
                    }
                    // A load balancer: round robin over the replicas that are up.
                    let mut replica = (i + c) % 3;
                    if killed.load(Ordering::SeqCst) && replica == 1 {
                        replica = if i.is_multiple_of(2) { 0 } else { 2 };
                    }
                    let response = clients[replica].post("/v1/events", line);
                    assert!(matches!(response.status, 200 | 422), "{}", response.text());
                    answers[*k].push(response.json());
                }
                check_sessions(config, &sessions, &answers);
                for got in &answers[..1] {
                    assert!(detectors(got).iter().any(|d| d == "generic_repeat"));
                }
            });
        }
        midpoint.wait();
        servers[1].signal("KILL");
        killed.store(true, Ordering::SeqCst);
        resumed.wait();
    });
    assert!(
        std::net::TcpStream::connect(servers[1].addr).is_err(),
        "replica 1 is gone"
    );
}

/// Redis killed and restarted in the middle of the stream (AOF fsynced at every write, so
/// nothing acknowledged is lost with it).
fn redis_outage(fail_open: bool) {
    let mut redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dir = tempdir();
    let config_path = config_file(dir.path());
    let config = ConfigSet::parse(CONFIG).unwrap();
    let mode = if fail_open {
        "fail-open"
    } else {
        "fail-closed"
    };
    let deadline = Duration::from_millis(300);
    let servers = replicas(
        3,
        &redis.url(),
        &prefix(mode),
        Some(&config_path),
        &["--on-store-failure", mode, "--store-deadline", "300ms"],
    )
    .unwrap();
    let mut clients: Vec<Client> = servers.iter().map(Server::client).collect();
    let (sessions, stream) = interleaved(mode, 4);
    let mut answers = vec![Vec::new(); sessions.len()];
    let mut applied = vec![Vec::new(); sessions.len()];
    let half = stream.len() / 2;
    let outage = half..half + 9;
    let mut refused: Vec<(usize, String)> = Vec::new();
    let mut slowest = Duration::ZERO;
    for (i, (k, line)) in stream.iter().enumerate() {
        if i == outage.start {
            redis.kill();
        }
        if i == outage.end {
            redis.restart().unwrap();
            let restarted = Instant::now();
            wait_until(
                "readiness after the restart",
                Duration::from_secs(20),
                || {
                    servers
                        .iter()
                        .all(|s| ready(s) == (200, serde_json::json!({"status": "ready"})))
                },
            );
            eprintln!(
                "{mode}: {} events during the outage, slowest answer {slowest:?}; all replicas ready {:?} after Redis restarted",
                outage.len(),
                restarted.elapsed()
            );
            if !fail_open {
                // The host retries what was refused: it must be answered as if the
                // outage never happened.
                for (k, line) in std::mem::take(&mut refused) {
                    let response = clients[0].post("/v1/events", &line);
                    assert!(matches!(response.status, 200 | 422), "{}", response.text());
                    answers[k].push(response.json());
                    applied[k].push(line);
                }
            }
        }
        let replica = i % 3;
        let started = Instant::now();
        let response = clients[replica].post("/v1/events", line);
        let took = started.elapsed();
        if outage.contains(&i) {
            slowest = slowest.max(took);
            assert!(
                took < deadline + Duration::from_millis(700),
                "event {i} took {took:?} during the outage"
            );
            if fail_open {
                assert_eq!(response.status, 200, "{}", response.text());
                let answer = response.json();
                assert_eq!(answer["degraded"], true, "{answer}");
                if line.contains(r#""type":"call""#) {
                    assert_eq!(answer["verdict"], "allow");
                }
            } else {
                assert_eq!(response.status, 503, "{}", response.text());
                assert_eq!(response.header("retry-after"), Some("1"));
                let error = response.json()["error"].as_str().unwrap().to_owned();
                assert!(error.starts_with("store unavailable: "), "{error}");
                refused.push((*k, line.clone()));
            }
            if i == outage.end - 1 {
                let (status, body) = ready(&servers[replica]);
                let metrics = servers[replica].client().get("/metrics").text();
                assert_eq!(metric(&metrics, "loopguard_store_up"), Some(0.0));
                if fail_open {
                    assert_eq!((status, body["status"].as_str()), (200, Some("degraded")));
                    let degraded: f64 = ["call", "result", "compaction"]
                        .iter()
                        .filter_map(|t| {
                            metric(
                                &metrics,
                                &format!("loopguard_degraded_answers_total{{type=\"{t}\"}}"),
                            )
                        })
                        .sum();
                    assert!(degraded >= 3.0, "{metrics}");
                } else {
                    assert_eq!(
                        (status, body["status"].as_str()),
                        (503, Some("unavailable"))
                    );
                }
            }
            continue;
        }
        assert!(
            matches!(response.status, 200 | 422),
            "event {i}: {} {}",
            response.status,
            response.text()
        );
        let answer = response.json();
        assert!(answer.get("degraded").is_none(), "{answer}");
        answers[*k].push(answer);
        applied[*k].push(line.clone());
    }
    check_sessions(&config, &applied, &answers);
    let metrics = servers[0].client().get("/metrics").text();
    assert_eq!(metric(&metrics, "loopguard_store_up"), Some(1.0));
}

#[test]
fn redis_down_and_up_again_fail_closed() {
    if !require("redis_down_and_up_again_fail_closed") {
        return;
    }
    redis_outage(false);
}

#[test]
fn redis_down_and_up_again_fail_open() {
    if !require("redis_down_and_up_again_fail_open") {
        return;
    }
    redis_outage(true);
}

/// `CLIENT PAUSE`: Redis takes every command but answers only after 3 s. Requests end at
/// the 250 ms deadline, as 503 (fail-closed) or degraded answers (fail-open); once Redis
/// answers again, so do the replicas, and the events cut off were not applied.
#[test]
fn a_slow_redis_is_cut_off_at_the_deadline() {
    if !require("a_slow_redis_is_cut_off_at_the_deadline") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let dir = tempdir();
    let config_path = config_file(dir.path());
    let config = ConfigSet::parse(CONFIG).unwrap();
    let deadline = Duration::from_millis(250);
    for mode in ["fail-closed", "fail-open"] {
        let servers = replicas(
            2,
            &redis.url(),
            &prefix("slow"),
            Some(&config_path),
            &["--on-store-failure", mode, "--store-deadline", "250ms"],
        )
        .unwrap();
        let mut clients: Vec<Client> = servers.iter().map(Server::client).collect();
        let (sessions, stream) = interleaved(&format!("slow-{mode}"), 2);
        let mut answers = vec![Vec::new(); sessions.len()];
        let mut applied = vec![Vec::new(); sessions.len()];
        let pause_at = stream.len() / 3;
        let paused = pause_at..pause_at + 12;
        let mut pause_end = Instant::now();
        let mut cut = Vec::new();
        for (i, (k, line)) in stream.iter().enumerate() {
            if i == paused.start {
                let reply = redis.command(&["CLIENT", "PAUSE", "3000", "ALL"]).unwrap();
                assert_eq!(reply.text().as_deref(), Some("OK"));
                pause_end = Instant::now() + Duration::from_millis(3000);
            }
            if i == paused.end {
                // Let the pause end, and the replicas see Redis answer again.
                std::thread::sleep(pause_end.saturating_duration_since(Instant::now()));
                wait_until("readiness after the pause", Duration::from_secs(20), || {
                    servers
                        .iter()
                        .all(|s| ready(s) == (200, serde_json::json!({"status": "ready"})))
                });
            }
            let slow = paused.contains(&i);
            let started = Instant::now();
            let response = clients[i % 2].post("/v1/events", line);
            let took = started.elapsed();
            if slow {
                cut.push(took);
                if i == paused.start {
                    // The first waits for the deadline; later ones fail fast until a
                    // health ping gets through.
                    assert!(took >= deadline, "{mode}: event {i} answered in {took:?}");
                }
                assert!(
                    took < deadline + Duration::from_millis(600),
                    "{mode}: {took:?}"
                );
                match mode {
                    "fail-closed" => assert_eq!(response.status, 503),
                    _ => {
                        assert_eq!(response.status, 200);
                        assert_eq!(response.json()["degraded"], true);
                    }
                }
                continue;
            }
            assert!(
                matches!(response.status, 200 | 422),
                "{mode} event {i}: {}",
                response.text()
            );
            answers[*k].push(response.json());
            applied[*k].push(line.clone());
        }
        assert!(!cut.is_empty(), "{mode}: some events were cut off");
        cut.sort();
        eprintln!(
            "{mode}: {} events while Redis was paused: slowest {:?}, median {:?}",
            cut.len(),
            cut[cut.len() - 1],
            cut[cut.len() / 2]
        );
        check_sessions(&config, &applied, &answers);
    }
}

#[test]
fn a_replica_started_while_redis_is_down_serves_once_it_is_up() {
    if !require("a_replica_started_while_redis_is_down_serves_once_it_is_up") {
        return;
    }
    let port = free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let servers = replicas(
        1,
        &url,
        &prefix("late"),
        None,
        &["--store-deadline", "200ms"],
    )
    .unwrap();
    let server = &servers[0];
    let (status, body) = ready(server);
    assert_eq!(status, 503, "{body}");
    let event = r#"{"type":"compaction","session":"s","run":"r"}"#;
    let started = Instant::now();
    let response = server.client().post("/v1/events", event);
    assert_eq!(response.status, 503);
    assert!(started.elapsed() < Duration::from_secs(1));
    let _redis = RedisServer::start_on(Some(port), &[]).unwrap();
    wait_until(
        "readiness once Redis is up",
        Duration::from_secs(20),
        || ready(server).0 == 200,
    );
    let response = server.client().post("/v1/events", event);
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.json()["armed"], 3);
}

/// Settings Redis refuses stop a replica at start with the reason, at once: a database
/// number out of range, and no password where one is needed.
#[test]
fn settings_redis_refuses_stop_the_server_at_start() {
    if !require("settings_redis_refuses_stop_the_server_at_start") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let locked = RedisServer::start_with(&["--requirepass", "s3cret"]).unwrap();
    for (url, why) in [
        (format!("{}/99", redis.url()), "out of range"),
        (locked.url(), "refused the credentials"),
    ] {
        let started = Instant::now();
        let err = Server::try_start(&["--store", &url], &[]).err().unwrap();
        assert!(
            err.contains("exit status: 1") && err.contains(why),
            "{url}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{url}");
    }
}

/// Retries after Redis faults count once. Three replicas, each event to a random one; at
/// random points Redis is paused for writes longer than the deadline (the replica answers
/// 503 for an event Redis applies a moment later) or killed and started again (events meanwhile
/// are 503 and not applied). The client sends every refused event again until it is
/// answered, and repeats answered ones at random as a client whose answer was lost does:
/// every answer equals one clean replay of the stream.
#[test]
fn retried_events_after_redis_faults_count_once() {
    if !require("retried_events_after_redis_faults_count_once") {
        return;
    }
    let mut rng = Rng::seeded();
    let mut redis =
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dir = tempdir();
    let config_path = config_file(dir.path());
    let config = ConfigSet::parse(CONFIG).unwrap();
    let servers = replicas(
        3,
        &redis.url(),
        &prefix("retries"),
        Some(&config_path),
        &["--store-deadline", "150ms"],
    )
    .unwrap();
    let mut clients: Vec<Client> = servers.iter().map(Server::client).collect();
    let (sessions, stream) = interleaved("retries", 4);
    let mut answers = vec![Vec::new(); sessions.len()];
    let (mut pauses, mut kills, mut refused, mut retries) = (0, 0, 0, 0);
    for (k, line) in &stream {
        match rng.below(30) {
            0 => {
                // Writes wait 400 ms in Redis: longer than the deadline, then applied.
                redis.command(&["CLIENT", "PAUSE", "400", "WRITE"]).unwrap();
                pauses += 1;
            }
            1 => {
                redis.kill();
                let response = clients[0].post("/v1/events", line);
                assert_eq!(response.status, 503, "{}", response.text());
                refused += 1;
                redis.restart().unwrap();
                kills += 1;
            }
            _ => {}
        }
        let repeats = rng.below(3);
        let mut send = |clients: &mut Vec<Client>, retries: &mut usize, refused: &mut usize| loop {
            let replica = rng.below(3) as usize;
            let response = clients[replica].post("/v1/events", line);
            if matches!(response.status, 200 | 422) {
                return response.json();
            }
            assert_eq!(response.status, 503, "{}", response.text());
            *refused += 1;
            *retries += 1;
            std::thread::sleep(Duration::from_millis(50));
        };
        let answer = send(&mut clients, &mut retries, &mut refused);
        for _ in 0..repeats {
            retries += 1;
            let again = send(&mut clients, &mut retries, &mut refused);
            assert_eq!(again, answer, "a retry gets the same answer: {line}");
        }
        answers[*k].push(answer);
    }
    let mut double_counted = 0;
    for (events, got) in sessions.iter().zip(&answers) {
        let want = serve_common::replay_lines(&config, events);
        double_counted += got.iter().zip(&want).filter(|(g, w)| g != w).count();
    }
    eprintln!(
        "{} events over three replicas, {pauses} write pauses past the deadline, {kills} Redis kills, {refused} answers 503, {retries} retries: {double_counted} events counted twice",
        stream.len()
    );
    check_sessions(&config, &sessions, &answers);
}

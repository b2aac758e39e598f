//! Many sessions from many clients over three replicas at once, each client sending each
//! event of its sessions to the next replica in turn: the answers of every session equal
//! a sequential replay of that session, on one Redis and on a Redis Cluster; and the
//! parallel calls of one session sent to three replicas at the same moment are each
//! applied exactly once.

mod common;
mod redis_common;
mod serve_common;

use loopguard::ConfigSet;
use redis_common::{prefix, replicas, require, RedisCluster, RedisServer};
use serde_json::json;
use serve_common::{config_file, hammer_sessions, tempdir, CONFIG};

const CLIENTS: usize = 24;
const SESSIONS_PER_CLIENT: usize = 6;

fn hammer(url: &str, label: &str) -> String {
    let dir = tempdir();
    let config_path = config_file(dir.path());
    let prefix = prefix(label);
    let servers = replicas(3, url, &prefix, Some(&config_path), &[]).unwrap();
    let config = ConfigSet::parse(CONFIG).unwrap();
    hammer_sessions(&servers, &config, CLIENTS, SESSIONS_PER_CLIENT);
    prefix
}

#[test]
fn concurrent_sessions_over_three_replicas_on_one_redis() {
    if !require("concurrent_sessions_over_three_replicas_on_one_redis") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let prefix = hammer(&redis.url(), "hammer");
    let registry = format!("{prefix}{{%}}:sessions");
    let live = redis.command(&["ZCARD", &registry]).unwrap().int();
    assert_eq!(live, Some((CLIENTS * SESSIONS_PER_CLIENT) as i64));
}

#[test]
fn concurrent_sessions_over_three_replicas_on_a_redis_cluster() {
    if !require("concurrent_sessions_over_three_replicas_on_a_redis_cluster") {
        return;
    }
    let cluster = RedisCluster::start(3).unwrap();
    hammer(&cluster.url(), "hammer-cluster");
}

/// The parallel calls of one assistant message, sent as separate requests to the three
/// replicas at the same moment, again and again: every call is applied once (the run's
/// history counts them all), whatever order the replicas won in.
#[test]
fn simultaneous_updates_of_one_run_from_three_replicas_are_all_applied() {
    if !require("simultaneous_updates_of_one_run_from_three_replicas_are_all_applied") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let dir = tempdir();
    let config_path = dir.path().join("config.json5");
    std::fs::write(
        &config_path,
        "{ tools: { loopDetection: { enabled: true, historySize: 500, warningThreshold: 1000, criticalThreshold: 1001, globalCircuitBreakerThreshold: 1002 } } }",
    )
    .unwrap();
    let servers = replicas(
        3,
        &redis.url(),
        &prefix("same-run"),
        Some(&config_path),
        &[],
    )
    .unwrap();
    const ROUNDS: usize = 40;
    let barrier = std::sync::Barrier::new(servers.len() * 2);
    std::thread::scope(|s| {
        for (r, server) in servers.iter().enumerate() {
            for t in 0..2 {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut client = server.client();
                    for round in 0..ROUNDS {
                        barrier.wait();
                        let call = json!({"type":"call","session":"hot","run":"r","call_id":format!("{round}-{r}-{t}"),"tool":"read","args":{"n":round}});
                        let response = client.post("/v1/events", &call.to_string());
                        assert_eq!(response.status, 200, "{}", response.text());
                        assert_eq!(response.json()["verdict"], "allow");
                    }
                });
            }
        }
    });
    let view = servers[0].client().get("/v1/sessions/hot").json();
    assert_eq!(
        view["runs"][0]["history"]["records"],
        ROUNDS * servers.len() * 2
    );
    assert_eq!(
        view["runs"][0]["history"]["pending"],
        ROUNDS * servers.len() * 2
    );
    let conflicts: f64 = servers
        .iter()
        .map(|s| {
            let text = s.client().get("/metrics").text();
            redis_common::metric(&text, "loopguard_store_conflicts_total").unwrap()
        })
        .sum();
    eprintln!("simultaneous updates: {conflicts} conflicts retried");
}

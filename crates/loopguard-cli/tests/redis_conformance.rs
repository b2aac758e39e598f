//! The whole public conformance set through three `loopguard serve` replicas that share
//! one Redis (and, separately, a three-node Redis Cluster), each event sent to the next
//! replica in turn, as a load balancer spreading one session over replicas would: the
//! answers are those of `loopguard replay`.

mod common;
mod redis_common;
mod serve_common;

use std::fs;
use std::path::Path;

use common::vectors::{budget_cases, message_cases, name, server_config_of, spec_cases};
use redis_common::{prefix, replicas, require, RedisCluster, RedisServer};
use serde_json::Value;
use serve_common::{check_event_by_event, parallel, replay, Server};

/// One request per event, event `k` to replica `k % 3`: each answer is replay's line for
/// it (`seq` aside), and a line replay refuses is a 400 (not an event) or a 422 (refused
/// by the engine).
fn round_robin(url: &str, case: &Path) -> Result<(), String> {
    let config = Some(server_config_of(case));
    if case.join("expected-exit").exists() {
        // An invalid config: a replica refuses to start, like replay (exit 1).
        return match replicas(1, url, &prefix("bad"), config.as_deref(), &[]) {
            Ok(_) => Err(format!("{}: started with an invalid config", name(case))),
            Err(e) if e.contains("exit status: 1") && e.contains("loopguard: error:") => Ok(()),
            Err(e) => Err(format!("{}: {e}", name(case))),
        };
    }
    let servers = replicas(3, url, &prefix("conf"), config.as_deref(), &[])
        .map_err(|e| format!("{}: {e}", name(case)))?;
    let mut clients: Vec<_> = servers.iter().map(Server::client).collect();
    check_event_by_event(case, &mut clients)
}

/// Chunks of three lines as JSON Lines, each chunk to the next replica: byte for byte
/// what replay prints, `seq` shifted by the chunk's offset.
fn ndjson_chunks(url: &str, case: &Path) -> Result<(), String> {
    if case.join("expected-exit").exists() {
        return Ok(());
    }
    let config = Some(server_config_of(case));
    let servers = replicas(3, url, &prefix("chunks"), config.as_deref(), &[])
        .map_err(|e| format!("{}: {e}", name(case)))?;
    let text = fs::read(case.join("events.jsonl")).unwrap();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let mut got = Vec::new();
    for (n, chunk) in lines.chunks(3).enumerate() {
        let body: Vec<u8> = chunk
            .iter()
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect();
        let response = servers[n % 3].client().post_ndjson("/v1/events", &body);
        if response.status != 200 {
            return Err(format!("{}: status {}", name(case), response.status));
        }
        for mut answer in common::json_lines(&response.body) {
            answer["seq"] = Value::from(answer["seq"].as_u64().unwrap() + 3 * n as u64);
            got.push(answer);
        }
    }
    let want = common::json_lines(&replay(config.as_deref(), &case.join("events.jsonl")));
    if got != want {
        let first = got
            .iter()
            .zip(&want)
            .find(|(g, w)| g != w)
            .map(|(g, w)| format!("got  {g}\nwant {w}"))
            .unwrap_or_else(|| format!("{} answers, want {}", got.len(), want.len()));
        return Err(format!("{}:\n{first}", name(case)));
    }
    Ok(())
}

#[test]
fn conformance_round_robin_over_three_replicas_on_one_redis() {
    if !require("conformance_round_robin_over_three_replicas_on_one_redis") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    parallel(&spec_cases(), 3, |case| round_robin(&redis.url(), case));
    // The keys of every case (60-odd runs) are there, under the TTL, nothing else.
    let keys = redis.command(&["DBSIZE"]).unwrap().int().unwrap();
    assert!(keys > 70, "{keys} keys");
}

#[test]
fn conformance_in_json_lines_chunks_over_three_replicas_on_one_redis() {
    if !require("conformance_in_json_lines_chunks_over_three_replicas_on_one_redis") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    parallel(&spec_cases(), 3, |case| ndjson_chunks(&redis.url(), case));
}

#[test]
fn conformance_round_robin_over_three_replicas_on_a_redis_cluster() {
    if !require("conformance_round_robin_over_three_replicas_on_a_redis_cluster") {
        return;
    }
    let cluster = RedisCluster::start(3).unwrap();
    parallel(&spec_cases(), 3, |case| round_robin(&cluster.url(), case));
    for node in cluster.nodes() {
        let keys = node.command(&["DBSIZE"]).unwrap().int().unwrap();
        assert!(keys > 0, "every shard holds sessions");
    }
}

/// The spend budget vectors over three replicas on one Redis, event by event and in
/// chunks: a session's spend is shared by every replica (one atomic update per event).
#[test]
fn budget_vectors_over_three_replicas_on_one_redis() {
    if !require("budget_vectors_over_three_replicas_on_one_redis") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    parallel(&budget_cases(), 3, |case| round_robin(&redis.url(), case));
    parallel(&budget_cases(), 3, |case| ndjson_chunks(&redis.url(), case));
}

/// The extension vectors of loops without tool calls (`message` events, streamed pieces
/// among them) over three replicas on one Redis, event by event and in chunks: the run's
/// messages and the answer being streamed travel in the shared state.
#[test]
fn message_vectors_over_three_replicas_on_one_redis() {
    if !require("message_vectors_over_three_replicas_on_one_redis") {
        return;
    }
    let redis = RedisServer::start().unwrap();
    parallel(&message_cases(), 3, |case| {
        round_robin(&redis.url(), case)?;
        ndjson_chunks(&redis.url(), case)
    });
}

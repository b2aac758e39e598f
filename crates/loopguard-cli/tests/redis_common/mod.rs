//! Helpers for the tests of `loopguard serve --store redis://…`: several replicas of the
//! real binary on one Redis (or a Redis Cluster) started by the test, and the event
//! streams they are fed. Redis processes come from `loopguard_store::redis::testing`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use loopguard::ConfigSet;
use loopguard_replay::{parse_line, Replayer};
use serde_json::{json, Value};

#[allow(unused_imports)]
pub use loopguard_store::redis::testing::{require, RedisCluster, RedisServer};

use crate::serve_common::Server;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A key prefix of its own for one test (several tests share a Redis only through it).
pub fn prefix(name: &str) -> String {
    format!(
        "t-{name}-{}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `n` replicas of `loopguard serve --store URL --redis-prefix PREFIX [--config C] EXTRA`.
pub fn replicas(
    n: usize,
    url: &str,
    prefix: &str,
    config: Option<&Path>,
    extra: &[&str],
) -> Result<Vec<Server>, String> {
    let config = config.map(|c| c.display().to_string());
    let mut args = vec!["--store", url, "--redis-prefix", prefix];
    if let Some(c) = &config {
        args.extend(["--config", c.as_str()]);
    }
    args.extend_from_slice(extra);
    (0..n).map(|_| Server::try_start(&args, &[])).collect()
}

/// The conformance cases (directories), sorted.
pub fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<_> = std::fs::read_dir(crate::common::conformance_dir())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 70, "the whole conformance set is expected");
    cases
}

/// A case's config file, if it has one.
pub fn config_of(case: &Path) -> Option<PathBuf> {
    Some(case.join("config.json5")).filter(|p| p.exists())
}

/// A case's name.
pub fn name(case: &Path) -> String {
    case.file_name().unwrap().to_string_lossy().into_owned()
}

/// Thresholds low enough that every detector fires within a short session.
pub const CONFIG: &str = "{ tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 6, globalCircuitBreakerThreshold: 9, unknownToolThreshold: 4 } } }";

/// The events of one session: several runs mixing loops the detectors catch (identical
/// reads, a stuck poll, ping-pong, an unknown tool, a loop surviving a compaction) with
/// calls that make progress, and a result naming no pending call.
pub fn session_events(session: &str, seed: usize) -> Vec<String> {
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
    out.push(
        json!({"type":"result","session":session,"run":"loop","call_id":"zzz","result":1})
            .to_string(),
    );
    out
}

/// What a sequential replay answers to `lines` (each with `seq` 1, as single events get).
pub fn replay_lines(config: &ConfigSet, lines: &[String]) -> Vec<Value> {
    let mut replayer = Replayer::new(config.clone(), None);
    lines
        .iter()
        .map(|l| {
            serde_json::to_value(replayer.apply(1, &parse_line(l.as_bytes()).unwrap())).unwrap()
        })
        .collect()
}

/// The detectors that fired in a list of answers.
pub fn detectors(answers: &[Value]) -> Vec<String> {
    answers
        .iter()
        .filter_map(|a| a["detector"].as_str().map(str::to_owned))
        .collect()
}

/// Reads `loopguard_NAME VALUE` from a metrics text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

//! `/metrics` counts every verdict of every detector: each public vector (the conformance
//! set and the extension vectors, every detector turned on by one of them) sent to a real
//! server gives the per-detector counts that `loopguard replay`'s answers give, and the
//! vectors together make every detector the engine has (as the served OpenAPI document
//! lists them) appear with a non-zero count.

mod common;
mod serve_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::vectors::{cases, config_of, name, server_config_of};
use common::{json_lines, repo_root};
use serde_json::Value;
use serve_common::{replay, Server};

type Counts = BTreeMap<(String, String), u64>;

/// Per (detector, level): the calls and messages warned or blocked (or that would have
/// been, in shadow mode), and the results that aborted a run, as replay answered them.
fn replay_counts(answers: &[Value]) -> Counts {
    let mut counts = Counts::new();
    for a in answers {
        let detection = match a["type"].as_str() {
            Some("call" | "message") if a.get("detector").is_some() => Some(a),
            Some("call" | "message") => a.get("shadow"),
            _ => None,
        };
        if let Some(d) = detection {
            let key = (
                d["detector"].as_str().unwrap(),
                d["level"].as_str().unwrap(),
            );
            *counts
                .entry((key.0.to_owned(), key.1.to_owned()))
                .or_default() += 1;
        }
        if a["type"] == "result" && !a["abort"].is_null() {
            let detector = a["abort"]["detector"].as_str().unwrap().to_owned();
            *counts.entry((detector, "critical".into())).or_default() += 1;
        }
    }
    counts
}

/// The non-zero `loopguard_verdicts_total` series of a metrics text.
fn metric_counts(text: &str) -> Counts {
    let mut counts = Counts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("loopguard_verdicts_total{detector=\"") else {
            continue;
        };
        let (detector, rest) = rest.split_once("\",level=\"").unwrap();
        let (level, value) = rest.split_once("\"} ").unwrap();
        let n: u64 = value.parse().unwrap();
        if detector != "none" && n > 0 {
            counts.insert((detector.to_owned(), level.to_owned()), n);
        }
    }
    counts
}

fn check(case: &Path, fired: &mut BTreeSet<String>) -> Result<(), String> {
    if case.join("expected-exit").exists() {
        return Ok(()); // an invalid config: nothing to serve
    }
    let events = case.join("events.jsonl");
    let want = replay_counts(&json_lines(&replay(config_of(case).as_deref(), &events)));
    let config = server_config_of(case).display().to_string();
    let server = Server::start(&["--memory", "--config", &config]);
    let mut client = server.client();
    let response = client.post_ndjson("/v1/events", &std::fs::read(&events).unwrap());
    if response.status != 200 {
        return Err(format!(
            "{}: {} {}",
            name(case),
            response.status,
            response.text()
        ));
    }
    let got = metric_counts(&client.get("/metrics").text());
    fired.extend(got.keys().map(|(d, _)| d.clone()));
    if got != want {
        return Err(format!("{}: metrics {got:?}, replay {want:?}", name(case)));
    }
    Ok(())
}

#[test]
fn every_verdict_of_every_detector_is_counted() {
    let root = repo_root();
    let mut all = cases(&root.join("spec/conformance"));
    all.extend(cases(&root.join("spec/extensions")));
    let mut fired = BTreeSet::new();
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| check(case, &mut fired).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let server = Server::start(&["--memory"]);
    let doc = server.client().get("/openapi.json").json();
    let detectors: BTreeSet<String> = doc["components"]["schemas"]["Detector"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    assert!(detectors.len() >= 10, "{detectors:?}");
    let missing: Vec<_> = detectors.difference(&fired).collect();
    assert!(
        missing.is_empty(),
        "no vector made these detectors fire, so their series were never seen counting: {missing:?}"
    );
}

/// The value of the metric line `series` (name and labels) in a metrics text.
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// A retried call is answered again and its verdict counted once; a host that sends every
/// call under one id without results gets five retries, then each call counted and a
/// warning in its answer, counted in `/metrics`; the answers are replay's.
#[test]
fn retried_calls_count_once_and_reused_ids_are_told_and_counted() {
    let dir = serve_common::tempdir();
    let config = dir.path().join("live.json5");
    std::fs::write(&config, "{ tools: { loopDetection: { enabled: true } } }").unwrap();
    let server = Server::start(&["--memory", "--config", &config.display().to_string()]);
    let mut client = server.client();
    let call = |session: &str, id: &str| {
        format!(
            r#"{{"type":"call","session":"{session}","call_id":"{id}","tool":"read","args":{{"p":1}}}}"#
        )
    };
    // An id per call, every event sent twice (the first answer lost), results included.
    for i in 0..12 {
        for event in [
            call("retrying", &format!("c{i}")),
            format!(r#"{{"type":"result","session":"retrying","call_id":"c{i}","result":"same"}}"#),
        ] {
            let first = client.post("/v1/events", &event).json();
            assert_eq!(client.post("/v1/events", &event).json(), first, "{event}");
        }
    }
    let text = client.get("/metrics").text();
    let verdicts = |text: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with("loopguard_verdicts_total{"))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(metric(&text, "loopguard_events_total{type=\"call\"}"), 24);
    assert_eq!(verdicts(&text), 12, "each call's verdict once:\n{text}");
    assert_eq!(metric(&text, "loopguard_call_retries_total"), 12);
    assert_eq!(metric(&text, "loopguard_reused_call_ids_total"), 0);

    // One id for 30 identical calls, no results.
    let stream: String = (0..30).map(|_| call("reusing", "x") + "\n").collect();
    let events = dir.path().join("reused.jsonl");
    std::fs::write(&events, &stream).unwrap();
    let response = client.post_ndjson("/v1/events", stream.as_bytes());
    assert_eq!(response.status, 200, "{}", response.text());
    let served = json_lines(response.text().as_bytes());
    let replayed = json_lines(&replay(Some(&config), &events));
    assert_eq!(served, replayed);
    assert!(served[5].get("call_id_warning").is_none());
    assert!(served[6]["call_id_warning"]
        .as_str()
        .unwrap()
        .contains("give every call its own call_id"));
    assert_eq!(served[15]["verdict"], "warn", "{}", served[15]);
    let text = client.get("/metrics").text();
    assert_eq!(metric(&text, "loopguard_call_retries_total"), 12 + 5);
    assert_eq!(metric(&text, "loopguard_reused_call_ids_total"), 24);
    assert_eq!(verdicts(&text), 12 + 25);
}

//! Restarts: half of a stream, stop the server (SIGTERM or SIGKILL), start it again on the
//! same database, the rest of the stream: the answers equal an uninterrupted replay.

mod common;
mod serve_common;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use serve_common::{parallel, replay, tempdir, Server};

#[derive(Clone, Copy, Debug)]
enum Stop {
    Term,
    Kill,
}

/// The conformance cases that end normally (a fatal config has nothing to restart).
fn cases() -> Vec<PathBuf> {
    common::vectors::spec_cases()
        .into_iter()
        .filter(|p| !p.join("expected-exit").exists())
        .collect()
}

fn server(config: Option<&Path>, db: &Path) -> Server {
    let db = db.display().to_string();
    let mut args = vec!["--db", db.as_str()];
    let config = config.map(|c| c.display().to_string());
    if let Some(c) = &config {
        args.extend(["--config", c.as_str()]);
    }
    Server::start(&args)
}

/// Sends `lines` as JSON Lines; returns the answers with `seq` shifted by `offset`.
fn send(server: &Server, lines: &[&[u8]], offset: u64) -> Vec<Value> {
    let body: Vec<u8> = lines
        .iter()
        .flat_map(|l| l.iter().copied().chain([b'\n']))
        .collect();
    let response = server.client().post_ndjson("/v1/events", &body);
    assert_eq!(response.status, 200, "{}", response.text());
    common::json_lines(&response.body)
        .into_iter()
        .map(|mut a| {
            a["seq"] = Value::from(a["seq"].as_u64().unwrap() + offset);
            a
        })
        .collect()
}

/// Splits a case's stream in the middle, restarts in between, compares with replay.
fn restart_case(case: &Path, stop: Stop) -> Result<(), String> {
    let dir = tempdir();
    let db = dir.path().join("loopguard.db");
    let config = Some(common::vectors::server_config_of(case));
    let text = fs::read(case.join("events.jsonl")).unwrap();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let half = lines.len() / 2;

    let first = server(config.as_deref(), &db);
    let mut got = send(&first, &lines[..half], 0);
    match stop {
        Stop::Term => first.stop(),
        Stop::Kill => first.kill(),
    }
    let second = server(config.as_deref(), &db);
    got.extend(send(&second, &lines[half..], half as u64));
    second.stop();

    let want = common::json_lines(&replay(config.as_deref(), &case.join("events.jsonl")));
    if got != want {
        let name = case.file_name().unwrap().to_string_lossy();
        let first_difference = got
            .iter()
            .zip(&want)
            .find(|(g, w)| g != w)
            .map(|(g, w)| format!("got  {g}\nwant {w}"))
            .unwrap_or_else(|| format!("{} answers, want {}", got.len(), want.len()));
        return Err(format!(
            "{name} ({stop:?} after line {half}):\n{first_difference}"
        ));
    }
    Ok(())
}

#[test]
fn every_conformance_stream_survives_a_sigkill_in_the_middle() {
    parallel(&cases(), 3, |case| restart_case(case, Stop::Kill));
}

#[test]
fn every_conformance_stream_survives_a_graceful_restart_in_the_middle() {
    parallel(&cases(), 3, |case| restart_case(case, Stop::Term));
}

/// A call blocked before a SIGKILL, its veto pushed out of the window, and its result sent
/// to the next server: the result is still ignored (the blocked ids are part of the
/// stored run), in each of the late-result vectors, cut between the block and the result.
#[test]
fn a_late_result_across_a_sigkill_is_still_ignored() {
    let dir = common::repo_root().join("spec/vectors");
    for case in [
        "late-result-after-eviction",
        "late-results-after-terminal-stop",
        "late-results-after-many-calls",
    ] {
        let case = dir.join(case);
        let events = fs::read_to_string(case.join("events.jsonl")).unwrap();
        let lines: Vec<&str> = events.lines().collect();
        let half = lines.len() / 2;
        // The cut falls after a block and before a late result.
        assert!(lines[..half]
            .iter()
            .any(|l| l.contains("\"type\":\"call\"")));
        assert!(lines[half..]
            .iter()
            .any(|l| l.contains("\"type\":\"result\"")));
        restart_case(&case, Stop::Kill).unwrap();
    }
}

/// The point of the store: a loop that straddles a crash is still caught, at exactly the
/// call where an uninterrupted guard catches it.
#[test]
fn a_loop_straddling_a_sigkill_is_still_caught() {
    let dir = tempdir();
    let db = dir.path().join("loopguard.db");
    let config = common::repo_root().join("examples/openclaw.json5");
    let call = |i: usize| {
        format!(
            r#"{{"type":"call","session":"gw","run":"r1","call_id":"c{i}","tool":"read","args":{{"path":"/x"}}}}"#
        )
    };
    let result = |i: usize| {
        format!(
            r#"{{"type":"result","session":"gw","run":"r1","call_id":"c{i}","result":{{"content":[{{"type":"text","text":"same"}}]}}}}"#
        )
    };
    let mut verdicts = Vec::new();
    let mut server = Some(server(Some(&config), &db));
    for i in 1..=6 {
        if i == 4 {
            // The gateway crashes between the third and the fourth call.
            server.take().unwrap().kill();
            server = Some(self::server(Some(&config), &db));
        }
        let s = server.as_ref().unwrap();
        let mut client = s.client();
        let answer = client.post("/v1/events", &call(i)).json();
        verdicts.push(answer["verdict"].as_str().unwrap().to_owned());
        if answer["verdict"] != "block" {
            assert_eq!(
                client.post("/v1/events", &result(i)).json()["recorded"],
                true
            );
        }
    }
    // What a guard that never stopped answers to the same calls and results.
    let config = loopguard::ConfigSet::parse(&fs::read_to_string(&config).unwrap()).unwrap();
    let mut replayer = loopguard_events::Replayer::new(config, None);
    let mut want = Vec::new();
    for i in 1..=6 {
        let answer = replayer.apply(
            1,
            &loopguard_events::parse_line(call(i).as_bytes())
                .unwrap()
                .as_ref(),
        );
        let verdict = serde_json::to_value(&answer).unwrap()["verdict"]
            .as_str()
            .unwrap()
            .to_owned();
        if verdict != "block" {
            replayer.apply(
                2,
                &loopguard_events::parse_line(result(i).as_bytes())
                    .unwrap()
                    .as_ref(),
            );
        }
        want.push(verdict);
    }
    assert_eq!(verdicts, want);
    // warningThreshold 3, criticalThreshold 5 in examples/openclaw.json5: the block comes
    // after the crash, so it rests on state written before it.
    assert_eq!(verdicts[3..], ["warn", "warn", "block"]);
}

/// The run storm vectors, the server SIGKILLed in the middle of the row (after the second
/// run's first events): the runs before the kill still count, so the next runs are warned,
/// blocked and the session stopped exactly as in one uninterrupted replay.
#[test]
fn a_run_storm_history_survives_a_sigkill() {
    let cases: Vec<PathBuf> = common::vectors::budget_cases()
        .into_iter()
        .filter(|c| common::vectors::name(c).starts_with("run-storm-"))
        .collect();
    assert_eq!(cases.len(), 3, "the run storm vectors");
    parallel(&cases, 3, |case| restart_case(case, Stop::Kill));
}

/// The agent tree vectors, the server SIGKILLed in the middle: the tree's record (in its
/// root session's state) and each sub-agent's link (in its own) survive, so the spawns
/// after the kill are judged exactly as in one uninterrupted replay.
#[test]
fn an_agent_tree_survives_a_sigkill() {
    let cases: Vec<PathBuf> = common::vectors::budget_cases()
        .into_iter()
        .filter(|c| common::vectors::name(c).starts_with("agent-tree-"))
        .collect();
    assert_eq!(cases.len(), 6, "the agent tree vectors");
    parallel(&cases, 3, |case| restart_case(case, Stop::Kill));
}

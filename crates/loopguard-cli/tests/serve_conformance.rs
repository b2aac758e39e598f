//! The whole public conformance set through a real `loopguard serve`: the answers of
//! `POST /v1/events` are those of `loopguard replay`, as JSON Lines and event by event.

mod common;
mod serve_common;

use std::fs;
use std::path::Path;

use common::vectors::{budget_cases, config_of, message_cases, name, server_config_of, spec_cases};
use serve_common::{check_event_by_event, parallel, replay, tempdir, Server};

/// Starts a server for a case (on a fresh SQLite file unless `memory`).
fn start(case: &Path, memory: bool, dir: &Path) -> Result<Server, String> {
    let mut args: Vec<String> = Vec::new();
    args.push("--config".into());
    args.push(server_config_of(case).display().to_string());
    if memory {
        args.push("--memory".into());
    } else {
        args.push("--db".into());
        args.push(dir.join("db").display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::try_start(&args, &[])
}

/// Sent as one JSON Lines body: byte for byte what replay prints.
fn ndjson_case(case: &Path, memory: bool) -> Result<(), String> {
    let dir = tempdir();
    if case.join("expected-exit").exists() {
        // An invalid config: the server refuses to start, like replay (exit 1, one line).
        let err = match start(case, memory, dir.path()) {
            Ok(_) => return Err(format!("{}: started with an invalid config", name(case))),
            Err(e) => e,
        };
        if !err.contains("exit status: 1") || !err.contains("loopguard: error:") {
            return Err(format!("{}: {err}", name(case)));
        }
        return Ok(());
    }
    let server = start(case, memory, dir.path()).map_err(|e| format!("{}: {e}", name(case)))?;
    let events = fs::read(case.join("events.jsonl")).unwrap();
    let response = server.client().post_ndjson("/v1/events", &events);
    if response.status != 200 {
        return Err(format!(
            "{}: status {}: {}",
            name(case),
            response.status,
            response.text()
        ));
    }
    let want = replay(config_of(case).as_deref(), &case.join("events.jsonl"));
    if response.body != want {
        return Err(format!(
            "{}: answers differ from replay\n got:\n{}\n want:\n{}",
            name(case),
            response.text(),
            String::from_utf8_lossy(&want)
        ));
    }
    Ok(())
}

#[test]
fn conformance_set_as_json_lines_on_sqlite() {
    parallel(&spec_cases(), 3, |case| ndjson_case(case, false));
}

#[test]
fn conformance_set_as_json_lines_in_memory() {
    parallel(&spec_cases(), 3, |case| ndjson_case(case, true));
}

/// One request per event, as a host sends them: each answer is replay's line for it
/// (but `seq`, which is the position in the request), and a line replay refuses is a
/// 400 (not an event) or a 422 (refused by the engine) with its error.
#[test]
fn conformance_set_one_event_per_request() {
    let cases: Vec<_> = spec_cases()
        .into_iter()
        .filter(|c| !c.join("expected-exit").exists())
        .collect();
    parallel(&cases, 3, |case| {
        let dir = tempdir();
        let server = start(case, false, dir.path()).map_err(|e| format!("{}: {e}", name(case)))?;
        check_event_by_event(case, &mut [server.client()])
    });
}

/// The spend budget vectors (usage events, run, session, agent, day and progress budgets,
/// retries, refused usage) and the run storms (a session's state across its runs): as JSON
/// Lines on SQLite and in memory, and event by event.
#[test]
fn budget_vectors_answer_as_replay() {
    let cases = budget_cases();
    parallel(&cases, 3, |case| ndjson_case(case, false));
    parallel(&cases, 3, |case| ndjson_case(case, true));
    parallel(&cases, 3, |case| {
        let dir = tempdir();
        let server = start(case, true, dir.path()).map_err(|e| format!("{}: {e}", name(case)))?;
        check_event_by_event(case, &mut [server.client()])
    });
}

/// The extension vectors of loops without tool calls (`message` events, streamed pieces
/// among them), on SQLite and in memory, as JSON Lines and one request per event: the
/// run's messages live in the stored state between requests.
#[test]
fn message_vectors_on_sqlite_and_in_memory() {
    let cases = message_cases();
    parallel(&cases, 3, |case| {
        ndjson_case(case, false)?;
        ndjson_case(case, true)?;
        let dir = tempdir();
        let server = start(case, false, dir.path()).map_err(|e| format!("{}: {e}", name(case)))?;
        check_event_by_event(case, &mut [server.client()])
    });
}

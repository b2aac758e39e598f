//! Helpers shared by the store tests: applying event lines through a store, and the
//! answers of the engine's replayer to compare with.
#![allow(dead_code)]

use loopguard::ConfigSet;
use loopguard_events::{apply_event, parse_line, Answer, Replayer};
use loopguard_store::{RunKey, Store, StoreError};

/// Applies one event line through `store`.
pub async fn apply(
    store: &impl Store,
    config: &ConfigSet,
    seq: u64,
    line: &str,
) -> Result<Answer, StoreError> {
    let event = parse_line(line.as_bytes()).expect("valid event");
    let scope = event.as_ref().scope(None);
    store
        .update(RunKey::of(&scope), |run, now| {
            apply_event(
                run,
                config.for_agent(scope.agent()),
                &scope,
                &event.as_ref(),
                now,
            )
            .into_answer(seq, &scope)
        })
        .await
}

/// A call and its identical result, `n` times, in session `session`, run `run`.
pub fn loop_lines(session: &str, run: &str, n: usize) -> Vec<String> {
    (0..n)
        .flat_map(|i| {
            [
                format!(r#"{{"type":"call","session":"{session}","run":"{run}","call_id":"c{i}","tool":"read","args":{{"path":"/x"}}}}"#),
                format!(r#"{{"type":"result","session":"{session}","run":"{run}","call_id":"c{i}","result":"same"}}"#),
            ]
        })
        .collect()
}

/// What the engine's replayer answers to `lines`, numbered from 1.
pub fn replay_all(config: &ConfigSet, lines: &[String]) -> Vec<Answer> {
    let mut replayer = Replayer::new(config.clone(), None);
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| replayer.apply(i as u64 + 1, &parse_line(l.as_bytes()).unwrap().as_ref()))
        .collect()
}

/// A compaction event of run `run` in session `session`.
pub fn compaction(session: &str, run: &str) -> String {
    format!(r#"{{"type":"compaction","session":"{session}","run":"{run}"}}"#)
}

/// The names of the live runs of `session`, most recently active first.
pub async fn run_names(store: &impl Store, session: &str) -> Vec<String> {
    store
        .session(session)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run.unwrap())
        .collect()
}

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
        .update(RunKey::of(&scope), |run, session, now| {
            apply_event(
                run,
                session,
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

/// A config with a session budget of `tokens` tokens (and `withoutProgress` off, so that
/// only the session's spend decides).
pub fn session_budget(tokens: u64) -> ConfigSet {
    ConfigSet::parse(&format!(
        "{{ tools: {{ loopDetection: {{ enabled: true }} }}, loopguard: {{ budgets: {{ session: {{ tokens: {tokens} }}, withoutProgress: {{ enabled: false }} }} }} }}"
    ))
    .unwrap()
}

/// Runs of one session taking turns, `n` rounds: in each round every run reports a model
/// response of 100 tokens (sent twice, as a client that retries) and makes a call.
pub fn budget_lines(session: &str, runs: &[&str], n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        for run in runs {
            let usage = format!(
                r#"{{"type":"usage","session":"{session}","run":"{run}","id":"u{i}","model":"gpt-4o","input_tokens":80,"output_tokens":20}}"#
            );
            out.push(usage.clone());
            out.push(usage);
            out.push(format!(
                r#"{{"type":"call","session":"{session}","run":"{run}","call_id":"c{i}","tool":"read","args":{{"n":{i}}}}}"#
            ));
        }
    }
    out
}

/// Whether any answer is a call blocked by `detector`.
pub fn blocked_by(answers: &[Answer], detector: loopguard::Detector) -> bool {
    answers.iter().any(|a| {
        matches!(a, Answer::Call { verdict, .. }
            if verdict.is_blocked() && verdict.detection().is_some_and(|d| d.detector == detector))
    })
}

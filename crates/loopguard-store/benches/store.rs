//! Micro benchmarks of the parts of a store update: encoding a run state, the delta the
//! SQLite store logs for one event, and one update through each store (the SQLite one
//! includes its commit and fsync).
//!
//! ```sh
//! cargo bench -p loopguard-store --bench store
//! ```

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use loopguard::{ConfigSet, ManualClock, Millis, RunState, SessionState};
use loopguard_events::{apply_event, parse_line, Event};
use loopguard_store::{delta, Limits, MemoryStore, RunKey, SqliteOptions, SqliteStore, Store};

/// A call and its ~1 KiB result, `n` times, in one run.
fn events(n: usize) -> Vec<Event> {
    let text =
        "fn handle(request: &Request) -> Response { respond(request.id, Status::Ok) }\n".repeat(13);
    (0..n)
        .flat_map(|i| {
            let call = format!(
                r#"{{"type":"call","session":"bench","run":"r","call_id":"c{i}","tool":"read","args":{{"path":"/src/module_{}/handler.rs","offset":0,"limit":400}}}}"#,
                i % 7
            );
            let result = serde_json::json!({"type":"result","session":"bench","run":"r","call_id":format!("c{i}"),
                "result":{"content":[{"type":"text","text":format!("{i}{text}")}]}})
            .to_string();
            [parse_line(call.as_bytes()).unwrap(), parse_line(result.as_bytes()).unwrap()]
        })
        .collect()
}

fn full_state(config: &ConfigSet) -> RunState {
    let mut state = RunState::default();
    for (i, event) in events(30).iter().enumerate() {
        let scope = event.as_ref().scope(None);
        apply_event(
            &mut state,
            &mut SessionState::default(),
            config.global(),
            &scope,
            &event.as_ref(),
            Millis::new(1000),
        )
        .into_answer(i as u64, &scope);
    }
    state
}

fn encoding(c: &mut Criterion) {
    let config = ConfigSet::enabled_defaults();
    let state = full_state(&config);
    let bytes = state.to_bytes();
    let mut group = c.benchmark_group("run_state");
    group.bench_function(
        format!("to_bytes ({} bytes, 30 records)", bytes.len()),
        |b| b.iter(|| state.to_bytes()),
    );
    group.bench_function("from_bytes", |b| {
        b.iter(|| RunState::from_bytes(&bytes).unwrap())
    });
    group.bench_function("apply one call (engine only)", |b| {
        let events = events(31);
        let call = &events[60];
        b.iter_batched(
            || state.clone(),
            |mut s| {
                let scope = call.as_ref().scope(None);
                apply_event(
                    &mut s,
                    &mut SessionState::default(),
                    config.global(),
                    &scope,
                    &call.as_ref(),
                    Millis::new(2000),
                )
                .into_answer(1, &scope)
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// The delta of one event: a full window of 30 calls takes a 31st call (the oldest record
/// goes, every other shifts), then its result.
fn deltas(c: &mut Criterion) {
    let config = ConfigSet::enabled_defaults();
    let state = full_state(&config);
    let before = state.to_bytes();
    let events = events(31);
    let mut steps = vec![before.clone()];
    let mut next = state.clone();
    for (i, event) in events[60..].iter().enumerate() {
        let scope = event.as_ref().scope(None);
        apply_event(
            &mut next,
            &mut SessionState::default(),
            config.global(),
            &scope,
            &event.as_ref(),
            Millis::new(2000),
        )
        .into_answer(61 + i as u64, &scope);
        steps.push(next.to_bytes());
    }
    let mut group = c.benchmark_group("delta");
    for (name, old, new) in [
        ("call", &steps[0], &steps[1]),
        ("result", &steps[1], &steps[2]),
    ] {
        let d = delta::diff(old, new).expect("a small delta");
        group.bench_function(
            format!("diff, {name} ({} of {} bytes)", d.len(), new.len()),
            |b| b.iter(|| delta::diff(old, new)),
        );
        group.bench_function(format!("apply, {name}"), |b| {
            b.iter(|| delta::apply(old, &d).unwrap())
        });
    }
    group.finish();
}

fn updates(c: &mut Criterion) {
    let config = ConfigSet::enabled_defaults();
    let events = events(1000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let clock = Arc::new(ManualClock::new(Millis::new(1000)));
    let memory = MemoryStore::new(Limits::default(), clock.clone());
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(
        &dir.path().join("bench.db"),
        Limits::default(),
        clock,
        SqliteOptions::default(),
    )
    .unwrap();
    let mut group = c.benchmark_group("update");
    let mut i = 0;
    group.bench_function("memory", |b| {
        b.iter(|| {
            let event = &events[i % events.len()];
            i += 1;
            let scope = event.as_ref().scope(None);
            runtime
                .block_on(memory.update(RunKey::of(&scope), |run, session, now| {
                    apply_event(run, session, config.global(), &scope, &event.as_ref(), now)
                        .into_answer(1, &scope)
                }))
                .unwrap()
        })
    });
    group.sample_size(20);
    group.bench_function("sqlite, one at a time (commit + fsync each)", |b| {
        b.iter(|| {
            let event = &events[i % events.len()];
            i += 1;
            let scope = event.as_ref().scope(None);
            runtime
                .block_on(sqlite.update(RunKey::of(&scope), |run, session, now| {
                    apply_event(run, session, config.global(), &scope, &event.as_ref(), now)
                        .into_answer(1, &scope)
                }))
                .unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, encoding, deltas, updates);
criterion_main!(benches);

//! What the spend budgets cost (no workload files needed):
//!
//! - `usage/priced`, `usage/host_cost`: a model response's usage counted with budgets on
//!   every scope (run, session, agent, day, withoutProgress), 1,000 responses with ids per
//!   iteration across 10 runs of one session: priced from the table by a model name that
//!   needs normalizing (a provider prefix, a date suffix, a tiered price), or by the
//!   host's own cost;
//! - `usage/call_spec`, `usage/call_block`, `usage/call_budgets`: a call cycle (`begin` +
//!   `finish`, a new read each time) with SPEC's engine, with an empty `loopguard` block
//!   (which turns on failure tracking), and with those budgets: `call_budgets` less
//!   `call_block` is what judging a call against them, and tracking its progress, adds.
//!
//! Time per event = time per iteration / 1,000 (criterion's throughput line shows events
//! per second).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use loopguard::{Call, ConfigSet, Guard, Limits, ManualClock, Millis, Outcome, Scope, Usage};
use serde_json::{json, Value};

/// Budgets on every scope, none of them reached here.
const BUDGETS: &str = "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 1000000000000, cost: 1000000, calls: 1000000000 }, session: { cost: 1000000 }, agent: { tokens: 1000000000000 }, day: { cost: 1000000 }, withoutProgress: { calls: 1000000000 } } } }";
const SPEC: &str = "{ tools: { loopDetection: { enabled: true } } }";
const BLOCK: &str = "{ tools: { loopDetection: { enabled: true } }, loopguard: {} }";
const N: usize = 1000;

fn guard(config: &str) -> Guard<ManualClock> {
    Guard::with_clock(
        ConfigSet::parse(config).unwrap(),
        Limits::default(),
        ManualClock::new(Millis::ZERO),
    )
}

fn usage(c: &mut Criterion) {
    let ids: Vec<String> = (0..N).map(|i| format!("resp_{i:06}")).collect();
    let runs: Vec<String> = (0..10).map(|i| format!("run-{i}")).collect();
    let mut group = c.benchmark_group("usage");
    group.throughput(Throughput::Elements(N as u64));
    for (name, model, cost) in [
        ("priced", Some("anthropic/claude-sonnet-4-5-20250929"), None),
        ("host_cost", None, Some(0.0123)),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || guard(BUDGETS),
                |guard| {
                    for (i, id) in ids.iter().enumerate() {
                        let scope = Scope::new("perf")
                            .with_run(Some(&runs[i % runs.len()]))
                            .with_agent(Some("coder"));
                        let usage = Usage::new(1_200, 300)
                            .with_cache(8_000, 500)
                            .with_model(model)
                            .with_cost(cost)
                            .with_id(Some(id));
                        black_box(guard.record_usage(&scope, &usage).unwrap());
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    let args: Vec<Value> = (0..N)
        .map(|i| json!({ "path": format!("/src/f{i}.rs") }))
        .collect();
    let result = json!({ "content": [{ "type": "text", "text": "fn main() {}" }] });
    for (name, config) in [
        ("call_spec", SPEC),
        ("call_block", BLOCK),
        ("call_budgets", BUDGETS),
    ] {
        group.bench_function(name, |b| {
            b.iter_batched_ref(
                || guard(config),
                |guard| {
                    let scope = Scope::new("perf").with_run(Some("r"));
                    for (a, id) in args.iter().zip(&ids) {
                        let call = Call::new("read", a).with_id(Some(id));
                        let ticket = guard.begin(&scope, &call);
                        black_box(guard.finish(ticket, Outcome::Result(&result)));
                    }
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, usage);
criterion_main!(benches);

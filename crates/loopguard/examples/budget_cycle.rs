//! The work of `benches/budgets.rs` as a plain program, for instruction counts
//! (`valgrind --tool=callgrind --toggle-collect='*measured*'`), which the noise of a busy
//! machine does not move:
//!
//! ```sh
//! cargo build --release -p loopguard --example budget_cycle
//! valgrind --tool=callgrind --toggle-collect='*measured*' --callgrind-out-file=/dev/null \
//!   target/release/examples/budget_cycle call_budgets 10000
//! ```
//!
//! Modes: `call_spec`, `call_block`, `call_budgets` (a call cycle with SPEC's engine, an
//! empty `loopguard` block, budgets on every scope), `usage_priced`, `usage_host_cost` (a
//! usage event under those budgets). Instructions per event = the total / N.

use loopguard::{Call, ConfigSet, Guard, Limits, ManualClock, Millis, Outcome, Scope, Usage};
use serde_json::{json, Value};

const BUDGETS: &str = "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { tokens: 1000000000000, cost: 1000000, calls: 1000000000 }, session: { cost: 1000000 }, agent: { tokens: 1000000000000 }, day: { cost: 1000000 }, withoutProgress: { calls: 1000000000 } } } }";

#[inline(never)]
fn measured_calls(guard: &mut Guard<ManualClock>, args: &[Value], ids: &[String], result: &Value) {
    let scope = Scope::new("perf").with_run(Some("r"));
    for (a, id) in args.iter().zip(ids) {
        let call = Call::new("read", a).with_id(Some(id));
        let ticket = guard.begin(&scope, &call);
        std::hint::black_box(guard.finish(ticket, Outcome::Result(result)));
    }
}

#[inline(never)]
fn measured_usage(
    guard: &mut Guard<ManualClock>,
    ids: &[String],
    runs: &[String],
    model: Option<&str>,
    cost: Option<f64>,
) {
    for (i, id) in ids.iter().enumerate() {
        let scope = Scope::new("perf")
            .with_run(Some(&runs[i % runs.len()]))
            .with_agent(Some("coder"));
        let usage = Usage::new(1_200, 300)
            .with_cache(8_000, 500)
            .with_model(model)
            .with_cost(cost)
            .with_id(Some(id));
        std::hint::black_box(guard.record_usage(&scope, &usage).ok());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().expect("usage: budget_cycle MODE [N]");
    let n: usize = args.next().map_or(10_000, |s| s.parse().expect("N"));
    let config = match mode.as_str() {
        "call_spec" => "{ tools: { loopDetection: { enabled: true } } }",
        "call_block" => "{ tools: { loopDetection: { enabled: true } }, loopguard: {} }",
        _ => BUDGETS,
    };
    let mut guard = Guard::with_clock(
        ConfigSet::parse(config).expect("config"),
        Limits::default(),
        ManualClock::new(Millis::ZERO),
    );
    let ids: Vec<String> = (0..n).map(|i| format!("id_{i:06}")).collect();
    let runs: Vec<String> = (0..10).map(|i| format!("run-{i}")).collect();
    match mode.as_str() {
        "usage_priced" => measured_usage(
            &mut guard,
            &ids,
            &runs,
            Some("anthropic/claude-sonnet-4-5-20250929"),
            None,
        ),
        "usage_host_cost" => measured_usage(&mut guard, &ids, &runs, None, Some(0.0123)),
        _ => {
            let calls: Vec<Value> = (0..n)
                .map(|i| json!({ "path": format!("/src/f{i}.rs") }))
                .collect();
            let result = json!({ "content": [{ "type": "text", "text": "fn main() {}" }] });
            measured_calls(&mut guard, &calls, &ids, &result);
        }
    }
}

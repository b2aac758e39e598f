//! Any bytes as a stored run state or session state (a database row or a Redis value
//! someone else wrote): decoding fails cleanly or gives a state that encodes back to bytes
//! which decode to the same state, and that the engine can go on with (every detector of
//! the `recommended` preset on, budgets on every scope) without a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use loopguard::{Call, ConfigSet, Millis, Outcome, RunState, Scope, SessionState, Usage};

static PRESET: LazyLock<ConfigSet> = LazyLock::new(|| {
    ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended', budgets: { run: { tokens: 1000, calls: 5 }, session: { cost: 1 }, agent: { tokens: 5000 }, day: { wallSeconds: 60 }, withoutProgress: { calls: 3 } } } }",
    )
    .expect("valid config")
});

fuzz_target!(|data: &[u8]| {
    let run = RunState::from_bytes(data).ok();
    let session = SessionState::from_bytes(data).ok();
    if let Some(session) = &session {
        let bytes = session.to_bytes();
        let again = SessionState::from_bytes(&bytes).expect("its own encoding decodes");
        assert_eq!(again.to_bytes(), bytes, "encoding is stable");
    }
    if run.is_none() && session.is_none() {
        return;
    }
    let mut state = run.unwrap_or_default();
    let mut session = session.unwrap_or_default();
    let bytes = state.to_bytes();
    let again = RunState::from_bytes(&bytes).expect("its own encoding decodes");
    assert_eq!(again.to_bytes(), bytes, "encoding is stable");
    let cfg = PRESET.global();
    let scope = Scope::new("s").with_agent(Some("a"));
    let args = serde_json::json!({"path": "/a"});
    let failed = serde_json::json!("failed");
    for i in 0..3u64 {
        let id = format!("f{i}");
        let usage = Usage::new(400, 10)
            .with_id(Some(&id))
            .with_model(Some("gpt-4o"));
        let _ = state.usage(&mut session, cfg, &scope, &usage, Millis::new(i));
        let call = Call::new("edit", &args).with_id(Some(&id));
        let ticket = state.begin(&mut session, cfg, &scope, &call, Millis::new(i));
        let _ = state.finish(
            &mut session,
            cfg,
            ticket,
            Outcome::Error(&failed),
            Millis::new(i),
        );
    }
});

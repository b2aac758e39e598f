//! Any bytes as a stored run state (a database row or a Redis value someone else wrote):
//! decoding fails cleanly or gives a state that encodes back to bytes which decode to the
//! same state, and that the engine can go on with (every detector of the `recommended`
//! preset on) without a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use loopguard::{Call, ConfigSet, Millis, Outcome, RunState, Scope};

static PRESET: LazyLock<ConfigSet> = LazyLock::new(|| {
    ConfigSet::parse(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }",
    )
    .expect("valid config")
});

fuzz_target!(|data: &[u8]| {
    if let Ok(mut state) = RunState::from_bytes(data) {
        let bytes = state.to_bytes();
        let again = RunState::from_bytes(&bytes).expect("its own encoding decodes");
        assert_eq!(again.to_bytes(), bytes, "encoding is stable");
        let cfg = PRESET.global();
        let scope = Scope::new("s");
        let args = serde_json::json!({"path": "/a"});
        let failed = serde_json::json!("failed");
        for i in 0..3u64 {
            let id = format!("f{i}");
            let call = Call::new("edit", &args).with_id(Some(&id));
            let ticket = state.begin(cfg, &scope, &call, Millis::new(i));
            let _ = state.finish(cfg, ticket, Outcome::Error(&failed), Millis::new(i));
        }
    }
});

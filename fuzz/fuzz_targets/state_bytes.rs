//! Any bytes as a stored run state (a database row or a Redis value someone else wrote):
//! decoding fails cleanly or gives a state that encodes back to bytes which decode to the
//! same state, and that the engine can go on with (every detector of the `recommended`
//! preset on) without a panic.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use loopguard::{CallPrint, ConfigSet, Outcome, RunState, Scope};

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
            let print = CallPrint::for_config("edit", &args, cfg);
            let id = format!("f{i}");
            let _ = state.before_call(cfg, &scope, &print, Some(&id), None, i);
            state.after_call(cfg, &scope, &print, Some(&id), Outcome::Error(&failed), i);
        }
    }
});

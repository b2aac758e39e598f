//! Any bytes as a hook's stdin, for each agent: the hook answers with exit status 0 or 1
//! (never 2, which the agents read as "block"), and what it prints on stdout is JSON or
//! nothing. The state goes to one database in a temporary directory (on tmpfs when there
//! is one), so that later inputs meet the state earlier ones left.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use loopguard_hooks::{handle, Agent, Options};

fn db() -> &'static PathBuf {
    static DB: OnceLock<PathBuf> = OnceLock::new();
    DB.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("loopguard-fuzz-hook-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        dir.join("loopguard.db")
    })
}

fuzz_target!(|data: &[u8]| {
    let options = Options::new(db().clone());
    for agent in [Agent::ClaudeCode, Agent::Codex, Agent::Gemini] {
        let response = handle(
            agent,
            data,
            &options,
            loopguard::Millis::new(1_700_000_000_000),
        );
        assert!(
            response.exit_code <= 1,
            "exit status {}",
            response.exit_code
        );
        let stdout = response.stdout.trim();
        if !stdout.is_empty() {
            serde_json::from_str::<serde_json::Value>(stdout).expect("stdout is JSON");
        }
    }
});

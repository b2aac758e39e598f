//! Any bytes as a config document: never a panic, and a valid document explains itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::ConfigSet;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ConfigSet::parse_named(text, Some("fuzz.json5")) {
        Ok(set) => {
            // Effective configs are always ordered after clamping.
            for (_, _, cfg) in set.agents() {
                assert!(cfg.critical_threshold() > cfg.warning_threshold());
                assert!(cfg.global_circuit_breaker_threshold() > cfg.critical_threshold());
            }
            let g = set.global();
            assert!(g.critical_threshold() > g.warning_threshold());
            assert!(g.global_circuit_breaker_threshold() > g.critical_threshold());
        }
        Err(e) => {
            assert!(!e.issues.is_empty());
            let _ = e.to_string();
        }
    }
});

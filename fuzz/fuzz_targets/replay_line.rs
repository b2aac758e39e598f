//! Any bytes as replay input: every line gets exactly one answer (or none if blank), and the
//! answers serialize. Lines are applied to one replayer, so state-dependent paths (results by
//! id, vetoes, stopped runs, the compaction guard) are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::ConfigSet;
use loopguard_events::{replay, Replayer};

fuzz_target!(|data: &[u8]| {
    let config = ConfigSet::parse(
        "{tools:{loopDetection:{enabled:true,warningThreshold:2,criticalThreshold:3,globalCircuitBreakerThreshold:4,unknownToolThreshold:2,historySize:8,postCompactionGuard:{windowSize:2}}}}",
    )
    .expect("valid config");
    let mut replayer = Replayer::new(config, None);
    let mut out = Vec::new();
    let summary = replay(&mut replayer, data, &mut out, 1 << 16).expect("in-memory I/O");
    let answers = out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count() as u64;
    assert_eq!(answers, summary.events + summary.invalid);
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("answers are JSON");
        assert!(v.get("seq").is_some());
    }
});

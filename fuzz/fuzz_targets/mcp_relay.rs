//! Any bytes as the two sides of an MCP stdio session: each line goes to the relay from
//! the client or from the server (chosen by its first byte), then the relay is closed.
//! Nothing panics, and everything the relay itself writes to the client is JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::ConfigSet;
use loopguard_mcp::Relay;

fuzz_target!(|data: &[u8]| {
    let config = ConfigSet::parse(
        "{tools:{loopDetection:{enabled:true,warningThreshold:2,criticalThreshold:3,globalCircuitBreakerThreshold:4,unknownToolThreshold:2,historySize:8}}}",
    )
    .expect("valid config");
    let mut relay = Relay::new(config, "fuzz".into(), None);
    for line in data.split(|&b| b == b'\n') {
        match line.split_first() {
            Some((&side, rest)) if side & 1 == 1 => {
                let decided = relay.from_server(rest);
                let _ = decided.to_client;
            }
            Some((_, rest)) => {
                let decided = relay.from_client(rest);
                if let Some(answer) = decided.to_client {
                    serde_json::from_slice::<serde_json::Value>(&answer)
                        .expect("the proxy's own answers are JSON");
                }
            }
            None => {}
        }
    }
    for answer in relay.close("fuzzing ends") {
        serde_json::from_slice::<serde_json::Value>(&answer).expect("closing answers are JSON");
    }
});

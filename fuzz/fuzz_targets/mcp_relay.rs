//! Any bytes as the two sides of an MCP stdio session: each line goes to the relay from
//! the client or from the server, whole or as the head of a line too long to read (chosen
//! by its first byte), then the relay is closed.
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
        let routed = match line.split_first() {
            // The second bit: a line too long for the proxy, of which this is the head.
            Some((&side, rest)) if side & 3 == 3 => {
                relay.server_line_too_long(rest, 1 << 30, 1 << 29)
            }
            Some((&side, rest)) if side & 3 == 2 => {
                relay.client_line_too_long(rest, 1 << 30, 1 << 29)
            }
            Some((&side, rest)) if side & 1 == 1 => relay.from_server(rest),
            Some((_, rest)) => relay.from_client(rest),
            None => continue,
        };
        if line[0] & 1 == 0 {
            for answer in &routed.to_client {
                serde_json::from_slice::<serde_json::Value>(answer)
                    .expect("the proxy's own answers are JSON");
            }
        }
    }
    for answer in relay.close("fuzzing ends") {
        serde_json::from_slice::<serde_json::Value>(&answer).expect("closing answers are JSON");
    }
});

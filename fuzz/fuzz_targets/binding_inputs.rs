//! What the bindings hand back to the engine: a ticket's bytes (the Node binding keeps them
//! as a string, which JavaScript code can change) and a sidecar's answer (read back by the
//! Python and Node clients of `loopguard serve`). Bytes that are not a ticket are refused;
//! a ticket read back encodes to the same bytes and finishes on a run without a panic. An
//! answer is read or refused; one read writes out as it reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loopguard::{ConfigSet, Millis, Outcome, RunState, SessionState, Ticket};
use loopguard_events::Answer;

fuzz_target!(|data: &[u8]| {
    if let Some(ticket) = Ticket::from_bytes(data) {
        let bytes = ticket.to_bytes();
        assert_eq!(
            Ticket::from_bytes(&bytes).map(|t| t.to_bytes()),
            Some(bytes)
        );
        let config = ConfigSet::enabled_defaults();
        let cfg = config.global();
        let result = serde_json::json!("same");
        let _ = RunState::default().finish(
            &mut SessionState::default(),
            cfg,
            ticket,
            Outcome::Result(&result),
            Millis::new(1),
        );
    }
    if let Ok(answer) = Answer::from_json(data, "tool") {
        let text = serde_json::to_vec(&answer).expect("an answer writes out");
        let again = Answer::from_json(&text, "tool").expect("its own answer reads back");
        assert_eq!(serde_json::to_vec(&again).expect("writes out"), text);
    }
});

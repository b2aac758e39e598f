//! The Continue session reader on arbitrary bytes, alone and as the JSON arguments of a
//! tool call (parsed from their text) in an agent-mode session.
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::Continue,
        data,
        r#"{"sessionId":"s","title":"t","workspaceDirectory":"w","history":[{"message":{"role":"user","content":"go"}},{"message":{"role":"assistant","content":"","toolCalls":[{"id":"c","type":"function","function":{"name":"read_file","arguments":""#,
        r#""}}]},"toolCallStates":[{"toolCallId":"c","status":"errored"}]},{"message":{"role":"tool","toolCallId":"c","content":"x"}}]}"#,
        true,
    );
});

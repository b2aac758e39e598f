//! The OpenCode export reader on arbitrary bytes, alone and as the messages of an export
//! (so that the bytes are walked as the message array).
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::OpenCode,
        data,
        r#"{"info":{"id":"ses_1","projectID":"p"},"messages":["#,
        "]}",
        false,
    );
});

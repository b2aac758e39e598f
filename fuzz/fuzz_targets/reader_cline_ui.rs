//! The Cline / Roo Code UI log reader on arbitrary bytes, alone and as the JSON text of a
//! `tool` message (the text the reader parses for the call and its result).
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::ClineUi,
        data,
        r#"[{"ts":1,"type":"say","say":"task","text":"go"},{"ts":2,"type":"ask","ask":"tool","text":""#,
        r#""},{"ts":3,"type":"say","say":"error","text":"boom"}]"#,
        true,
    );
});

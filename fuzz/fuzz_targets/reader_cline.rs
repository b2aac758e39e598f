//! The Cline / Roo Code API history reader on arbitrary bytes, alone and as the text of an
//! assistant message followed by a user message (so that XML tool calls and
//! `[tool] Result:` texts are parsed from them).
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::Cline,
        data,
        r#"[{"role":"user","content":[{"type":"text","text":"<task>go</task>"}]},{"role":"assistant","content":[{"type":"text","text":""#,
        r#""}]},{"role":"user","content":[{"type":"text","text":"[read_file for 'a'] Result:\nx"}]}]"#,
        true,
    );
});

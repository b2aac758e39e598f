//! The aider chat history reader on arbitrary bytes, alone and after a session header and
//! a user message (so that the bytes are read as the model's answer and aider's output:
//! SEARCH/REPLACE blocks, verdicts, lint reports, token lines).
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::Aider,
        data,
        "\n# aider chat started at 2024-08-07 13:24:55\n\n#### fix it\n\n",
        "\n",
        false,
    );
});

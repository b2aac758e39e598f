//! The goose session reader on arbitrary bytes, alone and as lines after a session's
//! metadata line and a user message (so that every line is read as a message).
#![no_main]

#[path = "common/reader.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use loopguard_transcripts::Format;

fuzz_target!(|data: &[u8]| {
    common::run(
        Format::Goose,
        data,
        "{\"working_dir\":\"/p\",\"description\":\"d\",\"message_count\":2}\n{\"role\":\"user\",\"created\":1,\"content\":[{\"type\":\"text\",\"text\":\"go\"}]}\n",
        "\n",
        false,
    );
});

//! Shared by the per-reader targets: one reader on arbitrary bytes, as they are and
//! wrapped in the start of a file of its format (so that the fuzzer reaches the code past
//! detection of the envelope at once), with what every reader promises checked on the
//! items it gives: no panic, no I/O error from memory, every call named, every result
//! tied to a call id, positions inside the input.

use std::io::Cursor;

use loopguard_events::Event;
use loopguard_transcripts::{read, Format, Item, Pos, ReadOptions, Sink};

struct Check {
    len: u64,
}

impl Sink for Check {
    fn push(&mut self, pos: Pos, item: Item) {
        assert!(
            pos.offset <= self.len,
            "{pos:?} past the end ({})",
            self.len
        );
        match item {
            Item::Event(Event::Call { tool, .. }) => assert!(!tool.trim().is_empty()),
            Item::Event(Event::Result { call_id, .. }) => {
                assert!(call_id.is_some_and(|id| !id.is_empty()))
            }
            _ => {}
        }
    }
}

/// Reads `data` as `format`, checking every item.
pub fn check(format: Format, data: &[u8]) {
    let mut options = ReadOptions::new("fuzz");
    options.max_line = 1 << 16;
    let mut sink = Check {
        len: data.len() as u64,
    };
    read(format, Cursor::new(data), &options, &mut sink).expect("in-memory reads do not fail");
}

/// Reads `data` as it is, then inside `head … tail` (the fuzzer's bytes as JSON string
/// content when `escape`, so that they land in a text the reader parses further).
pub fn run(format: Format, data: &[u8], head: &str, tail: &str, escape: bool) {
    check(format, data);
    let mut wrapped = head.as_bytes().to_vec();
    if escape {
        let text = String::from_utf8_lossy(data);
        let quoted = serde_json::to_string(&text).expect("a string serialises");
        wrapped.extend_from_slice(quoted[1..quoted.len() - 1].as_bytes());
    } else {
        wrapped.extend_from_slice(data);
    }
    wrapped.extend_from_slice(tail.as_bytes());
    check(format, &wrapped);
}

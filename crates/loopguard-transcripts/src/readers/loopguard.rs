//! loopguard's own replay events (SPEC §7, `docs/replay-format.md`): every line is
//! already a call, a result, a compaction or a message with its session and run, and is
//! passed through as it is. Lines that `loopguard replay` would answer with an error are counted
//! as skipped, with the same message.

use std::io::{self, BufRead, Seek};

use loopguard_events::{Event, OwnedOutcome};
use serde_json::Value;

use crate::item::{Item, Sink};
use crate::readers::lines::Lines;
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads replay events.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    while let Some(line) = lines.next_line(&mut stats)? {
        match loopguard_events::parse_line(line.bytes) {
            Ok(event) => {
                stats.record();
                if let Event::Result { outcome, .. } = &event {
                    let failed = match outcome {
                        OwnedOutcome::Error(_) => true,
                        OwnedOutcome::Result(v) => v.get("isError") == Some(&Value::Bool(true)),
                        OwnedOutcome::Nothing => false,
                    };
                    if failed {
                        stats.failure("error");
                    }
                }
                sink.push(line.pos, Item::Event(event));
            }
            Err(error) => {
                let reason = if error.starts_with("invalid JSON") || error.contains("UTF-8") {
                    if line.unterminated && error.contains("ends early") {
                        SkipReason::TruncatedLastLine
                    } else {
                        SkipReason::InvalidJson
                    }
                } else if error.starts_with("unknown event type") {
                    SkipReason::UnknownEntryType
                } else if error == "event must be a JSON object" {
                    SkipReason::NotAnObject
                } else {
                    SkipReason::MalformedEntry
                };
                stats.skip(reason, line.pos.line, || error);
            }
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use crate::Format;

    #[test]
    fn passes_events_through_and_counts_bad_lines() {
        let input = concat!(
            r#"{"type":"call","session":"s","run":"r","call_id":"c1","tool":"read","args":{"p":1}}"#,
            "\n",
            r#"{"type":"result","session":"s","run":"r","call_id":"c1","result":{"content":[]}}"#,
            "\n",
            r#"{"type":"compaction","session":"s2"}"#,
            "\n",
            "[1]\n",
            r#"{"type":"teleport"}"#,
            "\n",
            r#"{"type":"call","args":{}}"#,
            "\n",
        );
        let mut input = input.as_bytes().to_vec();
        input.extend(b"{\"type\":\"call\",\"tool\":\"\xff\"}\n");
        input.extend(br#"{"type":"call","tool":"#);
        let r = read_bytes(Format::Loopguard, &input, "hint");
        assert_eq!((r.calls(), r.results(), r.compactions()), (1, 1, 1));
        assert_eq!(
            r.runs(),
            vec![("s".into(), Some("r".into())), ("s2".into(), None)]
        );
        let s = &r.stats;
        assert_eq!(s.skipped_for(SkipReason::NotAnObject), 1);
        assert_eq!(s.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(s.skipped_for(SkipReason::MalformedEntry), 1);
        assert_eq!(s.skipped_for(SkipReason::InvalidJson), 1);
        assert_eq!(s.skipped_for(SkipReason::TruncatedLastLine), 1);
    }
}

//! Per-call streams pulled out of real OpenClaw sessions (`anchor-call-streams.json`,
//! FORMATS §4): `{"<label>": {session_id, runId, t0, calls: [{seq, id, name, args, runId,
//! isError, resultText, ordinal, …}]}}`, read as a stream (one call in memory at a time).
//!
//! Each stream is a session (its `session_id`, else its label). Each call is a call in its
//! own `runId` (else the stream's), immediately followed by its result: the `resultText`
//! as a text result, or as an error when `isError` is true. Calls that share a `seq` were
//! one parallel batch: one [`Item::Turn`]. The streams carry no compactions and no usage.

use std::io::{self, BufRead, Seek};

use loopguard_events::OwnedOutcome;
use serde_json::Value;

use crate::item::{self, Item, Pos, Sink};
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads derived OpenClaw call streams.
pub fn read<R: BufRead + Seek>(
    input: R,
    _options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut walker = Streams {
        session: None,
        run: None,
        last_seq: None,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb(walker.stats);
    Ok(stats)
}

struct Streams<'a> {
    session: Option<String>,
    run: Option<String>,
    last_seq: Option<Value>,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Walker for Streams<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Key(_)] => {
                self.session = None;
                self.run = None;
                self.last_seq = None;
                Want::Descend
            }
            [Seg::Key(_), Seg::Key(k)] => match k.as_str() {
                "session_id" | "runId" => Want::Whole,
                "calls" => Want::Descend,
                _ => Want::Skip,
            },
            [Seg::Key(_), Seg::Key(_), Seg::Index(_)] => Want::Whole,
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, path: &[Seg], pos: Pos, value: Value) {
        match path {
            [_, Seg::Key(k)] if k == "session_id" => {
                self.session = value.as_str().map(str::to_owned);
            }
            [_, Seg::Key(k)] if k == "runId" => self.run = value.as_str().map(str::to_owned),
            [Seg::Key(label), _, Seg::Index(i)] => {
                let label = label.clone();
                self.call(pos, &label, *i, &value);
            }
            _ => {}
        }
    }
}

impl Streams<'_> {
    fn call(&mut self, pos: Pos, label: &str, index: usize, call: &Value) {
        let text = |k: &str| call.get(k).and_then(Value::as_str);
        let session = self.session.as_deref().unwrap_or(label);
        let run = text("runId").or(self.run.as_deref()).unwrap_or(label);
        let ids = item::ids(session, Some(run));
        let id = text("id").map_or_else(|| format!("call-{}", index + 1), str::to_owned);
        let args = call
            .get("args")
            .cloned()
            .unwrap_or(Value::Object(Default::default()));
        let Some(event) = item::call(&ids, Some(&id), text("name").unwrap_or(""), args) else {
            self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "call without a name".into()
            });
            return;
        };
        let seq = call.get("seq").cloned();
        if seq.is_none() || seq != self.last_seq {
            self.last_seq = seq;
            self.sink.push(
                pos,
                Item::Turn {
                    ids: ids.clone(),
                    usage: None,
                },
            );
        }
        self.stats.record();
        self.sink.push(pos, event);
        let result = text("resultText").unwrap_or("");
        let outcome = if call.get("isError").and_then(Value::as_bool) == Some(true) {
            self.stats.failure("isError");
            OwnedOutcome::Error(Value::String(result.to_owned()))
        } else {
            OwnedOutcome::Result(item::text_result(result, None))
        };
        self.sink.push(pos, item::result(&ids, &id, outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use crate::Format;
    use loopguard_events::Event;

    #[test]
    fn maps_streams() {
        let doc = r#"{
 "A": {"session_id": "s1", "runId": "r1", "t0": 1, "calls": [
   {"seq": 4, "kind": "call", "id": "functions.read:0", "name": "read", "args": {"path": "/x"},
    "runId": "r1", "isError": true, "resultText": "File not found", "ordinal": 1},
   {"seq": 4, "kind": "call", "id": "functions.read:1", "name": "read", "args": {"path": "/y"},
    "runId": "r1", "isError": false, "resultText": "y", "ordinal": 2},
   {"seq": 6, "kind": "call", "name": "exec", "args": {}, "runId": "r2", "resultText": "ok"}]},
 "B": {"calls": [{"name": ""}]}
}"#;
        let r = read_bytes(Format::OpenClawCalls, doc.as_bytes(), "hint");
        assert_eq!((r.calls(), r.results()), (3, 3));
        assert_eq!(
            r.runs(),
            vec![
                ("s1".into(), Some("r1".into())),
                ("s1".into(), Some("r2".into()))
            ]
        );
        let turns = r
            .items
            .iter()
            .filter(|(_, i)| matches!(i, Item::Turn { .. }))
            .count();
        assert_eq!(turns, 2);
        assert!(matches!(
            &r.items[2].1,
            Item::Event(Event::Result { outcome: OwnedOutcome::Error(e), .. }) if e == "File not found"
        ));
        assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
    }

    /// P1-r5 has 129 calls and P2-r7 19 (SOURCES.md), each with its result.
    #[test]
    fn corpus_anchor_call_streams() {
        let Some(r) = read_corpus(
            Format::OpenClawCalls,
            "openclaw-derived/anchor-call-streams.json",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (148, 148, 0));
        let sessions: std::collections::BTreeSet<_> =
            r.runs().into_iter().map(|(s, _)| s).collect();
        assert_eq!(sessions.len(), 2);
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }
}

//! OpenCode sessions, as `opencode export <session id>` writes them (`docs/formats.md` §4):
//! one JSON document `{info, messages}` where `info` is the session (`id`, `title`, …) and
//! each message is `{info, parts}` (OpenCode's `packages/opencode/src/session/
//! message-v2.ts`: `Info` (user or assistant), `Part`), read as a stream (one message in
//! memory at a time). The file is one session (`info.id`, else the file name).
//!
//! | message / part | item |
//! |---|---|
//! | `info.role: "user"` | a new run, and its prompt (its `text` parts) |
//! | `info.role: "assistant"` | a [`Item::Turn`] with its `tokens` (input, output, reasoning, cache) and `cost`, and the model's answer (its `text` parts, `reasoning` parts as reasoning, with calls when it has `tool` parts) |
//! | `tool` part | the call `tool` (id `callID`, args `state.input`) and, once the state is final, its result: `state.output` when `completed`, an error with `state.error` when `error`; `pending` and `running` calls have no result yet |
//! | `compaction` part | a compaction |
//!
//! A `bash` call whose `state.metadata.exit` is not 0 failed ([`FailureRules`]).
//! OpenCode keeps its live sessions in a database (older builds: one JSON file per
//! message and per part under `storage/`); those are not transcripts to read one by one,
//! `opencode export` gives this document.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, AnswerParts, Item, Pos, Sink, Usage};
use crate::readers::walk;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Reads an OpenCode session export.
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let session = match walk::root_members(&mut input, &["info"])?.pop() {
        Some((_, info)) => info
            .get("id")
            .and_then(Value::as_str)
            .and_then(loopguard::text::non_blank)
            .unwrap_or(options.session_hint)
            .to_owned(),
        None => options.session_hint.to_owned(),
    };
    input.seek(io::SeekFrom::Start(0))?;
    let mut walker = Export {
        ids: item::ids(&session, Some("run-0")),
        runs: 0,
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::elements(input, Some("messages"), &mut stats, |pos, value| {
        walker.message(pos, value)
    })?;
    stats.absorb(walker.stats);
    Ok(stats)
}

struct Export<'a> {
    ids: Ids,
    runs: u64,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Export<'_> {
    /// One element of the array.
    fn message(&mut self, pos: Pos, message: Value) {
        let info = message.get("info").unwrap_or(&Value::Null);
        match info.get("role").and_then(Value::as_str) {
            Some("user") => {
                self.stats.record();
                self.runs += 1;
                self.ids.run = Some(format!("run-{}", self.runs));
            }
            Some("assistant") => {
                self.stats.record();
                self.sink.push(
                    pos,
                    Item::Turn {
                        ids: self.ids.clone(),
                        usage: usage(info),
                    },
                );
            }
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
                return;
            }
        }
        let parts = message
            .get("parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut said = AnswerParts::new(pos, &self.ids);
        for part in parts {
            let text = part.get("text").and_then(Value::as_str).unwrap_or("");
            match part.get("type").and_then(Value::as_str) {
                Some("text") => said.add_text(text),
                Some("reasoning") => said.add_reasoning(text),
                Some("tool") => said.calls = true,
                _ => {}
            }
        }
        match info.get("role").and_then(Value::as_str) {
            Some("user") => self
                .sink
                .push(pos, item::said(&self.ids, Role::User, said.text)),
            _ => said.emit(self.sink),
        }
        for part in parts {
            match part.get("type").and_then(Value::as_str) {
                Some("tool") => self.tool(pos, part),
                Some("compaction") => self.sink.push(pos, item::compaction(&self.ids)),
                _ => {}
            }
        }
    }
}

impl Export<'_> {
    fn tool(&mut self, pos: Pos, part: &Value) {
        let name = part.get("tool").and_then(Value::as_str).unwrap_or("");
        let Some(id) = part
            .get("callID")
            .or_else(|| part.get("id"))
            .and_then(Value::as_str)
            .and_then(loopguard::text::non_blank)
        else {
            self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "tool part without callID".into()
            });
            return;
        };
        let state = part.get("state").unwrap_or(&Value::Null);
        let args = state.get("input").cloned().unwrap_or_else(|| json!({}));
        let Some(call) = item::call(&self.ids, Some(id), name, args) else {
            self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "tool part without a tool name".into()
            });
            return;
        };
        self.sink.push(pos, call);
        let outcome = match state.get("status").and_then(Value::as_str) {
            Some("completed") => {
                let output = state.get("output").and_then(Value::as_str).unwrap_or("");
                let mut outcome = OwnedOutcome::Result(item::text_result(output, None));
                self.rules.judge(
                    Format::OpenCode,
                    part,
                    output,
                    &mut outcome,
                    &mut self.stats,
                );
                outcome
            }
            Some("error") => {
                let error = state
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                OwnedOutcome::Error(Value::String(error.to_owned()))
            }
            _ => return,
        };
        self.sink.push(pos, item::result(&self.ids, id, outcome));
    }
}

/// An assistant message's `tokens` (every kind, cache included) and `cost`.
fn usage(info: &Value) -> Option<Usage> {
    let tokens = info.get("tokens")?;
    let n = |p: &str| tokens.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let total = tokens
        .get("total")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| {
            n("/input") + n("/output") + n("/reasoning") + n("/cache/read") + n("/cache/write")
        });
    Some(Usage {
        tokens: total,
        cost: info.get("cost").and_then(Value::as_f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;

    #[test]
    fn tool_parts_and_compactions() {
        let doc = json!({
            "info": {"id": "ses_1", "title": "fix", "time": {"created": 1}},
            "messages": [
                {"info": {"id": "msg_1", "role": "user", "sessionID": "ses_1"}, "parts": [{"type": "text", "text": "fix it"}]},
                {"info": {"id": "msg_2", "role": "assistant", "sessionID": "ses_1", "cost": 0.01,
                          "tokens": {"input": 10, "output": 5, "reasoning": 0, "cache": {"read": 100, "write": 0}}},
                 "parts": [
                    {"type": "step-start"},
                    {"type": "tool", "callID": "toolu_1", "tool": "bash", "state": {"status": "completed", "input": {"command": "make"}, "output": "boom", "metadata": {"exit": 2}, "title": "make", "time": {"start": 1, "end": 2}}},
                    {"type": "tool", "callID": "toolu_2", "tool": "read", "state": {"status": "error", "input": {"filePath": "a"}, "error": "File not found: a", "time": {"start": 1, "end": 2}}},
                    {"type": "tool", "callID": "toolu_3", "tool": "read", "state": {"status": "running", "input": {"filePath": "b"}, "time": {"start": 1}}},
                    {"type": "compaction", "auto": true}]},
                {"info": {"id": "msg_3", "role": "system"}, "parts": []}
            ]
        });
        let r = read_bytes(Format::OpenCode, doc.to_string().as_bytes(), "file");
        assert_eq!((r.calls(), r.results(), r.compactions()), (3, 2, 1));
        assert_eq!(
            r.result_list(),
            [("toolu_1".to_owned(), true), ("toolu_2".to_owned(), true)]
        );
        assert_eq!(r.runs(), [("ses_1".to_owned(), Some("run-1".to_owned()))]);
        assert_eq!(
            r.messages(),
            [
                (Role::User, "fix it", None, None),
                (Role::Assistant, "", None, Some(true)),
            ]
        );
        assert!(matches!(
            r.items
                .iter()
                .find(|(_, i)| matches!(i, Item::Turn { .. }))
                .unwrap()
                .1,
            Item::Turn {
                usage: Some(Usage { tokens: 115, .. }),
                ..
            }
        ));
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
    }
}

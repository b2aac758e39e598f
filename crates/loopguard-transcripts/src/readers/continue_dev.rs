//! Continue sessions (`~/.continue/sessions/<session id>.json`, `docs/formats.md` §5): one
//! JSON document `{sessionId, title, workspaceDirectory, history, mode?}` (Continue's
//! `core/index.d.ts`: `Session`, `ChatHistoryItem`, `ToolCallState`), read as a stream (one
//! history item in memory at a time). The file is one session (`sessionId`, else the file
//! name); `sessions.json` beside it is the index, a companion.
//!
//! | history item | item |
//! |---|---|
//! | `message.role: "user"` | a new run, and its prompt |
//! | `message.role: "assistant"` | a [`Item::Turn`], the model's answer (`content`, with calls when it lists some), then one call per `message.toolCalls` entry (`id`, `function.name`, `function.arguments` parsed from its JSON text; an item that lists its calls only in `toolCallStates`, or the older single `toolCallState`, gives those) |
//! | `message.role: "tool"` | the result of call `toolCallId`: its `content` |
//! | `thinking`, `system` | nothing |
//!
//! A call's state says how it ended: `errored` makes its result failed (and gives one, from
//! the state's `output`, when no tool message follows), `canceled` leaves it without a
//! result (the user declined it). Continue's own error text (`<tool> failed with the
//! message: …`) marks a result failed too ([`FailureRules`]).

use std::collections::HashMap;
use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, Item, Pos, Sink};
use crate::readers::chat::content_text;
use crate::readers::walk;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Reads a Continue session.
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let session = walk::session_name(&mut input, &["sessionId"], options.session_hint)?;
    let mut walker = Session {
        ids: item::ids(&session, Some("run-0")),
        runs: 0,
        turns: 0,
        calls: HashMap::new(),
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::elements(input, Some("history"), &mut stats, |pos, value| {
        walker.entry(pos, value)
    })?;
    walker.settle_errored();
    stats.absorb(walker.stats);
    Ok(stats)
}

/// A call of the current turn: how its state says it ended, and whether it has a result.
struct CallState {
    pos: Pos,
    status: String,
    output: String,
    answered: bool,
    order: usize,
}

struct Session<'a> {
    ids: Ids,
    runs: u64,
    turns: u64,
    /// The calls of the latest assistant turn, by id.
    calls: HashMap<String, CallState>,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Session<'_> {
    /// One element of the array.
    fn entry(&mut self, pos: Pos, entry: Value) {
        let message = entry.get("message").unwrap_or(&Value::Null);
        match message.get("role").and_then(Value::as_str) {
            Some("user") => {
                self.stats.record();
                self.settle_errored();
                self.runs += 1;
                self.ids.run = Some(format!("run-{}", self.runs));
                let text = content_text(message.get("content").unwrap_or(&Value::Null));
                self.sink.push(pos, item::said(&self.ids, Role::User, text));
            }
            Some("assistant") => {
                self.stats.record();
                self.settle_errored();
                self.assistant(pos, &entry, message);
            }
            Some("tool") => {
                self.stats.record();
                self.tool(pos, message);
            }
            Some("thinking" | "system") => self.stats.record(),
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
            }
        }
    }
}

impl Session<'_> {
    fn assistant(&mut self, pos: Pos, entry: &Value, message: &Value) {
        self.turns += 1;
        self.sink.push(
            pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: None,
            },
        );
        let states: Vec<&Value> = match (entry.get("toolCallStates"), entry.get("toolCallState")) {
            (Some(Value::Array(states)), _) => states.iter().collect(),
            (_, Some(state @ Value::Object(_))) => vec![state],
            _ => Vec::new(),
        };
        let listed: Vec<&Value> = match message.get("toolCalls") {
            Some(Value::Array(calls)) => calls.iter().collect(),
            _ => states.iter().filter_map(|s| s.get("toolCall")).collect(),
        };
        let text = content_text(message.get("content").unwrap_or(&Value::Null));
        let answer = item::answer(&self.ids, text, None, !listed.is_empty());
        self.sink.push(pos, answer);
        let batch = format!("turn-{}", self.turns);
        for (n, call) in listed.into_iter().enumerate() {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name = function.get("name").and_then(Value::as_str).unwrap_or("");
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .and_then(loopguard::text::non_blank)
                .map_or_else(|| format!("{batch}#{n}"), str::to_owned);
            let args = match function.get("arguments") {
                Some(Value::String(text)) => item::args_from_text(text),
                Some(Value::Null) | None => json!({}),
                Some(other) => other.clone(),
            };
            let Some(event) =
                item::call_in_batch(&self.ids, Some(&id), name, args, Some(batch.clone()))
            else {
                self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    "tool call without a name".into()
                });
                continue;
            };
            self.sink.push(pos, event);
            let state = states
                .iter()
                .find(|s| s.get("toolCallId").and_then(Value::as_str) == Some(id.as_str()));
            let status = state
                .and_then(|s| s.get("status"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let output = state
                .and_then(|s| s.get("output"))
                .map(output_text)
                .unwrap_or_default();
            self.calls.insert(
                id,
                CallState {
                    pos,
                    status,
                    output,
                    answered: false,
                    order: n,
                },
            );
        }
    }

    fn tool(&mut self, pos: Pos, message: &Value) {
        let Some(id) = message
            .get("toolCallId")
            .and_then(Value::as_str)
            .and_then(loopguard::text::non_blank)
        else {
            self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "tool message without toolCallId".into()
            });
            return;
        };
        let text = content_text(message.get("content").unwrap_or(&Value::Null));
        let errored = match self.calls.get_mut(id) {
            Some(state) => {
                state.answered = true;
                state.status == "errored"
            }
            None => false,
        };
        let outcome = if errored {
            OwnedOutcome::Error(Value::String(text))
        } else {
            let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
            self.rules.judge(
                Format::Continue,
                message,
                &text,
                &mut outcome,
                &mut self.stats,
            );
            outcome
        };
        self.sink.push(pos, item::result(&self.ids, id, outcome));
    }

    /// Calls of the last turn whose state says they errored and that got no tool message:
    /// their result is the state's output.
    fn settle_errored(&mut self) {
        let mut errored: Vec<(String, CallState)> = self
            .calls
            .drain()
            .filter(|(_, s)| !s.answered && s.status == "errored")
            .collect();
        errored.sort_by_key(|(_, s)| s.order);
        for (id, state) in errored {
            let outcome = OwnedOutcome::Error(Value::String(state.output.clone()));
            self.sink
                .push(state.pos, item::result(&self.ids, &id, outcome));
        }
    }
}

/// The text of a state's `output` (context items): their `content`, joined.
fn output_text(output: &Value) -> String {
    match output {
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.get("content").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => content_text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;

    #[test]
    fn calls_results_and_states() {
        let doc = json!({"sessionId": "s-1", "title": "t", "workspaceDirectory": "/w", "history": [
            {"message": {"role": "user", "content": [{"type": "text", "text": "configure it"}]}},
            {"message": {"role": "assistant", "content": "Looking.", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "file_glob_search", "arguments": "{\"pattern\":\"*rc\"}"}}]},
             "toolCallStates": [{"toolCallId": "c1", "status": "done"}]},
            {"message": {"role": "tool", "content": "The glob search returned no results.", "toolCallId": "c1"}},
            {"message": {"role": "assistant", "content": "", "toolCalls": [
                {"id": "c2", "type": "function", "function": {"name": "run_terminal_command", "arguments": "{\"command\":\"ls\"}"}}]},
             "toolCallStates": [{"toolCallId": "c2", "status": "canceled"}]},
            {"message": {"role": "user", "content": "go on"}},
            {"message": {"role": "assistant", "content": "", "toolCalls": [
                {"id": "c3", "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"a\"}"}},
                {"id": "c4", "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"b\"}"}}]},
             "toolCallStates": [{"toolCallId": "c3", "status": "errored"},
                                {"toolCallId": "c4", "status": "errored", "output": [{"content": "File does not exist: b"}]}]},
            {"message": {"role": "tool", "content": "read_file failed with the message: not allowed", "toolCallId": "c3"}},
            {"message": {"role": "thinking", "content": "hmm"}}
        ]});
        let r = read_bytes(Format::Continue, doc.to_string().as_bytes(), "file");
        assert_eq!(r.calls(), 4);
        let results = r.result_list();
        assert_eq!(
            results,
            [
                ("c1".to_owned(), false),
                ("c3".to_owned(), true),
                ("c4".to_owned(), true)
            ]
        );
        assert_eq!(
            r.runs(),
            [
                ("s-1".to_owned(), Some("run-1".to_owned())),
                ("s-1".to_owned(), Some("run-2".to_owned()))
            ]
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }
}

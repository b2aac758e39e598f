//! Cline and Roo Code task UI logs: `ui_messages.json`, what the extension showed, kept
//! beside `api_conversation_history.json` in the task directory (`docs/formats.md` §2).
//! One JSON array of `ClineMessage`s (`{ts, type: "say"|"ask", say?, ask?, text?,
//! partial?}`, Cline's `src/shared/ExtensionMessage.ts`), read as a stream. When the task
//! directory also has the API history, that file is scanned and this one is its
//! companion; alone, it is read:
//!
//! | message | item |
//! |---|---|
//! | `say: "api_req_started"` | a [`Item::Turn`] with its `tokensIn` + `tokensOut` + cache tokens and `cost` (its `text` is JSON) |
//! | `say`/`ask: "tool"` (`text` is JSON `{tool, path?, regex?, …, content?, diff?}`) | the call `tool` with every member but `content` and `diff` as args, and its result: `content` (or `diff`) |
//! | `say`/`ask: "command"` | the call `execute_command {command}`; its result is the `command_output` messages that follow, joined |
//! | `say: "error"`, `"diff_error"`, `"clineignore_error"` right after a call | that call failed, with this text |
//! | `say: "task"`, `ask: "resume_task"`, `ask: "resume_completed_task"` | a new run (and the task as its prompt) |
//! | `say: "text"`, `say: "reasoning"` | the model's answer: its text and reasoning until the next request, with calls when a tool or command follows it; the first `text`, before any request, is the task (a prompt) |
//! | `say: "user_feedback"` | a prompt |
//!
//! Messages with `partial: true` are streaming drafts of the message that follows them
//! and are passed over.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Map, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, AnswerParts, Item, Pos, Sink, Usage};
use crate::readers::walk;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// The name Cline and Roo Code give the file.
pub const FILE_NAME: &str = "ui_messages.json";

/// Reads a Cline or Roo Code `ui_messages.json`.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut log = Log {
        ids: item::ids(options.session_hint, Some("run-1")),
        runs: 1,
        calls: 0,
        open: None,
        answer: None,
        requested: false,
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::elements(input, None, &mut stats, |pos, value| {
        log.message(pos, value)
    })?;
    log.close();
    log.end_answer();
    stats.absorb(log.stats);
    Ok(stats)
}

/// A call whose result is still being gathered.
struct Open {
    id: String,
    pos: Pos,
    text: String,
    failed: bool,
}

struct Log<'a> {
    ids: Ids,
    runs: u64,
    calls: u64,
    open: Option<Open>,
    /// The model's answer of the current request.
    answer: Option<AnswerParts>,
    /// Whether a request to the model was made yet.
    requested: bool,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Log<'_> {
    /// One element of the array.
    fn message(&mut self, pos: Pos, message: Value) {
        if message.get("partial").and_then(Value::as_bool) == Some(true) {
            self.stats.record();
            return;
        }
        let kind = match message.get("type").and_then(Value::as_str) {
            Some("say") => message.get("say"),
            Some("ask") => message.get("ask"),
            _ => None,
        }
        .and_then(Value::as_str);
        let Some(kind) = kind else {
            self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "message without type and say/ask".into()
            });
            return;
        };
        self.stats.record();
        let text = message.get("text").and_then(Value::as_str).unwrap_or("");
        match kind {
            "command_output" => {
                if let Some(open) = &mut self.open {
                    open.text.push_str(text);
                    open.text.push('\n');
                }
            }
            "error" | "diff_error" | "clineignore_error" => {
                if let Some(open) = &mut self.open {
                    open.failed = true;
                    open.text = text.to_owned();
                }
                self.close();
            }
            "api_req_started" => {
                self.close();
                self.end_answer();
                self.requested = true;
                let usage = serde_json::from_str::<Value>(text)
                    .ok()
                    .and_then(|v| usage(&v));
                self.sink.push(
                    pos,
                    Item::Turn {
                        ids: self.ids.clone(),
                        usage,
                    },
                );
            }
            "tool" => {
                self.close();
                self.called();
                let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(text) else {
                    self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "a tool message whose text is not a JSON object".into()
                    });
                    return;
                };
                let tool = fields
                    .remove("tool")
                    .and_then(|t| t.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let result = fields
                    .remove("content")
                    .or_else(|| fields.remove("diff"))
                    .map(|v| match v {
                        Value::String(s) => s,
                        other => other.to_string(),
                    })
                    .unwrap_or_default();
                self.open_call(pos, &tool, Value::Object(fields), result);
            }
            "command" => {
                self.close();
                self.called();
                self.open_call(
                    pos,
                    "execute_command",
                    json!({ "command": text }),
                    String::new(),
                );
            }
            "task" | "resume_task" | "resume_completed_task" => {
                self.close();
                self.end_answer();
                if self.calls > 0 {
                    self.runs += 1;
                    self.ids.run = Some(format!("run-{}", self.runs));
                }
                if kind == "task" {
                    let prompt = item::said(&self.ids, Role::User, text.to_owned());
                    self.sink.push(pos, prompt);
                }
            }
            // Cline writes the task as the first `text`, before any request.
            "text" if !self.requested => {
                let prompt = item::said(&self.ids, Role::User, text.to_owned());
                self.sink.push(pos, prompt);
            }
            "text" | "reasoning" => {
                let ids = &self.ids;
                let answer = self
                    .answer
                    .get_or_insert_with(|| AnswerParts::new(pos, ids));
                match kind {
                    "text" => answer.add_text(text),
                    _ => answer.add_reasoning(text),
                }
            }
            "user_feedback" => {
                self.end_answer();
                let prompt = item::said(&self.ids, Role::User, text.to_owned());
                self.sink.push(pos, prompt);
            }
            _ => {}
        }
    }
}

impl Log<'_> {
    /// A tool or a command follows the answer being read: it made calls.
    fn called(&mut self) {
        if let Some(answer) = &mut self.answer {
            answer.calls = true;
        }
    }

    /// The request is over: its answer goes out.
    fn end_answer(&mut self) {
        if let Some(answer) = self.answer.take() {
            answer.emit(self.sink);
        }
    }

    fn open_call(&mut self, pos: Pos, tool: &str, args: Value, result: String) {
        self.calls += 1;
        let id = format!("ui-{}", self.calls);
        match item::call(&self.ids, Some(&id), tool, args) {
            Some(call) => {
                self.sink.push(pos, call);
                self.open = Some(Open {
                    id,
                    pos,
                    text: result,
                    failed: false,
                });
            }
            None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "a tool message without a tool name".into()
            }),
        }
    }

    /// Gives the open call its result.
    fn close(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let text = open.text.trim_end().to_owned();
        let outcome = if open.failed {
            OwnedOutcome::Error(Value::String(text))
        } else {
            let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
            let record = Value::Object(Map::new());
            self.rules.judge(
                Format::ClineUi,
                &record,
                &text,
                &mut outcome,
                &mut self.stats,
            );
            outcome
        };
        self.sink
            .push(open.pos, item::result(&self.ids, &open.id, outcome));
    }
}

/// `{tokensIn, tokensOut, cacheWrites, cacheReads, cost}` of an `api_req_started`.
fn usage(request: &Value) -> Option<Usage> {
    let n = |k: &str| request.get(k).and_then(Value::as_u64);
    let parts = ["tokensIn", "tokensOut", "cacheWrites", "cacheReads"].map(n);
    if parts.iter().all(Option::is_none) {
        return None;
    }
    Some(Usage {
        tokens: parts.iter().flatten().sum(),
        cost: request.get("cost").and_then(Value::as_f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use loopguard_events::Event;

    #[test]
    fn tools_commands_errors_and_usage() {
        let doc = json!([
            {"ts": 1, "type": "say", "say": "text", "text": "make a server"},
            {"ts": 2, "type": "say", "say": "api_req_started", "text": "{\"request\":\"x\",\"tokensIn\":10,\"tokensOut\":5,\"cacheWrites\":100,\"cacheReads\":0,\"cost\":0.01}"},
            {"ts": 3, "type": "say", "say": "tool", "text": "{\"tool\":\"readFile\",\"path\":\"a\",\"content\":\"/w/a\"}", "partial": true},
            {"ts": 3, "type": "say", "say": "tool", "text": "{\"tool\":\"readFile\",\"path\":\"a\",\"content\":\"/w/a\"}", "partial": false},
            {"ts": 4, "type": "ask", "ask": "command", "text": "npm test"},
            {"ts": 5, "type": "say", "say": "command_output", "text": "1 failing"},
            {"ts": 6, "type": "say", "say": "tool", "text": "{\"tool\":\"editedExistingFile\",\"path\":\"a\",\"diff\":\"-x\\n+y\"}"},
            {"ts": 7, "type": "say", "say": "diff_error", "text": "a"},
            {"ts": 8, "type": "say", "say": "tool", "text": "not json"},
            {"ts": 9, "type": "ask", "ask": "resume_task"}
        ]);
        let r = read_bytes(Format::ClineUi, doc.to_string().as_bytes(), "task-1");
        let calls = r.call_list();
        assert_eq!(
            calls.iter().map(|c| c.1.as_str()).collect::<Vec<_>>(),
            ["readFile", "execute_command", "editedExistingFile"]
        );
        assert_eq!(calls[0].2, json!({"path": "a"}));
        let results: Vec<(String, bool, String)> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Result {
                    call_id, outcome, ..
                }) => Some(match outcome {
                    OwnedOutcome::Error(e) => (call_id.clone().unwrap(), true, e.to_string()),
                    OwnedOutcome::Result(v) => (
                        call_id.clone().unwrap(),
                        false,
                        v["content"][0]["text"].as_str().unwrap().to_owned(),
                    ),
                    OwnedOutcome::Nothing => unreachable!(),
                }),
                _ => None,
            })
            .collect();
        assert_eq!(results[0], ("ui-1".into(), false, "/w/a".into()));
        assert_eq!(results[1], ("ui-2".into(), false, "1 failing".into()));
        assert_eq!(results[2], ("ui-3".into(), true, "\"a\"".into()));
        // The first text, before any request, is the task.
        assert_eq!(r.messages(), [(Role::User, "make a server", None, None)]);
        assert!(matches!(
            r.items[1].1,
            Item::Turn {
                usage: Some(Usage { tokens: 115, .. }),
                ..
            }
        ));
        assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
    }
}

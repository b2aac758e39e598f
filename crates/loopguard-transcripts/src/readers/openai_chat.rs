//! OpenAI chat-completions message arrays (FORMATS §7.1): a JSON array of messages or of
//! conversations (arrays, or tau-bench's `{task_id, traj: [...]}` wrappers), an object
//! with `messages`, or JSON Lines of either. Each conversation is a session of its own.
//!
//! | message | item |
//! |---|---|
//! | `role: user` | a new run, and its prompt |
//! | `role: assistant` | a [`Item::Turn`] (with `usage` when present), the model's answer (`content`, `reasoning_content` or `reasoning` as its reasoning), then one call per `tool_calls[]` entry: `id`, `function.name`, `function.arguments` parsed from its JSON text (`{"raw": text}` when it is not JSON); the legacy `function_call` likewise |
//! | `role: tool` | the result of call `tool_call_id` (or, without one, of the oldest unanswered call): `{content: [{type: "text", text}]}` |
//! | `role: function` | the result of the oldest unanswered call |
//! | `system`, `developer` | nothing |
//!
//! The format has no error flag and no compactions.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::OwnedOutcome;
use serde_json::Value;

use crate::item::{self, Item, Pos, Sink, Usage};
use crate::readers::chat::{self, content_text, Conversation, Dialect};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads OpenAI chat message arrays.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    chat::read(input, options, &mut OpenAi, sink)
}

struct OpenAi;

impl Dialect for OpenAi {
    fn message(
        &mut self,
        conversation: &mut Conversation,
        pos: Pos,
        message: &Value,
        stats: &mut ReadStats,
        sink: &mut dyn Sink,
    ) {
        match message.get("role").and_then(Value::as_str) {
            Some("user") => {
                stats.record();
                conversation.start_run();
                let text = content_text(message.get("content").unwrap_or(&Value::Null));
                sink.push(pos, item::said(&conversation.ids, Role::User, text));
            }
            Some("assistant") => {
                stats.record();
                let usage = message.get("usage").and_then(usage);
                sink.push(
                    pos,
                    Item::Turn {
                        ids: conversation.ids.clone(),
                        usage,
                    },
                );
                conversation.unanswered.clear();
                let calls = message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let legacy = message.get("function_call").filter(|f| !f.is_null());
                let text = content_text(message.get("content").unwrap_or(&Value::Null));
                let reasoning = ["reasoning_content", "reasoning"]
                    .iter()
                    .find_map(|k| message.get(*k).and_then(Value::as_str))
                    .map(str::to_owned);
                let with_calls = !calls.is_empty() || legacy.is_some();
                let answer = item::answer(&conversation.ids, text, reasoning, with_calls);
                sink.push(pos, answer);
                let batch = conversation.next_batch();
                for call in calls {
                    let id = call.get("id").and_then(Value::as_str);
                    let function = call.get("function").unwrap_or(&Value::Null);
                    emit_call(conversation, pos, id, function, &batch, stats, sink);
                }
                // The legacy single call; `"function_call": null` (written by clients that
                // fill every field) is no call.
                if let Some(function) = legacy {
                    emit_call(conversation, pos, None, function, &batch, stats, sink);
                }
            }
            Some(role @ ("tool" | "function")) => {
                stats.record();
                let own_id = if role == "tool" {
                    message.get("tool_call_id").and_then(Value::as_str)
                } else {
                    None
                };
                let Some(id) = conversation.answer(own_id) else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        format!("{role} message that answers no call")
                    });
                    return;
                };
                let text = content_text(message.get("content").unwrap_or(&Value::Null));
                let result = item::text_result(&text, None);
                sink.push(
                    pos,
                    item::result(&conversation.ids, &id, OwnedOutcome::Result(result)),
                );
            }
            Some("system" | "developer") => stats.record(),
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
            }
        }
    }
}

fn emit_call(
    conversation: &mut Conversation,
    pos: Pos,
    id: Option<&str>,
    function: &Value,
    batch: &str,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) {
    let name = function.get("name").and_then(Value::as_str).unwrap_or("");
    let args = match function.get("arguments") {
        Some(Value::String(text)) => item::args_from_text(text),
        Some(Value::Null) | None => Value::Object(serde_json::Map::new()),
        Some(other) => other.clone(),
    };
    let id = match id.and_then(loopguard::text::non_blank) {
        Some(id) => id.to_owned(),
        None => conversation.synthesize_id(),
    };
    // The tool calls of one assistant message form one batch.
    match item::call_in_batch(
        &conversation.ids,
        Some(&id),
        name,
        args,
        Some(batch.to_owned()),
    ) {
        Some(call) => {
            conversation.expect(&id);
            sink.push(pos, call);
        }
        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
            "tool call without a function name".into()
        }),
    }
}

/// `{prompt_tokens, completion_tokens, total_tokens}`.
fn usage(usage: &Value) -> Option<Usage> {
    let n = |k: &str| usage.get(k).and_then(Value::as_u64);
    let tokens = n("total_tokens").or_else(|| {
        let (p, c) = (n("prompt_tokens"), n("completion_tokens"));
        (p.is_some() || c.is_some()).then(|| p.unwrap_or(0) + c.unwrap_or(0))
    })?;
    Some(Usage { tokens, cost: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use crate::Format;
    use loopguard_events::Event;

    #[test]
    fn maps_calls_results_and_runs() {
        let doc = r#"[
 {"role": "system", "content": "be nice"},
 {"role": "user", "content": "hi"},
 {"role": "assistant", "content": null, "tool_calls": [
   {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{\"q\": 1}"}},
   {"id": "c2", "type": "function", "function": {"name": "find", "arguments": "{\"q\": "}}],
  "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
 {"role": "tool", "tool_call_id": "c2", "content": "two"},
 {"role": "tool", "content": [{"type": "text", "text": "one"}]},
 {"role": "user", "content": "again"},
 {"role": "assistant", "function_call": {"name": "legacy", "arguments": "{}"}},
 {"role": "function", "name": "legacy", "content": "ok"},
 {"role": "wizard"},
 {"role": "tool", "content": "nobody asked"}
]"#;
        let r = read_bytes(Format::OpenaiChat, doc.as_bytes(), "chat");
        assert_eq!((r.calls(), r.results()), (3, 3));
        assert_eq!(
            r.runs(),
            vec![
                ("chat".into(), Some("turn-1".into())),
                ("chat".into(), Some("turn-2".into()))
            ]
        );
        let events: Vec<&Event> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Message { .. }) => None,
                Item::Event(e) => Some(e),
                _ => None,
            })
            .collect();
        assert_eq!(
            r.messages(),
            [
                (Role::User, "hi", None, None),
                (Role::Assistant, "", None, Some(true)),
                (Role::User, "again", None, None),
                (Role::Assistant, "", None, Some(true)),
            ]
        );
        match events[1] {
            Event::Call { args, tool, .. } => {
                assert_eq!(tool, "find");
                assert_eq!(args, &serde_json::json!({"raw": "{\"q\": "}));
            }
            other => panic!("{other:?}"),
        }
        match (events[2], events[3]) {
            (
                Event::Result { call_id: a, .. },
                Event::Result {
                    call_id: b,
                    outcome: OwnedOutcome::Result(v),
                    ..
                },
            ) => {
                assert_eq!(a.as_deref(), Some("c2"));
                assert_eq!(
                    b.as_deref(),
                    Some("c1"),
                    "a result without id answers in order"
                );
                assert_eq!(v["content"][0]["text"], "one");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            r.items[1].1,
            Item::Turn {
                usage: Some(Usage { tokens: 15, .. }),
                ..
            }
        ));
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::MalformedEntry), 1);
        assert_eq!(r.items[1].0.line, 4);
    }

    #[test]
    fn a_corrupt_first_line_does_not_hide_the_rest() {
        let jsonl = concat!(
            "{\"role\": \"user\", \"cont\n",
            r#"{"role":"assistant","tool_calls":[{"id":"x","function":{"name":"t","arguments":"{}"}}]}"#,
            "\n",
        );
        let r = read_bytes(Format::OpenaiChat, jsonl.as_bytes(), "f");
        assert_eq!(r.calls(), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::InvalidJson), 1);
    }

    #[test]
    fn conversations_as_json_lines() {
        let jsonl = concat!(
            r#"[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"x","function":{"name":"t","arguments":"{}"}}]},{"role":"tool","tool_call_id":"x","content":"r"}]"#,
            "\n",
            r#"{"messages":[{"role":"user","content":"b"},{"role":"assistant","tool_calls":[{"id":"x","function":{"name":"t","arguments":"{}"}}]}]}"#,
            "\n",
            "{\"messages\": [\n",
        );
        let r = read_bytes(Format::OpenaiChat, jsonl.as_bytes(), "f");
        assert_eq!((r.calls(), r.results()), (2, 1));
        assert_eq!(r.runs()[1].0, "f#1");
        assert_eq!(r.stats.skipped_for(SkipReason::InvalidJson), 1);
        assert_eq!(r.stats.lines, 3);
    }

    /// tau-bench's airline trajectories: 200 conversations, 1164 tool calls, every one
    /// answered (SOURCES.md).
    #[test]
    fn corpus_tau_bench_airline() {
        let Some(r) = read_corpus(Format::OpenaiChat, "openai-chat/gpt-4o-airline.json") else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (1164, 1164, 0));
        let sessions: std::collections::BTreeSet<_> =
            r.runs().into_iter().map(|(s, _)| s).collect();
        assert_eq!(
            sessions.len(),
            182,
            "18 of the 200 conversations make no tool call"
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }
}

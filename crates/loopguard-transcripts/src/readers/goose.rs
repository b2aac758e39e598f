//! Goose sessions (`~/.local/share/goose/sessions/<id>.jsonl`, `docs/formats.md` §3): a
//! first line of session metadata (`{working_dir, description, message_count,
//! total_tokens, …}`), then one message per line (`{id?, role, created, content,
//! metadata?}`, goose's `crates/goose/src/conversation/message.rs`: `Message`,
//! `MessageContent`). The file is one session, named after the file.
//!
//! | line | item |
//! |---|---|
//! | the metadata line | nothing (its `total_tokens` cover the whole session) |
//! | `role: "user"` with text | a new run, and its prompt |
//! | `role: "assistant"` | a [`Item::Turn`], the model's answer (its `text` blocks, `thinking` blocks as reasoning, with calls when it has `toolRequest` blocks), then one call per `toolRequest` block: `id`, `toolCall.value.name`, `toolCall.value.arguments` (a tool call that failed to parse, `toolCall.status: "error"`, is a call of `(unparsed)` whose result is the error) |
//! | `toolResponse` block (in a `user` message) | the result of call `id`: `toolResult.value`'s text parts (a list of contents, or a `CallToolResult` `{content, isError}`), an error when `toolResult.status` is `"error"` or `isError` is true |
//!
//! `thinking`, `redactedThinking`, `image`, `toolConfirmationRequest`, `actionRequired`,
//! `frontendToolRequest` and `systemNotification` blocks make nothing.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::detect::Format;
use crate::item::{self, Item, Pos, Sink};
use crate::readers::chat::content_text;
use crate::readers::lines::{self, Lines};
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Reads a goose session.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut ids = item::ids(options.session_hint, Some("run-0"));
    let (mut runs, mut turns) = (0u64, 0u64);
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(entry) = lines::entry::<Value>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        let Some(role) = entry.get("role").and_then(Value::as_str) else {
            if entry.get("working_dir").is_some() || entry.get("message_count").is_some() {
                stats.record();
            } else {
                stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    "a line that is neither the session's metadata nor a message".into()
                });
            }
            continue;
        };
        stats.record();
        let blocks = entry
            .get("content")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_owned);
        match role {
            "user" => {
                if blocks.iter().any(|b| kind(b).as_deref() == Some("text")) {
                    runs += 1;
                    ids.run = Some(format!("run-{runs}"));
                    let text = texts(blocks, "text", "text");
                    sink.push(pos, item::said(&ids, Role::User, text));
                }
                for block in blocks {
                    if kind(block).as_deref() == Some("toolResponse") {
                        response(&ids, pos, block, options, &mut stats, sink);
                    }
                }
            }
            "assistant" => {
                turns += 1;
                sink.push(
                    pos,
                    Item::Turn {
                        ids: ids.clone(),
                        usage: None,
                    },
                );
                let calls = blocks
                    .iter()
                    .any(|b| kind(b).as_deref() == Some("toolRequest"));
                let text = texts(blocks, "text", "text");
                let thinking = texts(blocks, "thinking", "thinking");
                sink.push(pos, item::answer(&ids, text, Some(thinking), calls));
                let batch = format!("turn-{turns}");
                for (n, block) in blocks.iter().enumerate() {
                    if kind(block).as_deref() == Some("toolRequest") {
                        request(
                            &ids,
                            pos,
                            block,
                            format!("{batch}#{n}"),
                            &batch,
                            &mut stats,
                            sink,
                        );
                    }
                }
                // Some builds answer in the same message.
                for block in blocks {
                    if kind(block).as_deref() == Some("toolResponse") {
                        response(&ids, pos, block, options, &mut stats, sink);
                    }
                }
            }
            other => {
                let other = other.to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {other}")
                });
            }
        }
    }
    Ok(stats)
}

fn request(
    ids: &Ids,
    pos: Pos,
    block: &Value,
    fallback_id: String,
    batch: &str,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) {
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .and_then(loopguard::text::non_blank)
        .map_or(fallback_id, str::to_owned);
    let call = block.get("toolCall").unwrap_or(&Value::Null);
    let failed = call.get("status").and_then(Value::as_str) == Some("error");
    let value = call.get("value").unwrap_or(&Value::Null);
    let (name, args) = if failed {
        (
            "(unparsed)",
            json!({ "error": call.get("error").cloned().unwrap_or(Value::Null) }),
        )
    } else {
        (
            value.get("name").and_then(Value::as_str).unwrap_or(""),
            value.get("arguments").cloned().unwrap_or_else(|| json!({})),
        )
    };
    match item::call_in_batch(ids, Some(&id), name, args, Some(batch.to_owned())) {
        Some(event) => {
            sink.push(pos, event);
            if failed {
                let error = call
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("tool call could not be parsed");
                let outcome = OwnedOutcome::Error(Value::String(error.to_owned()));
                sink.push(pos, item::result(ids, &id, outcome));
            }
        }
        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
            "toolRequest without a tool name".into()
        }),
    }
}

fn response(
    ids: &Ids,
    pos: Pos,
    block: &Value,
    options: &ReadOptions<'_>,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) {
    let Some(id) = block
        .get("id")
        .and_then(Value::as_str)
        .and_then(loopguard::text::non_blank)
    else {
        stats.skip(SkipReason::MalformedEntry, pos.line, || {
            "toolResponse without an id".into()
        });
        return;
    };
    let result = block.get("toolResult").unwrap_or(&Value::Null);
    let outcome = if result.get("status").and_then(Value::as_str) == Some("error") {
        let error = result.get("error").cloned().unwrap_or(Value::Null);
        OwnedOutcome::Error(match error {
            Value::String(s) => Value::String(s),
            other => Value::String(other.to_string()),
        })
    } else {
        let value = result.get("value").unwrap_or(&Value::Null);
        // A list of contents (older builds), or a `CallToolResult`.
        let (content, is_error) = match value {
            Value::Object(map) => (
                map.get("content").unwrap_or(&Value::Null),
                map.get("isError").and_then(Value::as_bool) == Some(true),
            ),
            other => (other, false),
        };
        let text = content_text(content);
        if is_error {
            OwnedOutcome::Error(Value::String(text))
        } else {
            let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
            options
                .failures
                .judge(Format::Goose, block, &text, &mut outcome, stats);
            outcome
        }
    };
    sink.push(pos, item::result(ids, id, outcome));
}

/// The `field` of the blocks of type `kind`, a line each.
fn texts(blocks: &[Value], kind: &str, field: &str) -> String {
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        .filter_map(|b| b.get(field).and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;

    #[test]
    fn requests_and_responses() {
        let session = [
            json!({"working_dir": "/p", "description": "debug", "message_count": 4, "total_tokens": 1250}),
            json!({"role": "user", "created": 1, "content": [{"type": "text", "text": "why is it slow?"}]}),
            json!({"role": "assistant", "created": 2, "content": [
                {"type": "text", "text": "Checking."},
                {"type": "toolRequest", "id": "t1", "toolCall": {"status": "success", "value": {"name": "developer__shell", "arguments": {"command": "ps aux"}}}},
                {"type": "toolRequest", "id": "t2", "toolCall": {"status": "error", "error": "invalid JSON in arguments"}}]}),
            json!({"role": "user", "created": 3, "content": [
                {"type": "toolResponse", "id": "t1", "toolResult": {"status": "success", "value": [{"type": "text", "text": "node 12%"}]}}]}),
            json!({"role": "assistant", "created": 4, "content": [
                {"type": "toolRequest", "id": "t3", "toolCall": {"status": "success", "value": {"name": "developer__text_editor", "arguments": {"command": "view", "path": "/p/a"}}}}]}),
            json!({"role": "user", "created": 5, "content": [
                {"type": "toolResponse", "id": "t3", "toolResult": {"status": "success", "value": {"content": [{"type": "text", "text": "no such file"}], "isError": true}}}]}),
            json!({"role": "user", "created": 6, "content": [
                {"type": "toolResponse", "id": "t4", "toolResult": {"status": "error", "error": "-32603: tool not found"}}]}),
        ];
        let text: String = session.iter().map(|v| format!("{v}\n")).collect();
        let r = read_bytes(Format::Goose, text.as_bytes(), "20250513_161823");
        assert_eq!(r.calls(), 3);
        assert_eq!(r.call_list()[1].1, "(unparsed)");
        let results = r.result_list();
        assert_eq!(
            results,
            [
                ("t2".to_owned(), true),
                ("t1".to_owned(), false),
                ("t3".to_owned(), true),
                ("t4".to_owned(), true)
            ]
        );
        assert_eq!(
            r.runs(),
            [("20250513_161823".to_owned(), Some("run-1".to_owned()))]
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
        assert_eq!(
            r.messages(),
            [
                (Role::User, "why is it slow?", None, None),
                (Role::Assistant, "Checking.", None, Some(true)),
                (Role::Assistant, "", None, Some(true)),
            ]
        );
    }
}

//! Anthropic Messages arrays (FORMATS §7.2): a JSON array of messages or of
//! conversations, an object with `messages` (an API request body), or JSON Lines of
//! either. Each conversation is a session of its own.
//!
//! | message | item |
//! |---|---|
//! | `role: user` with text and no `tool_result` | a new run, and its prompt |
//! | `role: user`, `tool_result` blocks | the result of call `tool_use_id`: `{content}` (a string content becomes one text part), or an error with the joined text when `is_error` is true |
//! | `role: assistant` | a [`Item::Turn`] (with `usage` when present), the model's answer (its `text` blocks, its `thinking` blocks as reasoning), then one call per `tool_use` block: `id`, `name`, `input` |
//!
//! Claude Code transcripts wrap exactly these messages and use the same mapping.

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome, OwnedUsage};
use serde_json::Value;

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, AnswerParts, Item, Pos, Sink, Usage};
use crate::readers::chat::{self, content_text, Conversation, Dialect};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads Anthropic Messages arrays.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    chat::read(
        input,
        options,
        &mut Anthropic {
            rules: options.failures,
        },
        sink,
    )
}

struct Anthropic<'r> {
    rules: &'r FailureRules,
}

impl Dialect for Anthropic<'_> {
    fn message(
        &mut self,
        conversation: &mut Conversation,
        pos: Pos,
        message: &Value,
        stats: &mut ReadStats,
        sink: &mut dyn Sink,
    ) {
        let content = message.get("content").unwrap_or(&Value::Null);
        match message.get("role").and_then(Value::as_str) {
            Some("user") => {
                stats.record();
                if is_prompt(content) {
                    conversation.start_run();
                    let prompt = item::said(&conversation.ids, Role::User, content_text(content));
                    sink.push(pos, prompt);
                }
                for (id, block) in tool_results(content) {
                    let outcome =
                        judged_outcome(block, Format::AnthropicMessages, self.rules, stats);
                    match conversation.answer(id) {
                        Some(id) => sink.push(pos, item::result(&conversation.ids, &id, outcome)),
                        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "tool_result that answers no call".into()
                        }),
                    }
                }
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
                let mut said = AnswerParts::new(pos, &conversation.ids);
                add_blocks(&mut said, content);
                said.emit(sink);
                let batch = conversation.next_batch();
                for (id, name, input) in tool_uses(content) {
                    let id = match id {
                        Some(id) => id.to_owned(),
                        None => conversation.synthesize_id(),
                    };
                    let batch = Some(batch.clone());
                    match item::call_in_batch(
                        &conversation.ids,
                        Some(&id),
                        name,
                        input.clone(),
                        batch,
                    ) {
                        Some(call) => {
                            conversation.expect(&id);
                            sink.push(pos, call);
                        }
                        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "tool_use without a name".into()
                        }),
                    }
                }
            }
            Some("system") => stats.record(),
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
            }
        }
    }
}

/// Adds an API response's content blocks (a string is one text block) to its answer:
/// `text` blocks to its text, `thinking` blocks to its reasoning, `tool_use` blocks make
/// it an answer with calls.
pub(crate) fn add_blocks(answer: &mut AnswerParts, content: &Value) {
    match content {
        Value::String(text) => answer.add_text(text),
        Value::Array(blocks) => {
            for block in blocks {
                let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
                match field("type") {
                    "text" => answer.add_text(field("text")),
                    "thinking" => answer.add_reasoning(field("thinking")),
                    "tool_use" | "server_tool_use" => answer.calls = true,
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// Whether a user message's content is a prompt (text, no tool results): a new run.
pub(crate) fn is_prompt(content: &Value) -> bool {
    match content {
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(blocks) => {
            let kind = |b: &Value| b.get("type").and_then(Value::as_str).map(str::to_owned);
            !blocks
                .iter()
                .any(|b| kind(b).as_deref() == Some("tool_result"))
                && blocks
                    .iter()
                    .any(|b| kind(b).as_deref() != Some("tool_result"))
        }
        _ => false,
    }
}

/// The `tool_use` blocks of an assistant content: (id, name, input).
pub(crate) fn tool_uses(content: &Value) -> impl Iterator<Item = (Option<&str>, &str, &Value)> {
    static EMPTY: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| Value::Object(serde_json::Map::new()));
    content
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|b| {
            matches!(
                b.get("type").and_then(Value::as_str),
                Some("tool_use" | "server_tool_use")
            )
        })
        .map(|b| {
            (
                b.get("id")
                    .and_then(Value::as_str)
                    .and_then(loopguard::text::non_blank),
                b.get("name").and_then(Value::as_str).unwrap_or(""),
                b.get("input").unwrap_or(&EMPTY),
            )
        })
}

/// The `tool_result` blocks of a user content: (tool_use_id, block).
pub(crate) fn tool_results(content: &Value) -> impl Iterator<Item = (Option<&str>, &Value)> {
    content
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| (b.get("tool_use_id").and_then(Value::as_str), b))
}

/// A `tool_result` block's outcome, its failure counted: an error when `is_error` says
/// so, else a result the failure rules of `format` may mark.
pub(crate) fn judged_outcome(
    block: &Value,
    format: Format,
    rules: &FailureRules,
    stats: &mut ReadStats,
) -> OwnedOutcome {
    let mut outcome = outcome_of(block);
    match &outcome {
        OwnedOutcome::Error(_) => stats.failure("is_error"),
        _ if rules.applies_to(format) => {
            let text = content_text(block.get("content").unwrap_or(&Value::Null));
            rules.judge(format, block, &text, &mut outcome, stats);
        }
        _ => {}
    }
    outcome
}

/// A `tool_result` block's outcome.
pub(crate) fn outcome_of(block: &Value) -> OwnedOutcome {
    let content = block.get("content").unwrap_or(&Value::Null);
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        return OwnedOutcome::Error(Value::String(content_text(content)));
    }
    let content = match content {
        Value::String(text) => return OwnedOutcome::Result(item::text_result(text, None)),
        other => other.clone(),
    };
    OwnedOutcome::Result(serde_json::json!({ "content": content }))
}

/// `{input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens}`.
pub(crate) fn usage(usage: &Value) -> Option<Usage> {
    let split = token_split(usage)?;
    Some(Usage {
        tokens: split.iter().flatten().sum(),
        cost: None,
    })
}

/// An Anthropic `usage` object's token counts by kind, in the order of a usage event
/// (uncached input, output, cache reads, cache writes); `None` when it has none of them.
fn token_split(usage: &Value) -> Option<[Option<u64>; 4]> {
    let split = [
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .map(|k| usage.get(k).and_then(Value::as_u64));
    split.iter().any(Option::is_some).then_some(split)
}

/// What an API response (a `message` with its `usage`) used, as a usage event carries it:
/// its tokens by kind (Anthropic's split is the event's), the model that answered and the
/// response's id, so that reading the response again counts it once. `None` when the
/// message records no usage.
pub(crate) fn response_usage(message: &Value) -> Option<OwnedUsage> {
    let [input, output, cache_read, cache_write] = token_split(message.get("usage")?)?;
    let text = |key: &str| {
        message
            .get(key)
            .and_then(Value::as_str)
            .and_then(loopguard::text::non_blank)
            .map(str::to_owned)
    };
    Some(OwnedUsage {
        id: text("id"),
        model: text("model"),
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_read_tokens: cache_read.unwrap_or(0),
        cache_write_tokens: cache_write.unwrap_or(0),
        cost: None,
    })
}

/// Emits the calls of an assistant content in `ids`; returns their ids (synthesized from
/// `line` when a block has none).
pub(crate) fn emit_tool_uses(
    ids: &Ids,
    pos: Pos,
    content: &Value,
    batch: Option<&str>,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) -> Vec<String> {
    let mut out = Vec::new();
    for (n, (id, name, input)) in tool_uses(content).enumerate() {
        let id = id.map_or_else(|| format!("line-{}#{n}", pos.line), str::to_owned);
        let batch = Some(batch.map_or_else(|| format!("line-{}", pos.line), str::to_owned));
        match item::call_in_batch(ids, Some(&id), name, input.clone(), batch) {
            Some(call) => {
                sink.push(pos, call);
                out.push(id);
            }
            None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "tool_use without a name".into()
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use loopguard_events::Event;

    #[test]
    fn maps_tool_use_and_tool_result() {
        let doc = r#"{"model": "m", "messages": [
  {"role": "user", "content": "fix it"},
  {"role": "assistant", "content": [
     {"type": "thinking", "thinking": "hmm", "signature": "x"},
     {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "/a"}},
     {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "/b"}}],
   "usage": {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 5}},
  {"role": "user", "content": [
     {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
     {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
      "content": [{"type": "text", "text": "ENOENT"}]}]},
  {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
  {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
]}"#;
        let r = read_bytes(Format::AnthropicMessages, doc.as_bytes(), "a");
        assert_eq!((r.calls(), r.results()), (2, 2));
        assert_eq!(r.runs(), vec![("a".into(), Some("turn-1".into()))]);
        let outcomes: Vec<&OwnedOutcome> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Result { outcome, .. }) => Some(outcome),
                _ => None,
            })
            .collect();
        assert_eq!(
            outcomes[0],
            &OwnedOutcome::Result(serde_json::json!({"content": [{"type": "text", "text": "A"}]}))
        );
        assert_eq!(outcomes[1], &OwnedOutcome::Error(Value::from("ENOENT")));
        assert!(matches!(
            r.items[1].1,
            Item::Turn {
                usage: Some(Usage { tokens: 125, .. }),
                ..
            }
        ));
        assert!(r.stats.skipped.is_empty());
        assert_eq!(
            r.messages(),
            [
                (Role::User, "fix it", None, None),
                (Role::Assistant, "", Some("hmm"), Some(true)),
                (Role::Assistant, "done", None, Some(false)),
                (Role::User, "thanks", None, None),
            ]
        );
    }
}

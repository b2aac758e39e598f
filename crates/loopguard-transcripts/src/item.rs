//! What a reader produces: guard events in the SPEC §7 shape, plus the few facts about a
//! transcript that the guard does not need but a scan report does (model turns, token
//! usage, real run ids), each with its position in the file.

use loopguard::{OutcomeOf, Role};
use loopguard_events::{Event, EventRef, Ids, OwnedMessage, OwnedOutcome};
use serde::Serialize;
use serde_json::Value;

use crate::json_ref::JsonRef;

/// Where an item starts in its file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Pos {
    /// 1-based line number.
    pub line: u64,
    /// 0-based byte offset.
    pub offset: u64,
}

impl Pos {
    /// The position of line `line` starting at byte `offset`.
    pub const fn new(line: u64, offset: u64) -> Self {
        Self { line, offset }
    }
}

/// Tokens (and money) one model response consumed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    /// Every token the response processed: input, output, cache reads and cache writes.
    pub tokens: u64,
    /// Its cost in the currency the transcript records (USD for every known format), when
    /// the transcript records one.
    pub cost: Option<f64>,
}

/// One thing a reader found in a transcript.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// A tool call, a result, a compaction or a message, with its session and run: exactly
    /// what the guard consumes (SPEC §7). Readers always give results a `call_id` that names their
    /// call (formats without ids get synthesized ones), and never give a call a blank tool.
    Event(Event),
    /// A model response begins; the calls it makes follow. `usage` when the response
    /// carries its own numbers.
    Turn {
        /// Session and run of the response.
        ids: Ids,
        /// Tokens and cost of the response.
        usage: Option<Usage>,
    },
    /// Usage of the response in progress, known only after its calls (Codex rollouts).
    Usage {
        /// Session and run of the response.
        ids: Ids,
        /// Tokens and cost.
        usage: Usage,
    },
    /// The real id of the run `ids` names (OpenClaw writes it in side entries and in the
    /// trajectory sidecar, after the run started). Reports show it instead of the
    /// synthesized one.
    RunLabel {
        /// The run, under the id the reader gave it.
        ids: Ids,
        /// Its real id.
        label: String,
    },
}

impl Item {
    /// The ids the item belongs to.
    pub fn ids(&self) -> &Ids {
        match self {
            Self::Event(e) => e.ids(),
            Self::Turn { ids, .. } | Self::Usage { ids, .. } | Self::RunLabel { ids, .. } => ids,
        }
    }
}

/// Where readers put what they read.
pub trait Sink {
    /// Takes one item found at `pos`.
    fn push(&mut self, pos: Pos, item: Item);

    /// Takes a call or result a reader read in place: its JSON borrows the reader's line
    /// and tape. Sinks that judge events as they come (the scanner) take it as it is, with
    /// no value tree built; the default keeps it as an owned [`Item`] ([`owned_event`]).
    fn push_event(&mut self, pos: Pos, event: &EventRef<'_, JsonRef<'_>>) {
        self.push(pos, Item::Event(owned_event(event)));
    }
}

/// An event read in place, as an owned [`Event`]: absent call arguments become `{}`, as
/// the guard reads them.
pub fn owned_event(event: &EventRef<'_, JsonRef<'_>>) -> Event {
    let outcome = |o: OutcomeOf<JsonRef<'_>>| match o {
        OutcomeOf::Result(v) => OwnedOutcome::Result(v.to_value()),
        OutcomeOf::Error(v) => OwnedOutcome::Error(v.to_value()),
        OutcomeOf::Nothing => OwnedOutcome::Nothing,
    };
    match *event {
        EventRef::Call {
            ids,
            call_id,
            tool,
            args,
            batch,
        } => Event::Call {
            ids: ids.to_ids(),
            call_id: call_id.map(str::to_owned),
            tool: tool.to_owned(),
            args: args.map_or_else(|| Value::Object(serde_json::Map::new()), JsonRef::to_value),
            batch: batch.map(str::to_owned),
        },
        EventRef::Result {
            ids,
            call_id,
            tool,
            args,
            outcome: o,
        } => Event::Result {
            ids: ids.to_ids(),
            call_id: call_id.map(str::to_owned),
            tool: tool.map(str::to_owned),
            args: args.map(JsonRef::to_value),
            outcome: outcome(o),
        },
        EventRef::Compaction { ids } => Event::Compaction { ids: ids.to_ids() },
        EventRef::Usage { ids, usage } => Event::Usage {
            ids: ids.to_ids(),
            usage: loopguard_events::OwnedUsage::of(&usage),
        },
        EventRef::Message { ids, message } => Event::Message {
            ids: ids.to_ids(),
            message: OwnedMessage::of(&message),
        },
    }
}

impl<F: FnMut(Pos, Item)> Sink for F {
    fn push(&mut self, pos: Pos, item: Item) {
        self(pos, item)
    }
}

impl Sink for Vec<(Pos, Item)> {
    fn push(&mut self, pos: Pos, item: Item) {
        Vec::push(self, (pos, item));
    }
}

/// The session of a sub-agent `agent` spawned in `session`: `SESSION/agent-ID` (an id
/// already written `agent-ID` keeps one prefix), the one name readers and hooks give it.
pub fn subagent_session(session: &str, agent: &str) -> String {
    format!(
        "{session}/agent-{}",
        agent.strip_prefix("agent-").unwrap_or(agent)
    )
}

/// Normalized ids: trimmed, a blank session is `"default"`, blank runs are absent (as
/// SPEC §7 reads them).
pub fn ids(session: &str, run: Option<&str>) -> Ids {
    Ids {
        session: loopguard::text::non_blank(session)
            .unwrap_or(loopguard::DEFAULT_SESSION)
            .to_owned(),
        run: run.and_then(loopguard::text::non_blank).map(str::to_owned),
        ..Ids::default()
    }
}

/// A call event, or `None` when the tool name is blank (readers count those as skipped).
pub fn call(ids: &Ids, call_id: Option<&str>, tool: &str, args: Value) -> Option<Item> {
    call_in_batch(ids, call_id, tool, args, None)
}

/// A call event that is one of the parallel calls of one model message, `batch` naming
/// that message.
pub fn call_in_batch(
    ids: &Ids,
    call_id: Option<&str>,
    tool: &str,
    args: Value,
    batch: Option<String>,
) -> Option<Item> {
    let tool = loopguard::text::non_blank(tool)?;
    Some(Item::Event(Event::Call {
        ids: ids.clone(),
        call_id: call_id
            .and_then(loopguard::text::non_blank)
            .map(str::to_owned),
        tool: tool.to_owned(),
        args,
        batch,
    }))
}

/// A result event for the call `call_id`.
pub fn result(ids: &Ids, call_id: &str, outcome: OwnedOutcome) -> Item {
    Item::Event(Event::Result {
        ids: ids.clone(),
        call_id: Some(call_id.to_owned()),
        tool: None,
        args: None,
        outcome,
    })
}

/// The model's answer: its text, its reasoning where the transcript keeps it (blank
/// reasoning is none), and whether it carried tool calls.
pub fn answer(ids: &Ids, text: String, reasoning: Option<String>, has_tool_calls: bool) -> Item {
    message(
        ids,
        Role::Assistant,
        text,
        reasoning.filter(|r| !r.trim().is_empty()),
        Some(has_tool_calls),
    )
}

/// The model's answer while a reader collects it from several records (a response
/// written over several lines or items): where and in which run it began, its text and
/// reasoning so far (a line per piece), and whether it made calls.
#[derive(Debug)]
pub(crate) struct AnswerParts {
    pub pos: Pos,
    pub ids: Ids,
    pub text: String,
    pub reasoning: String,
    pub calls: bool,
}

impl AnswerParts {
    /// An answer begun at `pos` in `ids`, empty so far.
    pub fn new(pos: Pos, ids: &Ids) -> Self {
        Self {
            pos,
            ids: ids.clone(),
            text: String::new(),
            reasoning: String::new(),
            calls: false,
        }
    }

    /// Adds a piece of its text.
    pub fn add_text(&mut self, text: &str) {
        push_line(&mut self.text, text);
    }

    /// Adds a piece of its reasoning.
    pub fn add_reasoning(&mut self, text: &str) {
        push_line(&mut self.reasoning, text);
    }

    /// The answer goes out to `sink`.
    pub fn emit(self, sink: &mut dyn Sink) {
        let item = answer(&self.ids, self.text, Some(self.reasoning), self.calls);
        sink.push(self.pos, item);
    }
}

/// Appends `text` to `to` on a line of its own (nothing for an empty `text`).
fn push_line(to: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !to.is_empty() {
        to.push('\n');
    }
    to.push_str(text);
}

/// A message of `role` other than the model's answer: a prompt (`User`, `System`) or the
/// harness's feedback to an answer without a tool call (`ToolFeedback`).
pub fn said(ids: &Ids, role: Role, text: String) -> Item {
    message(ids, role, text, None, None)
}

/// A message event, whole (readers read no streams) and without an id.
fn message(
    ids: &Ids,
    role: Role,
    text: String,
    reasoning: Option<String>,
    has_tool_calls: Option<bool>,
) -> Item {
    Item::Event(Event::Message {
        ids: ids.clone(),
        message: OwnedMessage {
            role,
            text,
            reasoning,
            has_tool_calls,
            id: None,
            delta: None,
        },
    })
}

/// A compaction event.
pub fn compaction(ids: &Ids) -> Item {
    Item::Event(Event::Compaction { ids: ids.clone() })
}

/// The result object tools return: `{content: [{type: "text", text}], details?}`, the
/// shape the engine's outcome fingerprints read (SPEC §2).
pub fn text_result(text: &str, details: Option<Value>) -> Value {
    let mut map = serde_json::Map::with_capacity(2);
    map.insert(
        "content".into(),
        Value::Array(vec![serde_json::json!({ "type": "text", "text": text })]),
    );
    if let Some(details) = details {
        map.insert("details".into(), details);
    }
    Value::Object(map)
}

/// Arguments given as a JSON string (OpenAI, Codex): the parsed value, or `{"raw": text}`
/// when the text is not JSON (truncated or hand-written arguments still get a stable
/// signature).
pub fn args_from_text(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => value,
        Err(_) if text.trim().is_empty() => Value::Object(serde_json::Map::new()),
        Err(_) => serde_json::json!({ "raw": text }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_and_calls_are_normalized() {
        let i = ids("  ", Some(" r "));
        assert_eq!(i.session, "default");
        assert_eq!(i.run.as_deref(), Some("r"));
        assert_eq!(ids("s", Some(" ")).run, None);
        assert!(call(&i, None, "  ", json!({})).is_none());
        match call(&i, Some(" "), " read ", json!({})) {
            Some(Item::Event(Event::Call { tool, call_id, .. })) => {
                assert_eq!(tool, "read");
                assert_eq!(call_id, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn argument_text() {
        assert_eq!(args_from_text(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(args_from_text(""), json!({}));
        assert_eq!(args_from_text("{\"a\":"), json!({"raw": "{\"a\":"}));
        assert_eq!(
            text_result("x", Some(json!({"s": 1}))),
            json!({"content": [{"type": "text", "text": "x"}], "details": {"s": 1}})
        );
    }
}

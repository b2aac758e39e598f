//! Input events (SPEC §7): one JSON object per line.
//!
//! ```text
//! {"type":"call","session":"s","run":"r","agent":"a","call_id":"c1","tool":"read","args":{...},"batch":"m1"}
//! {"type":"result","session":"s","run":"r","call_id":"c1","tool":"read","args":{...},"result":{...}}
//! {"type":"result", ... ,"error":"Tool foo not found"}
//! {"type":"compaction","session":"s","run":"r"}
//! {"type":"usage","session":"s","run":"r","id":"resp_1","model":"gpt-4o","input_tokens":1200,"output_tokens":300}
//! {"type":"message","session":"s","run":"r","role":"assistant","text":"...","has_tool_calls":false,"id":"m1"}
//! {"type":"message", ... ,"role":"assistant","text":"a piece","delta":true,"index":0,"id":"m2"}
//! {"type":"message", ... ,"role":"tool_feedback","text":"No tool calls found in the response."}
//! {"type":"call","session":"child","run":"r1","parent_session":"s","parent_run":"r","tool":"read"}
//! ```
//!
//! Normalizations, documented once here:
//! - unknown fields are ignored; `session` defaults to `"default"`;
//! - `session`, `run`, `agent`, `parent_session`, `parent_run`, `call_id` and `tool` must
//!   be strings when present (`null` included: it is not a string); they are trimmed and a
//!   blank one counts as absent; any event may name the session (and run) that spawned its
//!   session, `parent_session` (and `parent_run`): a `parent_run` needs a `parent_session`;
//! - a call without `args` has args `{}`;
//! - a result with both `error` and `result` is an error (the error wins); a result with
//!   neither has no fingerprint and records nothing;
//! - duplicate keys in an object: the last one wins (as in JavaScript);
//! - numbers keep 64-bit integers exactly; other numbers are IEEE-754 doubles;
//! - a line must be UTF-8 and nested at most [`MAX_DEPTH`] levels deep; anything else is a
//!   per-line error;
//! - a usage event refuses members it does not know, and figures that cannot be right
//!   (see [`crate::usage`]).
//! - a message's `role` is `assistant`, `user`, `system` or `tool_feedback`; its `text`
//!   (absent: empty) and `reasoning` are kept as written, untrimmed; `id` is read like the
//!   other ids; `has_tool_calls` and `delta` are booleans; `index` (a piece's position in
//!   its stream, from 0) is a whole number and goes with `delta: true`, which only the
//!   assistant's answers take.

use loopguard::{Message, Role};
use serde_json::{Map, Value};

/// Deepest nesting a line may have (the JSON parser's recursion limit).
pub const MAX_DEPTH: usize = 128;

/// The (session, run, agent, parent) ids of an event, normalized.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ids {
    /// Session id (`"default"` when absent).
    pub session: String,
    /// Run id.
    pub run: Option<String>,
    /// Agent id.
    pub agent: Option<String>,
    /// The session that spawned this one (a sub-agent's parent).
    pub parent_session: Option<String>,
    /// The run of the parent session that spawned this one.
    pub parent_run: Option<String>,
}

/// What a result event carries.
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedOutcome {
    /// The tool's result.
    Result(Value),
    /// The error the call failed with.
    Error(Value),
    /// Neither.
    Nothing,
}

impl OwnedOutcome {
    /// Borrowed form for the engine.
    pub fn as_outcome(&self) -> loopguard::Outcome<'_> {
        match self {
            Self::Result(v) => loopguard::Outcome::Result(v),
            Self::Error(v) => loopguard::Outcome::Error(v),
            Self::Nothing => loopguard::Outcome::Nothing,
        }
    }
}

/// What a message event carries ([`Message`], owned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedMessage {
    /// Who says it.
    pub role: Role,
    /// The text.
    pub text: String,
    /// The model's reasoning.
    pub reasoning: Option<String>,
    /// Whether the answer carried tool calls.
    pub has_tool_calls: Option<bool>,
    /// The message's id.
    pub id: Option<String>,
    /// A piece of a streamed answer, with its index when numbered.
    pub delta: Option<Option<u64>>,
}

impl OwnedMessage {
    /// The message, borrowed.
    pub fn as_message(&self) -> Message<'_> {
        Message {
            role: self.role,
            text: &self.text,
            reasoning: self.reasoning.as_deref(),
            has_tool_calls: self.has_tool_calls,
            id: self.id.as_deref(),
            delta: self.delta,
        }
    }

    /// A message, owned.
    pub fn of(message: &Message<'_>) -> Self {
        Self {
            role: message.role,
            text: message.text.to_owned(),
            reasoning: message.reasoning.map(str::to_owned),
            has_tool_calls: message.has_tool_calls,
            id: message.id.map(str::to_owned),
            delta: message.delta,
        }
    }
}

/// One input event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A tool call about to run.
    Call {
        /// Scope.
        ids: Ids,
        /// Provider call id.
        call_id: Option<String>,
        /// Tool name.
        tool: String,
        /// Arguments.
        args: Value,
        /// The batch of parallel calls (one assistant message) the call belongs to.
        batch: Option<String>,
    },
    /// What a call returned.
    Result {
        /// Scope.
        ids: Ids,
        /// Provider call id.
        call_id: Option<String>,
        /// Tool name; when absent, `call_id` must name a pending call.
        tool: Option<String>,
        /// Arguments; when absent, those of the pending call `call_id` names.
        args: Option<Value>,
        /// Result or error.
        outcome: OwnedOutcome,
    },
    /// A compaction retry.
    Compaction {
        /// Scope.
        ids: Ids,
    },
    /// What a model response used.
    Usage {
        /// Scope.
        ids: Ids,
        /// The figures.
        usage: OwnedUsage,
    },
    /// What the model said, or what it was told.
    Message {
        /// Scope.
        ids: Ids,
        /// The message.
        message: OwnedMessage,
    },
}

impl Event {
    /// The event's ids.
    pub fn ids(&self) -> &Ids {
        match self {
            Self::Call { ids, .. }
            | Self::Result { ids, .. }
            | Self::Compaction { ids }
            | Self::Usage { ids, .. }
            | Self::Message { ids, .. } => ids,
        }
    }
}

/// What a usage event carries, owned ([`loopguard::Usage`] borrows).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnedUsage {
    /// The response's id.
    pub id: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt-cache reads.
    pub cache_read_tokens: u64,
    /// Prompt-cache writes.
    pub cache_write_tokens: u64,
    /// The host's cost in US dollars.
    pub cost: Option<f64>,
}

impl OwnedUsage {
    /// The usage, borrowed.
    pub fn as_usage(&self) -> loopguard::Usage<'_> {
        loopguard::Usage {
            model: self.model.as_deref(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_read_tokens: self.cache_read_tokens,
            cache_write_tokens: self.cache_write_tokens,
            cost: self.cost,
            id: self.id.as_deref(),
        }
    }

    /// A borrowed usage, owned.
    pub fn of(usage: &loopguard::Usage<'_>) -> Self {
        Self {
            id: usage.id.map(str::to_owned),
            model: usage.model.map(str::to_owned),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            cost: usage.cost,
        }
    }
}

/// The role named `name`, or why not.
fn role_named(name: &str) -> Result<Role, String> {
    Role::from_name(name).ok_or_else(|| {
        let shown: String = name.chars().take(64).collect();
        format!("role must be assistant, user, system or tool_feedback, not {shown:?}")
    })
}

/// The index of a piece of a stream, from a JSON number (as a double: every whole number
/// a stream can reach is exact).
pub(crate) fn index_of(n: Option<f64>) -> Result<u64, String> {
    match n {
        Some(n) if n >= 0.0 && n.fract() == 0.0 && n < 9.007_199_254_740_992e15 => Ok(n as u64),
        _ => Err("index must be a whole number from 0 to 2^53".into()),
    }
}

/// The error of an index that is not a number.
pub(crate) fn index_error(kind: &str) -> String {
    format!("index must be a whole number, not {kind}")
}

/// A message from its fields as the protocol reads them (also for the bindings' typed
/// helpers, so that they refuse what the protocol refuses): `role` by its name, `index`
/// only with `delta`, and `delta` only for the assistant's answers.
pub fn message_of<'a>(
    role: &str,
    text: &'a str,
    reasoning: Option<&'a str>,
    has_tool_calls: Option<bool>,
    id: Option<&'a str>,
    delta: bool,
    index: Option<u64>,
) -> Result<Message<'a>, String> {
    let message = Message::new(role_named(role)?, text)
        .with_reasoning(reasoning)
        .with_tool_calls(has_tool_calls)
        .with_id(id);
    match (delta, index) {
        (false, None) => Ok(message),
        (false, Some(_)) => {
            Err("index goes with delta: true (a piece of a streamed answer)".into())
        }
        (true, _) if message.role != Role::Assistant => Err(format!(
            "delta is for the assistant's answers, not a {} message",
            message.role
        )),
        (true, index) => Ok(message.as_delta(index)),
    }
}

/// Parses one line (without its line terminator).
pub fn parse_line(line: &[u8]) -> Result<Event, String> {
    let text = std::str::from_utf8(line).map_err(|e| utf8_error(&e))?;
    let value: Value = serde_json::from_str(text).map_err(json_error)?;
    from_value(value)
}

/// The error of a line that is not UTF-8.
pub(crate) fn utf8_error(e: &std::str::Utf8Error) -> String {
    format!(
        "line is not valid UTF-8 (invalid byte at offset {})",
        e.valid_up_to()
    )
}

/// The error of a text that is not JSON, in the words `serde_json` uses (the tape found
/// the same fault; its own message is the fallback). Nesting has no limit, so a parse that
/// stopped at `serde_json`'s depth limit is replaced by one without it, which finds the
/// real fault.
pub(crate) fn json_text_error(text: &str, found: &loopguard::json::JsonError) -> String {
    match json_fault(text.as_bytes()) {
        Some(e) => json_error(e),
        None => format!("invalid JSON: {found}"),
    }
}

/// Why `bytes` are not JSON, in `serde_json`'s words: what a parse into a `Value` reports,
/// unless that is its nesting limit (raw JSON has none), then what a parse without a limit
/// reports. `None` when both read the bytes.
pub fn json_fault(bytes: &[u8]) -> Option<serde_json::Error> {
    match serde_json::from_slice::<Value>(bytes) {
        Err(e) if !e.to_string().contains("recursion limit") => Some(e),
        _ => serde_json::from_slice::<serde::de::IgnoredAny>(bytes).err(),
    }
}

fn json_error(e: serde_json::Error) -> String {
    let message = e.to_string();
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(m, _)| m);
    if message.contains("recursion limit") {
        return format!(
            "invalid JSON: nested deeper than {MAX_DEPTH} levels (at column {})",
            e.column()
        );
    }
    if e.is_eof() {
        return format!("invalid JSON: the line ends early ({message})");
    }
    format!("invalid JSON: {message} at column {}", e.column())
}

/// Turns a parsed JSON value into an event.
pub fn from_value(value: Value) -> Result<Event, String> {
    let Value::Object(mut map) = value else {
        return Err("event must be a JSON object".into());
    };
    let kind = match map.get("type") {
        None => return Err("event without type".into()),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("event type must be a string".into()),
    };
    let ids = Ids {
        session: string_field(&map, "session")?.unwrap_or_else(|| "default".into()),
        run: string_field(&map, "run")?,
        agent: string_field(&map, "agent")?,
        parent_session: string_field(&map, "parent_session")?,
        parent_run: string_field(&map, "parent_run")?,
    };
    // One rule for both representations: a parent run needs a parent session.
    ids.as_ref()
        .with_parent(ids.parent_session.as_deref(), ids.parent_run.as_deref())?;
    let call_id = string_field(&map, "call_id")?;
    match kind.as_str() {
        "call" => {
            let tool = string_field(&map, "tool")?.ok_or("call without tool")?;
            let args = map
                .remove("args")
                .unwrap_or_else(|| Value::Object(Map::new()));
            let batch = string_field(&map, "batch")?;
            Ok(Event::Call {
                ids,
                call_id,
                tool,
                args,
                batch,
            })
        }
        "result" => {
            let tool = string_field(&map, "tool")?;
            if tool.is_none() && call_id.is_none() {
                return Err("result without tool needs the call_id of a pending call".into());
            }
            let args = map.remove("args");
            let outcome = match (map.remove("error"), map.remove("result")) {
                (Some(error), _) => OwnedOutcome::Error(error),
                (None, Some(result)) => OwnedOutcome::Result(result),
                (None, None) => OwnedOutcome::Nothing,
            };
            Ok(Event::Result {
                ids,
                call_id,
                tool,
                args,
                outcome,
            })
        }
        "compaction" => Ok(Event::Compaction { ids }),
        "usage" => {
            let usage = crate::usage::usage_of::<&Value>(&map)?;
            Ok(Event::Usage {
                ids,
                usage: OwnedUsage::of(&usage),
            })
        }
        "message" => {
            let role = match map.get("role") {
                None => return Err("message without role".into()),
                Some(Value::String(name)) => name,
                Some(other) => {
                    return Err(format!("role must be a string, not {}", kind_of(other)))
                }
            };
            let text = text_field(&map, "text")?.unwrap_or_default();
            let reasoning = text_field(&map, "reasoning")?;
            let has_tool_calls = bool_field(&map, "has_tool_calls")?;
            let delta = bool_field(&map, "delta")?.unwrap_or(false);
            let index = match map.get("index") {
                None => None,
                Some(Value::Number(n)) => Some(index_of(n.as_f64())?),
                Some(other) => return Err(index_error(kind_of(other))),
            };
            let id = string_field(&map, "id")?;
            let message = message_of(
                role,
                &text,
                reasoning.as_deref(),
                has_tool_calls,
                id.as_deref(),
                delta,
                index,
            )?;
            let message = OwnedMessage::of(&message);
            Ok(Event::Message { ids, message })
        }
        other => {
            let shown: String = other.chars().take(64).collect();
            Err(format!("unknown event type {shown:?}"))
        }
    }
}

/// A string field: trimmed, blank = absent, anything but a string is an error.
fn string_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(loopguard::text::non_blank(s).map(str::to_owned)),
        Some(other) => Err(format!("{key} must be a string, not {}", kind_of(other))),
    }
}

/// A text field, untrimmed.
fn text_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key} must be a string, not {}", kind_of(other))),
    }
}

/// A boolean field.
fn bool_field(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!(
            "{key} must be true or false, not {}",
            kind_of(other)
        )),
    }
}

/// What a JSON value is, for error messages: `a string`, `an array`, `null` …
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(line: &str) -> String {
        parse_line(line.as_bytes()).unwrap_err()
    }

    #[test]
    fn parses_each_kind() {
        let e = parse_line(br#"{"type":"call","tool":" read ","args":{"p":1},"run":" ","x":1}"#)
            .unwrap();
        assert_eq!(
            e,
            Event::Call {
                ids: Ids {
                    session: "default".into(),
                    ..Ids::default()
                },
                call_id: None,
                tool: "read".into(),
                args: json!({"p": 1}),
                batch: None,
            }
        );
        let e = parse_line(
            br#"{"type":"call","tool":"read","session":"c","parent_session":" s ","parent_run":"r"}"#,
        )
        .unwrap();
        assert_eq!(e.ids().parent_session.as_deref(), Some("s"));
        assert_eq!(e.ids().parent_run.as_deref(), Some("r"));
        assert!(err(r#"{"type":"call","tool":"read","parent_run":"r"}"#).contains("parent_session"));
        assert!(err(r#"{"type":"call","tool":"read","parent_session":1}"#).contains("string"));
        let e = parse_line(br#"{"type":"call","tool":"read","session":"s","agent":"a"}"#).unwrap();
        assert!(matches!(e, Event::Call { ref args, .. } if *args == json!({})));
        assert_eq!(e.ids().agent.as_deref(), Some("a"));
        let e =
            parse_line(br#"{"type":"result","call_id":"c1","error":null,"result":{}}"#).unwrap();
        assert!(matches!(
            e,
            Event::Result {
                outcome: OwnedOutcome::Error(Value::Null),
                tool: None,
                ..
            }
        ));
        let e = parse_line(br#"{"type":"result","tool":"t"}"#).unwrap();
        assert!(matches!(
            e,
            Event::Result {
                outcome: OwnedOutcome::Nothing,
                ..
            }
        ));
        let e = parse_line(br#"{"type":"compaction","session":"s","run":"r"}"#).unwrap();
        assert_eq!(e.ids().run.as_deref(), Some("r"));
    }

    #[test]
    fn rejects_bad_lines_with_reasons() {
        assert!(err("this is not json").starts_with("invalid JSON"));
        assert_eq!(err("[1,2,3]"), "event must be a JSON object");
        assert_eq!(err(r#"{"type":"bogus"}"#), "unknown event type \"bogus\"");
        assert_eq!(err(r#"{"session":"s"}"#), "event without type");
        assert_eq!(err(r#"{"type":"call","args":{}}"#), "call without tool");
        assert_eq!(err(r#"{"type":"call","tool":"  "}"#), "call without tool");
        assert_eq!(
            err(r#"{"type":"call","tool":"t","run":null}"#),
            "run must be a string, not null"
        );
        assert_eq!(
            err(r#"{"type":"call","tool":5}"#),
            "tool must be a string, not a number"
        );
        assert!(err(r#"{"type":"call","tool":"t""#).contains("ends early"));
        assert!(parse_line(b"{\"type\":\"call\",\"tool\":\"\xff\"}")
            .unwrap_err()
            .contains("UTF-8"));
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            err(&format!(r#"{{"type":"call","tool":"t","args":{deep}}}"#))
                .contains("nested deeper")
        );
        let deep = "[".repeat(100_000);
        assert!(err(&deep).contains("nested deeper"));
        assert!(err(r#"{"type":"result","result":{}}"#).contains("call_id"));
    }

    #[test]
    fn duplicate_keys_last_wins_and_big_numbers_are_exact() {
        let e = parse_line(
            br#"{"type":"call","tool":"a","tool":"b","args":{"n":18446744073709551615}}"#,
        )
        .unwrap();
        match e {
            Event::Call { tool, args, .. } => {
                assert_eq!(tool, "b");
                assert_eq!(args["n"].as_u64(), Some(u64::MAX));
            }
            other => panic!("{other:?}"),
        }
    }
}

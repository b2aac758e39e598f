//! Events as the engine reads them: borrowed ids and JSON, from either representation.
//!
//! A line of a replay, a sidecar request or a hook payload is tokenized once into a
//! [`Tape`], keeping only what the engine reads: the envelope's own members (noted by the
//! tokenizer as it finds them; a usage event's figures among them) and, of a result, what
//! the outcome rules read; anything else is checked to be JSON and left out. [`parse_raw`] keeps `args`, `result` and `error` as
//! [`Raw`] nodes and the ids as slices of the line (or of the tape, when escaped). No value
//! tree is built and, once the tape has grown to the stream's events, nothing is allocated. An owned [`Event`] (what transcript readers
//! and hosts with `serde_json` values build) lends the same view with [`Event::as_ref`], so
//! [`crate::apply_event`] is written once for both.
//!
//! Raw JSON is also valid JSON that a `Value` cannot hold: numbers beyond the double range,
//! lone surrogate escapes, nesting deeper than `serde_json`'s 128 levels. In `args`,
//! `result` and `error` those are fingerprinted like any other value (see
//! `docs/fingerprints.md`); in the ids, which are kept as text, a lone surrogate makes the
//! event invalid.

use loopguard::fingerprint::RESULT_READ;
use loopguard::json::{kind_name, Json, Kind, Member, Raw, Read, Str, Tape};
use loopguard::{Message, OutcomeOf, Scope, Usage};
use serde_json::Value;

use crate::event::{Event, Ids, OwnedOutcome};

/// The (session, run, agent, parent) ids of an event, normalized, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdsRef<'a> {
    /// Session id (`"default"` when absent).
    pub session: &'a str,
    /// Run id.
    pub run: Option<&'a str>,
    /// Agent id.
    pub agent: Option<&'a str>,
    /// The session that spawned this one (a sub-agent's parent).
    pub parent_session: Option<&'a str>,
    /// The run of the parent session that spawned this one.
    pub parent_run: Option<&'a str>,
}

/// An event whose strings and JSON are borrowed; `J` is the JSON view (`&Value` for an
/// owned [`Event`], [`Raw`] for an event read from text).
#[derive(Clone, Copy, Debug)]
pub enum EventRef<'a, J> {
    /// A tool call about to run.
    Call {
        /// Scope.
        ids: IdsRef<'a>,
        /// Provider call id.
        call_id: Option<&'a str>,
        /// Tool name.
        tool: &'a str,
        /// Arguments (`None`: absent, which means `{}`).
        args: Option<J>,
        /// The batch of parallel calls (one assistant message) the call belongs to.
        batch: Option<&'a str>,
    },
    /// What a call returned.
    Result {
        /// Scope.
        ids: IdsRef<'a>,
        /// Provider call id.
        call_id: Option<&'a str>,
        /// Tool name; when absent, `call_id` must name a pending call.
        tool: Option<&'a str>,
        /// Arguments; when absent, those of the pending call `call_id` names.
        args: Option<J>,
        /// Result or error.
        outcome: OutcomeOf<J>,
    },
    /// A compaction retry.
    Compaction {
        /// Scope.
        ids: IdsRef<'a>,
    },
    /// What a model response used.
    Usage {
        /// Scope.
        ids: IdsRef<'a>,
        /// The figures.
        usage: Usage<'a>,
    },
    /// What the model said (whole, or a piece of its stream), or what it was told.
    Message {
        /// Scope.
        ids: IdsRef<'a>,
        /// The message.
        message: Message<'a>,
    },
}

/// An event read from JSON text.
pub type RawEvent<'a> = EventRef<'a, Raw<'a>>;

impl<'a, J> EventRef<'a, J> {
    /// The event's ids.
    pub fn ids(&self) -> IdsRef<'a> {
        match self {
            Self::Call { ids, .. }
            | Self::Result { ids, .. }
            | Self::Compaction { ids }
            | Self::Usage { ids, .. }
            | Self::Message { ids, .. } => *ids,
        }
    }

    /// The scope of the event: its ids, with `default_agent` when it names no agent.
    pub fn scope(&self, default_agent: Option<&'a str>) -> Scope<'a> {
        let ids = self.ids();
        Scope::new(ids.session)
            .with_run(ids.run)
            .with_agent(ids.agent.or(default_agent))
            .with_parent(ids.parent_session, ids.parent_run)
    }

    /// The name of the event's type (`call`, `result`, `compaction`, `usage`, `message`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Call { .. } => "call",
            Self::Result { .. } => "result",
            Self::Compaction { .. } => "compaction",
            Self::Usage { .. } => "usage",
            Self::Message { .. } => "message",
        }
    }

    /// The call id and tool the event names.
    pub fn call_id_and_tool(&self) -> (Option<&'a str>, Option<&'a str>) {
        match self {
            Self::Call { call_id, tool, .. } => (*call_id, Some(*tool)),
            Self::Result { call_id, tool, .. } => (*call_id, *tool),
            Self::Compaction { .. } | Self::Usage { .. } | Self::Message { .. } => (None, None),
        }
    }

    /// The id of a message event.
    pub fn message_id(&self) -> Option<&'a str> {
        match self {
            Self::Message { message, .. } => message.id,
            _ => None,
        }
    }

    /// The same event with its arguments seen through `args` and its outcome through
    /// `outcome` (other [`Json`](loopguard::json::Json) views of the same values).
    pub fn map_json<K>(
        self,
        args: impl FnOnce(J) -> K,
        outcome: impl FnOnce(J) -> K,
    ) -> EventRef<'a, K> {
        match self {
            Self::Call {
                ids,
                call_id,
                tool,
                args: a,
                batch,
            } => EventRef::Call {
                ids,
                call_id,
                tool,
                args: a.map(args),
                batch,
            },
            Self::Result {
                ids,
                call_id,
                tool,
                args: a,
                outcome: o,
            } => EventRef::Result {
                ids,
                call_id,
                tool,
                args: a.map(args),
                outcome: o.map(outcome),
            },
            Self::Compaction { ids } => EventRef::Compaction { ids },
            Self::Usage { ids, usage } => EventRef::Usage { ids, usage },
            Self::Message { ids, message } => EventRef::Message { ids, message },
        }
    }
}

impl Ids {
    /// The ids, borrowed.
    pub fn as_ref(&self) -> IdsRef<'_> {
        IdsRef {
            session: &self.session,
            run: self.run.as_deref(),
            agent: self.agent.as_deref(),
            parent_session: self.parent_session.as_deref(),
            parent_run: self.parent_run.as_deref(),
        }
    }
}

impl<'a> IdsRef<'a> {
    /// Ids naming no parent.
    pub fn new(session: &'a str, run: Option<&'a str>, agent: Option<&'a str>) -> Self {
        Self {
            session,
            run,
            agent,
            parent_session: None,
            parent_run: None,
        }
    }

    /// The same ids, spawned by run `run` of session `session` (blank ones count as
    /// absent); a parent run without a parent session is an error.
    pub fn with_parent(
        mut self,
        session: Option<&'a str>,
        run: Option<&'a str>,
    ) -> Result<Self, String> {
        self.parent_session = session.and_then(loopguard::text::non_blank);
        self.parent_run = run.and_then(loopguard::text::non_blank);
        if self.parent_run.is_some() && self.parent_session.is_none() {
            return Err(
                "parent_run without parent_session (name the session that spawned this one)".into(),
            );
        }
        Ok(self)
    }

    /// The ids, owned.
    pub fn to_ids(self) -> Ids {
        Ids {
            session: self.session.to_owned(),
            run: self.run.map(str::to_owned),
            agent: self.agent.map(str::to_owned),
            parent_session: self.parent_session.map(str::to_owned),
            parent_run: self.parent_run.map(str::to_owned),
        }
    }
}

impl Event {
    /// The event as a borrowed view.
    pub fn as_ref(&self) -> EventRef<'_, &Value> {
        let ids = self.ids().as_ref();
        match self {
            Event::Call {
                call_id,
                tool,
                args,
                batch,
                ..
            } => EventRef::Call {
                ids,
                call_id: call_id.as_deref(),
                tool,
                args: Some(args),
                batch: batch.as_deref(),
            },
            Event::Result {
                call_id,
                tool,
                args,
                outcome,
                ..
            } => EventRef::Result {
                ids,
                call_id: call_id.as_deref(),
                tool: tool.as_deref(),
                args: args.as_ref(),
                outcome: match outcome {
                    OwnedOutcome::Result(v) => OutcomeOf::Result(v),
                    OwnedOutcome::Error(v) => OutcomeOf::Error(v),
                    OwnedOutcome::Nothing => OutcomeOf::Nothing,
                },
            },
            Event::Compaction { .. } => EventRef::Compaction { ids },
            Event::Usage { usage, .. } => EventRef::Usage {
                ids,
                usage: usage.as_usage(),
            },
            Event::Message { message, .. } => EventRef::Message {
                ids,
                message: message.as_message(),
            },
        }
    }
}

/// Parses one line (without its line terminator) into an event that borrows from the line
/// and from `tape`. The errors are those of [`crate::parse_line`], word for word, except
/// that JSON a `Value` cannot hold is read (see the module docs). What the engine never
/// reads (members of the event other than its own, members of a result other than those
/// the outcome rules read: [`RESULT_READ`]) is checked to be JSON and left out of the tape;
/// a usage event, which refuses members it does not know, has its keys checked by a second
/// reading of the line.
pub fn parse_raw<'a>(line: &'a [u8], tape: &'a mut Tape) -> Result<RawEvent<'a>, String> {
    let text = std::str::from_utf8(line).map_err(|e| crate::event::utf8_error(&e))?;
    let root = tape
        .parse_read(text, &ENVELOPE)
        .map_err(|e| crate::event::json_text_error(text, &e))?;
    if root.as_object().is_none() {
        return Err("event must be a JSON object".into());
    }
    // The tokenizer noted each member of the envelope as it found it.
    from_fields(Fields(std::array::from_fn(|i| root.read_member(i))), || {
        // The envelope's reading left out the members it does not name: read the keys of
        // all of them (usage events are one per model response, and short).
        let mut whole = Tape::new();
        let root = whole
            .parse(text)
            .map_err(|e| crate::event::json_text_error(text, &e))?;
        let object = root.as_object().ok_or("event must be a JSON object")?;
        crate::usage::check_members::<Raw<'_>>(object)
    })
}

/// What the engine reads of an event: its envelope's members.
static ENVELOPE: Read = Read::Members(&MEMBERS);

/// The members of an event the engine reads, in the order of [`Fields`]' slots; of a
/// result, what the outcome rules read ([`RESULT_READ`]); then those of a message; then
/// the figures of a usage event ([`crate::usage`]).
const MEMBERS: [Member; 25] = [
    Member::new("type", Read::All),
    Member::new("session", Read::All),
    Member::new("run", Read::All),
    Member::new("agent", Read::All),
    Member::new("call_id", Read::All),
    Member::new("tool", Read::All),
    Member::new("args", Read::All),
    Member::new("result", RESULT_READ),
    Member::new("error", Read::All),
    Member::new("batch", Read::All),
    Member::new("role", Read::All),
    Member::new("text", Read::All),
    Member::new("reasoning", Read::All),
    Member::new("has_tool_calls", Read::All),
    Member::new("id", Read::All),
    Member::new("delta", Read::All),
    Member::new("index", Read::All),
    Member::new("model", Read::All),
    Member::new("input_tokens", Read::All),
    Member::new("output_tokens", Read::All),
    Member::new("cache_read_tokens", Read::All),
    Member::new("cache_write_tokens", Read::All),
    Member::new("cost", Read::All),
    Member::new("parent_session", Read::All),
    Member::new("parent_run", Read::All),
];

/// Reads an event from a tokenized JSON value.
pub fn from_raw(root: Raw<'_>) -> Result<RawEvent<'_>, String> {
    let Some(object) = root.as_object() else {
        return Err("event must be a JSON object".into());
    };
    // One pass over the members; the last of a repeated key wins.
    let mut f = Fields::default();
    for (key, value) in object.members() {
        if let Some(i) = MEMBERS
            .iter()
            .position(|m| m.name().as_bytes() == key.as_bytes())
        {
            f.0[i] = Some(value);
        }
    }
    from_fields(f, || crate::usage::check_members::<Raw<'_>>(object))
}

/// The event its envelope's members make; `check_usage_members` refuses a usage event with
/// a member it does not know.
fn from_fields<'a>(
    f: Fields<'a>,
    check_usage_members: impl FnOnce() -> Result<(), String>,
) -> Result<RawEvent<'a>, String> {
    let kind = match f.get(TYPE) {
        None => return Err("event without type".into()),
        Some(v) => v
            .as_string()
            .ok_or_else(|| "event type must be a string".to_owned())?,
    };
    let ids = IdsRef::new(
        string_field(f.get(SESSION), "session")?.unwrap_or("default"),
        string_field(f.get(RUN), "run")?,
        string_field(f.get(AGENT), "agent")?,
    )
    .with_parent(
        string_field(f.get(PARENT_SESSION), "parent_session")?,
        string_field(f.get(PARENT_RUN), "parent_run")?,
    )?;
    let call_id = string_field(f.get(CALL_ID), "call_id")?;
    match kind.as_bytes() {
        b"call" => {
            let tool = string_field(f.get(TOOL), "tool")?.ok_or("call without tool")?;
            let batch = string_field(f.get(BATCH), "batch")?;
            Ok(EventRef::Call {
                ids,
                call_id,
                tool,
                args: f.get(ARGS),
                batch,
            })
        }
        b"result" => {
            let tool = string_field(f.get(TOOL), "tool")?;
            if tool.is_none() && call_id.is_none() {
                return Err("result without tool needs the call_id of a pending call".into());
            }
            let outcome = match (f.get(ERROR), f.get(RESULT)) {
                (Some(error), _) => OutcomeOf::Error(error),
                (None, Some(result)) => OutcomeOf::Result(result),
                (None, None) => OutcomeOf::Nothing,
            };
            Ok(EventRef::Result {
                ids,
                call_id,
                tool,
                args: f.get(ARGS),
                outcome,
            })
        }
        b"compaction" => Ok(EventRef::Compaction { ids }),
        b"usage" => {
            check_usage_members()?;
            let usage = crate::usage::figures(|key| {
                let slot = MEMBERS.iter().position(|m| m.name() == key)?;
                f.get(slot)
            })?;
            Ok(EventRef::Usage { ids, usage })
        }
        b"message" => {
            let role = match f.get(ROLE) {
                None => return Err("message without role".into()),
                Some(v) => match v.as_string() {
                    Some(Str::Text(name)) => name,
                    _ => return Err(format!("role must be a string, not {}", kind_name(v))),
                },
            };
            let text = text_field(f.get(TEXT), "text")?.unwrap_or("");
            let reasoning = text_field(f.get(REASONING), "reasoning")?;
            let has_tool_calls = bool_field(f.get(HAS_TOOL_CALLS), "has_tool_calls")?;
            let delta = bool_field(f.get(DELTA), "delta")?.unwrap_or(false);
            let index = match f.get(INDEX) {
                None => None,
                Some(v) => Some(match v.kind() {
                    Kind::Number(n) => crate::event::index_of(n.as_f64())?,
                    _ => return Err(crate::event::index_error(kind_name(v))),
                }),
            };
            let id = string_field(f.get(ID), "id")?;
            Ok(EventRef::Message {
                ids,
                message: crate::event::message_of(
                    role,
                    text,
                    reasoning,
                    has_tool_calls,
                    id,
                    delta,
                    index,
                )?,
            })
        }
        other => {
            let other = String::from_utf8_lossy(other);
            let shown: String = other.chars().take(64).collect();
            Err(format!("unknown event type {shown:?}"))
        }
    }
}

/// The envelope's members as found, in the order of [`ENVELOPE`].
#[derive(Default)]
struct Fields<'a>([Option<Raw<'a>>; MEMBERS.len()]);

impl<'a> Fields<'a> {
    fn get(&self, slot: usize) -> Option<Raw<'a>> {
        self.0[slot]
    }
}

/// The slots of [`Fields`].
const TYPE: usize = 0;
const SESSION: usize = 1;
const RUN: usize = 2;
const AGENT: usize = 3;
const CALL_ID: usize = 4;
const TOOL: usize = 5;
const ARGS: usize = 6;
const RESULT: usize = 7;
const ERROR: usize = 8;
const BATCH: usize = 9;
const ROLE: usize = 10;
const TEXT: usize = 11;
const REASONING: usize = 12;
const HAS_TOOL_CALLS: usize = 13;
const ID: usize = 14;
const DELTA: usize = 15;
const INDEX: usize = 16;
const PARENT_SESSION: usize = 23;
const PARENT_RUN: usize = 24;

/// A string field: trimmed, blank = absent, anything but a string is an error.
fn string_field<'a>(value: Option<Raw<'a>>, key: &str) -> Result<Option<&'a str>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.as_string() {
        Some(Str::Text(s)) => Ok(loopguard::text::non_blank(s)),
        Some(Str::Wtf8(_)) => Err(format!(
            "{key} must be Unicode text, not a string with a lone surrogate escape"
        )),
        None => Err(format!("{key} must be a string, not {}", kind_name(value))),
    }
}

/// A text field, untrimmed (a message's text is what it is): anything but a string is an
/// error.
fn text_field<'a>(value: Option<Raw<'a>>, key: &str) -> Result<Option<&'a str>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.as_string() {
        Some(Str::Text(s)) => Ok(Some(s)),
        Some(Str::Wtf8(_)) => Err(format!(
            "{key} must be Unicode text, not a string with a lone surrogate escape"
        )),
        None => Err(format!("{key} must be a string, not {}", kind_name(value))),
    }
}

/// A boolean field.
fn bool_field(value: Option<Raw<'_>>, key: &str) -> Result<Option<bool>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.kind() {
        Kind::Bool(b) => Ok(Some(b)),
        _ => Err(format!(
            "{key} must be true or false, not {}",
            kind_name(value)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::parse_line;

    /// The raw parser answers every line exactly like the value parser, where the value
    /// parser can read it.
    #[test]
    fn errors_and_events_match_the_value_parser() {
        let lines = [
            r#"{"type":"call","tool":" read ","args":{"p":1},"run":" ","x":1}"#,
            r#"{"type":"call","tool":"read","session":"s","agent":"a"}"#,
            r#"{"type":"result","call_id":"c1","error":null,"result":{}}"#,
            r#"{"type":"result","tool":"t"}"#,
            r#"{"type":"compaction","session":"s","run":"r"}"#,
            "this is not json",
            "[1,2,3]",
            r#"{"type":"bogus"}"#,
            r#"{"session":"s"}"#,
            r#"{"type":"call","args":{}}"#,
            r#"{"type":"call","tool":"  "}"#,
            r#"{"type":"call","tool":"t","run":null}"#,
            r#"{"type":"call","tool":5}"#,
            r#"{"type":"call","tool":"t""#,
            r#"{"type":"result","result":{}}"#,
            r#"{"type":7}"#,
            r#"{"type":"call","tool":"a","tool":"b","session":"\u0073"}"#,
            r#"{"type":"call","tool":"t","session":1,"run":2}"#,
            r#"{"type":"result","call_id":" ","tool":" "}"#,
            r#"{"type":"call","tool":"t","batch":[]}"#,
            "{\"type\":\"call\",\"tool\":\"t\u{1}\"}",
            r#"{"type":"call","tool":"t"} x"#,
            "",
            r#"{"type":"usage","session":"s","input_tokens":1,"output_tokens":2,"model":"m","id":"u1","cost":0.5}"#,
            r#"{"type":"usage","input_tokens":-1,"output_tokens":2}"#,
            r#"{"type":"usage","input_tokens":1,"output_tokens":2,"prompt_tokens":3}"#,
            r#"{"type":"usage","output_tokens":2}"#,
            r#"{"type":"usage","input_tokens":1,"output_tokens":2,"cost":null}"#,
            r#"{"type":"usage","input_tokens":1,"output_tokens":2,"call_id":5}"#,
            r#"{"type":"message","role":"assistant","text":"hi","id":" m1 ","has_tool_calls":false}"#,
            r#"{"type":"message","role":"tool_feedback","text":"No tool calls found."}"#,
            r#"{"type":"message","role":"assistant","text":"he","delta":true,"index":3,"id":"m"}"#,
            r#"{"type":"message","role":"assistant","delta":true}"#,
            r#"{"type":"message","role":"user","text":"go","delta":true}"#,
            r#"{"type":"message","text":"x"}"#,
            r#"{"type":"message","role":"robot","text":"x"}"#,
            r#"{"type":"message","role":3}"#,
            r#"{"type":"message","role":"user","text":5}"#,
            r#"{"type":"message","role":"user","text":null}"#,
            r#"{"type":"message","role":"assistant","has_tool_calls":"yes"}"#,
            r#"{"type":"message","role":"assistant","delta":1}"#,
            r#"{"type":"message","role":"assistant","delta":true,"index":-1}"#,
            r#"{"type":"message","role":"assistant","delta":true,"index":1.5}"#,
            r#"{"type":"message","role":"assistant","delta":true,"index":"2"}"#,
            r#"{"type":"message","role":"assistant","delta":true,"index":1e300}"#,
            r#"{"type":"message","role":"assistant","index":2}"#,
            r#"{"type":"message","role":"assistant","reasoning":["x"]}"#,
            r#"{"type":"message","role":"assistant","id":7}"#,
            // Every member of a message is read, whatever else the line holds.
            r#"{"x":{"text":"no"},"type":"message","role":"assistant","text":" a\n b ","reasoning":"think","has_tool_calls":true,"id":"m2","session":"s","run":"r"}"#,
            r#"{"type":"message","role":"assistant","reasoning":"r","text":"t","delta":true,"index":0,"id":"m3","y":[1]}"#,
        ];
        let mut tape = Tape::new();
        for line in lines {
            let want = parse_line(line.as_bytes());
            let got = parse_raw(line.as_bytes(), &mut tape);
            match (&want, &got) {
                (Err(a), Err(b)) => assert_eq!(a, b, "{line}"),
                (Ok(a), Ok(b)) => {
                    let a = a.as_ref();
                    assert_eq!(a.ids(), b.ids(), "{line}");
                    assert_eq!(a.kind(), b.kind(), "{line}");
                    assert_eq!(a.call_id_and_tool(), b.call_id_and_tool(), "{line}");
                    if let (EventRef::Usage { usage: x, .. }, EventRef::Usage { usage: y, .. }) =
                        (a, b)
                    {
                        assert_eq!(x, *y, "{line}");
                    }
                    if let (
                        EventRef::Message { message: x, .. },
                        EventRef::Message { message: y, .. },
                    ) = (a, b)
                    {
                        assert_eq!(x, *y, "{line}");
                    }
                }
                _ => panic!("{line}: {want:?} vs {got:?}"),
            }
        }
        assert!(
            parse_raw(b"{\"type\":\"call\",\"tool\":\"\xff\"}", &mut tape)
                .unwrap_err()
                .contains("UTF-8")
        );
    }

    #[test]
    fn reads_what_a_value_cannot_hold() {
        let mut tape = Tape::new();
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        for args in [r#"{"n":1e999}"#, r#"{"s":"\ud800"}"#, deep.as_str()] {
            let line = format!(r#"{{"type":"call","tool":"t","args":{args}}}"#);
            let event = parse_raw(line.as_bytes(), &mut tape).unwrap();
            assert!(matches!(event, EventRef::Call { args: Some(_), .. }));
        }
        // A figure beyond the double range is refused by the usage reader, not the parser.
        let line = r#"{"type":"usage","input_tokens":1e999,"output_tokens":2}"#;
        assert!(parse_raw(line.as_bytes(), &mut tape)
            .unwrap_err()
            .contains("not 1e999"));
        let line = r#"{"type":"call","tool":"t\ud800"}"#;
        assert_eq!(
            parse_raw(line.as_bytes(), &mut tape).unwrap_err(),
            "tool must be Unicode text, not a string with a lone surrogate escape"
        );
    }
}

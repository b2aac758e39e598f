//! Reading hook payloads: JSON objects whose fields are checked for their type.

use std::borrow::Cow;

use loopguard_events::{kind_of, MAX_ID_BYTES};
use serde_json::{Map, Value};

use crate::mapping::{Origin, ToolUse};

/// Why a payload cannot be handled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// Not a payload of this agent's protocol.
    #[error("{0}")]
    Invalid(String),
    /// A well-formed payload of an event loopguard has nothing to do for.
    #[error("event {0:?} is not one loopguard handles; the hook does nothing for it")]
    Unsupported(String),
}

/// A payload object.
#[derive(Clone, Copy, Debug)]
pub struct Payload<'a>(&'a Map<String, Value>);

impl<'a> Payload<'a> {
    /// The payload, when `value` is a JSON object.
    pub fn new(value: &'a Value) -> Result<Self, PayloadError> {
        value
            .as_object()
            .map(Self)
            .ok_or_else(|| PayloadError::Invalid("hook input must be a JSON object".into()))
    }

    /// A field's value, if present.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.get(key)
    }

    /// A string field: absent or null is `None`; any other type is an error.
    pub fn str(&self, key: &str) -> Result<Option<&'a str>, PayloadError> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(PayloadError::Invalid(format!(
                "field {key:?} must be a string, not {}",
                kind_of(other)
            ))),
        }
    }

    /// A string field that must be present and not blank.
    pub fn required_str(&self, key: &str) -> Result<&'a str, PayloadError> {
        self.str(key)?
            .filter(|s| !loopguard::text::is_blank(s))
            .ok_or_else(|| PayloadError::Invalid(format!("field {key:?} is missing")))
    }

    /// A boolean field; absent, null or any other type is false.
    pub fn flag(&self, key: &str) -> bool {
        self.0.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// `hook_event_name`.
    pub fn event_name(&self) -> Result<&'a str, PayloadError> {
        self.required_str("hook_event_name")
    }

    /// The origin: `session_id`, and the subagent fields `agent_id` / `agent_type` that
    /// Claude Code and Codex add inside a subagent.
    pub fn origin(&self) -> Result<Origin, PayloadError> {
        let session = self.str("session_id")?.map(bounded_id);
        let mut origin = Origin::new(session.as_deref());
        origin.subagent = self.id("agent_id")?;
        origin.agent = self.id("agent_type")?;
        Ok(origin)
    }

    /// The session transcript `transcript_path` names, read as `format`; `None` when the
    /// payload names none (or a directory).
    pub fn transcript(
        &self,
        format: loopguard_transcripts::Format,
    ) -> Result<Option<crate::mapping::Transcript>, PayloadError> {
        Ok(self
            .str("transcript_path")?
            .filter(|p| crate::transcript::usable(p))
            .map(|path| crate::mapping::Transcript {
                path: path.to_owned(),
                format,
                model: self
                    .get("model")
                    .and_then(Value::as_str)
                    .and_then(loopguard::text::non_blank)
                    .map(str::to_owned),
            }))
    }

    /// An id field: absent, null or blank is `None`; trimmed, and bounded ([`bounded_id`]).
    fn id(&self, key: &str) -> Result<Option<String>, PayloadError> {
        Ok(self
            .str(key)?
            .and_then(loopguard::text::non_blank)
            .map(|id| bounded_id(id).into_owned()))
    }

    /// The tool call: `tool_name` (required), `tool_input` (`{}` when absent or null),
    /// `tool_use_id` (optional).
    pub fn tool_use(&self) -> Result<ToolUse, PayloadError> {
        let tool = bounded_id(loopguard::text::trim(self.required_str("tool_name")?)).into_owned();
        let args = match self.0.get("tool_input") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let call_id = self.id("tool_use_id")?;
        Ok(ToolUse {
            tool,
            args: args.into(),
            call_id,
        })
    }
}

/// `id` when it is at most [`MAX_ID_BYTES`] long; else its first 64 bytes, `…` and its
/// 128-bit digest: state stays bounded, and one id always maps to the same key. (The
/// server refuses such ids instead; a hook that refused one would let the call through.)
pub fn bounded_id(id: &str) -> Cow<'_, str> {
    if id.len() <= MAX_ID_BYTES {
        return Cow::Borrowed(id);
    }
    let mut cut = 64;
    while !id.is_char_boundary(cut) {
        cut -= 1;
    }
    let digest = xxhash_rust::xxh3::xxh3_128(id.as_bytes());
    Cow::Owned(format!("{}…{digest:032x}", &id[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_checked() {
        let v = json!({"hook_event_name": "PreToolUse", "session_id": 3, "tool_name": " Bash ", "tool_input": null});
        let p = Payload::new(&v).unwrap();
        assert_eq!(p.event_name().unwrap(), "PreToolUse");
        assert!(p.origin().unwrap_err().to_string().contains("session_id"));
        let t = p.tool_use().unwrap();
        assert_eq!(
            (t.tool.as_str(), t.args.clone(), t.call_id),
            ("Bash", json!({}).into(), None)
        );
        assert!(Payload::new(&json!([1])).is_err());
        let blank = json!({"hook_event_name": "  "});
        assert!(Payload::new(&blank).unwrap().event_name().is_err());
        let no_tool = json!({"tool_name": ""});
        assert!(Payload::new(&no_tool).unwrap().tool_use().is_err());
    }

    #[test]
    fn origins_default_and_carry_subagents() {
        let v = json!({"agent_id": "a1", "agent_type": "Explore"});
        let o = Payload::new(&v).unwrap().origin().unwrap();
        assert_eq!(o.session, "default");
        assert_eq!(o.subagent.as_deref(), Some("a1"));
        assert_eq!(o.agent.as_deref(), Some("Explore"));
    }

    #[test]
    fn long_ids_are_bounded_and_stable() {
        let long = "é".repeat(500_000);
        let v = json!({"session_id": long, "agent_id": "a".repeat(300), "tool_name": "t".repeat(257), "tool_use_id": "x".repeat(256)});
        let p = Payload::new(&v).unwrap();
        let o = p.origin().unwrap();
        assert!(o.session.len() <= MAX_ID_BYTES && o.session.starts_with("éé"));
        assert_eq!(
            o.session,
            p.origin().unwrap().session,
            "the same id, the same key"
        );
        assert!(o.subagent.unwrap().len() <= MAX_ID_BYTES);
        let t = p.tool_use().unwrap();
        assert!(t.tool.len() <= MAX_ID_BYTES);
        assert_eq!(
            t.call_id.unwrap().len(),
            256,
            "ids up to the limit are kept as they are"
        );
        let other = json!({"session_id": format!("{}!", "é".repeat(500_000))});
        assert_ne!(
            Payload::new(&other).unwrap().origin().unwrap().session,
            o.session
        );
    }
}

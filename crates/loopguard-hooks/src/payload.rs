//! Reading hook payloads: JSON objects whose fields are checked for their type.

use loopguard_events::kind_of;
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
        let mut origin = Origin::new(self.str("session_id")?);
        origin.subagent = self
            .str("agent_id")?
            .and_then(loopguard::text::non_blank)
            .map(str::to_owned);
        origin.agent = self
            .str("agent_type")?
            .and_then(loopguard::text::non_blank)
            .map(str::to_owned);
        Ok(origin)
    }

    /// The tool call: `tool_name` (required), `tool_input` (`{}` when absent or null),
    /// `tool_use_id` (optional).
    pub fn tool_use(&self) -> Result<ToolUse, PayloadError> {
        let tool = loopguard::text::trim(self.required_str("tool_name")?).to_owned();
        let args = match self.0.get("tool_input") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v) => v.clone(),
        };
        let call_id = self
            .str("tool_use_id")?
            .and_then(loopguard::text::non_blank)
            .map(str::to_owned);
        Ok(ToolUse {
            tool,
            args,
            call_id,
        })
    }
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
            ("Bash", json!({}), None)
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
}

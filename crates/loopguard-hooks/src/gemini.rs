//! Gemini CLI's hook protocol.
//!
//! Gemini CLI runs command hooks from `settings.json` with the event as JSON on stdin
//! (`session_id`, `hook_event_name`, `timestamp`, the event's fields) and reads JSON from
//! stdout on exit 0; nothing else may be printed there. Exit 2 blocks with stderr as the
//! reason; other codes are warnings and the CLI carries on (loopguard's own errors exit 1:
//! fail open). loopguard always answers exit 0 with a JSON object, `{}` when it has
//! nothing to say.
//!
//! | event | engine | stdout |
//! |---|---|---|
//! | `BeforeTool` | call verdict | allow: `{}`; warn: `systemMessage` for the user (the model gets the note with the result, below); block: `decision: "deny"` with the message as `reason` (sent to the model as the tool's error), a `systemMessage`, and for a terminal block `continue: false` with `stopReason` (the agent loop stops) |
//! | `AfterTool` | `tool_response` recorded: its `error` as an error, else `llmContent` as the result | a warning from `BeforeTool` as `hookSpecificOutput.additionalContext` (appended to the tool result); when the post-compaction guard aborts the run, also `continue: false` and `stopReason` |
//! | `PreCompress` | compaction: arms the post-compaction guard | `{}` |
//! | `BeforeAgent` | a new run (the user submitted a prompt) | `{}` |
//! | `SessionStart` | `startup`, `clear`: a new run; `resume`: nothing | `{}` |
//! | `SessionEnd` | the session is forgotten | `{}` |
//!
//! `BeforeTool` cannot add context for the model, and its payload has no call id: a
//! warning is kept in the store under the call's tool and arguments and given to the model
//! by the `AfterTool` of that call.

use loopguard_events::OwnedOutcome;
use serde_json::{json, Map, Value};

use crate::mapping::{block_summary, HookEvent, NoteDelivery, Origin, Reaction};
use crate::outcome::{gemini_parts, normalize, strip_volatile};
use crate::payload::{Payload, PayloadError};
use crate::HandlerField;

/// Where the settings go.
pub const SETTINGS_FILE: &str =
    "~/.gemini/settings.json (all projects) or .gemini/settings.json (one project)";

/// Warnings are shown with the result (`additionalContext` of `AfterTool`).
pub const DELIVERY: NoteDelivery = NoteDelivery::WithResult;

/// The fields of loopguard's hook entry besides `type` and `command` (timeouts in milliseconds).
pub(crate) const HANDLER: &[(&str, HandlerField)] = &[
    ("name", HandlerField::Text("loopguard")),
    ("timeout", HandlerField::Number(10_000)),
];

/// The events the settings snippet registers, in lifecycle order.
pub const EVENTS: &[&str] = &[
    "SessionStart",
    "BeforeAgent",
    "BeforeTool",
    "AfterTool",
    "PreCompress",
    "SessionEnd",
];

/// Reads a payload.
pub fn parse(value: &Value) -> Result<(Origin, HookEvent), PayloadError> {
    let p = Payload::new(value)?;
    let name = p.event_name()?;
    let origin = p.origin()?;
    let event = match name {
        "BeforeTool" => HookEvent::ToolCall(p.tool_use()?),
        "AfterTool" => HookEvent::ToolResult {
            call: p.tool_use()?,
            outcome: outcome(p.get("tool_response").unwrap_or(&Value::Null)).into(),
        },
        "PreCompress" => HookEvent::Compaction,
        "BeforeAgent" => HookEvent::PromptSubmitted,
        "SessionStart" => HookEvent::SessionStarted {
            fresh: matches!(p.str("source")?, None | Some("startup" | "clear")),
        },
        "SessionEnd" => HookEvent::SessionEnded,
        other => return Err(PayloadError::Unsupported(other.to_owned())),
    };
    Ok((origin, event))
}

/// A Gemini tool response (`{llmContent, returnDisplay, error}`): the error when there is
/// one; else what the model reads (`llmContent`) as text, non-text parts in `details`.
/// `returnDisplay` is what the user's terminal shows, not the model: it is left out.
fn outcome(response: &Value) -> OwnedOutcome {
    let Some(map) = response.as_object() else {
        return OwnedOutcome::Result(normalize(response));
    };
    if let Some(error) = map.get("error").filter(|e| !e.is_null()) {
        return OwnedOutcome::Error(error.clone());
    }
    let (text, other) = gemini_parts(map.get("llmContent").unwrap_or(&Value::Null));
    let mut details = Map::new();
    if !other.is_empty() {
        details.insert("blocks".into(), Value::Array(other));
    }
    OwnedOutcome::Result(json!({
        "content": [{ "type": "text", "text": text }],
        "details": strip_volatile(&Value::Object(details)),
    }))
}

/// What to print on stdout (exit status 0) for `reaction` to `event`.
pub fn render(event: &HookEvent, reaction: &Reaction) -> String {
    let out = match (event, reaction) {
        (HookEvent::ToolCall(_), Reaction::Warn { note }) => json!({ "systemMessage": note }),
        (
            HookEvent::ToolCall(call),
            Reaction::Block {
                message,
                detector,
                count,
                terminal,
            },
        ) => {
            let mut out = json!({
                "decision": "deny",
                "reason": message,
                "systemMessage": block_summary(&call.tool, detector, *count, *terminal),
            });
            if *terminal {
                out["continue"] = json!(false);
                out["stopReason"] = json!(message);
            }
            out
        }
        (HookEvent::ToolResult { .. }, Reaction::Recorded { note, abort }) => {
            let context = [note.as_deref(), abort.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("\n");
            let mut out = json!({});
            if !context.is_empty() {
                out["hookSpecificOutput"] = json!({
                    "hookEventName": "AfterTool",
                    "additionalContext": context,
                });
            }
            if let Some(abort) = abort {
                out["continue"] = json!(false);
                out["stopReason"] = json!(abort);
            }
            out
        }
        _ => json!({}),
    };
    out.to_string()
}

/// The `settings.json` snippet that runs `command` for every event loopguard handles
/// (Gemini's timeouts are in milliseconds).
pub fn settings(command: &str) -> String {
    crate::snippet(EVENTS, command, HANDLER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::ToolUse;
    use crate::mapping::{Json, Outcome};

    #[test]
    fn documented_payloads_parse() {
        let before = json!({
            "session_id": "s1", "transcript_path": "/t.json", "cwd": "/w",
            "hook_event_name": "BeforeTool", "timestamp": "2026-01-28T10:00:00Z",
            "tool_name": "read_file", "tool_input": {"absolute_path": "/w/a.txt"}
        });
        let (origin, event) = parse(&before).unwrap();
        assert_eq!(origin.session, "s1");
        assert_eq!(
            event,
            HookEvent::ToolCall(ToolUse {
                tool: "read_file".into(),
                args: json!({"absolute_path": "/w/a.txt"}).into(),
                call_id: None
            })
        );
        let after = json!({
            "session_id": "s1", "hook_event_name": "AfterTool", "timestamp": "2026-01-28T10:00:01Z",
            "tool_name": "read_file", "tool_input": {"absolute_path": "/w/a.txt"},
            "tool_response": {"llmContent": "hello", "returnDisplay": "Read 1 line"}
        });
        assert!(
            matches!(parse(&after).unwrap().1, HookEvent::ToolResult { outcome: Outcome::Result(Json::Value(ref v)), .. }
            if v == &json!({"content": [{"type": "text", "text": "hello"}], "details": {}}))
        );
        let failed = json!({
            "session_id": "s1", "hook_event_name": "AfterTool", "tool_name": "read_file", "tool_input": {},
            "tool_response": {"llmContent": "", "returnDisplay": "", "error": {"message": "File not found", "type": "file_not_found"}}
        });
        assert!(
            matches!(parse(&failed).unwrap().1, HookEvent::ToolResult { outcome: Outcome::Error(Json::Value(ref e)), .. }
            if e["message"] == "File not found")
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "PreCompress", "trigger": "auto"}))
                .unwrap()
                .1,
            HookEvent::Compaction
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "BeforeAgent", "prompt": "go"}))
                .unwrap()
                .1,
            HookEvent::PromptSubmitted
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "SessionEnd", "reason": "exit"}))
                .unwrap()
                .1,
            HookEvent::SessionEnded
        );
        assert!(matches!(
            parse(&json!({"hook_event_name": "BeforeModel"})),
            Err(PayloadError::Unsupported(_))
        ));
    }

    #[test]
    fn outputs_are_always_json_objects() {
        let call = HookEvent::ToolCall(ToolUse {
            tool: "read_file".into(),
            args: json!({}).into(),
            call_id: None,
        });
        assert_eq!(render(&call, &Reaction::Proceed), "{}");
        assert_eq!(render(&HookEvent::Compaction, &Reaction::Proceed), "{}");
        let block = Reaction::Block {
            message: "CRITICAL: x".into(),
            detector: "generic_repeat".into(),
            count: 20,
            terminal: false,
        };
        let out: Value = serde_json::from_str(&render(&call, &block)).unwrap();
        assert_eq!(out["decision"], "deny");
        assert_eq!(out["reason"], "CRITICAL: x");
        assert!(out.get("continue").is_none());
        let result = HookEvent::ToolResult {
            call: ToolUse {
                tool: "read_file".into(),
                args: json!({}).into(),
                call_id: None,
            },
            outcome: Outcome::Nothing,
        };
        let out: Value = serde_json::from_str(&render(
            &result,
            &Reaction::Recorded {
                note: Some("[loopguard] W".into()),
                abort: None,
            },
        ))
        .unwrap();
        assert_eq!(
            out,
            json!({"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "[loopguard] W"}})
        );
    }

    #[test]
    fn the_snippet_registers_every_event() {
        let v: Value = serde_json::from_str(&settings("loopguard hook gemini")).unwrap();
        assert_eq!(v["hooks"].as_object().unwrap().len(), EVENTS.len());
        assert_eq!(v["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"], 10000);
        assert_eq!(v["hooks"]["BeforeTool"][0]["hooks"][0]["name"], "loopguard");
    }
}

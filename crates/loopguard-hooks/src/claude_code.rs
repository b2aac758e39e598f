//! Claude Code's hook protocol.
//!
//! Claude Code runs a command hook with the event as JSON on stdin (`session_id`,
//! `hook_event_name`, the event's fields) and reads the decision from the exit code and
//! stdout. Exit 0 with a JSON object on stdout is the structured form (JSON is read only on
//! exit 0); exit 2 is a blocking error whose stderr is fed to the model; any other code is a
//! non-blocking error. loopguard always answers with exit 0 and JSON, and never uses exit 2
//! (on `PreCompact` it would block the compaction). Its own failures (unreadable input, a
//! database it cannot open) exit 1: a non-blocking error, so the agent carries on as if
//! there were no hook (fail open).
//!
//! | event | engine | stdout |
//! |---|---|---|
//! | `PreToolUse` | call verdict | allow: nothing; warn: `hookSpecificOutput.additionalContext` (shown to the model next to the tool result); block: `permissionDecision: "deny"` with the message as `permissionDecisionReason` (shown to the model), a `systemMessage` for the user, and for a terminal block `continue: false` with `stopReason` (the run ends) |
//! | `PostToolUse` | `tool_response` recorded as the result | nothing; when the post-compaction guard aborts the run: `continue: false`, `stopReason` and the message as `additionalContext` |
//! | `PostToolUseFailure` | `error` recorded as an error (nothing when `is_interrupt`) | as `PostToolUse` |
//! | `PreCompact` | compaction: arms the post-compaction guard | nothing |
//! | `UserPromptSubmit` | a new run | nothing (stdout would become context) |
//! | `SessionStart` | `startup`, `clear`: a new run; `resume`, `compact`: nothing | nothing (stdout would become context) |
//! | `SubagentStop` | the subagent's run ends: its agent tree counts it finished | nothing |
//! | `SessionEnd` | the session is forgotten | nothing |
//!
//! Other events are ignored (exit 0, a line on stderr).

use loopguard_events::OwnedOutcome;
use loopguard_transcripts::Format;
use serde_json::{json, Value};

use crate::mapping::{block_summary, HookEvent, NoteDelivery, Origin, Reaction};
use crate::outcome::normalize;
use crate::payload::{Payload, PayloadError};
use crate::HandlerField;

/// Where the settings go.
pub const SETTINGS_FILE: &str =
    "~/.claude/settings.json (all projects) or .claude/settings.json (one project)";

/// Warnings are shown before the call (`additionalContext` of `PreToolUse`).
pub const DELIVERY: NoteDelivery = NoteDelivery::BeforeCall;

/// The fields of loopguard's hook entry besides `type` and `command` (timeouts in seconds).
pub(crate) const HANDLER: &[(&str, HandlerField)] = &[("timeout", HandlerField::Number(10))];

/// The events the settings snippet registers, in lifecycle order.
pub const EVENTS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PreCompact",
    "Stop",
    "SubagentStop",
    "SessionEnd",
];

/// Reads a payload.
pub fn parse(value: &Value) -> Result<(Origin, HookEvent), PayloadError> {
    let p = Payload::new(value)?;
    let name = p.event_name()?;
    let mut origin = p.origin()?;
    origin.transcript = p.transcript(Format::ClaudeCode)?;
    let event = match name {
        "PreToolUse" => HookEvent::ToolCall(p.tool_use()?),
        "PostToolUse" => HookEvent::ToolResult {
            call: p.tool_use()?,
            outcome: OwnedOutcome::Result(normalize(
                p.get("tool_response").unwrap_or(&Value::Null),
            ))
            .into(),
        },
        "PostToolUseFailure" => {
            let call = p.tool_use()?;
            let outcome = if p.flag("is_interrupt") {
                // The user interrupted the call: nothing about the tool to record.
                OwnedOutcome::Nothing
            } else {
                OwnedOutcome::Error(
                    p.get("error")
                        .or_else(|| p.get("tool_response"))
                        .cloned()
                        .unwrap_or(Value::Null),
                )
            };
            HookEvent::ToolResult {
                call,
                outcome: outcome.into(),
            }
        }
        "PreCompact" => HookEvent::Compaction,
        "UserPromptSubmit" => HookEvent::PromptSubmitted,
        "SessionStart" => HookEvent::SessionStarted {
            fresh: matches!(p.str("source")?, None | Some("startup" | "clear")),
        },
        "SessionEnd" => HookEvent::SessionEnded,
        "Stop" => HookEvent::Stopped,
        "SubagentStop" => HookEvent::SubagentStopped,
        other => return Err(PayloadError::Unsupported(other.to_owned())),
    };
    Ok((origin, event))
}

/// What to print on stdout (exit status 0) for `reaction` to `event` of hook `name`.
pub fn render(name: &str, event: &HookEvent, reaction: &Reaction) -> String {
    let out = match (event, reaction) {
        (HookEvent::ToolCall(_), Reaction::Warn { note }) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "additionalContext": note,
            }
        }),
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
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": message,
                },
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
            if context.is_empty() {
                return String::new();
            }
            let mut out = json!({
                "hookSpecificOutput": {
                    "hookEventName": name,
                    "additionalContext": context,
                }
            });
            if let Some(abort) = abort {
                out["continue"] = json!(false);
                out["stopReason"] = json!(abort);
            }
            out
        }
        _ => return String::new(),
    };
    out.to_string()
}

/// The settings snippet that runs `command` for every event loopguard handles.
pub fn settings(command: &str) -> String {
    crate::snippet(EVENTS, command, HANDLER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::ToolUse;
    use crate::mapping::{Json, Outcome};

    fn parsed(v: Value) -> HookEvent {
        parse(&v).unwrap().1
    }

    #[test]
    fn documented_payloads_parse() {
        // The shapes of the hooks reference.
        let pre = json!({
            "session_id": "abc123",
            "transcript_path": "/home/user/.claude/projects/x/transcript.jsonl",
            "cwd": "/home/user/my-project",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "npm test", "description": "Run test suite"},
            "tool_use_id": "toolu_01ABC123"
        });
        let (origin, event) = parse(&pre).unwrap();
        assert_eq!(origin.session, "abc123");
        assert_eq!(
            event,
            HookEvent::ToolCall(ToolUse {
                tool: "Bash".into(),
                args: json!({"command": "npm test", "description": "Run test suite"}).into(),
                call_id: Some("toolu_01ABC123".into())
            })
        );
        let post = parsed(json!({
            "session_id": "abc123", "hook_event_name": "PostToolUse", "tool_name": "Write",
            "tool_input": {"file_path": "/p/index.js", "content": "x"},
            "tool_response": {"filePath": "/p/index.js", "success": true}, "tool_use_id": "t"
        }));
        assert!(
            matches!(post, HookEvent::ToolResult { outcome: Outcome::Result(Json::Value(ref v)), .. }
            if v == &json!({"details": {"filePath": "/p/index.js", "success": true}}))
        );
        let fail = parsed(json!({
            "session_id": "abc123", "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
            "tool_input": {"command": "npm test"}, "tool_use_id": "t",
            "error": "Command exited with non-zero status code 1", "is_interrupt": false
        }));
        assert!(
            matches!(fail, HookEvent::ToolResult { outcome: Outcome::Error(Json::Value(ref e)), .. }
            if e == &json!("Command exited with non-zero status code 1"))
        );
        let interrupted = parsed(json!({
            "hook_event_name": "PostToolUseFailure", "tool_name": "Bash", "error": "x", "is_interrupt": true
        }));
        assert!(matches!(
            interrupted,
            HookEvent::ToolResult {
                outcome: Outcome::Nothing,
                ..
            }
        ));
        assert_eq!(
            parsed(
                json!({"hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""})
            ),
            HookEvent::Compaction
        );
        assert_eq!(
            parsed(json!({"hook_event_name": "UserPromptSubmit", "prompt": "hi"})),
            HookEvent::PromptSubmitted
        );
        for (source, fresh) in [
            ("startup", true),
            ("clear", true),
            ("resume", false),
            ("compact", false),
        ] {
            assert_eq!(
                parsed(json!({"hook_event_name": "SessionStart", "source": source})),
                HookEvent::SessionStarted { fresh }
            );
        }
        assert_eq!(
            parsed(json!({"hook_event_name": "SessionEnd", "reason": "other"})),
            HookEvent::SessionEnded
        );
        assert_eq!(
            parsed(json!({"hook_event_name": "Stop"})),
            HookEvent::Stopped
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "Notification"})).unwrap_err(),
            PayloadError::Unsupported("Notification".into())
        );
        assert_eq!(
            parse(&pre).unwrap().0.transcript.unwrap().path,
            "/home/user/.claude/projects/x/transcript.jsonl"
        );
    }

    #[test]
    fn outputs_follow_the_protocol() {
        let call = HookEvent::ToolCall(ToolUse {
            tool: "Read".into(),
            args: json!({}).into(),
            call_id: None,
        });
        assert_eq!(render("PreToolUse", &call, &Reaction::Proceed), "");
        let warn: Value = serde_json::from_str(&render(
            "PreToolUse",
            &call,
            &Reaction::Warn {
                note: "[loopguard] W".into(),
            },
        ))
        .unwrap();
        assert_eq!(
            warn,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "[loopguard] W"}})
        );
        let block = Reaction::Block {
            message: "CRITICAL: x".into(),
            detector: "generic_repeat".into(),
            count: 20,
            terminal: false,
        };
        let out: Value = serde_json::from_str(&render("PreToolUse", &call, &block)).unwrap();
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(
            out["hookSpecificOutput"]["permissionDecisionReason"],
            "CRITICAL: x"
        );
        assert!(out.get("continue").is_none());
        let stop = Reaction::Block {
            message: "CRITICAL: y".into(),
            detector: "global_circuit_breaker".into(),
            count: 30,
            terminal: true,
        };
        let out: Value = serde_json::from_str(&render("PreToolUse", &call, &stop)).unwrap();
        assert_eq!(out["continue"], false);
        assert_eq!(out["stopReason"], "CRITICAL: y");
        let result = HookEvent::ToolResult {
            call: ToolUse {
                tool: "Read".into(),
                args: json!({}).into(),
                call_id: None,
            },
            outcome: Outcome::Nothing,
        };
        assert_eq!(
            render(
                "PostToolUse",
                &result,
                &Reaction::Recorded {
                    note: None,
                    abort: None
                }
            ),
            ""
        );
        let out: Value = serde_json::from_str(&render(
            "PostToolUseFailure",
            &result,
            &Reaction::Recorded {
                note: None,
                abort: Some("aborted".into()),
            },
        ))
        .unwrap();
        assert_eq!(
            out,
            json!({"continue": false, "stopReason": "aborted", "hookSpecificOutput": {"hookEventName": "PostToolUseFailure", "additionalContext": "aborted"}})
        );
        assert_eq!(
            render("PreCompact", &HookEvent::Compaction, &Reaction::Proceed),
            ""
        );
    }

    #[test]
    fn the_snippet_registers_every_event() {
        let v: Value =
            serde_json::from_str(&settings("/opt/lg/loopguard hook claude-code")).unwrap();
        for event in EVENTS {
            let hook = &v["hooks"][event][0]["hooks"][0];
            assert_eq!(hook["type"], "command");
            assert_eq!(hook["command"], "/opt/lg/loopguard hook claude-code");
            assert_eq!(hook["timeout"], 10);
        }
        assert_eq!(v["hooks"].as_object().unwrap().len(), EVENTS.len());
    }
}

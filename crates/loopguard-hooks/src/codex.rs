//! Codex CLI's hook protocol.
//!
//! Codex runs command hooks from `hooks.json` (or `[hooks]` in `config.toml`) with the
//! event as JSON on stdin, in the shape Claude Code uses (`session_id`, `hook_event_name`,
//! `tool_name`, `tool_input`, `tool_use_id`, plus `turn_id` and `model`). It parses stdout
//! strictly: unknown fields make the output invalid, and an invalid output fails open (the
//! hook counts as failed and the call runs). So loopguard writes only documented fields,
//! and on `PreToolUse` never `continue`, `stopReason` or `suppressOutput`, which Codex
//! rejects there. Exit 0 with JSON is the structured form; exit 2 blocks with stderr as the
//! reason; other codes are failures, which Codex reports and carries on (loopguard's own
//! errors exit 1: fail open).
//!
//! | event | engine | stdout |
//! |---|---|---|
//! | `PreToolUse` | call verdict | allow: nothing; warn: `hookSpecificOutput.additionalContext`; block: `permissionDecision: "deny"` with the message as `permissionDecisionReason` (the model reads it) and a `systemMessage` |
//! | `PostToolUse` | `tool_response` recorded as the result | nothing; when the post-compaction guard aborts the run: `continue: false` with the message as `stopReason` (Codex stops and feeds it to the model) |
//! | `PreCompact` | compaction: arms the post-compaction guard | nothing |
//! | `UserPromptSubmit` | a new run | nothing |
//! | `SessionStart` | `startup`, `clear`: a new run; `resume`: nothing | nothing |
//! | `SessionEnd` | the session is forgotten (only newer releases send it) | nothing |
//! | `Stop` | the rollout's tail is read with the last answer whole | nothing (the turn may end) |
//! | `SubagentStop` | the subagent's run (in its session `SESSION/agent-ID`) ends: its agent tree counts it finished | nothing (the subagent's turn may end) |
//!
//! Before the events that judge or start something, the hook reads what the session's
//! rollout (`transcript_path`) gained ([`crate::transcript`]): each response's
//! `token_count` as a usage event, its answer as a message event.
//! Codex has no `PostToolUseFailure`: a failed command reaches `PostToolUse`, its
//! `tool_response` carrying the failure, and is recorded as that result. A terminal block
//! cannot end the turn from `PreToolUse`; the run's later calls are all denied instead.

use loopguard_events::OwnedOutcome;
use loopguard_transcripts::Format;
use serde_json::{json, Value};

use crate::mapping::{block_summary, HookEvent, NoteDelivery, Origin, Reaction};
use crate::outcome::normalize;
use crate::payload::{Payload, PayloadError};
use crate::HandlerField;

/// Where the settings go.
pub const SETTINGS_FILE: &str =
    "~/.codex/hooks.json (all projects) or .codex/hooks.json (one project)";

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
    "PreCompact",
    "Stop",
    "SubagentStop",
];

/// Reads a payload.
pub fn parse(value: &Value) -> Result<(Origin, HookEvent), PayloadError> {
    let p = Payload::new(value)?;
    let name = p.event_name()?;
    let mut origin = p.origin()?;
    origin.transcript = p.transcript(Format::CodexRollout)?;
    let event = match name {
        "PreToolUse" => HookEvent::ToolCall(p.tool_use()?),
        "PostToolUse" => HookEvent::ToolResult {
            call: p.tool_use()?,
            outcome: OwnedOutcome::Result(normalize(
                p.get("tool_response").unwrap_or(&Value::Null),
            ))
            .into(),
        },
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

/// What to print on stdout (exit status 0) for `reaction` to `event`.
pub fn render(event: &HookEvent, reaction: &Reaction) -> String {
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
        ) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": message,
            },
            "systemMessage": block_summary(&call.tool, detector, *count, *terminal),
        }),
        (HookEvent::ToolResult { .. }, Reaction::Recorded { note, abort }) => match (note, abort) {
            (_, Some(abort)) => json!({ "continue": false, "stopReason": abort }),
            (Some(note), None) => json!({
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUse",
                    "additionalContext": note,
                }
            }),
            (None, None) => return String::new(),
        },
        _ => return String::new(),
    };
    out.to_string()
}

/// The `hooks.json` snippet that runs `command` for every event loopguard handles.
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
        // Shapes of Codex's generated input schemas.
        let pre = json!({
            "session_id": "019a1c0e-7d7b-7c31-b0a5-5f0c2a3e9d11", "turn_id": "t1",
            "transcript_path": null, "cwd": "/repo", "hook_event_name": "PreToolUse",
            "model": "gpt-5-codex", "permission_mode": "default", "tool_name": "Bash",
            "tool_input": {"command": "cargo test"}, "tool_use_id": "call_abc"
        });
        let (origin, event) = parse(&pre).unwrap();
        assert_eq!(origin.session, "019a1c0e-7d7b-7c31-b0a5-5f0c2a3e9d11");
        assert_eq!(
            event,
            HookEvent::ToolCall(ToolUse {
                tool: "Bash".into(),
                args: json!({"command": "cargo test"}).into(),
                call_id: Some("call_abc".into())
            })
        );
        let post = json!({
            "session_id": "s", "turn_id": "t1", "transcript_path": null, "cwd": "/repo",
            "hook_event_name": "PostToolUse", "model": "m", "permission_mode": "default",
            "tool_name": "Bash", "tool_input": {"command": "cargo test"},
            "tool_response": "error: could not compile", "tool_use_id": "call_abc"
        });
        assert!(
            matches!(parse(&post).unwrap().1, HookEvent::ToolResult { outcome: Outcome::Result(Json::Value(ref v)), .. }
            if v == &json!({"content": [{"type": "text", "text": "error: could not compile"}]}))
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "PreCompact", "trigger": "auto", "turn_id": "t"}))
                .unwrap()
                .1,
            HookEvent::Compaction
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "UserPromptSubmit", "prompt": "fix it"}))
                .unwrap()
                .1,
            HookEvent::PromptSubmitted
        );
        assert_eq!(
            parse(&json!({"hook_event_name": "SessionStart", "source": "resume"}))
                .unwrap()
                .1,
            HookEvent::SessionStarted { fresh: false }
        );
        assert!(matches!(
            parse(&json!({"hook_event_name": "PermissionRequest"})),
            Err(PayloadError::Unsupported(_))
        ));
    }

    #[test]
    fn outputs_use_only_fields_codex_accepts() {
        let call = HookEvent::ToolCall(ToolUse {
            tool: "Bash".into(),
            args: json!({}).into(),
            call_id: None,
        });
        let stop = Reaction::Block {
            message: "CRITICAL: y".into(),
            detector: "global_circuit_breaker".into(),
            count: 30,
            terminal: true,
        };
        let out: Value = serde_json::from_str(&render(&call, &stop)).unwrap();
        // Codex refuses continue/stopReason/suppressOutput on PreToolUse.
        assert_eq!(
            out.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["hookSpecificOutput", "systemMessage"]
        );
        assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
        assert_eq!(
            out["hookSpecificOutput"]["permissionDecisionReason"],
            "CRITICAL: y"
        );
        let result = HookEvent::ToolResult {
            call: ToolUse {
                tool: "Bash".into(),
                args: json!({}).into(),
                call_id: None,
            },
            outcome: Outcome::Nothing,
        };
        let out: Value = serde_json::from_str(&render(
            &result,
            &Reaction::Recorded {
                note: None,
                abort: Some("gone".into()),
            },
        ))
        .unwrap();
        assert_eq!(out, json!({"continue": false, "stopReason": "gone"}));
        assert_eq!(
            render(
                &result,
                &Reaction::Recorded {
                    note: None,
                    abort: None
                }
            ),
            ""
        );
        assert_eq!(render(&call, &Reaction::Proceed), "");
    }

    #[test]
    fn the_snippet_registers_every_event() {
        let v: Value = serde_json::from_str(&settings("loopguard hook codex")).unwrap();
        assert_eq!(v["hooks"].as_object().unwrap().len(), EVENTS.len());
        assert_eq!(
            v["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            "loopguard hook codex"
        );
    }
}

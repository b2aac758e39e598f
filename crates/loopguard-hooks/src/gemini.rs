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
//! | `PreCompress` | `trigger: "manual"` (`/compress`): compaction, arms the post-compaction guard; `"auto"`: nothing (below) | `{}` |
//! | `BeforeAgent` | a new run (the user submitted a prompt) | `{}` |
//! | `SessionStart` | `startup`, `clear`: a new run; `resume`: nothing | `{}` |
//! | `SessionEnd` | the session is forgotten | `{}` |
//! | `AfterModel` | a piece of the streamed answer (`llm_response`, one chunk): a `message` with `delta`, its thoughts as reasoning; the last chunk's usage | `{}`; warn: `systemMessage` (the model gets the note with the run's next tool result); block: `continue: false` with `stopReason` (the agent loop stops; the chunk is the last) |
//! | `AfterAgent` | the turn's last answer (`prompt_response`): the streamed answer ends without tool calls | as `AfterModel` |
//!
//! Gemini CLI sends `PreCompress` with `trigger: "auto"` before every request to the model,
//! whether or not the context is then compressed (its compression service fires the hook
//! before it compares the context with its threshold): arming the guard there would reset
//! its window at every request, so only `/compress` (`"manual"`) counts as a compaction.
//!
//! Gemini CLI gives the hooks only the text parts of a response (its tool calls are left
//! out) and no response id: an answer's pieces are one stream until a tool call of the run
//! (the answer had calls) or the turn's `AfterAgent` (it had none) ends it.
//!
//! `BeforeTool` cannot add context for the model, and its payload has no call id: a
//! warning is kept in the store under the call's tool and arguments and given to the model
//! by the `AfterTool` of that call.

use loopguard_events::OwnedOutcome;
use serde_json::{json, Map, Value};

use loopguard_events::OwnedUsage;

use crate::mapping::{block_summary, AnswerPiece, HookEvent, NoteDelivery, Origin, Reaction};
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
    "AfterModel",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
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
        "PreCompress" => match p.str("trigger")? {
            Some("manual") => HookEvent::Compaction,
            // Sent before every request, compressed or not (see the module's docs).
            _ => return Err(PayloadError::Unsupported("PreCompress (auto)".to_owned())),
        },
        "BeforeAgent" => HookEvent::PromptSubmitted,
        "SessionStart" => HookEvent::SessionStarted {
            fresh: matches!(p.str("source")?, None | Some("startup" | "clear")),
        },
        "SessionEnd" => HookEvent::SessionEnded,
        "AfterModel" => HookEvent::AnswerPiece(answer_piece(&p)),
        "AfterAgent" => HookEvent::AnswerEnded {
            text: p.str("prompt_response")?.unwrap_or_default().to_owned(),
        },
        other => return Err(PayloadError::Unsupported(other.to_owned())),
    };
    Ok((origin, event))
}

/// The chunk of an answer an `AfterModel` payload carries (`llm_response`, in Gemini CLI's
/// stable hook format): its `text` (the answer's text parts, thoughts left out); its
/// thoughts, when its parts hold text that `text` does not (a chunk of thoughts only, or
/// thoughts before the text); on the chunk that ends the response (`finishReason`), the
/// response's usage (`usageMetadata`: the prompt's tokens as input, the rest of the total,
/// thoughts included, as output) priced by `llm_request.model`. Fields of the wrong kind
/// are read as absent.
fn answer_piece(p: &Payload<'_>) -> AnswerPiece {
    let response = p.get("llm_response").unwrap_or(&Value::Null);
    let candidate = response
        .get("candidates")
        .and_then(|c| c.get(0))
        .unwrap_or(&Value::Null);
    let parts: String = candidate
        .pointer("/content/parts")
        .and_then(Value::as_array)
        .map(|parts| parts.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // Without `text` (a release before it, a response another hook replaced), the parts
    // are the text.
    let (text, thoughts) = match response.get("text").and_then(Value::as_str) {
        Some(text) => (text, parts.strip_suffix(text).filter(|t| !t.is_empty())),
        None => (parts.as_str(), None),
    };
    let last = candidate
        .get("finishReason")
        .is_some_and(|r| r.as_str().is_some_and(|r| !r.is_empty()));
    let usage = response
        .get("usageMetadata")
        .filter(|_| last)
        .map(|u| {
            let count = |k: &str| u.get(k).and_then(Value::as_u64);
            let input = count("promptTokenCount").unwrap_or(0);
            let output = match (count("totalTokenCount"), count("candidatesTokenCount")) {
                (Some(total), _) if total >= input => total - input,
                (_, candidates) => candidates.unwrap_or(0),
            };
            OwnedUsage {
                model: p
                    .get("llm_request")
                    .and_then(|r| r.get("model"))
                    .and_then(Value::as_str)
                    .and_then(loopguard::text::non_blank)
                    .map(str::to_owned),
                input_tokens: input,
                output_tokens: output,
                ..OwnedUsage::default()
            }
        })
        .filter(|u| u.input_tokens > 0 || u.output_tokens > 0);
    AnswerPiece {
        text: text.to_owned(),
        reasoning: thoughts.map(str::to_owned),
        usage,
    }
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
        (HookEvent::AnswerPiece(_) | HookEvent::AnswerEnded { .. }, Reaction::Warn { note }) => {
            json!({ "systemMessage": note })
        }
        (
            HookEvent::AnswerPiece(_) | HookEvent::AnswerEnded { .. },
            Reaction::Block {
                message,
                detector,
                count,
                ..
            },
        ) => json!({
            "continue": false,
            "stopReason": message,
            "systemMessage": block_summary("the model's answer", detector, *count, true),
        }),
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
            parse(&json!({"hook_event_name": "PreCompress", "trigger": "manual"}))
                .unwrap()
                .1,
            HookEvent::Compaction
        );
        assert!(matches!(
            parse(&json!({"hook_event_name": "PreCompress", "trigger": "auto"})),
            Err(PayloadError::Unsupported(_))
        ));
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

    /// An `AfterModel` payload for one chunk (the shape of Gemini CLI's hook translator).
    fn chunk(text: Option<&str>, parts: &[&str], finish: Option<&str>, usage: Value) -> Value {
        let mut response = json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
            "usageMetadata": usage,
        });
        if let Some(text) = text {
            response["text"] = json!(text);
        }
        if let Some(finish) = finish {
            response["candidates"][0]["finishReason"] = json!(finish);
        }
        json!({
            "session_id": "s1", "hook_event_name": "AfterModel", "timestamp": "2026-01-28T10:00:00Z",
            "llm_request": {"model": "gemini-2.5-pro", "messages": [{"role": "user", "content": "2 + 2?"}]},
            "llm_response": response,
        })
    }

    fn piece(payload: &Value) -> AnswerPiece {
        match parse(payload).unwrap().1 {
            HookEvent::AnswerPiece(piece) => piece,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn answer_chunks_parse_into_text_thoughts_and_the_last_ones_usage() {
        let usage = json!({"promptTokenCount": 12777, "totalTokenCount": 12802});
        // A chunk of thoughts: parts hold text that `text` (thoughts left out) does not.
        let thought = piece(&chunk(
            Some(""),
            &["**Addressing the Inquiry**\n\nNo tools are needed."],
            None,
            usage.clone(),
        ));
        assert_eq!(thought.text, "");
        assert_eq!(
            thought.reasoning.as_deref(),
            Some("**Addressing the Inquiry**\n\nNo tools are needed.")
        );
        assert_eq!(
            thought.usage, None,
            "usage is counted once, on the last chunk"
        );
        // The last chunk: its text, and the response's usage (thoughts are output).
        let last = piece(&chunk(Some("4"), &["4"], Some("STOP"), usage));
        assert_eq!((last.text.as_str(), last.reasoning), ("4", None));
        let u = last.usage.unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.model.as_deref()),
            (12777, 25, Some("gemini-2.5-pro"))
        );
        // Thoughts, then text, in one chunk.
        let both = piece(&chunk(Some("Hi"), &["hmm", "Hi"], None, Value::Null));
        assert_eq!(
            (both.text.as_str(), both.reasoning.as_deref()),
            ("Hi", Some("hmm"))
        );
        // Without `text` (another hook replaced the response): the parts are the text.
        let replaced = piece(&chunk(None, &["[FILTERED]"], Some("STOP"), Value::Null));
        assert_eq!(
            (replaced.text.as_str(), replaced.reasoning),
            ("[FILTERED]", None)
        );
        // Odd shapes are read as absent, never an error.
        for odd in [
            json!({"hook_event_name": "AfterModel"}),
            json!({"hook_event_name": "AfterModel", "llm_response": 3}),
            json!({"hook_event_name": "AfterModel", "llm_response": {"text": 1, "candidates": {"a": 1}, "usageMetadata": "x"}}),
            json!({"hook_event_name": "AfterModel", "llm_response": {"candidates": [{"content": {"parts": [1, null]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": -1}}}),
        ] {
            assert_eq!(piece(&odd), AnswerPiece::default(), "{odd}");
        }
        let end = json!({"hook_event_name": "AfterAgent", "prompt": "2 + 2?", "prompt_response": "4", "stop_hook_active": false});
        assert_eq!(
            parse(&end).unwrap().1,
            HookEvent::AnswerEnded { text: "4".into() }
        );
    }

    #[test]
    fn answers_warn_the_user_and_a_block_stops_the_agent_loop() {
        let event = HookEvent::AnswerPiece(AnswerPiece::default());
        assert_eq!(render(&event, &Reaction::Proceed), "{}");
        let warn: Value = serde_json::from_str(&render(
            &event,
            &Reaction::Warn {
                note: "[loopguard] W".into(),
            },
        ))
        .unwrap();
        assert_eq!(warn, json!({"systemMessage": "[loopguard] W"}));
        let block = Reaction::Block {
            message: "CRITICAL: chanting".into(),
            detector: "content_chanting".into(),
            count: 10,
            terminal: true,
        };
        for event in [event, HookEvent::AnswerEnded { text: "x".into() }] {
            let out: Value = serde_json::from_str(&render(&event, &block)).unwrap();
            assert_eq!(out["continue"], false);
            assert_eq!(out["stopReason"], "CRITICAL: chanting");
            assert!(out.get("decision").is_none(), "a deny would retry the turn");
        }
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

//! OpenHands V1 (software-agent-sdk) events (FORMATS §14.2).
//!
//! | event `kind` | item |
//! |---|---|
//! | `MessageEvent` from the user | a new run, and its prompt |
//! | `MessageEvent` from the agent | a [`Item::Turn`](crate::Item::Turn) (a response without calls) and the model's answer (`llm_message.content`, its `reasoning_content` as reasoning) |
//! | the first `ActionEvent` of a model response | also the model's answer: its `thought` (and `reasoning_content`), with calls |
//! | `ActionEvent` | a call, `think` and `finish` included: id `tool_call_id` (else the event `id`); tool `tool_name` (else `tool_call.name`, `tool_call.function.name`, `action.kind`); args parsed from `tool_call.arguments` (newer builds) or `tool_call.function.arguments` (older), else the `action` without its `kind`, always without `security_risk` (the agent's own rating, not part of the call). Actions of one `llm_response_id` are one batch and one [`Item::Turn`](crate::Item::Turn) |
//! | `ObservationEvent` | the result of the call its `action_id` (else `tool_call_id`) names, never by position (a parallel batch's observations come after all its actions): `{content: [text], details: {exitCode}}` with the text of `observation.content` (newer) or `observation.output` (older); failed by the rules for `error`, `is_error`, a non-zero exit code (`exit_code` can be null while `metadata.exit_code` is 1) or an `ERROR:` text |
//! | `AgentErrorEvent`, `UserRejectObservation` | an error result of the call they name |
//! | `Condensation` | a compaction in the current run |
//! | `SystemPromptEvent`, `ConversationStateUpdateEvent`, `CondensationRequest`, `CondensationSummaryEvent`, `PauseEvent` | nothing |
//!
//! V1 records no usage per response in these files.

use loopguard::Role;
use loopguard_events::OwnedOutcome;
use serde_json::{json, Value};

use super::Session;
use crate::detect::Format;
use crate::item::{self, Pos, Sink};
use crate::readers::chat::content_text;
use crate::stats::SkipReason;

/// Argument fields that rate the call rather than make it.
const NOT_ARGS: &[&str] = &["security_risk"];

/// One V1 event.
pub(super) fn event(session: &mut Session<'_>, pos: Pos, event: &Value, sink: &mut dyn Sink) {
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    match text("kind").unwrap_or("") {
        "ActionEvent" => {
            session.stats.record();
            action(session, pos, event, sink);
        }
        "ObservationEvent" => {
            session.stats.record();
            observation(session, pos, event, sink);
        }
        kind @ ("AgentErrorEvent" | "UserRejectObservation") => {
            session.stats.record();
            let keys = [text("action_id"), text("tool_call_id")];
            let Some(call_id) = session.answer(&keys) else {
                return;
            };
            let message = ["error", "rejection_reason", "reason"]
                .iter()
                .find_map(|k| text(k))
                .unwrap_or(kind);
            session.stats.failure(kind);
            let outcome = OwnedOutcome::Error(Value::String(message.to_owned()));
            sink.push(pos, item::result(&session.ids, &call_id, outcome));
        }
        "MessageEvent" => {
            session.stats.record();
            let role = event
                .pointer("/llm_message/role")
                .and_then(Value::as_str)
                .or(text("source"));
            let message = event.get("llm_message").unwrap_or(&Value::Null);
            let content = content_text(message.get("content").unwrap_or(&Value::Null));
            if role == Some("user") {
                session.start_run();
                sink.push(pos, item::said(&session.ids, Role::User, content));
            } else {
                session.turn(pos, None, sink);
                let reasoning = message
                    .get("reasoning_content")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                sink.push(pos, item::answer(&session.ids, content, reasoning, false));
            }
        }
        "Condensation" => {
            session.stats.record();
            sink.push(pos, item::compaction(&session.ids));
        }
        "SystemPromptEvent"
        | "ConversationStateUpdateEvent"
        | "CondensationRequest"
        | "CondensationSummaryEvent"
        | "PauseEvent" => session.stats.record(),
        other => {
            let other = other.to_owned();
            session
                .stats
                .skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("event kind {other}")
                });
        }
    }
}

fn action(session: &mut Session<'_>, pos: Pos, event: &Value, sink: &mut dyn Sink) {
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    let tool_call = event.get("tool_call").filter(|c| c.is_object());
    let function = tool_call.and_then(|c| c.get("function"));
    let call_id = text("tool_call_id")
        .or_else(|| tool_call.and_then(|c| c.get("id")).and_then(Value::as_str))
        .and_then(loopguard::text::non_blank)
        .or(text("id"))
        .map(str::to_owned);
    let Some(call_id) = call_id else {
        session
            .stats
            .skip(SkipReason::MalformedEntry, pos.line, || {
                "ActionEvent without tool_call_id or id".into()
            });
        return;
    };
    let action = event.get("action").unwrap_or(&Value::Null);
    let tool = text("tool_name")
        .or_else(|| {
            tool_call
                .and_then(|c| c.get("name"))
                .and_then(Value::as_str)
        })
        .or_else(|| function.and_then(|f| f.get("name")).and_then(Value::as_str))
        .or_else(|| action.get("kind").and_then(Value::as_str))
        .unwrap_or("");
    let arguments = tool_call
        .and_then(|c| c.get("arguments"))
        .or_else(|| function.and_then(|f| f.get("arguments")));
    let mut args = match arguments {
        Some(Value::String(text)) => item::args_from_text(text),
        Some(Value::Null) | None => match action {
            Value::Object(map) => {
                let mut map = map.clone();
                map.remove("kind");
                Value::Object(map)
            }
            _ => json!({}),
        },
        Some(other) => other.clone(),
    };
    if let Value::Object(map) = &mut args {
        map.retain(|k, _| !NOT_ARGS.contains(&k.as_str()));
    }
    let response = text("llm_response_id").map(str::to_owned);
    if session.turn(pos, response.clone(), sink) {
        let thought = content_text(event.get("thought").unwrap_or(&Value::Null));
        let reasoning = text("reasoning_content").map(str::to_owned);
        sink.push(pos, item::answer(&session.ids, thought, reasoning, true));
    }
    match item::call_in_batch(&session.ids, Some(&call_id), tool, args, response) {
        Some(call) => {
            let keys: Vec<&str> = [text("id"), Some(call_id.as_str())]
                .into_iter()
                .flatten()
                .collect();
            session.expect(&keys, &call_id);
            sink.push(pos, call);
        }
        None => session
            .stats
            .skip(SkipReason::MalformedEntry, pos.line, || {
                "ActionEvent without a tool name".into()
            }),
    }
}

fn observation(session: &mut Session<'_>, pos: Pos, event: &Value, sink: &mut dyn Sink) {
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    let Some(call_id) = session.answer(&[text("action_id"), text("tool_call_id")]) else {
        return;
    };
    let observation = event.get("observation").unwrap_or(&Value::Null);
    let output = match (observation.get("content"), observation.get("output")) {
        (Some(content @ (Value::Array(_) | Value::String(_))), _) => content_text(content),
        (_, Some(Value::String(output))) => output.clone(),
        _ => match observation {
            Value::Object(map) => {
                let mut rest = map.clone();
                rest.remove("kind");
                Value::Object(rest).to_string()
            }
            other => other.to_string(),
        },
    };
    let exit = observation
        .pointer("/metadata/exit_code")
        .filter(|c| !c.is_null())
        .or_else(|| observation.get("exit_code").filter(|c| !c.is_null()))
        .cloned();
    let details = exit.map(|code| json!({ "exitCode": code }));
    let mut outcome = OwnedOutcome::Result(item::text_result(&output, details));
    session.rules.judge(
        Format::OpenHands,
        event,
        &output,
        &mut outcome,
        &mut session.stats,
    );
    sink.push(pos, item::result(&session.ids, &call_id, outcome));
}

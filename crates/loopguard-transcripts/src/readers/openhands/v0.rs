//! OpenHands V0 events (FORMATS §8, §14.3).
//!
//! | event | item |
//! |---|---|
//! | `source: user`, `action: message` | a new run, and its prompt (`args.content`) |
//! | an agent action that runs something (`run`, `run_ipython`, `read`, `edit`, `write`, `browse`, `browse_interactive`, `call_tool_mcp`, `delegate`, or any action with `tool_call_metadata`) | a call with id = the event `id`; the tool is `tool_call_metadata.function_name` (else the action); args are `args` without the fields that describe the agent rather than the call (`thought`, `confirmation_state`, `security_risk`, `is_confirmed`, `hidden`, `impl_source`, `translated_ipython_code`). A new model response (`model_response.id`) is a [`Item::Turn`](crate::Item::Turn) |
//! | `condensation` action | a compaction in the current run |
//! | an observation whose `cause` is a call (in a `[action, observation]` pair: the pair's action) | its result: `{content: [content], details: {exitCode}}`, an error for `observation: error`, failed by the rules for a non-zero exit code (`extras.exit_code`, `extras.metadata.exit_code`) or an `ERROR:` text |
//! | an agent `message`, `finish` or `think` | a [`Item::Turn`](crate::Item::Turn) (a response without a call) and the model's answer (`args.content`, else `final_thought`; `thought` as its reasoning) |
//! | the first call of a model response | also the model's answer: its `thought`, with calls |
//! | everything else (state changes, observations of other actions) | nothing |
//!
//! V0 records no usage per response.

use loopguard::Role;
use loopguard_events::OwnedOutcome;
use serde_json::{json, Value};

use super::Session;
use crate::detect::Format;
use crate::item::{self, Pos, Sink};
use crate::stats::SkipReason;

/// Actions that run something.
const CALL_ACTIONS: &[&str] = &[
    "run",
    "run_ipython",
    "read",
    "edit",
    "write",
    "browse",
    "browse_interactive",
    "call_tool_mcp",
    "delegate",
];

/// Action fields that describe the agent's state, not the call.
const NOT_ARGS: &[&str] = &[
    "thought",
    "confirmation_state",
    "security_risk",
    "is_confirmed",
    "hidden",
    "impl_source",
    "translated_ipython_code",
];

/// One V0 event; `pair_action` is the id of the call made by the action of the
/// `[action, observation]` pair this observation closes.
pub(super) fn event(
    session: &mut Session<'_>,
    pos: Pos,
    event: &Value,
    pair_action: Option<&str>,
    sink: &mut dyn Sink,
) -> Option<String> {
    let text = |k: &str| event.get(k).and_then(Value::as_str);
    if let Some(action) = text("action") {
        session.stats.record();
        action_event(session, pos, action, event, sink)
    } else if let Some(observation) = text("observation") {
        session.stats.record();
        observation_event(session, pos, observation, event, pair_action, sink);
        None
    } else {
        session
            .stats
            .skip(SkipReason::UnknownEntryType, pos.line, || {
                "event without action or observation".into()
            });
        None
    }
}

/// An `[action, observation]` pair: the observation answers the action.
pub(super) fn pair(
    session: &mut Session<'_>,
    pos: Pos,
    action: &Value,
    observation: &Value,
    sink: &mut dyn Sink,
) {
    let call = event(session, pos, action, None, sink);
    event(session, pos, observation, call.as_deref(), sink);
}

/// An action; returns the id of the call it made, if it made one.
fn action_event(
    session: &mut Session<'_>,
    pos: Pos,
    action: &str,
    event: &Value,
    sink: &mut dyn Sink,
) -> Option<String> {
    let source = event.get("source").and_then(Value::as_str);
    let arg = |k: &str| event.pointer(&format!("/args/{k}")).and_then(Value::as_str);
    if source == Some("user") && action == "message" {
        session.start_run();
        let prompt = arg("content").unwrap_or("").to_owned();
        sink.push(pos, item::said(&session.ids, Role::User, prompt));
        return None;
    }
    if action == "condensation" {
        sink.push(pos, item::compaction(&session.ids));
        return None;
    }
    let metadata = event.get("tool_call_metadata").filter(|m| m.is_object());
    if source != Some("agent") {
        return None;
    }
    if metadata.is_none() && !CALL_ACTIONS.contains(&action) {
        // An answer, a thought, `finish`: a model response without a call.
        if matches!(action, "message" | "finish" | "think") {
            session.turn(pos, None, sink);
            let text = arg("content").or(arg("final_thought")).unwrap_or("");
            let thought = arg("thought").map(str::to_owned);
            sink.push(
                pos,
                item::answer(&session.ids, text.to_owned(), thought, false),
            );
        }
        return None;
    }
    let Some(id) = event.get("id").map(id_text) else {
        session
            .stats
            .skip(SkipReason::MalformedEntry, pos.line, || {
                "action without id".into()
            });
        return None;
    };
    let tool = metadata
        .and_then(|m| m.get("function_name"))
        .and_then(Value::as_str)
        .unwrap_or(action);
    let response = metadata
        .and_then(|m| m.pointer("/model_response/id"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if session.turn(pos, response, sink) {
        let thought = arg("thought").unwrap_or("").to_owned();
        sink.push(pos, item::answer(&session.ids, thought, None, true));
    }
    let mut args = event.get("args").cloned().unwrap_or(json!({}));
    if let Value::Object(map) = &mut args {
        map.retain(|k, _| !NOT_ARGS.contains(&k.as_str()));
    }
    match item::call(&session.ids, Some(&id), tool, args) {
        Some(call) => {
            session.expect(&[&id], &id);
            sink.push(pos, call);
            Some(id)
        }
        None => {
            session
                .stats
                .skip(SkipReason::MalformedEntry, pos.line, || {
                    "action without a name".into()
                });
            None
        }
    }
}

fn observation_event(
    session: &mut Session<'_>,
    pos: Pos,
    observation: &str,
    event: &Value,
    pair_action: Option<&str>,
    sink: &mut dyn Sink,
) {
    let cause = event.get("cause").map(id_text);
    let Some(call_id) = session.answer(&[cause.as_deref(), pair_action]) else {
        return; // it answers a message, a state change or another non-call action
    };
    let content = event.get("content").and_then(Value::as_str).unwrap_or("");
    let outcome = if observation == "error" {
        session.stats.failure("observation: error");
        OwnedOutcome::Error(Value::String(content.to_owned()))
    } else {
        let exit = event
            .pointer("/extras/metadata/exit_code")
            .or_else(|| event.pointer("/extras/exit_code"))
            .cloned();
        let details = exit.map(|code| json!({ "exitCode": code }));
        let mut outcome = OwnedOutcome::Result(item::text_result(content, details));
        session.rules.judge(
            Format::OpenHands,
            event,
            content,
            &mut outcome,
            &mut session.stats,
        );
        outcome
    };
    sink.push(pos, item::result(&session.ids, &call_id, outcome));
}

pub(super) fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

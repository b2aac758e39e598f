//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`, FORMATS §6.1): one
//! `{timestamp, type, payload}` object per line.
//!
//! | line | item |
//! |---|---|
//! | `session_meta` | the session id (`payload.id`, else the file name's) |
//! | `event_msg` `user_message` | a new run and its prompt (`message`); `turn_context` a new run too, unless the run has seen nothing yet |
//! | `response_item` `function_call` | a call: `call_id`, `name`, `arguments` parsed from its JSON text |
//! | `response_item` `custom_tool_call` | a call with args `{"input": input}` |
//! | `response_item` `local_shell_call` | a call of `local_shell` with the `action` as args |
//! | `response_item` `function_call_output` / `custom_tool_call_output` | the result of call `call_id`: the output text as a text result; an error when the old `{content, success: false}` form says so |
//! | the first `reasoning`, assistant `message` or call after a result or a prompt | a [`Item::Turn`] |
//! | assistant `message` (`output_text` parts), `reasoning` (`summary_text` parts) | the model's answer, once its response is over (a result, a `token_count`, a prompt): its text, its reasoning, whether the response made calls |
//! | `event_msg` `token_count` | a usage event for that response: `last_token_usage` by kind (cached input apart), the model of the last `turn_context`, the session's running total as its id |
//! | `compacted` | a compaction in the current run |
//!
//! Tool activity is also echoed in `event_msg` lines (`exec_command_begin`/`end`, …); those
//! are not counted again. A result is failed when its text says `Process exited with code
//! N` (N ≠ 0) or `exec_command failed` (a sandbox refusal), or when the output is a JSON
//! object whose `metadata.exit_code` is not 0 ([`FailureRules`]).

use std::borrow::Cow;
use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Event, OwnedOutcome, OwnedUsage};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, AnswerParts, Item, Pos, Sink};
use crate::readers::chat::content_text;
use crate::readers::lines::{self, Lines};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

#[derive(Deserialize)]
struct LineEntry<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

struct State {
    ids: loopguard_events::Ids,
    runs: u64,
    active: bool,
    in_response: bool,
    synthesized: u64,
    /// The answer of the response being read.
    answer: Option<AnswerParts>,
    /// The model of the current turn (`turn_context`).
    model: Option<String>,
}

impl State {
    /// The answer of the response being read, begun at `pos` when none is.
    fn answer(&mut self, pos: Pos) -> &mut AnswerParts {
        let ids = &self.ids;
        self.answer
            .get_or_insert_with(|| AnswerParts::new(pos, ids))
    }

    /// The response is over: its answer goes out.
    fn end_response(&mut self, sink: &mut dyn Sink) {
        if let Some(answer) = self.answer.take() {
            answer.emit(sink);
        }
    }

    fn start_run(&mut self) {
        self.runs += 1;
        self.ids.run = Some(format!("turn-{}", self.runs));
        self.active = false;
        self.in_response = false;
    }

    fn turn(&mut self, pos: Pos, sink: &mut dyn Sink) {
        if !self.in_response {
            self.in_response = true;
            sink.push(
                pos,
                Item::Turn {
                    ids: self.ids.clone(),
                    usage: None,
                },
            );
        }
    }
}

/// What a response used, from a `token_count` event: its `last_token_usage` by kind (Codex
/// counts cached input inside `input_tokens`, and reasoning inside `output_tokens`), the
/// turn's model, and as id the session's running total (`total_token_usage.total_tokens`),
/// which no two responses of a session share, so a response read again counts once.
fn token_usage(payload: &Value, model: Option<&str>) -> Option<OwnedUsage> {
    let last = payload.pointer("/info/last_token_usage")?;
    let n = |k: &str| last.get(k).and_then(Value::as_u64);
    let (input, cached, output) = (
        n("input_tokens"),
        n("cached_input_tokens").unwrap_or(0),
        n("output_tokens"),
    );
    let (input, output) = match (input, output, n("total_tokens")) {
        (None, None, None) => return None,
        // Only a total: counted as input.
        (None, None, Some(total)) => (total, 0),
        (input, output, _) => (input.unwrap_or(0), output.unwrap_or(0)),
    };
    let cached = cached.min(input);
    let id = payload
        .pointer("/info/total_token_usage/total_tokens")
        .and_then(Value::as_u64)
        .map(|total| format!("tokens-{total}"));
    Some(OwnedUsage {
        id,
        model: model.map(str::to_owned),
        input_tokens: input - cached,
        output_tokens: output,
        cache_read_tokens: cached,
        cache_write_tokens: 0,
        cost: None,
    })
}

/// Reads a Codex rollout.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut state = State {
        ids: item::ids(options.session_hint, Some("turn-0")),
        runs: 0,
        active: false,
        in_response: false,
        synthesized: 0,
        answer: None,
        model: None,
    };
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(entry) = lines::entry::<LineEntry<'_>>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        let payload: Value = entry
            .payload
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let ptype = payload.get("type").and_then(Value::as_str).unwrap_or("");
        let kind = entry.kind.as_deref().unwrap_or("");
        if matches!(
            kind,
            "session_meta" | "turn_context" | "compacted" | "event_msg" | "response_item"
        ) {
            stats.record();
        }
        match kind {
            "session_meta" => {
                if let Some(id) = payload.get("id").and_then(Value::as_str) {
                    let run = state.ids.run.clone();
                    state.ids = item::ids(id, run.as_deref());
                }
            }
            "turn_context" => {
                if let Some(model) = payload
                    .get("model")
                    .and_then(Value::as_str)
                    .and_then(loopguard::text::non_blank)
                {
                    state.model = Some(model.to_owned());
                }
                state.end_response(sink);
                if state.active {
                    state.start_run();
                }
            }
            "compacted" => {
                state.end_response(sink);
                sink.push(pos, item::compaction(&state.ids));
            }
            "event_msg" => match ptype {
                "user_message" => {
                    state.end_response(sink);
                    state.start_run();
                    let prompt = payload.get("message").and_then(Value::as_str);
                    let prompt = prompt.unwrap_or("").to_owned();
                    sink.push(pos, item::said(&state.ids, Role::User, prompt));
                }
                "token_count" => {
                    state.end_response(sink);
                    if let Some(usage) = token_usage(&payload, state.model.as_deref()) {
                        sink.push(
                            pos,
                            Item::Event(Event::Usage {
                                ids: state.ids.clone(),
                                usage,
                            }),
                        );
                    }
                    state.in_response = false;
                }
                _ => {}
            },
            "response_item" => response_item(
                &mut state,
                pos,
                ptype,
                &payload,
                options.failures,
                &mut stats,
                sink,
            ),
            other => {
                let other = other.to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || other);
            }
        }
    }
    state.end_response(sink);
    Ok(stats)
}

fn response_item(
    state: &mut State,
    pos: Pos,
    ptype: &str,
    payload: &Value,
    rules: &FailureRules,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) {
    let str_field = |k: &str| payload.get(k).and_then(Value::as_str);
    match ptype {
        "function_call" | "custom_tool_call" | "local_shell_call" => {
            state.turn(pos, sink);
            state.active = true;
            state.answer(pos).calls = true;
            let (name, args) = match ptype {
                "function_call" => (
                    str_field("name").unwrap_or(""),
                    item::args_from_text(str_field("arguments").unwrap_or("")),
                ),
                "custom_tool_call" => (
                    str_field("name").unwrap_or(""),
                    serde_json::json!({ "input": str_field("input").unwrap_or("") }),
                ),
                _ => (
                    "local_shell",
                    payload.get("action").cloned().unwrap_or(Value::Null),
                ),
            };
            let id = match str_field("call_id").or_else(|| str_field("id")) {
                Some(id) => id.to_owned(),
                None => {
                    state.synthesized += 1;
                    format!("call-{}", state.synthesized)
                }
            };
            match item::call(&state.ids, Some(&id), name, args) {
                Some(call) => sink.push(pos, call),
                None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    format!("{ptype} without a name")
                }),
            }
        }
        "function_call_output" | "custom_tool_call_output" => {
            state.end_response(sink);
            state.in_response = false;
            let Some(id) = str_field("call_id").and_then(loopguard::text::non_blank) else {
                stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    format!("{ptype} without call_id")
                });
                return;
            };
            let output = payload.get("output").unwrap_or(&Value::Null);
            let mut outcome = match output {
                Value::String(text) => OwnedOutcome::Result(item::text_result(text, None)),
                Value::Object(old)
                    if old.get("success").and_then(Value::as_bool) == Some(false) =>
                {
                    stats.failure("success: false");
                    OwnedOutcome::Error(Value::String(content_text(
                        old.get("content").unwrap_or(&Value::Null),
                    )))
                }
                Value::Object(old) if old.contains_key("content") => {
                    let text = content_text(old.get("content").unwrap_or(&Value::Null));
                    OwnedOutcome::Result(item::text_result(&text, None))
                }
                other => OwnedOutcome::Result(serde_json::json!({ "content": other })),
            };
            // The rules read the output: parsed when it is a JSON object written as text
            // (`{"output": …, "metadata": {"exit_code": …}}` of apply_patch and shell).
            let (record, text) = match output {
                Value::String(text) => {
                    let parsed = text
                        .trim_start()
                        .starts_with('{')
                        .then(|| serde_json::from_str::<Value>(text).ok())
                        .flatten()
                        .filter(Value::is_object);
                    (parsed.unwrap_or(Value::Null), text.as_str())
                }
                other => (other.clone(), ""),
            };
            rules.judge(Format::CodexRollout, &record, text, &mut outcome, stats);
            sink.push(pos, item::result(&state.ids, id, outcome));
        }
        "reasoning" => {
            state.turn(pos, sink);
            let summary = parts_text(payload.get("summary"));
            state.answer(pos).add_reasoning(&summary);
        }
        "message" => {
            if payload.get("role").and_then(Value::as_str) == Some("assistant") {
                state.turn(pos, sink);
                let text = parts_text(payload.get("content"));
                state.answer(pos).add_text(&text);
            } else {
                state.end_response(sink);
                state.in_response = false;
            }
        }
        _ => {}
    }
}

/// The text of Responses API parts (`output_text`, `summary_text`, `text`), a line each.
fn parts_text(parts: Option<&Value>) -> String {
    let texts: Vec<&str> = parts
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|p| {
            matches!(
                p.get("type").and_then(Value::as_str),
                Some("output_text" | "summary_text" | "text" | "input_text")
            )
        })
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    texts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};
    use loopguard_events::Event;

    const ROLLOUT: &str = concat!(
        r#"{"timestamp":"t","type":"session_meta","payload":{"id":"rollout-1","cwd":"/w","originator":"codex_cli_rs","cli_version":"0.40.0"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"event_msg","payload":{"type":"user_message","message":"fix the build"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"turn_context","payload":{"cwd":"/w","model":"gpt-5"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"reasoning","summary":[]}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"cargo\",\"build\"]}","call_id":"call_1"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":900,"output_tokens":100,"total_tokens":1000}}}}"#,
        "\n",
        r#"{"timestamp":"t","type":"event_msg","payload":{"type":"exec_command_end","call_id":"call_1","exit_code":101}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"error[E0432]"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"custom_tool_call","name":"apply_patch","input":"*** Begin Patch","call_id":"call_2"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"call_2","output":{"content":"failed","success":false}}}"#,
        "\n",
        r#"{"timestamp":"t","type":"compacted","payload":{"message":"summary"}}"#,
        "\n",
        r#"{"timestamp":"t","type":"response_item","payload":{"type":"local_shell_call","call_id":"call_3","action":{"type":"exec","command":["ls"]}}}"#,
        "\n",
        r#"{"timestamp":"t","type":"turn_context","payload":{}}"#,
        "\n",
        r#"{"timestamp":"t","type":"surprise","payload":{}}"#,
        "\n",
    );

    /// A response's answer: its messages' text and its reasoning summary, with calls when
    /// the response made one; the final answer after the result has none.
    #[test]
    fn answers_of_responses() {
        let lines = [
            r#"{"type":"event_msg","payload":{"type":"user_message","message":"is it fixed?"}}"#,
            r#"{"type":"response_item","payload":{"type":"reasoning","summary":[{"type":"summary_text","text":"check the log"}]}}"#,
            r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{}","call_id":"c1"}}"#,
            r#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"ok"}}"#,
            r#"{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Yes, it is."}]}}"#,
            r#"{"type":"event_msg","payload":{"type":"token_count","info":null}}"#,
        ];
        let r = read_bytes(Format::CodexRollout, lines.join("\n").as_bytes(), "h");
        assert_eq!(
            r.messages(),
            [
                (Role::User, "is it fixed?", None, None),
                (
                    Role::Assistant,
                    "Checking.",
                    Some("check the log"),
                    Some(true)
                ),
                (Role::Assistant, "Yes, it is.", None, Some(false)),
            ]
        );
    }

    #[test]
    fn maps_a_rollout() {
        let r = read_bytes(Format::CodexRollout, ROLLOUT.as_bytes(), "hint");
        assert_eq!((r.calls(), r.results(), r.compactions()), (3, 2, 1));
        assert_eq!(r.runs(), vec![("rollout-1".into(), Some("turn-1".into()))]);
        let kinds: Vec<&str> = r
            .items
            .iter()
            .map(|(_, i)| match i {
                Item::Turn { .. } => "turn",
                Item::Event(Event::Usage { usage, .. }) => {
                    // last_token_usage by kind; no turn_context before it names a model.
                    assert_eq!(
                        (
                            usage.input_tokens,
                            usage.output_tokens,
                            usage.cache_read_tokens
                        ),
                        (900, 100, 0)
                    );
                    "usage"
                }
                Item::Event(Event::Call { .. }) => "call",
                Item::Event(Event::Result { .. }) => "result",
                Item::Event(Event::Compaction { .. }) => "compaction",
                Item::Event(Event::Message { .. }) => "message",
                _ => "other",
            })
            .collect();
        // The prompt, then each response's answer once the response is over.
        assert_eq!(
            kinds,
            [
                "message",
                "turn",
                "call",
                "message",
                "usage",
                "result",
                "turn",
                "call",
                "message",
                "result",
                "compaction",
                "turn",
                "call",
                "message"
            ]
        );
        assert_eq!(r.said(Role::User), ["fix the build"]);
        assert!(r
            .messages()
            .iter()
            .filter(|m| m.0 == Role::Assistant)
            .all(|m| m.3 == Some(true)));
        match &r.items[2].1 {
            Item::Event(Event::Call { args, .. }) => {
                assert_eq!(args, &serde_json::json!({"command": ["cargo", "build"]}));
            }
            other => panic!("{other:?}"),
        }
        let errors = r
            .items
            .iter()
            .filter(|(_, i)| {
                matches!(
                    i,
                    Item::Event(Event::Result {
                        outcome: OwnedOutcome::Error(_),
                        ..
                    })
                )
            })
            .count();
        assert_eq!(errors, 1);
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
    }

    /// The older build: `mix deps.get` (36) and `mix precommit` (39) fail in the sandbox
    /// and pass when re-run with a justification (37, 40).
    #[test]
    fn corpus_sandbox_escalation() {
        let Some(r) = read_corpus(
            Format::CodexRollout,
            "codex-rollout/rollout-2026-02-16T16-46-56-019c6722-2553-7a22-a1f0-1e7eb66e9fce.jsonl",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 55);
        assert_eq!(r.runs()[0].0, "019c6722-2553-7a22-a1f0-1e7eb66e9fce");
        let failed = r.failed_calls();
        for n in [36, 39] {
            assert!(failed.contains(&n), "{n} failed: {failed:?}");
        }
        for n in [37, 40] {
            assert!(!failed.contains(&n), "{n} passed: {failed:?}");
        }
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// The sandbox-denied exec at 27 has no exit-code line, and still fails; the polls at
    /// 20-24 are still-running processes, not failures.
    #[test]
    fn corpus_sandbox_refusal_and_polls() {
        let Some(r) = read_corpus(
            Format::CodexRollout,
            "codex-rollout/rollout-2026-04-08T22-02-46-019d6d67-1952-7e83-93ef-94497e3c15b6.jsonl",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 34);
        let failed = r.failed_calls();
        assert!(failed.contains(&27), "{failed:?}");
        assert!(!(20..=24).any(|n| failed.contains(&n)), "{failed:?}");
    }
}

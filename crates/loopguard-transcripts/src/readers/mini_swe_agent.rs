//! mini-swe-agent trajectories (`<instance>.traj.json`, FORMATS §14.1): one JSON document
//! `{info, messages, trajectory_format, instance_id}`, or the bare message list (text-mode
//! test data), read as a stream (one message in memory at a time). The file is one session (`instance_id`, which mini-swe-agent writes
//! last, so a first pass skims the document for it; else the file name) and one run.
//!
//! | message | item |
//! |---|---|
//! | `assistant` with `tool_calls` (2.x tool calling) | a [`Item::Turn`] with the response's `usage` and `extra.cost`, its text as the model's answer (with tool calls), then one call per entry: `id`, `function.name`, `function.arguments` parsed from its JSON text. `"function_call": null` is not a call |
//! | `assistant` without `tool_calls` (text mode) | a [`Item::Turn`], its text as the model's answer, then the call `bash {command}` when the text holds exactly one ```` ```bash ```` or ```` ```mswea_bash_command ```` block; none when it holds no block or several (mini-swe-agent answers with format-error feedback and runs nothing) |
//! | `tool` | the result of call `tool_call_id`: `{content: [{type: "text", text}]}` |
//! | `user` | the first is the task (a prompt); later ones answer the text-mode call before them, else they are the harness's feedback to an answer without a call (format errors, "No tool calls found"): a `tool_feedback` message, neither a new run nor a result |
//! | `system`, `exit` | nothing |
//!
//! Failures are `returncode` ≠ 0 (in `extra` and in the observation text), an exception,
//! a timeout ([`FailureRules`]).

use std::io::{self, BufRead, Seek};
use std::sync::LazyLock;

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use regex::Regex;
use serde_json::{json, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, Item, Pos, Sink, Usage};
use crate::readers::chat::content_text;
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// The action of a text-mode response: a fenced `bash` (1.x) or `mswea_bash_command`
/// (later text configs) block, as mini-swe-agent's own parser finds it.
static ACTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)```(?:bash|mswea_bash_command)[ \t]*\r?\n(.*?)\r?\n```")
        .expect("valid pattern")
});

/// Reads a mini-swe-agent trajectory.
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let session = walk::session_name(&mut input, &["instance_id"], options.session_hint)?;
    let mut walker = Trajectory {
        ids: item::ids(&session, Some("run")),
        rules: options.failures,
        task_seen: false,
        text_call: None,
        unanswered: Vec::new(),
        responses: 0,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb(walker.stats);
    Ok(stats)
}

struct Trajectory<'a> {
    ids: Ids,
    rules: &'a FailureRules,
    /// Whether the task prompt has been read (later user messages are not prompts).
    task_seen: bool,
    /// The text-mode call waiting for its observation.
    text_call: Option<String>,
    /// Tool-calling ids waiting for their `tool` message, oldest first.
    unanswered: Vec<String>,
    /// Model responses so far (names batches and synthesized ids).
    responses: u64,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Walker for Trajectory<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] => Want::Descend,
            [Seg::Key(k)] if k == "messages" => Want::Descend,
            [Seg::Key(k), Seg::Index(_)] if k == "messages" => Want::Whole,
            // A bare message list (text-mode test data writes only the messages).
            [Seg::Index(_)] => Want::Whole,
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, _path: &[Seg], pos: Pos, message: Value) {
        let Some(role) = message.get("role").and_then(Value::as_str) else {
            self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "message without a role".into()
            });
            return;
        };
        match role {
            "assistant" => self.response(pos, &message),
            "tool" => {
                self.stats.record();
                let own = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .and_then(loopguard::text::non_blank);
                let id = match own {
                    Some(id) => {
                        self.unanswered.retain(|w| w != id);
                        Some(id.to_owned())
                    }
                    None if !self.unanswered.is_empty() => Some(self.unanswered.remove(0)),
                    None => None,
                };
                match id {
                    Some(id) => self.result(pos, &id, &message),
                    None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "tool message that answers no call".into()
                    }),
                }
            }
            "user" => {
                self.stats.record();
                let role = if !self.task_seen {
                    self.task_seen = true;
                    Role::User
                } else if let Some(id) = self.text_call.take() {
                    self.result(pos, &id, &message);
                    return;
                } else {
                    Role::ToolFeedback
                };
                let text = content_text(message.get("content").unwrap_or(&Value::Null));
                self.sink.push(pos, item::said(&self.ids, role, text));
            }
            "system" | "exit" => self.stats.record(),
            other => {
                let other = other.to_owned();
                self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {other}")
                });
            }
        }
    }
}

impl Trajectory<'_> {
    fn response(&mut self, pos: Pos, message: &Value) {
        self.stats.record();
        self.responses += 1;
        self.text_call = None;
        self.unanswered.clear();
        self.sink.push(
            pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: usage(message),
            },
        );
        let batch = format!("message-{}", self.responses);
        let text = content_text(message.get("content").unwrap_or(&Value::Null));
        match message.get("tool_calls") {
            Some(Value::Array(calls)) => {
                self.sink
                    .push(pos, item::answer(&self.ids, text, None, !calls.is_empty()));
                for (n, call) in calls.iter().enumerate() {
                    let function = call.get("function").unwrap_or(&Value::Null);
                    let id = call
                        .get("id")
                        .and_then(Value::as_str)
                        .and_then(loopguard::text::non_blank)
                        .map_or_else(|| format!("message-{}#{n}", self.responses), str::to_owned);
                    let args = match function.get("arguments") {
                        Some(Value::String(text)) => item::args_from_text(text),
                        Some(Value::Null) | None => json!({}),
                        Some(other) => other.clone(),
                    };
                    let name = function.get("name").and_then(Value::as_str).unwrap_or("");
                    match item::call_in_batch(&self.ids, Some(&id), name, args, Some(batch.clone()))
                    {
                        Some(call) => {
                            self.unanswered.push(id);
                            self.sink.push(pos, call);
                        }
                        None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "tool call without a function name".into()
                        }),
                    }
                }
            }
            // Text mode: the command is the one fenced block of the text.
            Some(Value::Null) | None => {
                let mut actions = ACTION.captures_iter(&text);
                let call = match (actions.next(), actions.next()) {
                    (Some(action), None) => {
                        let command = action.get(1).map_or("", |m| m.as_str()).trim();
                        let id = format!("step-{}", self.responses);
                        let args = json!({ "command": command });
                        item::call_in_batch(&self.ids, Some(&id), "bash", args, Some(batch))
                            .map(|call| (id, call))
                    }
                    _ => None,
                };
                self.sink
                    .push(pos, item::answer(&self.ids, text, None, call.is_some()));
                if let Some((id, call)) = call {
                    self.text_call = Some(id);
                    self.sink.push(pos, call);
                }
            }
            Some(_) => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                "tool_calls that is not a list".into()
            }),
        }
    }

    fn result(&mut self, pos: Pos, id: &str, message: &Value) {
        let text = content_text(message.get("content").unwrap_or(&Value::Null));
        let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
        self.rules.judge(
            Format::MiniSweAgent,
            message,
            &text,
            &mut outcome,
            &mut self.stats,
        );
        self.sink.push(pos, item::result(&self.ids, id, outcome));
    }
}

/// `extra.response.usage` (`total_tokens`, else prompt + completion) and `extra.cost`.
fn usage(message: &Value) -> Option<Usage> {
    let extra = message.get("extra")?;
    let usage = extra.pointer("/response/usage");
    let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
    let tokens = n("total_tokens").or_else(|| {
        let (p, c) = (n("prompt_tokens"), n("completion_tokens"));
        (p.is_some() || c.is_some()).then(|| p.unwrap_or(0) + c.unwrap_or(0))
    });
    let cost = extra
        .get("cost")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite());
    match (tokens, cost) {
        (None, None) => None,
        (tokens, cost) => Some(Usage {
            tokens: tokens.unwrap_or(0),
            cost,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus, read_corpus2, Read};

    fn calls(r: &Read) -> Vec<(String, Value)> {
        r.call_list()
            .into_iter()
            .map(|(id, _, args)| (id, args))
            .collect()
    }

    #[test]
    fn tool_calling_trajectories() {
        let doc = r#"{
 "info": {"mini_version": "2.2.7", "exit_status": "Submitted"},
 "messages": [
  {"role": "system", "content": "be helpful"},
  {"role": "user", "content": "fix it"},
  {"role": "assistant", "content": "", "function_call": null,
   "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}],
   "extra": {"response": {"usage": {"total_tokens": 120}}, "cost": 0.5}},
  {"role": "tool", "tool_call_id": "c1", "content": "<returncode>2</returncode>\n<output>\nno\n</output>",
   "extra": {"returncode": 2}},
  {"role": "user", "content": "No tool calls found in the response. Please call a tool."},
  {"role": "assistant", "content": "", "function_call": null,
   "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\"}"}}]},
  {"role": "exit", "content": "patch", "extra": {"exit_status": "Submitted"}}
 ],
 "trajectory_format": "mini-swe-agent-1.1",
 "instance_id": "repo__issue-1"
}"#;
        let r = read_bytes(Format::MiniSweAgent, doc.as_bytes(), "file");
        assert_eq!((r.calls(), r.results()), (2, 1));
        assert_eq!(r.runs(), vec![("repo__issue-1".into(), Some("run".into()))]);
        assert_eq!(calls(&r)[0], ("c1".into(), json!({"command": "ls"})));
        assert_eq!(r.failed_calls(), [1]);
        assert!(matches!(
            r.items[1].1,
            Item::Turn {
                usage: Some(Usage {
                    tokens: 120,
                    cost: Some(c)
                }),
                ..
            } if c == 0.5
        ));
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
        assert_eq!(r.stats.records, 7);
        assert_eq!(
            r.messages(),
            [
                (Role::User, "fix it", None, None),
                (Role::Assistant, "", None, Some(true)),
                (
                    Role::ToolFeedback,
                    "No tool calls found in the response. Please call a tool.",
                    None,
                    None
                ),
                (Role::Assistant, "", None, Some(true)),
            ]
        );
    }

    #[test]
    fn text_mode_trajectories() {
        let doc = r#"{"info": {"mini_version": "1.9.0"}, "messages": [
  {"role": "system", "content": "one bash block"},
  {"role": "user", "content": "task"},
  {"role": "assistant", "content": "THOUGHT: look\n\n```bash\nls -la\n```"},
  {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>"},
  {"role": "assistant", "content": "two\n```bash\nls\n```\n```bash\npwd\n```"},
  {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."},
  {"role": "assistant", "content": "```mswea_bash_command\ncat x\n```"},
  {"role": "user", "content": "<returncode>1</returncode>\n<output>\ncat: x: No such file\n</output>"},
  {"role": "assistant", "content": "no block at all"},
  {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks, found 0 actions."}
 ], "trajectory_format": "mini-swe-agent-1"}"#;
        let r = read_bytes(Format::MiniSweAgent, doc.as_bytes(), "text-mode");
        assert_eq!(
            calls(&r),
            [
                ("step-1".to_owned(), json!({"command": "ls -la"})),
                ("step-3".to_owned(), json!({"command": "cat x"}))
            ]
        );
        assert_eq!(r.results(), 2);
        assert_eq!(r.failed_calls(), [2]);
        assert_eq!(r.runs(), vec![("text-mode".into(), Some("run".into()))]);
        // Observations are results; the format errors are feedback to the answers that
        // made no call (two blocks, none).
        let answers: Vec<_> = r
            .messages()
            .into_iter()
            .filter(|m| m.0 == Role::Assistant)
            .map(|m| m.3)
            .collect();
        assert_eq!(answers, [Some(true), Some(false), Some(true), Some(false)]);
        let feedback = r.said(Role::ToolFeedback);
        assert_eq!(feedback.len(), 2);
        assert!(feedback
            .iter()
            .all(|f| f.starts_with("Please always provide")));
    }

    /// The format-error loops of the second corpus (labels L12, L13): mini-swe-agent logs
    /// only its "No tool calls found" feedback, never the answers that had no call. The
    /// seaborn run has 54 of them, 23 in a row after call 42 and 18 after call 44.
    #[test]
    fn corpus2_format_error_feedback() {
        let Some(r) = read_corpus2(
            Format::MiniSweAgent,
            "mini-swe-agent/mwaskom__seaborn-3069.traj.json",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 45);
        let feedback = r.said(Role::ToolFeedback);
        assert_eq!(feedback.len(), 54);
        assert!(feedback
            .iter()
            .all(|f| f.starts_with("No tool calls found in the response.")));
        assert_eq!(r.said(Role::User).len(), 1, "the task only");
        // The longest row of feedback between two calls.
        let mut row = 0;
        let mut longest = 0;
        for (_, item) in &r.items {
            match item {
                Item::Event(loopguard_events::Event::Call { .. }) => row = 0,
                Item::Event(loopguard_events::Event::Message { message, .. })
                    if message.role == Role::ToolFeedback =>
                {
                    row += 1;
                    longest = longest.max(row);
                }
                _ => {}
            }
        }
        assert_eq!(longest, 23);
    }

    /// The labelled error runs of the astropy trajectory (labels.json): 64 calls, every
    /// one answered but the final submit; `No module named 'erfa'` fails at 3, 6, 10, 13
    /// and 18, and the second round (42–55) fails 7 times.
    #[test]
    fn corpus_astropy_error_runs() {
        let Some(r) = read_corpus(
            Format::MiniSweAgent,
            "mini-swe-agent/pr854_example__astropy__astropy-12907.traj.json",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results()), (64, 63));
        assert_eq!(
            r.runs(),
            vec![("astropy__astropy-12907".into(), Some("run".into()))]
        );
        let failed = r.failed_calls();
        for n in [3, 6, 10, 13, 18] {
            assert!(failed.contains(&n), "call {n} failed: {failed:?}");
        }
        assert_eq!(failed.iter().filter(|&&n| (3..=20).contains(&n)).count(), 8);
        assert_eq!(
            failed.iter().filter(|&&n| (42..=55).contains(&n)).count(),
            7
        );
        let last = &calls(&r)[63].1;
        assert!(last["command"]
            .as_str()
            .unwrap()
            .contains("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"));
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// The edit-thrash label: calls 129–181 restore `schema.py` from its backup 7 times
    /// and `cat patch.txt` 5 times (labels.json), with no failing command.
    #[test]
    fn corpus_marshmallow_edit_thrash() {
        let Some(r) = read_corpus(
            Format::MiniSweAgent,
            "mini-swe-agent/deepseek_lite_dev__marshmallow-code__marshmallow-1343.traj.json",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 189);
        let commands: Vec<String> = calls(&r)
            .into_iter()
            .map(|(_, a)| a["command"].as_str().unwrap_or("").to_owned())
            .collect();
        let range = &commands[128..181];
        let count = |needle: &str| range.iter().filter(|c| c.contains(needle)).count();
        assert!(count("cp ") >= 7, "{range:#?}");
        assert!(count("cat patch.txt") >= 5, "{range:#?}");
    }
}

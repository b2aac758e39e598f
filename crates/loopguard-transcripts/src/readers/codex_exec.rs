//! `codex exec --json` event streams (FORMATS §6.2): one event object per line.
//!
//! | event | item |
//! |---|---|
//! | `thread.started` | the session id (`thread_id`, else the file name's) |
//! | `turn.started` | a new run |
//! | `item.started` of a tool item | a [`Item::Turn`] and the call (id `item.id`) |
//! | `item.completed` of a tool item | its result (and, when it was never started, its call first) |
//! | `item.completed` of an `agent_message` (and the `reasoning` items before it) | the model's answer (`text`), with calls when tool items follow it before the next answer or the end of the turn (the stream has no response boundaries) |
//! | `todo_list` items, `turn.completed`, `turn.failed`, `error`, `item.updated` | nothing |
//!
//! Tool items: `command_execution` (tool `command_execution`, args `{command}`, result
//! `{content: [aggregated_output], details: {exitCode, status}}`), `mcp_tool_call` (tool
//! `server.tool`, args `arguments`, result `result`, or an error), `file_change` (args
//! `{changes}`), `web_search` (args `{query}`). A non-zero `exit_code`, `status: "failed"`
//! or an `error` make the result failed ([`FailureRules`](crate::FailureRules)). The
//! format has no compactions, and its usage
//! numbers cover whole turns, so no usage is reported per response.

use std::collections::HashSet;
use std::io::{self, BufRead, Seek};

use loopguard_events::OwnedOutcome;
use serde_json::{json, Value};

use crate::detect::Format;
use crate::item::{self, AnswerParts, Item, Pos, Sink};
use crate::readers::lines::{self, Lines};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// Reads a `codex exec --json` stream.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut ids = item::ids(options.session_hint, Some("turn-0"));
    let mut runs = 0u64;
    let mut started: HashSet<String> = HashSet::new();
    // The answer being read (calls that follow it are its).
    let mut answer: Option<AnswerParts> = None;
    let end_answer = |answer: &mut Option<AnswerParts>, sink: &mut dyn Sink| {
        if let Some(answer) = answer.take() {
            answer.emit(sink);
        }
    };
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(event) = lines::entry::<Value>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        let Some(kind) = event.get("type").and_then(Value::as_str) else {
            stats.skip(SkipReason::NotAnObject, pos.line, || {
                "event without type".into()
            });
            continue;
        };
        let known = matches!(
            kind,
            "thread.started"
                | "turn.started"
                | "item.started"
                | "item.completed"
                | "turn.completed"
                | "turn.failed"
                | "item.updated"
                | "error"
        );
        if known {
            stats.record();
        }
        match kind {
            "thread.started" => {
                if let Some(thread) = event.get("thread_id").and_then(Value::as_str) {
                    ids = item::ids(thread, ids.run.as_deref());
                }
            }
            "turn.started" => {
                end_answer(&mut answer, sink);
                runs += 1;
                ids.run = Some(format!("turn-{runs}"));
                started.clear();
            }
            "item.started" | "item.completed" => {
                let it = event.get("item").unwrap_or(&Value::Null);
                let text = |k: &str| it.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                match it.get("type").and_then(Value::as_str) {
                    Some(part @ ("agent_message" | "reasoning")) if kind == "item.completed" => {
                        // A second answer ends the first (its reasoning stays with it).
                        if answer
                            .as_ref()
                            .is_some_and(|a| !a.text.is_empty() || a.calls)
                        {
                            end_answer(&mut answer, sink);
                        }
                        let open = answer.get_or_insert_with(|| AnswerParts::new(pos, &ids));
                        match part {
                            "agent_message" => open.add_text(&text("text")),
                            _ => open.add_reasoning(&text("text")),
                        }
                        continue;
                    }
                    _ => {}
                }
                let Some((tool, args)) = tool_call(it) else {
                    continue;
                };
                if let Some(open) = &mut answer {
                    open.calls = true;
                }
                let Some(id) = it.get("id").and_then(Value::as_str) else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "item without id".into()
                    });
                    continue;
                };
                let first = !started.contains(id);
                if first {
                    if started.len() >= 4096 {
                        started.clear();
                    }
                    started.insert(id.to_owned());
                    emit_call(&ids, pos, id, &tool, args, &mut stats, sink);
                }
                if kind == "item.completed" {
                    started.remove(id);
                    let mut outcome = outcome(it);
                    if matches!(outcome, OwnedOutcome::Error(_)) {
                        stats.failure("error");
                    }
                    let text = it
                        .get("aggregated_output")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    options
                        .failures
                        .judge(Format::CodexExec, it, text, &mut outcome, &mut stats);
                    sink.push(pos, item::result(&ids, id, outcome));
                }
            }
            "turn.completed" | "turn.failed" => end_answer(&mut answer, sink),
            "item.updated" | "error" => {}
            other => {
                let other = other.to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || other);
            }
        }
    }
    end_answer(&mut answer, sink);
    Ok(stats)
}

fn emit_call(
    ids: &loopguard_events::Ids,
    pos: Pos,
    id: &str,
    tool: &str,
    args: Value,
    stats: &mut ReadStats,
    sink: &mut dyn Sink,
) {
    sink.push(
        pos,
        Item::Turn {
            ids: ids.clone(),
            usage: None,
        },
    );
    match item::call(ids, Some(id), tool, args) {
        Some(call) => sink.push(pos, call),
        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
            "tool item without a name".into()
        }),
    }
}

/// The tool and args of a tool item; `None` for items that are not tool calls.
fn tool_call(it: &Value) -> Option<(String, Value)> {
    let field = |k: &str| it.get(k).cloned().unwrap_or(Value::Null);
    let kind = it.get("type").and_then(Value::as_str)?;
    Some(match kind {
        "command_execution" => (kind.to_owned(), json!({ "command": field("command") })),
        "file_change" => (kind.to_owned(), json!({ "changes": field("changes") })),
        "web_search" => (kind.to_owned(), json!({ "query": field("query") })),
        "mcp_tool_call" => {
            let server = it.get("server").and_then(Value::as_str).unwrap_or("");
            let tool = it.get("tool").and_then(Value::as_str).unwrap_or("");
            let name = if server.is_empty() {
                tool.to_owned()
            } else {
                format!("{server}.{tool}")
            };
            (name, field("arguments"))
        }
        _ => return None,
    })
}

fn outcome(it: &Value) -> OwnedOutcome {
    match it.get("type").and_then(Value::as_str) {
        Some("command_execution") => {
            let output = it
                .get("aggregated_output")
                .and_then(Value::as_str)
                .unwrap_or("");
            let details = json!({
                "exitCode": it.get("exit_code").cloned().unwrap_or(Value::Null),
                "status": it.get("status").cloned().unwrap_or(Value::Null),
            });
            OwnedOutcome::Result(item::text_result(output, Some(details)))
        }
        Some("mcp_tool_call") => match it.get("error") {
            Some(error) if !error.is_null() => OwnedOutcome::Error(error.clone()),
            _ => OwnedOutcome::Result(it.get("result").cloned().unwrap_or(Value::Null)),
        },
        _ => OwnedOutcome::Result(json!({ "details": {
            "status": it.get("status").cloned().unwrap_or(Value::Null),
        }})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus};

    #[test]
    fn maps_items() {
        let stream = concat!(
            r#"{"type":"thread.started","thread_id":"th1"}"#,
            "\n",
            r#"{"type":"turn.started"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"hi"}}"#,
            "\n",
            r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"","exit_code":null,"status":"in_progress"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"ls","aggregated_output":"a\n","exit_code":0,"status":"completed"}}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"item_2","type":"mcp_tool_call","server":"gh","tool":"search","arguments":{"q":1},"error":{"message":"boom"},"status":"failed"}}"#,
            "\n",
            r#"{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"sleep 100"}}"#,
            "\n",
            r#"{"type":"turn.completed","usage":{"input_tokens":1}}"#,
            "\n",
            r#"{"type":"who.knows"}"#,
            "\n",
        );
        let r = read_bytes(Format::CodexExec, stream.as_bytes(), "hint");
        assert_eq!((r.calls(), r.results()), (3, 2));
        assert_eq!(r.runs(), vec![("th1".into(), Some("turn-1".into()))]);
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(
            r.messages(),
            [(loopguard::Role::Assistant, "hi", None, Some(true))]
        );
    }

    /// The stored `codex exec --json` sample: 10 commands and 2 file changes, all completed.
    #[test]
    fn corpus_codex_exec() {
        let Some(r) = read_corpus(
            Format::CodexExec,
            "codex-exec-json/eval-13_without_skill_run-2_codex_stdout.jsonl",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results(), r.compactions()), (12, 12, 0));
        assert_eq!(r.runs().len(), 1);
        assert_eq!(r.stats.lines, 32);
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }
}

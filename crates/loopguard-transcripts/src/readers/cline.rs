//! Cline and Roo Code task histories: `api_conversation_history.json`, the messages sent to
//! the model, kept per task in `<extension storage>/tasks/<task id>/`
//! (`docs/formats.md` §2). One JSON array of Anthropic `MessageParam`s, read as a stream
//! (one message in memory at a time); the file is one session, named after the task
//! directory, and one run per task start or resumption.
//!
//! | message | item |
//! |---|---|
//! | `user` with `<task>` or `[TASK RESUMPTION]` | a new run, and its prompt |
//! | `user` text block `[ERROR] You did not use a tool in your previous response…` | the harness's feedback to an answer without a call (`tool_feedback`) |
//! | `assistant` | a [`Item::Turn`], the model's answer (its text, with calls when it made some), then one call per `tool_use` block (`id`, `name`, `input`, native tool calling) and per tool written as XML in its text (`<read_file><path>a.py</path></read_file>`, the original protocol), in order, as one batch; the `task_progress` parameter (Cline's to-do list, rewritten with every call) is left out of the arguments |
//! | `user` text block `[<tool> for '<what>'] Result:` (or `[<tool>] Result:`) | the result of the oldest unanswered call of that tool |
//! | `user` text block `Tool [<tool>] was not executed because a tool has already been used in this message.` | a failed result of the next unanswered call of that tool (Cline runs one tool per message) |
//! | `user` `tool_result` block | the result of call `tool_use_id` (an error when `is_error`) |
//!
//! Texts that say a tool failed (Cline's `src/core/prompts/responses.ts`: `toolError`,
//! `toolDenied`, `missingToolParameterError`, `diffError`, `clineIgnoreError`, …) mark
//! the result failed ([`FailureRules`]).

use std::io::{self, BufRead, Seek};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{Map, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, AnswerParts, Item, Pos, Sink};
use crate::readers::anthropic_messages::{judged_outcome, tool_results, tool_uses};
use crate::readers::walk;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// How Cline answers a response that used no tool (`formatResponse.noToolsUsed`).
const NO_TOOL_USED: &str = "[ERROR] You did not use a tool in your previous response";

/// The name Cline and Roo Code give the file.
pub const FILE_NAME: &str = "api_conversation_history.json";

/// Tools of Cline (`src/core/prompts/…`, `ClineDefaultTool`) and Roo Code
/// (`packages/types/src/tool.ts`) that a model may write as XML in its text.
pub const XML_TOOLS: &[&str] = &[
    "execute_command",
    "read_file",
    "write_to_file",
    "replace_in_file",
    "apply_diff",
    "insert_content",
    "search_and_replace",
    "search_files",
    "list_files",
    "list_code_definition_names",
    "codebase_search",
    "browser_action",
    "use_mcp_tool",
    "access_mcp_resource",
    "ask_followup_question",
    "attempt_completion",
    "plan_mode_respond",
    "new_task",
    "switch_mode",
    "fetch_instructions",
    "load_mcp_documentation",
    "web_fetch",
    "update_todo_list",
    "new_rule",
    "condense",
    "summarize_task",
    "report_bug",
];

/// The parameter Cline adds to calls to update its to-do list (`task_progress`), left out
/// of the call's arguments.
const PROGRESS_PARAMETER: &str = "task_progress";

/// Reads a Cline or Roo Code `api_conversation_history.json`.
pub fn read<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut task = Task {
        ids: item::ids(options.session_hint, Some("run-0")),
        runs: 0,
        messages: 0,
        unanswered: Vec::new(),
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::elements(input, None, &mut stats, |pos, value| {
        task.message(pos, value)
    })?;
    stats.absorb(task.stats);
    Ok(stats)
}

struct Task<'a> {
    ids: Ids,
    runs: u64,
    /// Model messages so far (names batches and synthesized ids).
    messages: u64,
    /// Calls waiting for their result, oldest first: (id, tool).
    unanswered: Vec<(String, String)>,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Task<'_> {
    /// One element of the array.
    fn message(&mut self, pos: Pos, message: Value) {
        let content = message.get("content").unwrap_or(&Value::Null);
        match message.get("role").and_then(Value::as_str) {
            Some("assistant") => {
                self.stats.record();
                self.assistant(pos, content);
            }
            Some("user") => {
                self.stats.record();
                self.user(pos, content);
            }
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
            }
        }
    }
}

impl Task<'_> {
    fn assistant(&mut self, pos: Pos, content: &Value) {
        self.messages += 1;
        self.unanswered.clear();
        self.sink.push(
            pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: None,
            },
        );
        let batch = format!("message-{}", self.messages);
        let mut calls: Vec<(Option<String>, String, Value)> = Vec::new();
        let mut said = AnswerParts::new(pos, &self.ids);
        match content {
            Value::String(text) => {
                said.add_text(text);
                calls.extend(xml_calls(text));
            }
            Value::Array(blocks) => {
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            said.add_text(text);
                            calls.extend(xml_calls(text));
                        }
                        Some("tool_use") => {
                            let single = Value::Array(vec![block.clone()]);
                            for (id, name, input) in tool_uses(&single) {
                                calls.push((id.map(str::to_owned), name.to_owned(), input.clone()));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        said.calls = !calls.is_empty();
        said.emit(self.sink);
        for (n, (id, name, mut args)) in calls.into_iter().enumerate() {
            let id = id.unwrap_or_else(|| format!("message-{}#{n}", self.messages));
            // Cline's to-do list rides along with any call and changes with every one; it
            // is not what the tool is asked to do.
            if let Value::Object(map) = &mut args {
                map.remove(PROGRESS_PARAMETER);
            }
            match item::call_in_batch(&self.ids, Some(&id), &name, args, Some(batch.clone())) {
                Some(call) => {
                    self.sink.push(pos, call);
                    self.unanswered.push((id, name));
                }
                None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    "tool use without a name".into()
                }),
            }
        }
    }

    fn user(&mut self, pos: Pos, content: &Value) {
        let texts: Vec<&str> = match content {
            Value::String(s) => vec![s.as_str()],
            Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
            _ => Vec::new(),
        };
        if texts
            .iter()
            .any(|t| t.contains("<task>") || t.trim_start().starts_with("[TASK RESUMPTION]"))
        {
            self.runs += 1;
            self.ids.run = Some(format!("run-{}", self.runs));
            self.unanswered.clear();
            let prompt = item::said(&self.ids, Role::User, texts.join("\n"));
            self.sink.push(pos, prompt);
        }
        for text in texts {
            if text.trim_start().starts_with(NO_TOOL_USED) {
                let feedback = item::said(&self.ids, Role::ToolFeedback, text.trim().to_owned());
                self.sink.push(pos, feedback);
            } else if let Some(tool) = not_executed(text) {
                if let Some(id) = self.take(tool) {
                    let outcome = OwnedOutcome::Error(Value::String(text.trim().to_owned()));
                    self.sink.push(pos, item::result(&self.ids, &id, outcome));
                }
            } else if let Some(tool) = result_header(text) {
                match self.take(tool) {
                    Some(id) => {
                        let mut outcome =
                            OwnedOutcome::Result(item::text_result(text.trim(), None));
                        let record = Value::Object(Map::new());
                        self.rules.judge(
                            Format::Cline,
                            &record,
                            text,
                            &mut outcome,
                            &mut self.stats,
                        );
                        self.sink.push(pos, item::result(&self.ids, &id, outcome));
                    }
                    None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        format!("a result of {tool} that answers no call")
                    }),
                }
            }
        }
        for (id, block) in tool_results(content) {
            let outcome = judged_outcome(block, Format::Cline, self.rules, &mut self.stats);
            let id = match id {
                Some(id) => {
                    self.unanswered.retain(|(w, _)| w != id);
                    Some(id.to_owned())
                }
                None if !self.unanswered.is_empty() => Some(self.unanswered.remove(0).0),
                None => None,
            };
            match id {
                Some(id) => self.sink.push(pos, item::result(&self.ids, &id, outcome)),
                None => self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    "tool_result that answers no call".into()
                }),
            }
        }
    }

    /// The oldest unanswered call of `tool` (else the oldest of any tool).
    fn take(&mut self, tool: &str) -> Option<String> {
        let at = self
            .unanswered
            .iter()
            .position(|(_, t)| t == tool)
            .or_else(|| (!self.unanswered.is_empty()).then_some(0))?;
        Some(self.unanswered.remove(at).0)
    }
}

/// `[<tool> for '<what>'] Result:` or `[<tool>] Result:`: the tool.
fn result_header(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('[')?;
    let name_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..name_end];
    let first_line = rest.lines().next().unwrap_or("");
    (!name.is_empty() && first_line.contains("] Result:")).then_some(name)
}

/// `Tool [<tool>] was not executed because a tool has already been used in this
/// message.` (`toolAlreadyUsed`): the tool.
fn not_executed(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix("Tool [")?;
    let (name, tail) = rest.split_once(']')?;
    tail.trim_start()
        .starts_with("was not executed")
        .then_some(name)
}

/// The tools written as XML in a text (`<tool><param>value</param></tool>`), in order:
/// (no id, tool, parameters as strings).
pub(crate) fn xml_calls(text: &str) -> Vec<(Option<String>, String, Value)> {
    let mut calls = Vec::new();
    let mut at = 0;
    while let Some(open) = text[at..].find('<').map(|i| at + i) {
        let Some(close) = text[open..].find('>').map(|i| open + i) else {
            break;
        };
        let name = &text[open + 1..close];
        if !XML_TOOLS.contains(&name) {
            at = open + 1;
            continue;
        }
        let end_tag = format!("</{name}>");
        let Some(end) = text[close..].find(&end_tag).map(|i| close + i) else {
            at = close;
            continue;
        };
        let args = xml_params(&text[close + 1..end]);
        calls.push((None, name.to_owned(), Value::Object(args)));
        at = end + end_tag.len();
    }
    calls
}

/// `<param>value</param>` children, values trimmed of the newlines around them.
fn xml_params(inner: &str) -> Map<String, Value> {
    let mut params = Map::new();
    let mut at = 0;
    while let Some(open) = inner[at..].find('<').map(|i| at + i) {
        let Some(close) = inner[open..].find('>').map(|i| open + i) else {
            break;
        };
        let name = &inner[open + 1..close];
        let simple = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !simple {
            at = open + 1;
            continue;
        }
        let end_tag = format!("</{name}>");
        let Some(end) = inner[close..].find(&end_tag).map(|i| close + i) else {
            at = close;
            continue;
        };
        let value = inner[close + 1..end].trim_matches('\n');
        params.insert(name.to_owned(), Value::String(value.to_owned()));
        at = end + end_tag.len();
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::read_bytes;
    use serde_json::json;

    #[test]
    fn native_and_xml_calls_with_text_results() {
        let doc = json!([
            {"role": "user", "content": [{"type": "text", "text": "<task>\nfix it\n</task>"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.cs"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "b.cs"}}]},
            {"role": "user", "content": [
                {"type": "text", "text": "[read_file for 'a.cs'] Result:\nclass A {}"},
                {"type": "text", "text": "Tool [read_file] was not executed because a tool has already been used in this message. Only one tool may be used per message."},
                {"type": "text", "text": "<environment_details>\n# Current Time\n</environment_details>"}]},
            {"role": "assistant", "content": "I'll run it.\n\n<execute_command>\n<command>npm test</command>\n<requires_approval>false</requires_approval>\n</execute_command>"},
            {"role": "user", "content": [{"type": "text", "text": "[execute_command for 'npm test'] Result:\nThe tool execution failed with the following error:\n<error>\nspawn npm ENOENT\n</error>"}]},
            {"role": "user", "content": [{"type": "text", "text": "[TASK RESUMPTION] This task was interrupted 10 minutes ago."}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "list_files", "input": {"path": "."}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "content": "a.cs\nb.cs"}]}
        ]);
        let r = read_bytes(Format::Cline, doc.to_string().as_bytes(), "1769064454592");
        let calls = r.call_list();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[2].1, "execute_command");
        assert_eq!(
            calls[2].2,
            json!({"command": "npm test", "requires_approval": "false"})
        );
        let results = r.result_list();
        assert_eq!(
            results,
            [
                ("toolu_1".to_owned(), false),
                ("toolu_2".to_owned(), true),
                ("message-2#0".to_owned(), true),
                ("toolu_3".to_owned(), false)
            ]
        );
        assert_eq!(
            r.runs(),
            [
                ("1769064454592".to_owned(), Some("run-1".to_owned())),
                ("1769064454592".to_owned(), Some("run-2".to_owned()))
            ]
        );
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// A text-only answer and Cline's reply to it: an answer without calls and its
    /// feedback.
    #[test]
    fn answers_and_no_tool_feedback() {
        let doc = r#"[
            {"role": "user", "content": [{"type": "text", "text": "<task>\nfix it\n</task>"}]},
            {"role": "assistant", "content": "I think it is fixed."},
            {"role": "user", "content": [{"type": "text", "text": "[ERROR] You did not use a tool in your previous response! Please retry with a tool use."}]},
            {"role": "assistant", "content": "Checking.\n<read_file>\n<path>a.py</path>\n</read_file>"}
        ]"#;
        let r = read_bytes(Format::Cline, doc.as_bytes(), "task");
        let said: Vec<_> = r.messages().into_iter().map(|m| (m.0, m.3)).collect();
        assert_eq!(
            said,
            [
                (Role::User, None),
                (Role::Assistant, Some(false)),
                (Role::ToolFeedback, None),
                (Role::Assistant, Some(true)),
            ]
        );
        assert!(r.said(Role::ToolFeedback)[0].starts_with("[ERROR] You did not use a tool"));
    }

    #[test]
    fn headers() {
        assert_eq!(
            result_header("[read_file for 'a'] Result:\nx"),
            Some("read_file")
        );
        assert_eq!(
            result_header("[load_mcp_documentation] Result:\n"),
            Some("load_mcp_documentation")
        );
        assert_eq!(
            result_header("[execute_command for 'echo [x]'] Result:\n"),
            Some("execute_command")
        );
        assert_eq!(result_header("[NOTE] something"), None);
        assert_eq!(
            not_executed("Tool [read_file] was not executed because"),
            Some("read_file")
        );
        assert_eq!(not_executed("Tool output"), None);
        assert!(xml_calls("<thinking>x</thinking> <read_file>").is_empty());
    }
}

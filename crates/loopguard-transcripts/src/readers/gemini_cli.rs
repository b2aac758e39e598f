//! Gemini CLI chat sessions (`~/.gemini/tmp/<project>/chats/session-*.json`, FORMATS
//! §14.4): one JSON document `{sessionId, projectHash, startTime, lastUpdated, messages,
//! summary?, kind?}`, read as a stream (one message in memory at a time). The session is
//! `sessionId` (else the file name's); a resumed session written to a second file keeps
//! its id.
//!
//! Newer releases (0.61.0 writes them) append to `session-*.jsonl` instead: a first line
//! `{sessionId, projectHash, startTime, lastUpdated, kind}`, then records: a message
//! (`{id, type, …}`, the same shape), written again under its id as it grows (an answer
//! gains its `toolCalls` and their results); `{"$set": {…}}`, an update of the session's
//! fields, whose `messages`, when present, is the whole conversation so far;
//! `{"$rewindTo": id}`, the user rewinding the conversation. The messages are read in the
//! order they were first written, each in its last version (one message in memory at a
//! time: a message is read when the next one starts, and a later version of one already
//! read is left out); a rewind is not undone, since what came before it was said and spent.
//! A sub-agent's conversation (`kind: "subagent"`) is a file of its own,
//! `chats/<parent session id>/<id>.jsonl`: its session names that parent ([`parent_of`];
//! the parent's run is not known: nothing in either file says which call started it).
//!
//! | message | item |
//! |---|---|
//! | `user` | a new run and its prompt, unless it echoes a tool output (`[Function Response: …]`, older builds) or carries one (`functionResponse` parts, the JSON Lines files: the answer's `toolCalls` hold the results already) |
//! | `gemini` | a [`Item::Turn`] with `tokens.total`, the model's answer (`content`, its `thoughts` as reasoning), then for each `toolCalls[]` entry its call (`id`, `name`, `args`) and, at once, its result (calls and results are stored together) |
//! | `info`, `error` | nothing (UI notices and API errors, not tool results) |
//!
//! A result is `{content: [{type: "text", text}]}` with the text of
//! `result[].functionResponse.response` (`output`, else `error`), never the stored
//! `functionResponse.id`, which embeds a timestamp and a random suffix: two identical
//! calls with identical output give identical results. `status: "error"` and
//! `"cancelled"` mark the result failed ([`FailureRules`]).

use std::collections::HashSet;
use std::io::{self, BufRead, Seek, SeekFrom};

use loopguard::Role;
use loopguard_events::{Ids, OwnedOutcome};
use serde_json::{json, Value};

use crate::detect::Format;
use crate::failures::FailureRules;
use crate::item::{self, Item, Pos, Sink, Usage};
use crate::readers::chat::content_text;
use crate::readers::lines::{self, Lines};
use crate::readers::walk;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Older builds echo tool output as a user message that starts so.
const FUNCTION_RESPONSE_ECHO: &str = "[Function Response:";

/// Reads a Gemini CLI chat session: one document, or JSON Lines.
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let start = input.stream_position()?;
    let jsonl = lines::is_json_lines(&mut input, options.max_line)?;
    input.seek(SeekFrom::Start(start))?;
    if jsonl {
        return read_lines(input, options, sink);
    }
    let session = walk::session_name(&mut input, &["sessionId"], options.session_hint)?;
    let mut walker = Session {
        ids: item::ids(&session, Some("turn-0")),
        runs: 0,
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut stats = ReadStats::default();
    walk::elements(input, Some("messages"), &mut stats, |pos, value| {
        walker.message(pos, value)
    })?;
    stats.absorb(walker.stats);
    Ok(stats)
}

/// The session that spawned the sub-agent whose conversation is at `path`
/// (`…/chats/<parent session id>/<id>.jsonl`), when the path is so.
pub fn parent_of(path: &std::path::Path) -> Option<String> {
    let folder = path.parent()?;
    if folder.parent()?.file_name()? != "chats" {
        return None;
    }
    let parent = folder.file_name()?.to_str()?;
    loopguard::text::non_blank(parent).map(str::to_owned)
}

/// Reads the JSON Lines form (see the module's docs).
fn read_lines<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    let mut ids = item::ids(options.session_hint, Some("turn-0"));
    ids.parent_session = options.parent_session.map(str::to_owned);
    let mut walker = Session {
        ids,
        runs: 0,
        rules: options.failures,
        stats: ReadStats::default(),
        sink,
    };
    let mut messages = Versions::default();
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(record) = lines::entry::<Value>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        if let Some(update) = record.get("$set") {
            stats.record();
            let conversation = update.get("messages").and_then(Value::as_array);
            for message in conversation.into_iter().flatten() {
                messages.offer(pos, message.clone(), &mut walker);
            }
        } else if record.get("$rewindTo").is_some() {
            stats.record();
        } else if record.get("type").is_some() {
            messages.offer(pos, record, &mut walker);
        } else if let Some(id) = record.get("sessionId").and_then(Value::as_str) {
            stats.record();
            if let Some(id) = loopguard::text::non_blank(id) {
                walker.ids.session = id.to_owned();
            }
            // A whole session on one line (the document form, written without newlines).
            let conversation = record.get("messages").and_then(Value::as_array);
            for message in conversation.into_iter().flatten() {
                messages.offer(pos, message.clone(), &mut walker);
            }
        } else {
            stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                "a record that is no message, $set, $rewindTo or session header".into()
            });
        }
    }
    messages.flush(&mut walker);
    stats.absorb(walker.stats);
    Ok(stats)
}

/// The messages of a JSON Lines session as their versions come: the newest message is
/// held until the next one starts, so that it is read in its last version.
#[derive(Default)]
struct Versions {
    held: Option<(Pos, Value)>,
    /// The ids of the messages read already (a later version of one is left out).
    read: HashSet<String>,
}

impl Versions {
    fn offer(&mut self, pos: Pos, message: Value, walker: &mut Session<'_>) {
        let id = message.get("id").and_then(Value::as_str).map(str::to_owned);
        let held_id = self
            .held
            .as_ref()
            .and_then(|(_, m)| m.get("id").and_then(Value::as_str));
        match id {
            // A newer version of the held message: it replaces it, where it was first.
            Some(id) if held_id == Some(id.as_str()) => {
                if let Some((_, held)) = &mut self.held {
                    *held = message;
                }
            }
            Some(id) if self.read.contains(&id) => {}
            id => {
                self.flush(walker);
                if let Some(id) = id {
                    self.read.insert(id);
                }
                self.held = Some((pos, message));
            }
        }
    }

    fn flush(&mut self, walker: &mut Session<'_>) {
        if let Some((pos, message)) = self.held.take() {
            walker.message(pos, message);
        }
    }
}

struct Session<'a> {
    ids: Ids,
    runs: u64,
    rules: &'a FailureRules,
    stats: ReadStats,
    sink: &'a mut dyn Sink,
}

impl Session<'_> {
    /// One message of the session.
    fn message(&mut self, pos: Pos, message: Value) {
        let kind = message.get("type").and_then(Value::as_str);
        match kind {
            Some("user") => {
                self.stats.record();
                if carries_results(message.get("content")) {
                    return;
                }
                let text = parts_text(message.get("content"));
                if !text.trim_start().starts_with(FUNCTION_RESPONSE_ECHO) {
                    self.runs += 1;
                    self.ids.run = Some(format!("turn-{}", self.runs));
                    self.sink.push(pos, item::said(&self.ids, Role::User, text));
                }
            }
            Some("gemini") => {
                self.stats.record();
                self.response(pos, &message);
            }
            Some("info" | "error" | "warning") => self.stats.record(),
            other => {
                let other = other.unwrap_or("(none)").to_owned();
                self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message type {other}")
                });
            }
        }
    }
}

impl Session<'_> {
    fn response(&mut self, pos: Pos, message: &Value) {
        self.sink.push(
            pos,
            Item::Turn {
                ids: self.ids.clone(),
                usage: usage(message.get("tokens")),
            },
        );
        let calls = message.get("toolCalls").and_then(Value::as_array);
        let text = parts_text(message.get("content"));
        let has_calls = calls.is_some_and(|c| !c.is_empty());
        let reasoning = thoughts(message.get("thoughts"));
        self.sink
            .push(pos, item::answer(&self.ids, text, reasoning, has_calls));
        let Some(calls) = calls else {
            return;
        };
        let batch = message
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("line-{}", pos.line), str::to_owned);
        for (n, call) in calls.iter().enumerate() {
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .and_then(loopguard::text::non_blank)
                .map_or_else(|| format!("{batch}#{n}"), str::to_owned);
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
            let Some(event) =
                item::call_in_batch(&self.ids, Some(&id), name, args, Some(batch.clone()))
            else {
                self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    "tool call without a name".into()
                });
                continue;
            };
            self.sink.push(pos, event);
            // A call still running when the file was written has no result yet.
            let Some(responses) = call.get("result").and_then(Value::as_array) else {
                continue;
            };
            let text = response_text(responses);
            let mut outcome = OwnedOutcome::Result(item::text_result(&text, None));
            self.rules.judge(
                Format::GeminiCli,
                call,
                &text,
                &mut outcome,
                &mut self.stats,
            );
            self.sink.push(pos, item::result(&self.ids, &id, outcome));
        }
    }
}

/// The text of the function responses: each `response.output` (else `error`, else the
/// response as JSON), joined by newlines.
fn response_text(responses: &[Value]) -> String {
    let texts: Vec<String> = responses
        .iter()
        .filter_map(|r| r.pointer("/functionResponse/response"))
        .map(
            |response| match response.get("output").or_else(|| response.get("error")) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => response.to_string(),
            },
        )
        .collect();
    texts.join("\n")
}

/// Whether a user message's content is tool results (`functionResponse` parts only).
fn carries_results(content: Option<&Value>) -> bool {
    content.and_then(Value::as_array).is_some_and(|parts| {
        !parts.is_empty() && parts.iter().all(|p| p.get("functionResponse").is_some())
    })
}

/// The text of a message's `content`: a string, or its parts' `text` (Gemini's parts have
/// no `type`; thought parts are left out).
fn parts_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("thought") != Some(&Value::Bool(true)))
                .filter(|p| p.get("type").is_none_or(|t| t == "text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        Some(other) => content_text(other),
        None => String::new(),
    }
}

/// The model's thoughts (`[{subject, description}]`) as one text, a line each.
fn thoughts(thoughts: Option<&Value>) -> Option<String> {
    let lines: Vec<String> = thoughts?
        .as_array()?
        .iter()
        .map(|t| {
            let part = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("");
            match (part("subject"), part("description")) {
                ("", d) => d.to_owned(),
                (s, "") => s.to_owned(),
                (s, d) => format!("{s}: {d}"),
            }
        })
        .collect();
    Some(lines.join("\n"))
}

/// `{input, output, cached, thoughts, tool, total}`: `total`, else the sum of the others
/// but `cached` (which `input` includes).
fn usage(tokens: Option<&Value>) -> Option<Usage> {
    let tokens = tokens?;
    let n = |k: &str| tokens.get(k).and_then(Value::as_u64);
    let total = n("total").or_else(|| {
        let parts = ["input", "output", "thoughts", "tool"].map(n);
        parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum())
    })?;
    Some(Usage {
        tokens: total,
        cost: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{read_bytes, read_corpus, Read};
    use loopguard_events::Event;

    fn results(r: &Read) -> Vec<(String, Value)> {
        r.items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(Event::Result {
                    call_id,
                    outcome: OwnedOutcome::Result(v),
                    ..
                }) => Some((call_id.clone().unwrap_or_default(), v.clone())),
                _ => None,
            })
            .collect()
    }

    /// The JSON Lines form as Gemini CLI 0.61.0 writes it (shapes of a real session, with
    /// a rewind, a second prompt, and a last line cut off).
    const LINES: &str = r#"{"sessionId":"g-2","projectHash":"6893","startTime":"2026-12-03T23:25:38.441Z","lastUpdated":"2026-12-03T23:25:38.441Z","kind":"main"}
{"$set":{"messages":[{"id":"c0","timestamp":"t","type":"user","content":[{"text":"<session_context>\nThis is the Gemini CLI.\n</session_context>"}]}],"lastUpdated":"t"}}
{"id":"u1","timestamp":"t","type":"user","content":[{"text":"Why does the build fail?"}]}
{"$set":{"lastUpdated":"t"}}
{"id":"g1","timestamp":"t","type":"gemini","content":"Let me read the build log.","thoughts":[],"tokens":{"input":9000,"output":40,"cached":0,"thoughts":0,"tool":0,"total":9040},"model":"gemini-2.5-flash"}
{"$set":{"lastUpdated":"t"}}
{"id":"g1","timestamp":"t","type":"gemini","content":"Let me read the build log.","thoughts":[],"tokens":{"input":9000,"output":40,"cached":0,"thoughts":0,"tool":0,"total":9040},"model":"gemini-2.5-flash","toolCalls":[{"id":"read_file_1","name":"read_file","args":{"file_path":"build.log"},"result":[{"functionResponse":{"id":"read_file_1","name":"read_file","response":{"output":"error: undefined symbol foo_init\n"}}}],"status":"success"}]}
{"id":"r1","timestamp":"t","type":"user","content":[{"functionResponse":{"id":"read_file_1","name":"read_file","response":{"output":"error: undefined symbol foo_init\n"}}}]}
{"id":"g2","timestamp":"t","type":"gemini","content":"The linker cannot find foo_init.","thoughts":[{"subject":"Reading","description":"the log names the symbol"}],"tokens":{"input":9100,"output":20,"total":9120},"model":"gemini-2.5-flash"}
{"$rewindTo":"g2"}
{"$set":{"messages":[{"id":"c0","type":"user","content":[{"text":"x"}]},{"id":"u1","type":"user","content":[{"text":"y"}]}]}}
{"id":"u2","timestamp":"t","type":"user","content":[{"text":"And how do I fix it?"}]}
{"mystery":1}
{"id":"g3","timestamp":"t","type":"gemini","content":"Add libfoo to the link line."#;

    #[test]
    fn a_subagents_file_names_its_parent() {
        use std::path::Path;
        let at = |p: &str| parent_of(Path::new(p));
        assert_eq!(
            at("/h/.gemini/tmp/p/chats/7fdc30e1-64ef/0a1b.jsonl").as_deref(),
            Some("7fdc30e1-64ef")
        );
        assert_eq!(
            at("/h/.gemini/tmp/p/chats/session-2026-12-03T23-24-7fdc30e1.jsonl"),
            None
        );
        assert_eq!(at("0a1b.jsonl"), None);
        let mut options = ReadOptions::new("0a1b");
        options.parent_session = Some("7fdc30e1-64ef");
        let mut items = Vec::new();
        let child = "{\"sessionId\":\"0a1b\",\"projectHash\":\"h\",\"kind\":\"subagent\"}\n{\"id\":\"m\",\"type\":\"gemini\",\"content\":\"found it\"}\n";
        crate::read(
            Format::GeminiCli,
            std::io::Cursor::new(child.as_bytes()),
            &options,
            &mut items,
        )
        .unwrap();
        let ids: Vec<_> = items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Event(e) => Some(e.ids().clone()),
                _ => None,
            })
            .collect();
        assert!(!ids.is_empty());
        assert!(ids
            .iter()
            .all(|i| i.session == "0a1b" && i.parent_session.as_deref() == Some("7fdc30e1-64ef")));
    }

    #[test]
    fn reads_the_json_lines_form() {
        let r = read_bytes(Format::GeminiCli, LINES.as_bytes(), "file");
        // The answer written twice is read once, in its last version (with its call).
        assert_eq!((r.calls(), r.results()), (1, 1));
        assert_eq!(
            r.call_list(),
            [(
                "read_file_1".into(),
                "read_file".into(),
                json!({"file_path": "build.log"})
            )]
        );
        assert_eq!(
            results(&r)[0].1["content"][0]["text"],
            "error: undefined symbol foo_init\n"
        );
        // The tool results a user message carries start no run; the rewind undoes nothing;
        // the checkpoint's messages were read already.
        assert_eq!(
            r.messages(),
            [
                (
                    Role::User,
                    "<session_context>\nThis is the Gemini CLI.\n</session_context>",
                    None,
                    None
                ),
                (Role::User, "Why does the build fail?", None, None),
                (
                    Role::Assistant,
                    "Let me read the build log.",
                    None,
                    Some(true)
                ),
                (
                    Role::Assistant,
                    "The linker cannot find foo_init.",
                    Some("Reading: the log names the symbol"),
                    Some(false)
                ),
                (Role::User, "And how do I fix it?", None, None),
            ]
        );
        assert!(r.runs().iter().all(|(session, _)| session == "g-2"));
        let tokens: Vec<u64> = r
            .items
            .iter()
            .filter_map(|(_, i)| match i {
                Item::Turn { usage: Some(u), .. } => Some(u.tokens),
                _ => None,
            })
            .collect();
        assert_eq!(tokens, [9040, 9120]);
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.skipped_for(SkipReason::TruncatedLastLine), 1);
        // The pretty-printed document is still read as one.
        let doc = "{\n  \"sessionId\": \"g-3\",\n  \"projectHash\": \"h\",\n  \"messages\": [\n    {\"id\": \"m1\", \"type\": \"user\", \"content\": \"hi\"}\n  ]\n}\n";
        let d = read_bytes(Format::GeminiCli, doc.as_bytes(), "file");
        assert_eq!(d.said(Role::User), ["hi"]);
    }

    #[test]
    fn maps_a_session() {
        let doc = r#"{"sessionId": "g-1", "projectHash": "h", "startTime": "t", "messages": [
  {"id": "m1", "type": "user", "content": [{"text": "fix the header"}]},
  {"id": "m2", "type": "gemini", "content": "", "tokens": {"input": 10, "output": 2, "cached": 5, "total": 17},
   "toolCalls": [
     {"id": "read_file-1-a", "name": "read_file", "args": {"file_path": "a.js"}, "status": "success",
      "result": [{"functionResponse": {"id": "read_file-1-a", "name": "read_file", "response": {"output": "A"}}}]},
     {"id": "replace-2-b", "name": "replace", "args": {"file_path": "a.js"}, "status": "error",
      "result": [{"functionResponse": {"id": "replace-2-b", "name": "replace", "response": {"error": "0 occurrences found"}}}]}]},
  {"id": "m3", "type": "user", "content": "[Function Response: read_many_files] x"},
  {"id": "m4", "type": "info", "content": "Request cancelled."},
  {"id": "m5", "type": "gemini", "content": "done", "toolCalls": [
     {"id": "read_file-3-c", "name": "read_file", "args": {"file_path": "a.js"}, "status": "success",
      "result": [{"functionResponse": {"id": "read_file-3-c", "name": "read_file", "response": {"output": "A"}}}]}]},
  {"id": "m6", "type": "mystery"}
]}"#;
        let r = read_bytes(Format::GeminiCli, doc.as_bytes(), "file");
        assert_eq!((r.calls(), r.results()), (3, 3));
        assert_eq!(r.runs(), vec![("g-1".into(), Some("turn-1".into()))]);
        let results = results(&r);
        assert_eq!(
            results[0].1, results[2].1,
            "identical outputs give identical results whatever the stored ids"
        );
        assert_eq!(results[1].1["isError"], true);
        assert_eq!(results[1].1["content"][0]["text"], "0 occurrences found");
        assert!(matches!(
            r.items[1].1,
            Item::Turn {
                usage: Some(Usage { tokens: 17, .. }),
                ..
            }
        ));
        assert_eq!(
            r.messages(),
            [
                (Role::User, "fix the header", None, None),
                (Role::Assistant, "", None, Some(true)),
                (Role::Assistant, "done", None, Some(true)),
            ]
        );
        assert_eq!(r.stats.skipped_for(SkipReason::UnknownEntryType), 1);
        assert_eq!(r.stats.records, 5);
    }

    /// The labelled re-read loop (labels.json): calls 12–15 and 17–18 read Header.jsx
    /// with identical output, 10 and 16 are failed `replace` calls; 61 calls over 14
    /// user prompts.
    #[test]
    fn corpus_identical_rereads_after_failed_edits() {
        let Some(r) = read_corpus(
            Format::GeminiCli,
            "gemini-cli/session-2026-01-29T16-24-8cc913e9.json",
        ) else {
            return;
        };
        assert_eq!((r.calls(), r.results()), (61, 61));
        // 14 prompts, 11 of them followed by calls.
        assert_eq!(r.runs().len(), 11);
        assert_eq!(r.runs()[10].1.as_deref(), Some("turn-13"));
        assert_eq!(r.runs()[0].0, "8cc913e9-5523-44be-a044-f5d90215d3a7");
        let results = results(&r);
        let text = |n: usize| results[n - 1].1["content"][0]["text"].clone();
        for n in [13, 14, 15, 17, 18] {
            assert_eq!(
                results[n - 1].1,
                results[11].1,
                "call {n} reads what 12 read"
            );
        }
        for n in [10, 16] {
            assert_eq!(results[n - 1].1["isError"], true, "call {n}: {}", text(n));
        }
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }

    /// Text only: 25 prompts, no tool call, every message understood.
    #[test]
    fn corpus_text_only_session() {
        let Some(r) = read_corpus(
            Format::GeminiCli,
            "gemini-cli/session-2026-01-24T19-04-260e1681.json",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 0);
        assert!(r.stats.records > 25);
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
        // 25 prompts (one a bare tool name typed at the prompt), 24 answers in text, each
        // with the model's thoughts.
        assert_eq!(r.said(Role::User).len(), 25);
        let answers: Vec<_> = r
            .messages()
            .into_iter()
            .filter(|m| m.0 == Role::Assistant)
            .collect();
        assert_eq!(answers.len(), 24);
        assert!(answers
            .iter()
            .all(|a| a.3 == Some(false) && a.2.is_some_and(|t| !t.is_empty())));
        assert!(answers[0].1.starts_with("To create a new branch"));
    }

    /// The older record shape: 16 calls, the two cancelled `npm run dev` (8, 16) failed,
    /// the echoed function response is not a prompt.
    #[test]
    fn corpus_older_shape() {
        let Some(r) = read_corpus(
            Format::GeminiCli,
            "gemini-cli/session-2026-01-24T18-09-36e27e8d.json",
        ) else {
            return;
        };
        assert_eq!(r.calls(), 16);
        let results = results(&r);
        for n in [8, 16] {
            assert_eq!(results[n - 1].1["isError"], true, "call {n}");
        }
        assert!(r.stats.skipped.is_empty(), "{:?}", r.stats.skipped);
    }
}

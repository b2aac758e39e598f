//! Golden tests of the readers added for agents' own transcript files (aider, Cline and
//! Roo Code, Goose, OpenCode, Continue): each reads a real public transcript committed
//! under `tests/fixtures/<format>/` (provenance in `tests/fixtures/SOURCES.md`), and the
//! events it makes must be exactly those of the `.events.jsonl` file beside it, which
//! were checked by hand against the transcript. Detection must pick the reader by itself.
//!
//! `LOOPGUARD_BLESS=1 cargo test -p loopguard-transcripts --test golden_readers` rewrites
//! the golden files; review every changed line before committing them.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use loopguard_events::{Event, OwnedOutcome};
use loopguard_transcripts::{detect, read, Detection, Format, Item, Pos, ReadOptions};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Strings cut to this many characters in the golden files (the transcript has them).
const SHOWN: usize = 100;

fn shorten(value: &Value) -> Value {
    match value {
        Value::String(s) if s.chars().count() > SHOWN => {
            let head: String = s.chars().take(SHOWN).collect();
            Value::String(format!("{head}… ({} bytes)", s.len()))
        }
        Value::Array(items) => Value::Array(items.iter().map(shorten).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shorten(v))).collect())
        }
        other => other.clone(),
    }
}

/// The text a result shows: its joined text parts, or the error.
fn result_text(outcome: &OwnedOutcome) -> (bool, String) {
    match outcome {
        OwnedOutcome::Error(Value::String(s)) => (true, s.clone()),
        OwnedOutcome::Error(v) => (true, v.to_string()),
        OwnedOutcome::Result(v) => {
            let failed = v.get("isError") == Some(&Value::Bool(true));
            let text = v
                .get("content")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_else(|| v.to_string());
            (failed, text)
        }
        OwnedOutcome::Nothing => (false, String::new()),
    }
}

/// One line per event: calls with their session, run, tool and arguments; results with
/// whether they failed and the start of their text; compactions; messages with their
/// role, the start of their text and reasoning, and whether they carried calls.
fn render(items: &[(Pos, Item)]) -> String {
    let mut out = String::new();
    for (pos, item) in items {
        let Item::Event(event) = item else { continue };
        let line = match event {
            Event::Call {
                ids,
                call_id,
                tool,
                args,
                batch,
            } => json!({
                "line": pos.line,
                "call": call_id,
                "session": ids.session,
                "run": ids.run,
                "tool": tool,
                "args": shorten(args),
                "batch": batch,
            }),
            Event::Result {
                call_id, outcome, ..
            } => {
                let (failed, text) = result_text(outcome);
                json!({
                    "line": pos.line,
                    "result": call_id,
                    "failed": failed,
                    "text": shorten(&Value::String(text)),
                })
            }
            Event::Compaction { ids } => json!({"line": pos.line, "compaction": ids.session}),
            Event::Usage { ids, usage } => json!({
                "line": pos.line,
                "usage": ids.session,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
            }),
            Event::Message { message, .. } => json!({
                "line": pos.line,
                "message": message.role.as_str(),
                "text": shorten(&Value::String(message.text.clone())),
                "reasoning": message.reasoning.as_ref().map(|r| shorten(&Value::String(r.clone()))),
                "calls": message.has_tool_calls,
            }),
        };
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// Reads `fixture` (detected as `format`) and compares its events with the golden file.
fn golden(fixture: &str, format: Format, hint: &str) {
    let path = fixtures().join(fixture);
    let bytes = std::fs::read(&path).unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        detect(&bytes, Some(name)),
        Detection::Transcript(format),
        "{fixture}: detected"
    );
    let mut items: Vec<(Pos, Item)> = Vec::new();
    let stats = read(
        format,
        Cursor::new(&bytes),
        &ReadOptions::new(hint),
        &mut items,
    )
    .unwrap();
    assert!(stats.skipped.is_empty(), "{fixture}: {:?}", stats.skipped);
    let got = render(&items);
    let golden = path.with_file_name(format!("{name}.events.jsonl"));
    if std::env::var_os("LOOPGUARD_BLESS").is_some() {
        std::fs::write(&golden, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (bless it first)", golden.display()));
    assert_eq!(
        got,
        want,
        "{fixture}: events differ from {}",
        golden.display()
    );
}

/// One session of aider's own chat history (aider's repository): two edits applied, a
/// lint failure, three SEARCH/REPLACE blocks in a row that fail to match
/// `aider/main.py` ("Only 3 reflections allowed, stopping."), then a working edit.
#[test]
fn aider_chat_history() {
    golden(
        "aider/2024-08-07.aider.chat.history.md",
        Format::Aider,
        "2024-08-07",
    );
}

/// The start of a Cline task (native tool calling): one answer asks for four files at
/// once, Cline runs the first and answers "Tool [read_file] was not executed" for the
/// three others, then one read per answer.
#[test]
fn cline_api_conversation_history() {
    golden(
        "cline/1769064454592/api_conversation_history.json",
        Format::Cline,
        "1769064454592",
    );
}

/// The same task's UI log, up to its fifth file read: the reads with the paths Cline
/// showed, and each request's tokens and cost.
#[test]
fn cline_ui_messages() {
    golden(
        "cline-ui/1769064454592/ui_messages.json",
        Format::ClineUi,
        "1769064454592",
    );
}

/// A Continue agent-mode session: glob searches, a terminal command the user canceled
/// (no result), a `read_file` Continue refused ("errored"), user turns in between.
#[test]
fn continue_session() {
    golden(
        "continue/8c3cc493-0ef9-462d-94cd-b5e558b00fe4.json",
        Format::Continue,
        "8c3cc493-0ef9-462d-94cd-b5e558b00fe4",
    );
}

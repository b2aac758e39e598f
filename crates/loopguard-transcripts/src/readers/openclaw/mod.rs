//! OpenClaw session transcripts (pi `SessionManager` JSONL, FORMATS §1).
//!
//! The file is an append-only tree: every entry names its parent, and the conversation is
//! the path from the last entry (the leaf) back to the root. Rewritten or abandoned
//! branches stay in the file, so reading it in file order would count their calls twice.
//! The reader makes two passes: the first collects only `id` and `parentId` (a few bytes
//! per entry) and walks the parent chain from the leaf; the second reads the entries on
//! that path and skips the others ([`SkipReason::OffBranch`]).
//!
//! Mapping:
//!
//! | entry | item |
//! |---|---|
//! | `session` header | the session id (else the file name's) |
//! | `message`, role `user` | a new run (runs are inferred from user messages, FORMATS §1.6) |
//! | `message`, role `assistant` | a [`Item::Turn`] with its `usage`, then one call per `toolCall` block (`id`, `name`, `arguments`) |
//! | `message`, role `toolResult` | the result of call `toolCallId`: `{content, details}`, or an error with the joined text when `isError` is true |
//! | `compaction` | a compaction in the current run |
//! | `custom` with `data.runId` | the real id of the current run ([`Item::RunLabel`]); a different id inside one inferred run starts a new run there |
//! | other known entries | nothing |
//!
//! When the trajectory sidecar's run windows are given, an entry whose timestamp falls in a
//! window names that window's run id in the same way. Results that say `isError: false`
//! but carry `{"status": "error"}` stay results: that is what the runtime hashed too.

mod files;
mod trajectory;

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, Seek, SeekFrom};

use loopguard_events::{Ids, OwnedOutcome};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

pub use files::{classify, sidecar_of, CopyKind, SessionFile};
pub use trajectory::{parse_iso_ms, RunWindows};

use crate::item::{self, Item, Pos, Sink, Usage};
use crate::readers::lines::{self, Line, Lines};
use crate::stats::{ReadStats, SkipReason};
use crate::ReadOptions;

/// OpenClaw's marker for a tool result it shortened in the transcript.
const OMITTED_MARKER: &[u8] = b"middle content omitted";

/// Reads an OpenClaw transcript: two passes over `input` (see the module docs).
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let start = input.stream_position()?;
    let off_branch = off_branch_lines(&mut input, options.max_line)?;
    input.seek(SeekFrom::Start(start))?;
    let mut stats = ReadStats::default();
    let mut reader = Reader::new(options);
    let mut lines = Lines::new(&mut input, options.max_line)?;
    let mut off = off_branch.iter().copied().peekable();
    while let Some(line) = lines.next_line(&mut stats)? {
        while off.next_if(|&l| l < line.pos.line).is_some() {}
        if off.next_if_eq(&line.pos.line).is_some() {
            stats.skip(SkipReason::OffBranch, line.pos.line, String::new);
            continue;
        }
        reader.entry(&line, &mut stats, sink);
    }
    Ok(stats)
}

/// Pass one: the lines of entries that are not on the path from the leaf to the root.
fn off_branch_lines(input: impl BufRead + Seek, max_line: usize) -> io::Result<Vec<u64>> {
    struct Node {
        line: u64,
        parent: Option<u64>,
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut stats = ReadStats::default();
    let mut lines = Lines::new(input, max_line)?;
    while let Some(line) = lines.next_line(&mut stats)? {
        if let Some((id, parent)) = tree_ids(line.bytes) {
            index.insert(id, nodes.len());
            nodes.push(Node {
                line: line.pos.line,
                parent,
            });
        }
    }
    let mut on_path = vec![false; nodes.len()];
    let mut current = nodes.len().checked_sub(1);
    while let Some(i) = current {
        if on_path[i] {
            break; // a cycle: the chain ends here
        }
        on_path[i] = true;
        current = nodes[i].parent.and_then(|p| index.get(&p).copied());
    }
    Ok(nodes
        .iter()
        .zip(on_path)
        .filter(|(_, on)| !on)
        .map(|(n, _)| n.line)
        .collect())
}

/// The (id, parent id) hashes of a tree entry; `None` for the header, for entries without
/// an id (version 1 files), and for lines that do not parse (pass two counts those).
fn tree_ids(line: &[u8]) -> Option<(u64, Option<u64>)> {
    let (kind, id, parent) = match fast_tree_ids(line) {
        Some(found) => found,
        None => {
            #[derive(Deserialize)]
            struct TreeEntry<'a> {
                #[serde(rename = "type", borrow, default)]
                kind: Option<Cow<'a, str>>,
                #[serde(borrow, default)]
                id: Option<Cow<'a, str>>,
                #[serde(rename = "parentId", borrow, default)]
                parent: Option<Cow<'a, str>>,
            }
            let mut scratch = None;
            let (e, _) = lines::parse::<TreeEntry<'_>>(line, &mut scratch).ok()?;
            let kind = e.kind.map(|k| k.as_bytes() == b"session");
            (
                kind.unwrap_or(false),
                e.id.map(|s| hash(s.as_bytes()))?,
                e.parent.map(|s| hash(s.as_bytes())),
            )
        }
    };
    (!kind).then_some((id, parent))
}

/// The common case without a parser: `{"type":"…","id":"…","parentId":"…"|null, …`.
/// Returns (is the header, id hash, parent hash), or `None` to fall back to the parser.
fn fast_tree_ids(line: &[u8]) -> Option<(bool, u64, Option<u64>)> {
    let mut i = 0;
    let (mut kind, mut id, mut parent) = (None, None, None);
    let skip_ws = |i: &mut usize| {
        while line.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    let string = |i: &mut usize| -> Option<&[u8]> {
        if line.get(*i) != Some(&b'"') {
            return None;
        }
        let start = *i + 1;
        let len = memchr::memchr2(b'"', b'\\', &line[start..])?;
        if line[start + len] != b'"' {
            return None;
        }
        *i = start + len + 1;
        Some(&line[start..start + len])
    };
    skip_ws(&mut i);
    if line.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    for _ in 0..3 {
        skip_ws(&mut i);
        let key = string(&mut i)?;
        skip_ws(&mut i);
        if line.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        skip_ws(&mut i);
        let value = if line[i..].starts_with(b"null") {
            i += 4;
            None
        } else {
            Some(string(&mut i)?)
        };
        match key {
            b"type" => kind = Some(value?),
            b"id" => id = Some(value?),
            b"parentId" => parent = Some(value),
            _ => return None,
        }
        skip_ws(&mut i);
        if line.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
    Some((kind? == b"session", hash(id?), parent?.map(hash)))
}

/// FNV-1a: entry ids are short, and only equality matters.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[derive(Deserialize)]
struct Entry<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    timestamp: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<Message<'a>>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(rename = "toolCallId", borrow, default)]
    tool_call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    details: Option<&'a RawValue>,
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawUsage {
    input: Option<f64>,
    output: Option<f64>,
    #[serde(rename = "cacheRead")]
    cache_read: Option<f64>,
    #[serde(rename = "cacheWrite")]
    cache_write: Option<f64>,
    #[serde(rename = "totalTokens")]
    total_tokens: Option<f64>,
    cost: Option<RawCost>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawCost {
    total: Option<f64>,
}

impl RawUsage {
    fn usage(&self) -> Usage {
        let parts = [self.input, self.output, self.cache_read, self.cache_write];
        let sum: f64 = parts.iter().flatten().filter(|v| v.is_finite()).sum();
        let total = self.total_tokens.filter(|t| t.is_finite() && *t > 0.0);
        Usage {
            tokens: total.unwrap_or(sum).max(0.0) as u64,
            cost: self
                .cost
                .as_ref()
                .and_then(|c| c.total)
                .filter(|c| c.is_finite()),
        }
    }
}

/// Pass two's state: the session and the run entries belong to.
struct Reader<'o> {
    options: &'o ReadOptions<'o>,
    ids: Ids,
    runs: u64,
    label: Option<String>,
}

impl<'o> Reader<'o> {
    fn new(options: &'o ReadOptions<'o>) -> Self {
        Self {
            options,
            ids: item::ids(options.session_hint, Some("turn-0")),
            runs: 0,
            label: None,
        }
    }

    fn start_run(&mut self) {
        self.runs += 1;
        self.ids.run = Some(format!("turn-{}", self.runs));
        self.label = None;
    }

    /// A run id named by a side entry or the sidecar.
    fn run_id(&mut self, pos: Pos, id: &str, sink: &mut dyn Sink) {
        match &self.label {
            Some(label) if label == id => return,
            Some(_) => self.start_run(),
            None => {}
        }
        self.label = Some(id.to_owned());
        sink.push(
            pos,
            Item::RunLabel {
                ids: self.ids.clone(),
                label: id.to_owned(),
            },
        );
    }

    fn entry(&mut self, line: &Line<'_>, stats: &mut ReadStats, sink: &mut dyn Sink) {
        let mut scratch = None;
        let Some(entry) = lines::entry::<Entry<'_>>(line, &mut scratch, stats) else {
            return;
        };
        let pos = line.pos;
        let kind = entry.kind.as_deref().unwrap_or("");
        if kind == "message" {
            let user = entry
                .message
                .as_ref()
                .is_some_and(|m| m.role.as_deref() == Some("user"));
            if user {
                self.start_run();
            }
        }
        if let (Some(windows), Some(ts)) = (self.options.run_windows, entry.timestamp) {
            let ms = serde_json::from_str::<Cow<'_, str>>(ts.get())
                .ok()
                .and_then(|t| parse_iso_ms(&t));
            if let Some(run) = ms.and_then(|ms| windows.run_at(ms)) {
                self.run_id(pos, run, sink);
            }
        }
        match kind {
            "message" => match entry.message {
                Some(message) => self.message(pos, message, stats, sink),
                None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    "message entry without message".into()
                }),
            },
            "session" => {
                let id = entry
                    .id
                    .and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok());
                let session = id.as_deref().unwrap_or(self.options.session_hint);
                self.ids = item::ids(session, Some("turn-0"));
                self.runs = 0;
                self.label = None;
            }
            "compaction" => sink.push(pos, item::compaction(&self.ids)),
            "custom" => {
                #[derive(Deserialize)]
                struct Data<'a> {
                    #[serde(rename = "runId", borrow, default)]
                    run_id: Option<Cow<'a, str>>,
                }
                let run = entry
                    .data
                    .and_then(|d| serde_json::from_str::<Data<'_>>(d.get()).ok())
                    .and_then(|d| d.run_id);
                if let Some(run) = run.as_deref().and_then(loopguard::text::non_blank) {
                    self.run_id(pos, run, sink);
                }
            }
            "model_change"
            | "thinking_level_change"
            | "custom_message"
            | "label"
            | "session_info"
            | "branch_summary" => {}
            other => {
                stats.skip(SkipReason::UnknownEntryType, pos.line, || other.to_owned());
                return;
            }
        }
        if kind != "message" {
            stats.record();
        }
    }

    fn message(
        &mut self,
        pos: Pos,
        message: Message<'_>,
        stats: &mut ReadStats,
        sink: &mut dyn Sink,
    ) {
        let known = matches!(
            message.role.as_deref(),
            Some(
                "assistant"
                    | "toolResult"
                    | "user"
                    | "custom"
                    | "bashExecution"
                    | "compactionSummary"
                    | "branchSummary"
                    | "hookMessage"
                    | "system"
            )
        );
        if known {
            stats.record();
        }
        match message.role.as_deref() {
            Some("assistant") => {
                let usage = message
                    .usage
                    .and_then(|u| serde_json::from_str::<RawUsage>(u.get()).ok())
                    .map(|u| u.usage());
                sink.push(
                    pos,
                    Item::Turn {
                        ids: self.ids.clone(),
                        usage,
                    },
                );
                let Some(content) = message.content else {
                    return;
                };
                let Ok(blocks) = serde_json::from_str::<Vec<Block<'_>>>(content.get()) else {
                    return;
                };
                for (n, block) in blocks.into_iter().enumerate() {
                    if block.kind.as_deref() != Some("toolCall") {
                        continue;
                    }
                    let args = match block.arguments.map(|a| serde_json::from_str(a.get())) {
                        Some(Ok(Value::String(text))) => item::args_from_text(&text),
                        Some(Ok(value)) => value,
                        Some(Err(_)) | None => Value::Object(serde_json::Map::new()),
                    };
                    let synthesized;
                    let id = match block.id.as_deref().and_then(loopguard::text::non_blank) {
                        Some(id) => id,
                        None => {
                            synthesized = format!("line-{}#{n}", pos.line);
                            &synthesized
                        }
                    };
                    let name = block.name.as_deref().unwrap_or("");
                    // The calls of one assistant message (one line) form one batch.
                    let batch = Some(format!("line-{}", pos.line));
                    match item::call_in_batch(&self.ids, Some(id), name, args, batch) {
                        Some(call) => sink.push(pos, call),
                        None => stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "toolCall without a name".into()
                        }),
                    }
                }
            }
            Some("toolResult") => {
                let Some(call_id) = message
                    .tool_call_id
                    .as_deref()
                    .and_then(loopguard::text::non_blank)
                else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "toolResult without toolCallId".into()
                    });
                    return;
                };
                let raw_content = message.content.map(RawValue::get).unwrap_or("null");
                if memchr::memmem::find(raw_content.as_bytes(), OMITTED_MARKER).is_some() {
                    stats.truncated_results += 1;
                }
                let content: Value = serde_json::from_str(raw_content).unwrap_or(Value::Null);
                let details: Option<Value> = message
                    .details
                    .and_then(|d| serde_json::from_str(d.get()).ok());
                let outcome = if message.is_error == Some(true) {
                    stats.failure("isError");
                    let text = joined_text(&content);
                    OwnedOutcome::Error(if text.is_empty() {
                        details.unwrap_or(Value::Null)
                    } else {
                        Value::String(text)
                    })
                } else {
                    let mut result = serde_json::Map::with_capacity(2);
                    result.insert("content".into(), content);
                    if let Some(details) = details {
                        result.insert("details".into(), details);
                    }
                    OwnedOutcome::Result(Value::Object(result))
                };
                sink.push(pos, item::result(&self.ids, call_id, outcome));
            }
            Some(
                "user" | "custom" | "bashExecution" | "compactionSummary" | "branchSummary"
                | "hookMessage" | "system",
            ) => {}
            other => {
                let role = other.unwrap_or("(none)").to_owned();
                stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                    format!("message role {role}")
                });
            }
        }
    }
}

/// The `text` of every `{type: "text", text}` element of `content`, joined by newlines
/// (a string content is its own text).
pub(crate) fn joined_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;

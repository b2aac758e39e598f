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
//! | `message`, role `user` | a new run (runs are inferred from user messages, FORMATS §1.6), and its prompt |
//! | `message`, role `assistant` | a [`Item::Turn`] with its `usage`, the model's answer (its `text` blocks, its `thinking` blocks as reasoning; none for a failed model call, `stopReason: "error"`), then one call per `toolCall` block (`id`, `name`, `arguments`) |
//! | `message`, role `toolResult` | the result of call `toolCallId`: `{content, details}`, or an error with the joined text when `isError` is true |
//! | `compaction` | a compaction in the current run |
//! | `custom` with `data.runId` | the real id of the current run ([`Item::RunLabel`]); a different id inside one inferred run starts a new run there |
//! | other known entries | nothing |
//!
//! When the trajectory sidecar's run windows are given, an entry whose timestamp falls in a
//! window names that window's run id in the same way. Results that say `isError: false`
//! but carry `{"status": "error"}` stay results: that is what the runtime hashed too.

pub mod database;
mod files;
mod spawns;
mod trajectory;

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, BufRead, Seek, SeekFrom};

use loopguard::json::{Json, Kind, Object, Raw, RawObject, Str, Tape};
use loopguard::{OutcomeOf, Role};
use loopguard_events::{EventRef, Ids};
use serde::Deserialize;

pub use files::{classify, sidecar_of, store_of, CopyKind, SessionFile, SessionStore};
pub use spawns::{read_spawns, spawns_of};
pub use trajectory::{parse_iso_ms, RunWindows};

use crate::item::{self, AnswerParts, Item, Pos, Sink, Usage};
use crate::json_ref::{joined_text, opt_bool, opt_f64, opt_str, pick, JsonRef};
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
    let mut lines = Lines::with_options(&mut input, options)?;
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

/// An entry's members the reader uses (FORMATS §1), read in place from the line's tape.
struct Entry<'a> {
    kind: Option<&'a str>,
    id: Option<Raw<'a>>,
    timestamp: Option<Raw<'a>>,
    message: Option<Message<'a>>,
    data: Option<Raw<'a>>,
}

impl<'a> Entry<'a> {
    /// The entry, or why its members do not have the types the format gives them.
    fn read(object: RawObject<'a>) -> Result<Self, String> {
        let [kind, id, timestamp, message, data] =
            pick(object, ["type", "id", "timestamp", "message", "data"]);
        let message = match message.map(Json::kind) {
            None | Some(Kind::Null) => None,
            Some(Kind::Object(m)) => Some(Message::read(m)?),
            Some(_) => return Err("message must be an object".into()),
        };
        Ok(Self {
            kind: opt_str(kind, "type")?,
            id,
            timestamp,
            message,
            data,
        })
    }
}

struct Message<'a> {
    role: Option<&'a str>,
    content: Option<Raw<'a>>,
    tool_call_id: Option<&'a str>,
    details: Option<Raw<'a>>,
    is_error: Option<bool>,
    usage: Option<Raw<'a>>,
    /// `error`: the model call failed (the content is OpenClaw's placeholder).
    stop_reason: Option<&'a str>,
}

impl<'a> Message<'a> {
    fn read(object: RawObject<'a>) -> Result<Self, String> {
        let [role, content, tool_call_id, details, is_error, usage, stop_reason] = pick(
            object,
            [
                "role",
                "content",
                "toolCallId",
                "details",
                "isError",
                "usage",
                "stopReason",
            ],
        );
        Ok(Self {
            role: opt_str(role, "role")?,
            content: content.filter(|c| !c.is_null()),
            tool_call_id: opt_str(tool_call_id, "toolCallId")?,
            details: details.filter(|d| !d.is_null()),
            is_error: opt_bool(is_error, "isError")?,
            usage,
            stop_reason: opt_str(stop_reason, "stopReason").ok().flatten(),
        })
    }
}

/// A `toolCall` block of an assistant message's content.
struct Block<'a> {
    kind: Option<&'a str>,
    id: Option<&'a str>,
    name: Option<&'a str>,
    arguments: Option<Raw<'a>>,
}

impl<'a> Block<'a> {
    /// The blocks of `content`; `None` when it is not an array of blocks, every one an
    /// object whose `type`, `id` and `name` are strings when present.
    fn all(content: Raw<'a>) -> Option<impl Iterator<Item = Block<'a>>> {
        let items = content.as_array()?;
        let block = |item: Raw<'a>| {
            let [kind, id, name, arguments] =
                pick(item.as_object()?, ["type", "id", "name", "arguments"]);
            Some(Block {
                kind: opt_str(kind, "").ok()?,
                id: opt_str(id, "").ok()?,
                name: opt_str(name, "").ok()?,
                arguments: arguments.filter(|a| !a.is_null()),
            })
        };
        items
            .clone()
            .all(|item| block(item).is_some())
            .then(|| items.filter_map(block))
    }
}

/// A response's token usage: `{input, output, cacheRead, cacheWrite, totalTokens, cost:
/// {total}}`, numbers or `null` each; anything else is no usage.
fn usage(raw: Raw<'_>) -> Option<Usage> {
    let [input, output, cache_read, cache_write, total, cost] = pick(
        raw.as_object()?,
        [
            "input",
            "output",
            "cacheRead",
            "cacheWrite",
            "totalTokens",
            "cost",
        ],
    );
    let parts = [
        opt_f64(input).ok()?,
        opt_f64(output).ok()?,
        opt_f64(cache_read).ok()?,
        opt_f64(cache_write).ok()?,
    ];
    let total = opt_f64(total).ok()?;
    let cost = match cost.map(Json::kind) {
        None | Some(Kind::Null) => None,
        Some(Kind::Object(cost)) => opt_f64(cost.get("total")).ok()?,
        Some(_) => return None,
    };
    let sum: f64 = parts.iter().flatten().filter(|v| v.is_finite()).sum();
    let total = total.filter(|t| t.is_finite() && *t > 0.0);
    Some(Usage {
        tokens: total.unwrap_or(sum).max(0.0) as u64,
        cost: cost.filter(|c| c.is_finite()),
    })
}

/// Pass two's state: the session and the run entries belong to, and the buffers lines
/// are read into.
struct Reader<'o> {
    options: &'o ReadOptions<'o>,
    ids: Ids,
    runs: u64,
    label: Option<String>,
    /// The line's tokens, and those of arguments given as JSON text.
    tape: Tape,
    args_tape: Tape,
}

/// The ids of `session`'s first run, with the parent the session store names.
fn session_ids(options: &ReadOptions<'_>, session: &str) -> Ids {
    let mut ids = item::ids(session, Some("turn-0"));
    ids.parent_session = options.parent_session.map(str::to_owned);
    // A parent run needs its parent session.
    ids.parent_run = options
        .parent_session
        .and(options.parent_run)
        .map(str::to_owned);
    ids
}

impl<'o> Reader<'o> {
    fn new(options: &'o ReadOptions<'o>) -> Self {
        Self {
            options,
            ids: session_ids(options, options.session_hint),
            runs: 0,
            label: None,
            tape: Tape::new(),
            args_tape: Tape::new(),
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
        let mut tape = std::mem::take(&mut self.tape);
        let mut scratch = None;
        if let Some(object) = lines::object(line, &mut tape, &mut scratch, stats) {
            match Entry::read(object) {
                Ok(entry) => self.apply(line.pos, entry, stats, sink),
                Err(e) => stats.skip(SkipReason::MalformedEntry, line.pos.line, || e),
            }
        }
        self.tape = tape;
    }

    fn apply(&mut self, pos: Pos, entry: Entry<'_>, stats: &mut ReadStats, sink: &mut dyn Sink) {
        let kind = entry.kind.unwrap_or("");
        if kind == "message" {
            let user = entry
                .message
                .as_ref()
                .is_some_and(|m| m.role == Some("user"));
            if user {
                self.start_run();
            }
        }
        if let (Some(windows), Some(ts)) = (self.options.run_windows, entry.timestamp) {
            let ms = ts.as_str().and_then(parse_iso_ms);
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
                let id = entry.id.and_then(Json::as_str);
                let session = id.unwrap_or(self.options.session_hint);
                self.ids = session_ids(self.options, session);
                self.runs = 0;
                self.label = None;
            }
            "compaction" => sink.push(pos, item::compaction(&self.ids)),
            "custom" => {
                let run = entry
                    .data
                    .and_then(Json::as_object)
                    .and_then(|d| opt_str(d.get("runId"), "runId").ok().flatten());
                if let Some(run) = run.and_then(loopguard::text::non_blank) {
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
            message.role,
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
        match message.role {
            Some("assistant") => {
                sink.push(
                    pos,
                    Item::Turn {
                        ids: self.ids.clone(),
                        usage: message.usage.and_then(usage),
                    },
                );
                // A failed model call is no answer: its text is OpenClaw's placeholder.
                let failed = message.stop_reason == Some("error");
                if let Some(content) = message.content.filter(|_| !failed) {
                    let mut said = AnswerParts::new(pos, &self.ids);
                    add_blocks(&mut said, content);
                    said.emit(sink);
                }
                let Some(blocks) = message.content.and_then(Block::all) else {
                    return;
                };
                // The calls of one assistant message (one line) form one batch.
                let batch = format!("line-{}", pos.line);
                for (n, block) in blocks.enumerate() {
                    if block.kind != Some("toolCall") {
                        continue;
                    }
                    let Some(tool) = block.name.and_then(loopguard::text::non_blank) else {
                        stats.skip(SkipReason::MalformedEntry, pos.line, || {
                            "toolCall without a name".into()
                        });
                        continue;
                    };
                    let synthesized;
                    let id = match block.id.and_then(loopguard::text::non_blank) {
                        Some(id) => id,
                        None => {
                            synthesized = format!("{batch}#{n}");
                            &synthesized
                        }
                    };
                    let args = match block.arguments {
                        // Arguments given as JSON text (some providers): read in turn.
                        Some(args) => match args.as_str() {
                            Some(text) => match self.args_tape.parse(text) {
                                Ok(parsed) => Some(JsonRef::Raw(parsed)),
                                Err(_) => {
                                    // Not JSON: the owned form stands in (`{"raw": text}`).
                                    let args = item::args_from_text(text);
                                    let batch = Some(batch.clone());
                                    let call =
                                        item::call_in_batch(&self.ids, Some(id), tool, args, batch);
                                    if let Some(call) = call {
                                        sink.push(pos, call);
                                    }
                                    continue;
                                }
                            },
                            None => Some(JsonRef::Raw(args)),
                        },
                        None => None,
                    };
                    let event = EventRef::Call {
                        ids: self.ids.as_ref(),
                        call_id: Some(id),
                        tool,
                        args,
                        batch: Some(&batch),
                    };
                    sink.push_event(pos, &event);
                }
            }
            Some("toolResult") => {
                let Some(call_id) = message.tool_call_id.and_then(loopguard::text::non_blank)
                else {
                    stats.skip(SkipReason::MalformedEntry, pos.line, || {
                        "toolResult without toolCallId".into()
                    });
                    return;
                };
                if message.content.is_some_and(omitted) {
                    stats.truncated_results += 1;
                }
                let joined;
                let outcome = if message.is_error == Some(true) {
                    stats.failure("isError");
                    joined = message.content.map(joined_text).unwrap_or_default();
                    OutcomeOf::Error(match (joined.is_empty(), message.details) {
                        (false, _) => JsonRef::Text(&joined),
                        (true, Some(details)) => JsonRef::Raw(details),
                        (true, None) => JsonRef::Null,
                    })
                } else {
                    OutcomeOf::Result(JsonRef::ToolResult {
                        content: message.content,
                        details: message.details,
                    })
                };
                let event = EventRef::Result {
                    ids: self.ids.as_ref(),
                    call_id: Some(call_id),
                    tool: None,
                    args: None,
                    outcome,
                };
                sink.push_event(pos, &event);
            }
            Some("user") => {
                let text = message.content.map(joined_text).unwrap_or_default();
                sink.push(pos, item::said(&self.ids, Role::User, text));
            }
            Some(
                "custom" | "bashExecution" | "compactionSummary" | "branchSummary" | "hookMessage"
                | "system",
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

/// Adds an assistant message's content to its answer: a string, or its `text` blocks,
/// `thinking` blocks as reasoning, and whether a `toolCall` block came.
fn add_blocks(answer: &mut AnswerParts, content: Raw<'_>) {
    if let Some(text) = content.as_str() {
        answer.add_text(text);
        return;
    }
    let Some(blocks) = content.as_array() else {
        return;
    };
    for block in blocks {
        let field = |k: &str| block.get(k).and_then(Json::as_str).unwrap_or("");
        match field("type") {
            "text" => answer.add_text(field("text")),
            "thinking" => answer.add_reasoning(field("thinking")),
            "toolCall" => answer.calls = true,
            _ => {}
        }
    }
}

/// Whether a result's content carries OpenClaw's marker of a shortened result: in its
/// text, or in the text of one of its blocks.
fn omitted(content: Raw<'_>) -> bool {
    let found = |s: Option<Str<'_>>| {
        s.is_some_and(|s| memchr::memmem::find(s.as_bytes(), OMITTED_MARKER).is_some())
    };
    match content.kind() {
        Kind::String(s) => found(Some(s)),
        Kind::Array(mut items) => items.any(|item| match item.kind() {
            Kind::String(s) => found(Some(s)),
            _ => found(item.get("text").and_then(Json::as_string)),
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests;

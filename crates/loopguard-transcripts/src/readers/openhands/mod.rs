//! OpenHands, every generation and every container it writes (FORMATS §8, §14.2, §14.3).
//!
//! Two generations of events, told apart per event:
//!
//! - **V0** (`openhands` up to 0.x): `{id, source, action | observation, args | content,
//!   extras, cause, tool_call_metadata}`; see [`v0`].
//! - **V1** (software-agent-sdk): `{kind: ActionEvent | ObservationEvent | MessageEvent |
//!   …, id, source, tool_name, tool_call_id, …}`; see [`v1`].
//!
//! Four containers, told apart by the file:
//!
//! | container | session |
//! |---|---|
//! | a JSON array of events (`traj_*.json`, the V0 trajectories) | the file name |
//! | a state wrapper `{instance_id, history: [events], …}` | `instance_id` |
//! | JSON Lines, one instance per line `{instance_id \| question_id, history, …}` (evaluation `output.jsonl`; `history` holds events, or V0 `[action, observation]` pairs) | the line's id, else `<file>#<line>` |
//! | a conversation directory `<id>/event_service/{base_state.json, events/event-NNNNN-<uuid>.json}` ([`read_conversation`]) | the directory name |
//!
//! JSON Lines of single events are read too (each line one event of the file's session). A
//! `history` entry that is neither an event nor a pair (some benchmark outputs store Python
//! `repr` strings) is counted as malformed. One instance, or one document, is in memory at a
//! time; a conversation directory is read one event file at a time.

pub mod v0;
pub mod v1;

use std::collections::HashMap;
use std::fs;
use std::io::{self, BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use loopguard_events::Ids;
use serde_json::Value;

use crate::failures::FailureRules;
use crate::item::{self, Item, Pos, Sink};
use crate::readers::lines::{self, Lines};
use crate::readers::walk::{self, Seg, Walker, Want};
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Calls remembered per session for pairing; beyond it the map starts over (results of
/// forgotten calls then count as orphans, never as another call's).
const MAX_CALLS: usize = 1 << 16;

/// One session being read: its ids and the calls waiting for their observation.
pub(crate) struct Session<'a> {
    ids: Ids,
    runs: u64,
    /// Pairing key (V1: the action event's `id` and its `tool_call_id`; V0: the action
    /// event's `id`) → the call id the call was given.
    calls: HashMap<String, String>,
    /// The model response of the last call (V1 `llm_response_id`, V0
    /// `model_response.id`): a new one is a new [`Item::Turn`].
    response: Option<String>,
    rules: &'a FailureRules,
    stats: ReadStats,
}

impl<'a> Session<'a> {
    fn new(session: &str, rules: &'a FailureRules) -> Self {
        Self {
            ids: item::ids(session, Some("turn-0")),
            runs: 0,
            calls: HashMap::new(),
            response: None,
            rules,
            stats: ReadStats::default(),
        }
    }

    /// A user message: a new run.
    fn start_run(&mut self) {
        self.runs += 1;
        self.ids.run = Some(format!("turn-{}", self.runs));
        self.response = None;
    }

    /// A model response begins when `response` is new (or unknown); returns whether one
    /// did.
    fn turn(&mut self, pos: Pos, response: Option<String>, sink: &mut dyn Sink) -> bool {
        if response.is_none() || response != self.response {
            self.response = response;
            sink.push(
                pos,
                Item::Turn {
                    ids: self.ids.clone(),
                    usage: None,
                },
            );
            return true;
        }
        false
    }

    /// Remembers a call under its pairing keys.
    fn expect(&mut self, keys: &[&str], call_id: &str) {
        if self.calls.len() >= MAX_CALLS {
            self.calls.clear();
        }
        for key in keys {
            self.calls.insert((*key).to_owned(), call_id.to_owned());
        }
    }

    /// The call a result answers, by the first of `keys` that names one; every key of
    /// that call is forgotten.
    fn answer(&mut self, keys: &[Option<&str>]) -> Option<String> {
        let id = keys
            .iter()
            .flatten()
            .find_map(|k| self.calls.get(*k).cloned())?;
        self.calls.retain(|_, v| *v != id);
        Some(id)
    }

    /// Any event: V1 (`kind`), V0 (`action` / `observation`), or a V0 pair.
    fn event(&mut self, pos: Pos, event: &Value, sink: &mut dyn Sink) {
        match event {
            Value::Object(map) if map.contains_key("kind") => v1::event(self, pos, event, sink),
            Value::Object(map) if map.contains_key("action") || map.contains_key("observation") => {
                v0::event(self, pos, event, None, sink);
            }
            Value::Array(pair) if pair.len() == 2 && pair.iter().all(Value::is_object) => {
                v0::pair(self, pos, &pair[0], &pair[1], sink)
            }
            Value::Object(_) => self.stats.skip(SkipReason::UnknownEntryType, pos.line, || {
                "event without kind, action or observation".into()
            }),
            Value::String(s) => {
                let s: String = s.chars().take(40).collect();
                self.stats.skip(SkipReason::MalformedEntry, pos.line, || {
                    format!("history entry that is a string, not an event: {s}")
                })
            }
            _ => self.stats.skip(SkipReason::NotAnObject, pos.line, || {
                "event that is not an object".into()
            }),
        }
    }
}

/// Reads OpenHands events from a file: an event array, a state wrapper, or JSON Lines of
/// instances or events.
pub fn read<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let start = input.stream_position()?;
    let jsonl = lines::is_json_lines(&mut input, options.max_line)?;
    input.seek(SeekFrom::Start(start))?;
    if jsonl {
        read_lines(input, options, sink)
    } else {
        read_document(input, options, sink)
    }
}

fn read_lines<R: BufRead + Seek>(
    input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut lines = Lines::with_options(input, options)?;
    // Lines that are single events belong to the file's session.
    let mut loose = Session::new(options.session_hint, options.failures);
    while let Some(line) = lines.next_line(&mut stats)? {
        let mut scratch = None;
        let Some(value) = lines::entry::<Value>(&line, &mut scratch, &mut stats) else {
            continue;
        };
        let pos = line.pos;
        match value.get("history") {
            Some(Value::Array(history)) => {
                let name = instance_id(&value)
                    .unwrap_or_else(|| format!("{}#{}", options.session_hint, pos.line));
                let mut session = Session::new(&name, options.failures);
                session.stats.record();
                for event in history {
                    session.event(pos, event, sink);
                }
                stats.absorb(session.stats);
            }
            _ => loose.event(pos, &value, sink),
        }
    }
    stats.absorb(loose.stats);
    Ok(stats)
}

/// The id of an evaluation instance: `instance_id`, else `question_id` (gorilla), else
/// `id`.
fn instance_id(instance: &Value) -> Option<String> {
    ["instance_id", "question_id", "id"]
        .iter()
        .find_map(|k| match instance.get(*k)? {
            Value::String(s) => loopguard::text::non_blank(s).map(str::to_owned),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

fn read_document<R: BufRead + Seek>(
    mut input: R,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
) -> io::Result<ReadStats> {
    let start = input.stream_position()?;
    let root_object = first_byte(&mut input)? == Some(b'{');
    input.seek(SeekFrom::Start(start))?;
    let mut name = options.session_hint.to_owned();
    let mut single_event = false;
    if root_object {
        let members = walk::root_members(
            &mut input,
            &[
                "instance_id",
                "question_id",
                "id",
                "kind",
                "action",
                "observation",
            ],
        )?;
        input.seek(SeekFrom::Start(start))?;
        single_event = members
            .iter()
            .any(|(k, _)| matches!(k.as_str(), "kind" | "action" | "observation"));
        if !single_event {
            let found: serde_json::Map<String, Value> = members.into_iter().collect();
            if let Some(id) = instance_id(&Value::Object(found)) {
                name = id;
            }
        }
    }
    let mut walker = Document {
        session: Session::new(&name, options.failures),
        single_event,
        sink,
    };
    let mut stats = ReadStats::default();
    walk::walk(input, &mut walker, &mut stats)?;
    stats.absorb(walker.session.stats);
    Ok(stats)
}

fn first_byte<R: BufRead>(input: &mut R) -> io::Result<Option<u8>> {
    loop {
        let chunk = input.fill_buf()?;
        if chunk.is_empty() {
            return Ok(None);
        }
        match chunk
            .iter()
            .position(|b| !b.is_ascii_whitespace() && !matches!(b, 0xEF | 0xBB | 0xBF))
        {
            Some(i) => return Ok(Some(chunk[i])),
            None => {
                let n = chunk.len();
                input.consume(n);
            }
        }
    }
}

/// The walk of a whole document: an event array, a state wrapper, or one event.
struct Document<'a> {
    session: Session<'a>,
    single_event: bool,
    sink: &'a mut dyn Sink,
}

impl Walker for Document<'_> {
    fn want(&mut self, path: &[Seg]) -> Want {
        match path {
            [] if self.single_event => Want::Whole,
            [] => Want::Descend,
            [Seg::Index(_)] => Want::Whole,
            [Seg::Key(k)] if k == "history" => {
                self.session.stats.record();
                Want::Descend
            }
            [Seg::Key(k), Seg::Index(_)] if k == "history" => Want::Whole,
            _ => Want::Skip,
        }
    }

    fn whole(&mut self, _path: &[Seg], pos: Pos, value: Value) {
        self.session.event(pos, &value, self.sink);
    }
}

/// The conversation directory `path` names, if it is one (or one of its `event_service`
/// or `events` folders): the folder holding `event_service/events/`.
pub fn conversation_root(path: &Path) -> Option<PathBuf> {
    let is_events = |p: &Path| p.join("event_service").join("events").is_dir();
    if is_events(path) {
        return Some(path.to_owned());
    }
    let name = path.file_name().and_then(|n| n.to_str());
    match name {
        Some("event_service") if path.join("events").is_dir() => path.parent().map(Path::to_owned),
        Some("events") => {
            let service = path.parent()?;
            (service.file_name()? == "event_service")
                .then(|| service.parent().map(Path::to_owned))
                .flatten()
        }
        _ => None,
    }
}

/// The event files of a conversation directory, in event order (their zero-padded
/// number), with their sizes.
pub fn conversation_events(root: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(root.join("event_service").join("events"))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("event-") && name.ends_with(".json") {
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            files.push((entry.path(), size));
        }
    }
    files.sort();
    Ok(files)
}

/// Reads a conversation directory (`root` as [`conversation_root`] gives it): one session
/// named after the directory; each event file is one "line" (its position in event order,
/// from 1). `progress` is told the bytes of each file read.
pub fn read_conversation(
    root: &Path,
    options: &ReadOptions<'_>,
    sink: &mut dyn Sink,
    progress: &mut dyn FnMut(u64),
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let events = conversation_events(root)?;
    let mut session = Session::new(options.session_hint, options.failures);
    for (n, (path, size)) in events.iter().enumerate() {
        let line = n as u64 + 1;
        stats.lines = line;
        if *size > options.max_line as u64 {
            let max = options.max_line;
            session.stats.skip(SkipReason::LineTooLong, line, || {
                format!("{}: {size} bytes, limit {max}", path.display())
            });
            progress(*size);
            continue;
        }
        let bytes = fs::read(path)?;
        stats.bytes += bytes.len() as u64;
        progress(bytes.len() as u64);
        let mut scratch = None;
        match lines::parse::<Value>(&bytes, &mut scratch) {
            Ok((event, repaired)) => {
                session.stats.repaired += u64::from(repaired);
                session.event(Pos::new(line, 0), &event, sink);
            }
            Err(e) => {
                let file = path.file_name().map(|n| n.to_string_lossy().into_owned());
                let reason = if e.is_eof() {
                    SkipReason::TruncatedLastLine
                } else {
                    SkipReason::InvalidJson
                };
                session.stats.skip(reason, line, || {
                    format!("{}: {e}", file.unwrap_or_default())
                });
            }
        }
    }
    stats.absorb(session.stats);
    Ok(stats)
}

#[cfg(test)]
mod tests;

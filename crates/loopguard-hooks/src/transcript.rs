//! What the model said and spent, from the tail of the agent's session transcript.
//!
//! A hook payload carries the tool call, not the model response around it; Claude Code
//! names the session transcript (`transcript_path`) in every payload, and writes each API
//! response to it (its text, its thinking, its `usage`, its model and id) before it runs the
//! response's calls. At each hook event that reads the tail ([`HookEvent::reads_tail`]),
//! the hook reads what was appended since the last one, with the crate's transcript reader
//! (`loopguard-transcripts`, the one `scan` uses), and hands the engine one usage event per
//! API response and one message event per answer: budgets count what the run spends, the
//! detectors of messages judge what it says, and a run they stop has its next call blocked.
//!
//! Where the last read stopped is kept per session in the hook's database ([`Mark`]):
//!
//! - only whole lines are read: a last line still being written is left for the next event;
//! - the answer of the last response in the file may still grow (a response is written one
//!   content block per line): unless the event says the model has finished (`Stop`), that
//!   answer is left for the next event, and the mark stays at its first line. Its usage is
//!   sent now (under the response id, so the second read counts nothing);
//! - a file that is shorter than the mark, or whose bytes before the mark changed (a
//!   rewritten or rotated file), and a session whose transcript is another file, are read
//!   from the start: usage and answers carry the response id, so what was counted before
//!   is not counted again;
//! - at most [`MAX_TAIL_BYTES`] are read per event; the rest waits for the next one.
//!
//! [`HookEvent::reads_tail`]: crate::mapping::HookEvent::reads_tail

use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use loopguard::Role;
use loopguard_events::Event;
use loopguard_transcripts::{Format, Item, Pos, ReadOptions};

/// Most bytes of a transcript read at one hook event (16 MiB).
pub const MAX_TAIL_BYTES: u64 = 16 << 20;

/// Bytes before the mark whose digest tells a file that was rewritten.
const CHECK_BYTES: u64 = 256;

/// Where the last read of a session's transcript stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The transcript file, as the payload names it.
    pub path: String,
    /// The byte offset the next read starts at (the start of a line).
    pub offset: u64,
    /// A digest of the bytes before `offset` (up to 256, `CHECK_BYTES`).
    pub check: u64,
}

/// What one read of a transcript's tail found.
#[derive(Debug, Default)]
pub struct Tail {
    /// Usage and message events of the session (not of its subagents), in file order.
    pub events: Vec<Event>,
    /// Where the next read starts.
    pub mark: Option<Mark>,
    /// Bytes read.
    pub bytes: u64,
}

/// The digest of the bytes of `file` before `offset` (up to [`CHECK_BYTES`]).
fn check_at(file: &mut File, offset: u64) -> io::Result<u64> {
    let from = offset.saturating_sub(CHECK_BYTES);
    let mut buf = Vec::with_capacity(CHECK_BYTES as usize);
    file.seek(SeekFrom::Start(from))?;
    file.by_ref().take(offset - from).read_to_end(&mut buf)?;
    Ok(xxhash_rust::xxh3::xxh3_64(&buf))
}

/// Where a read of `path` starts given the session's `mark`: the mark when it is still
/// good, else the start of the file.
fn start(file: &mut File, len: u64, path: &str, mark: Option<&Mark>) -> io::Result<u64> {
    match mark {
        Some(m) if m.path == path && m.offset <= len && check_at(file, m.offset)? == m.check => {
            Ok(m.offset)
        }
        _ => Ok(0),
    }
}

/// The mark at the end of the last whole line of `path`: what a session that starts (or
/// resumes) has already said is not its current run's doing.
pub fn mark_at_end(path: &str) -> io::Result<Mark> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut offset = len;
    let mut buf = vec![0; 64 << 10];
    while offset > 0 {
        let from = offset.saturating_sub(buf.len() as u64);
        let n = (offset - from) as usize;
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            offset = from + i as u64 + 1;
            break;
        }
        offset = from;
    }
    // Past a line of no newline for the whole file: nothing whole yet.
    let end = if len > 0 && offset == 0 { 0 } else { offset };
    let check = check_at(&mut file, end)?;
    Ok(Mark {
        path: path.to_owned(),
        offset: end,
        check,
    })
}

/// Reads what `path` gained since `mark` as a transcript of `format` for `session`.
/// `finished`: the model has finished answering (a `Stop` event), so the last answer in the
/// file is whole. A file that does not exist yet reads as nothing.
pub fn read_tail(
    path: &str,
    format: Format,
    session: &str,
    mark: Option<&Mark>,
    finished: bool,
) -> io::Result<Tail> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Tail::default()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let from = start(&mut file, len, path, mark)?;
    let want = (len - from).min(MAX_TAIL_BYTES);
    let mut buf = Vec::with_capacity(want as usize);
    file.seek(SeekFrom::Start(from))?;
    file.by_ref().take(want).read_to_end(&mut buf)?;
    // Whole lines only; a line longer than a read is passed over.
    let whole = match buf.iter().rposition(|&b| b == b'\n') {
        Some(i) => i + 1,
        None if want == MAX_TAIL_BYTES => buf.len(),
        None => 0,
    };
    buf.truncate(whole);
    let (events, kept) = events_in(&buf, format, session, finished)?;
    let offset = from + kept;
    Ok(Tail {
        events,
        mark: Some(Mark {
            path: path.to_owned(),
            offset,
            check: check_at(&mut file, offset)?,
        }),
        bytes: whole as u64,
    })
}

/// The events in `lines` (whole lines of a transcript of `format`, `session` for one that
/// names none) that the guard takes, and how many of its bytes they use: what
/// [`read_tail`] does once it has the bytes.
pub fn events_in(
    lines: &[u8],
    format: Format,
    session: &str,
    finished: bool,
) -> io::Result<(Vec<Event>, u64)> {
    let mut items: Vec<(Pos, Item)> = Vec::new();
    let options = ReadOptions::new(session);
    loopguard_transcripts::read(format, Cursor::new(lines), &options, &mut items)?;
    Ok(session_events(items, finished, lines.len() as u64))
}

/// The events of the session (its subagents' have sessions of their own) that the guard
/// takes from a transcript: usage, the model's answers and the harness's feedback (calls,
/// results and prompts reach the hook by their own events). An answer still open at the
/// end is left out unless `finished`; returns the events and how many of the `read` bytes
/// are used (up to the open answer's first line).
fn session_events(items: Vec<(Pos, Item)>, finished: bool, read: u64) -> (Vec<Event>, u64) {
    // The main session is the one the first item names; a subagent's is `MAIN/agent-ID`.
    let main = items.first().map(|(_, item)| item.ids().session.clone());
    let open = (!finished)
        .then(|| {
            let last = items.iter().rposition(|(_, item)| is_answer(item))?;
            let at = items[last].0.offset;
            items[last + 1..]
                .iter()
                .all(|(pos, _)| pos.offset <= at)
                .then_some(at)
        })
        .flatten();
    let mut ids_at: Vec<(u64, String)> = Vec::new();
    let mut events = Vec::new();
    for (pos, item) in items {
        let Item::Event(event) = item else { continue };
        if Some(&event.ids().session) != main.as_ref() {
            continue;
        }
        match event {
            Event::Usage { ids, usage } => {
                // A usage with no id read again would count twice: it waits with its answer.
                if open.is_some_and(|at| pos.offset >= at) && usage.id.is_none() {
                    continue;
                }
                if let Some(id) = &usage.id {
                    ids_at.push((pos.offset, id.clone()));
                }
                events.push(Event::Usage { ids, usage });
            }
            Event::Message { ids, mut message } => {
                if open.is_some_and(|at| pos.offset >= at) {
                    continue;
                }
                match message.role {
                    Role::Assistant => {
                        // The answer is known by its response's id.
                        message.id = ids_at
                            .iter()
                            .rev()
                            .find(|(at, _)| *at == pos.offset)
                            .map(|(_, id)| id.clone());
                    }
                    Role::ToolFeedback => {}
                    _ => continue,
                }
                events.push(Event::Message { ids, message });
            }
            _ => {}
        }
    }
    (events, open.unwrap_or(read))
}

fn is_answer(item: &Item) -> bool {
    matches!(item, Item::Event(Event::Message { message, .. }) if message.role == Role::Assistant)
}

/// Whether `path` names a file the hook may read as a transcript: a non-empty path to a
/// regular file or to nothing yet. `Path` is only checked, never created.
pub fn usable(path: &str) -> bool {
    !path.trim().is_empty() && !Path::new(path).is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn answer(msg: &str, text: &str) -> String {
        format!(
            "{{\"type\":\"assistant\",\"sessionId\":\"s\",\"message\":{{\"id\":\"{msg}\",\"role\":\"assistant\",\"model\":\"claude-haiku-4-5\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"usage\":{{\"input_tokens\":10,\"output_tokens\":5}}}}}}\n"
        )
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    fn kinds(tail: &Tail) -> Vec<String> {
        tail.events
            .iter()
            .map(|e| match e {
                Event::Usage { usage, .. } => {
                    format!("usage {}", usage.id.as_deref().unwrap_or("-"))
                }
                Event::Message { message, .. } => {
                    format!(
                        "said {} {}",
                        message.text,
                        message.id.as_deref().unwrap_or("-")
                    )
                }
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn whole_lines_only_the_open_answer_waits_and_a_rewrite_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let p = path.to_str().unwrap();
        // Nothing there yet: nothing read, no mark.
        assert!(read_tail(p, Format::ClaudeCode, "s", None, false)
            .unwrap()
            .mark
            .is_none());
        append(&path, &answer("m1", "one"));
        append(
            &path,
            r#"{"type":"user","sessionId":"s","message":{"role":"user","content":"next"}}"#,
        );
        append(&path, "\n");
        let two = answer("m2", "two");
        append(&path, &two[..20]);
        let t = read_tail(p, Format::ClaudeCode, "s", None, false).unwrap();
        // m1's answer is closed by the line after it; the half line is not read.
        assert_eq!(kinds(&t), ["usage m1", "said one m1"]);
        let mark = t.mark.unwrap();
        assert_eq!(mark.offset, std::fs::metadata(&path).unwrap().len() - 20);
        append(&path, &two[20..]);
        // m2's answer is the last thing in the file: its usage goes now, its text waits.
        let t = read_tail(p, Format::ClaudeCode, "s", Some(&mark), false).unwrap();
        assert_eq!(kinds(&t), ["usage m2"]);
        let open = t.mark.unwrap();
        assert_eq!(open.offset, mark.offset);
        // Finished (a Stop): the answer is whole.
        let t = read_tail(p, Format::ClaudeCode, "s", Some(&open), true).unwrap();
        assert_eq!(kinds(&t), ["usage m2", "said two m2"]);
        let end = t.mark.unwrap();
        assert_eq!(end, mark_at_end(p).unwrap());
        assert!(read_tail(p, Format::ClaudeCode, "s", Some(&end), true)
            .unwrap()
            .events
            .is_empty());
        // Rewritten shorter: read from the start again.
        std::fs::write(&path, answer("m9", "nine")).unwrap();
        let t = read_tail(p, Format::ClaudeCode, "s", Some(&end), true).unwrap();
        assert_eq!(kinds(&t), ["usage m9", "said nine m9"]);
        // Another file for the session: from its start.
        let other = dir.path().join("u.jsonl");
        std::fs::write(&other, answer("m3", "three")).unwrap();
        let t = read_tail(
            other.to_str().unwrap(),
            Format::ClaudeCode,
            "s",
            Some(&end),
            true,
        )
        .unwrap();
        assert_eq!(kinds(&t), ["usage m3", "said three m3"]);
    }

    #[test]
    fn subagent_lines_are_left_to_the_subagent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        append(&path, &answer("m1", "main"));
        append(
            &path,
            &answer("m2", "side").replace(
                "\"sessionId\"",
                "\"isSidechain\":true,\"agentId\":\"a1\",\"sessionId\"",
            ),
        );
        let t = read_tail(path.to_str().unwrap(), Format::ClaudeCode, "s", None, true).unwrap();
        assert_eq!(kinds(&t), ["usage m1", "said main m1"]);
    }
}

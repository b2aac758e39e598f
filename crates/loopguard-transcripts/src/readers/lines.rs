//! JSON Lines plumbing shared by the line-based readers: a line reader with a length cap
//! that never buffers more than one line, positions, and parsing with repair.
//!
//! Transcripts are appended while agents run, copied between machines and cut by tools, so
//! a reader meets half-written last lines, corrupt lines, bytes that are not UTF-8 and
//! escaped surrogates split in two. A line that cannot be parsed is counted (see
//! [`ReadStats`]) and reading goes on; a line whose only fault is its encoding is repaired
//! (invalid bytes and lone surrogate escapes become U+FFFD) and used.

use std::io::{self, BufRead, Seek};

use loopguard::json::{kind_name, Json, RawObject, Tape};
use loopguard_events::lines::{Line as RawLine, LineReader};
use loopguard_events::{value_tree_cost, MAX_COST_PER_BODY_BYTE};

use serde::Deserialize;

use crate::item::Pos;
use crate::readers::ReadOptions;
use crate::stats::{ReadStats, SkipReason};

/// Default longest line: `loopguard replay`'s; longer ones are skipped without being held.
pub use loopguard_events::DEFAULT_MAX_LINE;

/// One line of input, without its terminator.
#[derive(Debug)]
pub(crate) struct Line<'a> {
    /// Where it starts.
    pub pos: Pos,
    /// Its bytes (a trailing `\r` removed).
    pub bytes: &'a [u8],
    /// Whether the file ended without a newline after it.
    pub unterminated: bool,
}

/// Reads lines, skipping blank ones and counting the ones that are too long: the line
/// reader `replay` uses ([`LineReader`], which never holds a line over the limit of a
/// seekable input), with the positions and counts a reader reports.
pub(crate) struct Lines<R> {
    inner: LineReader<R>,
    /// Where reading started: positions and byte counts are relative to it.
    base: u64,
    /// Most memory parsing one line may take ([`value_tree_cost`]); a line beyond it is
    /// skipped, its size and cost said.
    max_cost: usize,
}

impl<R: BufRead + Seek> Lines<R> {
    /// Lines of `input` from where it stands, at most `max` bytes each.
    pub fn new(input: R, max: usize) -> io::Result<Self> {
        let inner = LineReader::seekable(input, max)?;
        Ok(Self {
            base: inner.offset(),
            inner,
            max_cost: usize::MAX,
        })
    }

    /// Lines of `input` from where it stands, within `options`' limits: at most
    /// `max_line` bytes, and at most `max_line_cost` to parse.
    pub fn with_options(input: R, options: &ReadOptions<'_>) -> io::Result<Self> {
        let mut lines = Self::new(input, options.max_line)?;
        lines.max_cost = options.max_line_cost;
        Ok(lines)
    }
}

impl<R: BufRead> Lines<R> {
    /// The next non-blank line; `None` at the end. Updates `stats.lines` and `stats.bytes`,
    /// and counts lines that are too long as skipped.
    pub fn next_line(&mut self, stats: &mut ReadStats) -> io::Result<Option<Line<'_>>> {
        let base = self.base;
        loop {
            let max = self.inner.max();
            let line = match self.inner.next_line()? {
                None => None,
                Some(RawLine::TooLong { number, len, .. }) => Some(Err((number, len))),
                Some(RawLine::Text {
                    number,
                    offset,
                    terminated,
                    ..
                }) => Some(Ok((number, offset, terminated))),
            };
            stats.lines = self.inner.lines();
            stats.bytes = self.inner.offset() - base;
            let (number, offset, terminated) = match line {
                None => return Ok(None),
                Some(Err((number, len))) => {
                    stats.skip(SkipReason::LineTooLong, number, || {
                        format!("{len} bytes, limit {max}")
                    });
                    continue;
                }
                Some(Ok(found)) => found,
            };
            let text = trim_cr(self.inner.text()?);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // Cheap first: only a line that could cost more than the bound is scanned.
            if text.len().saturating_mul(MAX_COST_PER_BODY_BYTE) > self.max_cost {
                let cost = value_tree_cost(text);
                if cost > self.max_cost {
                    let (len, max) = (text.len(), self.max_cost);
                    stats.skip(SkipReason::LineTooCostly, number, || {
                        format!("{len} bytes; parsing it could take {cost} bytes, more than the live memory budget of {max}")
                    });
                    continue;
                }
            }
            return Ok(Some(Line {
                pos: Pos::new(number, offset - base),
                bytes: trim_cr(self.inner.text()?),
                unterminated: !terminated,
            }));
        }
    }
}

/// A line without its trailing `\r`.
fn trim_cr(bytes: &[u8]) -> &[u8] {
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// Whether `input` holds JSON Lines rather than one document: one of its first two lines
/// is a JSON value on its own (two, so that a corrupt first line does not turn a JSON
/// Lines file into one broken document). Reads from the current position; the caller
/// seeks back.
pub(crate) fn is_json_lines<R: BufRead + Seek>(input: R, max: usize) -> io::Result<bool> {
    let mut probe = ReadStats::default();
    let mut lines = Lines::new(input, max)?;
    for _ in 0..2 {
        let Some(line) = lines.next_line(&mut probe)? else {
            break;
        };
        let bare = matches!(line.bytes.trim_ascii(), b"[" | b"{");
        if !bare && serde_json::from_slice::<serde::de::IgnoredAny>(line.bytes).is_ok() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Parses a line into `T`, repairing its encoding when that is what stops it. The
/// repaired copy, if one is needed, lives in `scratch`. Returns the value and whether it
/// needed repair.
pub(crate) fn parse<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
    scratch: &'a mut Option<Vec<u8>>,
) -> Result<(T, bool), serde_json::Error> {
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok((v, false)),
        Err(e) => match repair(bytes) {
            Some(fixed) => {
                let fixed: &'a mut Vec<u8> = Option::insert(scratch, fixed);
                serde_json::from_slice(fixed).map(|v| (v, true))
            }
            None => Err(e),
        },
    }
}

/// The entry a line holds, its encoding repaired when needed (counted in `stats`); or
/// `None` after counting why not: an object without the fields the entry needs is
/// malformed, anything else a cut-off last line, not an object, or not JSON.
pub(crate) fn entry<'a, T: Deserialize<'a>>(
    line: &Line<'a>,
    scratch: &'a mut Option<Vec<u8>>,
    stats: &mut ReadStats,
) -> Option<T> {
    match parse::<T>(line.bytes, scratch) {
        Ok((entry, repaired)) => {
            stats.repaired += u64::from(repaired);
            Some(entry)
        }
        Err(e) if e.is_data() && line.bytes.trim_ascii_start().starts_with(b"{") => {
            stats.skip(SkipReason::MalformedEntry, line.pos.line, || e.to_string());
            None
        }
        Err(e) => {
            skip_unparsable(stats, line, &e, true);
            None
        }
    }
}

/// The object a line holds, tokenized into `tape` and read in place: one pass over the
/// line, no value tree, no depth limit. Its encoding is repaired when needed (counted in
/// `stats`; the repaired copy lives in `scratch`), as [`entry`] does. `None` after
/// counting why not (a value that is not an object is skipped as
/// [`SkipReason::NotAnObject`]).
pub(crate) fn object<'a>(
    line: &Line<'a>,
    tape: &'a mut Tape,
    scratch: &'a mut Option<Vec<u8>>,
    stats: &mut ReadStats,
) -> Option<RawObject<'a>> {
    // A lone surrogate escape is valid JSON the tape would keep as WTF-8; lines are
    // repaired instead (U+FFFD), as when they are parsed into values.
    let clean = !has_surrogate_escape(line.bytes);
    let mut repaired = false;
    let text = match std::str::from_utf8(line.bytes) {
        Ok(text) if clean => text,
        _ => {
            let bytes: &'a [u8] = match repair(line.bytes) {
                Some(fixed) => {
                    repaired = true;
                    Option::insert(scratch, fixed)
                }
                None => line.bytes,
            };
            match std::str::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => return unparsable(line, bytes, stats),
            }
        }
    };
    let root = match tape.parse(text) {
        Ok(root) => root,
        Err(_) => return unparsable(line, text.as_bytes(), stats),
    };
    stats.repaired += u64::from(repaired);
    let object = root.as_object();
    if object.is_none() {
        stats.skip(SkipReason::NotAnObject, line.pos.line, || {
            format!("expected an object, found {}", kind_name(root))
        });
    }
    object
}

/// Counts a line the tape could not read, with `serde_json`'s account of why.
fn unparsable<T>(line: &Line<'_>, bytes: &[u8], stats: &mut ReadStats) -> Option<T> {
    match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        Err(e) => skip_unparsable(stats, line, &e, true),
        // Never seen: the two parsers accept the same texts, but for nesting.
        Ok(_) => stats.skip(SkipReason::InvalidJson, line.pos.line, || {
            "not JSON".to_owned()
        }),
    }
    None
}

/// Whether `bytes` hold a `\uD800`–`\uDFFF` escape (paired or not).
fn has_surrogate_escape(bytes: &[u8]) -> bool {
    memchr::memmem::find_iter(bytes, b"\\u").any(|at| {
        matches!(bytes.get(at + 2), Some(b'd' | b'D'))
            && matches!(
                bytes.get(at + 3),
                Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
            )
    })
}

/// Counts a line that did not parse: a cut-off last line, or a corrupt one.
pub(crate) fn skip_unparsable(
    stats: &mut ReadStats,
    line: &Line<'_>,
    error: &serde_json::Error,
    expected_object: bool,
) {
    let reason = if line.unterminated && error.is_eof() {
        SkipReason::TruncatedLastLine
    } else if expected_object && error.is_data() && !line.bytes.starts_with(b"{") {
        SkipReason::NotAnObject
    } else {
        SkipReason::InvalidJson
    };
    stats.skip(reason, line.pos.line, || error.to_string());
}

/// A copy of `bytes` with invalid UTF-8 and escaped lone surrogates replaced by U+FFFD, or
/// `None` when there is nothing to repair.
pub(crate) fn repair(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(bytes);
    let lossy = matches!(text, std::borrow::Cow::Owned(_));
    match fix_surrogates(text.as_bytes()) {
        Some(fixed) => Some(fixed),
        None if lossy => Some(text.into_owned().into_bytes()),
        None => None,
    }
}

/// Replaces `\uD800`–`\uDFFF` escapes that do not form a pair with `\uFFFD`.
fn fix_surrogates(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    let mut copied = 0;
    while let Some(found) = memchr::memchr(b'\\', &bytes[i..]) {
        let at = i + found;
        match bytes.get(at + 1) {
            Some(b'u') => {
                let Some(code) = hex4(bytes, at + 2) else {
                    i = at + 2;
                    continue;
                };
                if !(0xD800..=0xDFFF).contains(&code) {
                    i = at + 6;
                    continue;
                }
                let paired = (0xD800..0xDC00).contains(&code)
                    && bytes.get(at + 6) == Some(&b'\\')
                    && bytes.get(at + 7) == Some(&b'u')
                    && hex4(bytes, at + 8).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
                if paired {
                    i = at + 12;
                    continue;
                }
                let o = out.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
                o.extend_from_slice(&bytes[copied..at]);
                o.extend_from_slice(b"\\ufffd");
                i = at + 6;
                copied = i;
            }
            Some(_) => i = at + 2,
            None => break,
        }
    }
    let mut out = out?;
    out.extend_from_slice(&bytes[copied..]);
    Some(out)
}

fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    let digits = bytes.get(at..at + 4)?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16)
        .ok()
        .filter(|_| digits.iter().all(u8::is_ascii_hexdigit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn all(input: &[u8], max: usize) -> (Vec<(u64, u64, String, bool)>, ReadStats) {
        let mut stats = ReadStats::default();
        let mut lines = Lines::new(std::io::Cursor::new(input), max).unwrap();
        let mut out = Vec::new();
        while let Some(l) = lines.next_line(&mut stats).unwrap() {
            out.push((
                l.pos.line,
                l.pos.offset,
                String::from_utf8_lossy(l.bytes).into_owned(),
                l.unterminated,
            ));
        }
        (out, stats)
    }

    #[test]
    fn positions_blank_lines_crlf_and_the_last_line() {
        let (lines, stats) = all(b"a\r\n\n  \nbb\nccc", 100);
        assert_eq!(
            lines,
            vec![
                (1, 0, "a".into(), false),
                (4, 7, "bb".into(), false),
                (5, 10, "ccc".into(), true)
            ]
        );
        assert_eq!(stats.lines, 5);
        assert_eq!(stats.bytes, 13);
    }

    #[test]
    fn long_lines_are_counted_and_skipped() {
        let mut input = b"x\n".to_vec();
        input.extend(std::iter::repeat_n(b'y', 10_000));
        input.extend(b"\nz\n");
        let (lines, stats) = all(&input, 100);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].0, 3);
        assert_eq!(stats.skipped_for(SkipReason::LineTooLong), 1);
        assert_eq!(stats.skipped[0].first_line, 2);
    }

    #[test]
    fn repairs_encoding_only() {
        let mut scratch = None;
        let (v, repaired): (Value, bool) = parse(b"{\"a\":\"x\xffy\"}", &mut scratch).unwrap();
        assert!(repaired);
        assert_eq!(v["a"], "x\u{FFFD}y");
        let mut scratch = None;
        let (v, repaired): (Value, bool) = parse(
            br#"{"a":"\ud83d","b":"\ud83d\udd04","c":"\\ud83d","d":"\udd04x"}"#,
            &mut scratch,
        )
        .unwrap();
        assert!(repaired);
        assert_eq!(v["a"], "\u{FFFD}");
        assert_eq!(v["b"], "\u{1F504}");
        assert_eq!(v["c"], "\\ud83d");
        assert_eq!(v["d"], "\u{FFFD}x");
        let mut scratch = None;
        assert!(parse::<Value>(b"{\"a\":", &mut scratch).is_err());
        assert!(scratch.is_none());
        assert_eq!(repair(br#"{"a":"\u12"}"#), None);
        assert_eq!(repair(b"\\"), None);
    }
}

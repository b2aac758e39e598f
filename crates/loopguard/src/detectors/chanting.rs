//! `content_chanting`: one piece of text repeated again and again inside one answer (or
//! its stream), the way a model stuck in a degenerate loop "chants" a sentence until its
//! output limit.
//!
//! The text is read line by line, whatever pieces it arrives in: a line is judged once it
//! is complete (or once [`LINE_CAP`] bytes of it have come), so an answer streamed in any
//! pieces is judged exactly as the whole answer (a property test checks it). Each line is
//! first put in its place in the answer's markdown structure:
//!
//! - lines inside a fenced code block (```` ``` ```` or `~~~`), table rows (`|`, box
//!   drawing) and lines without a letter or digit (rules, dividers, ASCII art) are never
//!   compared: code and tables repeat lines by nature. Each code block or table counts as
//!   one opaque step of the answer, hashed from its content;
//! - prose lines (list items and quotes without their markers, headings) are cut into
//!   segments: sentences, a short sentence joined to the next one of its line until
//!   [`MIN_SEGMENT`] bytes, a long run without a sentence end cut after [`MAX_SEGMENT`]
//!   bytes at a space after a word picked by its content (so a text repeated without
//!   punctuation is cut at the same words each time, wherever the first cut fell).
//!
//! A segment of at least [`MIN_SEGMENT`] bytes chants when the same text occurred before
//! in the last [`WINDOW`] steps, each occurrence at most [`MAX_GAP`] steps after the
//! previous one, and the stretches between occurrences repeat too: at most half of them
//! are different. The count is the number of occurrences in that run. The last test is
//! what tells a chant from a structured answer: a report whose every section has a line
//! `**Result:** passed`, or a list whose items share a sentence, repeats that line, but
//! what lies between the repeats differs each time (the section titles, the items).
//!
//! Learnt from Gemini CLI's loop detection (hashes of 50-character chunks at every
//! position, ten of one within a short average distance, code blocks skipped, tracking
//! reset whenever a streamed chunk holds markdown structure), with these differences:
//! segments instead of fixed chunks (one hash per sentence, not per character), structure
//! recognised per line wherever the stream's chunks fall (Gemini CLI looks for it in each
//! chunk, so a table or a fence split across chunks is read as prose), and code blocks and
//! tables kept in the sequence as opaque steps instead of resetting it, so that the
//! stretches between repeats of a sentence tell a structured answer from a chant.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::masking::MaskSet;

/// Steps (segments, code blocks, tables) a repeat is looked for in.
pub const WINDOW: usize = 128;
/// Shortest segment compared, in bytes: shorter sentences join the next one in their line.
pub const MIN_SEGMENT: usize = 16;
/// Longest run without a sentence end before it is cut at a space, in bytes.
pub const MAX_SEGMENT: usize = 100;
/// Longest a segment gets when no space comes: cut at a character boundary.
const HARD_SEGMENT: usize = 160;
/// Most steps between two occurrences of a chanted segment.
pub const MAX_GAP: u64 = 12;
/// Longest line judged at once: a longer line is judged in pieces of this size, cut at a
/// space where there is one.
pub const LINE_CAP: usize = 4096;
/// Longest excerpt of a chanted segment put in a message, in characters.
pub const EXCERPT_CHARS: usize = 80;

/// The room a new answer's line in progress gets at once, in bytes.
const PENDING_START: usize = 512;
/// The room a new answer's steps get at once.
const STEPS_START: usize = 32;

/// The multiplier of the running hash over steps.
const BASE: u64 = 0x9E37_79B9_7F4A_7C15;

/// `BASE` to the powers 0 to [`WINDOW`].
const POWERS: [u64; WINDOW + 1] = {
    let mut out = [1u64; WINDOW + 1];
    let mut i = 1;
    while i <= WINDOW {
        out[i] = out[i - 1].wrapping_mul(BASE);
        i += 1;
    }
    out
};

/// What a line is, for the comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum Block {
    /// Prose (or nothing open).
    #[default]
    Prose,
    /// Inside a fenced code block opened by `len` fence characters `fence`.
    Code { fence: u8, len: u8 },
    /// Table rows so far.
    Table,
}

/// One step of the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Step {
    /// Hash of the step's text.
    hash: u64,
    /// The running hash of every step up to this one.
    prefix: u64,
    /// A prose segment long enough to be compared.
    compared: bool,
}

/// The chanting found in some text: the most repeated segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Chant {
    /// Its occurrences in the run of repeats.
    pub count: u32,
    /// Its text, cut to [`EXCERPT_CHARS`].
    pub excerpt: String,
    /// Its hash (the warning key).
    pub hash: u64,
}

impl Chant {
    /// Keeps the more repeated of two.
    pub(crate) fn max(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.count > a.count { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// What reading an answer found: its print and its most repeated segment (its count and
/// hash), when one repeats.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The answer's print (0: no text).
    pub print: u64,
    /// The most repeated segment's count and hash.
    pub chant: Option<(u32, u64)>,
}

/// Reads an answer arriving in `pieces` (one piece: the whole answer) as the engine reads
/// a message's text, segments compared and lines masked by `mask`. For the tests and the
/// fuzz target that check the law the engine's streaming rests on: any split of a text
/// reads as the whole text.
#[doc(hidden)]
pub fn read_answer<'a>(pieces: impl IntoIterator<Item = &'a str>, mask: MaskSet) -> Reading {
    let mut track = ChantTrack::new(true);
    let mut found = None;
    for piece in pieces {
        found = Chant::max(found, track.feed(piece, mask));
    }
    found = Chant::max(found, track.finish(mask));
    Reading {
        print: track.print,
        chant: found.map(|c| (c.count, c.hash)),
    }
}

/// The state of one message's text: the line in progress, the open block, the newest
/// steps, and the print of the lines read so far (what `repeated_message` and
/// `no_tool_turns` compare: each line masked by the masking rules in force, its whitespace
/// collapsed, blank lines left out; the same whatever pieces the text came in).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChantTrack {
    /// Whether segments are compared (off: only the print is made).
    chants: bool,
    /// The print of the lines read so far (0: none yet).
    pub print: u64,
    /// The line in progress (no newline yet).
    pending: String,
    /// Whether `pending` continues a line already judged in part (longer than
    /// [`LINE_CAP`]): its structure was decided by its start.
    continued: bool,
    block: Block,
    /// The open code block's or table's running hash.
    block_hash: u64,
    /// The newest steps, oldest first.
    steps: VecDeque<Step>,
    /// The running hash after the newest step.
    prefix: u64,
    /// A line's words, reused.
    #[serde(skip)]
    scratch: String,
}

impl ChantTrack {
    /// A track that compares segments (`chants`) or only makes the print.
    pub(crate) fn new(chants: bool) -> Self {
        Self {
            chants,
            ..Self::default()
        }
    }

    /// Whether segments are compared (else only the print is made).
    #[cfg(test)]
    pub(crate) fn compares(&self) -> bool {
        self.chants
    }

    /// The print of a whole text, without comparing segments.
    pub(crate) fn print_of(text: &str, mask: MaskSet) -> u64 {
        let mut track = Self::new(false);
        track.feed(text, mask);
        track.finish(mask);
        track.print
    }

    /// Reads `text`, the next piece of the answer; returns the most repeated segment among
    /// the lines it completed, when one occurs at least twice in a run.
    pub(crate) fn feed(&mut self, text: &str, mask: MaskSet) -> Option<Chant> {
        let mut found = None;
        let bytes = text.as_bytes();
        // Where the next line starts; the newlines are found 64 bytes at a time.
        let mut start = 0;
        let mut base = 0;
        while base < bytes.len() {
            let mut newlines = byte_bits(&bytes[base..], |b| b == b'\n');
            while newlines != 0 {
                let end = base + newlines.trailing_zeros() as usize;
                newlines &= newlines - 1;
                let line = &text[start..end];
                start = end + 1;
                if self.pending.is_empty() {
                    self.whole_line(line, mask, &mut found);
                } else {
                    let mut whole = std::mem::take(&mut self.pending);
                    whole.push_str(line);
                    self.whole_line(&whole, mask, &mut found);
                    whole.clear();
                    self.pending = whole;
                }
            }
            base += 64;
        }
        let rest = &text[start..];
        if self.pending.capacity() == 0 && !rest.is_empty() {
            // Once, rather than doubling from 8 bytes in every new answer.
            self.pending.reserve(rest.len().max(PENDING_START));
        }
        self.pending.push_str(rest);
        // A long line is judged in pieces as it comes: the cuts depend on its text only,
        // so they fall where `whole_line` puts them.
        while self.pending.len() > LINE_CAP {
            let cut = cut_at_space(&self.pending, LINE_CAP);
            let rest = self.pending.split_off(cut);
            let piece = std::mem::replace(&mut self.pending, rest);
            self.line(&piece, mask, &mut found);
            self.continued = true;
        }
        found
    }

    /// Judges the rest of a line, in pieces of at most [`LINE_CAP`] bytes; a chant found
    /// is kept in `found` when it repeats more than the one there.
    #[inline(always)]
    fn whole_line(&mut self, mut line: &str, mask: MaskSet, found: &mut Option<Chant>) {
        while line.len() > LINE_CAP {
            let cut = cut_at_space(line, LINE_CAP);
            self.line(&line[..cut], mask, found);
            self.continued = true;
            line = &line[cut..];
        }
        self.line(line, mask, found);
        self.continued = false;
    }

    /// The end of the answer: judges the last line and closes an open block.
    pub(crate) fn finish(&mut self, mask: MaskSet) -> Option<Chant> {
        let last = std::mem::take(&mut self.pending);
        let mut found = None;
        if !last.is_empty() {
            self.whole_line(&last, mask, &mut found);
        }
        self.close_block();
        found
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.pending.capacity()
            + self.steps.capacity() * std::mem::size_of::<Step>()
            + self.scratch.capacity()
    }

    /// Adds a line (or a piece of a long one) to the print: its words, masked, joined by
    /// single spaces. A line with no run of whitespace (most) is hashed as it is, trimmed.
    fn print_line(&mut self, line: &str, mask: MaskSet) {
        let trimmed = trim_ascii(line);
        if trimmed.is_empty() {
            // A blank line adds nothing (masking leaves it blank).
            return;
        }
        let scratch = &mut self.scratch;
        let hash = match short_facts(trimmed.as_bytes()) {
            // A short line (most): its digits and its spacing found in one pass.
            Some(facts) => crate::masking::with_masked_short(trimmed, mask, facts.digits, |m| {
                let spaced = std::ptr::eq(m, trimmed) && !facts.odd_spacing;
                words_hash(m, spaced, scratch)
            }),
            None => crate::masking::with_masked(trimmed, mask, |m| words_hash(m, false, scratch)),
        };
        if let Some(hash) = hash {
            self.print = mix(self.print, hash) | 1;
        }
    }

    /// Judges one line (or a piece of a long one).
    fn line(&mut self, line: &str, mask: MaskSet, found: &mut Option<Chant>) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        self.print_line(line, mask);
        if !self.chants {
            return;
        }
        let trimmed = trim_blanks_start(line);
        if let Block::Code { fence, len } = self.block {
            if !self.continued && closes_fence(trimmed, fence, len) {
                self.close_block();
            } else {
                self.block_hash = mix(self.block_hash, xxh3_64(line.as_bytes()));
            }
            return;
        }
        if !self.continued {
            if let Some((fence, len)) = opens_fence(line) {
                self.close_block();
                self.block = Block::Code { fence, len };
                self.block_hash = mix(0, u64::from(fence));
                return;
            }
            if is_table_row(trimmed) {
                if self.block != Block::Table {
                    self.close_block();
                    self.block = Block::Table;
                    self.block_hash = 0;
                }
                self.block_hash = mix(self.block_hash, xxh3_64(trimmed.as_bytes()));
                return;
            }
        }
        self.close_block();
        let alphanumeric = |t: &str| {
            t.bytes().any(|b| b.is_ascii_alphanumeric())
                || (!t.is_ascii() && t.chars().any(char::is_alphanumeric))
        };
        if !alphanumeric(trimmed) {
            // Blank lines, rules, dividers, ASCII art: nothing to compare.
            return;
        }
        let text = match self.continued {
            true => trimmed,
            false => strip_marker(trimmed),
        };
        for segment in Segments::new(text) {
            if let Some(chant) = self.segment(segment) {
                // Rare: only a chant is moved.
                *found = Chant::max(found.take(), Some(chant));
            }
        }
    }

    /// Ends an open code block or table: it becomes one step.
    fn close_block(&mut self) {
        if self.block != Block::Prose {
            let hash = mix(self.block_hash, 0xB10C);
            self.push(hash, false);
            self.block = Block::Prose;
            self.block_hash = 0;
        }
    }

    /// Adds a prose segment and judges it.
    fn segment(&mut self, segment: &str) -> Option<Chant> {
        let segment = trim_blanks_end(trim_blanks_start(segment));
        if segment.is_empty() {
            return None;
        }
        let compared = segment.len() >= MIN_SEGMENT;
        let hash = xxh3_64(segment.as_bytes());
        self.push(hash, compared);
        if !compared {
            return None;
        }
        // Two occurrences are no chant: a third shows the stretch between them repeat.
        let count = self.repeats();
        (count >= 3).then(|| Chant {
            count,
            excerpt: excerpt(segment),
            hash,
        })
    }

    fn push(&mut self, hash: u64, compared: bool) {
        self.prefix = self.prefix.wrapping_mul(BASE).wrapping_add(hash);
        // `>=`: a state read back from bytes may hold more steps than a track keeps.
        while self.steps.len() >= WINDOW {
            self.steps.pop_front();
        }
        if self.steps.capacity() == 0 {
            // Once, rather than doubling from 4 steps in every new answer.
            self.steps.reserve_exact(STEPS_START);
        }
        self.steps.push_back(Step {
            hash,
            prefix: self.prefix,
            compared,
        });
    }

    /// The occurrences of the newest step in its run of repeats, when the stretches
    /// between them repeat too (else 1).
    fn repeats(&self) -> u32 {
        let steps = &self.steps;
        let newest = steps.len() - 1;
        let hash = steps[newest].hash;
        // Most segments occur once: nothing to gather.
        let near = newest.saturating_sub(MAX_GAP as usize);
        if !steps
            .range(near..newest)
            .any(|s| s.compared && s.hash == hash)
        {
            return 1;
        }
        // Positions of the occurrences, newest first, each within MAX_GAP of the next.
        let mut at = [0usize; WINDOW];
        let mut n = 1;
        at[0] = newest;
        for i in (0..newest).rev() {
            if (at[n - 1] - i) as u64 > MAX_GAP || n == WINDOW {
                break;
            }
            if steps[i].compared && steps[i].hash == hash {
                at[n] = i;
                n += 1;
            }
        }
        if n < 2 {
            return 1;
        }
        // The stretches between occurrences: at most half of them different.
        let mut stretches = [0u64; WINDOW];
        let mut distinct = 0;
        for k in 0..n - 1 {
            let (later, earlier) = (at[k], at[k + 1]);
            let len = later - earlier;
            let stretch = steps[later]
                .prefix
                .wrapping_sub(steps[earlier].prefix.wrapping_mul(POWERS[len]))
                ^ (len as u64).rotate_left(32);
            if !stretches[..distinct].contains(&stretch) {
                stretches[distinct] = stretch;
                distinct += 1;
            }
        }
        if distinct > n / 2 {
            return 1;
        }
        n as u32
    }
}

/// The hash of `text`'s words joined by single spaces (`None`: no word). `text` is a
/// trimmed line, masked or not (a placeholder holds no whitespace, so masking keeps it
/// trimmed); `spaced`: known to be single-spaced already. `scratch` holds the joined
/// words when they differ.
fn words_hash(text: &str, spaced: bool, scratch: &mut String) -> Option<u64> {
    if spaced || single_spaced(text.as_bytes()) {
        return (!text.is_empty()).then(|| xxh3_64(text.as_bytes()));
    }
    scratch.clear();
    for word in text.split_ascii_whitespace() {
        if !scratch.is_empty() {
            scratch.push(' ');
        }
        scratch.push_str(word);
    }
    let hash = (!scratch.is_empty()).then(|| xxh3_64(scratch.as_bytes()));
    if scratch.capacity() > LINE_CAP * 2 {
        // Not kept: a line that long is rare.
        *scratch = String::new();
    }
    hash
}

/// What one pass over a short text finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ShortFacts {
    /// Its ASCII digits, as bits (bit `k` for byte `k`).
    digits: u64,
    /// Whether it has whitespace other than single spaces ([`single_spaced`] is false).
    odd_spacing: bool,
}

/// The digits and the spacing of `bytes`, when it is at most 64 bytes long: one
/// branch-free pass over a zero-padded block of 32 or 64 bytes, which the compiler turns
/// into SIMD.
fn short_facts(bytes: &[u8]) -> Option<ShortFacts> {
    match bytes.len() {
        0..=32 => Some(facts_of_block::<32, 33>(bytes)),
        33..=64 => Some(facts_of_block::<64, 65>(bytes)),
        _ => None,
    }
}

/// [`short_facts`] over a block of `N` bytes (`P` = `N` + 1, the padding the next-byte
/// look needs).
#[inline(always)]
fn facts_of_block<const N: usize, const P: usize>(bytes: &[u8]) -> ShortFacts {
    let mut block = [0u8; P];
    block[..bytes.len()].copy_from_slice(bytes);
    let mut digits = [0u8; N];
    let mut odd = 0u8;
    for k in 0..N {
        let (b, next) = (block[k], block[k + 1]);
        digits[k] = u8::from(b.wrapping_sub(b'0') < 10);
        odd |= u8::from(odd_space(b, next));
    }
    ShortFacts {
        digits: gather_bits(&digits),
        odd_spacing: odd != 0,
    }
}

/// Whether the byte `b`, followed by `next`, is spacing that [`single_spaced`] refuses: a
/// tab, a carriage return, a form feed, or a space before another.
#[inline(always)]
fn odd_space(b: u8, next: u8) -> bool {
    (b == b'\t') | (b == b'\r') | (b == 0x0C) | ((b == b' ') & (next == b' '))
}

/// Whether `bytes` separates its words by single spaces only: no tab, form feed or
/// carriage return (the other ASCII whitespace, besides the newlines a line has none of),
/// and no two spaces in a row. Branch-free over blocks of 32 bytes, which the compiler
/// turns into SIMD.
fn single_spaced(bytes: &[u8]) -> bool {
    let block_is_odd =
        |block: &[u8; 33]| (0..32).fold(false, |any, k| any | odd_space(block[k], block[k + 1]));
    let mut i = 0;
    while i + 33 <= bytes.len() {
        if block_is_odd(bytes[i..i + 33].try_into().expect("33 bytes")) {
            return false;
        }
        i += 32;
    }
    // The rest, padded with zeros (no byte of them is odd).
    let mut last = [0u8; 33];
    last[..bytes.len() - i].copy_from_slice(&bytes[i..]);
    !block_is_odd(&last)
}

/// `text` without the ASCII whitespace at its ends.
fn trim_ascii(text: &str) -> &str {
    let bytes = text.as_bytes();
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    // ASCII bytes are character boundaries.
    &text[start..end.max(start)]
}

/// `text` without the spaces and tabs it starts with (byte by byte: both are ASCII).
fn trim_blanks_start(text: &str) -> &str {
    let start = text
        .bytes()
        .position(|b| b != b' ' && b != b'\t')
        .unwrap_or(text.len());
    &text[start..]
}

/// `text` without the spaces and tabs it ends with.
fn trim_blanks_end(text: &str) -> &str {
    let end = text
        .bytes()
        .rposition(|b| b != b' ' && b != b'\t')
        .map_or(0, |e| e + 1);
    &text[..end]
}

/// Combines a running hash with the next hash.
fn mix(acc: u64, next: u64) -> u64 {
    acc.wrapping_mul(BASE).wrapping_add(next).rotate_left(17)
}

/// The first `EXCERPT_CHARS` characters of `text`, `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    let text = crate::text::trim(text);
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Where to cut `text` near `at` bytes: after the last space before it, else at the last
/// character boundary before it.
fn cut_at_space(text: &str, at: usize) -> usize {
    let mut cut = at.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    match text.as_bytes()[..cut].iter().rposition(|&b| b == b' ') {
        Some(space) if space > 0 => space + 1,
        _ => cut.max(1),
    }
}

/// A fence that opens a code block: up to three spaces, then three or more backticks or
/// tildes.
fn opens_fence(line: &str) -> Option<(u8, u8)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line.as_bytes()[indent..];
    let fence = *rest.first()?;
    if fence != b'`' && fence != b'~' {
        return None;
    }
    let len = rest.iter().take_while(|&&b| b == fence).count();
    (len >= 3).then_some((fence, len.min(255) as u8))
}

/// Whether `trimmed` closes a block opened by `len` of `fence`.
fn closes_fence(trimmed: &str, fence: u8, len: u8) -> bool {
    let bytes = trimmed.as_bytes();
    let run = bytes.iter().take_while(|&&b| b == fence).count();
    run >= usize::from(len) && bytes[run..].iter().all(|b| b.is_ascii_whitespace())
}

/// A table row: starts with `|`, `+-` or a box-drawing character.
fn is_table_row(trimmed: &str) -> bool {
    match trimmed.chars().next() {
        Some('|') => true,
        Some('+') => trimmed[1..].starts_with(['-', '=']),
        Some(c) => ('\u{2500}'..='\u{257F}').contains(&c),
        None => false,
    }
}

/// A prose line without its list, quote or heading marker.
fn strip_marker(line: &str) -> &str {
    let bytes = line.as_bytes();
    let rest = match bytes.first() {
        Some(b'-' | b'*' | b'+' | b'>') if bytes.get(1).is_none_or(|b| *b == b' ') => &line[1..],
        Some(b'#') => line.trim_start_matches('#'),
        Some(b'0'..=b'9') => {
            let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
            match bytes.get(digits) {
                Some(b'.' | b')')
                    if digits <= 9 && bytes.get(digits + 1).is_none_or(|b| *b == b' ') =>
                {
                    &line[digits + 1..]
                }
                _ => line,
            }
        }
        _ => line,
    };
    trim_blanks_start(rest)
}

/// The segments of a prose line (see the module docs).
struct Segments<'a> {
    rest: &'a str,
}

impl<'a> Segments<'a> {
    fn new(text: &'a str) -> Self {
        Self { rest: text }
    }
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a str;

    #[inline(always)]
    fn next(&mut self) -> Option<&'a str> {
        let text = self.rest;
        if text.is_empty() {
            return None;
        }
        let (segment, rest) = text.split_at(segment_end(text));
        self.rest = rest;
        Some(segment)
    }
}

/// Whether a sentence ends at `bytes[i]`, and the length of its mark: `.`, `!`, `?` or `;`
/// followed by the end, a space, a tab, a quote or a parenthesis; `。`, `！`, `？` (U+3002,
/// U+FF01, U+FF1F), which need no space after them.
fn sentence_end(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes[i] {
        b'.' | b'!' | b'?' | b';' => (i + 1 == bytes.len()
            || matches!(bytes[i + 1], b' ' | b'\t' | b'"' | b')'))
        .then_some(1),
        0xE3 => (bytes.get(i + 1..i + 3) == Some(&[0x80, 0x82])).then_some(3),
        0xEF => matches!(bytes.get(i + 1..i + 3), Some([0xBC, 0x81] | [0xBC, 0x9F])).then_some(3),
        _ => None,
    }
}

/// The bytes among the first 64 of `bytes` that `is` holds for, as bits (bit `k` for
/// `bytes[k]`; `is(0)` must be false): flags set branch-free over a 64-byte block
/// (zero-padded past the end of `bytes`), which the compiler turns into SIMD compares,
/// then gathered eight at a time, each multiplied into the top byte of a word.
#[inline(always)]
fn byte_bits(bytes: &[u8], is: impl Fn(u8) -> bool) -> u64 {
    let mut padded = [0u8; 64];
    let block = match bytes.first_chunk::<64>() {
        Some(block) => block,
        None => {
            padded[..bytes.len()].copy_from_slice(bytes);
            &padded
        }
    };
    let mut flags = [0u8; 64];
    for (flag, &b) in flags.iter_mut().zip(block) {
        *flag = u8::from(is(b));
    }
    gather_bits(&flags)
}

/// Flags of 0 or 1, one per byte, as bits: gathered eight at a time, each multiplied into
/// the top byte of a word.
#[inline(always)]
fn gather_bits<const N: usize>(flags: &[u8; N]) -> u64 {
    flags
        .chunks_exact(8)
        .enumerate()
        .fold(0, |bits, (j, eight)| {
            let word = u64::from_le_bytes(eight.try_into().expect("8 bytes"));
            bits | (word.wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * j)
        })
}

/// The bytes among the first 64 of `bytes` that may end a sentence (`.`, `!`, `?`, `;`, the
/// first byte of `。`, `！`, `？`), as bits.
fn mark_bits(bytes: &[u8]) -> u64 {
    byte_bits(bytes, |b| {
        (b == b'.') | (b == b'!') | (b == b'?') | (b == b';') | (b == 0xE3) | (b == 0xEF)
    })
}

/// Where the first segment of `text` ends (see the module docs): at the first sentence end
/// that leaves [`MIN_SEGMENT`] bytes; past [`MAX_SEGMENT`], at a space after a word chosen
/// by its last byte (a quarter of them, so a repeated run is cut at the same words each
/// time wherever the previous cut fell), or at any space 60 bytes later; at
/// [`HARD_SEGMENT`] bytes (a character boundary) when no space comes. The marks and the
/// spaces are found a block at a time, not byte by byte; the first position that
/// qualifies wins, a sentence end before a space before the hard cut.
fn segment_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    // Only positions up to HARD_SEGMENT can end the segment.
    let scan = bytes.len().min(HARD_SEGMENT + 1);
    let mut end = None;
    let mut base = 0;
    'blocks: while base < scan {
        let mut marks = mark_bits(&bytes[base..scan]);
        while marks != 0 {
            let i = base + marks.trailing_zeros() as usize;
            marks &= marks - 1;
            if let Some(len) = sentence_end(bytes, i).filter(|len| i + len >= MIN_SEGMENT) {
                end = Some((i, i + len));
                break 'blocks;
            }
        }
        base += 64;
    }
    // A space past MAX_SEGMENT, before the sentence end.
    let limit = end.map_or(scan, |(i, _)| i);
    let mut from = MAX_SEGMENT;
    while from < limit {
        let Some(at) = memchr::memchr(b' ', &bytes[from..limit]) else {
            break;
        };
        let i = from + at;
        if bytes[i - 1] & 3 == 0 || i >= MAX_SEGMENT + 60 {
            return i + 1;
        }
        from = i + 1;
    }
    if let Some((i, cut)) = end {
        if i <= HARD_SEGMENT {
            return cut;
        }
    }
    if bytes.len() > HARD_SEGMENT {
        let mut cut = HARD_SEGMENT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        return cut;
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{prop, Strategy};
    use proptest::prop_oneof;

    use super::*;

    /// The segment end of the first implementation, byte by byte: what `segment_end` must
    /// give.
    fn reference_end(text: &str) -> usize {
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut cut = text.len();
        while i < bytes.len() {
            let b = bytes[i];
            let ends = match b {
                b'.' | b'!' | b'?' | b';' => {
                    i + 1 == bytes.len() || matches!(bytes[i + 1], b' ' | b'\t' | b'"' | b')')
                }
                0xE3 => bytes.get(i + 1..i + 3) == Some(&[0x80, 0x82]),
                0xEF => matches!(bytes.get(i + 1..i + 3), Some([0xBC, 0x81] | [0xBC, 0x9F])),
                _ => false,
            };
            let len = if b >= 0xE3 { 3 } else { 1 };
            if ends && i + len >= MIN_SEGMENT {
                cut = i + len;
                break;
            }
            if i >= MAX_SEGMENT && b == b' ' && (bytes[i - 1] & 3 == 0 || i >= MAX_SEGMENT + 60) {
                cut = i + 1;
                break;
            }
            if i >= HARD_SEGMENT {
                cut = i;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                break;
            }
            i += 1;
        }
        cut
    }

    #[test]
    fn segment_ends_are_the_byte_by_byte_ones() {
        let pieces = [
            "word ",
            "a. ",
            "e.g.",
            "3.14 ",
            "Done! ",
            "why? ",
            "x; ",
            "。",
            "！",
            "？",
            "字",
            "longerword ",
            "\"quoted.\" ",
            "(paren.) ",
            "\t",
            "zz",
            "  ",
            "é",
            "…",
            ".",
        ];
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let mut text = String::new();
            let n = (state % 90) as usize;
            for _ in 0..n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            let mut rest = text.as_str();
            while !rest.is_empty() {
                let want = reference_end(rest);
                assert_eq!(segment_end(rest), want, "{rest:?}");
                rest = &rest[want..];
            }
        }
    }

    #[test]
    fn byte_bits_are_the_bytes_tested_one_by_one() {
        let text: Vec<u8> = (0..200u32).map(|i| (i * 37 % 251) as u8).collect();
        for start in 0..text.len() {
            let bytes = &text[start..];
            let want = bytes
                .iter()
                .take(64)
                .enumerate()
                .filter(|(_, &b)| b == b'.' || b == 0xE3)
                .fold(0u64, |bits, (k, _)| bits | 1 << k);
            assert_eq!(
                byte_bits(bytes, |b| (b == b'.') | (b == 0xE3)),
                want,
                "{start}"
            );
        }
    }

    #[test]
    fn single_spacing_is_what_splitting_would_keep() {
        for line in [
            "a b c", "a  b", "a\tb", "a\rb", "a\u{b}b", "a\u{c}b", "", "abc",
        ] {
            let joined = line.split_ascii_whitespace().collect::<Vec<_>>().join(" ");
            assert_eq!(single_spaced(line.as_bytes()), joined == line, "{line:?}");
        }
    }

    /// The highest count found feeding `text` whole.
    fn whole(text: &str) -> u32 {
        read_answer([text], MaskSet::ALL).chant.map_or(0, |c| c.0)
    }

    /// `text` in pieces of the given sizes in turn, each cut at a character boundary.
    fn split(text: &str, mut sizes: impl Iterator<Item = usize>) -> Vec<&str> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(size) = sizes.next().filter(|_| !rest.is_empty()) {
            let mut cut = size.min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            let (piece, tail) = rest.split_at(cut);
            out.push(piece);
            rest = tail;
        }
        out
    }

    /// The highest count found feeding `text` in pieces of `size` bytes, whose print must
    /// be the whole text's.
    fn pieces(text: &str, size: usize) -> u32 {
        let read = read_answer(split(text, std::iter::repeat(size)), MaskSet::ALL);
        assert_eq!(read.print, ChantTrack::print_of(text, MaskSet::ALL));
        read.chant.map_or(0, |c| c.0)
    }

    /// What answers are made of, for the property below: prose, markdown structure,
    /// numbers and ids to mask, spacing to collapse, non-ASCII text, long runs.
    const FRAGMENTS: &[&str] = &[
        "word ",
        "The same sentence comes back again. ",
        "Again and again and again ",
        "\n",
        "\n\n",
        "\r\n",
        "```\n",
        "~~~~\n",
        "| a | b |\n",
        "|---|---|\n",
        "- ",
        "1. ",
        "12) ",
        "## ",
        "> ",
        "  ",
        "\t",
        "42",
        "3.14 ",
        "pid 4821 ",
        "request_id: a1b2c3 ",
        "550e8400-e29b-41d4-a716-446655440000 ",
        "0x7ffd1234 ",
        "人/ ",
        "°9",
        "é",
        "我们需要检查这个文件。",
        "！",
        "…",
        "\u{b}",
        "│ cell │\n",
        "+--+\n",
    ];

    fn answer_text() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                20 => prop::sample::select(FRAGMENTS).prop_map(str::to_owned),
                1 => (1usize..6000).prop_map(|n| "y".repeat(n)),
                1 => (1usize..400).prop_map(|n| "long words ".repeat(n)),
            ],
            0..120,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any split of a text reads as the whole text: the same print, the same chant
        /// (count and segment), masked or not.
        #[test]
        fn any_split_reads_as_the_whole(
            text in answer_text(),
            sizes in prop::collection::vec(1usize..300, 1..16),
            masked in proptest::prelude::any::<bool>(),
        ) {
            let mask = if masked { MaskSet::ALL } else { MaskSet::NONE };
            let whole = read_answer([text.as_str()], mask);
            let pieces = split(&text, sizes.iter().copied().cycle());
            proptest::prop_assert_eq!(read_answer(pieces, mask), whole);
        }

        /// The print is each line's words, masked, joined by single spaces, blank lines
        /// left out, however a line is read (the one pass over a short line, or the
        /// general way).
        #[test]
        fn the_print_is_the_masked_words_of_each_line(
            parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..80),
            masked in proptest::prelude::any::<bool>(),
        ) {
            let text = parts.concat();
            let mask = if masked { MaskSet::ALL } else { MaskSet::NONE };
            let mut want = 0;
            for line in text.split('\n') {
                let line = line.strip_suffix('\r').unwrap_or(line);
                let words = crate::masking::mask(line, mask)
                    .split_ascii_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                if !words.is_empty() {
                    want = mix(want, xxh3_64(words.as_bytes())) | 1;
                }
            }
            proptest::prop_assert_eq!(ChantTrack::print_of(&text, mask), want);
        }
    }

    #[test]
    fn short_facts_are_the_bytes_tested_one_by_one() {
        let alphabet = b" \t\r\x0c\x0b09a.\xe4\xba\xba/";
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 70) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|k| alphabet[((state >> (k % 50)) as usize + k * 7) % alphabet.len()])
                .collect();
            let facts = short_facts(&bytes);
            if len > 64 {
                assert_eq!(facts, None);
                continue;
            }
            let digits = bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| b.is_ascii_digit())
                .fold(0u64, |bits, (k, _)| bits | 1 << k);
            let odd = bytes.iter().any(|b| matches!(b, b'\t' | b'\r' | 0x0C))
                || bytes.windows(2).any(|w| w == b"  ");
            assert_eq!(
                facts,
                Some(ShortFacts {
                    digits,
                    odd_spacing: odd
                }),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn a_repeated_sentence_chants() {
        let text = "I will now fix the failing test in the parser. ".repeat(12);
        assert_eq!(whole(&text), 12);
        let lines = "Let me check the configuration file again.\n".repeat(9);
        assert_eq!(whole(&lines), 9);
    }

    #[test]
    fn a_phrase_without_punctuation_chants() {
        let text = "and then we go back to the start and then ".repeat(40);
        assert!(whole(&text) >= 10, "{}", whole(&text));
        let cjk = "我们需要检查这个文件。".repeat(30);
        assert!(whole(&cjk) >= 10, "{}", whole(&cjk));
    }

    #[test]
    fn a_repeated_paragraph_chants() {
        let paragraph = "The build fails because the import is missing. I will add the import. \
Then I will run the tests again to confirm.\n\n";
        assert_eq!(whole(&paragraph.repeat(10)), 10);
    }

    #[test]
    fn a_numbered_list_of_one_item_chants() {
        let list: String = (1..=12)
            .map(|i| format!("{i}. Run the test suite and check the output.\n"))
            .collect();
        assert_eq!(whole(&list), 12);
    }

    #[test]
    fn streamed_in_any_pieces_is_judged_as_whole() {
        let texts = [
            "Hello there, this is fine. ".repeat(3)
                + "```\nfor x in y:\n    print(x)\n    print(x)\n```\n"
                + &"I will try the command once more now.\n".repeat(7),
            "| a | b |\n|---|---|\n| 1 | 1 |\n".repeat(20),
            format!("{}\n", "x".repeat(9000))
                + &"The same sentence again and again here. ".repeat(30),
        ];
        for text in &texts {
            let w = whole(text);
            for size in [1, 2, 3, 7, 64, 4095, 5000] {
                assert_eq!(pieces(text, size), w, "pieces of {size}");
            }
        }
    }

    #[test]
    fn code_blocks_never_chant() {
        let code = format!(
            "Here is the file:\n```rust\n{}```\nDone.",
            "    assert_eq!(parse(\"1\"), Ok(1));\n".repeat(50)
        );
        assert_eq!(whole(&code), 0);
        let tilde = format!("~~~\n{}~~~\n", "0, 0, 0, 0, 0, 0, 0, 0, 0, 0,\n".repeat(40));
        assert_eq!(whole(&tilde), 0);
    }

    #[test]
    fn tables_and_dividers_never_chant() {
        let table = format!(
            "| feature | linux | macos | windows |\n|---|---|---|---|\n{}",
            "| supported everywhere | yes | yes | yes |\n".repeat(30)
        );
        assert_eq!(whole(&table), 0);
        let boxed = "│ same cell text │ same cell text │\n".repeat(30);
        assert_eq!(whole(&boxed), 0);
        let rules = "----------------------------------------\n".repeat(30);
        assert_eq!(whole(&rules), 0);
    }

    #[test]
    fn structured_answers_with_a_shared_line_do_not_chant() {
        let report: String = (1..=15)
            .map(|i| format!("### Test case {i}\n**Result:** passed without errors\n\n"))
            .collect();
        assert_eq!(whole(&report), 0);
        let intro: String = (1..=12)
            .map(|i| {
                format!(
                    "Here is the updated function:\n```python\ndef f{i}():\n    return {i}\n```\n"
                )
            })
            .collect();
        assert_eq!(whole(&intro), 0);
        let items: String = (1..=20)
            .map(|i| {
                format!("- Checked module_{i}.py for the bug. No changes were needed there.\n")
            })
            .collect();
        assert!(whole(&items) < 3, "{}", whole(&items));
        let api: String = ["parse", "render", "load", "save", "open", "close", "read", "write", "seek", "flush"]
            .iter()
            .map(|f| format!("## `{f}()`\n\n#### Parameters\n\n- `path`: the file to {f}.\n\n#### Returns\n\nNothing is returned by this function.\n\n"))
            .collect();
        assert!(whole(&api) < 3, "{}", whole(&api));
    }

    #[test]
    fn the_print_masks_and_collapses_whitespace() {
        let p = |t: &str| ChantTrack::print_of(t, MaskSet::ALL);
        assert_eq!(
            p("run  550e8400-e29b-41d4-a716-446655440000 failed\n\n"),
            p("run 123e4567-e89b-12d3-a456-426614174000   failed")
        );
        assert_ne!(p("one line"), p("another line"));
        assert_eq!(p("   \n\t"), 0);
        assert_ne!(p("x"), 0);
    }

    #[test]
    fn the_excerpt_is_cut() {
        let mut t = ChantTrack::new(true);
        let sentence = format!("{} end.", "word ".repeat(30));
        let found = t
            .feed(&format!("{}\n", sentence).repeat(5), MaskSet::NONE)
            .unwrap();
        assert!(found.excerpt.ends_with('…'));
        assert_eq!(found.excerpt.chars().count(), EXCERPT_CHARS + 1);
    }

    #[test]
    fn state_stays_bounded() {
        let mut t = ChantTrack::new(true);
        for _ in 0..100 {
            t.feed(&"y".repeat(10_000), MaskSet::NONE);
        }
        assert!(t.pending.len() <= LINE_CAP);
        assert!(t.steps.len() <= WINDOW);
    }

    /// A track read back from bytes may hold more steps than one keeps (a corrupt or
    /// crafted state): it is judged without a panic and shrinks back to its window.
    #[test]
    fn an_oversized_track_from_bytes_is_no_panic() {
        let mut t = ChantTrack::new(true);
        let hash = xxh3_64(b"The same sentence said once more.");
        for _ in 0..3 * WINDOW {
            t.prefix = t.prefix.wrapping_mul(BASE).wrapping_add(hash);
            t.steps.push_back(Step {
                hash,
                prefix: t.prefix,
                compared: true,
            });
        }
        let found = t.feed("The same sentence said once more.\n", MaskSet::NONE);
        assert_eq!(found.map(|c| c.count), Some(WINDOW as u32));
        assert!(t.steps.len() <= WINDOW);
    }
}

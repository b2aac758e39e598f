//! JSON text tokenized into a flat tape: the raw form behind [`Raw`].
//!
//! # Why a tape
//!
//! A front end fingerprints the `args` and `result` of every event it reads. Building a
//! `serde_json::Value` for that costs an allocation per string, array and object, a
//! cache-cold tree walk to hash it, and the tree's destruction: most of the time spent on a
//! small event. The canonical encoding only needs to visit each value once, in key order,
//! and to look up a few members (`details.status`, `content[].text`, `args.action`). So the
//! text is tokenized once, in one pass and without recursion, into a flat array of 12-byte
//! [`Node`]s in document order: scalars point back into the text, containers record their
//! element count and where they end (so a subtree is skipped in one step). A [`Tape`] is
//! reused from one event to the next, so a steady stream of events allocates nothing.
//!
//! A streaming reader over `&RawValue` was the alternative; it would have to read an
//! object twice (members must be hashed in key order, not text order) and re-scan strings
//! for every lookup, and `serde_json` keeps a nesting limit of 128 that valid input
//! exceeds. The tape has no depth limit: its stack of open containers lives on the heap.
//!
//! # What is kept
//!
//! - Strings without escapes are spans of the text. Strings with escapes are unescaped
//!   once, while tokenizing, into an arena; one with a lone surrogate escape (valid JSON
//!   that no Rust string can hold) goes, as WTF-8, into a second arena.
//! - Numbers are spans of the text, canonicalised only when hashed ([`super::Canonical`]),
//!   so `1e999` is kept, by its text.
//! - Objects keep their members in text order, duplicates included; lookups take the last
//!   one, and iteration in key order ([`super::Object::sorted`]) orders an object when it
//!   is hashed, unless its keys are already in order ([`super::key_order`]).
//! - What a reader says it does not read ([`Tape::parse_read`]: the members of an event and
//!   of a result that the engine never looks at) is checked to be JSON and left out: no
//!   nodes, nothing unescaped.
//!
//! The input must be UTF-8 (`&str`): callers check it once, and report it as they need.

use std::fmt;

use super::{Json, Kind, Num, Str};

const NULL: u8 = 0;
const FALSE: u8 = 1;
const TRUE: u8 = 2;
/// A number written without fraction or exponent.
const INT: u8 = 3;
/// Any other number.
const FLOAT: u8 = 4;
/// A string without escapes: a span of the text.
const STR: u8 = 5;
/// A string with escapes, unescaped into the Unicode arena.
const STR_ESCAPED: u8 = 6;
/// A string with a lone surrogate, as WTF-8 in the second arena.
const STR_WTF8: u8 = 7;
const ARRAY: u8 = 8;
const OBJECT: u8 = 9;

/// One value of the tape. Scalars: `a`, `b` are the start and length of their text (or
/// arena) span. Containers: `a` is the element (or member) count, `b` the index of the
/// first node after the container. An object's members are a key node followed by the
/// value's nodes.
#[derive(Clone, Copy, Debug)]
pub struct Node {
    tag: u8,
    a: u32,
    b: u32,
}

/// Arenas larger than this are given back when the next text starts, so that one huge
/// event does not keep its memory for the rest of a stream.
const KEEP_BYTES: usize = 32 << 20;

/// Reusable buffers for tokenizing JSON texts one after the other.
#[derive(Debug, Default)]
pub struct Tape {
    nodes: Vec<Node>,
    /// Open containers.
    stack: Vec<Open>,
    unescaped: String,
    wtf8: Vec<u8>,
    /// Of a text tokenized with [`Tape::parse_read`] whose root is an object: the value
    /// node of each member its [`Read`] names, in that order (0: absent).
    found: Vec<u32>,
    /// What is read of the open containers a [`Read`] prunes, innermost last.
    reads: Vec<Pruned>,
    /// The open containers of a value being stepped over (whether each is an object).
    skipped: Vec<bool>,
}

/// An open container while tokenizing.
#[derive(Clone, Copy, Debug)]
struct Open {
    /// Its node.
    at: u32,
    /// Elements (members kept) so far.
    count: u32,
    object: bool,
    /// Whether a [`Read`] prunes it (what it reads is on [`Tape::reads`]).
    read: bool,
}

/// What a [`Read`] reads of an open container.
#[derive(Clone, Copy, Debug)]
enum Pruned {
    /// Of an object, the members named.
    Members(&'static [Member]),
    /// Of an array, each element as said.
    Items(&'static Read),
}

/// What a reader reads of a JSON value ([`Tape::parse_read`]): what is not read is checked
/// to be JSON and left out of the tape (no nodes, nothing unescaped).
#[derive(Clone, Copy, Debug)]
pub enum Read {
    /// All of it.
    All,
    /// Of an object, the members named, each read as said (a value that is not an object
    /// is read whole).
    Members(&'static [Member]),
    /// Of an array, each element as said (a value that is not an array is read whole).
    Items(&'static Read),
}

/// A member a [`Read`] names, and what is read of its value.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    name: &'static str,
    /// The name's [`super::key_prefix`], to tell keys apart without comparing bytes.
    prefix: u64,
    read: Read,
}

impl Member {
    /// The member `name`, read as `read` says.
    pub const fn new(name: &'static str, read: Read) -> Self {
        Self {
            name,
            prefix: super::key_prefix(name.as_bytes()),
            read,
        }
    }

    /// Its name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Whether `key`, whose [`super::key_prefix`] is `prefix`, is this member's name.
    #[inline(always)]
    fn is(&self, key: &[u8], prefix: u64) -> bool {
        self.prefix == prefix
            && self.name.len() == key.len()
            && (key.len() <= 8 || self.name.as_bytes() == key)
    }
}

/// What is read of a value a [`Read`] names: `None` for all of it.
#[inline(always)]
fn read_of(read: &'static Read) -> Option<&'static Read> {
    match read {
        Read::All => None,
        read => Some(read),
    }
}

/// A tokenized JSON text: the tape and the text it points into.
#[derive(Clone, Copy, Debug)]
struct Doc<'a> {
    tape: &'a Tape,
    text: &'a str,
}

/// A value of a tokenized text ([`Tape::parse`]).
#[derive(Clone, Copy)]
pub struct Raw<'a> {
    doc: Doc<'a>,
    at: u32,
}

/// Why a text is not JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsonErrorKind {
    /// The text ends inside a value.
    EndOfInput,
    /// Something other than a value where a value must be.
    ExpectedValue,
    /// An object key that is not a string.
    ExpectedKey,
    /// No `:` after an object key.
    ExpectedColon,
    /// No `,` or closing bracket after an element.
    ExpectedCommaOrEnd,
    /// A malformed number (`01`, `1.`, `-`).
    InvalidNumber,
    /// A malformed escape in a string (`\x`, `\u12`).
    InvalidEscape,
    /// A control character (U+0000 to U+001F) inside a string.
    ControlCharacter,
    /// More than whitespace after the value.
    TrailingCharacters,
    /// A text of 4 GiB or more.
    TooLong,
}

/// Why a text is not JSON, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// What is wrong.
    pub kind: JsonErrorKind,
    /// The byte offset where it was found.
    pub offset: usize,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            JsonErrorKind::EndOfInput => "the text ends inside a value",
            JsonErrorKind::ExpectedValue => "expected a value",
            JsonErrorKind::ExpectedKey => "expected a string key",
            JsonErrorKind::ExpectedColon => "expected `:`",
            JsonErrorKind::ExpectedCommaOrEnd => "expected `,` or a closing bracket",
            JsonErrorKind::InvalidNumber => "invalid number",
            JsonErrorKind::InvalidEscape => "invalid escape",
            JsonErrorKind::ControlCharacter => "control character in a string",
            JsonErrorKind::TrailingCharacters => "trailing characters after the value",
            JsonErrorKind::TooLong => "the text is 4 GiB or longer",
        };
        write!(f, "{what} at byte {}", self.offset)
    }
}

impl std::error::Error for JsonError {}

impl Tape {
    /// An empty tape.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tokenizes `text`, which must hold exactly one JSON value (whitespace around it is
    /// allowed), and returns that value. Any valid JSON is accepted, at any depth.
    pub fn parse<'a>(&'a mut self, text: &'a str) -> Result<Raw<'a>, JsonError> {
        self.parse_as(text, None)
    }

    /// [`Tape::parse`], keeping only what `read` says a reader reads: the other members
    /// of the objects it names are checked to be JSON (the text is refused exactly when
    /// [`Tape::parse`] refuses it) but get no tape entries and are not unescaped, and
    /// reading the result is as if they were not in the text. When `read` names members
    /// of the root, the value of each (its last occurrence) is also noted for
    /// [`Raw::read_member`]: a reader of those members need not look them up.
    pub fn parse_read<'a>(
        &'a mut self,
        text: &'a str,
        read: &'static Read,
    ) -> Result<Raw<'a>, JsonError> {
        self.parse_as(text, read_of(read))
    }

    fn parse_as<'a>(
        &'a mut self,
        text: &'a str,
        read: Option<&'static Read>,
    ) -> Result<Raw<'a>, JsonError> {
        if u32::try_from(text.len()).is_err() {
            return Err(JsonError {
                kind: JsonErrorKind::TooLong,
                offset: 0,
            });
        }
        self.reset();
        if let Some(Read::Members(names)) = read {
            self.found.resize(names.len(), 0);
        }
        Parser {
            b: text.as_bytes(),
            text,
            i: 0,
            tape: self,
        }
        .run(read)?;
        Ok(Raw {
            doc: Doc { tape: self, text },
            at: 0,
        })
    }

    fn reset(&mut self) {
        self.nodes.clear();
        self.stack.clear();
        self.unescaped.clear();
        self.wtf8.clear();
        self.found.clear();
        self.reads.clear();
        if self.nodes.capacity() * std::mem::size_of::<Node>() > KEEP_BYTES {
            self.nodes
                .shrink_to(KEEP_BYTES / 4 / std::mem::size_of::<Node>());
        }
        if self.stack.capacity() * std::mem::size_of::<Open>() > KEEP_BYTES {
            self.stack
                .shrink_to(KEEP_BYTES / 4 / std::mem::size_of::<Open>());
        }
        if self.unescaped.capacity() > KEEP_BYTES {
            self.unescaped.shrink_to(KEEP_BYTES / 4);
        }
        if self.wtf8.capacity() > KEEP_BYTES {
            self.wtf8.shrink_to(KEEP_BYTES / 4);
        }
    }
}

/// A JSON text and its tape, owned together: a parsed document that can be handed to
/// another thread (a server parses a large body on a blocking thread and reads it on the
/// runtime) and read as often as needed without tokenizing it again.
#[derive(Debug)]
pub struct Document {
    text: String,
    tape: Tape,
}

impl Document {
    /// Tokenizes `text` into a new tape ([`Tape::parse`]); when it is not JSON, gives the
    /// text back with the error (to report it in other words).
    pub fn parse(text: String) -> Result<Self, (JsonError, String)> {
        let mut tape = Tape::new();
        match tape.parse(&text) {
            Ok(_) => Ok(Self { text, tape }),
            Err(e) => Err((e, text)),
        }
    }

    /// The document's value.
    pub fn root(&self) -> Raw<'_> {
        Raw {
            doc: Doc {
                tape: &self.tape,
                text: &self.text,
            },
            at: 0,
        }
    }

    /// The text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<'a> Doc<'a> {
    #[inline]
    fn node(self, at: u32) -> Node {
        self.tape.nodes[at as usize]
    }

    #[inline]
    fn end(self, at: u32) -> u32 {
        let n = self.node(at);
        if n.tag >= ARRAY {
            n.b
        } else {
            at + 1
        }
    }

    #[inline]
    fn str_at(self, at: u32) -> Str<'a> {
        let n = self.node(at);
        let span = n.a as usize..(n.a + n.b) as usize;
        match n.tag {
            STR => Str::Text(&self.text[span]),
            STR_ESCAPED => Str::Text(&self.tape.unescaped[span]),
            _ => Str::Wtf8(&self.tape.wtf8[span]),
        }
    }

    /// A key's bytes (no check of UTF-8 boundaries: keys are compared as bytes).
    #[inline]
    fn key_at(self, at: u32) -> &'a [u8] {
        let n = self.node(at);
        let span = n.a as usize..(n.a + n.b) as usize;
        match n.tag {
            STR => &self.text.as_bytes()[span],
            STR_ESCAPED => &self.tape.unescaped.as_bytes()[span],
            _ => &self.tape.wtf8[span],
        }
    }
}

impl fmt::Debug for Raw<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Raw(#{}: {:?})", self.at, self.doc.node(self.at))
    }
}

impl<'a> Raw<'a> {
    /// The value as JSON text, as it was written but for whitespace and escapes: members
    /// in their order (duplicates included), numbers with their own digits. What a proxy
    /// forwards when it must rewrite a message around a value. Iterative.
    pub fn to_json_text(self) -> String {
        let doc = self.doc;
        let mut out = String::new();
        // Containers still open: where they end, and whether they are objects.
        let mut open: Vec<(u32, bool)> = Vec::new();
        let mut at = self.at;
        let end = doc.end(self.at);
        // Whether the next node is the first inside its container.
        let mut first = true;
        while at < end {
            while let Some(&(close, object)) = open.last() {
                if close > at {
                    break;
                }
                out.push(if object { '}' } else { ']' });
                open.pop();
                first = false;
            }
            let in_object = open.last().is_some_and(|&(_, object)| object);
            if !first {
                out.push(',');
            }
            if in_object {
                doc.str_at(at).push_json(&mut out);
                out.push(':');
                at += 1;
            }
            let n = doc.node(at);
            first = false;
            match n.tag {
                NULL => out.push_str("null"),
                FALSE => out.push_str("false"),
                TRUE => out.push_str("true"),
                INT | FLOAT => out.push_str(&doc.text[n.a as usize..(n.a + n.b) as usize]),
                STR | STR_ESCAPED | STR_WTF8 => doc.str_at(at).push_json(&mut out),
                tag => {
                    let object = tag == OBJECT;
                    out.push(if object { '{' } else { '[' });
                    open.push((n.b, object));
                    first = true;
                }
            }
            at += 1;
        }
        while let Some((_, object)) = open.pop() {
            out.push(if object { '}' } else { ']' });
        }
        out
    }

    /// The member that the [`Read`] of [`Tape::parse_read`] names `i`-th (counting from
    /// 0), of the root object of the text: its last occurrence, found while tokenizing.
    /// `None` when the text has no such member, and for a text tokenized otherwise.
    pub fn read_member(self, i: usize) -> Option<Raw<'a>> {
        match self.doc.tape.found.get(i) {
            Some(&at) if at > 0 => Some(Raw { doc: self.doc, at }),
            _ => None,
        }
    }

    /// The value as a `serde_json::Value` ([`super::to_value`]).
    pub fn to_value(self) -> Option<serde_json::Value> {
        super::to_value(self)
    }
}

impl<'a> Json<'a> for Raw<'a> {
    type Items = Items<'a>;
    type Object = Object<'a>;

    #[inline]
    fn kind(self) -> Kind<'a, Self> {
        let doc = self.doc;
        let n = doc.node(self.at);
        match n.tag {
            NULL => Kind::Null,
            FALSE => Kind::Bool(false),
            TRUE => Kind::Bool(true),
            INT | FLOAT => Kind::Number(Num::Text(&doc.text[n.a as usize..(n.a + n.b) as usize])),
            STR | STR_ESCAPED | STR_WTF8 => Kind::String(doc.str_at(self.at)),
            ARRAY => Kind::Array(Items {
                doc,
                next: self.at + 1,
                left: n.a,
            }),
            _ => Kind::Object(Object { doc, at: self.at }),
        }
    }
}

/// The elements of a raw array.
#[derive(Clone, Copy, Debug)]
pub struct Items<'a> {
    doc: Doc<'a>,
    next: u32,
    left: u32,
}

impl<'a> Iterator for Items<'a> {
    type Item = Raw<'a>;

    #[inline]
    fn next(&mut self) -> Option<Raw<'a>> {
        if self.left == 0 {
            return None;
        }
        let item = Raw {
            doc: self.doc,
            at: self.next,
        };
        self.next = self.doc.end(self.next);
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Items<'_> {}

/// A raw object.
#[derive(Clone, Copy, Debug)]
pub struct Object<'a> {
    doc: Doc<'a>,
    at: u32,
}

/// An iteration over a raw object's members in key order.
#[derive(Clone, Copy, Debug)]
pub enum Sorted {
    /// The keys are already in strictly ascending order: the tape's own order.
    InPlace {
        /// The next key node.
        next: u32,
        /// Members left.
        left: u32,
    },
    /// Key nodes sorted into the scratch array, `scratch[pos..end]`.
    Scratch {
        /// The next position.
        pos: u32,
        /// The end.
        end: u32,
    },
}

impl<'a> Object<'a> {
    /// The key nodes, in text order.
    fn key_nodes(self) -> impl ExactSizeIterator<Item = u32> + 'a {
        let doc = self.doc;
        let mut key = self.at + 1;
        (0..doc.node(self.at).a).map(move |_| {
            let k = key;
            key = doc.end(k + 1);
            k
        })
    }

    /// The members in text order (duplicates included): key and value.
    pub fn members(self) -> impl Iterator<Item = (Str<'a>, Raw<'a>)> + 'a {
        let doc = self.doc;
        let n = doc.node(self.at);
        let mut key = self.at + 1;
        (0..n.a).map(move |_| {
            let k = key;
            key = doc.end(k + 1);
            (doc.str_at(k), Raw { doc, at: k + 1 })
        })
    }

    /// The object as a value.
    pub fn as_raw(self) -> Raw<'a> {
        Raw {
            doc: self.doc,
            at: self.at,
        }
    }
}

impl<'a> super::Object<'a> for Object<'a> {
    type Value = Raw<'a>;
    type Sorted = Sorted;

    fn get(self, key: &str) -> Option<Raw<'a>> {
        let doc = self.doc;
        let want = key.as_bytes();
        let mut found = None;
        for k in self.key_nodes() {
            // The length is in the node: most keys are told apart without their bytes.
            if doc.node(k).b as usize == want.len() && doc.key_at(k) == want {
                found = Some(k + 1);
            }
        }
        found.map(|at| Raw { doc, at })
    }

    fn each_key(self, mut f: impl FnMut(&'a [u8])) {
        let doc = self.doc;
        self.key_nodes().for_each(|k| f(doc.key_at(k)));
    }

    fn sorted(self, scratch: &mut Vec<u32>) -> (usize, Sorted) {
        let doc = self.doc;
        let start = scratch.len();
        match super::key_order(self.key_nodes(), |k| doc.key_at(k), scratch) {
            // Already in order (the common case for small objects): the tape's own order.
            None => {
                let n = doc.node(self.at);
                (
                    n.a as usize,
                    Sorted::InPlace {
                        next: self.at + 1,
                        left: n.a,
                    },
                )
            }
            Some(kept) => (
                kept,
                Sorted::Scratch {
                    pos: start as u32,
                    end: (start + kept) as u32,
                },
            ),
        }
    }

    #[inline]
    fn next_sorted(self, it: &mut Sorted, scratch: &[u32]) -> Option<(&'a [u8], Raw<'a>)> {
        let doc = self.doc;
        let k = match it {
            Sorted::InPlace { next, left } => {
                if *left == 0 {
                    return None;
                }
                let k = *next;
                *next = doc.end(k + 1);
                *left -= 1;
                k
            }
            Sorted::Scratch { pos, end } => {
                if pos >= end {
                    return None;
                }
                let k = scratch[*pos as usize];
                *pos += 1;
                k
            }
        };
        Some((doc.key_at(k), Raw { doc, at: k + 1 }))
    }
}

/// The tokenizer: one pass, a heap stack of open containers, no recursion.
struct Parser<'t, 'a> {
    b: &'a [u8],
    text: &'a str,
    i: usize,
    tape: &'t mut Tape,
}

/// Whether a byte ends a run of plain string content: `"`, `\` or a control character.
#[inline(always)]
fn is_special(c: u8) -> bool {
    (c == b'"') | (c == b'\\') | (c < 0x20)
}

/// The position of the first [special](is_special) byte at or after `i` (or the end):
/// eight bytes at a time.
#[inline(always)]
fn skip_plain(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let quote = w ^ (ONES * u64::from(b'"'));
        let slash = w ^ (ONES * u64::from(b'\\'));
        // High bit of each byte that is zero (quote, slash) or below 0x20 (control). The
        // lowest flagged byte is exact, which is all that is used.
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        let found = found & HIGH;
        if found != 0 {
            return i + (found.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !is_special(b[i]) {
        i += 1;
    }
    i
}

impl Parser<'_, '_> {
    fn error<T>(&self, kind: JsonErrorKind, offset: usize) -> Result<T, JsonError> {
        Err(JsonError { kind, offset })
    }

    #[inline(always)]
    fn skip_ws(&mut self) -> Option<u8> {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    #[inline(always)]
    fn push(&mut self, tag: u8, a: usize, b: usize) {
        self.tape.nodes.push(Node {
            tag,
            a: a as u32,
            b: b as u32,
        });
    }

    fn run(&mut self, root: Option<&'static Read>) -> Result<(), JsonError> {
        // What a `Read` says of the value that comes next (`None`: all of it, as almost
        // always).
        let mut part = root;
        'value: loop {
            // A value starts here.
            let Some(c) = self.skip_ws() else {
                return self.error(JsonErrorKind::EndOfInput, self.i);
            };
            match c {
                b'"' => self.string(false)?,
                b'{' => {
                    self.i += 1;
                    let at = self.tape.nodes.len() as u32;
                    self.push(OBJECT, 0, 0);
                    match self.skip_ws() {
                        Some(b'}') => {
                            self.i += 1;
                            self.tape.nodes[at as usize].b = at + 1;
                        }
                        Some(_) => {
                            let names = match part.take() {
                                Some(Read::Members(names)) => Some(*names),
                                _ => None,
                            };
                            self.tape.stack.push(Open {
                                at,
                                count: 1,
                                object: true,
                                read: names.is_some(),
                            });
                            match names {
                                None => {
                                    self.key()?;
                                    continue 'value;
                                }
                                Some(names) => {
                                    self.tape.reads.push(Pruned::Members(names));
                                    if let Some(read) = self.member(names)? {
                                        part = read;
                                        continue 'value;
                                    }
                                }
                            }
                        }
                        None => return self.error(JsonErrorKind::EndOfInput, self.i),
                    }
                }
                b'[' => {
                    self.i += 1;
                    let at = self.tape.nodes.len() as u32;
                    self.push(ARRAY, 0, 0);
                    match self.skip_ws() {
                        Some(b']') => {
                            self.i += 1;
                            self.tape.nodes[at as usize].b = at + 1;
                        }
                        Some(_) => {
                            let item = match part.take() {
                                Some(Read::Items(item)) => Some(*item),
                                _ => None,
                            };
                            self.tape.stack.push(Open {
                                at,
                                count: 1,
                                object: false,
                                read: item.is_some(),
                            });
                            if let Some(item) = item {
                                self.tape.reads.push(Pruned::Items(item));
                                part = read_of(item);
                            }
                            continue 'value;
                        }
                        None => return self.error(JsonErrorKind::EndOfInput, self.i),
                    }
                }
                b'-' | b'+' | b'0'..=b'9' | b'N' | b'I' => self.number(false)?,
                b't' => self.literal(b"true", TRUE, false)?,
                b'f' => self.literal(b"false", FALSE, false)?,
                b'n' => self.literal(b"null", NULL, false)?,
                _ => return self.error(JsonErrorKind::ExpectedValue, self.i),
            }
            part = None;
            // After a value: the next element, or the end of containers.
            loop {
                let Some(&top) = self.tape.stack.last() else {
                    return match self.skip_ws() {
                        None => Ok(()),
                        Some(_) => self.error(JsonErrorKind::TrailingCharacters, self.i),
                    };
                };
                match self.skip_ws() {
                    Some(b',') => {
                        self.i += 1;
                        if let Some(open) = self.tape.stack.last_mut() {
                            open.count += 1;
                        }
                        if !top.read {
                            if top.object {
                                self.key()?;
                            }
                            continue 'value;
                        }
                        match self.tape.reads.last() {
                            Some(&Pruned::Members(names)) => {
                                if let Some(read) = self.member(names)? {
                                    part = read;
                                    continue 'value;
                                }
                                // A member left out: on to the next.
                                continue;
                            }
                            Some(&Pruned::Items(item)) => {
                                part = read_of(item);
                                continue 'value;
                            }
                            None => continue 'value,
                        }
                    }
                    Some(b'}') if top.object => {}
                    Some(b']') if !top.object => {}
                    Some(_) => return self.error(JsonErrorKind::ExpectedCommaOrEnd, self.i),
                    None => return self.error(JsonErrorKind::EndOfInput, self.i),
                }
                self.i += 1;
                self.tape.stack.pop();
                if top.read {
                    self.tape.reads.pop();
                }
                let end = self.tape.nodes.len() as u32;
                let node = &mut self.tape.nodes[top.at as usize];
                node.a = top.count;
                node.b = end;
            }
        }
    }

    /// An object member's key and its colon, in an object whose members `names` says are
    /// read: what is read of the value, or `None` when the member is left out (its value
    /// checked and stepped over, its key taken off the tape, the member not counted).
    #[inline(always)]
    fn member(
        &mut self,
        names: &'static [Member],
    ) -> Result<Option<Option<&'static Read>>, JsonError> {
        let at = self.tape.nodes.len();
        self.key()?;
        let node = self.tape.nodes[at];
        let span = node.a as usize..(node.a + node.b) as usize;
        let key = match node.tag {
            STR => &self.b[span],
            STR_ESCAPED => &self.tape.unescaped.as_bytes()[span],
            _ => &self.tape.wtf8[span],
        };
        let prefix = super::key_prefix(key);
        if let Some(i) = names.iter().position(|m| m.is(key, prefix)) {
            // The root's members are noted as they are found (the last one counts).
            if self.tape.stack.len() == 1 {
                if let Some(slot) = self.tape.found.get_mut(i) {
                    *slot = at as u32 + 1;
                }
            }
            return Ok(Some(read_of(&names[i].read)));
        }
        self.tape.nodes.truncate(at);
        match node.tag {
            STR_ESCAPED => self.tape.unescaped.truncate(node.a as usize),
            STR_WTF8 => self.tape.wtf8.truncate(node.a as usize),
            _ => {}
        }
        if let Some(open) = self.tape.stack.last_mut() {
            open.count -= 1;
        }
        self.skip_value()?;
        Ok(None)
    }

    /// Checks the value at `self.i` to be JSON and steps over it, building nothing (the
    /// same grammar as [`Parser::run`], and so the same errors).
    fn skip_value(&mut self) -> Result<(), JsonError> {
        let mut open = std::mem::take(&mut self.tape.skipped);
        open.clear();
        let done = self.skip_into(&mut open);
        self.tape.skipped = open;
        done
    }

    fn skip_into(&mut self, open: &mut Vec<bool>) -> Result<(), JsonError> {
        'value: loop {
            let Some(c) = self.skip_ws() else {
                return self.error(JsonErrorKind::EndOfInput, self.i);
            };
            match c {
                b'"' => self.string(true)?,
                b'{' | b'[' => {
                    self.i += 1;
                    let object = c == b'{';
                    match self.skip_ws() {
                        Some(b'}') if object => self.i += 1,
                        Some(b']') if !object => self.i += 1,
                        Some(_) => {
                            open.push(object);
                            if object {
                                self.skip_key()?;
                            }
                            continue 'value;
                        }
                        None => return self.error(JsonErrorKind::EndOfInput, self.i),
                    }
                }
                b'-' | b'+' | b'0'..=b'9' | b'N' | b'I' => self.number(true)?,
                b't' => self.literal(b"true", TRUE, true)?,
                b'f' => self.literal(b"false", FALSE, true)?,
                b'n' => self.literal(b"null", NULL, true)?,
                _ => return self.error(JsonErrorKind::ExpectedValue, self.i),
            }
            loop {
                let Some(&object) = open.last() else {
                    return Ok(());
                };
                match self.skip_ws() {
                    Some(b',') => {
                        self.i += 1;
                        if object {
                            self.skip_key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => {}
                    Some(b']') if !object => {}
                    Some(_) => return self.error(JsonErrorKind::ExpectedCommaOrEnd, self.i),
                    None => return self.error(JsonErrorKind::EndOfInput, self.i),
                }
                self.i += 1;
                open.pop();
            }
        }
    }

    /// A key of a value left out, and its colon.
    fn skip_key(&mut self) -> Result<(), JsonError> {
        match self.skip_ws() {
            Some(b'"') => self.string(true)?,
            Some(_) => return self.error(JsonErrorKind::ExpectedKey, self.i),
            None => return self.error(JsonErrorKind::EndOfInput, self.i),
        }
        self.colon()
    }

    /// An object key and its colon.
    fn key(&mut self) -> Result<(), JsonError> {
        match self.skip_ws() {
            Some(b'"') => self.string(false)?,
            Some(_) => return self.error(JsonErrorKind::ExpectedKey, self.i),
            None => return self.error(JsonErrorKind::EndOfInput, self.i),
        }
        self.colon()
    }

    /// The colon after a key.
    #[inline(always)]
    fn colon(&mut self) -> Result<(), JsonError> {
        match self.skip_ws() {
            Some(b':') => {
                self.i += 1;
                Ok(())
            }
            Some(_) => self.error(JsonErrorKind::ExpectedColon, self.i),
            None => self.error(JsonErrorKind::EndOfInput, self.i),
        }
    }

    fn literal(&mut self, word: &[u8], tag: u8, skip: bool) -> Result<(), JsonError> {
        match self.b.get(self.i..self.i + word.len()) {
            Some(w) if w == word => {
                self.i += word.len();
                if !skip {
                    self.push(tag, 0, 0);
                }
                Ok(())
            }
            _ => {
                // Where it stops matching (or ends).
                let matched = self.b[self.i..]
                    .iter()
                    .zip(word)
                    .take_while(|(a, b)| a == b)
                    .count();
                let at = self.i + matched;
                let kind = if at >= self.b.len() {
                    JsonErrorKind::EndOfInput
                } else {
                    JsonErrorKind::ExpectedValue
                };
                self.error(kind, at)
            }
        }
    }

    fn number(&mut self, skip: bool) -> Result<(), JsonError> {
        let b = self.b;
        let start = self.i;
        if let Some(len) = non_finite_len(&b[start..]) {
            self.i = start + len;
            if !skip {
                self.push(FLOAT, start, len);
            }
            return Ok(());
        }
        let mut i = start;
        let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
        let need_digit = |i: usize| -> Result<(), JsonError> {
            match b.get(i) {
                Some(c) if c.is_ascii_digit() => Ok(()),
                Some(_) => Err(JsonError {
                    kind: JsonErrorKind::InvalidNumber,
                    offset: i,
                }),
                None => Err(JsonError {
                    kind: JsonErrorKind::EndOfInput,
                    offset: i,
                }),
            }
        };
        match b[i] {
            b'-' => i += 1,
            // `+` and letters start a number only as a non-finite literal.
            b'+' | b'N' | b'I' => {
                return Err(JsonError {
                    kind: JsonErrorKind::ExpectedValue,
                    offset: i,
                })
            }
            _ => {}
        }
        need_digit(i)?;
        if b[i] == b'0' {
            i += 1;
        } else {
            while digit(i) {
                i += 1;
            }
        }
        let mut tag = INT;
        if b.get(i) == Some(&b'.') {
            tag = FLOAT;
            i += 1;
            need_digit(i)?;
            while digit(i) {
                i += 1;
            }
        }
        if matches!(b.get(i), Some(b'e' | b'E')) {
            tag = FLOAT;
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            need_digit(i)?;
            while digit(i) {
                i += 1;
            }
        }
        self.i = i;
        if !skip {
            self.push(tag, start, i - start);
        }
        Ok(())
    }

    /// A string; `self.i` is at its opening quote.
    fn string(&mut self, skip: bool) -> Result<(), JsonError> {
        let start = self.i + 1;
        let end = skip_plain(self.b, start);
        match self.b.get(end) {
            Some(b'"') => {
                self.i = end + 1;
                if !skip {
                    self.push(STR, start, end - start);
                }
                Ok(())
            }
            Some(b'\\') if skip => self.skip_escaped(end),
            Some(b'\\') => self.escaped(start, end),
            Some(_) => self.error(JsonErrorKind::ControlCharacter, end),
            None => self.error(JsonErrorKind::EndOfInput, end),
        }
    }

    /// The rest of a string left out of the tape, from its first `\` at `at`: its
    /// escapes are checked, nothing is unescaped.
    fn skip_escaped(&mut self, mut at: usize) -> Result<(), JsonError> {
        loop {
            let (_, next) = escape(self.b, at)?;
            at = skip_plain(self.b, next);
            match self.b.get(at) {
                Some(b'\\') => {}
                Some(b'"') => {
                    self.i = at + 1;
                    return Ok(());
                }
                Some(_) => return self.error(JsonErrorKind::ControlCharacter, at),
                None => return self.error(JsonErrorKind::EndOfInput, at),
            }
        }
    }

    /// The rest of a string with escapes, unescaped into an arena; `at` is its first `\`.
    fn escaped(&mut self, start: usize, mut at: usize) -> Result<(), JsonError> {
        let b = self.b;
        let text = self.text;
        let tape = &mut *self.tape;
        let arena_start = tape.unescaped.len();
        // Where the string's WTF-8 starts, once a lone surrogate has been seen.
        let mut wtf8_start: Option<usize> = None;
        let mut run = start;
        loop {
            // Plain text up to the escape at `at`, then the escape.
            let plain = &text[run..at];
            let simple = b.get(at + 1).map_or(0, |&e| UNESCAPED[usize::from(e)]);
            if simple != 0 && wtf8_start.is_none() {
                // The common escapes (`\n`, `\"`, `\\`, …), one byte each.
                tape.unescaped.push_str(plain);
                tape.unescaped.push(char::from(simple));
                run = at + 2;
                at = skip_plain(b, run);
                if b.get(at) == Some(&b'\\') {
                    continue;
                }
                return self.end_escaped(run, at, arena_start, wtf8_start);
            }
            match wtf8_start {
                None => tape.unescaped.push_str(plain),
                Some(_) => tape.wtf8.extend_from_slice(plain.as_bytes()),
            }
            let (unit, next) = escape(b, at)?;
            match unit {
                Unit::Char(c) => match wtf8_start {
                    None => tape.unescaped.push(c),
                    Some(_) => {
                        let mut buf = [0u8; 4];
                        tape.wtf8
                            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                },
                Unit::Surrogate(s) => {
                    if wtf8_start.is_none() {
                        // Move what was unescaped so far into the WTF-8 arena.
                        wtf8_start = Some(tape.wtf8.len());
                        tape.wtf8
                            .extend_from_slice(&tape.unescaped.as_bytes()[arena_start..]);
                        tape.unescaped.truncate(arena_start);
                    }
                    tape.wtf8.extend_from_slice(&[
                        0xE0 | (s >> 12) as u8,
                        0x80 | ((s >> 6) & 0x3F) as u8,
                        0x80 | (s & 0x3F) as u8,
                    ]);
                }
            }
            run = next;
            at = skip_plain(b, next);
            if b.get(at) != Some(&b'\\') {
                return self.end_escaped(run, at, arena_start, wtf8_start);
            }
        }
    }

    /// The end of a string with escapes: `text[run..at]` is its last plain text, `at` is
    /// where the scan stopped (its closing quote, if it is valid).
    fn end_escaped(
        &mut self,
        run: usize,
        at: usize,
        arena_start: usize,
        wtf8_start: Option<usize>,
    ) -> Result<(), JsonError> {
        match self.b.get(at) {
            Some(b'"') => {}
            Some(_) => return self.error(JsonErrorKind::ControlCharacter, at),
            None => return self.error(JsonErrorKind::EndOfInput, at),
        }
        let plain = &self.text[run..at];
        self.i = at + 1;
        let tape = &mut *self.tape;
        let node = match wtf8_start {
            None => {
                tape.unescaped.push_str(plain);
                Node {
                    tag: STR_ESCAPED,
                    a: arena_start as u32,
                    b: (tape.unescaped.len() - arena_start) as u32,
                }
            }
            Some(w) => {
                tape.wtf8.extend_from_slice(plain.as_bytes());
                Node {
                    tag: STR_WTF8,
                    a: w as u32,
                    b: (tape.wtf8.len() - w) as u32,
                }
            }
        };
        tape.nodes.push(node);
        Ok(())
    }
}

/// What each two-byte escape stands for (`\n` is a newline); 0 for `\u`, which needs
/// more, and for any byte that is not an escape.
const UNESCAPED: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0C;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// What one escape stands for.
enum Unit {
    Char(char),
    /// A UTF-16 surrogate without its pair.
    Surrogate(u16),
}

/// Decodes the escape at `b[at]` (a `\`); returns it and the position after it. A high
/// surrogate escape directly followed by a low one is one character.
fn escape(b: &[u8], at: usize) -> Result<(Unit, usize), JsonError> {
    let invalid = |offset| JsonError {
        kind: JsonErrorKind::InvalidEscape,
        offset,
    };
    let Some(&c) = b.get(at + 1) else {
        return Err(JsonError {
            kind: JsonErrorKind::EndOfInput,
            offset: at + 1,
        });
    };
    let simple = match c {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let n = hex4(b, at + 2)?;
            let next = at + 6;
            return Ok(match n {
                0xD800..=0xDBFF => {
                    let low = (b.get(next) == Some(&b'\\') && b.get(next + 1) == Some(&b'u'))
                        .then(|| hex4(b, next + 2).ok())
                        .flatten()
                        .filter(|m| (0xDC00..=0xDFFF).contains(m));
                    match low {
                        Some(m) => {
                            let c =
                                0x10000 + ((u32::from(n) - 0xD800) << 10) + (u32::from(m) - 0xDC00);
                            (Unit::Char(char::from_u32(c).ok_or(invalid(at))?), next + 6)
                        }
                        None => (Unit::Surrogate(n), next),
                    }
                }
                0xDC00..=0xDFFF => (Unit::Surrogate(n), next),
                _ => (
                    Unit::Char(char::from_u32(u32::from(n)).ok_or(invalid(at))?),
                    next,
                ),
            });
        }
        _ => return Err(invalid(at + 1)),
    };
    Ok((Unit::Char(simple), at + 2))
}

/// Four hex digits at `b[at..]`.
fn hex4(b: &[u8], at: usize) -> Result<u16, JsonError> {
    let mut n = 0u16;
    for i in at..at + 4 {
        let Some(&c) = b.get(i) else {
            return Err(JsonError {
                kind: JsonErrorKind::EndOfInput,
                offset: i,
            });
        };
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => {
                return Err(JsonError {
                    kind: JsonErrorKind::InvalidEscape,
                    offset: i,
                })
            }
        };
        n = n << 4 | u16::from(d);
    }
    Ok(n)
}

/// The length of the non-finite literal `text` starts with, if it starts with one: `NaN`
/// or `Infinity`, signed or not. They are not JSON, but encoders write them (Python's
/// `json` and the clients built on it send `NaN`, `Infinity`, `-Infinity`; JSON5 also
/// signs them with `+`), so they are read as numbers, written as they came, rather than
/// refused: a call whose arguments hold one is still fingerprinted
/// ([`Canonical::of_text`](super::Canonical::of_text) gives each value one spelling).
fn non_finite_len(text: &[u8]) -> Option<usize> {
    let sign = usize::from(matches!(text.first(), Some(b'-' | b'+')));
    let rest = &text[sign..];
    [&b"NaN"[..], b"Infinity"]
        .into_iter()
        .find(|word| rest.starts_with(word))
        .map(|word| sign + word.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Object as _;
    use serde_json::Value;

    fn parse_ok(text: &str) -> Value {
        let mut tape = Tape::new();
        let doc = tape.parse(text).unwrap();
        doc.to_value().unwrap()
    }

    #[test]
    fn round_trips_through_value() {
        for text in [
            "null",
            " true ",
            "false",
            "0",
            "-1.5e3",
            r#""""#,
            r#""a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00""#,
            "[]",
            "{}",
            "[1,[2,[3,{}]],{\"a\":[]}]",
            r#"{"b":1,"a":{"y":[true,null],"x":"s"},"a":2}"#,
            "\t[ 1 , 2 ]\r\n",
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(parse_ok(text), want, "{text}");
        }
    }

    #[test]
    fn rejects_what_serde_json_rejects() {
        for text in [
            "",
            " ",
            "[",
            "{",
            "[1,]",
            "{\"a\"}",
            "{\"a\":}",
            "{1:2}",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "1e+",
            "tru",
            "nul",
            "truex",
            "\"abc",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"a\u{1}b\"",
            "[1] 2",
            "[1 2]",
            "{\"a\" 1}",
            "\u{feff}1",
        ] {
            let mut tape = Tape::new();
            assert!(tape.parse(text).is_err(), "{text:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(text).is_err(),
                "{text:?}"
            );
        }
    }

    /// Some members kept, at the root, in an array and in the objects of an array.
    static READ: Read = Read::Members(&[
        Member::new("a", Read::All),
        Member::new(
            "b",
            Read::Items(&Read::Members(&[Member::new("c", Read::All)])),
        ),
        Member::new("long_name_x", Read::Members(&[Member::new("e", Read::All)])),
    ]);

    #[test]
    fn reading_part_refuses_what_reading_all_refuses() {
        for text in [
            "",
            "[",
            "{\"z\":[1,]}",
            "{\"z\":{\"a\"}}",
            "{\"z\":\"\\x\"}",
            "{\"z\":\"\\u12\"}",
            "{\"z\":tru}",
            "{\"z\":01}",
            "{\"z\":\"a\u{1}\"}",
            "{\"z\":[1 2]}",
            "{\"b\":[{\"z\":{]}]}",
            "{\"z\":1} 2",
            "{\"z\":1,}",
            "{\"z\" 1}",
            "{1:2}",
            "{\"z\":[[[[",
        ] {
            let full = Tape::new().parse(text).err();
            assert!(full.is_some(), "{text:?}");
            assert_eq!(Tape::new().parse_read(text, &READ).err(), full, "{text:?}");
        }
    }

    #[test]
    fn reading_part_keeps_only_what_is_named() {
        let mut tape = Tape::new();
        let text = r#"{"b":[{"c":1,"z":"\n"},2,{"q":[]}],"zz":{"deep":[1,2,{"\u0061":"x\ty"}]},"a":"\t","long_name_x":{"e":1,"f":2,"e":[3]},"long_name_y":{"e":1},"a":3}"#;
        let root = tape.parse_read(text, &READ).unwrap();
        assert_eq!(
            root.to_json_text(),
            r#"{"b":[{"c":1},2,{}],"a":"\t","long_name_x":{"e":1,"e":[3]},"a":3}"#
        );
        // The root's named members as found, the last of a repeated one.
        assert_eq!(root.read_member(0).unwrap().to_json_text(), "3");
        assert_eq!(
            root.read_member(2).unwrap().to_json_text(),
            r#"{"e":1,"e":[3]}"#
        );
        assert!(root.read_member(3).is_none());
        // Nothing left out was unescaped.
        assert_eq!(tape.unescaped, "\t");
        // A value that is not an object, where members are named, is read whole; so is
        // an array whose elements are not objects.
        let root = tape.parse_read(r#"[{"z":1}]"#, &READ).unwrap();
        assert_eq!(root.to_json_text(), r#"[{"z":1}]"#);
        let root = tape
            .parse_read(r#"{"b":{"z":1},"a":[{"z":2}]}"#, &READ)
            .unwrap();
        assert_eq!(root.to_json_text(), r#"{"b":{"z":1},"a":[{"z":2}]}"#);
        // Every member left out.
        let root = tape.parse_read(r#"{"x":1,"y":{"z":[]}}"#, &READ).unwrap();
        assert_eq!(root.to_json_text(), "{}");
        assert_eq!(root.as_object().unwrap().members().count(), 0);
    }

    /// `NaN` and `Infinity`, signed or not, are read as numbers written as they came;
    /// anything else that is not a JSON number is still refused.
    #[test]
    fn reads_non_finite_literals() {
        let mut tape = Tape::new();
        let doc = tape
            .parse("[NaN, -Infinity,+Infinity ,Infinity,+NaN,-NaN,{\"a\":NaN}]")
            .unwrap();
        let texts: Vec<_> = doc
            .as_array()
            .unwrap()
            .filter_map(|item| match item.as_number() {
                Some(Num::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(
            texts,
            ["NaN", "-Infinity", "+Infinity", "Infinity", "+NaN", "-NaN"]
        );
        assert!(doc.to_value().is_none(), "a Value cannot hold them");
        for text in [
            "+1",
            "nan",
            "Inf",
            "-Inf",
            "NaNa",
            "[Infinity1]",
            "+",
            "N",
            "-infinity",
        ] {
            assert!(tape.parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn keeps_what_a_value_cannot_hold() {
        let mut tape = Tape::new();
        let doc = tape
            .parse(r#"[1e999,"a\ud800b","\udc00\ud83d\ude00",-2e400]"#)
            .unwrap();
        let items: Vec<_> = doc.as_array().unwrap().collect();
        assert!(matches!(items[0].as_number(), Some(Num::Text("1e999"))));
        assert_eq!(items[1].as_string(), Some(Str::Wtf8(b"a\xed\xa0\x80b")));
        assert_eq!(
            items[2].as_string(),
            Some(Str::Wtf8(b"\xed\xb0\x80\xf0\x9f\x98\x80"))
        );
        assert!(doc.to_value().is_none());
        // A high surrogate followed by another escape, or by a non-low one.
        let doc = tape.parse(r#""\ud800\n\ud800\u0041""#).unwrap();
        assert_eq!(
            doc.as_string(),
            Some(Str::Wtf8(b"\xed\xa0\x80\n\xed\xa0\x80A"))
        );
    }

    #[test]
    fn json_text_keeps_order_duplicates_and_spelling() {
        let mut tape = Tape::new();
        for text in [
            r#"{"b":1.50,"a":[1e2,{},[],{"x":null,"x":true}],"b":"\u00e9\n"}"#,
            "[]",
            "[[],[[]],{}]",
            r#""\ud800""#,
            "-0",
        ] {
            let raw = tape.parse(text).unwrap();
            let out = raw.to_json_text();
            let want = match text {
                r#"{"b":1.50,"a":[1e2,{},[],{"x":null,"x":true}],"b":"\u00e9\n"}"# => {
                    r#"{"b":1.50,"a":[1e2,{},[],{"x":null,"x":true}],"b":"é\n"}"#
                }
                other => other,
            };
            assert_eq!(out, want);
        }
    }

    #[test]
    fn values_are_built_exactly_where_serde_json_builds_them() {
        let mut tape = Tape::new();
        for depth in 125..=130 {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let text = open.repeat(depth) + "1" + &close.repeat(depth);
                let want = serde_json::from_str::<Value>(&text).ok();
                assert_eq!(tape.parse(&text).unwrap().to_value(), want, "{depth}");
            }
        }
    }

    #[test]
    fn nests_without_limit() {
        let depth = 200_000;
        let text = "[".repeat(depth) + &"]".repeat(depth);
        let mut tape = Tape::new();
        let doc = tape.parse(&text).unwrap();
        assert!(doc.to_value().is_none());
        let mut v = doc;
        for _ in 1..depth {
            v = v.as_array().unwrap().next().unwrap();
        }
        assert_eq!(v.as_array().unwrap().len(), 0);
        let text = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        assert!(tape.parse(&text).is_ok());
    }

    #[test]
    fn lookups_take_the_last_duplicate_and_sorting_drops_the_others() {
        let mut tape = Tape::new();
        let doc = tape.parse(r#"{"b":1,"a":2,"b":3,"\u0061":4}"#).unwrap();
        let obj = doc.as_object().unwrap();
        assert!(matches!(
            obj.get("b").unwrap().as_number(),
            Some(Num::Text("3"))
        ));
        assert!(matches!(
            obj.get("a").unwrap().as_number(),
            Some(Num::Text("4"))
        ));
        let mut scratch = vec![7];
        let (n, mut it) = obj.sorted(&mut scratch);
        assert_eq!(n, 2);
        let mut seen = Vec::new();
        while let Some((k, v)) = obj.next_sorted(&mut it, &scratch) {
            seen.push((k.to_vec(), v.as_number().map(|n| n.as_f64())));
        }
        assert_eq!(
            seen,
            [
                (b"a".to_vec(), Some(Some(4.0))),
                (b"b".to_vec(), Some(Some(3.0)))
            ]
        );
        assert_eq!(scratch[0], 7, "the caller's part of the scratch is kept");
    }

    #[test]
    fn plain_scan_finds_each_special_byte() {
        let text = b"abcdefgh\"ijklmnop\\qrstuvw\x1fxyz";
        let mut found = Vec::new();
        let mut i = 0;
        loop {
            i = skip_plain(text, i);
            if i >= text.len() {
                break;
            }
            found.push(i);
            i += 1;
        }
        assert_eq!(found, [8, 17, 25]);
        // Bytes above 0x7F are plain.
        assert_eq!(skip_plain("ééééé\"".as_bytes(), 0), 10);
    }
}

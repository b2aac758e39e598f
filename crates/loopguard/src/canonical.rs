//! The canonical encoding behind every fingerprint, version `lg1`.
//!
//! Fingerprints are persisted (stores, replays, reports), so the byte stream that feeds the
//! hash is a documented contract. `lg1` is an injective, length-prefixed binary encoding of a
//! JSON value; it needs no string escaping and is streamed into XXH3-128 through a small
//! fixed buffer, so the whole canonical form is never built in memory.
//!
//! | value | bytes |
//! |---|---|
//! | `null` | `n` |
//! | `false` / `true` | `f` / `t` |
//! | a number with an integral value in [-2^63, 2^64) | `i` + the value as 16-byte little-endian two's complement |
//! | any other number | `d` + the IEEE-754 bits of the double, 8 bytes little-endian |
//! | a string | `s` + byte length (u64 LE) + UTF-8 bytes |
//! | an array | `a` + element count (u64 LE) + each element |
//! | an object | `o` + member count (u64 LE) + members sorted by key bytes, each as key length (u64 LE) + key bytes + value |
//!
//! So `1`, `1.0` and `1e0` encode the same, `-0.0` encodes as `0`, integers keep all 64
//! bits, and member order never matters. Error fingerprints prefix the stream with `E`
//! (see [`crate::fingerprint`]) so they can never equal a result fingerprint.
//!
//! Traversal is iterative with an explicit stack: nesting depth is bounded by memory, never
//! by the thread's stack.

use serde_json::{Map, Number, Value};
use smallvec::SmallVec;

use crate::masking::MaskSet;
use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

/// The traversal stack; typical JSON nests a handful of levels, so it lives on the stack
/// and only spills to the heap for deep values. The flag says whether the frame added a
/// step to the walk's path.
type Stack<'a> = SmallVec<[(Frame<'a>, bool); 16]>;

/// Bytes buffered before they are handed to the streaming hasher. Values whose encoding
/// fits in one buffer are hashed in one shot, which is the fast path for call arguments.
const BUF: usize = 2048;

/// A streaming XXH3-128 digest of `lg1`-encoded values.
pub struct Digest {
    buf: [u8; BUF],
    len: usize,
    stream: Option<Xxh3Default>,
}

impl Default for Digest {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Digest")
            .field("buffered", &self.len)
            .finish()
    }
}

impl Digest {
    /// An empty digest.
    pub fn new() -> Self {
        Self {
            buf: [0; BUF],
            len: 0,
            stream: None,
        }
    }

    /// Feeds raw bytes.
    #[inline(always)]
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        if bytes.len() <= BUF - self.len {
            self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
        } else {
            self.write_slow(bytes);
        }
    }

    #[cold]
    fn write_slow(&mut self, bytes: &[u8]) {
        self.flush();
        if bytes.len() >= BUF {
            self.stream().update(bytes);
        } else {
            self.buf[..bytes.len()].copy_from_slice(bytes);
            self.len = bytes.len();
        }
    }

    fn stream(&mut self) -> &mut Xxh3Default {
        self.stream.get_or_insert_with(Xxh3Default::new)
    }

    fn flush(&mut self) {
        if self.len > 0 {
            let stream = self.stream.get_or_insert_with(Xxh3Default::new);
            stream.update(&self.buf[..self.len]);
            self.len = 0;
        }
    }

    #[inline]
    fn write_len(&mut self, n: usize) {
        self.write(&(n as u64).to_le_bytes());
    }

    /// A tag and a length in one write (most writes are these 9 bytes).
    #[inline]
    fn write_tag_len(&mut self, tag: u8, n: usize) {
        let mut out = [0u8; 9];
        out[0] = tag;
        out[1..].copy_from_slice(&(n as u64).to_le_bytes());
        self.write(&out);
    }

    /// Encodes `null`.
    pub fn null(&mut self) {
        self.write(b"n");
    }

    /// Encodes a boolean.
    pub fn bool(&mut self, b: bool) {
        self.write(if b { b"t" } else { b"f" });
    }

    /// Encodes an integer.
    pub fn int(&mut self, i: i128) {
        let mut out = [0u8; 17];
        out[0] = b'i';
        out[1..].copy_from_slice(&i.to_le_bytes());
        self.write(&out);
    }

    /// Encodes a double, as an integer when its value is integral and fits.
    pub fn float(&mut self, f: f64) {
        match integral(f) {
            Some(i) => self.int(i),
            None => {
                let mut out = [0u8; 9];
                out[0] = b'd';
                out[1..].copy_from_slice(&f.to_bits().to_le_bytes());
                self.write(&out);
            }
        }
    }

    /// Encodes a JSON number by value.
    pub fn number(&mut self, n: &Number) {
        if let Some(u) = n.as_u64() {
            self.int(i128::from(u));
        } else if let Some(i) = n.as_i64() {
            self.int(i128::from(i));
        } else {
            self.float(n.as_f64().unwrap_or(f64::NAN));
        }
    }

    /// Encodes a string.
    pub fn str(&mut self, s: &str) {
        self.write_tag_len(b's', s.len());
        self.write(s.as_bytes());
    }

    /// Encodes a string given as consecutive pieces, without joining them first.
    pub(crate) fn str_pieces<'a>(&mut self, pieces: impl Iterator<Item = &'a str> + Clone) {
        let len: usize = pieces.clone().map(str::len).sum();
        self.write_tag_len(b's', len);
        for piece in pieces {
            self.write(piece.as_bytes());
        }
    }

    /// Starts an array of `n` elements; the caller encodes them next.
    pub fn array(&mut self, n: usize) {
        self.write_tag_len(b'a', n);
    }

    /// Starts an object of `n` members; the caller encodes them next, as [`Digest::key`]
    /// then a value, in ascending key byte order.
    pub fn object(&mut self, n: usize) {
        self.write_tag_len(b'o', n);
    }

    /// Encodes an object member's key.
    #[inline]
    pub fn key(&mut self, key: &str) {
        let bytes = key.as_bytes();
        if bytes.len() + 8 <= BUF - self.len {
            let at = self.len;
            self.buf[at..at + 8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            self.buf[at + 8..at + 8 + bytes.len()].copy_from_slice(bytes);
            self.len += 8 + bytes.len();
        } else {
            self.write_len(bytes.len());
            self.write(bytes);
        }
    }

    /// Encodes any JSON value.
    pub fn value(&mut self, value: &Value) {
        self.value_filtered(value, Filter::KEEP);
    }

    /// Encodes a string value, masked when the filter asks for it.
    pub(crate) fn str_value(&mut self, s: &str, mask: MaskSet) {
        if mask.is_empty() {
            self.str(s);
        } else {
            crate::masking::with_masked(s, mask, |m| self.str(m));
        }
    }

    /// Encodes a JSON value, leaving out or rewriting what `filter` says.
    pub(crate) fn value_filtered(&mut self, value: &Value, filter: Filter<'_>) {
        let mut walk = Walk::new(filter, &[]);
        walk.push_value(self, value, None);
        walk.drain(self);
    }

    /// Encodes an object held as a map, at `prefix` (its path from the root the filter's
    /// paths are anchored at).
    pub(crate) fn value_map(
        &mut self,
        map: &Map<String, Value>,
        filter: Filter<'_>,
        prefix: &[&str],
    ) {
        let mut walk = Walk::new(filter, prefix);
        walk.push_map(self, map, None);
        walk.drain(self);
    }

    /// The XXH3-128 of everything written.
    pub fn finish(mut self) -> u128 {
        self.take()
    }

    /// The XXH3-128 of everything written; the digest is empty again afterwards.
    pub(crate) fn take(&mut self) -> u128 {
        let len = std::mem::take(&mut self.len);
        match self.stream.take() {
            None => xxh3_128(&self.buf[..len]),
            Some(mut stream) => {
                stream.update(&self.buf[..len]);
                stream.digest128()
            }
        }
    }
}

thread_local! {
    /// A digest per thread, so that hashing never zeroes or moves a fresh buffer.
    static SCRATCH: std::cell::RefCell<Digest> = std::cell::RefCell::new(Digest::new());
}

/// Runs `f` with an empty digest and returns its hash.
pub(crate) fn hash_with(f: impl FnOnce(&mut Digest)) -> u128 {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut d) => {
            d.len = 0;
            d.stream = None;
            f(&mut d);
            d.take()
        }
        // Only reachable if `f` hashed again inside; correct, just slower.
        Err(_) => {
            let mut d = Digest::new();
            f(&mut d);
            d.take()
        }
    })
}

/// One step of the path from the root to the value being encoded.
#[derive(Clone, Copy, Debug)]
enum Step<'a> {
    Key(&'a str),
    Index,
}

/// One level of the explicit traversal stack.
enum Frame<'a> {
    Array(std::slice::Iter<'a, Value>),
    Sorted(serde_json::map::Iter<'a>),
    Members(Members<'a>),
}

/// An iterative traversal: the frame stack, and the path when anchored paths need it.
struct Walk<'a, 'f> {
    filter: Filter<'f>,
    stack: Stack<'a>,
    /// Path steps of the open frames (kept only when the filter has anchored paths).
    path: SmallVec<[Step<'a>; 16]>,
    /// The path of the value the walk starts at.
    prefix: &'f [&'f str],
    track: bool,
}

impl<'a, 'f> Walk<'a, 'f> {
    fn new(filter: Filter<'f>, prefix: &'f [&'f str]) -> Self {
        let track = filter.ignore.is_some_and(PathSet::has_anchored);
        Self {
            filter,
            stack: Stack::new(),
            path: SmallVec::new(),
            prefix,
            track,
        }
    }

    fn drain(&mut self, d: &mut Digest) {
        while let Some((top, _)) = self.stack.last_mut() {
            let next = match top {
                Frame::Array(items) => items.next().map(|v| (v, Step::Index)),
                Frame::Sorted(members) => members.next().map(|(k, v)| {
                    d.key(k);
                    (v, Step::Key(k))
                }),
                Frame::Members(members) => members.next().map(|(k, v)| {
                    d.key(k);
                    (v, Step::Key(k))
                }),
            };
            match next {
                Some((v, step)) => self.push_value(d, v, Some(step)),
                None => {
                    if let Some((_, true)) = self.stack.pop() {
                        self.path.pop();
                    }
                }
            }
        }
    }

    fn push_value(&mut self, d: &mut Digest, value: &'a Value, step: Option<Step<'a>>) {
        match value {
            Value::Null => d.null(),
            Value::Bool(b) => d.bool(*b),
            Value::Number(n) => d.number(n),
            Value::String(s) => d.str_value(s, self.filter.mask),
            Value::Array(items) => {
                d.array(items.len());
                if !items.is_empty() {
                    let stepped = self.enter(step);
                    self.stack.push((Frame::Array(items.iter()), stepped));
                }
            }
            Value::Object(map) => self.push_map(d, map, step),
        }
    }

    /// Adds the step of a container being opened to the path; returns whether it did.
    fn enter(&mut self, step: Option<Step<'a>>) -> bool {
        match (self.track, step) {
            (true, Some(step)) => {
                self.path.push(step);
                true
            }
            _ => false,
        }
    }

    fn push_map(&mut self, d: &mut Digest, map: &'a Map<String, Value>, step: Option<Step<'a>>) {
        if self.filter.is_plain() && *MAPS_ARE_SORTED {
            // The common case: every member, already in key order.
            d.object(map.len());
            if !map.is_empty() {
                let stepped = self.enter(step);
                self.stack.push((Frame::Sorted(map.iter()), stepped));
            }
            return;
        }
        // Members are filtered relative to this object's own path.
        let stepped = self.enter(step);
        let here = Here {
            prefix: self.prefix,
            path: &self.path,
        };
        let members = Members::new(map, self.filter, &here);
        d.object(members.len());
        if members.len() > 0 {
            self.stack.push((Frame::Members(members), stepped));
        } else if stepped {
            self.path.pop();
        }
    }
}

/// The path of an object being filtered: the walk's prefix, then its steps.
struct Here<'h, 'a> {
    prefix: &'h [&'h str],
    path: &'h [Step<'a>],
}

/// Paths to leave out of a fingerprint: bare names at any depth, dotted paths anchored at
/// the root (`details.meta.requestId`, `details.items.*.ts`; `*` is any key or index, a
/// leading `$.` is allowed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathSet {
    anywhere: Vec<Box<str>>,
    anchored: Vec<Vec<Option<Box<str>>>>,
}

impl PathSet {
    /// Compiles paths; an empty one is an error.
    pub fn parse<'s>(paths: impl IntoIterator<Item = &'s str>) -> Result<Self, String> {
        let mut set = Self::default();
        for raw in paths {
            let path = raw.strip_prefix("$.").unwrap_or(raw).replace("[*]", ".*");
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(format!("`{raw}` is not a key or a dotted path"));
            }
            if !path.contains('.') {
                set.anywhere.push(path.into());
            } else {
                set.anchored.push(
                    path.split('.')
                        .map(|seg| (seg != "*").then(|| seg.into()))
                        .collect(),
                );
            }
        }
        Ok(set)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.anywhere.is_empty() && self.anchored.is_empty()
    }

    fn has_anchored(&self) -> bool {
        !self.anchored.is_empty()
    }

    /// Whether a root-level member named `key` is left out (used for `text`).
    pub(crate) fn drops_root(&self, key: &str) -> bool {
        self.anywhere.iter().any(|k| &**k == key)
            || self
                .anchored
                .iter()
                .any(|p| p.len() == 1 && p[0].as_deref().is_none_or(|s| s == key))
    }

    fn drops(&self, here: &Here<'_, '_>, key: &str) -> bool {
        if self.anywhere.iter().any(|k| &**k == key) {
            return true;
        }
        let depth = here.prefix.len() + here.path.len() + 1;
        self.anchored.iter().any(|pattern| {
            pattern.len() == depth
                && pattern
                    .last()
                    .is_some_and(|s| s.as_deref().is_none_or(|s| s == key))
                && pattern[..depth - 1].iter().enumerate().all(|(i, seg)| {
                    let Some(want) = seg.as_deref() else {
                        return true;
                    };
                    if i < here.prefix.len() {
                        here.prefix[i] == want
                    } else {
                        matches!(here.path[i - here.prefix.len()], Step::Key(k) if k == want)
                    }
                })
        })
    }
}

/// What a traversal leaves out or rewrites.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Filter<'p> {
    /// Drop the volatile per-delivery ids of outbound sends at any depth (SPEC §2 rule 7).
    pub send_ids: bool,
    /// Drop members on these paths.
    pub ignore: Option<&'p PathSet>,
    /// Mask volatile tokens in string values.
    pub mask: MaskSet,
}

impl Filter<'_> {
    /// Everything, unchanged.
    pub const KEEP: Filter<'static> = Filter {
        send_ids: false,
        ignore: None,
        mask: MaskSet::NONE,
    };

    /// Whether members are all kept (masking only touches string values).
    fn is_plain(&self) -> bool {
        !self.send_ids && self.ignore.is_none_or(PathSet::is_empty)
    }
}

/// An object's members in ascending key byte order, with filtered keys left out.
///
/// `serde_json`'s default map is a `BTreeMap`, already in that order; if a build enables
/// `preserve_order`, the members are sorted here instead, so fingerprints never depend on
/// a dependency's feature flags.
struct Members<'a> {
    inner: MembersInner<'a>,
    /// Keys to leave out, decided up front (the filter needs the object's path).
    dropped: SmallVec<[&'a str; 4]>,
    len: usize,
}

enum MembersInner<'a> {
    Sorted(serde_json::map::Iter<'a>),
    Owned(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Members<'a> {
    fn new(map: &'a Map<String, Value>, filter: Filter<'_>, here: &Here<'_, '_>) -> Self {
        let drop_id = filter.send_ids && crate::policy::is_delivered_message(map);
        let mut dropped = SmallVec::new();
        for k in map.keys() {
            let send_id = filter.send_ids
                && (crate::policy::BUILTIN.is_volatile_send_key(k) || (drop_id && k == "id"));
            if send_id || filter.ignore.is_some_and(|p| p.drops(here, k)) {
                dropped.push(k.as_str());
            }
        }
        let inner = if *MAPS_ARE_SORTED {
            MembersInner::Sorted(map.iter())
        } else {
            let mut v: Vec<_> = map.iter().collect();
            v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            MembersInner::Owned(v.into_iter())
        };
        Self {
            inner,
            len: map.len() - dropped.len(),
            dropped,
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a String, &'a Value);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let item = match &mut self.inner {
                MembersInner::Sorted(it) => it.next(),
                MembersInner::Owned(it) => it.next(),
            }?;
            if !self.dropped.contains(&item.0.as_str()) {
                return Some(item);
            }
        }
    }
}

/// Whether `serde_json` maps iterate in key order (its default `BTreeMap`). A build that
/// enables `preserve_order` anywhere in the dependency graph iterates in insertion order;
/// members are then sorted here, so fingerprints never depend on a feature flag.
static MAPS_ARE_SORTED: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    let mut probe = Map::new();
    probe.insert("b".into(), Value::Null);
    probe.insert("a".into(), Value::Null);
    probe.keys().next().map(String::as_str) == Some("a")
});

/// The integer value of a double, when it is integral and inside the `lg1` integer range.
fn integral(f: f64) -> Option<i128> {
    const MIN: f64 = -9_223_372_036_854_775_808.0; // -2^63
    const MAX: f64 = 18_446_744_073_709_551_616.0; // 2^64
    if f.is_finite() && f.fract() == 0.0 && (MIN..MAX).contains(&f) {
        Some(f as i128)
    } else {
        None
    }
}

/// One-shot digest of a value.
pub fn digest(value: &Value) -> u128 {
    hash_with(|d| d.value(value))
}

/// Canonical JSON text of a value: members sorted by key bytes, no whitespace, integral
/// numbers written as integers. Used where the SPEC hashes an error value's *text*, which
/// must also be searched for an unknown tool name. Iterative, like [`Digest`].
pub fn json_text(value: &Value) -> String {
    enum TextFrame<'a> {
        Array(std::slice::Iter<'a, Value>, bool),
        Object(Members<'a>, bool),
    }
    fn scalar(out: &mut String, v: &Value) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&number_text(n)),
            Value::String(s) => push_json_string(out, s),
            Value::Array(_) | Value::Object(_) => {}
        }
    }
    let mut out = String::new();
    let mut stack: Vec<TextFrame<'_>> = Vec::new();
    let mut pending = Some(value);
    loop {
        if let Some(v) = pending.take() {
            match v {
                Value::Array(items) => {
                    out.push('[');
                    stack.push(TextFrame::Array(items.iter(), true));
                }
                Value::Object(map) => {
                    out.push('{');
                    let here = Here {
                        prefix: &[],
                        path: &[],
                    };
                    stack.push(TextFrame::Object(
                        Members::new(map, Filter::KEEP, &here),
                        true,
                    ));
                }
                other => scalar(&mut out, other),
            }
        }
        let Some(top) = stack.last_mut() else { break };
        match top {
            TextFrame::Array(items, first) => match items.next() {
                Some(v) => {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                    pending = Some(v);
                }
                None => {
                    out.push(']');
                    stack.pop();
                }
            },
            TextFrame::Object(members, first) => match members.next() {
                Some((k, v)) => {
                    if !*first {
                        out.push(',');
                    }
                    *first = false;
                    push_json_string(&mut out, k);
                    out.push(':');
                    pending = Some(v);
                }
                None => {
                    out.push('}');
                    stack.pop();
                }
            },
        }
    }
    out
}

/// A JSON number as text, integral values without a fraction (`1.0` → `1`).
pub fn number_text(n: &Number) -> String {
    if n.is_u64() || n.is_i64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    match integral(f) {
        Some(i) => i.to_string(),
        None => n.to_string(),
    }
}

fn push_json_string(out: &mut String, s: &str) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(v: &Value) -> u128 {
        digest(v)
    }

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"x":[1,2],"y":null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"y":null,"x":[1,2]},"a":1}"#).unwrap();
        assert_eq!(d(&a), d(&b));
    }

    #[test]
    fn numbers_compare_by_value() {
        let one: Value = serde_json::from_str("1").unwrap();
        let one_f: Value = serde_json::from_str("1.0").unwrap();
        let one_e: Value = serde_json::from_str("1e0").unwrap();
        assert_eq!(d(&one), d(&one_f));
        assert_eq!(d(&one), d(&one_e));
        assert_eq!(d(&json!(-0.0)), d(&json!(0)));
        assert_ne!(d(&json!(1.5)), d(&json!(1)));
        // Integers keep all 64 bits, beyond 2^53.
        assert_ne!(
            d(&json!(9_007_199_254_740_993u64)),
            d(&json!(9_007_199_254_740_992u64))
        );
        assert_ne!(d(&json!(u64::MAX)), d(&json!(u64::MAX - 1)));
        assert_eq!(
            d(&json!(i64::MIN)),
            d(&json!(-9_223_372_036_854_775_808.0f64))
        );
    }

    #[test]
    fn types_are_distinct() {
        let values = [
            json!(null),
            json!(false),
            json!(true),
            json!(0),
            json!(""),
            json!("0"),
            json!([]),
            json!({}),
            json!([null]),
            json!({"": null}),
            json!(["a", "b"]),
            json!(["ab"]),
            json!({"a": "b"}),
            json!({"ab": ""}),
        ];
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                assert_eq!(i == j, d(a) == d(b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn large_strings_stream_like_small_ones() {
        let big = "x".repeat(3 * BUF + 17);
        let v = json!({"a": big.clone(), "b": [big.clone(), 1]});
        // Reference: the same bytes hashed in one shot.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"o");
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(b"a");
        bytes.extend_from_slice(b"s");
        bytes.extend_from_slice(&(big.len() as u64).to_le_bytes());
        bytes.extend_from_slice(big.as_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(b"b");
        bytes.extend_from_slice(b"a");
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend_from_slice(b"s");
        bytes.extend_from_slice(&(big.len() as u64).to_le_bytes());
        bytes.extend_from_slice(big.as_bytes());
        bytes.push(b'i');
        bytes.extend_from_slice(&1i128.to_le_bytes());
        assert_eq!(d(&v), xxh3_128(&bytes));
    }

    #[test]
    fn pieces_equal_joined_string() {
        let mut a = Digest::new();
        a.str_pieces(["ab", "\n", "cd"].into_iter());
        let mut b = Digest::new();
        b.str("ab\ncd");
        assert_eq!(a.finish(), b.finish());
    }

    /// Builds `[[[...]]]` without recursion and drops it without recursion.
    fn deep_array(depth: usize) -> Value {
        let mut v = Value::Array(vec![]);
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    fn drop_deep(mut v: Value) {
        loop {
            match v {
                Value::Array(mut items) if !items.is_empty() => v = items.pop().unwrap(),
                Value::Object(map) => {
                    let mut it = map.into_iter();
                    match it.next() {
                        Some((_, inner)) => v = inner,
                        None => break,
                    }
                }
                _ => break,
            }
        }
    }

    #[test]
    fn deep_nesting_hashes_without_recursion() {
        let v = deep_array(100_000);
        let h1 = d(&v);
        let text = json_text(&v);
        assert_eq!(text.len(), 2 * 100_001);
        let w = deep_array(100_000);
        assert_eq!(h1, d(&w));
        drop_deep(v);
        drop_deep(w);
    }

    #[test]
    fn json_text_is_canonical() {
        let v: Value = serde_json::from_str(r#"{"b":1.0,"a":["x\"y",true,null,1.5]}"#).unwrap();
        assert_eq!(json_text(&v), r#"{"a":["x\"y",true,null,1.5],"b":1}"#);
        assert_eq!(json_text(&json!({})), "{}");
        assert_eq!(json_text(&json!([])), "[]");
        assert_eq!(json_text(&json!("\u{1}")), "\"\\u0001\"");
    }
}

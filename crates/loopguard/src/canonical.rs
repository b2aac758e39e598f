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
use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

/// The traversal stack; typical JSON nests a handful of levels, so it lives on the stack
/// and only spills to the heap for deep values.
type Stack<'a> = SmallVec<[Frame<'a>; 16]>;

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

/// Which object members a traversal leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyFilter {
    /// Every member is encoded.
    Keep,
    /// Volatile per-delivery ids of outbound sends are dropped at any depth
    /// (see [`crate::policy::Policy::is_volatile_send_key`]).
    VolatileSendIds,
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
        self.value_filtered(value, KeyFilter::Keep);
    }

    /// Encodes a JSON value, leaving out the members `filter` names.
    pub(crate) fn value_filtered(&mut self, value: &Value, filter: KeyFilter) {
        let mut stack = Stack::new();
        self.push_value(value, filter, &mut stack);
        self.drain(filter, &mut stack);
    }

    /// Encodes an object held as a map, leaving out the members `filter` names.
    pub(crate) fn value_map(&mut self, map: &Map<String, Value>, filter: KeyFilter) {
        let mut stack = Stack::new();
        self.push_map(map, filter, &mut stack);
        self.drain(filter, &mut stack);
    }

    // The stack is borrowed, never moved: it is a kilobyte of inline frames.
    fn drain<'a>(&mut self, filter: KeyFilter, stack: &mut Stack<'a>) {
        while let Some(top) = stack.last_mut() {
            let next = match top {
                Frame::Array(items) => items.next(),
                Frame::Sorted(members) => members.next().map(|(k, v)| {
                    self.key(k);
                    v
                }),
                Frame::Members(members) => members.next().map(|(k, v)| {
                    self.key(k);
                    v
                }),
            };
            match next {
                Some(v) => self.push_value(v, filter, stack),
                None => {
                    stack.pop();
                }
            }
        }
    }

    fn push_value<'a>(&mut self, value: &'a Value, filter: KeyFilter, stack: &mut Stack<'a>) {
        match value {
            Value::Null => self.null(),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => self.number(n),
            Value::String(s) => self.str(s),
            Value::Array(items) => {
                self.array(items.len());
                if !items.is_empty() {
                    stack.push(Frame::Array(items.iter()));
                }
            }
            Value::Object(map) => self.push_map(map, filter, stack),
        }
    }

    fn push_map<'a>(
        &mut self,
        map: &'a Map<String, Value>,
        filter: KeyFilter,
        stack: &mut Stack<'a>,
    ) {
        if filter == KeyFilter::Keep && *MAPS_ARE_SORTED {
            // The common case: every member, already in key order.
            self.object(map.len());
            if !map.is_empty() {
                stack.push(Frame::Sorted(map.iter()));
            }
            return;
        }
        let members = Members::new(map, filter);
        self.object(members.len());
        if members.len() > 0 {
            stack.push(Frame::Members(members));
        }
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

/// One level of the explicit traversal stack.
enum Frame<'a> {
    Array(std::slice::Iter<'a, Value>),
    Sorted(serde_json::map::Iter<'a>),
    Members(Members<'a>),
}

/// An object's members in ascending key byte order, with filtered keys left out.
///
/// `serde_json`'s default map is a `BTreeMap`, already in that order; if a build enables
/// `preserve_order`, the members are sorted here instead, so fingerprints never depend on
/// a dependency's feature flags.
struct Members<'a> {
    inner: MembersInner<'a>,
    filter: KeyFilter,
    drop_id: bool,
    len: usize,
}

enum MembersInner<'a> {
    Sorted(serde_json::map::Iter<'a>),
    Owned(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Members<'a> {
    fn new(map: &'a Map<String, Value>, filter: KeyFilter) -> Self {
        let drop_id =
            filter == KeyFilter::VolatileSendIds && crate::policy::is_delivered_message(map);
        let len = match filter {
            KeyFilter::Keep => map.len(),
            KeyFilter::VolatileSendIds => map.keys().filter(|k| keeps(filter, drop_id, k)).count(),
        };
        let inner = if *MAPS_ARE_SORTED {
            MembersInner::Sorted(map.iter())
        } else {
            let mut v: Vec<_> = map.iter().collect();
            v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            MembersInner::Owned(v.into_iter())
        };
        Self {
            inner,
            filter,
            drop_id,
            len,
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

fn keeps(filter: KeyFilter, drop_id: bool, key: &str) -> bool {
    match filter {
        KeyFilter::Keep => true,
        KeyFilter::VolatileSendIds => {
            !(crate::policy::BUILTIN.is_volatile_send_key(key) || (drop_id && key == "id"))
        }
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
            if keeps(self.filter, self.drop_id, item.0) {
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
                    stack.push(TextFrame::Object(Members::new(map, KeyFilter::Keep), true));
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

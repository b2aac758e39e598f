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
//! Two more tags extend `lg1` to JSON that no `serde_json::Value` can hold, which only raw
//! JSON text ([`crate::json::Raw`]) brings (so no fingerprint of a value `serde_json` parses
//! changes):
//!
//! | value | bytes |
//! |---|---|
//! | a number beyond the double range (`1e999`) | `N` + byte length (u64 LE) + the number's text |
//! | a string with a lone surrogate escape (`"\ud800"`) | `w` + byte length (u64 LE) + WTF-8 bytes |
//!
//! A key with a lone surrogate is written as its WTF-8 bytes; those never form UTF-8, so it
//! cannot equal another key.
//!
//! The encoder is written once for every [`Json`] view. Traversal is iterative with an
//! explicit stack: nesting depth is bounded by memory, never by the thread's stack.

mod json_text;
mod path_set;

use smallvec::SmallVec;

use crate::json::{Canonical, Json, Kind, Num, Object, Str};
use crate::masking::MaskSet;
use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

pub use json_text::{json_text, number_text};

pub use path_set::PathSet;

use path_set::{Here, Step};

/// Bytes buffered before they are handed to the streaming hasher. Values whose encoding
/// fits in one buffer are hashed in one shot, which is the fast path for call arguments.
const BUF: usize = 2048;

/// A streaming XXH3-128 digest of `lg1`-encoded values.
pub struct Digest {
    buf: [u8; BUF],
    len: usize,
    stream: Option<Xxh3Default>,
    /// Where raw objects are sorted by key while they are encoded (kept between values,
    /// so that sorting allocates nothing once it has grown).
    order: Vec<u32>,
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
            order: Vec::new(),
        }
    }

    /// Feeds raw bytes.
    #[inline(always)]
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        let at = self.len;
        if bytes.len() <= BUF - at {
            put(&mut self.buf[at..at + bytes.len()], bytes);
            self.len = at + bytes.len();
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
        self.canonical(Canonical::of_f64(f));
    }

    /// Encodes a JSON number by value.
    pub fn number(&mut self, n: &serde_json::Number) {
        self.canonical(Canonical::of_number(n));
    }

    /// Encodes a number of either representation by value.
    #[inline]
    pub fn num(&mut self, n: Num<'_>) {
        self.canonical(n.canonical());
    }

    fn canonical(&mut self, c: Canonical<'_>) {
        match c {
            Canonical::Int(i) => self.int(i),
            Canonical::Double(f) => {
                let mut out = [0u8; 9];
                out[0] = b'd';
                out[1..].copy_from_slice(&f.to_bits().to_le_bytes());
                self.write(&out);
            }
            Canonical::Big(text) => {
                self.write_tag_len(b'N', text.len());
                self.write(text.as_bytes());
            }
        }
    }

    /// A tag, a length and that many bytes: a string, in one write when it fits.
    #[inline]
    fn tagged(&mut self, tag: u8, bytes: &[u8]) {
        let at = self.len;
        if 9 + bytes.len() <= BUF - at {
            self.buf[at] = tag;
            self.buf[at + 1..at + 9].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            put(&mut self.buf[at + 9..at + 9 + bytes.len()], bytes);
            self.len = at + 9 + bytes.len();
        } else {
            self.write_tag_len(tag, bytes.len());
            self.write(bytes);
        }
    }

    /// Encodes a string.
    pub fn str(&mut self, s: &str) {
        self.tagged(b's', s.as_bytes());
    }

    /// Encodes a string of either kind (a WTF-8 one under its own tag).
    pub fn string(&mut self, s: Str<'_>) {
        match s {
            Str::Text(t) => self.tagged(b's', t.as_bytes()),
            Str::Wtf8(b) => self.tagged(b'w', b),
        }
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
        self.key_bytes(key.as_bytes());
    }

    /// Encodes an object member's key given as bytes (UTF-8, or WTF-8 for a raw key with a
    /// lone surrogate).
    #[inline]
    pub fn key_bytes(&mut self, bytes: &[u8]) {
        let at = self.len;
        if bytes.len() + 8 <= BUF - at {
            self.buf[at..at + 8].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
            put(&mut self.buf[at + 8..at + 8 + bytes.len()], bytes);
            self.len = at + 8 + bytes.len();
        } else {
            self.write_len(bytes.len());
            self.write(bytes);
        }
    }

    /// Encodes any JSON value.
    pub fn value<'a, J: Json<'a>>(&mut self, value: J) {
        self.plain(Start::Value(value), MaskSet::NONE);
    }

    /// Encodes a string value, masked when the filter asks for it. WTF-8 strings are never
    /// masked (the masking rules read Unicode text).
    pub(crate) fn str_value(&mut self, s: Str<'_>, mask: MaskSet) {
        match s {
            Str::Text(t) if !mask.is_empty() => {
                crate::masking::with_masked(t, mask, |m| self.str(m));
            }
            s => self.string(s),
        }
    }

    /// Encodes a JSON value, leaving out or rewriting what `filter` says.
    pub(crate) fn value_filtered<'a, J: Json<'a>>(&mut self, value: J, filter: Filter<'_>) {
        if filter.is_plain() {
            return self.plain(Start::Value(value), filter.mask);
        }
        let mut order = std::mem::take(&mut self.order);
        let mut walk = Walk::new(filter, &[], &mut order);
        walk.push_value(self, value, None);
        walk.drain(self);
        order.clear();
        self.order = order;
    }

    /// Encodes an object, at `prefix` (its path from the root the filter's paths are
    /// anchored at).
    pub(crate) fn object_filtered<'a, O>(&mut self, object: O, filter: Filter<'_>, prefix: &[&str])
    where
        O: Object<'a>,
        O::Value: Json<'a, Object = O>,
    {
        if filter.is_plain() {
            return self.plain(Start::<O::Value>::Object(object), filter.mask);
        }
        let mut order = std::mem::take(&mut self.order);
        let mut walk = Walk::<O::Value>::new(filter, prefix, &mut order);
        walk.push_object(self, object, None);
        walk.drain(self);
        order.clear();
        self.order = order;
    }

    /// Encodes a value whose members are all kept (the common case: no tool policy
    /// leaves paths out, no send drops its ids), masking strings when `mask` says so.
    /// The filtered walk below does the same with the bookkeeping filters need; this one
    /// keeps only the stack of open containers.
    fn plain<'a, J: Json<'a>>(&mut self, start: Start<'a, J>, mask: MaskSet) {
        let mut order = std::mem::take(&mut self.order);
        let mut stack: SmallVec<[Open<'a, J>; 16]> = SmallVec::new();
        let mut object = None;
        let mut value = match start {
            Start::Value(value) => Some(value),
            Start::Object(o) => {
                object = Some(o);
                None
            }
        };
        'values: loop {
            if let Some(v) = value.take() {
                match v.kind() {
                    Kind::Null => self.null(),
                    Kind::Bool(b) => self.bool(b),
                    Kind::Number(n) => self.num(n),
                    Kind::String(s) => self.str_value(s, mask),
                    Kind::Array(items) => {
                        self.array(items.len());
                        if items.len() > 0 {
                            stack.push(Open::Items(items));
                        }
                    }
                    Kind::Object(o) => object = Some(o),
                }
            }
            if let Some(o) = object.take() {
                let mark = order.len();
                let (len, members) = o.sorted(&mut order);
                self.object(len);
                if len > 0 {
                    stack.push(Open::Members(o, members, mark));
                } else {
                    order.truncate(mark);
                }
            }
            // The next value: of the innermost open container, or of one further out.
            while let Some(top) = stack.last_mut() {
                match top {
                    Open::Items(items) => {
                        if let Some(item) = items.next() {
                            value = Some(item);
                            continue 'values;
                        }
                    }
                    Open::Members(o, members, mark) => {
                        if let Some((key, v)) = o.next_sorted(members, &order) {
                            self.key_bytes(key);
                            value = Some(v);
                            continue 'values;
                        }
                        order.truncate(*mark);
                    }
                }
                stack.pop();
            }
            break;
        }
        order.clear();
        self.order = order;
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

/// Copies `src` into `dst`, of the same length. Keys and most string values are short:
/// they are moved in one or two overlapping word-sized copies instead of a call to
/// `memcpy`, which costs more than the copy at these sizes.
#[inline(always)]
pub(crate) fn put(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..n].copy_from_slice(&src[n - 4..]);
        }
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..n].copy_from_slice(&src[n - 8..]);
        }
        17..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..n].copy_from_slice(&src[n - 16..]);
        }
        _ => dst.copy_from_slice(src),
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

/// Where the plain walk starts: a value, or an object.
enum Start<'a, J: Json<'a>> {
    Value(J),
    Object(J::Object),
}

/// An open container of the plain walk.
enum Open<'a, J: Json<'a>> {
    Items(J::Items),
    /// An object's members in key order, and the length of the sort scratch before it.
    Members(J::Object, <J::Object as Object<'a>>::Sorted, usize),
}

/// One level of the explicit traversal stack.
enum Frame<'a, J: Json<'a>> {
    Array(J::Items),
    Object {
        object: J::Object,
        members: <J::Object as Object<'a>>::Sorted,
        /// Which members the filter leaves out, when it may leave some out.
        filtered: Option<Dropped>,
        /// The length of the sort scratch before this object was sorted.
        mark: usize,
    },
}

/// The traversal stack; typical JSON nests a handful of levels, so it lives on the stack
/// and only spills to the heap for deep values. The flag says whether the frame added a
/// step to the walk's path.
type Stack<'a, J> = SmallVec<[(Frame<'a, J>, bool); 16]>;

/// An iterative traversal: the frame stack, and the path when anchored paths need it.
struct Walk<'a, 'f, 's, J: Json<'a>> {
    filter: Filter<'f>,
    stack: Stack<'a, J>,
    /// Path steps of the open frames (kept only when the filter has anchored paths).
    path: SmallVec<[Step<'a>; 16]>,
    /// The path of the value the walk starts at.
    prefix: &'f [&'f str],
    track: bool,
    order: &'s mut Vec<u32>,
}

impl<'a, 'f, 's, J: Json<'a>> Walk<'a, 'f, 's, J> {
    fn new(filter: Filter<'f>, prefix: &'f [&'f str], order: &'s mut Vec<u32>) -> Self {
        let track = filter.ignore.is_some_and(PathSet::has_anchored);
        Self {
            filter,
            stack: Stack::new(),
            path: SmallVec::new(),
            prefix,
            track,
            order,
        }
    }

    fn drain(&mut self, d: &mut Digest) {
        while let Some((top, _)) = self.stack.last_mut() {
            let next = match top {
                Frame::Array(items) => items.next().map(|v| (v, Step::Index)),
                Frame::Object {
                    object,
                    members,
                    filtered,
                    ..
                } => {
                    let object = *object;
                    loop {
                        let Some((k, v)) = object.next_sorted(members, self.order) else {
                            break None;
                        };
                        if let Some(dropped) = filtered.as_mut() {
                            if dropped
                                .next(|id| drops(&self.filter, self.prefix, &self.path, k, id))
                            {
                                continue;
                            }
                        }
                        d.key_bytes(k);
                        break Some((v, Step::Key(k)));
                    }
                }
            };
            match next {
                Some((v, step)) => self.push_value(d, v, Some(step)),
                None => {
                    if let Some((frame, stepped)) = self.stack.pop() {
                        if let Frame::Object { mark, .. } = frame {
                            self.order.truncate(mark);
                        }
                        if stepped {
                            self.path.pop();
                        }
                    }
                }
            }
        }
    }

    #[inline]
    fn push_value(&mut self, d: &mut Digest, value: J, step: Option<Step<'a>>) {
        match value.kind() {
            Kind::Null => d.null(),
            Kind::Bool(b) => d.bool(b),
            Kind::Number(n) => d.num(n),
            Kind::String(s) => d.str_value(s, self.filter.mask),
            Kind::Array(items) => {
                d.array(items.len());
                if items.len() > 0 {
                    let stepped = self.enter(step);
                    self.stack.push((Frame::Array(items), stepped));
                }
            }
            Kind::Object(object) => self.push_object(d, object, step),
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

    fn push_object(&mut self, d: &mut Digest, object: J::Object, step: Option<Step<'a>>) {
        let mark = self.order.len();
        let (len, members) = object.sorted(self.order);
        if self.filter.is_plain() {
            // The common case: every member.
            d.object(len);
            if len > 0 {
                let stepped = self.enter(step);
                let frame = Frame::Object {
                    object,
                    members,
                    filtered: None,
                    mark,
                };
                self.stack.push((frame, stepped));
            } else {
                self.order.truncate(mark);
            }
            return;
        }
        // Members are filtered relative to this object's own path: count the kept ones.
        let stepped = self.enter(step);
        let drop_id = self
            .filter
            .send_noise
            .is_some_and(|noise| noise.message.matches(object));
        let mut count = members.clone();
        let mut kept = 0;
        let mut dropped = Dropped {
            drop_id,
            first: 0,
            at: 0,
        };
        while let Some((k, _)) = object.next_sorted(&mut count, self.order) {
            let gone = drops(&self.filter, self.prefix, &self.path, k, drop_id);
            kept += usize::from(!gone);
            if gone && dropped.at < u64::BITS {
                dropped.first |= 1 << dropped.at;
            }
            dropped.at = dropped.at.saturating_add(1);
        }
        dropped.at = 0;
        d.object(kept);
        if kept > 0 {
            let frame = Frame::Object {
                object,
                members,
                filtered: Some(dropped),
                mark,
            };
            self.stack.push((frame, stepped));
        } else {
            self.order.truncate(mark);
            if stepped {
                self.path.pop();
            }
        }
    }
}

/// Which members of an object a filter leaves out, found while they were counted (the
/// count is written before the members): the first 64 as bits, by position in key order;
/// any further member is asked again.
#[derive(Clone, Copy)]
struct Dropped {
    /// The object looks like a delivered message, whose `id` a send filter drops.
    drop_id: bool,
    first: u64,
    /// The position of the next member.
    at: u32,
}

impl Dropped {
    /// Whether the next member is left out (`ask`, given `drop_id`, beyond the first 64).
    #[inline]
    fn next(&mut self, ask: impl FnOnce(bool) -> bool) -> bool {
        let at = self.at;
        self.at = at.saturating_add(1);
        if at < u64::BITS {
            self.first >> at & 1 == 1
        } else {
            ask(self.drop_id)
        }
    }
}

/// Whether `filter` leaves out the member `key` of an object at `prefix` + `path`
/// (`drop_id`: the object looks like a delivered message, whose id a send drops).
fn drops(
    filter: &Filter<'_>,
    prefix: &[&str],
    path: &[Step<'_>],
    key: &[u8],
    drop_id: bool,
) -> bool {
    if let Some(noise) = filter.send_noise {
        if noise.keys.iter().any(|k| k.as_bytes() == key)
            || (drop_id && key == noise.message.id.as_bytes())
        {
            return true;
        }
    }
    filter
        .ignore
        .is_some_and(|p| p.drops(&Here { prefix, path }, key))
}

/// What a traversal leaves out or rewrites.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Filter<'p> {
    /// Drop the volatile per-delivery ids of an outbound send (SPEC §2 rule 7).
    pub send_noise: Option<SendNoise<'p>>,
    /// Drop members on these paths.
    pub ignore: Option<&'p PathSet>,
    /// Mask volatile tokens in string values.
    pub mask: MaskSet,
}

impl Filter<'_> {
    /// Everything, unchanged.
    pub const KEEP: Filter<'static> = Filter {
        send_noise: None,
        ignore: None,
        mask: MaskSet::NONE,
    };

    /// Whether members are all kept (masking only touches string values).
    fn is_plain(&self) -> bool {
        self.send_noise.is_none() && self.ignore.is_none_or(PathSet::is_empty)
    }
}

/// What an outbound send's outcome leaves out (SPEC §2 rule 7). The tables are the
/// policy's ([`crate::policy::Policy::send_noise`]); the encoder only applies them, so it
/// depends on no policy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendNoise<'p> {
    /// Keys dropped at any depth.
    pub keys: &'p [&'p str],
    /// Objects of this shape are delivered messages, whose own id is dropped too.
    pub message: &'p MessageShape,
}

/// The shape of a delivered message, as data: every `strings` member is a string, and so
/// is one of `any_string`, or one of `any_object` is an object. Its `id` member is the
/// message's volatile id.
#[derive(Debug)]
pub(crate) struct MessageShape {
    /// The member holding the message's id.
    pub id: &'static str,
    /// Members that must all be strings.
    pub strings: &'static [&'static str],
    /// Members of which one string suffices...
    pub any_string: &'static [&'static str],
    /// ... or one object.
    pub any_object: &'static [&'static str],
}

impl MessageShape {
    /// Whether `object` has the shape.
    pub(crate) fn matches<'a, O: Object<'a>>(&self, object: O) -> bool {
        let is_str = |k: &&str| object.get(k).and_then(Json::as_string).is_some();
        let is_object = |k: &&str| object.get(k).and_then(Json::as_object).is_some();
        self.strings.iter().all(is_str)
            && (self.any_string.iter().any(is_str) || self.any_object.iter().any(is_object))
    }
}

/// One-shot digest of a value.
pub fn digest<'a, J: Json<'a>>(value: J) -> u128 {
    hash_with(|d| d.value(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
        // The same value as raw text, deeper than any parser's limit.
        let mut tape = crate::json::Tape::new();
        let doc = tape.parse(&text).unwrap();
        assert_eq!(digest(doc), h1);
        drop_deep(v);
        drop_deep(w);
    }

    #[test]
    fn raw_text_encodes_like_the_value() {
        let text = r#"{"b":{"y":null,"x":[1,2.50,-0,1e2]},"a":"\u00e9\n","b":{"z":"last"},"c":{}}"#;
        let v: Value = serde_json::from_str(text).unwrap();
        let mut tape = crate::json::Tape::new();
        let doc = tape.parse(text).unwrap();
        assert_eq!(digest(doc), d(&v));
    }

    #[test]
    fn extension_tags_are_their_own() {
        let mut tape = crate::json::Tape::new();
        let mut raw = |text: &str| {
            let doc = tape.parse(text).unwrap();
            digest(doc)
        };
        let big = raw("1e999");
        let mut bytes = b"N".to_vec();
        bytes.extend_from_slice(&5u64.to_le_bytes());
        bytes.extend_from_slice(b"1e999");
        assert_eq!(big, xxh3_128(&bytes));
        assert_ne!(big, raw("\"1e999\""));
        assert_ne!(
            raw("1e999"),
            raw("1E999"),
            "big numbers are known by their text"
        );
        let lone = raw(r#""\ud800""#);
        let mut bytes = b"w".to_vec();
        bytes.extend_from_slice(&3u64.to_le_bytes());
        bytes.extend_from_slice(b"\xed\xa0\x80");
        assert_eq!(lone, xxh3_128(&bytes));
        assert_eq!(
            lone,
            raw(r#""\uD800""#),
            "escapes are read, not compared as text"
        );
        assert_ne!(lone, raw(r#""\udc00""#));
        assert_eq!(raw(r#"{"\ud800":1}"#), raw(r#"{"\uD800":1}"#));
    }
}

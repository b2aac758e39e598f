//! JSON as the fingerprint rules read it: one read-only view, two representations.
//!
//! Hosts that already hold a `serde_json::Value` pass `&Value`; front ends that read event
//! bytes (replay, the sidecar, hooks, the MCP proxy, transcript scans) pass a [`Raw`] node
//! of a [`Tape`]: the JSON text tokenized once into a flat, reusable array, with no value
//! tree, no allocation per node and no recursion. Both implement [`Json`], and the
//! canonical encoder ([`crate::canonical`]) and every outcome rule
//! ([`crate::fingerprint`]) are written once against that trait, so the two paths cannot
//! drift apart: for any text `serde_json` parses, both give the same fingerprint (a property
//! test and a differential fuzz target check it).
//!
//! The raw form also holds what a `Value` cannot: numbers beyond the double range (`1e999`),
//! strings with lone surrogate escapes (`"\ud800"`), nesting of any depth. They are valid
//! JSON that tools accept, so the guard fingerprints them too ([`Canonical::Big`],
//! [`Str::Wtf8`]; the encoding is in `docs/fingerprints.md`) instead of letting such calls
//! pass unchecked.

mod number;
mod tape;

use serde_json::{Map, Number, Value};

pub use number::Canonical;
pub use tape::{
    Document, Items as RawItems, JsonError, JsonErrorKind, Member, Object as RawObject, Raw, Read,
    Tape,
};

/// A JSON string's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Str<'a> {
    /// Unicode text (every string a `Value` can hold).
    Text(&'a str),
    /// Text with at least one lone surrogate (`"\ud800"`), as WTF-8: surrogates take the
    /// three bytes UTF-8 would give them, which no Unicode text contains.
    Wtf8(&'a [u8]),
}

impl<'a> Str<'a> {
    /// The text, when it is Unicode.
    pub fn as_str(self) -> Option<&'a str> {
        match self {
            Self::Text(s) => Some(s),
            Self::Wtf8(_) => None,
        }
    }

    /// The content's bytes (UTF-8, or WTF-8).
    pub fn as_bytes(self) -> &'a [u8] {
        match self {
            Self::Text(s) => s.as_bytes(),
            Self::Wtf8(b) => b,
        }
    }

    /// Without leading and trailing whitespace ([`crate::text::trim`]).
    pub fn trim(self) -> Self {
        match self {
            Self::Text(s) => Self::Text(crate::text::trim(s)),
            Self::Wtf8(b) => Self::Wtf8(trim_wtf8(b)),
        }
    }

    /// Trimmed, or `None` when blank ([`crate::text::non_blank`]).
    pub fn non_blank(self) -> Option<Self> {
        let t = self.trim();
        (!t.as_bytes().is_empty()).then_some(t)
    }

    /// Appends the string as a JSON string literal. Lone surrogates of a WTF-8 string are
    /// written as `\uXXXX` escapes, as they were in the input.
    pub(crate) fn push_json(self, out: &mut String) {
        out.push('"');
        match self {
            Str::Text(t) => push_escaped(out, t),
            Str::Wtf8(mut rest) => loop {
                match std::str::from_utf8(rest) {
                    Ok(t) => {
                        push_escaped(out, t);
                        break;
                    }
                    Err(e) => {
                        let (valid, after) = rest.split_at(e.valid_up_to());
                        push_escaped(out, std::str::from_utf8(valid).unwrap_or_default());
                        // A surrogate: three bytes, 0xED then 10xxxxxx twice.
                        match after {
                            [a, b, c, tail @ ..] => {
                                let unit = (u32::from(a & 0x0F) << 12)
                                    | (u32::from(b & 0x3F) << 6)
                                    | u32::from(c & 0x3F);
                                use std::fmt::Write;
                                let _ = write!(out, "\\u{unit:04x}");
                                rest = tail;
                            }
                            _ => break,
                        }
                    }
                }
            },
        }
        out.push('"');
    }
}

fn push_escaped(out: &mut String, s: &str) {
    use std::fmt::Write;
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
}

/// `b` without leading and trailing ECMAScript whitespace. Whitespace characters are
/// valid UTF-8 and surrogates are not whitespace, so trimming stops at the first
/// character that does not decode to whitespace.
fn trim_wtf8(b: &[u8]) -> &[u8] {
    let space_at = |at: &[u8]| -> Option<usize> {
        let len = match at.first()? {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => return None,
        };
        let c = std::str::from_utf8(at.get(..len)?).ok()?.chars().next()?;
        crate::text::is_js_space(c).then_some(len)
    };
    let mut start = 0;
    while let Some(n) = space_at(&b[start..]) {
        start += n;
    }
    let mut end = b.len();
    'outer: while end > start {
        // A character ends at `end`: it starts at one of the four bytes before it.
        for len in 1..=3.min(end - start) {
            if let Some(n) = space_at(&b[end - len..end]) {
                if n == len {
                    end -= len;
                    continue 'outer;
                }
            }
        }
        break;
    }
    &b[start..end]
}

/// A JSON number, before it is canonicalised.
#[derive(Clone, Copy, Debug)]
pub enum Num<'a> {
    /// A number parsed by `serde_json`.
    Value(&'a Number),
    /// A number as it is written in JSON text.
    Text(&'a str),
}

impl<'a> Num<'a> {
    /// The number's value as the `lg1` encoding sees it.
    pub fn canonical(self) -> Canonical<'a> {
        match self {
            Self::Value(n) => Canonical::of_number(n),
            Self::Text(t) => Canonical::of_text(t),
        }
    }

    /// The number as a double (`None` beyond the double range).
    pub fn as_f64(self) -> Option<f64> {
        match self.canonical() {
            Canonical::Int(i) => Some(i as f64),
            Canonical::Double(f) => Some(f),
            Canonical::Big(_) => None,
        }
    }
}

/// What a JSON value is, with its content.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a, J: Json<'a>> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number.
    Number(Num<'a>),
    /// A string.
    String(Str<'a>),
    /// An array: its elements.
    Array(J::Items),
    /// An object.
    Object(J::Object),
}

/// A read-only view of a JSON value: `&serde_json::Value`, or a [`Raw`] node of a [`Tape`].
pub trait Json<'a>: Copy + 'a {
    /// An array's elements, in order.
    type Items: Iterator<Item = Self> + ExactSizeIterator + Clone;
    /// An object.
    type Object: Object<'a, Value = Self>;

    /// What the value is.
    fn kind(self) -> Kind<'a, Self>;

    /// The value as an object.
    fn as_object(self) -> Option<Self::Object> {
        match self.kind() {
            Kind::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The value as an array.
    fn as_array(self) -> Option<Self::Items> {
        match self.kind() {
            Kind::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The value as a string (Unicode or not).
    fn as_string(self) -> Option<Str<'a>> {
        match self.kind() {
            Kind::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as Unicode text.
    fn as_str(self) -> Option<&'a str> {
        self.as_string().and_then(Str::as_str)
    }

    /// The value as a boolean.
    fn as_bool(self) -> Option<bool> {
        match self.kind() {
            Kind::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value as a number.
    fn as_number(self) -> Option<Num<'a>> {
        match self.kind() {
            Kind::Number(n) => Some(n),
            _ => None,
        }
    }

    /// Whether the value is `null`.
    fn is_null(self) -> bool {
        matches!(self.kind(), Kind::Null)
    }

    /// The member `key` of an object (the last one when the key is repeated).
    fn get(self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }
}

/// An object of a [`Json`] view.
pub trait Object<'a>: Copy + 'a {
    /// The members' values.
    type Value: Json<'a>;
    /// An iteration over the members in ascending key byte order (see [`Object::sorted`]).
    type Sorted: Clone;

    /// The member `key` (the last one when the key is repeated, as in JavaScript and in
    /// `serde_json`).
    fn get(self, key: &str) -> Option<Self::Value>;

    /// Calls `f` with each key in the representation's own order (a raw object may
    /// repeat a key): one pass, for callers that look for a few names among the members.
    fn each_key(self, f: impl FnMut(&'a [u8]));

    /// Starts an iteration over the members in ascending key byte order, each key once
    /// (with its last value); returns their number. Representations that must sort keep
    /// the order in `scratch`, above its current length; the caller truncates `scratch`
    /// back when the iteration is over.
    fn sorted(self, scratch: &mut Vec<u32>) -> (usize, Self::Sorted);

    /// The next member of an iteration [`Object::sorted`] started.
    fn next_sorted(self, it: &mut Self::Sorted, scratch: &[u32])
        -> Option<(&'a [u8], Self::Value)>;
}

/// Objects with up to this many members are ordered on the stack ([`key_order`]).
pub const SMALL_OBJECT: usize = 16;

/// A key's first eight bytes as a big-endian integer, zero-padded: integers compare as
/// the keys' byte order does, except that two keys with equal prefixes must be compared
/// whole.
#[inline]
pub const fn key_prefix(key: &[u8]) -> u64 {
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    if let (Some(head), Some(tail)) = (key.first_chunk::<4>(), key.last_chunk::<4>()) {
        // Four to seven bytes: the first four and the last four, overlapping.
        return (u32::from_be_bytes(*head) as u64) << 32
            | (u32::from_be_bytes(*tail) as u64) << (8 * (8 - key.len()));
    }
    let mut prefix = 0;
    let mut i = 0;
    while i < key.len() {
        prefix |= (key[i] as u64) << (56 - 8 * i);
        i += 1;
    }
    prefix
}

/// Puts the members of one object in ascending key byte order, for representations that
/// keep members in the order they were written: `keys` are the key nodes in that order
/// (a later node index for a later member), `key_at` reads a key. Returns `None` when the
/// keys are already strictly ascending (no key repeated), the common case, leaving
/// `scratch` as it was; otherwise appends the key nodes to `scratch` in key order, each key
/// once with its last member (as JavaScript and `serde_json` keep it), and returns how
/// many. Keys are ordered by their first eight bytes read as one integer, and compared
/// whole only when those tie: objects are sorted only when they must be, and then cheaply.
pub fn key_order<'k>(
    keys: impl ExactSizeIterator<Item = u32>,
    key_at: impl Fn(u32) -> &'k [u8],
    scratch: &mut Vec<u32>,
) -> Option<usize> {
    let count = keys.len();
    let whole =
        |x: &(u64, u32), y: &(u64, u32)| x.0.cmp(&y.0).then_with(|| key_at(x.1).cmp(key_at(y.1)));
    let start = scratch.len();
    if count <= SMALL_OBJECT {
        let mut small = [(0u64, 0u32); SMALL_OBJECT];
        let small = &mut small[..count];
        for (slot, k) in small.iter_mut().zip(keys) {
            *slot = (key_prefix(key_at(k)), k);
        }
        // Nearly always the prefixes differ: then they alone give the order, and no key
        // repeats. An insertion sort of integers, which finds out whether they differ.
        let mut in_order = true;
        let mut distinct = true;
        for i in 1..small.len() {
            let entry = small[i];
            let mut j = i;
            while j > 0 && small[j - 1].0 >= entry.0 {
                distinct &= small[j - 1].0 != entry.0;
                small[j] = small[j - 1];
                j -= 1;
            }
            small[j] = entry;
            in_order &= j == i;
        }
        if distinct {
            if in_order {
                return None;
            }
            scratch.extend(small.iter().map(|&(_, k)| k));
            return Some(count);
        }
        // Two keys share their first eight bytes: compared whole. Equal keys stay in
        // written order (the tie-break on position): the last of each run is the member
        // that counts.
        small.sort_unstable_by(|x, y| whole(x, y).then(x.1.cmp(&y.1)));
        for (i, key) in small.iter().enumerate() {
            if small.get(i + 1).is_none_or(|next| whole(key, next).is_ne()) {
                scratch.push(key.1);
            }
        }
        // Keys that only share a prefix may still have been written in order.
        if scratch.len() - start == count && scratch[start..].is_sorted() {
            scratch.truncate(start);
            return None;
        }
    } else {
        scratch.extend(keys);
        let keys = &mut scratch[start..];
        if keys.windows(2).all(|w| key_at(w[0]) < key_at(w[1])) {
            scratch.truncate(start);
            return None;
        }
        keys.sort_unstable_by(|&x, &y| key_at(x).cmp(key_at(y)).then(x.cmp(&y)));
        let mut kept = 0;
        for i in 0..keys.len() {
            let last_of_run = keys
                .get(i + 1)
                .is_none_or(|&next| key_at(next) != key_at(keys[i]));
            if last_of_run {
                keys[kept] = keys[i];
                kept += 1;
            }
        }
        scratch.truncate(start + kept);
    }
    Some(scratch.len() - start)
}

impl<'a> Json<'a> for &'a Value {
    type Items = std::slice::Iter<'a, Value>;
    type Object = &'a Map<String, Value>;

    #[inline]
    fn kind(self) -> Kind<'a, Self> {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(b) => Kind::Bool(*b),
            Value::Number(n) => Kind::Number(Num::Value(n)),
            Value::String(s) => Kind::String(Str::Text(s)),
            Value::Array(items) => Kind::Array(items.iter()),
            Value::Object(map) => Kind::Object(map),
        }
    }

    fn get(self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }
}

/// Members of a `serde_json` map in key order.
#[derive(Clone)]
pub enum ValueMembers<'a> {
    /// The map's own order: `serde_json`'s default `BTreeMap` is sorted.
    Sorted(serde_json::map::Iter<'a>),
    /// Sorted here: a build with `preserve_order` keeps insertion order.
    Owned(std::vec::IntoIter<(&'a String, &'a Value)>),
}

impl<'a> Object<'a> for &'a Map<String, Value> {
    type Value = &'a Value;
    type Sorted = ValueMembers<'a>;

    #[inline]
    fn get(self, key: &str) -> Option<&'a Value> {
        Map::get(self, key)
    }

    fn each_key(self, mut f: impl FnMut(&'a [u8])) {
        self.keys().for_each(|k| f(k.as_bytes()));
    }

    fn sorted(self, _: &mut Vec<u32>) -> (usize, ValueMembers<'a>) {
        let members = if *MAPS_ARE_SORTED {
            ValueMembers::Sorted(self.iter())
        } else {
            let mut v: Vec<_> = self.iter().collect();
            v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            ValueMembers::Owned(v.into_iter())
        };
        (self.len(), members)
    }

    #[inline]
    fn next_sorted(self, it: &mut ValueMembers<'a>, _: &[u32]) -> Option<(&'a [u8], &'a Value)> {
        let (k, v) = match it {
            ValueMembers::Sorted(it) => it.next(),
            ValueMembers::Owned(it) => it.next(),
        }?;
        Some((k.as_bytes(), v))
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

/// Deepest nesting [`to_value`] builds: `serde_json`'s own limit (its recursion budget of
/// 128 admits 127 nested containers), so that the value can be dropped (recursively)
/// without overflowing the stack.
pub const VALUE_DEPTH: usize = 127;

/// The value as a `serde_json::Value`; `None` when a `Value` cannot hold it: a number
/// beyond the double range, a lone surrogate, nesting deeper than [`VALUE_DEPTH`].
/// Iterative. A repeated key keeps its last value.
pub fn to_value<'a, J: Json<'a>>(value: J) -> Option<Value> {
    enum Open<'a, J: Json<'a>> {
        Array(Vec<Value>, J::Items),
        Object(
            Map<String, Value>,
            J::Object,
            <J::Object as Object<'a>>::Sorted,
            Option<String>,
        ),
    }
    let mut scratch = Vec::new();
    let mut stack: Vec<Open<'a, J>> = Vec::new();
    let mut next = Some(value);
    loop {
        let mut done = None;
        if let Some(v) = next.take() {
            let leaf = match v.kind() {
                Kind::Null => Value::Null,
                Kind::Bool(b) => Value::Bool(b),
                Kind::Number(Num::Value(n)) => Value::Number(n.clone()),
                Kind::Number(Num::Text(t)) => Value::Number(serde_json::from_str(t).ok()?),
                Kind::String(s) => Value::String(s.as_str()?.to_owned()),
                Kind::Array(items) => {
                    stack.push(Open::Array(Vec::with_capacity(items.len()), items));
                    if stack.len() > VALUE_DEPTH {
                        return None;
                    }
                    Value::Null
                }
                Kind::Object(object) => {
                    let (_, members) = object.sorted(&mut scratch);
                    stack.push(Open::Object(Map::new(), object, members, None));
                    if stack.len() > VALUE_DEPTH {
                        return None;
                    }
                    Value::Null
                }
            };
            if !matches!(v.kind(), Kind::Array(_) | Kind::Object(_)) {
                done = Some(leaf);
            }
        }
        // Place a finished value, then find the next one to build.
        loop {
            if let Some(v) = done.take() {
                match stack.last_mut() {
                    None => return Some(v),
                    Some(Open::Array(items, _)) => items.push(v),
                    Some(Open::Object(map, _, _, key)) => {
                        map.insert(key.take().unwrap_or_default(), v);
                    }
                }
            }
            match stack.last_mut() {
                None => return None,
                Some(Open::Array(_, items)) => {
                    if let Some(item) = items.next() {
                        next = Some(item);
                        break;
                    }
                }
                Some(Open::Object(_, object, members, key)) => {
                    if let Some((k, v)) = object.next_sorted(members, &scratch) {
                        *key = Some(std::str::from_utf8(k).ok()?.to_owned());
                        next = Some(v);
                        break;
                    }
                }
            }
            done = Some(match stack.pop() {
                Some(Open::Array(items, _)) => Value::Array(items),
                Some(Open::Object(map, ..)) => Value::Object(map),
                None => return None,
            });
        }
    }
}

/// What a JSON value is, for error messages: `a string`, `an array`, `null` …
pub fn kind_name<'a, J: Json<'a>>(v: J) -> &'static str {
    match v.kind() {
        Kind::Null => "null",
        Kind::Bool(_) => "a boolean",
        Kind::Number(_) => "a number",
        Kind::String(_) => "a string",
        Kind::Array(_) => "an array",
        Kind::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys where prefixes tell them apart and where they do not: lengths around four and
    /// eight, shared beginnings, NUL bytes, repeats.
    fn keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
        let byte = prop::sample::select(vec![0u8, b'a', b'b', b'z', 0x7f, 0xc3, 0xff]);
        let key = prop_oneof![
            prop::collection::vec(byte.clone(), 0..12),
            prop::collection::vec(byte, 0..4).prop_map(|tail| {
                let mut k = b"timeout_".to_vec();
                k.extend(tail);
                k
            }),
        ];
        prop::collection::vec(key, 0..40)
    }

    proptest! {
        /// The order is the keys' byte order, each key once with its last member, and an
        /// object already in order is left as it is.
        #[test]
        fn key_order_sorts_and_keeps_the_last_of_each_key(keys in keys()) {
            let mut want: Vec<u32> = (0..keys.len() as u32).collect();
            want.sort_by(|&x, &y| keys[x as usize].cmp(&keys[y as usize]).then(y.cmp(&x)));
            want.dedup_by(|later, earlier| keys[*later as usize] == keys[*earlier as usize]);
            let mut scratch = vec![7];
            let got = key_order(0..keys.len() as u32, |k| keys[k as usize].as_slice(), &mut scratch);
            prop_assert_eq!(got.is_none(), keys.windows(2).all(|w| w[0] < w[1]));
            match got {
                None => {
                    prop_assert!(keys.windows(2).all(|w| w[0] < w[1]));
                    prop_assert_eq!(scratch, vec![7]);
                }
                Some(n) => {
                    prop_assert_eq!(n, want.len());
                    prop_assert_eq!(scratch[0], 7);
                    prop_assert_eq!(&scratch[1..], want.as_slice());
                }
            }
        }
    }

    #[test]
    fn wtf8_trims_like_text() {
        assert_eq!(trim_wtf8(b" \xed\xa0\x80 \n"), b"\xed\xa0\x80");
        assert_eq!(trim_wtf8("\u{3000}\u{FEFF}x\u{A0}".as_bytes()), b"x");
        assert_eq!(trim_wtf8(b"  "), b"");
        assert_eq!(trim_wtf8(b"\xed\xb0\x80"), b"\xed\xb0\x80");
        assert_eq!(
            Str::Wtf8(b" \t").non_blank(),
            None,
            "blank WTF-8 cannot happen, but trims to nothing"
        );
    }
}

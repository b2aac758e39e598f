//! Long strings lifted out of an outcome's JSON text, and the [`Json`] view that puts them
//! back.
//!
//! A tool result is mostly one long string (a file, a page, a command's output), and
//! moving it into an event as JSON text costs twice: `JSON.stringify` escapes it in
//! JavaScript (the slowest part of the binding, about 2.5 ns a byte with a newline every
//! 50 bytes) and the tape unescapes it again in Rust. So the package serializes `result`
//! and `error` with a replacer that lifts every long string out of the text into an array,
//! leaving in its place the string `"\u0000<index>"`; the array crosses N-API as strings
//! (copied once, as UTF-8, never escaped) and [`Lifted`] reads the text with each
//! placeholder replaced by its string. The replacer also lifts every string that starts
//! with U+0000, however short, so a string of the text that starts with U+0000 is always
//! a placeholder. JSON.stringify's own meaning is kept (the replacer returns every other
//! value as it is: `toJSON`, cycles, BigInt behave as without it).
//!
//! Only outcomes are lifted. With no lifted strings the view is the tape itself.

use loopguard::json::{Json, Kind, Object, Raw, RawItems, RawObject, Str};

/// The lifted strings of one event, end to end in one buffer reused from event to event.
#[derive(Debug, Default)]
pub struct Strings {
    text: String,
    ends: Vec<usize>,
}

impl Strings {
    /// No strings, the buffers kept (up to a size: one huge result does not keep its
    /// memory for the rest of the process).
    pub fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
        if self.text.capacity() > KEEP_BYTES {
            self.text.shrink_to(KEEP_BYTES);
        }
    }

    /// Appends a string with `write`, which appends its text to the buffer it is given.
    pub fn push_with<E>(
        &mut self,
        write: impl FnOnce(&mut String) -> Result<(), E>,
    ) -> Result<(), E> {
        write(&mut self.text)?;
        self.ends.push(self.text.len());
        Ok(())
    }

    /// String number `index`.
    pub fn get(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)?;
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1],
        };
        self.text.get(start..end)
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

/// Buffers larger than this are given back after use.
const KEEP_BYTES: usize = 16 << 20;

/// No lifted strings.
pub static NONE: Strings = Strings {
    text: String::new(),
    ends: Vec::new(),
};

/// A value of an event's text with its lifted strings put back.
#[derive(Clone, Copy, Debug)]
pub struct Lifted<'a> {
    raw: Raw<'a>,
    strings: &'a Strings,
}

impl<'a> Lifted<'a> {
    /// `raw`, whose placeholders index `strings` (none: `raw` as it is).
    pub fn new(raw: Raw<'a>, strings: &'a Strings) -> Self {
        Self { raw, strings }
    }

    /// The string a placeholder stands for.
    fn lifted(self, s: Str<'a>) -> Option<&'a str> {
        let index = s.as_bytes().strip_prefix(b"\0")?;
        let index: usize = std::str::from_utf8(index).ok()?.parse().ok()?;
        self.strings.get(index)
    }
}

impl<'a> Json<'a> for Lifted<'a> {
    type Items = Items<'a>;
    type Object = Members<'a>;

    #[inline]
    fn kind(self) -> Kind<'a, Self> {
        match self.raw.kind() {
            Kind::Null => Kind::Null,
            Kind::Bool(b) => Kind::Bool(b),
            Kind::Number(n) => Kind::Number(n),
            Kind::String(s) => match self.strings.is_empty() {
                true => Kind::String(s),
                false => Kind::String(self.lifted(s).map_or(s, Str::Text)),
            },
            Kind::Array(items) => Kind::Array(Items {
                items,
                strings: self.strings,
            }),
            Kind::Object(object) => Kind::Object(Members {
                object,
                strings: self.strings,
            }),
        }
    }
}

/// The elements of a lifted array.
#[derive(Clone, Debug)]
pub struct Items<'a> {
    items: RawItems<'a>,
    strings: &'a Strings,
}

impl<'a> Iterator for Items<'a> {
    type Item = Lifted<'a>;

    #[inline]
    fn next(&mut self) -> Option<Lifted<'a>> {
        let raw = self.items.next()?;
        Some(Lifted::new(raw, self.strings))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl ExactSizeIterator for Items<'_> {}

/// A lifted object: the tape's, with its values lifted.
#[derive(Clone, Copy, Debug)]
pub struct Members<'a> {
    object: RawObject<'a>,
    strings: &'a Strings,
}

impl<'a> Object<'a> for Members<'a> {
    type Value = Lifted<'a>;
    type Sorted = <RawObject<'a> as Object<'a>>::Sorted;

    fn get(self, key: &str) -> Option<Lifted<'a>> {
        let raw = self.object.get(key)?;
        Some(Lifted::new(raw, self.strings))
    }

    fn each_key(self, f: impl FnMut(&'a [u8])) {
        self.object.each_key(f);
    }

    fn sorted(self, scratch: &mut Vec<u32>) -> (usize, Self::Sorted) {
        self.object.sorted(scratch)
    }

    #[inline]
    fn next_sorted(self, it: &mut Self::Sorted, scratch: &[u32]) -> Option<(&'a [u8], Lifted<'a>)> {
        let (key, raw) = self.object.next_sorted(it, scratch)?;
        Some((key, Lifted::new(raw, self.strings)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::json::Tape;
    use loopguard::Fingerprint;

    /// A value with its long strings lifted fingerprints like the value itself.
    #[test]
    fn lifted_strings_fingerprint_like_the_text() {
        let long = "line one\nline \"two\"\n".repeat(10);
        let whole = serde_json::json!({
            "content": [{"type": "text", "text": long}],
            "details": {"ok": true, "note": "\u{0}7 short", "n": 1.5},
        });
        let lifted = r#"{"content":[{"type":"text","text":"\u00000"}],"details":{"ok":true,"note":"\u00001","n":1.5}}"#;
        let mut strings = Strings::default();
        for s in [long.as_str(), "\u{0}7 short"] {
            strings
                .push_with(|text| {
                    text.push_str(s);
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        let mut tape = Tape::new();
        let raw = tape.parse(lifted).unwrap();
        assert_eq!(
            Fingerprint::of(Lifted::new(raw, &strings)),
            Fingerprint::of(&whole)
        );
        assert_eq!(
            Lifted::new(raw, &strings).get("content").and_then(|c| c
                .as_array()?
                .next()?
                .get("text")?
                .as_str()),
            Some(long.as_str())
        );
    }

    /// Without lifted strings, a string starting with U+0000 is just a string.
    #[test]
    fn nothing_lifted_reads_the_text() {
        let mut tape = Tape::new();
        let raw = tape.parse(r#"["\u00000"]"#).unwrap();
        let view = Lifted::new(raw, &NONE);
        assert_eq!(
            Fingerprint::of(view),
            Fingerprint::of(&serde_json::json!(["\u{0}0"]))
        );
    }
}

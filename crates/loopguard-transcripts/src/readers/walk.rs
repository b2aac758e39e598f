//! Streaming walks over whole JSON documents (SWE-agent `.traj`, OpenHands event arrays,
//! chat message arrays, derived call streams), for the readers of formats that are one
//! JSON document rather than one object per line.
//!
//! A [`Walker`] says, container by container, which values it wants whole, which
//! containers to walk into, and which to skip; the walk hands it each wanted value with the
//! position where it starts. Only one wanted value is in memory at a time, skipped values
//! are never built, and the nesting the walk descends into is chosen by the walker, not by
//! the input (values taken whole are bounded by `serde_json`'s recursion limit).

use std::cell::RefCell;
use std::fmt;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::rc::Rc;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::item::Pos;
use crate::stats::{ReadStats, SkipReason};

/// One step of a path into a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A member of an object.
    Key(String),
    /// An element of an array.
    Index(usize),
}

/// What to do with a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// Walk into it (its members or elements are offered one by one); a scalar is handed
    /// over whole.
    Descend,
    /// Hand it over as one [`Value`].
    Whole,
    /// Skip it without building it.
    Skip,
}

/// The reader's side of a walk.
pub(crate) trait Walker {
    /// What to do with the value at `path` (the root is the empty path).
    fn want(&mut self, path: &[Seg]) -> Want;
    /// A value the walker asked for.
    fn whole(&mut self, path: &[Seg], pos: Pos, value: Value);
    /// A container the walk descended into has ended.
    fn end(&mut self, _path: &[Seg]) {}
}

/// Walks the document in `input`, then checks that nothing but whitespace follows it. A
/// syntax error stops the walk: what was handed over until then stays valid, and the error
/// is counted in `stats` (as a truncated last line when the document just ends early).
pub(crate) fn walk<R: BufRead>(
    input: R,
    walker: &mut impl Walker,
    stats: &mut ReadStats,
) -> io::Result<()> {
    let tracker = Rc::new(RefCell::new(Tracker::default()));
    let reader = Counting {
        inner: input,
        tracker: Rc::clone(&tracker),
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let mut path = Vec::new();
    let result = Node {
        walker,
        path: &mut path,
        tracker: &tracker,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    let state = tracker.borrow();
    stats.bytes = state.offset;
    stats.lines = state.line + u64::from(state.after_newline > 0);
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.is_io() => Err(io::Error::other(e.to_string())),
        Err(e) => {
            let reason = if e.is_eof() {
                SkipReason::TruncatedLastLine
            } else {
                SkipReason::InvalidJson
            };
            stats.skip(reason, e.line() as u64, || e.to_string());
            Ok(())
        }
    }
}

/// Walks the elements of an array of the document in `input`: the root array (`key`
/// `None`) or the array at the root member `key`, handing each to `each` whole, one in
/// memory at a time; everything else is skipped unbuilt.
pub(crate) fn elements<R: BufRead>(
    input: R,
    key: Option<&str>,
    stats: &mut ReadStats,
    each: impl FnMut(Pos, Value),
) -> io::Result<()> {
    struct Elements<'k, F> {
        key: Option<&'k str>,
        each: F,
    }
    impl<F: FnMut(Pos, Value)> Walker for Elements<'_, F> {
        fn want(&mut self, path: &[Seg]) -> Want {
            match (self.key, path) {
                (_, []) => Want::Descend,
                (None, [Seg::Index(_)]) => Want::Whole,
                (Some(key), [Seg::Key(k)]) if k == key => Want::Descend,
                (Some(key), [Seg::Key(k), Seg::Index(_)]) if k == key => Want::Whole,
                _ => Want::Skip,
            }
        }
        fn whole(&mut self, _: &[Seg], pos: Pos, value: Value) {
            (self.each)(pos, value);
        }
    }
    walk(input, &mut Elements { key, each }, stats)
}

/// The members `keys` of the root object of the document in `input`, taken whole; every
/// other member is skipped unbuilt. For formats that name their session at the end of the
/// document (mini-swe-agent writes `instance_id` last): a first pass finds the name, the
/// second reads the calls under it.
pub(crate) fn root_members<R: BufRead>(
    input: R,
    keys: &[&str],
) -> io::Result<Vec<(String, Value)>> {
    struct Members<'k> {
        keys: &'k [&'k str],
        found: Vec<(String, Value)>,
    }
    impl Walker for Members<'_> {
        fn want(&mut self, path: &[Seg]) -> Want {
            match path {
                [] => Want::Descend,
                [Seg::Key(k)] if self.keys.contains(&k.as_str()) => Want::Whole,
                _ => Want::Skip,
            }
        }
        fn whole(&mut self, path: &[Seg], _: Pos, value: Value) {
            if let [Seg::Key(k)] = path {
                self.found.push((k.clone(), value));
            }
        }
    }
    let mut members = Members {
        keys,
        found: Vec::new(),
    };
    walk(input, &mut members, &mut ReadStats::default())?;
    Ok(members.found)
}

/// The session a document names in the first of its root members `keys` that is a
/// non-blank string (else `hint`), found by [`root_members`]; the input is put back where
/// it was.
pub(crate) fn session_name<R: BufRead + Seek>(
    input: &mut R,
    keys: &[&str],
    hint: &str,
) -> io::Result<String> {
    let start = input.stream_position()?;
    let found = root_members(&mut *input, keys)?;
    input.seek(SeekFrom::Start(start))?;
    let name = keys.iter().find_map(|key| {
        found
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_str())
            .and_then(loopguard::text::non_blank)
    });
    Ok(name.unwrap_or(hint).to_owned())
}

#[derive(Debug, Default)]
struct Tracker {
    /// Newlines read so far.
    line: u64,
    /// Bytes read so far.
    offset: u64,
    /// Bytes read since the last newline.
    after_newline: u64,
    /// Whether the next significant byte's position is wanted.
    marking: bool,
    /// That position.
    mark: Pos,
}

impl Tracker {
    fn mark(&mut self) {
        self.marking = true;
        self.mark = Pos::new(self.line + 1, self.offset);
    }
}

/// A reader that counts lines and bytes as the parser takes them.
struct Counting<R> {
    inner: R,
    tracker: Rc<RefCell<Tracker>>,
}

impl<R: BufRead> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let chunk = self.inner.fill_buf()?;
        let n = chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        let mut t = self.tracker.borrow_mut();
        for &b in &chunk[..n] {
            if t.marking && !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b',' | b':') {
                t.marking = false;
                t.mark = Pos::new(t.line + 1, t.offset);
            }
            t.offset += 1;
            if b == b'\n' {
                t.line += 1;
                t.after_newline = 0;
            } else {
                t.after_newline += 1;
            }
        }
        drop(t);
        self.inner.consume(n);
        Ok(n)
    }
}

struct Node<'a, W> {
    walker: &'a mut W,
    path: &'a mut Vec<Seg>,
    tracker: &'a Rc<RefCell<Tracker>>,
}

impl<'de, W: Walker> DeserializeSeed<'de> for Node<'_, W> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        match self.walker.want(self.path) {
            Want::Skip => {
                IgnoredAny::deserialize(de)?;
            }
            Want::Whole => {
                let pos = self.tracker.borrow().mark;
                let value = <Value as serde::Deserialize>::deserialize(de)?;
                self.walker.whole(self.path, pos, value);
            }
            Want::Descend => de.deserialize_any(self)?,
        }
        Ok(())
    }
}

use serde::Deserialize as _;

impl<'de, W: Walker> Visitor<'de> for Node<'_, W> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(Seg::Key(key));
            self.tracker.borrow_mut().mark();
            map.next_value_seed(Node {
                walker: &mut *self.walker,
                path: &mut *self.path,
                tracker: self.tracker,
            })?;
            self.path.pop();
        }
        self.walker.end(self.path);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            self.path.push(Seg::Index(index));
            self.tracker.borrow_mut().mark();
            let more = seq
                .next_element_seed(Node {
                    walker: &mut *self.walker,
                    path: &mut *self.path,
                    tracker: self.tracker,
                })?
                .is_some();
            self.path.pop();
            if !more {
                break;
            }
            index += 1;
        }
        self.walker.end(self.path);
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.scalar(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.scalar(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.scalar(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.scalar(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.scalar(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<(), E> {
        self.scalar(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.scalar(Value::Null)
    }
}

impl<W: Walker> Node<'_, W> {
    fn scalar<E>(self, value: Value) -> Result<(), E> {
        let pos = self.tracker.borrow().mark;
        self.walker.whole(self.path, pos, value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        got: Vec<(String, u64, Value)>,
        ends: usize,
    }

    fn show(path: &[Seg]) -> String {
        path.iter()
            .map(|s| match s {
                Seg::Key(k) => k.clone(),
                Seg::Index(i) => i.to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    impl Walker for Collect {
        fn want(&mut self, path: &[Seg]) -> Want {
            match path {
                [] => Want::Descend,
                [Seg::Key(k)] if k == "skip" => Want::Skip,
                [Seg::Key(k)] if k == "steps" => Want::Descend,
                _ => Want::Whole,
            }
        }
        fn whole(&mut self, path: &[Seg], pos: Pos, value: Value) {
            self.got.push((show(path), pos.line, value));
        }
        fn end(&mut self, _: &[Seg]) {
            self.ends += 1;
        }
    }

    #[test]
    fn hands_over_wanted_values_with_their_lines() {
        let doc = b"{\n \"skip\": {\"deep\": [1,2,3]},\n \"name\": \"x\",\n \"steps\": [\n  {\"a\": 1},\n  {\"a\":\n 2}\n ]\n}\n";
        let mut w = Collect::default();
        let mut stats = ReadStats::default();
        walk(&doc[..], &mut w, &mut stats).unwrap();
        assert_eq!(
            w.got,
            vec![
                ("name".into(), 3, Value::from("x")),
                ("steps.0".into(), 5, serde_json::json!({"a": 1})),
                ("steps.1".into(), 6, serde_json::json!({"a": 2})),
            ]
        );
        assert_eq!(w.ends, 2);
        assert_eq!(stats.lines, 9);
        assert!(stats.skipped.is_empty());
    }

    #[test]
    fn truncated_and_trailing_input_are_counted() {
        let mut w = Collect::default();
        let mut stats = ReadStats::default();
        walk(&b"{\"steps\": [{\"a\": 1}, {\"a\""[..], &mut w, &mut stats).unwrap();
        assert_eq!(w.got.len(), 1);
        assert_eq!(stats.skipped_for(SkipReason::TruncatedLastLine), 1);
        let mut stats = ReadStats::default();
        walk(&b"{} x"[..], &mut Collect::default(), &mut stats).unwrap();
        assert_eq!(stats.skipped_for(SkipReason::InvalidJson), 1);
    }

    #[test]
    fn depth_is_bounded_by_the_parser() {
        let deep = "[".repeat(100_000);
        let mut stats = ReadStats::default();
        struct All;
        impl Walker for All {
            fn want(&mut self, path: &[Seg]) -> Want {
                if path.len() < 2 {
                    Want::Descend
                } else {
                    Want::Whole
                }
            }
            fn whole(&mut self, _: &[Seg], _: Pos, _: Value) {}
        }
        walk(deep.as_bytes(), &mut All, &mut stats).unwrap();
        assert_eq!(stats.skipped_lines(), 1);
    }
}

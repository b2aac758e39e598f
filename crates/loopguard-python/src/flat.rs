//! A value converted from Python objects, as a flat array the engine reads through its
//! [`Json`] view: what [`crate::convert`] writes and `before_call` / `after_call` hash.
//!
//! The layout is the engine's tape's ([`loopguard::json::Tape`]) without the text: nodes in
//! document order, a container recording its element count and the index just past its
//! last node (so a subtree is skipped in one step), an object's members as a key node
//! followed by the value's nodes, and every string's UTF-8 appended to one buffer. A value
//! costs no allocation per node, and a [`Flat`] is reused from call to call, so a steady
//! stream of calls allocates nothing for its values. Python's own strings cannot be
//! borrowed for the view (on the abi3 floor of Python 3.9 their UTF-8 is only reachable as a
//! copy), and JSON text in between would be escaped here only to be unescaped by the tape
//! (`bench/timing.py` measured both: the flat array is the faster).

use loopguard::json::{key_order, Json, Kind, Num, Object, Str};
use serde_json::Number;

#[derive(Clone, Debug)]
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    /// A span of [`Flat::strings`].
    Str {
        start: usize,
        len: usize,
    },
    /// `len` elements; `end` is the index of the first node after the array.
    Array {
        len: u32,
        end: u32,
    },
    /// `len` members (key node, then the value's nodes).
    Object {
        len: u32,
        end: u32,
    },
}

/// A converted value (the root is node 0), or several one after the other while they are
/// built. Reusable: [`Flat::clear`] keeps the buffers.
#[derive(Debug, Default)]
pub struct Flat {
    nodes: Vec<Node>,
    strings: String,
}

/// Nodes beyond this count are refused: node indices are `u32`, as the engine's scratch
/// array for key order is.
const MAX_NODES: usize = u32::MAX as usize - 1;

impl Flat {
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.strings.clear();
    }

    /// Bytes held: string content plus a few per node (whether hashing it is worth
    /// releasing the GIL).
    pub fn weight(&self) -> usize {
        self.strings.len() + 8 * self.nodes.len()
    }

    /// Bytes of buffer kept for reuse.
    pub fn capacity(&self) -> usize {
        self.strings.capacity() + self.nodes.capacity() * std::mem::size_of::<Node>()
    }

    /// False once the value has as many nodes as a view can address.
    pub fn has_room(&self) -> bool {
        self.nodes.len() < MAX_NODES
    }

    pub fn null(&mut self) {
        self.nodes.push(Node::Null);
    }

    pub fn bool(&mut self, b: bool) {
        self.nodes.push(Node::Bool(b));
    }

    pub fn number(&mut self, n: Number) {
        self.nodes.push(Node::Number(n));
    }

    pub fn string(&mut self, s: &str) {
        let start = self.strings.len();
        self.strings.push_str(s);
        self.nodes.push(Node::Str {
            start,
            len: s.len(),
        });
    }

    /// Opens an array (`object: false`) or an object; returns its node, for [`Flat::close`].
    pub fn open(&mut self, object: bool) -> usize {
        self.nodes.push(if object {
            Node::Object { len: 0, end: 0 }
        } else {
            Node::Array { len: 0, end: 0 }
        });
        self.nodes.len() - 1
    }

    /// Closes the container at `node` with `count` elements (members).
    pub fn close(&mut self, node: usize, count: usize) {
        let end = self.nodes.len() as u32;
        let count = count as u32;
        match &mut self.nodes[node] {
            Node::Array { len, end: e } | Node::Object { len, end: e } => {
                *len = count;
                *e = end;
            }
            _ => {}
        }
    }

    /// The value that starts at node 0.
    pub fn root(&self) -> Value<'_> {
        Value { flat: self, at: 0 }
    }

    /// The index of the first node after the value at `at`.
    fn end(&self, at: u32) -> u32 {
        match self.nodes[at as usize] {
            Node::Array { end, .. } | Node::Object { end, .. } => end,
            _ => at + 1,
        }
    }

    fn key_at(&self, at: u32) -> &[u8] {
        match self.nodes[at as usize] {
            Node::Str { start, len } => &self.strings.as_bytes()[start..start + len],
            _ => b"",
        }
    }
}

/// A node of a [`Flat`], as the engine's [`Json`] view.
#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    flat: &'a Flat,
    at: u32,
}

impl<'a> Json<'a> for Value<'a> {
    type Items = Items<'a>;
    type Object = Members<'a>;

    #[inline]
    fn kind(self) -> Kind<'a, Self> {
        let flat = self.flat;
        match &flat.nodes[self.at as usize] {
            Node::Null => Kind::Null,
            Node::Bool(b) => Kind::Bool(*b),
            Node::Number(n) => Kind::Number(Num::Value(n)),
            Node::Str { start, len } => Kind::String(Str::Text(&flat.strings[*start..start + len])),
            Node::Array { len, .. } => Kind::Array(Items {
                flat,
                next: self.at + 1,
                left: *len,
            }),
            Node::Object { .. } => Kind::Object(Members { flat, at: self.at }),
        }
    }
}

/// An array's elements.
#[derive(Clone, Copy, Debug)]
pub struct Items<'a> {
    flat: &'a Flat,
    next: u32,
    left: u32,
}

impl<'a> Iterator for Items<'a> {
    type Item = Value<'a>;

    #[inline]
    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        let item = Value {
            flat: self.flat,
            at: self.next,
        };
        self.next = self.flat.end(self.next);
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Items<'_> {}

/// An object.
#[derive(Clone, Copy, Debug)]
pub struct Members<'a> {
    flat: &'a Flat,
    at: u32,
}

impl<'a> Members<'a> {
    /// The key nodes, in the order the members were written.
    fn keys(self) -> impl ExactSizeIterator<Item = u32> + 'a {
        let flat = self.flat;
        let count = match flat.nodes[self.at as usize] {
            Node::Object { len, .. } => len,
            _ => 0,
        };
        let mut key = self.at + 1;
        (0..count).map(move |_| {
            let k = key;
            key = flat.end(k + 1);
            k
        })
    }
}

/// An iteration over an object's members in key order: key nodes in the engine's scratch
/// array, `scratch[pos..end]`.
#[derive(Clone, Copy, Debug)]
pub struct Sorted {
    pos: u32,
    end: u32,
}

impl<'a> Object<'a> for Members<'a> {
    type Value = Value<'a>;
    type Sorted = Sorted;

    fn get(self, key: &str) -> Option<Value<'a>> {
        let flat = self.flat;
        self.keys()
            .filter(|&k| flat.key_at(k) == key.as_bytes())
            .last()
            .map(|k| Value { flat, at: k + 1 })
    }

    fn each_key(self, mut f: impl FnMut(&'a [u8])) {
        let flat = self.flat;
        self.keys().for_each(|k| f(flat.key_at(k)));
    }

    fn sorted(self, scratch: &mut Vec<u32>) -> (usize, Sorted) {
        let flat = self.flat;
        let start = scratch.len();
        // A dict's keys are distinct, but str subclasses can make two keys of equal text:
        // the last one counts, as for a repeated key in JSON text.
        if key_order(self.keys(), |k| flat.key_at(k), scratch).is_none() {
            // Already in order: iterated from the scratch array all the same.
            scratch.extend(self.keys());
        }
        let kept = scratch.len() - start;
        (
            kept,
            Sorted {
                pos: start as u32,
                end: (start + kept) as u32,
            },
        )
    }

    #[inline]
    fn next_sorted(self, it: &mut Sorted, scratch: &[u32]) -> Option<(&'a [u8], Value<'a>)> {
        if it.pos >= it.end {
            return None;
        }
        let k = scratch[it.pos as usize];
        it.pos += 1;
        Some((
            self.flat.key_at(k),
            Value {
                flat: self.flat,
                at: k + 1,
            },
        ))
    }
}

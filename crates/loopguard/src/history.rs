//! The rolling history of one (session, run) scope (SPEC §3).
//!
//! A scope keeps at most `historySize` records, oldest dropped first. Records are small
//! fixed-size values (64 bytes): tool names are interned per scope, call ids kept as
//! hashes. Each record links to the previous record of its signature and carries the
//! length of the alternating tail ending at it, so the metrics of SPEC §4 follow one
//! signature's records instead of rescanning the window; windows longer than
//! [`INDEX_MIN`] also keep a map from signature to its newest record and record count.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::clock::Millis;
use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};
use crate::policy::FailureClass;

/// Windows longer than this keep a signature index; shorter ones are scanned, which is as
/// fast and uses less memory.
pub const INDEX_MIN: usize = 64;

/// Index of an interned name in a scope's [`Names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NameId(u32);

/// Reference-counted interned strings (tool names, unknown tool names). Each slot keeps
/// the name's hash, so lookups compare integers and only confirm with the string.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Names {
    slots: Vec<(Box<str>, u32, u64)>,
}

fn name_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

impl Names {
    /// The id of `name`, if it is live.
    pub fn find(&self, name: &str) -> Option<NameId> {
        let hash = name_hash(name);
        self.slots
            .iter()
            .position(|(n, refs, h)| *h == hash && *refs > 0 && &**n == name)
            .map(|i| NameId(i as u32))
    }

    /// Takes a reference to `name`, interning it if needed. A released slot that still
    /// holds the same name is taken back without allocating.
    pub fn acquire(&mut self, name: &str) -> NameId {
        let hash = name_hash(name);
        if let Some(i) = self
            .slots
            .iter()
            .position(|(n, _, h)| *h == hash && &**n == name)
        {
            self.slots[i].1 += 1;
            return NameId(i as u32);
        }
        match self.slots.iter().position(|(_, refs, _)| *refs == 0) {
            Some(i) => {
                self.slots[i] = (name.into(), 1, hash);
                NameId(i as u32)
            }
            None => {
                self.slots.push((name.into(), 1, hash));
                NameId((self.slots.len() - 1) as u32)
            }
        }
    }

    /// Drops a reference taken by [`Names::acquire`].
    pub fn release(&mut self, id: NameId) {
        if let Some(slot) = self.slots.get_mut(id.0 as usize) {
            slot.1 = slot.1.saturating_sub(1);
        }
    }

    /// The name behind an id.
    pub fn get(&self, id: NameId) -> &str {
        self.slots.get(id.0 as usize).map_or("", |(n, _, _)| n)
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(Box<str>, u32, u64)>()
            + self.slots.iter().map(|(n, _, _)| n.len()).sum::<usize>()
    }
}

/// What is known of a record's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordState {
    /// Allowed or warned, no outcome yet.
    Pending,
    /// Completed with this outcome fingerprint.
    Done(Fingerprint),
    /// Blocked by the engine (a loop veto).
    Veto,
}

/// `Record::flags`: the state in the low two bits, then flags.
const PENDING: u8 = 0;
const DONE: u8 = 1;
const VETO: u8 = 2;
const STATE_BITS: u8 = 0b11;
/// The outcome was a failure (an error, or a result the policy's failure table says failed).
const FAILED: u8 = 0b100;
/// The failure was a retryable one (a timeout, a rate limit).
const RETRYABLE: u8 = 0b1000;

const NO_NAME: u32 = u32::MAX;

/// One call in a scope's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    signature: Signature,
    /// Meaningful when the state is done.
    outcome: Fingerprint,
    /// Hash of the provider call id; 0 when the call had none.
    call_id: u64,
    tool: NameId,
    /// A `NameId`, or `NO_NAME`.
    unknown_tool: u32,
    /// Distance back to the previous record of the same signature; 0 when none.
    prev: u32,
    /// Length of the alternating tail (last, other, last, …) ending at this record.
    alt: u32,
    /// Seconds of the clock when the record was made.
    at: u32,
    flags: u8,
    rule: OutcomeRule,
}

impl Record {
    /// Tool + args.
    pub fn signature(&self) -> Signature {
        self.signature
    }

    /// The tool name's id in the scope's [`Names`].
    pub fn tool(&self) -> NameId {
        self.tool
    }

    /// Pending, done or vetoed.
    pub fn state(&self) -> RecordState {
        match self.flags & STATE_BITS {
            DONE => RecordState::Done(self.outcome),
            VETO => RecordState::Veto,
            _ => RecordState::Pending,
        }
    }

    /// The outcome fingerprint, when the record has one.
    pub fn outcome(&self) -> Option<Fingerprint> {
        (self.flags & STATE_BITS == DONE).then_some(self.outcome)
    }

    /// Whether the record is a loop veto.
    pub fn is_veto(&self) -> bool {
        self.flags & STATE_BITS == VETO
    }

    /// Whether the record waits for its outcome.
    pub fn is_pending(&self) -> bool {
        self.flags & STATE_BITS == PENDING
    }

    /// Whether the outcome was a failure (tracked when extensions are on).
    pub fn failed(&self) -> bool {
        self.flags & FAILED != 0
    }

    /// The outcome's failure class, when it failed.
    pub fn failure(&self) -> Option<FailureClass> {
        match (self.failed(), self.flags & RETRYABLE != 0) {
            (false, _) => None,
            (true, false) => Some(FailureClass::Permanent),
            (true, true) => Some(FailureClass::Retryable),
        }
    }

    /// For errors naming an unavailable tool: that tool's id.
    pub fn unknown_tool(&self) -> Option<NameId> {
        (self.unknown_tool != NO_NAME).then_some(NameId(self.unknown_tool))
    }

    /// How this call's outcome is hashed.
    pub fn rule(&self) -> OutcomeRule {
        self.rule
    }

    /// Whether the record carries call id hash `id`.
    pub fn has_call_id(&self, id: u64) -> bool {
        self.call_id == id
    }

    /// When the record was made (seconds of the guard's clock).
    pub fn at_secs(&self) -> u32 {
        self.at
    }

    fn set_state(&mut self, state: RecordState, failure: Option<FailureClass>) {
        let (bits, outcome) = match state {
            RecordState::Pending => (PENDING, Fingerprint::from_u128(0)),
            RecordState::Done(fp) => (DONE, fp),
            RecordState::Veto => (VETO, Fingerprint::from_u128(0)),
        };
        self.flags = bits
            | match failure {
                None => 0,
                Some(FailureClass::Permanent) => FAILED,
                Some(FailureClass::Retryable) => FAILED | RETRYABLE,
            };
        self.outcome = outcome;
    }
}

/// Hash of a provider call id, as records keep it (ids are compared, never shown). Never 0.
pub fn call_id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes()).max(1)
}

/// What a record is made of.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NewRecord<'a> {
    pub tool: &'a str,
    pub signature: Signature,
    pub call_id: Option<u64>,
    pub state: RecordState,
    pub unknown_tool: Option<&'a str>,
    pub rule: OutcomeRule,
    pub now_ms: Millis,
    /// The signature's newest record, when the caller already looked it up.
    pub newest: Option<Option<usize>>,
    /// The outcome's failure, when it failed.
    pub failure: Option<FailureClass>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Head {
    /// Absolute sequence number of the signature's newest record.
    newest: u64,
    /// Records of the signature in the window.
    count: u32,
}

/// The records of one scope, oldest first, and the names they use.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    records: VecDeque<Record>,
    names: Names,
    /// Absolute sequence number of `records[0]`.
    base: u64,
    /// Signature → newest record and count, for long windows; rebuilt on demand. Boxed
    /// so that the many short windows that never build one stay small.
    #[serde(skip)]
    #[allow(clippy::box_collection)]
    index: Option<Box<HashMap<Signature, Head>>>,
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        // The index is derived data.
        self.records == other.records && self.names == other.names && self.base == other.base
    }
}

impl Eq for History {}

impl History {
    /// Records, oldest first.
    pub fn records(&self) -> &VecDeque<Record> {
        &self.records
    }

    /// Interned names.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The absolute sequence number of the record at `index` (stable while it is kept).
    pub fn seq_of(&self, index: usize) -> u64 {
        self.base + index as u64
    }

    /// Index of the newest record of `signature`.
    pub fn newest_of(&self, signature: Signature) -> Option<usize> {
        match &self.index {
            Some(index) => index
                .get(&signature)
                .map(|h| (h.newest - self.base) as usize),
            None => self.records.iter().rposition(|r| r.signature == signature),
        }
    }

    /// The records of `signature`, newest first, as (index, record).
    pub fn chain(&self, signature: Signature) -> impl Iterator<Item = (usize, &Record)> + '_ {
        self.chain_from(self.newest_of(signature))
    }

    /// The chain that starts at record `newest` (a [`History::newest_of`] result).
    pub fn chain_from(&self, newest: Option<usize>) -> impl Iterator<Item = (usize, &Record)> + '_ {
        let mut next = newest;
        std::iter::from_fn(move || {
            let i = next?;
            let r = &self.records[i];
            next = (r.prev != 0)
                .then(|| i.checked_sub(r.prev as usize))
                .flatten();
            Some((i, r))
        })
    }

    /// Records of `signature` in the window.
    pub fn count_of(&self, signature: Signature) -> u32 {
        self.count_from(signature, self.newest_of(signature))
    }

    /// [`History::count_of`], given the signature's newest record.
    pub fn count_from(&self, signature: Signature, newest: Option<usize>) -> u32 {
        match &self.index {
            Some(index) => index.get(&signature).map_or(0, |h| h.count),
            None => self.chain_from(newest).count() as u32,
        }
    }

    /// The alternating tail (last, other, last, …) reading back from the newest record.
    pub fn alternating_tail(&self) -> usize {
        self.records
            .back()
            .map_or(0, |r| (r.alt as usize).min(self.records.len()))
    }

    /// Appends a record and drops the oldest beyond `capacity`. Returns its index.
    pub(crate) fn push(&mut self, capacity: u32, new: NewRecord<'_>) -> usize {
        let len = self.records.len();
        let newest = new.newest.unwrap_or_else(|| self.newest_of(new.signature));
        let prev = newest.map_or(0, |i| (len - i) as u32);
        let alt = match (
            len.checked_sub(1).map(|i| &self.records[i]),
            len.checked_sub(2).map(|i| &self.records[i]),
        ) {
            (None, _) => 1,
            (Some(last), _) if last.signature == new.signature => 1,
            (Some(last), Some(before)) if before.signature == new.signature => last.alt + 1,
            (Some(_), _) => 2,
        };
        let tool = self.names.acquire(new.tool);
        let unknown_tool = new
            .unknown_tool
            .map_or(NO_NAME, |n| self.names.acquire(n).0);
        let mut record = Record {
            signature: new.signature,
            outcome: Fingerprint::from_u128(0),
            call_id: new.call_id.unwrap_or(0),
            tool,
            unknown_tool,
            prev,
            alt,
            at: (new.now_ms.get() / 1000).min(u64::from(u32::MAX)) as u32,
            flags: PENDING,
            rule: new.rule,
        };
        record.set_state(new.state, new.failure);
        if let Some(index) = &mut self.index {
            let head = index.entry(new.signature).or_default();
            head.newest = self.base + len as u64;
            head.count += 1;
        }
        self.records.push_back(record);
        self.trim(capacity);
        if self.index.is_none() && self.records.len() > INDEX_MIN {
            self.build_index();
        }
        self.records.len() - 1
    }

    fn build_index(&mut self) {
        let mut index: HashMap<Signature, Head> = HashMap::with_capacity(self.records.len());
        for (i, r) in self.records.iter().enumerate() {
            let head = index.entry(r.signature).or_default();
            head.newest = self.base + i as u64;
            head.count += 1;
        }
        self.index = Some(Box::new(index));
    }

    /// Rebuilds derived data after deserialization.
    pub(crate) fn restore_index(&mut self) {
        if self.index.is_none() && self.records.len() > INDEX_MIN {
            self.build_index();
        }
    }

    /// Drops the oldest records beyond `capacity`.
    pub(crate) fn trim(&mut self, capacity: u32) {
        while self.records.len() > capacity as usize {
            let Some(old) = self.records.pop_front() else {
                break;
            };
            if let Some(index) = &mut self.index {
                if let Some(head) = index.get_mut(&old.signature) {
                    head.count -= 1;
                    if head.count == 0 {
                        index.remove(&old.signature);
                    }
                }
            }
            self.base += 1;
            self.names.release(old.tool);
            if let Some(u) = old.unknown_tool() {
                self.names.release(u);
            }
        }
    }

    /// Sets the outcome of the record at `index` (a pending one).
    pub(crate) fn settle(
        &mut self,
        index: usize,
        state: RecordState,
        unknown_tool: Option<&str>,
        failure: Option<FailureClass>,
    ) {
        let unknown = unknown_tool.map_or(NO_NAME, |n| self.names.acquire(n).0);
        if let Some(r) = self.records.get_mut(index) {
            r.set_state(state, failure);
            let old = std::mem::replace(&mut r.unknown_tool, unknown);
            if old != NO_NAME {
                self.names.release(NameId(old));
            }
        }
    }

    /// Index of the newest pending record of `signature` (with this call id, when given).
    pub(crate) fn pending_match(
        &self,
        signature: Signature,
        call_id: Option<u64>,
    ) -> Option<usize> {
        self.chain(signature)
            .find(|(_, r)| r.is_pending() && call_id.is_none_or(|id| r.call_id == id))
            .map(|(i, _)| i)
    }

    /// Index of the newest record carrying call id `id`.
    pub(crate) fn by_call_id(&self, id: u64) -> Option<usize> {
        self.records.iter().rposition(|r| r.call_id == id)
    }

    /// Approximate bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Record>()
            + self.names.heap_bytes()
            + self.index.as_ref().map_or(0, |i| {
                i.capacity() * (std::mem::size_of::<(Signature, Head)>() + 1)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};
    use serde_json::json;

    fn sig(tool: &str) -> Signature {
        Signature::new(tool, Fingerprint::from_u128(0))
    }

    fn push(h: &mut History, cap: u32, tool: &str) {
        let rule = OutcomeRule::for_call(tool, &json!({}));
        h.push(
            cap,
            NewRecord {
                tool,
                signature: sig(tool),
                call_id: None,
                state: RecordState::Pending,
                unknown_tool: None,
                rule,
                now_ms: Millis::ZERO,
                newest: None,
                failure: None,
            },
        );
    }

    #[test]
    fn record_is_64_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 64);
    }

    #[test]
    fn keeps_at_most_capacity_oldest_dropped() {
        let mut h = History::default();
        for i in 0..10 {
            push(&mut h, 4, &format!("t{i}"));
        }
        assert_eq!(h.len(), 4);
        let tools: Vec<_> = h.records().iter().map(|r| h.names().get(r.tool)).collect();
        assert_eq!(tools, ["t6", "t7", "t8", "t9"]);
        // Released names' slots are reused: the table stays small.
        assert!(h.names.slots.len() <= 5, "{}", h.names.slots.len());
    }

    #[test]
    fn chains_and_counts_survive_eviction_and_indexing() {
        for cap in [8u32, 200] {
            let mut h = History::default();
            let pattern = ["a", "b", "a", "c", "a", "b"];
            for i in 0..150 {
                push(&mut h, cap, pattern[i % pattern.len()]);
                for t in ["a", "b", "c", "z"] {
                    let scanned = h.records().iter().filter(|r| r.signature == sig(t)).count();
                    assert_eq!(
                        h.count_of(sig(t)) as usize,
                        scanned,
                        "cap {cap} step {i} {t}"
                    );
                    let chain: Vec<usize> = h.chain(sig(t)).map(|(i, _)| i).collect();
                    let expect: Vec<usize> = (0..h.len())
                        .rev()
                        .filter(|&j| h.records[j].signature == sig(t))
                        .collect();
                    assert_eq!(chain, expect, "cap {cap} step {i} {t}");
                }
            }
            assert_eq!(h.index.is_some(), cap as usize > INDEX_MIN);
        }
    }

    #[test]
    fn alternating_tail() {
        let mut h = History::default();
        let mut tails = Vec::new();
        for t in ["a", "a", "b", "a", "b", "a", "c", "a", "c"] {
            push(&mut h, 100, t);
            tails.push(h.alternating_tail());
        }
        assert_eq!(tails, [1, 1, 2, 3, 4, 5, 2, 3, 4]);
        let mut h = History::default();
        for t in ["a", "b", "a", "b", "a", "b"] {
            push(&mut h, 3, t);
        }
        assert_eq!(h.alternating_tail(), 3, "capped by the window");
    }

    #[test]
    fn names_are_shared_and_released() {
        let mut n = Names::default();
        let a = n.acquire("read");
        let b = n.acquire("read");
        assert_eq!(a, b);
        n.release(a);
        assert_eq!(n.find("read"), Some(a));
        n.release(b);
        assert_eq!(n.find("read"), None);
        let again = n.acquire("read");
        assert_eq!(again, a, "a released name is taken back in place");
        n.release(again);
        let c = n.acquire("list");
        assert_eq!(c, a, "slot reused");
        assert_eq!(n.get(c), "list");
    }
}

//! The rolling history of one (session, run) scope (SPEC §3).
//!
//! A scope keeps at most `historySize` records, oldest dropped first. Tool names are
//! interned per scope so that a record is a small fixed-size value; names are reference
//! counted and their slots reused, so the table never outgrows the live records.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};

/// Index of an interned name in a scope's [`Names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NameId(u32);

/// Reference-counted interned strings (tool names, unknown tool names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Names {
    slots: Vec<(Box<str>, u32)>,
}

impl Names {
    /// The id of `name`, if it is live.
    pub fn find(&self, name: &str) -> Option<NameId> {
        self.slots
            .iter()
            .position(|(n, refs)| *refs > 0 && &**n == name)
            .map(|i| NameId(i as u32))
    }

    /// Takes a reference to `name`, interning it if needed.
    pub fn acquire(&mut self, name: &str) -> NameId {
        if let Some(id) = self.find(name) {
            self.slots[id.0 as usize].1 += 1;
            return id;
        }
        match self.slots.iter().position(|(_, refs)| *refs == 0) {
            Some(i) => {
                self.slots[i] = (name.into(), 1);
                NameId(i as u32)
            }
            None => {
                self.slots.push((name.into(), 1));
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
        self.slots.get(id.0 as usize).map_or("", |(n, _)| n)
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(Box<str>, u32)>()
            + self.slots.iter().map(|(n, _)| n.len()).sum::<usize>()
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

/// One call in a scope's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Tool + args.
    pub signature: Signature,
    /// The tool name.
    pub tool: NameId,
    /// Hash of the provider call id, when the call had one.
    pub call_id: Option<u64>,
    /// Pending, done or vetoed.
    pub state: RecordState,
    /// For errors naming an unavailable tool: that tool, lower-cased.
    pub unknown_tool: Option<NameId>,
    /// How this call's outcome is hashed.
    pub rule: OutcomeRule,
    /// When the record was made (clock milliseconds).
    pub at: u64,
}

impl Record {
    /// The outcome fingerprint, when the record has one.
    pub fn outcome(&self) -> Option<Fingerprint> {
        match self.state {
            RecordState::Done(fp) => Some(fp),
            _ => None,
        }
    }

    /// Whether the record is a loop veto.
    pub fn is_veto(&self) -> bool {
        self.state == RecordState::Veto
    }

    /// Whether the record waits for its outcome.
    pub fn is_pending(&self) -> bool {
        self.state == RecordState::Pending
    }
}

/// Hash of a provider call id, as records keep it (ids are compared, never shown).
pub fn call_id_hash(id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes())
}

/// The records of one scope, oldest first, and the names they use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    records: VecDeque<Record>,
    names: Names,
}

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

    /// Appends a record for `tool` and drops the oldest beyond `capacity`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        capacity: u32,
        tool: &str,
        signature: Signature,
        call_id: Option<u64>,
        state: RecordState,
        unknown_tool: Option<&str>,
        rule: OutcomeRule,
        at: u64,
    ) -> usize {
        let tool = self.names.acquire(tool);
        let unknown_tool = unknown_tool.map(|n| self.names.acquire(n));
        self.records.push_back(Record {
            signature,
            tool,
            call_id,
            state,
            unknown_tool,
            rule,
            at,
        });
        self.trim(capacity);
        self.records.len() - 1
    }

    /// Drops the oldest records beyond `capacity`.
    pub(crate) fn trim(&mut self, capacity: u32) {
        while self.records.len() > capacity as usize {
            if let Some(old) = self.records.pop_front() {
                self.names.release(old.tool);
                if let Some(u) = old.unknown_tool {
                    self.names.release(u);
                }
            }
        }
    }

    /// Sets the outcome of the record at `index` (a pending one).
    pub(crate) fn settle(&mut self, index: usize, state: RecordState, unknown_tool: Option<&str>) {
        let unknown_tool = unknown_tool.map(|n| self.names.acquire(n));
        if let Some(r) = self.records.get_mut(index) {
            r.state = state;
            if let Some(old) = std::mem::replace(&mut r.unknown_tool, unknown_tool) {
                self.names.release(old);
            }
        }
    }

    /// Index of the newest pending record of `signature` (with this call id, when given).
    pub(crate) fn pending_match(
        &self,
        signature: Signature,
        call_id: Option<u64>,
    ) -> Option<usize> {
        self.records.iter().rposition(|r| {
            r.is_pending()
                && r.signature == signature
                && call_id.is_none_or(|id| r.call_id == Some(id))
        })
    }

    /// Index of the newest record carrying call id `id`.
    pub(crate) fn by_call_id(&self, id: u64) -> Option<usize> {
        self.records.iter().rposition(|r| r.call_id == Some(id))
    }

    /// Approximate bytes held, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Record>() + self.names.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};
    use serde_json::json;

    fn push(h: &mut History, cap: u32, tool: &str) {
        let rule = OutcomeRule::for_call(tool, &json!({}));
        let sig = Signature::new(tool, Fingerprint::from_u128(0));
        h.push(cap, tool, sig, None, RecordState::Pending, None, rule, 0);
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
    fn names_are_shared_and_released() {
        let mut n = Names::default();
        let a = n.acquire("read");
        let b = n.acquire("read");
        assert_eq!(a, b);
        n.release(a);
        assert_eq!(n.find("read"), Some(a));
        n.release(b);
        assert_eq!(n.find("read"), None);
        let c = n.acquire("list");
        assert_eq!(c, a, "slot reused");
        assert_eq!(n.get(c), "list");
    }
}

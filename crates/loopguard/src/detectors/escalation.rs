//! Escalation: a loop that goes on after a block.
//!
//! A block vetoes one call; the veto breaks the evidence of outcome-based detectors, so
//! the next round of a cycle or a ping-pong is only warned, and an agent that ignores the
//! block keeps looping. Once any detector has blocked a loop, the loop is remembered by
//! what it is made of: the call's signature, both sides of a ping-pong, every step of a
//! cycle, the (tool, target) of a thrash, or every call for a run of failures. A call that
//! continues it is blocked again (`escalation`), and the `stopAfter`-th such attempt stops
//! the run. A call outside every blocked loop is judged as usual: the agent can change
//! approach. A loop nobody has tried to continue for a window's worth of calls is
//! forgotten.

use serde::{Deserialize, Serialize};

use crate::fingerprint::Signature;
use crate::verdict::Detector;

/// Blocked loops kept per run; the oldest is forgotten first.
const MAX_LOOPS: usize = 8;

/// What continues a blocked loop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Members {
    /// Calls with one of these signatures.
    Calls(Vec<Signature>),
    /// Calls of one tool on one target (the key of both).
    Target(u64),
    /// Every call (a run of failures across tools).
    Any,
}

/// A loop a detector blocked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct BlockedLoop {
    /// The detector that blocked it.
    pub detector: Detector,
    /// The tool of the blocked call.
    pub tool: Box<str>,
    members: Members,
    /// Calls that continued it since the block.
    pub attempts: u32,
    /// Sequence number of the block or of the latest attempt.
    last: u64,
}

/// The blocked loops of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Escalation {
    loops: Vec<BlockedLoop>,
}

impl Escalation {
    /// Remembers a loop blocked at sequence number `seq` (a loop made of the same members
    /// is remembered once, with its attempts).
    pub(crate) fn blocked(&mut self, detector: Detector, tool: &str, members: Members, seq: u64) {
        if let Some(l) = self.loops.iter_mut().find(|l| l.members == members) {
            l.last = seq;
            return;
        }
        while self.loops.len() >= MAX_LOOPS {
            self.loops.remove(0);
        }
        self.loops.push(BlockedLoop {
            detector,
            tool: tool.into(),
            members,
            attempts: 0,
            last: seq,
        });
    }

    /// The blocked loop that a call at `seq` with `signature` (and `target`, the key of its
    /// tool and target) continues, counted as one more attempt. Loops not continued for
    /// more than `window` calls are forgotten first.
    pub(crate) fn continued(
        &mut self,
        signature: Signature,
        target: Option<u64>,
        seq: u64,
        window: u32,
    ) -> Option<&BlockedLoop> {
        self.loops
            .retain(|l| seq.saturating_sub(l.last) <= u64::from(window));
        let l = self.loops.iter_mut().find(|l| match &l.members {
            Members::Calls(signatures) => signatures.contains(&signature),
            Members::Target(key) => target == Some(*key),
            Members::Any => true,
        })?;
        l.attempts = l.attempts.saturating_add(1);
        l.last = seq;
        Some(l)
    }

    /// Whether no loop is remembered.
    pub(crate) fn is_empty(&self) -> bool {
        self.loops.is_empty()
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.loops
            .iter()
            .map(|l| {
                std::mem::size_of::<BlockedLoop>()
                    + l.tool.len()
                    + match &l.members {
                        Members::Calls(s) => s.capacity() * 16,
                        _ => 0,
                    }
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprint;

    fn sig(n: u128) -> Signature {
        Signature::new("t", Fingerprint::from_u128(n))
    }

    #[test]
    fn members_continue_others_do_not() {
        let mut e = Escalation::default();
        e.blocked(
            Detector::Cycle,
            "read",
            Members::Calls(vec![sig(1), sig(2)]),
            10,
        );
        assert!(e.continued(sig(3), None, 11, 30).is_none());
        assert_eq!(e.continued(sig(2), None, 12, 30).unwrap().attempts, 1);
        assert_eq!(e.continued(sig(1), None, 13, 30).unwrap().attempts, 2);
        e.blocked(Detector::TargetThrash, "edit", Members::Target(7), 14);
        assert!(e.continued(sig(9), Some(8), 15, 30).is_none());
        assert_eq!(e.continued(sig(9), Some(7), 16, 30).unwrap().attempts, 1);
    }

    #[test]
    fn a_loop_left_alone_for_a_window_is_forgotten() {
        let mut e = Escalation::default();
        e.blocked(
            Detector::GenericRepeat,
            "read",
            Members::Calls(vec![sig(1)]),
            10,
        );
        assert!(e.continued(sig(1), None, 41, 30).is_none());
        assert!(e.is_empty());
    }

    #[test]
    fn keeps_a_bounded_number_of_loops() {
        let mut e = Escalation::default();
        for i in 0..20 {
            e.blocked(
                Detector::GenericRepeat,
                "read",
                Members::Calls(vec![sig(i)]),
                1,
            );
        }
        assert_eq!(e.loops.len(), MAX_LOOPS);
        assert!(
            e.continued(sig(0), None, 2, 30).is_none(),
            "the oldest went first"
        );
        assert!(e.continued(sig(19), None, 2, 30).is_some());
    }
}

//! What a run remembers of the events that carried a call id, beyond its history window.
//!
//! Two promises depend on it:
//!
//! - **The result of a blocked call is ignored, however late it arrives** (SPEC §7). The
//!   history forgets a veto once `historySize` newer records have pushed it out, so the ids
//!   of blocked calls are kept apart: the newest [`BLOCKED_IDS_KEPT`], oldest forgotten
//!   first. An id leaves the set when a later call with the same id is allowed (hosts that
//!   reuse ids).
//! - **An event sent twice counts once.** Clients retry after a timeout, a 429 or a 503
//!   without knowing whether the first attempt was applied. A call whose id names the run's
//!   newest answered call with that id, with the same tool and arguments, still open (no
//!   result recorded since), gets that call's verdict again; a result whose id names a call
//!   whose recorded result had the same outcome fingerprint gets that answer again. Neither
//!   changes the history. The newest [`ANSWERS_KEPT`] answers are kept.
//!
//! A call whose earlier namesake already has its result is a new call, not a retry: hosts
//! that reuse ids across turns (`call_0` every message) keep being guarded.
//!
//! **A retry is answered again at most [`RETRIES_PER_CALL`] times.** A host that reuses one
//! id for new calls and never reports results (hand-made ids: provider ids are unique per
//! call) would otherwise have every identical call taken for a retry, and repeat detection
//! would be off for it. So the run counts the retries it answered for each call; once a
//! call with the same id, tool and arguments comes again after that many, still without a
//! result, it is judged and recorded as a new call ([`CallIdUse::Reused`]: its answer says
//! so), and so is every later one until a result for the id arrives. HTTP clients retry a
//! lost answer a few times, not more; a host whose ids look like this is told, and stays
//! guarded, its counts behind by the retries answered.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::fingerprint::{Fingerprint, OutcomeRule, Signature};
use crate::verdict::{Abort, Detection, Recorded, Verdict};

/// Ids of blocked calls a run keeps (8 bytes each): results arriving after this many newer
/// blocks are no longer recognised by id alone.
pub const BLOCKED_IDS_KEPT: usize = 256;

/// Calls (with their results) a run keeps answers of, for retries: more than the calls of
/// one run a client has in flight.
pub const ANSWERS_KEPT: usize = 16;

/// Retries of one call (same id, tool and arguments, no result yet) answered with its
/// verdict again; the next identical call counts as a new call (see the module docs).
/// Clients retry a lost answer a few times; a host sending one id for every call without
/// results is caught after this many.
pub const RETRIES_PER_CALL: u32 = 5;

/// How a call stands to the call its id named before (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallIdUse {
    /// A new call: judged and recorded. Calls without an id are always new.
    #[default]
    New,
    /// A retry of the run's newest call with this id (same tool and arguments, no result
    /// yet): answered with that call's verdict again; nothing recorded or counted.
    Retry,
    /// The id came again with the same tool and arguments and still no result, after
    /// [`RETRIES_PER_CALL`] retries: judged and recorded as a new call, and the answer says
    /// that the host's ids look reused ([`CallIdUse::warning`]).
    Reused {
        /// How many times the call came under this id without a result (this one
        /// included; counted up to 255).
        sent: u8,
    },
}

impl CallIdUse {
    /// For [`CallIdUse::Reused`]: what to tell the host.
    pub fn warning(self) -> Option<String> {
        match self {
            Self::Reused { sent } => Some(format!(
                "call_id sent {sent} times with the same tool and arguments and no result: \
                 after {RETRIES_PER_CALL} retries it counts as a new call each time; give \
                 every call its own call_id and send each call's result"
            )),
            Self::New | Self::Retry => None,
        }
    }

    /// Whether this answers a retry (counted already).
    pub fn is_retry(self) -> bool {
        self == Self::Retry
    }
}

/// What [`Answers::retried_call`] found.
pub(crate) enum Retried {
    /// Not a retry: a new call.
    New,
    /// A retry: this verdict again.
    Again(Verdict),
    /// Past [`RETRIES_PER_CALL`]: a new call, the `sent`-th under this id.
    Reused(u8),
}

/// The per-run memory of answered call ids (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Answers {
    /// Call id hashes of blocked calls, oldest first, each at most once.
    blocked: VecDeque<u64>,
    /// The newest answered calls, oldest first.
    recent: VecDeque<Answered>,
}

/// One call (or a result without a known call) and what was answered. 40 bytes: digests
/// are kept as 64-bit prefixes, enough to tell a retry from a new event with the same id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Answered {
    id: u64,
    /// The call's signature (prefix).
    signature: u64,
    /// The recorded outcome's fingerprint (prefix), when `state` is [`State::Recorded`].
    outcome: u64,
    /// How the outcome was hashed, to hash a retried outcome the same way.
    rule: OutcomeRule,
    state: State,
    /// The verdict when it was not an allow, and the abort a result caused: rare, boxed.
    said: Option<Box<Said>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    /// Answered, no result recorded yet (blocked calls stay here).
    Open,
    /// Its result was recorded: the engine's own veto result.
    RecordedVeto,
    /// Its result was recorded with the fingerprint in `outcome`.
    Recorded,
    /// As `Open`, and sent this many times more under its id, with no result in between
    /// (retries answered, or, past [`RETRIES_PER_CALL`], calls counted anew). Last, so that
    /// states of format version 4 read unchanged.
    Resent(u8),
}

impl State {
    /// No result recorded yet.
    fn is_open(self) -> bool {
        matches!(self, Self::Open | Self::Resent(_))
    }

    /// Times sent again since the first.
    fn resent(self) -> u8 {
        match self {
            Self::Resent(n) => n,
            _ => 0,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Said {
    verdict: Option<SavedVerdict>,
    /// The post-compaction abort the result caused (`true`: in shadow mode).
    abort: Option<(Abort, bool)>,
}

/// A [`Verdict`] other than allow, in a storable form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum SavedVerdict {
    Warn(Detection, bool),
    Block(Detection, bool),
    Shadow(Detection, bool),
}

impl SavedVerdict {
    fn of(verdict: &Verdict) -> Option<Self> {
        Some(match verdict {
            Verdict::Allow => return None,
            Verdict::Warn { detection, notify } => Self::Warn(detection.clone(), *notify),
            Verdict::Block {
                detection,
                terminal,
            } => Self::Block(detection.clone(), *terminal),
            Verdict::Shadow {
                detection,
                terminal,
            } => Self::Shadow(detection.clone(), *terminal),
        })
    }

    fn verdict(&self) -> Verdict {
        match self {
            Self::Warn(detection, notify) => Verdict::Warn {
                detection: detection.clone(),
                notify: *notify,
            },
            Self::Block(detection, terminal) => Verdict::Block {
                detection: detection.clone(),
                terminal: *terminal,
            },
            Self::Shadow(detection, terminal) => Verdict::Shadow {
                detection: detection.clone(),
                terminal: *terminal,
            },
        }
    }

    fn detection(&self) -> &Detection {
        match self {
            Self::Warn(d, _) | Self::Block(d, _) | Self::Shadow(d, _) => d,
        }
    }
}

/// What a retried result is compared by: the outcome as the first result's rule hashes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutcomeKey {
    /// The engine's own veto result.
    Veto,
    /// A fingerprinted outcome.
    Hashed(Fingerprint),
}

/// The 64-bit prefix a digest is kept as.
fn prefix(digest: u128) -> u64 {
    (digest >> 64) as u64
}

impl Answers {
    /// Whether the newest call with id `id` was blocked (within the last
    /// [`BLOCKED_IDS_KEPT`] blocks).
    pub(crate) fn was_blocked(&self, id: u64) -> bool {
        self.blocked.contains(&id)
    }

    /// Whether a call with `id` and `signature` is a retry, and if so the verdict to
    /// repeat (counting the retry).
    pub(crate) fn retried_call(&mut self, id: u64, signature: Signature) -> Retried {
        let Some(answered) = self.recent.iter_mut().rev().find(|a| a.id == id) else {
            return Retried::New;
        };
        if !answered.state.is_open() || answered.signature != prefix(signature.as_u128()) {
            return Retried::New;
        }
        let resent = answered.state.resent().saturating_add(1);
        if u32::from(resent) > RETRIES_PER_CALL {
            return Retried::Reused(resent);
        }
        answered.state = State::Resent(resent);
        Retried::Again(
            match answered.said.as_deref().and_then(|s| s.verdict.as_ref()) {
                Some(saved) => saved.verdict(),
                None => Verdict::Allow,
            },
        )
    }

    /// The answer to repeat when a result for `id` is a retry: `key` hashes the new
    /// outcome with the rule the first result was hashed with.
    pub(crate) fn retried_result(
        &self,
        id: u64,
        key: impl FnOnce(OutcomeRule) -> Option<OutcomeKey>,
    ) -> Option<Recorded> {
        let answered = self.newest(id)?;
        // A call still open has no result to repeat: its outcome is not hashed for nothing
        // (the common case: the result of the call just judged).
        if answered.state.is_open() {
            return None;
        }
        let same = match (answered.state, key(answered.rule)?) {
            (State::RecordedVeto, OutcomeKey::Veto) => true,
            (State::Recorded, OutcomeKey::Hashed(fp)) => prefix(fp.as_u128()) == answered.outcome,
            _ => false,
        };
        if !same {
            return None;
        }
        let (abort, would_abort) = match answered.said.as_deref().and_then(|s| s.abort.as_ref()) {
            Some((abort, true)) => (None, Some(abort.clone())),
            Some((abort, false)) => (Some(abort.clone()), None),
            None => (None, None),
        };
        Some(Recorded {
            recorded: true,
            abort,
            would_abort,
        })
    }

    /// Remembers the verdict on a call with `id`; `resent`: the times it was sent before
    /// under this id without a result ([`Retried::Reused`]), 0 for a new call.
    pub(crate) fn called(
        &mut self,
        id: u64,
        signature: Signature,
        rule: OutcomeRule,
        verdict: &Verdict,
        resent: u8,
    ) {
        self.blocked.retain(|&b| b != id);
        if verdict.is_blocked() {
            if self.blocked.len() == BLOCKED_IDS_KEPT {
                self.blocked.pop_front();
            }
            self.blocked.push_back(id);
        }
        let said = SavedVerdict::of(verdict).map(|v| {
            Box::new(Said {
                verdict: Some(v),
                abort: None,
            })
        });
        self.push(Answered {
            id,
            signature: prefix(signature.as_u128()),
            outcome: 0,
            rule,
            state: match resent {
                0 => State::Open,
                n => State::Resent(n),
            },
            said,
        });
    }

    /// Remembers the answer to a recorded result of the call `id` with `signature`.
    pub(crate) fn recorded(
        &mut self,
        id: u64,
        signature: Signature,
        rule: OutcomeRule,
        key: OutcomeKey,
        recorded: &Recorded,
    ) {
        let signature = prefix(signature.as_u128());
        let index = match self.recent.iter().rposition(|a| a.id == id) {
            Some(i) if self.recent[i].state.is_open() && self.recent[i].signature == signature => i,
            _ => {
                // A result whose call this run did not answer (or no longer remembers).
                self.push(Answered {
                    id,
                    signature,
                    outcome: 0,
                    rule,
                    state: State::Open,
                    said: None,
                });
                self.recent.len() - 1
            }
        };
        let answered = &mut self.recent[index];
        (answered.state, answered.outcome) = match key {
            OutcomeKey::Veto => (State::RecordedVeto, 0),
            OutcomeKey::Hashed(fp) => (State::Recorded, prefix(fp.as_u128())),
        };
        answered.rule = rule;
        let abort = match (&recorded.abort, &recorded.would_abort) {
            (Some(abort), _) => Some((abort.clone(), false)),
            (None, Some(abort)) => Some((abort.clone(), true)),
            (None, None) => None,
        };
        if abort.is_some() {
            answered.said.get_or_insert_default().abort = abort;
        }
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.blocked.capacity() * std::mem::size_of::<u64>()
            + self.recent.capacity() * std::mem::size_of::<Answered>()
            + self
                .recent
                .iter()
                .filter_map(|a| a.said.as_deref())
                .map(|said| {
                    std::mem::size_of::<Said>()
                        + said.verdict.as_ref().map_or(0, |v| {
                            let d = v.detection();
                            d.tool.len()
                                + d.message.len()
                                + d.evidence.paired_tool().map_or(0, str::len)
                        })
                        + said
                            .abort
                            .as_ref()
                            .map_or(0, |(a, _)| a.tool.len() + a.message.len())
                })
                .sum::<usize>()
    }

    fn newest(&self, id: u64) -> Option<&Answered> {
        self.recent.iter().rev().find(|a| a.id == id)
    }

    fn push(&mut self, answered: Answered) {
        let (len, capacity) = (self.recent.len(), self.recent.capacity());
        if len == ANSWERS_KEPT {
            self.recent.pop_front();
        } else if len == capacity {
            // Grown by steps of 4 up to exactly the bound: most runs answer a few calls
            // (a scan holds hundreds of thousands of runs at once), and doubling would
            // overshoot the bound.
            self.recent.reserve_exact(4.min(ANSWERS_KEPT - len));
        }
        self.recent.push_back(answered);
    }
}

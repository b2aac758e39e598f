//! [`SessionState`]: what the engine keeps about a session beyond any one of its runs.
//!
//! That is spend (the session's, each of its agents', and the current day's), what
//! `run_storm` keeps across the session's runs ([`crate::storm`]) and the session's place
//! in a tree of agents ([`crate::tree`]: a sub-agent's link to its root, a root's record of
//! its tree). It is the
//! place for everything else a session-wide rule needs (a rule that looks across runs, a
//! tree of agents rolling up to its root): a store keeps one per session beside the session's
//! runs and hands it to every update of one of those runs, in the same atomic step, so a
//! rule reads and writes it as it does a run's state.
//!
//! Its encoding ([`SessionState::to_bytes`]) is versioned like a run's: a version byte, then
//! the fields in order (postcard). A later version appends its fields after these, so that
//! the states of this version read as states with the new fields at their defaults:
//! version 2 appends `run_storm`'s state after version 1's fields, version 3 the agent
//! tree's after those, and version 1 and 2 states still read.

use serde::{Deserialize, Serialize};

use super::{Cost, Spend, Usage};
use crate::clock::Millis;
use crate::storm::{Storm, StormStop};
use crate::tree::TreePlace;

/// Version of [`SessionState::to_bytes`]'s format.
pub const SESSION_FORMAT_VERSION: u8 = 3;

/// The older format versions whose states [`SessionState::from_bytes`] still reads.
const SESSION_FORMAT_V1: u8 = 1;
const SESSION_FORMAT_V2: u8 = 2;

/// Agents a session keeps apart; the spend of further agents is pooled in one entry, which
/// their agent budget then shares (so a session cannot escape an agent budget by spawning
/// agents: the pool only fills sooner).
pub const MAX_AGENTS_PER_SESSION: usize = 64;

/// What the engine keeps about one session beyond its runs (see the module docs).
///
/// Sixteen bytes while the session has spent nothing (most sessions, when no budget is
/// set): what it keeps is allocated at its first change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionState {
    /// What is kept; `None` while nothing is.
    kept: Option<Box<Kept>>,
    /// Whether anything changed since the state was made or read: a store writes it back
    /// only then.
    changed: bool,
}

/// The fields of a [`SessionState`] that has kept anything, in their encoded order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Kept {
    /// The session's spend: every run, every agent.
    spend: Spend,
    /// When the session's first counted event came.
    started: Option<Millis>,
    /// The spend of the last day anything was counted on.
    day: Option<DaySpend>,
    /// Each agent's spend, in order of first appearance.
    agents: Vec<AgentSpend>,
    /// When the state last changed (clock milliseconds).
    last_active: Millis,
    /// `run_storm`'s state (encoded after the fields above, from version 2).
    #[serde(skip)]
    storm: Storm,
    /// The session's place in a tree of agents (encoded after `storm`, from version 3).
    #[serde(skip)]
    tree: TreePlace,
}

/// What an empty state reads as.
static NOTHING: Kept = Kept {
    spend: Spend::ZERO,
    started: None,
    day: None,
    agents: Vec::new(),
    last_active: Millis::ZERO,
    storm: Storm::EMPTY,
    tree: TreePlace::EMPTY,
};

/// One day's spend of a session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaySpend {
    /// Days since 1970-01-01, where days begin (`budgets.timeZone`).
    pub day: i64,
    /// What was spent that day.
    pub spend: Spend,
    /// The day's first counted event.
    pub started: Millis,
}

/// One agent's spend in a session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentSpend {
    /// The agent id (`""`: events that name none); `None`: the agents beyond
    /// [`MAX_AGENTS_PER_SESSION`], pooled.
    pub agent: Option<Box<str>>,
    /// What it spent.
    pub spend: Spend,
    /// Its first counted event.
    pub started: Millis,
}

/// A stored session state that cannot be read back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionDecodeError {
    /// Written by another version of the format.
    #[error("session state format version {found} is not supported (this build reads version {SESSION_FORMAT_VERSION})")]
    Version {
        /// The version found.
        found: u8,
    },
    /// Corrupt bytes.
    #[error("session state is corrupt: {0}")]
    Corrupt(String),
}

impl SessionState {
    /// The session's spend.
    pub fn spend(&self) -> &Spend {
        &self.kept().spend
    }

    fn kept(&self) -> &Kept {
        self.kept.as_deref().unwrap_or(&NOTHING)
    }

    /// When the session's first counted event came.
    pub fn started(&self) -> Option<Millis> {
        self.kept().started
    }

    /// The spend of day `today`, when anything was counted on it.
    pub fn day(&self, today: i64) -> Option<&DaySpend> {
        self.kept().day.as_ref().filter(|d| d.day == today)
    }

    /// The last day anything was counted on.
    pub fn last_day(&self) -> Option<&DaySpend> {
        self.kept().day.as_ref()
    }

    /// The spend of `agent` (`""`: no agent id), or of the pool it would share.
    pub fn agent(&self, agent: &str) -> Option<&AgentSpend> {
        self.agents()
            .iter()
            .find(|a| a.agent.as_deref() == Some(agent))
            .or_else(|| self.pool())
    }

    /// Every agent's spend.
    pub fn agents(&self) -> &[AgentSpend] {
        &self.kept().agents
    }

    fn pool(&self) -> Option<&AgentSpend> {
        let agents = self.agents();
        (agents.len() >= MAX_AGENTS_PER_SESSION)
            .then(|| agents.iter().find(|a| a.agent.is_none()))
            .flatten()
    }

    /// When the state last changed.
    pub fn last_active(&self) -> Millis {
        self.kept().last_active
    }

    /// The session's stop by `run_storm`, when it was stopped (it may have cooled down
    /// since: the next call says).
    pub fn storm_stop(&self) -> Option<&StormStop> {
        self.kept().storm.stop()
    }

    /// Runs of the session in a row that ended the same way without progress.
    pub fn storm_row(&self) -> u32 {
        self.kept().storm.row()
    }

    pub(crate) fn storm(&self) -> &Storm {
        &self.kept().storm
    }

    /// Applies `f` to `run_storm`'s state; `f` says (through its flag) whether it changed
    /// anything.
    pub(crate) fn with_storm<R>(
        &mut self,
        now: Millis,
        f: impl FnOnce(&mut Storm, &mut bool) -> R,
    ) -> R {
        self.with_part(now, |k| &mut k.storm, f)
    }

    /// The session's place in a tree of agents: a sub-agent's link to its root, a root's
    /// record of its tree.
    pub fn tree(&self) -> &TreePlace {
        &self.kept().tree
    }

    /// Applies `f` to the session's place in its tree; `f` says (through its flag)
    /// whether it changed anything.
    pub(crate) fn with_tree<R>(
        &mut self,
        now: Millis,
        f: impl FnOnce(&mut TreePlace, &mut bool) -> R,
    ) -> R {
        self.with_part(now, |k| &mut k.tree, f)
    }

    /// Applies `f` to the part of what is kept that `part` picks: the state is allocated
    /// for it and dropped again when it stays empty; a change marks it changed.
    fn with_part<T, R>(
        &mut self,
        now: Millis,
        part: impl FnOnce(&mut Kept) -> &mut T,
        f: impl FnOnce(&mut T, &mut bool) -> R,
    ) -> R {
        let was_empty = self.kept.is_none();
        let kept = self.kept.get_or_insert_with(Box::default);
        let mut changed = false;
        let r = f(part(kept), &mut changed);
        if changed {
            self.changed = true;
            kept.last_active = now;
        } else if was_empty {
            self.kept = None;
        }
        r
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.kept.is_none()
    }

    /// Whether the state changed since it was made, read or [`saved`](Self::saved).
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Says the state as it is now is stored (a store calls it when it writes the state).
    pub fn saved(&mut self) {
        self.changed = false;
    }

    /// Counts a response of `agent` on day `today`.
    pub(crate) fn add_usage(
        &mut self,
        agent: &str,
        usage: &Usage<'_>,
        cost: Option<Cost>,
        today: i64,
        now: Millis,
    ) {
        self.each(agent, today, now, |s| s.add_usage(usage, cost));
    }

    /// Counts a tool call of `agent` on day `today`.
    pub(crate) fn add_call(&mut self, agent: &str, today: i64, now: Millis) {
        self.each(agent, today, now, Spend::add_call);
    }

    /// Applies `f` to the session's, the agent's and the day's spend.
    fn each(&mut self, agent: &str, today: i64, now: Millis, f: impl Fn(&mut Spend)) {
        self.changed = true;
        let kept = self.kept.get_or_insert_with(Box::default);
        kept.last_active = now;
        kept.started.get_or_insert(now);
        f(&mut kept.spend);
        let day = match &mut kept.day {
            Some(d) if d.day == today => d,
            slot => slot.insert(DaySpend {
                day: today,
                spend: Spend::default(),
                started: now,
            }),
        };
        f(&mut day.spend);
        f(&mut kept.agent_entry(agent, now).spend);
    }
}

impl Kept {
    fn agent_entry(&mut self, agent: &str, now: Millis) -> &mut AgentSpend {
        let known = self
            .agents
            .iter()
            .position(|a| a.agent.as_deref() == Some(agent));
        let index = match known {
            Some(i) => i,
            None if self.agents.len() + 1 < MAX_AGENTS_PER_SESSION => {
                self.agents.push(AgentSpend {
                    agent: Some(agent.into()),
                    spend: Spend::default(),
                    started: now,
                });
                self.agents.len() - 1
            }
            None => match self.agents.iter().position(|a| a.agent.is_none()) {
                Some(i) => i,
                None => {
                    self.agents.push(AgentSpend {
                        agent: None,
                        spend: Spend::default(),
                        started: now,
                    });
                    self.agents.len() - 1
                }
            },
        };
        &mut self.agents[index]
    }
}

impl SessionState {
    /// A compact, versioned binary form, for durable stores.
    pub fn to_bytes(&self) -> Vec<u8> {
        let kept = self.kept();
        let mut out = Vec::with_capacity(64 + 48 * kept.agents.len());
        out.push(SESSION_FORMAT_VERSION);
        // Encoding plain data into a Vec cannot fail.
        let out = postcard::to_extend(kept, out).unwrap_or_default();
        let out = postcard::to_extend(&kept.storm, out).unwrap_or_default();
        postcard::to_extend(&kept.tree, out).unwrap_or_default()
    }

    /// Reads back [`SessionState::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SessionDecodeError> {
        match bytes.split_first() {
            Some((
                &version @ (SESSION_FORMAT_V1 | SESSION_FORMAT_V2 | SESSION_FORMAT_VERSION),
                rest,
            )) => {
                let corrupt = |e: postcard::Error| SessionDecodeError::Corrupt(e.to_string());
                let (mut kept, mut left): (Kept, &[u8]) =
                    postcard::take_from_bytes(rest).map_err(corrupt)?;
                if version >= SESSION_FORMAT_V2 {
                    (kept.storm, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
                if version >= SESSION_FORMAT_VERSION {
                    (kept.tree, left) = postcard::take_from_bytes(left).map_err(corrupt)?;
                }
                if !left.is_empty() {
                    return Err(SessionDecodeError::Corrupt(format!(
                        "{} bytes after the state",
                        left.len()
                    )));
                }
                Ok(Self {
                    kept: (kept != NOTHING).then(|| Box::new(kept)),
                    changed: false,
                })
            }
            Some((&found, _)) => Err(SessionDecodeError::Version { found }),
            None => Err(SessionDecodeError::Corrupt("empty".into())),
        }
    }

    /// Approximate bytes held, heap included.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .kept
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<Kept>())
            + self
                .agents()
                .iter()
                .map(|a| {
                    std::mem::size_of::<AgentSpend>() + a.agent.as_ref().map_or(0, |s| s.len())
                })
                .sum::<usize>()
            + self.kept().storm.heap_bytes()
            + self.kept().tree.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_goes_to_the_session_the_agent_and_the_day() {
        let mut s = SessionState::default();
        assert!(s.is_empty() && !s.changed());
        assert_eq!(std::mem::size_of::<SessionState>(), 16);
        let empty = SessionState::from_bytes(&s.to_bytes()).unwrap();
        assert!(empty.is_empty());
        let u = Usage::new(100, 10);
        s.add_usage("a", &u, Some(Cost::from_pico(5)), 1, Millis::new(10));
        s.add_call("b", 1, Millis::new(20));
        s.add_usage("a", &u, None, 2, Millis::new(30));
        assert!(s.changed());
        assert_eq!(s.spend().tokens(), 220);
        assert_eq!(s.spend().calls, 1);
        assert_eq!(s.spend().unpriced_tokens, 110);
        assert_eq!(s.agent("a").unwrap().spend.responses, 2);
        assert_eq!(s.agent("b").unwrap().spend.calls, 1);
        assert!(s.day(1).is_none(), "the day turned");
        assert_eq!(s.day(2).unwrap().spend.tokens(), 110);
        let back = SessionState::from_bytes(&s.to_bytes()).unwrap();
        assert!(!back.changed());
        assert_eq!(back.spend(), s.spend());
        assert_eq!(back.agents(), s.agents());
        assert!(matches!(
            SessionState::from_bytes(&[9, 0]),
            Err(SessionDecodeError::Version { found: 9 })
        ));
        assert!(SessionState::from_bytes(&[SESSION_FORMAT_VERSION, 200]).is_err());
        assert!(SessionState::from_bytes(&[]).is_err());
    }

    #[test]
    fn agents_beyond_the_bound_share_one_pool() {
        let mut s = SessionState::default();
        for i in 0..MAX_AGENTS_PER_SESSION + 10 {
            s.add_call(&format!("a{i}"), 0, Millis::ZERO);
        }
        assert_eq!(s.agents().len(), MAX_AGENTS_PER_SESSION);
        let pool = s.agent("a70").unwrap();
        assert!(pool.agent.is_none());
        assert_eq!(pool.spend.calls, 11);
        assert_eq!(s.agent("a0").unwrap().spend.calls, 1);
    }
}

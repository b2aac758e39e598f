//! A run's side of the budgets: its spend, its spend since its last progress, the warnings
//! it was given, the limit that stopped it, and the usage ids it counted. Judging a call
//! reads the run's [`RunLedger`] and its session's [`SessionState`] together.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{
    prices::Price, BudgetScope, Budgets, Cost, Measure, Reading, SessionState, Spend, Usage,
    UsageError,
};
use crate::clock::Millis;

/// Usage ids a run remembers, to count a retried usage event once: more than the
/// responses of a run a client has in flight.
pub const USAGE_IDS_KEPT: usize = 32;

/// Distinct (tool, arguments, outcome) triples a run remembers to tell progress from a
/// repeat (8 bytes each).
pub const PROGRESS_KEPT: usize = 128;

/// A run's budget state (see the module docs): eight bytes while the run has counted
/// nothing (no budget set, no usage reported), allocated at its first count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct RunLedger(Option<Box<Ledger>>);

/// The fields of a [`RunLedger`] that has counted anything, in their encoded order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Ledger {
    /// The run's spend.
    spent: Spend,
    /// Its spend since its last progress.
    since_progress: Spend,
    /// Its first counted event.
    started: Option<Millis>,
    /// Warnings given: one bit per (scope, measure).
    warned: u32,
    /// The limit that stopped the run, when one did.
    stop: Option<Reading>,
    /// Usage events counted, newest last.
    usage: VecDeque<Counted>,
    /// Digests of the run's newest distinct successful triples, newest last.
    seen: VecDeque<u64>,
}

/// What a ledger that counted nothing reads as.
static NOTHING: Ledger = Ledger {
    spent: Spend::ZERO,
    since_progress: Spend::ZERO,
    started: None,
    warned: 0,
    stop: None,
    usage: VecDeque::new(),
    seen: VecDeque::new(),
};

/// What a usage event counted: the answer to it, and to any retry of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// The event's id hash (0: none).
    id: u64,
    /// A digest of its figures.
    figures: u64,
    /// What the response cost, when known.
    pub cost: Option<Cost>,
    /// A limit this response (or an earlier one) used up: the run stops at its next call.
    pub stop: Option<Reading>,
    /// What the model or the user reads about `stop`.
    pub message: Option<String>,
    /// Shadow mode: `stop` is what would have stopped the run.
    pub shadow: bool,
    /// Whether this answers a retry (the usage was counted before, not now).
    pub repeat: bool,
}

/// The stored form of a [`Counted`] with its id and figures.
#[derive(Serialize, Deserialize)]
struct CountedFields {
    id: u64,
    figures: u64,
    cost: Option<Cost>,
    stop: Option<(Reading, String)>,
    shadow: bool,
}

/// What the budgets say about a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Judgement {
    /// Nothing to say.
    Clear,
    /// A limit reached `warnAt` and the run was not yet told: warn (then [`RunLedger::warned`]).
    Warn(Reading),
    /// A limit is used up: block.
    Block(Reading),
}

fn bit(reading: &Reading) -> u32 {
    let s = BudgetScope::ALL
        .iter()
        .position(|s| *s == reading.scope)
        .unwrap_or(0);
    let m = Measure::ALL
        .iter()
        .position(|m| *m == reading.measure)
        .unwrap_or(0);
    1 << (s * Measure::ALL.len() + m)
}

/// Whether `a` uses a larger share of its limit than `b`.
fn above(a: &Reading, b: &Reading) -> bool {
    u128::from(a.used) * u128::from(b.limit.max(1))
        > u128::from(b.used) * u128::from(a.limit.max(1))
}

impl RunLedger {
    fn get(&self) -> &Ledger {
        self.0.as_deref().unwrap_or(&NOTHING)
    }

    fn get_mut(&mut self) -> &mut Ledger {
        self.0.get_or_insert_with(Box::default)
    }

    /// The run's spend.
    pub(crate) fn spent(&self) -> &Spend {
        &self.get().spent
    }

    /// The run's spend since its last progress.
    pub(crate) fn since_progress(&self) -> &Spend {
        &self.get().since_progress
    }

    /// The limit that stopped the run.
    pub(crate) fn stop(&self) -> Option<&Reading> {
        self.get().stop.as_ref()
    }

    /// Approximate heap bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.as_deref().map_or(0, |l| {
            std::mem::size_of::<Ledger>()
                + l.usage.capacity() * std::mem::size_of::<Counted>()
                + l.seen.capacity() * 8
        })
    }

    /// Every limit of `budgets` with how far it is used at `now`, for a call of `agent`.
    pub(crate) fn readings<'b>(
        &'b self,
        budgets: &'b Budgets,
        session: &'b SessionState,
        agent: &'b str,
        now: Millis,
    ) -> impl Iterator<Item = Reading> + 'b {
        let today = budgets.day_of(now);
        let run = self.get();
        BudgetScope::ALL.into_iter().flat_map(move |scope| {
            let limits = budgets.limits(scope);
            let (spend, started) = match scope {
                BudgetScope::Run => (Some(&run.spent), run.started),
                BudgetScope::WithoutProgress => (Some(&run.since_progress), None),
                BudgetScope::Agent => session
                    .agent(agent)
                    .map_or((None, None), |a| (Some(&a.spend), Some(a.started))),
                BudgetScope::Session => (Some(session.spend()), session.started()),
                BudgetScope::Day => session
                    .day(today)
                    .map_or((None, None), |d| (Some(&d.spend), Some(d.started))),
            };
            Measure::ALL.into_iter().filter_map(move |measure| {
                let limit = limits.get(measure)?;
                let used = match (measure, spend) {
                    (Measure::WallSeconds, _) => {
                        started.map_or(0, |s| now.get().saturating_sub(s.get()))
                    }
                    (_, None) => 0,
                    (Measure::Cost, Some(s)) => s.cost.pico(),
                    (Measure::Tokens, Some(s)) => s.tokens(),
                    (Measure::Calls, Some(s)) => s.calls,
                };
                Some(Reading {
                    scope,
                    measure,
                    used,
                    limit,
                })
            })
        })
    }

    /// The limit that blocks a call of `agent` at `now`, else the one to warn of.
    pub(crate) fn judge(
        &self,
        budgets: &Budgets,
        session: &SessionState,
        agent: &str,
        now: Millis,
    ) -> Judgement {
        let mut block: Option<Reading> = None;
        let mut warn: Option<Reading> = None;
        let warned = self.get().warned;
        for r in self.readings(budgets, session, agent, now) {
            if r.is_spent() {
                if block.as_ref().is_none_or(|b| above(&r, b)) {
                    block = Some(r);
                }
            } else if r.reaches(budgets.warn_at)
                && warned & bit(&r) == 0
                && warn.as_ref().is_none_or(|w| above(&r, w))
            {
                warn = Some(r);
            }
        }
        match (block, warn) {
            (Some(b), _) => Judgement::Block(b),
            (None, Some(w)) => Judgement::Warn(w),
            (None, None) => Judgement::Clear,
        }
    }

    /// Remembers that the run was warned of `reading`'s limit.
    pub(crate) fn warned(&mut self, reading: &Reading) {
        self.get_mut().warned |= bit(reading);
    }

    /// Keeps the limit that stopped the run.
    pub(crate) fn stopped(&mut self, reading: Reading) {
        self.get_mut().stop.get_or_insert(reading);
    }

    /// Starts the run's clock (its first counted event).
    pub(crate) fn start(&mut self, now: Millis) {
        self.get_mut().started.get_or_insert(now);
    }

    /// Counts a tool call allowed to run (and in the session, when a limit counts calls
    /// beyond the run).
    pub(crate) fn count_call(
        &mut self,
        budgets: &Budgets,
        session: &mut SessionState,
        agent: &str,
        now: Millis,
    ) {
        let run = self.get_mut();
        run.started.get_or_insert(now);
        run.spent.add_call();
        run.since_progress.add_call();
        if budgets.counts_session_calls() {
            session.add_call(agent, budgets.day_of(now), now);
        }
    }

    /// Counts a model response: in the run, the session, the agent and the day. A usage
    /// with an id already counted with the same figures is answered again and counts
    /// nothing; with other figures it is refused.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn count_usage(
        &mut self,
        budgets: Option<&Budgets>,
        prices: &[(String, Price)],
        session: &mut SessionState,
        agent: &str,
        usage: &Usage<'_>,
        now: Millis,
        shadow: bool,
    ) -> Result<Counted, UsageError> {
        usage.check()?;
        let id = usage.id.map_or(0, crate::history::call_id_hash);
        let figures = usage.figures();
        if id != 0 {
            if let Some(earlier) = self.get().usage.iter().rev().find(|c| c.id == id) {
                return match earlier.figures == figures {
                    true => Ok(Counted {
                        repeat: true,
                        ..earlier.clone()
                    }),
                    false => Err(UsageError::Conflict),
                };
            }
        }
        let cost = usage.priced(prices);
        let run = self.get_mut();
        run.started.get_or_insert(now);
        run.spent.add_usage(usage, cost);
        run.since_progress.add_usage(usage, cost);
        let today = budgets.map_or_else(|| super::day_of(now, 0), |b| b.day_of(now));
        session.add_usage(agent, usage, cost, today, now);
        let stop = budgets.and_then(|b| match self.judge(b, session, agent, now) {
            Judgement::Block(r) => Some((r, b)),
            _ => None,
        });
        let message = stop.as_ref().map(|(r, b)| {
            let whose = super::whose(
                r.scope,
                Some(agent).filter(|a| !a.is_empty()),
                b.utc_offset_minutes,
            );
            crate::verdict::messages::budget_spent(&whose, r)
        });
        let counted = Counted {
            id,
            figures,
            cost,
            stop: stop.map(|(r, _)| r),
            message,
            shadow,
            repeat: false,
        };
        if id != 0 {
            let kept = &mut self.get_mut().usage;
            if kept.len() >= USAGE_IDS_KEPT {
                kept.pop_front();
            }
            kept.push_back(counted.clone());
        }
        Ok(counted)
    }

    /// A successful outcome of the triple `triple`: progress when the run has not seen it
    /// among its newest [`PROGRESS_KEPT`] or when the tool changes state (`mutate`); progress
    /// sets the spend without progress back to zero. Returns whether it was progress.
    pub(crate) fn succeeded(&mut self, triple: u64, mutate: bool) -> bool {
        let run = self.get_mut();
        let new = !run.seen.contains(&triple);
        if new {
            if run.seen.len() >= PROGRESS_KEPT {
                run.seen.pop_front();
            }
            run.seen.push_back(triple);
        }
        let progress = new || mutate;
        if progress {
            run.since_progress = Spend::ZERO;
        }
        progress
    }
}

impl Serialize for Counted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CountedFields {
            id: self.id,
            figures: self.figures,
            cost: self.cost,
            stop: self
                .stop
                .clone()
                .map(|r| (r, self.message.clone().unwrap_or_default())),
            shadow: self.shadow,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = CountedFields::deserialize(d)?;
        let (stop, message) = f.stop.map_or((None, None), |(r, m)| (Some(r), Some(m)));
        Ok(Self {
            id: f.id,
            figures: f.figures,
            cost: f.cost,
            stop,
            message,
            shadow: f.shadow,
            repeat: false,
        })
    }
}

impl Counted {
    /// An answer built outside the engine (a host relaying a sidecar's answer).
    pub fn new(
        cost: Option<Cost>,
        stop: Option<Reading>,
        message: Option<String>,
        shadow: bool,
    ) -> Self {
        Self {
            id: 0,
            figures: 0,
            cost,
            stop,
            message,
            shadow,
            repeat: false,
        }
    }

    /// The detector of the limit used up, when one was.
    pub fn detector(&self) -> Option<crate::Detector> {
        self.stop.as_ref().map(|r| r.scope.detector())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetLimits;

    fn budgets() -> Budgets {
        Budgets {
            run: BudgetLimits {
                calls: Some(10),
                tokens: Some(1000),
                ..BudgetLimits::default()
            },
            warn_at: 800_000,
            ..Budgets::default()
        }
    }

    #[test]
    fn calls_warn_at_the_share_then_block() {
        let b = budgets();
        let mut ledger = RunLedger::default();
        let mut session = SessionState::default();
        let mut said = Vec::new();
        for _ in 0..11 {
            let j = ledger.judge(&b, &session, "", Millis::ZERO);
            if let Judgement::Warn(r) = &j {
                ledger.warned(r);
            }
            said.push(j.clone());
            if !matches!(j, Judgement::Block(_)) {
                ledger.count_call(&b, &mut session, "", Millis::ZERO);
            }
        }
        assert!(matches!(said[8], Judgement::Warn(ref r) if r.used == 8 && r.percent() == 80));
        assert_eq!(said[9], Judgement::Clear, "warned once");
        assert!(matches!(said[10], Judgement::Block(ref r) if r.used == 10));
        assert!(
            !session.changed(),
            "calls stay in the run without a session limit on calls"
        );
    }

    #[test]
    fn a_retried_usage_counts_once_and_another_with_its_id_is_refused() {
        let b = budgets();
        let mut ledger = RunLedger::default();
        let mut session = SessionState::default();
        let u = Usage::new(600, 100)
            .with_id(Some("r1"))
            .with_model(Some("gpt-4o"));
        let first = ledger
            .count_usage(Some(&b), &[], &mut session, "", &u, Millis::ZERO, false)
            .unwrap();
        assert!(first.cost.is_some() && first.stop.is_none());
        let again = ledger
            .count_usage(Some(&b), &[], &mut session, "", &u, Millis::ZERO, false)
            .unwrap();
        assert!(again.repeat && !first.repeat);
        assert_eq!(
            Counted {
                repeat: false,
                ..again
            },
            first
        );
        assert_eq!(ledger.spent().tokens(), 700);
        assert_eq!(session.spend().tokens(), 700);
        let other = Usage::new(601, 100).with_id(Some("r1"));
        assert_eq!(
            ledger.count_usage(Some(&b), &[], &mut session, "", &other, Millis::ZERO, false),
            Err(UsageError::Conflict)
        );
        let over = Usage::new(300, 0).with_id(Some("r2"));
        let stop = ledger
            .count_usage(Some(&b), &[], &mut session, "", &over, Millis::ZERO, false)
            .unwrap()
            .stop
            .unwrap();
        assert_eq!((stop.measure, stop.used), (Measure::Tokens, 1000));
    }

    #[test]
    fn progress_is_a_new_success_or_a_mutation() {
        let mut ledger = RunLedger::default();
        assert_eq!(std::mem::size_of::<RunLedger>(), 8);
        ledger.get_mut().since_progress.calls = 5;
        assert!(ledger.succeeded(1, false));
        assert_eq!(ledger.since_progress().calls, 0);
        ledger.get_mut().since_progress.calls = 5;
        assert!(!ledger.succeeded(1, false), "seen before");
        assert_eq!(ledger.since_progress().calls, 5);
        assert!(ledger.succeeded(1, true), "a write is progress");
        for t in 2..(PROGRESS_KEPT as u64 + 2) {
            ledger.succeeded(t, false);
        }
        assert!(ledger.succeeded(1, false), "forgotten beyond the bound");
    }
}

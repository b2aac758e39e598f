//! The bounded table of sessions and their runs that every host keeps: the in-memory
//! [`Guard`](crate::Guard) and the stores of `loopguard serve` alike.
//!
//! Its bounds are [`Limits`]: at most `max_sessions` sessions, at most
//! `max_runs_per_session` runs in each. The two bounds have one rule each, written here
//! once:
//!
//! - **A run beyond its session's bound** pushes out the session's least recently active
//!   run (every host agrees: a run is a prompt-to-answer cycle, the oldest is over).
//! - **A session beyond the table's bound** is a policy, [`WhenFull`]: the in-memory guard
//!   forgets the least recently active session (memory is its only bound, and a host that
//!   cannot be answered is worse than a forgotten loop); a store refuses the new session
//!   (its sessions are durable and shared by processes, so dropping one to make room
//!   would silently reset a live client's loop count; the client is told and retries).
//!
//! "Recently active" is a stamp the host gives with each touch: a counter for the guard
//! (exact when the clock stands still, as in replays), clock milliseconds for a store
//! (states loaded from the backend carry theirs). What expires a session or a run after
//! [`Limits::idle_ttl`] stays with the host: the guard forgets idle sessions, a store idle
//! runs ([`SessionTable::retain_runs`]).
//!
//! A sharded store keeps one table per shard, made with [`SessionTable::shard`]: the
//! shards share one session and run count, so the session bound holds across them (a
//! session is reserved atomically before it is opened).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hashbrown::hash_map::EntryRef;
use hashbrown::HashMap;

use crate::clock::Millis;

/// Bounds on the memory a [`Guard`](crate::Guard) holds (and on what the stores of
/// `loopguard serve` keep, with the same meaning except where said).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Sessions kept; beyond it the least recently active session is forgotten (a store
    /// refuses the event that would open one more instead: [`WhenFull`]).
    pub max_sessions: usize,
    /// Runs kept per session; beyond it the least recently active run is forgotten.
    pub max_runs_per_session: usize,
    /// Sessions idle this long are forgotten.
    pub idle_ttl: Duration,
}

impl Default for Limits {
    /// 100,000 sessions, 64 runs per session, 24 hours idle.
    fn default() -> Self {
        Self {
            max_sessions: 100_000,
            max_runs_per_session: 64,
            idle_ttl: Duration::from_secs(24 * 60 * 60),
        }
    }
}

impl Limits {
    /// The idle time-to-live in clock milliseconds.
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.idle_ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// The oldest activity time (clock milliseconds) that is still live at `now`.
    pub fn cutoff(&self, now: Millis) -> Millis {
        now.saturating_sub(self.idle_ttl)
    }
}

/// What a table whose sessions are at their bound does with one more session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenFull {
    /// Forget the least recently active session of the table (the in-memory guard).
    EvictLeastRecent,
    /// Refuse the new session ([`SessionLimit`]); existing ones go on (the stores).
    Refuse,
}

/// A new session refused: the table holds `limit` sessions ([`WhenFull::Refuse`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the guard holds its limit of {limit} sessions")]
pub struct SessionLimit {
    /// The bound in force.
    pub limit: usize,
}

/// What a touch gave back: the run's value, its session's, and, when making room pushed
/// one out, the run it evicted (session id, run id, value), for a store to delete from its
/// backend.
#[derive(Debug)]
pub struct Touched<'t, T, S = ()> {
    /// The run's value (created if the run is new).
    pub value: &'t mut T,
    /// The session's own value (created with the session).
    pub session: &'t mut S,
    /// The run evicted to make room in the session, if any.
    pub evicted: Option<(Box<str>, Box<str>, T)>,
}

/// What a table keeps per session beside its runs (the engine's
/// [`SessionState`](crate::SessionState)): a session whose runs are all gone is kept while
/// this holds something, until it expires.
pub trait SessionValue: Default {
    /// Whether nothing is kept (the session may go with its last run).
    fn is_empty(&self) -> bool;
}

impl SessionValue for () {
    fn is_empty(&self) -> bool {
        true
    }
}

impl SessionValue for crate::budget::SessionState {
    fn is_empty(&self) -> bool {
        crate::budget::SessionState::is_empty(self)
    }
}

/// Maps keyed by client-chosen ids: a fast hash with a per-process random seed.
type IdMap<V> = HashMap<Box<str>, V, foldhash::fast::RandomState>;

/// Bounds and counts, shared by the shards of one table.
#[derive(Debug)]
struct Shared {
    max_sessions: usize,
    max_runs: usize,
    when_full: WhenFull,
    sessions: AtomicUsize,
    runs: AtomicUsize,
}

impl Shared {
    /// Takes a place for one more session in the count, if there is one.
    fn reserve(&self) -> bool {
        self.sessions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_sessions).then_some(n + 1)
            })
            .is_ok()
    }
}

#[derive(Debug)]
struct Session<T, S> {
    /// Most sessions hold one run: a vector, searched by id.
    runs: Vec<Run<T>>,
    /// The session's own value.
    value: S,
    /// The newest stamp of a touch (least-recently-active eviction).
    stamp: u64,
    /// Clock time of the last touch (idle expiry).
    last_active: Millis,
}

#[derive(Debug)]
struct Run<T> {
    /// Run id, `""` for "no run".
    id: Box<str>,
    value: T,
    stamp: u64,
}

/// Sessions, each with its runs and a value of its own, bounded by [`Limits`] (see the
/// module docs).
#[derive(Debug)]
pub struct SessionTable<T, S = ()> {
    sessions: IdMap<Session<T, S>>,
    shared: Arc<Shared>,
}

impl<T, S: SessionValue> SessionTable<T, S> {
    /// An empty table with the bounds of `limits`.
    pub fn new(limits: &Limits, when_full: WhenFull) -> Self {
        Self {
            sessions: IdMap::default(),
            shared: Arc::new(Shared {
                // A store bounded at 0 refuses every session; a guard keeps at least one.
                max_sessions: match when_full {
                    WhenFull::EvictLeastRecent => limits.max_sessions.max(1),
                    WhenFull::Refuse => limits.max_sessions,
                },
                max_runs: limits.max_runs_per_session.max(1),
                when_full,
                sessions: AtomicUsize::new(0),
                runs: AtomicUsize::new(0),
            }),
        }
    }

    /// Another, empty shard of this table: same bounds, one shared session and run count.
    pub fn shard(&self) -> Self {
        Self {
            sessions: IdMap::default(),
            shared: Arc::clone(&self.shared),
        }
    }

    /// The value of `run` in `session`, created by `new` if the run is new, making room
    /// by the rules of the module docs (only [`WhenFull::Refuse`] fails). `stamp` orders activity (larger is more recent),
    /// `now` is the clock time (the guard expires sessions idle past the TTL by it).
    pub fn touch(
        &mut self,
        session: &str,
        run: &str,
        stamp: u64,
        now: Millis,
        new: impl FnOnce() -> T,
    ) -> Result<Touched<'_, T, S>, SessionLimit> {
        // At the bound a new session needs room first, and making room takes the map;
        // below it a new session only takes a place in the count, so a session the table
        // holds (nearly every touch) is looked up once.
        let admitted = self.is_full_for(session);
        if admitted {
            self.admit()?;
        }
        let shared = &self.shared;
        let entry = match self.sessions.entry_ref(session) {
            EntryRef::Occupied(held) => held.into_mut(),
            EntryRef::Vacant(new_session) => {
                if !admitted && !shared.reserve() {
                    // Another shard took the last place since the count was read.
                    match shared.when_full {
                        WhenFull::Refuse => {
                            return Err(SessionLimit {
                                limit: shared.max_sessions,
                            })
                        }
                        // Evicting never refuses (a guard has one table, so never here).
                        WhenFull::EvictLeastRecent => {
                            shared.sessions.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                }
                new_session.insert(Session {
                    runs: Vec::with_capacity(1),
                    value: S::default(),
                    stamp,
                    last_active: now,
                })
            }
        };
        entry.stamp = stamp;
        entry.last_active = now;
        let mut evicted = None;
        // From the newest: a session's newest run is the one its events name.
        let index = match entry.runs.iter().rposition(|r| &*r.id == run) {
            Some(i) => i,
            None => {
                if entry.runs.len() >= shared.max_runs {
                    if let Some(oldest) = least_recent(entry.runs.iter().map(|r| r.stamp)) {
                        let gone = entry.runs.swap_remove(oldest);
                        shared.runs.fetch_sub(1, Ordering::Relaxed);
                        evicted = Some((Box::from(session), gone.id, gone.value));
                    }
                }
                entry.runs.reserve_exact(1);
                entry.runs.push(Run {
                    id: run.into(),
                    value: new(),
                    stamp,
                });
                shared.runs.fetch_add(1, Ordering::Relaxed);
                entry.runs.len() - 1
            }
        };
        let slot = &mut entry.runs[index];
        slot.stamp = stamp;
        Ok(Touched {
            value: &mut slot.value,
            session: &mut entry.value,
            evicted,
        })
    }

    /// Makes room for a new session: reserves it in the shared count, or evicts one to
    /// make room, or refuses.
    fn admit(&mut self) -> Result<(), SessionLimit> {
        let shared = Arc::clone(&self.shared);
        if shared.reserve() {
            return Ok(());
        }
        match shared.when_full {
            WhenFull::Refuse => Err(SessionLimit {
                limit: shared.max_sessions,
            }),
            WhenFull::EvictLeastRecent => {
                let oldest = self
                    .sessions
                    .iter()
                    .min_by_key(|(_, s)| s.stamp)
                    .map(|(id, _)| id.clone());
                if let Some(id) = oldest {
                    self.remove_session(&id);
                }
                // Counted even if no shard of its own had a session to give (a guard has
                // one table, so it always has): evicting never refuses.
                shared.sessions.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
        }
    }

    /// Whether opening `session` would find the sessions at their bound (the guard sweeps
    /// idle sessions first then).
    #[inline]
    pub(crate) fn is_full_for(&self, session: &str) -> bool {
        // The count first: a table below its bound needs no lookup.
        self.shared.sessions.load(Ordering::Acquire) >= self.shared.max_sessions
            && !self.sessions.contains_key(session)
    }

    /// The value of a run, if the table holds it.
    pub(crate) fn get(&self, session: &str, run: &str) -> Option<&T> {
        let runs = &self.sessions.get(session)?.runs;
        runs.iter().rev().find(|r| &*r.id == run).map(|r| &r.value)
    }

    /// The session's own value, if the table holds the session.
    pub fn session_value(&self, session: &str) -> Option<&S> {
        self.sessions.get(session).map(|s| &s.value)
    }

    /// Applies `f` to the session's own value, if the table holds the session.
    pub fn with_session_value(&mut self, session: &str, f: impl FnOnce(&mut S)) {
        if let Some(s) = self.sessions.get_mut(session) {
            f(&mut s.value);
        }
    }

    /// Opens `session` without a run (a store restoring a session's own value), making
    /// room as [`SessionTable::touch`] does, and applies `f` to its value.
    pub fn touch_session(
        &mut self,
        session: &str,
        stamp: u64,
        now: Millis,
        f: impl FnOnce(&mut S),
    ) -> Result<(), SessionLimit> {
        if !self.sessions.contains_key(session) {
            self.admit()?;
        }
        let entry = self.sessions.entry_ref(session).or_insert_with(|| Session {
            runs: Vec::new(),
            value: S::default(),
            stamp,
            last_active: now,
        });
        entry.stamp = entry.stamp.max(stamp);
        entry.last_active = entry.last_active.max(now);
        f(&mut entry.value);
        Ok(())
    }

    /// The runs of a session: run id and value.
    pub fn runs_of(&self, session: &str) -> impl Iterator<Item = (&str, &T)> {
        self.sessions
            .get(session)
            .into_iter()
            .flat_map(|s| s.runs.iter().map(|r| (&*r.id, &r.value)))
    }

    /// Every run: session id, run id, value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &str, &T)> {
        self.sessions
            .iter()
            .flat_map(|(id, s)| s.runs.iter().map(move |r| (&**id, &*r.id, &r.value)))
    }

    /// Removes a run (and its session when it was the last and the session's value is
    /// empty); returns its value.
    pub fn remove_run(&mut self, session: &str, run: &str) -> Option<T> {
        self.remove_run_if(session, run, |_| true)
    }

    /// [`SessionTable::remove_run`] when `pred` holds for its value.
    pub fn remove_run_if(
        &mut self,
        session: &str,
        run: &str,
        pred: impl FnOnce(&T) -> bool,
    ) -> Option<T> {
        let entry = self.sessions.get_mut(session)?;
        let runs = &mut entry.runs;
        let i = runs.iter().position(|r| &*r.id == run)?;
        if !pred(&runs[i].value) {
            return None;
        }
        let gone = runs.swap_remove(i);
        self.shared.runs.fetch_sub(1, Ordering::Relaxed);
        if runs.is_empty() && entry.value.is_empty() {
            self.sessions.remove(session);
            self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        }
        Some(gone.value)
    }

    /// Removes a session; returns its runs (run id, value), `None` if it was not held.
    pub fn remove_session(&mut self, session: &str) -> Option<Vec<(Box<str>, T)>> {
        let gone = self.sessions.remove(session)?;
        self.shared.sessions.fetch_sub(1, Ordering::Relaxed);
        self.shared
            .runs
            .fetch_sub(gone.runs.len(), Ordering::Relaxed);
        Some(gone.runs.into_iter().map(|r| (r.id, r.value)).collect())
    }

    /// Keeps the sessions whose last touch (clock time) satisfies `keep`; returns how many
    /// were removed (the guard's idle expiry).
    pub(crate) fn retain_sessions(&mut self, mut keep: impl FnMut(Millis) -> bool) -> usize {
        let (mut sessions, mut runs) = (0, 0);
        self.sessions.retain(|_, s| {
            let kept = keep(s.last_active);
            if !kept {
                sessions += 1;
                runs += s.runs.len();
            }
            kept
        });
        self.forget_counts(sessions, runs);
        sessions
    }

    /// Keeps the runs for which `keep(session, run, value)` holds; a session left without
    /// runs is removed unless its value is kept (not empty, and `keep_session` holds for
    /// it). Returns how many runs were removed.
    pub fn retain_runs(
        &mut self,
        mut keep: impl FnMut(&str, &str, &T) -> bool,
        mut keep_session: impl FnMut(&S) -> bool,
    ) -> usize {
        let (mut sessions, mut runs) = (0, 0);
        self.sessions.retain(|id, s| {
            let before = s.runs.len();
            s.runs.retain(|r| keep(id, &r.id, &r.value));
            runs += before - s.runs.len();
            let emptied = s.runs.is_empty() && (s.value.is_empty() || !keep_session(&s.value));
            sessions += usize::from(emptied);
            !emptied
        });
        self.forget_counts(sessions, runs);
        runs
    }

    fn forget_counts(&self, sessions: usize, runs: usize) {
        self.shared.sessions.fetch_sub(sessions, Ordering::Relaxed);
        self.shared.runs.fetch_sub(runs, Ordering::Relaxed);
    }

    /// Sessions held, by every shard of the table.
    pub fn session_count(&self) -> usize {
        self.shared.sessions.load(Ordering::Relaxed)
    }

    /// Runs held, by every shard of the table.
    pub fn run_count(&self) -> usize {
        self.shared.runs.load(Ordering::Relaxed)
    }
}

/// The position of the smallest stamp (the first of equals).
fn least_recent(stamps: impl Iterator<Item = u64>) -> Option<usize> {
    stamps
        .enumerate()
        .min_by_key(|&(_, stamp)| stamp)
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(sessions: usize, runs: usize) -> Limits {
        Limits {
            max_sessions: sessions,
            max_runs_per_session: runs,
            ..Limits::default()
        }
    }

    fn touch(t: &mut SessionTable<u32>, session: &str, run: &str, stamp: u64) -> Option<Box<str>> {
        let touched = t
            .touch(session, run, stamp, Millis::new(stamp), || 0)
            .unwrap();
        *touched.value += 1;
        touched.evicted.map(|(_, run, _)| run)
    }

    #[test]
    fn a_full_session_pushes_out_its_least_recent_run() {
        let mut t = SessionTable::new(&limits(10, 2), WhenFull::Refuse);
        assert_eq!(touch(&mut t, "s", "r1", 1), None);
        assert_eq!(touch(&mut t, "s", "r2", 2), None);
        assert_eq!(touch(&mut t, "s", "r1", 3), None);
        assert_eq!(touch(&mut t, "s", "r3", 4).as_deref(), Some("r2"));
        assert_eq!(t.get("s", "r1"), Some(&2));
        assert_eq!((t.session_count(), t.run_count()), (1, 2));
    }

    #[test]
    fn when_full_is_the_only_difference_between_evicting_and_refusing() {
        for when_full in [WhenFull::EvictLeastRecent, WhenFull::Refuse] {
            let mut t = SessionTable::new(&limits(2, 4), when_full);
            touch(&mut t, "a", "", 1);
            touch(&mut t, "b", "", 2);
            touch(&mut t, "a", "", 3);
            assert!(t.is_full_for("c") && !t.is_full_for("a"));
            let third = t.touch("c", "", 4, Millis::new(4), || 0).map(|_| ());
            match when_full {
                WhenFull::EvictLeastRecent => {
                    assert_eq!(third, Ok(()));
                    assert!(t.get("b", "").is_none(), "b was the least recently active");
                    assert!(t.get("a", "").is_some());
                }
                WhenFull::Refuse => {
                    assert_eq!(third, Err(SessionLimit { limit: 2 }));
                    assert!(t.get("a", "").is_some() && t.get("b", "").is_some());
                }
            }
            assert_eq!((t.session_count(), t.run_count()), (2, 2));
        }
    }

    #[test]
    fn shards_share_one_bound() {
        let mut a = SessionTable::new(&limits(2, 4), WhenFull::Refuse);
        let mut b = a.shard();
        touch(&mut a, "s1", "", 1);
        touch(&mut b, "s2", "", 2);
        assert!(a.touch("s3", "", 3, Millis::new(3), || 0).is_err());
        assert!(b.touch("s3", "", 3, Millis::new(3), || 0).is_err());
        assert_eq!(b.remove_session("s2").map(|runs| runs.len()), Some(1));
        assert!(
            a.touch("s3", "", 4, Millis::new(4), || 0).is_ok(),
            "room again"
        );
        assert_eq!((a.session_count(), b.run_count()), (2, 2));
    }

    #[test]
    fn removals_and_sweeps_keep_the_counts() {
        let mut t = SessionTable::new(&limits(10, 10), WhenFull::EvictLeastRecent);
        for (i, (s, r)) in [("a", "1"), ("a", "2"), ("b", "1"), ("c", "1")]
            .into_iter()
            .enumerate()
        {
            touch(&mut t, s, r, i as u64 * 10);
        }
        assert_eq!(t.remove_run_if("a", "1", |&v| v == 2), None);
        assert_eq!(t.remove_run("a", "1"), Some(1));
        assert_eq!(
            t.retain_sessions(|last_active| last_active >= Millis::new(20)),
            1
        );
        assert!(t.get("a", "2").is_none());
        assert_eq!(t.retain_runs(|s, _, _| s != "b", |_| true), 1);
        assert_eq!(
            t.iter().map(|(s, r, _)| (s, r)).collect::<Vec<_>>(),
            [("c", "1")]
        );
        assert_eq!((t.session_count(), t.run_count()), (1, 1));
    }
}

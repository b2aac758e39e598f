//! The in-memory map of run states that every store in this crate keeps, each session's
//! [`SessionState`] beside its runs: sharded by session, bounded, expiring, and wired to a
//! [`Sink`] that makes each change durable.
//!
//! The bounds are the engine's [`SessionTable`], one per shard, sharing one count: a run
//! beyond its session's bound pushes out the least recently active (deleted from the
//! backend too), a session beyond the store's bound is refused ([`WhenFull::Refuse`]; the
//! in-memory `Guard` evicts instead, see the table's docs).
//!
//! Each state carries the tag ([`crate::etag`]) of the version the backend holds, so that a
//! write can be a compare-and-swap. The map is then only a *hint* of what the backend
//! holds: when it is wrong (another process wrote, a transaction failed) the backend
//! refuses the write, the caller reloads the rows ([`Reload`]) and applies the event again.
//! An update writes its run, and its session's state when the event changed it, as one
//! write that lands whole or not at all; the session's tag is checked by every write, so
//! that an event is never judged on a session state another writer has moved past.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use loopguard::{Millis, RunState, SessionState, SessionTable, SessionValue, WhenFull};

use crate::{etag, Limits, RunKey, RunSnapshot, SharedClock, StoreError};

/// Number of shards (a power of two); each is locked independently.
const SHARDS: usize = 64;

/// Where a cache sends the changes it makes, in the order it makes them: calls happen
/// under the lock of the session's shard, so changes to one key arrive in order.
pub(crate) trait Sink {
    /// What the caller awaits to know a change is durable.
    type Ticket;
    /// Store `state` for `key` if the backend holds version `expected` (`None`: no row),
    /// and the session's state as `session` says, in the same write.
    fn put(
        &self,
        key: RunKey<'_>,
        state: &RunState,
        expected: Option<u64>,
        etag: u64,
        session: SessionPut<'_>,
    ) -> Self::Ticket;
    /// Delete the run; only if the backend holds version `etag`, when given.
    fn delete_run(&self, key: RunKey<'_>, etag: Option<u64>) -> Self::Ticket;
    /// Delete every run of the session.
    fn delete_session(&self, session: &str) -> Self::Ticket;
}

/// A sink for a store without a backend.
pub(crate) struct NoSink;

impl Sink for NoSink {
    type Ticket = ();
    fn put(&self, _: RunKey<'_>, _: &RunState, _: Option<u64>, _: u64, _: SessionPut<'_>) {}
    fn delete_run(&self, _: RunKey<'_>, _: Option<u64>) {}
    fn delete_session(&self, _: &str) {}
}

/// The session's part of a write: the version of its state the event was judged on, which
/// the backend must still hold, and the new state when the event changed it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionPut<'a> {
    /// The version the backend must hold (`None`: no row).
    pub expected: Option<u64>,
    /// The new state and its tag, when it changed.
    pub write: Option<(&'a SessionState, u64)>,
}

/// What the backend holds for one row, read after a refused write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Row {
    /// No row.
    Absent,
    /// A row: the state's bytes and its tag.
    Stored {
        /// [`RunState::to_bytes`] or [`SessionState::to_bytes`] output.
        bytes: Vec<u8>,
        /// Its tag.
        etag: u64,
    },
}

/// What the backend holds for a run and its session, read after a refused write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reload {
    /// The run's row.
    pub run: Row,
    /// The session's row.
    pub session: Row,
}

/// A run removed by [`Cache::sweep`].
pub(crate) struct Expired {
    /// Its session.
    pub session: Box<str>,
    /// Its run id, `""` for "no run".
    pub run: Box<str>,
    /// The version the backend holds, if any.
    pub etag: Option<u64>,
}

/// What [`Cache::apply`] did.
pub(crate) struct Applied<R, T> {
    /// The closure's value.
    pub result: R,
    /// The tag of the new state.
    pub etag: u64,
    /// The tag of the session's new state, when it changed.
    pub session_etag: Option<u64>,
    /// The sink's ticket for the write.
    pub ticket: T,
}

#[derive(Default)]
struct Slot {
    state: RunState,
    /// Version the backend holds (or will hold once the pending write lands); `None`
    /// when it holds no row.
    etag: Option<u64>,
}

/// A session's state and the version of it the backend holds.
#[derive(Default)]
pub(crate) struct SessionSlot {
    state: SessionState,
    etag: Option<u64>,
}

impl SessionValue for SessionSlot {
    fn is_empty(&self) -> bool {
        self.state.is_empty() && self.etag.is_none()
    }
}

type Shard = SessionTable<Slot, SessionSlot>;

/// Bounded, sharded, expiring map of run states.
pub(crate) struct Cache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    limits: Limits,
    clock: SharedClock,
    expired: AtomicU64,
}

impl Cache {
    pub(crate) fn new(limits: Limits, clock: SharedClock) -> Self {
        let first = Shard::new(&limits, WhenFull::Refuse);
        let others = (1..SHARDS).map(|_| first.shard()).collect::<Vec<_>>();
        Self {
            shards: std::iter::once(first)
                .chain(others)
                .map(Mutex::new)
                .collect(),
            hasher: RandomState::new(),
            limits,
            clock,
            expired: AtomicU64::new(0),
        }
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    fn shard(&self, session: &str) -> MutexGuard<'_, Shard> {
        let index = self.hasher.hash_one(session) as usize & (SHARDS - 1);
        // A panic while holding a shard lock cannot leave a state half-updated in a way
        // that matters more than losing the server: keep going with the data as it is.
        self.shards[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `f` to the state of `key` (created, reloaded or reset as needed) and hands
    /// the new state to `sink`, all under the session's shard lock.
    pub(crate) fn apply<R, S: Sink>(
        &self,
        key: RunKey<'_>,
        reload: Option<Reload>,
        f: &mut impl FnMut(&mut RunState, &mut SessionState, Millis) -> R,
        sink: &S,
    ) -> Result<Applied<R, S::Ticket>, StoreError> {
        let now = self.clock.now_ms();
        let cutoff = self.limits.cutoff(now);
        let mut shard = self.shard(key.session);
        let touched = shard
            .touch(key.session, key.run_column(), now.get(), now, Slot::default)
            .map_err(|e| StoreError::SessionLimit { limit: e.limit })?;
        if let Some((session, run, evicted)) = touched.evicted {
            if let Some(etag) = evicted.etag {
                let key = RunKey::new(&session, (!run.is_empty()).then_some(&*run));
                // Not awaited: no answer depends on it, and a run that comes back after a
                // crash is bounded again when it is loaded.
                drop(sink.delete_run(key, Some(etag)));
            }
        }
        let (slot, session) = (touched.value, touched.session);
        if let Some(reload) = reload {
            match reload.run {
                Row::Absent => {
                    slot.state = RunState::default();
                    slot.etag = None;
                }
                Row::Stored { bytes, etag } => {
                    slot.state = decode(key, &bytes).unwrap_or_default();
                    slot.etag = Some(etag);
                }
            }
            match reload.session {
                Row::Absent => {
                    session.state = SessionState::default();
                    session.etag = None;
                }
                Row::Stored { bytes, etag } => {
                    session.state = decode_session(key.session, &bytes).unwrap_or_default();
                    session.etag = Some(etag);
                }
            }
        }
        if slot.state.last_active() < cutoff {
            // Idle past the TTL: the run starts afresh (the old row is overwritten).
            slot.state = RunState::default();
        }
        if session.state.last_active() < cutoff && !session.state.is_empty() {
            // The same for a session whose state saw no change for the TTL.
            session.state = SessionState::default();
        }
        let result = f(&mut slot.state, &mut session.state, now);
        let expected = slot.etag;
        let etag = etag::next();
        slot.etag = Some(etag);
        let session_expected = session.etag;
        let session_etag = session.state.changed().then(etag::next);
        if let Some(tag) = session_etag {
            session.etag = Some(tag);
            session.state.saved();
        }
        let ticket = sink.put(
            key,
            &slot.state,
            expected,
            etag,
            SessionPut {
                expected: session_expected,
                write: session_etag.map(|tag| (&session.state, tag)),
            },
        );
        Ok(Applied {
            result,
            etag,
            session_etag,
            ticket,
        })
    }

    /// Drops the state of `key` if it is still the one tagged `etag`, and its session's if
    /// it is still the one tagged `session_etag` (their write failed): the next update
    /// starts from what the backend holds.
    pub(crate) fn forget(&self, key: RunKey<'_>, etag: u64, session_etag: Option<u64>) {
        let mut shard = self.shard(key.session);
        if let Some(tag) = session_etag {
            shard.with_session_value(key.session, |s| {
                if s.etag == Some(tag) {
                    // Unknown again: the next write expects no row and is told what is.
                    *s = SessionSlot::default();
                }
            });
        }
        shard.remove_run_if(key.session, key.run_column(), |s| s.etag == Some(etag));
    }

    /// Removes a run; returns whether it was live, and the sink's ticket.
    pub(crate) fn remove_run<S: Sink>(&self, key: RunKey<'_>, sink: &S) -> (bool, S::Ticket) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let live = self
            .shard(key.session)
            .remove_run(key.session, key.run_column())
            .is_some_and(|s| s.state.last_active() >= cutoff);
        (live, sink.delete_run(key, None))
    }

    /// Removes a session; returns how many live runs it had, and the sink's ticket.
    pub(crate) fn remove_session<S: Sink>(&self, session: &str, sink: &S) -> (usize, S::Ticket) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let live = self
            .shard(session)
            .remove_session(session)
            .unwrap_or_default()
            .iter()
            .filter(|(_, s)| s.state.last_active() >= cutoff)
            .count();
        (live, sink.delete_session(session))
    }

    /// The live runs of a session, most recently active first.
    pub(crate) fn snapshot(&self, session: &str) -> Vec<RunSnapshot> {
        let shard = self.shard(session);
        let runs = shard
            .runs_of(session)
            .map(|(run, s)| (run.to_owned(), s.state.clone()));
        self.live_first(runs.collect())
    }

    /// [`Cache::snapshot`] of states read from the backend (run column, state bytes),
    /// without touching the map; unreadable states are skipped.
    pub(crate) fn snapshot_of<'a>(
        &self,
        session: &str,
        rows: impl Iterator<Item = (&'a str, &'a [u8])>,
    ) -> Vec<RunSnapshot> {
        let runs = rows.filter_map(|(run, bytes)| {
            let key = RunKey::new(session, (!run.is_empty()).then_some(run));
            Some((run.to_owned(), decode(key, bytes)?))
        });
        self.live_first(runs.collect())
    }

    /// The runs (run column, state) that are not expired, most recently active first.
    fn live_first(&self, runs: Vec<(String, RunState)>) -> Vec<RunSnapshot> {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let mut out: Vec<RunSnapshot> = runs
            .into_iter()
            .filter(|(_, state)| state.last_active() >= cutoff)
            .map(|(run, state)| RunSnapshot {
                run: (!run.is_empty()).then_some(run),
                state,
            })
            .collect();
        out.sort_by(|a, b| {
            b.state
                .last_active()
                .cmp(&a.state.last_active())
                .then_with(|| a.run.cmp(&b.run))
        });
        out
    }

    /// The state of a session beyond its runs, if the cache holds it and it is live.
    pub(crate) fn session_state(&self, session: &str) -> Option<SessionState> {
        self.shard(session)
            .session_value(session)
            .map(|s| &s.state)
            .filter(|s| self.is_live_session(s))
            .cloned()
    }

    /// [`Cache::session_state`] of a state read from the backend, without touching the
    /// map; an unreadable state is skipped.
    pub(crate) fn session_state_of(
        &self,
        session: &str,
        bytes: Option<&[u8]>,
    ) -> Option<SessionState> {
        decode_session(session, bytes?).filter(|s| self.is_live_session(s))
    }

    /// Whether a session state counts anything and is not expired.
    fn is_live_session(&self, state: &SessionState) -> bool {
        !state.is_empty() && state.last_active() >= self.limits.cutoff(self.clock.now_ms())
    }

    /// Removes runs idle past the TTL (and sessions left without runs, unless their own
    /// state is live); returns the removed runs that the backend holds (key and tag), and
    /// the cutoff used.
    pub(crate) fn sweep(&self) -> (Vec<Expired>, Millis) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let mut expired = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            shard.retain_runs(
                |session, run, s| {
                    let live = s.state.last_active() >= cutoff;
                    if !live {
                        expired.push(Expired {
                            session: session.into(),
                            run: run.into(),
                            etag: s.etag,
                        });
                    }
                    live
                },
                |s| s.state.last_active() >= cutoff,
            );
        }
        self.expired
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        (expired, cutoff)
    }

    /// Puts a state read from the backend in place (when a store opens). Expired and
    /// unreadable states are skipped, and so are sessions beyond the limit; a session's
    /// runs beyond the limit push out its least recent ones. Returns whether it was kept.
    pub(crate) fn load(&self, key: RunKey<'_>, bytes: &[u8], etag: u64) -> bool {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let Some(state) = decode(key, bytes) else {
            return false;
        };
        if state.last_active() < cutoff {
            return false;
        }
        // The state's own activity time orders it among the runs already loaded (an
        // evicted one has no write in flight: nothing to delete).
        let active = state.last_active();
        let mut shard = self.shard(key.session);
        match shard.touch(
            key.session,
            key.run_column(),
            active.get(),
            active,
            Slot::default,
        ) {
            Ok(touched) => {
                *touched.value = Slot {
                    state,
                    etag: Some(etag),
                };
                true
            }
            Err(_) => false,
        }
    }

    /// Puts a session state read from the backend in place (when a store opens); an
    /// expired or unreadable one is skipped, and so is a session beyond the limit. Returns
    /// whether it was kept.
    pub(crate) fn load_session(&self, session: &str, bytes: &[u8], etag: u64) -> bool {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let Some(state) = decode_session(session, bytes) else {
            return false;
        };
        if state.last_active() < cutoff || state.is_empty() {
            return false;
        }
        let active = state.last_active();
        let mut shard = self.shard(session);
        shard
            .touch_session(session, active.get(), active, |slot| {
                *slot = SessionSlot {
                    state,
                    etag: Some(etag),
                }
            })
            .is_ok()
    }

    /// Live sessions and runs held (expired ones count until swept).
    pub(crate) fn counts(&self) -> (u64, u64) {
        // Every shard reads the one count they share.
        let shard = self.shard("");
        (shard.session_count() as u64, shard.run_count() as u64)
    }

    /// Runs removed by sweeps so far.
    pub(crate) fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }
}

/// Reads a stored state; an unreadable one is logged and treated as absent (the next
/// write replaces it).
fn decode(key: RunKey<'_>, bytes: &[u8]) -> Option<RunState> {
    RunState::from_bytes(bytes)
        .map_err(|error| crate::warn_unreadable(key, &error))
        .ok()
}

/// Reads a stored session state, the same way.
pub(crate) fn decode_session(session: &str, bytes: &[u8]) -> Option<SessionState> {
    SessionState::from_bytes(bytes)
        .map_err(|error| crate::warn_unreadable(RunKey::new(session, None), &error))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::{ManualClock, Millis};
    use std::sync::Arc;
    use std::time::Duration;

    fn cache(limits: Limits) -> (Cache, ManualClock) {
        let clock = ManualClock::new(Millis::new(1_000));
        (Cache::new(limits, Arc::new(clock.clone())), clock)
    }

    fn touch(cache: &Cache, session: &str, run: Option<&str>) -> Result<Millis, StoreError> {
        cache
            .apply(
                RunKey::new(session, run),
                None,
                &mut |_state: &mut RunState, _: &mut SessionState, now| now,
                &NoSink,
            )
            .map(|a| a.result)
    }

    /// A sink that remembers what it was told.
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Sink for Log {
        type Ticket = ();
        fn put(
            &self,
            key: RunKey<'_>,
            _: &RunState,
            expected: Option<u64>,
            _: u64,
            _: SessionPut<'_>,
        ) {
            let e = if expected.is_some() { "cas" } else { "new" };
            self.0
                .lock()
                .unwrap()
                .push(format!("put {} {:?} {e}", key.session, key.run));
        }
        fn delete_run(&self, key: RunKey<'_>, etag: Option<u64>) {
            let how = if etag.is_some() {
                "if-unchanged"
            } else {
                "always"
            };
            self.0
                .lock()
                .unwrap()
                .push(format!("delete {} {:?} {how}", key.session, key.run));
        }
        fn delete_session(&self, session: &str) {
            self.0.lock().unwrap().push(format!("delete {session}"));
        }
    }

    #[test]
    fn sessions_are_capped_and_runs_evicted_least_recent_first() {
        let limits = Limits {
            max_sessions: 2,
            max_runs_per_session: 2,
            ..Limits::default()
        };
        let (cache, clock) = cache(limits);
        let log = Log::default();
        let mut f = |_: &mut RunState, _: &mut SessionState, _| ();
        for run in ["r1", "r2", "r3"] {
            clock.advance(Duration::from_millis(1));
            // The engine stamps activity; emulate it with a real event.
            cache
                .apply(
                    RunKey::new("a", Some(run)),
                    None,
                    &mut |s: &mut RunState, _: &mut SessionState, now| {
                        let _ = stamp(s, now);
                    },
                    &log,
                )
                .unwrap();
        }
        assert_eq!(cache.counts(), (1, 2));
        let names: Vec<_> = cache
            .snapshot("a")
            .into_iter()
            .map(|s| s.run.unwrap())
            .collect();
        assert_eq!(names, ["r3", "r2"], "r1 was the least recently active");
        assert!(log
            .0
            .lock()
            .unwrap()
            .contains(&"delete a Some(\"r1\") if-unchanged".to_owned()));
        cache
            .apply(RunKey::new("b", None), None, &mut f, &NoSink)
            .unwrap();
        let refused = cache.apply(RunKey::new("c", None), None, &mut f, &NoSink);
        assert!(
            matches!(refused, Err(StoreError::SessionLimit { limit: 2 })),
            "a third session is refused"
        );
        assert_eq!(cache.counts(), (2, 3));
        let (n, ()) = cache.remove_session("b", &NoSink);
        assert_eq!(n, 1);
        assert!(touch(&cache, "c", None).is_ok(), "room again");
    }

    /// Applies a compaction, which stamps the run's activity time.
    fn stamp(state: &mut RunState, now: Millis) -> u32 {
        let config = loopguard::ConfigSet::default();
        state.compaction(config.global(), &loopguard::Scope::new("s"), now)
    }

    #[test]
    fn idle_runs_start_afresh_and_are_swept() {
        let limits = Limits {
            idle_ttl: Duration::from_secs(60),
            ..Limits::default()
        };
        let (cache, clock) = cache(limits);
        let key = RunKey::new("s", Some("r"));
        let mut arm = |s: &mut RunState, _: &mut SessionState, now| {
            let armed_before = s.compaction_guard().remaining();
            stamp(s, now);
            armed_before
        };
        assert_eq!(cache.apply(key, None, &mut arm, &NoSink).unwrap().result, 0);
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            cache.apply(key, None, &mut arm, &NoSink).unwrap().result,
            3,
            "exactly the TTL: still live"
        );
        clock.advance(Duration::from_secs(61));
        assert_eq!(
            cache.apply(key, None, &mut arm, &NoSink).unwrap().result,
            0,
            "past the TTL: a fresh run"
        );
        cache
            .apply(RunKey::new("t", None), None, &mut arm, &NoSink)
            .unwrap();
        clock.advance(Duration::from_secs(30));
        cache.apply(key, None, &mut arm, &NoSink).unwrap();
        clock.advance(Duration::from_secs(31));
        let (expired, _) = cache.sweep();
        assert_eq!(expired.len(), 1, "t expired, s is 31 s old");
        assert_eq!(&*expired[0].session, "t");
        assert_eq!(cache.counts(), (1, 1));
        assert!(cache.snapshot("t").is_empty());
    }

    #[test]
    fn reloads_replace_the_cached_state_and_forget_only_the_failed_version() {
        let (cache, _) = cache(Limits::default());
        let key = RunKey::new("s", None);
        let first = cache
            .apply(
                key,
                None,
                &mut |s: &mut RunState, _: &mut SessionState, now| stamp(s, now),
                &NoSink,
            )
            .unwrap();
        let second = cache
            .apply(
                key,
                None,
                &mut |s: &mut RunState, _: &mut SessionState, now| stamp(s, now),
                &NoSink,
            )
            .unwrap();
        cache.forget(key, first.etag, None);
        assert_eq!(cache.counts(), (1, 1), "a newer version is kept");
        cache.forget(key, second.etag, None);
        assert_eq!(cache.counts(), (0, 0));

        let mut other = RunState::default();
        stamp(&mut other, Millis::new(5_000));
        let bytes = other.to_bytes();
        let seen = cache
            .apply(
                key,
                Some(Reload {
                    run: Row::Stored { bytes, etag: 7 },
                    session: Row::Absent,
                }),
                &mut |s: &mut RunState, _: &mut SessionState, _| s.compaction_guard().remaining(),
                &NoSink,
            )
            .unwrap();
        assert_eq!(seen.result, 3, "the reloaded state was used");
        let seen = cache
            .apply(
                key,
                Some(Reload {
                    run: Row::Stored {
                        bytes: vec![200, 1, 2],
                        etag: 8,
                    },
                    session: Row::Absent,
                }),
                &mut |s: &mut RunState, _: &mut SessionState, _| s.compaction_guard().remaining(),
                &NoSink,
            )
            .unwrap();
        assert_eq!(seen.result, 0, "an unreadable row counts as a fresh run");
    }

    #[test]
    fn loading_skips_expired_and_unreadable_states() {
        let limits = Limits {
            idle_ttl: Duration::from_secs(1),
            ..Limits::default()
        };
        let (cache, clock) = cache(limits);
        clock.set(Millis::new(10_000));
        let mut live = RunState::default();
        stamp(&mut live, Millis::new(9_500));
        let mut old = RunState::default();
        stamp(&mut old, Millis::new(1));
        assert!(cache.load(RunKey::new("s", Some("a")), &live.to_bytes(), 1));
        assert!(!cache.load(RunKey::new("s", Some("b")), &old.to_bytes(), 2));
        assert!(!cache.load(RunKey::new("s", Some("c")), b"\x01garbage", 3));
        assert_eq!(cache.counts(), (1, 1));
    }
}

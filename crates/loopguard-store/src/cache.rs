//! The in-memory map of run states that every store in this crate keeps: sharded by
//! session, bounded, expiring, and wired to a [`Sink`] that makes each change durable.
//!
//! Each state carries the tag ([`crate::etag`]) of the version the backend holds, so that a
//! write can be a compare-and-swap. The map is then only a *hint* of what the backend
//! holds: when it is wrong (another process wrote, a transaction failed) the backend
//! refuses the write, the caller reloads the row ([`Reload`]) and applies the event again.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use loopguard::RunState;

use crate::{etag, Limits, RunKey, RunSnapshot, SharedClock, StoreError};

/// Number of shards (a power of two); each is locked independently.
const SHARDS: usize = 64;

/// Where a cache sends the changes it makes, in the order it makes them: calls happen
/// under the lock of the session's shard, so changes to one key arrive in order.
pub(crate) trait Sink {
    /// What the caller awaits to know a change is durable.
    type Ticket;
    /// Store `state` for `key` if the backend holds version `expected` (`None`: no row).
    fn put(
        &self,
        key: RunKey<'_>,
        state: &RunState,
        expected: Option<u64>,
        etag: u64,
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
    fn put(&self, _: RunKey<'_>, _: &RunState, _: Option<u64>, _: u64) {}
    fn delete_run(&self, _: RunKey<'_>, _: Option<u64>) {}
    fn delete_session(&self, _: &str) {}
}

/// What the backend holds for a key, read after a refused write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reload {
    /// No row.
    Absent,
    /// A row: the state's bytes and its tag.
    Row {
        /// [`RunState::to_bytes`] output.
        bytes: Vec<u8>,
        /// Its tag.
        etag: u64,
    },
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
    /// The sink's ticket for the write.
    pub ticket: T,
}

struct Slot {
    /// Run id, `""` for "no run".
    run: Box<str>,
    state: RunState,
    /// Version the backend holds (or will hold once the pending write lands); `None`
    /// when it holds no row.
    etag: Option<u64>,
}

#[derive(Default)]
struct Shard {
    sessions: HashMap<Box<str>, Vec<Slot>>,
}

/// Bounded, sharded, expiring map of run states.
pub(crate) struct Cache {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    limits: Limits,
    clock: SharedClock,
    sessions: AtomicUsize,
    runs: AtomicUsize,
    expired: AtomicU64,
}

impl Cache {
    pub(crate) fn new(limits: Limits, clock: SharedClock) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            limits,
            clock,
            sessions: AtomicUsize::new(0),
            runs: AtomicUsize::new(0),
            expired: AtomicU64::new(0),
        }
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn now(&self) -> u64 {
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

    /// The runs of `session` in its shard, the session opened if it is new and the session
    /// limit leaves room (the count is reserved atomically, so concurrent shards cannot
    /// overshoot it).
    fn session_runs<'s>(
        &self,
        shard: &'s mut Shard,
        session: &str,
    ) -> Result<&'s mut Vec<Slot>, StoreError> {
        if !shard.sessions.contains_key(session) {
            let limit = self.limits.max_sessions;
            self.sessions
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                })
                .map_err(|_| StoreError::SessionLimit { limit })?;
            shard.sessions.insert(session.into(), Vec::with_capacity(1));
        }
        Ok(shard
            .sessions
            .get_mut(session)
            .expect("session inserted above"))
    }

    /// Applies `f` to the state of `key` (created, reloaded or reset as needed) and hands
    /// the new state to `sink`, all under the session's shard lock.
    pub(crate) fn apply<R, S: Sink>(
        &self,
        key: RunKey<'_>,
        reload: Option<Reload>,
        f: &mut impl FnMut(&mut RunState, u64) -> R,
        sink: &S,
    ) -> Result<Applied<R, S::Ticket>, StoreError> {
        let now = self.clock.now_ms();
        let cutoff = self.limits.cutoff(now);
        let mut shard = self.shard(key.session);
        let runs = self.session_runs(&mut shard, key.session)?;
        let run = key.run_column();
        let index = match runs.iter().position(|s| &*s.run == run) {
            Some(i) => i,
            None => {
                if runs.len() >= self.limits.max_runs_per_session.max(1) {
                    self.evict_least_recent(key.session, runs, sink);
                }
                runs.reserve_exact(1);
                runs.push(Slot {
                    run: run.into(),
                    state: RunState::default(),
                    etag: None,
                });
                self.runs.fetch_add(1, Ordering::Relaxed);
                runs.len() - 1
            }
        };
        let slot = &mut runs[index];
        match reload {
            None => {}
            Some(Reload::Absent) => {
                slot.state = RunState::default();
                slot.etag = None;
            }
            Some(Reload::Row { bytes, etag }) => {
                slot.state = decode(key, &bytes).unwrap_or_default();
                slot.etag = Some(etag);
            }
        }
        if slot.state.last_active() < cutoff {
            // Idle past the TTL: the run starts afresh (the old row is overwritten).
            slot.state = RunState::default();
        }
        let result = f(&mut slot.state, now);
        let expected = slot.etag;
        let etag = etag::next();
        slot.etag = Some(etag);
        let ticket = sink.put(key, &slot.state, expected, etag);
        Ok(Applied {
            result,
            etag,
            ticket,
        })
    }

    fn evict_least_recent<S: Sink>(&self, session: &str, runs: &mut Vec<Slot>, sink: &S) {
        let Some(oldest) = runs
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.state.last_active())
            .map(|(i, _)| i)
        else {
            return;
        };
        let slot = runs.swap_remove(oldest);
        self.runs.fetch_sub(1, Ordering::Relaxed);
        if let Some(etag) = slot.etag {
            let key = RunKey::new(session, (!slot.run.is_empty()).then_some(&*slot.run));
            // Not awaited: no answer depends on it, and a run that comes back after a
            // crash is bounded again when it is loaded.
            drop(sink.delete_run(key, Some(etag)));
        }
    }

    /// Drops the state of `key` if it is still the one tagged `etag` (its write failed):
    /// the next update starts from what the backend holds.
    pub(crate) fn forget(&self, key: RunKey<'_>, etag: u64) {
        let mut shard = self.shard(key.session);
        let Some(runs) = shard.sessions.get_mut(key.session) else {
            return;
        };
        let run = key.run_column();
        if let Some(i) = runs
            .iter()
            .position(|s| &*s.run == run && s.etag == Some(etag))
        {
            runs.swap_remove(i);
            self.runs.fetch_sub(1, Ordering::Relaxed);
            if runs.is_empty() {
                shard.sessions.remove(key.session);
                self.sessions.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Removes a run; returns whether it was live, and the sink's ticket.
    pub(crate) fn remove_run<S: Sink>(&self, key: RunKey<'_>, sink: &S) -> (bool, S::Ticket) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let mut shard = self.shard(key.session);
        let mut live = false;
        if let Some(runs) = shard.sessions.get_mut(key.session) {
            let run = key.run_column();
            if let Some(i) = runs.iter().position(|s| &*s.run == run) {
                live = runs.swap_remove(i).state.last_active() >= cutoff;
                self.runs.fetch_sub(1, Ordering::Relaxed);
                if runs.is_empty() {
                    shard.sessions.remove(key.session);
                    self.sessions.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        (live, sink.delete_run(key, None))
    }

    /// Removes a session; returns how many live runs it had, and the sink's ticket.
    pub(crate) fn remove_session<S: Sink>(&self, session: &str, sink: &S) -> (usize, S::Ticket) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let mut shard = self.shard(session);
        let mut live = 0;
        if let Some(runs) = shard.sessions.remove(session) {
            self.sessions.fetch_sub(1, Ordering::Relaxed);
            self.runs.fetch_sub(runs.len(), Ordering::Relaxed);
            live = runs
                .iter()
                .filter(|s| s.state.last_active() >= cutoff)
                .count();
        }
        (live, sink.delete_session(session))
    }

    /// The live runs of a session, most recently active first.
    pub(crate) fn snapshot(&self, session: &str) -> Vec<RunSnapshot> {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let shard = self.shard(session);
        let mut out: Vec<RunSnapshot> = shard
            .sessions
            .get(session)
            .into_iter()
            .flatten()
            .filter(|s| s.state.last_active() >= cutoff)
            .map(|s| RunSnapshot {
                run: (!s.run.is_empty()).then(|| s.run.to_string()),
                state: s.state.clone(),
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

    /// Removes runs idle past the TTL (and sessions left without runs); returns the
    /// removed runs that the backend holds (key and tag), and the cutoff used.
    pub(crate) fn sweep(&self) -> (Vec<Expired>, u64) {
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let mut expired = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let mut emptied = 0;
            shard.sessions.retain(|session, runs| {
                runs.retain(|s| {
                    let live = s.state.last_active() >= cutoff;
                    if !live {
                        expired.push(Expired {
                            session: session.clone(),
                            run: s.run.clone(),
                            etag: s.etag,
                        });
                    }
                    live
                });
                if runs.is_empty() {
                    emptied += 1;
                    false
                } else {
                    true
                }
            });
            self.sessions.fetch_sub(emptied, Ordering::Relaxed);
        }
        self.runs.fetch_sub(expired.len(), Ordering::Relaxed);
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
        let mut shard = self.shard(key.session);
        let Ok(runs) = self.session_runs(&mut shard, key.session) else {
            return false;
        };
        let run = key.run_column();
        if let Some(slot) = runs.iter_mut().find(|s| &*s.run == run) {
            slot.state = state;
            slot.etag = Some(etag);
            return true;
        }
        if runs.len() >= self.limits.max_runs_per_session.max(1) {
            self.evict_least_recent(key.session, runs, &NoSink);
        }
        runs.reserve_exact(1);
        runs.push(Slot {
            run: run.into(),
            state,
            etag: Some(etag),
        });
        self.runs.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Live sessions and runs held (expired ones count until swept).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.sessions.load(Ordering::Relaxed) as u64,
            self.runs.load(Ordering::Relaxed) as u64,
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::ManualClock;
    use std::sync::Arc;
    use std::time::Duration;

    fn cache(limits: Limits) -> (Cache, ManualClock) {
        let clock = ManualClock::new(1_000);
        (Cache::new(limits, Arc::new(clock.clone())), clock)
    }

    fn touch(cache: &Cache, session: &str, run: Option<&str>) -> Result<u64, StoreError> {
        cache
            .apply(
                RunKey::new(session, run),
                None,
                &mut |_state: &mut RunState, now| now,
                &NoSink,
            )
            .map(|a| a.result)
    }

    /// A sink that remembers what it was told.
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Sink for Log {
        type Ticket = ();
        fn put(&self, key: RunKey<'_>, _: &RunState, expected: Option<u64>, _: u64) {
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
        let mut f = |_: &mut RunState, _| ();
        for run in ["r1", "r2", "r3"] {
            clock.advance(Duration::from_millis(1));
            // The engine stamps activity; emulate it with a real event.
            cache
                .apply(
                    RunKey::new("a", Some(run)),
                    None,
                    &mut |s: &mut RunState, now| {
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
    fn stamp(state: &mut RunState, now: u64) -> u32 {
        let config = loopguard::ConfigSet::default();
        state.compaction(config.global(), now)
    }

    #[test]
    fn idle_runs_start_afresh_and_are_swept() {
        let limits = Limits {
            idle_ttl: Duration::from_secs(60),
            ..Limits::default()
        };
        let (cache, clock) = cache(limits);
        let key = RunKey::new("s", Some("r"));
        let mut arm = |s: &mut RunState, now| {
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
                &mut |s: &mut RunState, now| stamp(s, now),
                &NoSink,
            )
            .unwrap();
        let second = cache
            .apply(
                key,
                None,
                &mut |s: &mut RunState, now| stamp(s, now),
                &NoSink,
            )
            .unwrap();
        cache.forget(key, first.etag);
        assert_eq!(cache.counts(), (1, 1), "a newer version is kept");
        cache.forget(key, second.etag);
        assert_eq!(cache.counts(), (0, 0));

        let mut other = RunState::default();
        stamp(&mut other, 5_000);
        let bytes = other.to_bytes();
        let seen = cache
            .apply(
                key,
                Some(Reload::Row { bytes, etag: 7 }),
                &mut |s: &mut RunState, _| s.compaction_guard().remaining(),
                &NoSink,
            )
            .unwrap();
        assert_eq!(seen.result, 3, "the reloaded state was used");
        let seen = cache
            .apply(
                key,
                Some(Reload::Row {
                    bytes: vec![200, 1, 2],
                    etag: 8,
                }),
                &mut |s: &mut RunState, _| s.compaction_guard().remaining(),
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
        clock.set(10_000);
        let mut live = RunState::default();
        stamp(&mut live, 9_500);
        let mut old = RunState::default();
        stamp(&mut old, 1);
        assert!(cache.load(RunKey::new("s", Some("a")), &live.to_bytes(), 1));
        assert!(!cache.load(RunKey::new("s", Some("b")), &old.to_bytes(), 2));
        assert!(!cache.load(RunKey::new("s", Some("c")), b"\x01garbage", 3));
        assert_eq!(cache.counts(), (1, 1));
    }
}

//! [`RedisStore`] and its [`Store`] operations: read, apply, compare-and-swap (see the
//! [module head](super)).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::redis::Value;
use loopguard::{Millis, RunState, SessionState};

use super::connect::{Conn, Shared, TURNS};
use super::keys::{self, Layout, RunKeys};
use super::reply::{array, bytes, int, score_of, unexpected};
use super::scripts::Scripts;
use super::{value, RedisOptions, RedisTarget};
use crate::{etag, Limits, RunKey, RunSnapshot, SharedClock, Store, StoreError, StoreStats};

/// A store whose state lives in Redis, shared by every replica that connects to it. See
/// the module docs for the protocol, the key layout (in `keys`) and the failure modes.
pub struct RedisStore {
    pub(super) conn: Conn,
    pub(super) target: RedisTarget,
    pub(super) layout: Layout,
    pub(super) registry: Vec<u8>,
    pub(super) scripts: Arc<Scripts>,
    pub(super) limits: Limits,
    pub(super) clock: SharedClock,
    pub(super) options: RedisOptions,
    pub(super) shared: Arc<Shared>,
    pub(super) pinger: Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(super) closed: AtomicBool,
    /// Updates of one run from this replica go one at a time (striped by key), so that
    /// races on a run are only between replicas, never between requests of one replica.
    pub(super) turns: Box<[tokio::sync::Mutex<()>]>,
    pub(super) hasher: RandomState,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .field("prefix", &self.options.prefix)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What the compare-and-swap script did.
pub(super) enum Cas {
    /// Stored; the run's activity before this write (0 for a new run of a live session),
    /// `None` for the first run of a new session.
    Stored(Option<u64>),
    /// Another writer got there first: what the run and its session's state hold now.
    Conflict(Option<Vec<u8>>, Option<Vec<u8>>),
    /// The session is new: register it first.
    Register,
}

impl RedisStore {
    /// Runs a script with its keys and arguments on the shared connection; a failure
    /// counts against the link (see [`Shared::fail`]).
    async fn invoke(&self, script: &::redis::ScriptInvocation<'_>) -> Result<Value, StoreError> {
        let mut c = self.conn.clone();
        script
            .invoke_async(&mut c)
            .await
            .map_err(|e| self.shared.fail(&e))
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.conn.clone();
        ::redis::cmd("GET")
            .arg(key)
            .query_async::<Option<Vec<u8>>>(&mut c)
            .await
            .map_err(|e| self.shared.fail(&e))
    }

    /// A run's value and its session's state, in one read (one slot: one shard).
    async fn get_both(
        &self,
        keys: &RunKeys,
    ) -> Result<(Option<Vec<u8>>, Option<Vec<u8>>), StoreError> {
        let mut c = self.conn.clone();
        ::redis::cmd("MGET")
            .arg(&keys.run)
            .arg(&keys.session)
            .query_async::<(Option<Vec<u8>>, Option<Vec<u8>>)>(&mut c)
            .await
            .map_err(|e| self.shared.fail(&e))
    }

    #[allow(clippy::too_many_arguments)]
    async fn cas(
        &self,
        keys: &RunKeys,
        expected: &[u8],
        value: &[u8],
        session: (&[u8], &[u8]),
        score: u64,
        cutoff: u64,
        registered: bool,
    ) -> Result<Cas, StoreError> {
        let reply = self
            .invoke(
                self.scripts
                    .cas
                    .key(&keys.run)
                    .key(&keys.index)
                    .key(&keys.session)
                    .arg(expected)
                    .arg(value)
                    .arg(self.ttl_arg())
                    .arg(score)
                    .arg(cutoff)
                    .arg(self.limits.max_runs_per_session.max(1))
                    .arg(&keys.member)
                    .arg(if registered { "1" } else { "0" })
                    .arg(&keys.run_prefix)
                    .arg(session.0)
                    .arg(session.1),
            )
            .await?;
        let items = array(reply)?;
        match items.first().and_then(int) {
            Some(1) => Ok(Cas::Stored(items.get(1).and_then(score_of))),
            Some(0) => Ok(Cas::Conflict(
                items.get(1).and_then(bytes),
                items.get(2).and_then(bytes),
            )),
            Some(2) => Ok(Cas::Register),
            _ => Err(unexpected("the compare-and-swap script")),
        }
    }

    /// One update, retried on conflicts; not bounded (the caller is).
    async fn apply<R, F>(&self, key: RunKey<'_>, f: &mut F) -> Result<R, StoreError>
    where
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R,
    {
        let keys = self.layout.run(key.session, key.run);
        let turn = self.hasher.hash_one(&keys.run) as usize & (TURNS - 1);
        let _turn = self.turns[turn].lock().await;
        let (mut current, mut current_session) = self.get_both(&keys).await?;
        let mut registered = false;
        for attempt in 0..self.options.max_attempts.max(1) {
            if attempt > 0 {
                self.shared.conflicts.fetch_add(1, Ordering::Relaxed);
            }
            let now = self.clock.now_ms();
            let cutoff = self.limits.cutoff(now);
            let expected = current
                .as_deref()
                .map(value::tag_of)
                .unwrap_or_default()
                .to_vec();
            let mut state = match current.as_deref() {
                None => RunState::default(),
                Some(bytes) => value::decode(bytes).unwrap_or_else(|error| {
                    crate::warn_unreadable(key, &error);
                    RunState::default()
                }),
            };
            if state.last_active() < cutoff {
                state = RunState::default();
            }
            let session_expected = current_session
                .as_deref()
                .map(value::tag_of)
                .unwrap_or_default()
                .to_vec();
            let mut session = match current_session.as_deref() {
                None => SessionState::default(),
                Some(bytes) => value::decode_session(bytes).unwrap_or_else(|error| {
                    crate::warn_unreadable(RunKey::new(key.session, None), &error);
                    SessionState::default()
                }),
            };
            if session.last_active() < cutoff {
                session = SessionState::default();
            }
            let result = f(&mut state, &mut session, now);
            let stored = value::encode(etag::next(), &state);
            let session_stored = match session.changed() {
                true => value::encode_session(etag::next(), &session),
                false => Vec::new(),
            };
            let started = Instant::now();
            loop {
                match self
                    .cas(
                        &keys,
                        &expected,
                        &stored,
                        (&session_expected, &session_stored),
                        state.last_active().get(),
                        cutoff.get(),
                        registered,
                    )
                    .await?
                {
                    Cas::Stored(previous) => {
                        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(0);
                        self.shared.writes.fetch_add(1, Ordering::Relaxed);
                        self.shared
                            .write_micros
                            .fetch_add(micros, Ordering::Relaxed);
                        // The first event of a run in each quarter of the TTL refreshes
                        // the session's registry entry (so an entry is never older than
                        // the session's last activity minus a quarter of the TTL).
                        let epoch = self.epoch_ms();
                        if previous.is_some_and(|p| p / epoch != now.get() / epoch) {
                            self.refresh(key.session, now.get());
                        }
                        return Ok(result);
                    }
                    Cas::Register if !registered => {
                        let member = keys::escape(key.session);
                        if !self.register(&member, now.get(), false).await? {
                            return Err(StoreError::SessionLimit {
                                limit: self.limits.max_sessions,
                            });
                        }
                        registered = true;
                    }
                    Cas::Register => return Err(unexpected("the compare-and-swap script")),
                    Cas::Conflict(now_held, session_now) => {
                        current = now_held;
                        current_session = session_now;
                        break;
                    }
                }
            }
        }
        Err(StoreError::Contention {
            attempts: self.options.max_attempts.max(1),
        })
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        if let Some(task) = self.pinger.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl Store for RedisStore {
    async fn update<R, F>(&self, key: RunKey<'_>, mut f: F) -> Result<R, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        self.bounded(self.apply(key, &mut f)).await
    }

    async fn remove_run(&self, key: RunKey<'_>) -> Result<bool, StoreError> {
        let keys = self.layout.run(key.session, key.run);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        self.bounded(async {
            let reply = self
                .invoke(
                    self.scripts
                        .remove_run
                        .key(&keys.run)
                        .key(&keys.index)
                        .arg(&keys.member)
                        .arg(cutoff.get()),
                )
                .await?;
            let items = array(reply)?;
            let (Some(live), Some(left)) =
                (items.first().and_then(int), items.get(1).and_then(int))
            else {
                return Err(unexpected("the remove-run script"));
            };
            if left == 0 {
                self.unregister(&keys::escape(key.session)).await?;
            }
            Ok(live == 1)
        })
        .await
    }

    async fn remove_session(&self, session: &str) -> Result<usize, StoreError> {
        let keys = self.layout.session(session);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        self.bounded(async {
            let reply = self
                .invoke(
                    self.scripts
                        .remove_session
                        .key(&keys.index)
                        .key(&keys.state)
                        .arg(&keys.run_prefix)
                        .arg(cutoff.get()),
                )
                .await?;
            let live = int(&reply).ok_or_else(|| unexpected("the remove-session script"))?;
            self.unregister(&keys.member).await?;
            Ok(usize::try_from(live).unwrap_or(0))
        })
        .await
    }

    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        let keys = self.layout.session(session);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let items = self
            .bounded(async {
                let reply = self
                    .invoke(
                        self.scripts
                            .session
                            .key(&keys.index)
                            .arg(&keys.run_prefix)
                            .arg(cutoff.get()),
                    )
                    .await?;
                array(reply)
            })
            .await?;
        let mut out = Vec::with_capacity(items.len() / 2);
        for pair in items.chunks(2) {
            let [member, stored] = pair else { continue };
            let (Some(member), Some(stored)) = (bytes(member), bytes(stored)) else {
                continue;
            };
            let Ok(state) = value::decode(&stored) else {
                continue;
            };
            if state.last_active() < cutoff {
                continue;
            }
            let run = String::from_utf8_lossy(&member).into_owned();
            out.push(RunSnapshot {
                run: (!run.is_empty()).then_some(run),
                state,
            });
        }
        out.sort_by(|a, b| {
            b.state
                .last_active()
                .cmp(&a.state.last_active())
                .then_with(|| a.run.cmp(&b.run))
        });
        Ok(out)
    }

    async fn session_state(&self, session: &str) -> Result<Option<SessionState>, StoreError> {
        let keys = self.layout.session(session);
        let cutoff = self.limits.cutoff(self.clock.now_ms());
        let stored = self.bounded(self.get(&keys.state)).await?;
        Ok(stored
            .and_then(|bytes| value::decode_session(&bytes).ok())
            .filter(|s| !s.is_empty() && s.last_active() >= cutoff))
    }

    /// Redis expires idle runs and sessions by itself (TTLs); this drops stale entries of
    /// the session registry and refreshes the live-session count. Resolves with 0: no run
    /// is held in memory.
    async fn expire_idle(&self) -> Result<usize, StoreError> {
        let now = self.clock.now_ms();
        let stale_before = self.stale_before(now.get());
        self.bounded(async {
            let mut c = self.conn.clone();
            let (_, live): (Value, u64) = ::redis::pipe()
                .cmd("ZREMRANGEBYSCORE")
                .arg(&self.registry)
                .arg("-inf")
                .arg(format!("({stale_before}"))
                .cmd("ZCARD")
                .arg(&self.registry)
                .query_async(&mut c)
                .await
                .map_err(|e| self.shared.fail(&e))?;
            self.shared.sessions.store(live, Ordering::Relaxed);
            Ok(0)
        })
        .await
    }

    fn stats(&self) -> StoreStats {
        let s = &self.shared;
        let writes = s.writes.load(Ordering::Relaxed);
        StoreStats {
            sessions: s.sessions.load(Ordering::Relaxed),
            runs: None,
            commits: writes,
            writes,
            deltas: 0,
            conflicts: s.conflicts.load(Ordering::Relaxed),
            failures: s.failures.load(Ordering::Relaxed),
            commit_micros: s.write_micros.load(Ordering::Relaxed),
            expired_runs: 0,
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        self.open()?;
        if self.shared.healthy.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(StoreError::Unavailable {
            source: self.shared.last_error(),
        })
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        if let Some(task) = self.pinger.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
        Ok(())
    }
}

//! # loopguard-store
//!
//! Where the loopguard sidecar keeps the state of every (session, run): the [`Store`] trait,
//! an in-memory [`MemoryStore`], the durable [`SqliteStore`], and (feature `redis`, on by
//! default) the [`RedisStore`] that several server replicas share.
//!
//! The engine works on one [`RunState`] per (session, run) and one [`SessionState`] per
//! session. A store has one job, in the manner of governor's keyed state stores: *give me
//! the state for this key (the run's, and its session's), let me compute an answer and new
//! states, store them atomically*. The caller never knows where the state lives:
//!
//! ```
//! use loopguard::{ConfigSet, ManualClock, Millis};
//! use loopguard_events::{apply_event, parse_line, Reply};
//! use loopguard_store::{Limits, MemoryStore, RunKey, Store};
//! use std::sync::Arc;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let store = MemoryStore::new(Limits::default(), Arc::new(ManualClock::new(Millis::ZERO)));
//! let config = ConfigSet::default();
//! let event = parse_line(br#"{"type":"compaction","session":"s","run":"r"}"#).unwrap();
//! let scope = event.as_ref().scope(None);
//! let reply = store
//!     .update(RunKey::of(&scope), |run, session, now| {
//!         apply_event(run, session, config.for_agent(scope.agent()), &scope, &event.as_ref(), now)
//!     })
//!     .await?;
//! assert_eq!(reply, Reply::Compaction(3));
//! # Ok::<(), loopguard_store::StoreError>(())
//! # }).unwrap();
//! ```
//!
//! ## The promises every store keeps
//!
//! - **Atomic per key.** The closure given to [`Store::update`] sees the state every earlier
//!   update of the same (session, run) left, and its new state replaces exactly that one. A
//!   store that can lose a race (several processes or replicas on one database) detects it
//!   and calls the closure again on the newer state, so the closure may run more than once
//!   and must have no effect outside the state and its return value.
//! - **The session's state goes with the run's.** The closure also sees the session's
//!   [`SessionState`] as every earlier update of any run of the session left it; when it
//!   changes it, both are stored in one write that lands whole or not at all, and a write
//!   judged on a session state another writer has since changed is refused and applied
//!   again (no double counting, no lost update, across processes and replicas). A
//!   session's state lives while it changes: it expires after [`Limits::idle_ttl`] without
//!   a change, and goes with [`Store::remove_session`].
//! - **Durable before the answer.** When the future of an update resolves with `Ok`, the new
//!   state (and every state it was computed from) survives a crash of the process.
//! - **Bounded.** At most [`Limits::max_sessions`] live sessions (a new session beyond it is
//!   refused with [`StoreError::SessionLimit`]) and [`Limits::max_runs_per_session`] runs per
//!   session (beyond it the least recently active run is forgotten, as the engine's `Guard`
//!   does). A run that saw no event for [`Limits::idle_ttl`] is expired: updates treat it as
//!   new at once, and [`Store::expire_idle`] removes it from memory and disk. A session goes
//!   with its last run.
//! - **Time is injected** ([`SharedClock`]), so tests move it by hand.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cache;
pub mod delta;
mod error;
mod etag;
mod memory;
mod path;
#[cfg(feature = "redis")]
pub mod redis;
mod sqlite;

use std::future::Future;
use std::sync::Arc;

use loopguard::{Clock, Millis, RunState, Scope, SessionState};

pub use error::{bounded, Cause, Deadline, Failed, StoreError};
pub use memory::MemoryStore;
pub use path::{default_db_path, default_db_path_from};
#[cfg(feature = "redis")]
pub use redis::{ClientCert, RedisOptions, RedisStore, RedisTarget};
pub use sqlite::file as sqlite_file;
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous};
pub use sqlite_file::SCHEMA_VERSION;

/// The clock a store reads: shared, thread-safe, injectable (`loopguard::SystemClock` in
/// production, `loopguard::ManualClock` in tests).
pub type SharedClock = Arc<dyn Clock + Send + Sync>;

/// The key of one run's state: a session id and an optional run id (calls without a run
/// form their own scope in the session). Ids are used as given: normalize them first, as
/// [`RunKey::of`] does with a [`Scope`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RunKey<'a> {
    /// The session id.
    pub session: &'a str,
    /// The run id; `None` for calls outside any run.
    pub run: Option<&'a str>,
}

impl<'a> RunKey<'a> {
    /// The key of `run` in `session`.
    pub fn new(session: &'a str, run: Option<&'a str>) -> Self {
        Self { session, run }
    }

    /// The key of a scope (its agent only selects a config, it is not part of the key).
    pub fn of(scope: &Scope<'a>) -> Self {
        Self::new(scope.session(), scope.run())
    }

    /// The run id as stored: the empty string for "no run" (run ids are never blank).
    pub(crate) fn run_column(&self) -> &'a str {
        self.run.unwrap_or("")
    }
}

/// Bounds on what a store keeps: the engine's own [`loopguard::Limits`], except that an
/// event that would open a session beyond `max_sessions` is refused
/// ([`StoreError::SessionLimit`]) rather than evicting one.
pub use loopguard::Limits;

/// Logs a stored state that cannot be read; the run starts afresh and its next write
/// replaces it.
pub(crate) fn warn_unreadable(key: RunKey<'_>, error: &dyn std::fmt::Display) {
    tracing::warn!(
        target: "loopguard::store",
        session = key.session,
        run = key.run,
        %error,
        "stored run state unreadable; starting the run afresh"
    );
}

/// One live run of a session, as [`Store::session`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSnapshot {
    /// The run id; `None` for calls outside any run.
    pub run: Option<String>,
    /// Its state.
    pub state: RunState,
}

/// Counters a store keeps about itself, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Live sessions held.
    pub sessions: u64,
    /// Live runs held; `None` when the store cannot count them cheaply (Redis, whose runs
    /// live in one set per session).
    pub runs: Option<u64>,
    /// Transactions committed to the backend (0 for a store without one).
    pub commits: u64,
    /// Run states written.
    pub writes: u64,
    /// Of those, the ones written as a delta to a change log rather than whole (the SQLite
    /// store; 0 for the others).
    pub deltas: u64,
    /// Updates that lost a race against another writer and were applied again.
    pub conflicts: u64,
    /// Backend operations that failed.
    pub failures: u64,
    /// Total time spent committing, in microseconds.
    pub commit_micros: u64,
    /// Runs removed because they were idle.
    pub expired_runs: u64,
}

/// Where the state of every (session, run) lives. See the crate docs for the promises an
/// implementation keeps.
///
/// The trait is shaped for backends shared by several processes or server replicas (a
/// Redis store loads the state, calls the closure, and stores the result with a
/// compare-and-swap or a server-side script, retrying on conflict), so every operation is
/// async and fallible.
pub trait Store: Send + Sync + 'static {
    /// Gives `f` the state of `key` (a fresh one when the run is new or expired), the state
    /// of its session and the time in clock milliseconds; stores the states `f` leaves,
    /// atomically; resolves with what `f` returned once the new states are durable. `f` may be called more than once
    /// (see the crate docs); only the value of the call whose state was stored is returned.
    fn update<R, F>(
        &self,
        key: RunKey<'_>,
        f: F,
    ) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send;

    /// Applies several updates in order, as if by [`Store::update`] one after the other,
    /// each by `deadline` when there is one, and resolves once all of them are settled, with
    /// one outcome per update, in order: `Ok` for an update applied and durable, `Err` for
    /// one that was not. Once an update fails, the later ones are not attempted
    /// ([`StoreError::NotAttempted`]), except those a store that batches writes had already
    /// sent, which report what became of them. So a caller knows exactly which events to
    /// send again (the one exception being [`StoreError::Deadline`], after which the
    /// backend may still apply what it was sent: such an update's outcome is unknown).
    /// Stores that batch writes override this to make all of them durable in one go.
    fn update_all<R, F>(
        &self,
        ops: Vec<(RunKey<'_>, F)>,
        deadline: Option<Deadline>,
    ) -> impl Future<Output = Vec<Result<R, StoreError>>> + Send
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        async move {
            let mut out = Vec::with_capacity(ops.len());
            let mut failed = false;
            for (key, f) in ops {
                let result = if failed {
                    Err(StoreError::NotAttempted)
                } else {
                    bounded(deadline, self.update(key, f)).await
                };
                failed |= result.is_err();
                out.push(result);
            }
            out
        }
    }

    /// Applies `f` to the state of `session` beyond its runs, atomically, as
    /// [`Store::update`] does (the agent tree's steps touch the sessions of a tree apart
    /// from the run of the event: [`loopguard::tree`]). It goes through the session's
    /// record without a run (`RunKey::new(session, None)`), the one that holds calls made
    /// outside any run.
    fn update_session<R, F>(
        &self,
        session: &str,
        mut f: F,
    ) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        R: Send,
        F: FnMut(&mut SessionState, Millis) -> R + Send,
    {
        self.update(RunKey::new(session, None), move |_, state, now| {
            f(state, now)
        })
    }

    /// Forgets a run (its prompt-to-answer cycle is over). Resolves with whether it
    /// existed, once the removal is durable.
    fn remove_run(&self, key: RunKey<'_>) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Forgets a session and all its runs. Resolves with the number of runs removed, once
    /// the removal is durable.
    fn remove_session(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// The live runs of a session, most recently active first.
    fn session(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Vec<RunSnapshot>, StoreError>> + Send;

    /// The state of a session beyond its runs (its spend), when it has one that is live.
    fn session_state(
        &self,
        session: &str,
    ) -> impl Future<Output = Result<Option<SessionState>, StoreError>> + Send;

    /// Removes every run idle for longer than [`Limits::idle_ttl`], from memory and from
    /// the backend. Resolves with the number of runs removed from memory.
    fn expire_idle(&self) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Counters for metrics; cheap.
    fn stats(&self) -> StoreStats;

    /// Whether the store can take updates now (for readiness probes).
    fn check(&self) -> Result<(), StoreError>;

    /// Makes everything written so far durable and releases the backend; later
    /// operations fail with [`StoreError::Unavailable`].
    fn close(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_scopes_drop_the_agent() {
        let scope = Scope::new(" s ").with_run(Some("r")).with_agent(Some("a"));
        assert_eq!(RunKey::of(&scope), RunKey::new("s", Some("r")));
        assert_eq!(RunKey::new("s", None).run_column(), "");
    }
}

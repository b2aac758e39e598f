//! [`MemoryStore`]: state in memory only (`loopguard serve --memory`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use loopguard::{Millis, RunState, SessionState};

use crate::cache::{Cache, NoSink};
use crate::{Limits, RunKey, RunSnapshot, SharedClock, Store, StoreError, StoreStats};

/// A store that keeps state in memory only: fast, bounded, and gone when the process
/// ends. Every update is "durable" as soon as it is applied.
pub struct MemoryStore {
    cache: Cache,
    writes: AtomicU64,
    closed: AtomicBool,
}

impl MemoryStore {
    /// An empty store with these limits and clock.
    pub fn new(limits: Limits, clock: SharedClock) -> Self {
        Self {
            cache: Cache::new(limits, clock),
            writes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    fn open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        Ok(())
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sessions, runs) = self.cache.counts();
        f.debug_struct("MemoryStore")
            .field("limits", self.cache.limits())
            .field("sessions", &sessions)
            .field("runs", &runs)
            .finish()
    }
}

impl Store for MemoryStore {
    async fn update<R, F>(&self, key: RunKey<'_>, mut f: F) -> Result<R, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        self.open()?;
        let applied = self.cache.apply(key, None, &mut f, &NoSink)?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(applied.result)
    }

    async fn remove_run(&self, key: RunKey<'_>) -> Result<bool, StoreError> {
        self.open()?;
        Ok(self.cache.remove_run(key, &NoSink).0)
    }

    async fn remove_session(&self, session: &str) -> Result<usize, StoreError> {
        self.open()?;
        Ok(self.cache.remove_session(session, &NoSink).0)
    }

    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        self.open()?;
        Ok(self.cache.snapshot(session))
    }

    async fn session_state(&self, session: &str) -> Result<Option<SessionState>, StoreError> {
        self.open()?;
        Ok(self.cache.session_state(session))
    }

    async fn expire_idle(&self) -> Result<usize, StoreError> {
        self.open()?;
        Ok(self.cache.sweep().0.len())
    }

    fn stats(&self) -> StoreStats {
        let (sessions, runs) = self.cache.counts();
        StoreStats {
            sessions,
            runs: Some(runs),
            writes: self.writes.load(Ordering::Relaxed),
            expired_runs: self.cache.expired(),
            ..StoreStats::default()
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        self.open()
    }

    async fn close(&self) -> Result<(), StoreError> {
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::{ConfigSet, ManualClock, Millis};
    use loopguard_events::{apply_event, parse_line, Answer, Replayer};
    use std::sync::Arc;

    /// Events through the store answer exactly as through the engine's own replayer.
    #[tokio::test]
    async fn answers_like_the_replayer() {
        let config = ConfigSet::enabled_defaults();
        let store = MemoryStore::new(Limits::default(), Arc::new(ManualClock::new(Millis::ZERO)));
        let mut replayer = Replayer::new(config.clone(), None);
        let mut lines = Vec::new();
        for i in 0..40 {
            let session = if i % 2 == 0 { "a" } else { "b" };
            lines.push(format!(
                r#"{{"type":"call","session":"{session}","run":"r","call_id":"c{i}","tool":"read","args":{{"p":1}}}}"#
            ));
            lines.push(format!(
                r#"{{"type":"result","session":"{session}","run":"r","call_id":"c{i}","result":"same"}}"#
            ));
        }
        for (i, line) in lines.iter().enumerate() {
            let seq = i as u64 + 1;
            let event = parse_line(line.as_bytes()).unwrap();
            let scope = event.as_ref().scope(None);
            let got = store
                .update(RunKey::of(&scope), |run, session, now| {
                    apply_event(
                        run,
                        session,
                        config.for_agent(scope.agent()),
                        &scope,
                        &event.as_ref(),
                        now,
                    )
                    .into_answer(seq, &scope)
                })
                .await
                .unwrap();
            let want = replayer.apply(seq, &event.as_ref());
            assert_eq!(got, want, "line {seq}");
        }
        assert!(matches!(
            replayer.apply(0, &parse_line(lines[0].as_bytes()).unwrap().as_ref()),
            Answer::Call { .. }
        ));
        assert_eq!(store.stats().sessions, 2);
        assert_eq!(store.stats().writes, 80);
        assert_eq!(store.remove_session("a").await.unwrap(), 1);
        assert!(store.remove_run(RunKey::new("b", Some("r"))).await.unwrap());
        assert!(!store.remove_run(RunKey::new("b", Some("r"))).await.unwrap());
        store.close().await.unwrap();
        assert!(store.check().is_err());
    }
}

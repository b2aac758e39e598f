//! [`SqliteStore`] itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use loopguard::{Millis, RunState, SessionState};
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::change_log::{Log, SessionRows};
use super::checkpoint::Checkpointer;
use super::file::{
    as_sql, create_private, delete_idle, ensure_schema, fold_deltas, refuse_foreign,
};
use super::writer::{Completion, Completions, Delete, Op, Read, Ticket, WriteError, Writer};
use super::SqliteOptions;
use crate::cache::{Cache, Reload};
use crate::{
    bounded, Deadline, Limits, RunKey, RunSnapshot, SharedClock, Store, StoreError, StoreStats,
};

/// Updates are applied again at most this often when other writers keep winning.
const MAX_ATTEMPTS: u32 = 16;

/// A store whose state survives restarts: in memory for speed, in an SQLite file (WAL) for
/// durability. See the module docs for how writes are committed.
pub struct SqliteStore {
    cache: Cache,
    writer: Writer,
    path: PathBuf,
    /// Clock time of the last scan of the whole table for expired rows.
    last_full_sweep: AtomicU64,
    /// The receiving end of [`Completions`], until a dispatcher task takes it.
    dispatch: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Vec<Completion>>>>,
    dispatching: Arc<AtomicBool>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("limits", self.cache.limits())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the database at `path`, and loads
    /// every live run state into memory. Blocks while it reads; call it before serving.
    ///
    /// A file that another application made (tables of its own and none of loopguard's)
    /// is refused with [`StoreError::InvalidSettings`], and left as it was; so is a file
    /// of a newer layout.
    pub fn open(
        path: &Path,
        limits: Limits,
        clock: SharedClock,
        options: SqliteOptions,
    ) -> Result<Self, StoreError> {
        create_private(path).map_err(|(what, e)| StoreError::InvalidSettings {
            message: format!("cannot create {}: {e}", what.display()),
            source: Some(Arc::new(e)),
        })?;
        let what = format!("cannot open {}", path.display());
        let mut conn = Connection::open(path).map_err(|e| StoreError::failed(what.clone(), e))?;
        prepare(&conn, &options, path)?;

        let cache = Cache::new(limits, clock);
        let now = cache.now();
        // The change log is folded back into the rows first, so that every row is the run's
        // state and the writer starts with an empty log.
        let (folded, expired) = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .and_then(|tx| {
                let folded = fold_deltas(&tx)?;
                let expired = delete_idle(&tx, cache.limits().cutoff(now).get(), None)?;
                tx.commit()?;
                Ok((folded, expired))
            })
            .map_err(|e| StoreError::failed(what.clone(), e))?;
        let log = Log::new(&conn, options.log_segment_rows.max(1))
            .map_err(|e| StoreError::failed(what.clone(), e))?;
        let (loaded, skipped) = load(&conn, &cache).map_err(|e| StoreError::failed(what, e))?;
        tracing::info!(
            target: "loopguard::store",
            path = %path.display(),
            runs = loaded,
            skipped,
            expired,
            folded,
            "store opened"
        );

        let checkpointer = Checkpointer::spawn(path, &options)?;
        let (batches, dispatch) = tokio::sync::mpsc::unbounded_channel();
        let dispatching = Arc::new(AtomicBool::new(false));
        let completions = Completions {
            batches,
            dispatching: Arc::clone(&dispatching),
        };
        let writer = Writer::spawn(conn, log, &options, checkpointer, completions)?;
        Ok(Self {
            cache,
            writer,
            path: path.to_owned(),
            last_full_sweep: AtomicU64::new(now.get()),
            dispatch: Mutex::new(Some(dispatch)),
            dispatching,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn ensure_open(&self) -> Result<(), StoreError> {
        if self.writer.closed.load(Ordering::Acquire) {
            return Err(StoreError::Closed);
        }
        if !self.dispatching.load(Ordering::Acquire) {
            self.start_dispatcher();
        }
        Ok(())
    }

    /// Starts the task that hands out commit answers, on the runtime of the caller.
    #[cold]
    /// The session as the file holds it, read after every write queued before; `None`
    /// while no other process has written the file since it was opened (the map is the
    /// truth then).
    async fn read_file_session(&self, session: &str) -> Result<SessionRows, StoreError> {
        self.ensure_open()?;
        let (done, wait) = oneshot::channel();
        self.writer.send(Op::Read(Read {
            session: session.into(),
            done,
        }));
        match wait.await {
            Ok(Ok(file)) => Ok(file),
            Ok(Err(source)) => Err(StoreError::Unavailable { source }),
            Err(_) => Err(StoreError::Closed),
        }
    }

    fn start_dispatcher(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(mut batches) = self
            .dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        runtime.spawn(async move {
            while let Some(batch) = batches.recv().await {
                for (done, result) in batch {
                    let _ = done.send(result);
                }
            }
        });
        self.dispatching.store(true, Ordering::Release);
    }

    /// Waits for a queued write and turns its outcome into what the caller does next.
    async fn settle(
        &self,
        key: RunKey<'_>,
        etag: u64,
        session_etag: Option<u64>,
        ticket: Ticket,
    ) -> Settled {
        match ticket.await {
            Ok(Ok(())) => Settled::Done,
            Ok(Err(WriteError::Conflict(reload))) => Settled::Retry(reload),
            Ok(Err(WriteError::Failed(source))) => {
                self.cache.forget(key, etag, session_etag);
                Settled::Failed(StoreError::Unavailable { source })
            }
            Err(_) => {
                self.cache.forget(key, etag, session_etag);
                Settled::Failed(StoreError::Closed)
            }
        }
    }

    /// Applies `f` again after a conflict, until it lands.
    async fn retry<R, F>(
        &self,
        key: RunKey<'_>,
        f: &mut F,
        mut reload: Reload,
    ) -> Result<R, StoreError>
    where
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R,
    {
        for _ in 1..MAX_ATTEMPTS {
            self.writer
                .counters
                .conflicts
                .fetch_add(1, Ordering::Relaxed);
            let applied = self.cache.apply(key, Some(reload), f, &self.writer)?;
            match self
                .settle(key, applied.etag, applied.session_etag, applied.ticket)
                .await
            {
                Settled::Done => return Ok(applied.result),
                Settled::Retry(next) => reload = next,
                Settled::Failed(e) => return Err(e),
            }
        }
        Err(StoreError::Contention {
            attempts: MAX_ATTEMPTS,
        })
    }
}

enum Settled {
    Done,
    Retry(Reload),
    Failed(StoreError),
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Let the writer finish what is queued, then wait for it: the file is complete
        // when the store is gone.
        self.writer.closed.store(true, Ordering::Release);
        let thread = self.writer.take_thread();
        if let Some(thread) = thread {
            // `fast` still holds the channel open: send a close and wait.
            let (done, _wait) = oneshot::channel();
            let _ = self.writer.fast.send(Op::Close { done });
            let _ = thread.join();
        }
    }
}

impl Store for SqliteStore {
    async fn update<R, F>(&self, key: RunKey<'_>, mut f: F) -> Result<R, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        self.ensure_open()?;
        let applied = self.cache.apply(key, None, &mut f, &self.writer)?;
        match self
            .settle(key, applied.etag, applied.session_etag, applied.ticket)
            .await
        {
            Settled::Done => Ok(applied.result),
            Settled::Retry(reload) => self.retry(key, &mut f, reload).await,
            Settled::Failed(e) => Err(e),
        }
    }

    async fn update_all<R, F>(
        &self,
        ops: Vec<(RunKey<'_>, F)>,
        deadline: Option<Deadline>,
    ) -> Vec<Result<R, StoreError>>
    where
        R: Send,
        F: FnMut(&mut RunState, &mut SessionState, Millis) -> R + Send,
    {
        let n = ops.len();
        let mut out = Vec::with_capacity(n);
        if let Err(e) = self.ensure_open() {
            out.push(Err(e));
            out.resize_with(n, || Err(StoreError::NotAttempted));
            return out;
        }
        // Apply all in order and queue their writes, so that they share a commit; then
        // wait for each in turn. A conflict is retried in order too, and every later write
        // to the same key conflicts with it and is retried after it.
        let mut pending = Vec::with_capacity(n);
        let mut refused = None;
        for (key, mut f) in ops {
            match self.cache.apply(key, None, &mut f, &self.writer) {
                Ok(applied) => pending.push((key, f, applied)),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let mut failed = false;
        for (key, mut f, applied) in pending {
            let settled = bounded(deadline, async {
                Ok(self
                    .settle(key, applied.etag, applied.session_etag, applied.ticket)
                    .await)
            })
            .await;
            out.push(match settled {
                Ok(Settled::Done) => Ok(applied.result),
                // After a failure nothing is applied again: its order would change. What
                // was already sent and landed is reported as applied.
                Ok(Settled::Retry(_)) if failed => Err(StoreError::NotAttempted),
                Ok(Settled::Retry(reload)) => {
                    bounded(deadline, self.retry(key, &mut f, reload)).await
                }
                Ok(Settled::Failed(e)) | Err(e) => Err(e),
            });
            failed |= out.last().is_some_and(Result::is_err);
        }
        if let Some(e) = refused {
            out.push(Err(e));
        }
        out.resize_with(n, || Err(StoreError::NotAttempted));
        out
    }

    async fn remove_run(&self, key: RunKey<'_>) -> Result<bool, StoreError> {
        self.ensure_open()?;
        let (live, ticket) = self.cache.remove_run(key, &self.writer);
        wait(ticket).await?;
        Ok(live)
    }

    async fn remove_session(&self, session: &str) -> Result<usize, StoreError> {
        self.ensure_open()?;
        let (live, ticket) = self.cache.remove_session(session, &self.writer);
        wait(ticket).await?;
        Ok(live)
    }

    /// The session as the map holds it, unless another process has written the file since
    /// it was opened (a hook, `loopguard sessions reset`): then as the file holds it, read
    /// after every write queued before, so a reset elsewhere shows at once.
    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        match self.read_file_session(session).await? {
            None => Ok(self.cache.snapshot(session)),
            Some(file) => Ok(self.cache.snapshot_of(
                session,
                file.runs
                    .iter()
                    .map(|(run, stored)| (run.as_str(), stored.state.as_slice())),
            )),
        }
    }

    /// As `session`: from the map, unless another process has written the file.
    async fn session_state(&self, session: &str) -> Result<Option<SessionState>, StoreError> {
        match self.read_file_session(session).await? {
            None => Ok(self.cache.session_state(session)),
            Some(file) => Ok(self
                .cache
                .session_state_of(session, file.state.as_ref().map(|s| s.state.as_slice()))),
        }
    }

    async fn expire_idle(&self) -> Result<usize, StoreError> {
        self.ensure_open()?;
        let (expired, cutoff) = self.cache.sweep();
        let removed = expired.len();
        // Rows this store never held (written by another process) are found by a scan
        // of the whole table, once per TTL.
        let now = self.cache.now();
        let last = self.last_full_sweep.load(Ordering::Relaxed);
        let full = (now.get().saturating_sub(last) >= self.cache.limits().ttl_ms()).then(|| {
            self.last_full_sweep.store(now.get(), Ordering::Relaxed);
            cutoff.get()
        });
        let (done, wait) = oneshot::channel();
        self.writer.send(Op::Delete(Delete::Sweep {
            expired,
            full,
            sessions_before: Some(cutoff.get()),
            done,
        }));
        match wait.await {
            Ok(Ok(_rows)) => Ok(removed),
            Ok(Err(source)) => Err(StoreError::Unavailable { source }),
            Err(_) => Err(StoreError::Closed),
        }
    }

    fn stats(&self) -> StoreStats {
        let (sessions, runs) = self.cache.counts();
        let c = &self.writer.counters;
        StoreStats {
            sessions,
            runs: Some(runs),
            commits: c.commits.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            deltas: c.deltas.load(Ordering::Relaxed),
            conflicts: c.conflicts.load(Ordering::Relaxed),
            failures: c.failures.load(Ordering::Relaxed),
            commit_micros: c.commit_micros.load(Ordering::Relaxed),
            expired_runs: self.cache.expired(),
        }
    }

    fn check(&self) -> Result<(), StoreError> {
        self.ensure_open()?;
        let alive = self.writer.is_alive();
        if !alive {
            return Err(StoreError::unavailable("the store writer stopped"));
        }
        if !self.writer.counters.healthy.load(Ordering::Acquire) {
            return Err(StoreError::unavailable(
                "the last transaction failed (see the logs)",
            ));
        }
        Ok(())
    }

    async fn close(&self) -> Result<(), StoreError> {
        if self.writer.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let (done, wait) = oneshot::channel();
        let _ = self.writer.fast.send(Op::Close { done });
        let result = wait.await;
        let thread = self.writer.take_thread();
        if let Some(thread) = thread {
            // The writer answered and is returning; joining takes no time.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(source)) => Err(StoreError::Unavailable { source }),
            Err(_) => Err(StoreError::Closed),
        }
    }
}

async fn wait(ticket: Ticket) -> Result<(), StoreError> {
    match ticket.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(WriteError::Failed(source))) => Err(StoreError::Unavailable { source }),
        // Deletes are unconditional here and cannot conflict.
        Ok(Err(WriteError::Conflict(_))) => Ok(()),
        Err(_) => Err(StoreError::Closed),
    }
}

/// Sets the connection up (WAL, durability, caches) and checks or creates the layout.
fn prepare(conn: &Connection, options: &SqliteOptions, path: &Path) -> Result<(), StoreError> {
    let what = || format!("cannot open {}", path.display());
    let sql = |e: rusqlite::Error| StoreError::failed(what(), e);
    conn.busy_timeout(options.busy_timeout).map_err(sql)?;
    // Before anything changes the file: another application's database stays as it is.
    refuse_foreign(conn).map_err(|e| e.into_store_error(path))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::invalid(format!(
            "{}: the database cannot use WAL mode (journal_mode is {mode})",
            what()
        )));
    }
    let sync = options.synchronous.pragma();
    // Checkpoints run in their own thread (see `checkpoint`); the writer checkpoints only
    // if the WAL grows past 64 MiB anyway. A 16 MiB page cache keeps the pages of the
    // most active runs in memory.
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA wal_autocheckpoint=16384; PRAGMA cache_size=-16384;"
    ))
    .map_err(sql)?;
    let tx =
        rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(sql)?;
    ensure_schema(&tx).map_err(|e| e.into_store_error(path))?;
    tx.commit().map_err(sql)
}

/// Loads every live row into the cache; returns (kept, skipped).
fn load(conn: &Connection, cache: &Cache) -> rusqlite::Result<(usize, usize)> {
    let cutoff = cache.limits().cutoff(cache.now());
    let mut stmt = conn.prepare(
        "SELECT session, etag, state FROM sessions WHERE last_active >= ?1
         ORDER BY last_active DESC",
    )?;
    let mut rows = stmt.query([as_sql(cutoff.get())])?;
    while let Some(row) = rows.next()? {
        let session: String = row.get(0)?;
        let etag: i64 = row.get(1)?;
        let state: Vec<u8> = row.get(2)?;
        cache.load_session(&session, &state, etag as u64);
    }
    let mut stmt = conn.prepare(
        "SELECT session, run, etag, state FROM runs WHERE last_active >= ?1
         ORDER BY last_active DESC",
    )?;
    let mut rows = stmt.query([as_sql(cutoff.get())])?;
    let (mut kept, mut skipped) = (0, 0);
    while let Some(row) = rows.next()? {
        let session: String = row.get(0)?;
        let run: String = row.get(1)?;
        let etag: i64 = row.get(2)?;
        let state: Vec<u8> = row.get(3)?;
        let key = RunKey::new(&session, (!run.is_empty()).then_some(run.as_str()));
        if cache.load(key, &state, etag as u64) {
            kept += 1;
        } else {
            skipped += 1;
        }
    }
    Ok((kept, skipped))
}

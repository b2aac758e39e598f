//! [`SqliteStore`]: run states in memory, every change made durable in an SQLite file
//! before it is acknowledged, with concurrent changes committed together (group commit).
//!
//! ## How a write becomes durable
//!
//! An update applies the event to the in-memory state under its shard lock and, still
//! under the lock, queues the new state for the one writer thread, so the writes of one
//! key are queued in the order they were made. The writer takes everything queued (up to
//! [`SqliteOptions::max_batch`] writes), runs it as one `BEGIN IMMEDIATE … COMMIT`
//! transaction with `synchronous=FULL` in WAL mode, then answers each waiting update. While
//! it commits, new writes pile up and go into the next transaction: one fsync serves every
//! request that arrived meanwhile, and nobody waits for a timer. Writes of one key that
//! meet in one batch are merged into one write.
//!
//! A write does not rewrite the run's row when it can help it: it appends a delta of the
//! new state against the last one to a change log (`change_log`; the layout is in
//! [`sqlite_file`](crate::sqlite_file)), a few dozen bytes on a page shared by every run,
//! and the log is folded back into the rows as it goes, when the writer is idle, and at
//! close and open. Writing a 4 KiB page per run per commit was what held the server on
//! this store to a third of its ceiling (`docs/serve.md`, "Benchmark").
//!
//! Each row carries a tag (a unique 64-bit number) and every write is a compare-and-swap
//! on it, so two processes can share the file (a hook run from a short-lived process, a
//! second server) without losing an update: the loser reloads the row and applies its
//! event again. If a transaction fails (disk full, I/O error, database locked longer than
//! the busy timeout), its updates fail with [`StoreError::Unavailable`], their states are
//! dropped from memory, and every state computed from them is refused by the tag check and
//! recomputed from the file.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use loopguard::RunState;
use rusqlite::{params, Connection, TransactionBehavior};
use tokio::sync::oneshot;

use crate::cache::{Cache, Expired, Reload, Sink};
use crate::sqlite_file::{
    as_sql, create_private, delete_idle, ensure_schema, fold_deltas, read_run,
};
use crate::{Limits, RunKey, RunSnapshot, SharedClock, Store, StoreError, StoreStats};

mod change_log;

use change_log::Log;

/// Updates are applied again at most this often when other writers keep winning.
const MAX_ATTEMPTS: u32 = 16;

/// SQLite's `synchronous` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// fsync the WAL at every commit: an acknowledged update survives a power loss.
    #[default]
    Full,
    /// fsync only at checkpoints: an acknowledged update survives a crash of the process
    /// but the last commits may be lost with a power loss or an OS crash.
    Normal,
}

impl Synchronous {
    /// The value of SQLite's `PRAGMA synchronous` for it.
    pub fn pragma(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Normal => "NORMAL",
        }
    }
}

/// How an [`SqliteStore`] uses its file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long to wait for another process that holds the write lock (default 5 s).
    pub busy_timeout: Duration,
    /// Durability of each commit (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// Most writes committed in one transaction (default 4096).
    pub max_batch: usize,
    /// Deltas one table of the change log takes before the writer switches to the other
    /// (default 16,384; see [`sqlite_file`](crate::sqlite_file)). A busy run's row is
    /// rewritten about once per this many events of the whole store, and another process
    /// reading a run scans at most about twice this many log rows.
    pub log_segment_rows: u64,
    /// How long the writer waits without a write before it folds the change log back into
    /// the rows (default 1 s), so that other processes reading the file find it empty.
    pub idle_fold: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
            max_batch: 4096,
            log_segment_rows: 16_384,
            idle_fold: Duration::from_secs(1),
        }
    }
}

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

/// Why a queued write did not land.
#[derive(Debug)]
enum WriteError {
    /// The row is not at the version the write expected: here is what it holds.
    Conflict(Reload),
    /// The transaction failed.
    Failed(String),
}

type Done = oneshot::Sender<Result<(), WriteError>>;

/// A row write: a run's new state, compare-and-swapped on its tag. `D` is who waits for
/// it: one update when queued, every update merged into it within a batch.
struct Put<D> {
    session: Box<str>,
    run: Box<str>,
    state: Vec<u8>,
    last_active: u64,
    expected: Option<u64>,
    etag: u64,
    done: D,
}

/// Rows deleted.
enum Delete {
    Run {
        session: Box<str>,
        run: Box<str>,
        etag: Option<u64>,
        done: Done,
    },
    Session {
        session: Box<str>,
        done: Done,
    },
    Sweep {
        expired: Vec<Expired>,
        /// Also delete every row idle since before this time (rows other processes wrote).
        full: Option<u64>,
        done: oneshot::Sender<Result<usize, String>>,
    },
}

/// What the writer thread is sent.
enum Op {
    Put(Put<Done>),
    Delete(Delete),
    Close {
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// Counters shared with the writer thread.
#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    writes: AtomicU64,
    deltas: AtomicU64,
    conflicts: AtomicU64,
    failures: AtomicU64,
    commit_micros: AtomicU64,
    /// False after a failed transaction, true again after a successful one.
    healthy: AtomicBool,
}

/// The handle on the writer thread.
struct Writer {
    thread: Mutex<Option<JoinHandle<()>>>,
    counters: Arc<Counters>,
    /// The sender, cloned once: `Sender` is `Sync`, so the hot path needs no lock.
    fast: mpsc::Sender<Op>,
    closed: AtomicBool,
}

impl Writer {
    /// The writer thread's handle, for the one caller that joins it.
    fn take_thread(&self) -> Option<JoinHandle<()>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn send(&self, op: Op) {
        // A closed writer drops the op; its `done` sender goes with it, and the waiting
        // update sees the store as unavailable.
        if !self.closed.load(Ordering::Acquire) {
            let _ = self.fast.send(op);
        }
    }
}

type Ticket = oneshot::Receiver<Result<(), WriteError>>;

/// The answer to one queued write.
type Completion = (Done, Result<(), WriteError>);

/// How the writer thread hands the answers of a commit to the waiting updates: all of them
/// in one message to a dispatcher task on the server's runtime, which wakes each update
/// from inside the runtime (one cross-thread wake per commit instead of one per update);
/// directly when there is no dispatcher (yet, or any more).
struct Completions {
    batches: tokio::sync::mpsc::UnboundedSender<Vec<Completion>>,
    dispatching: Arc<AtomicBool>,
}

impl Completions {
    fn deliver(&self, batch: Vec<Completion>) {
        if batch.is_empty() {
            return;
        }
        let batch = if self.dispatching.load(Ordering::Acquire) {
            match self.batches.send(batch) {
                Ok(()) => return,
                // The dispatcher's runtime is gone.
                Err(returned) => returned.0,
            }
        } else {
            batch
        };
        for (done, result) in batch {
            let _ = done.send(result);
        }
    }
}

impl Sink for Writer {
    type Ticket = Ticket;

    fn put(&self, key: RunKey<'_>, state: &RunState, expected: Option<u64>, etag: u64) -> Ticket {
        let (done, ticket) = oneshot::channel();
        self.send(Op::Put(Put {
            session: key.session.into(),
            run: key.run_column().into(),
            state: state.to_bytes(),
            last_active: state.last_active(),
            expected,
            etag,
            done,
        }));
        ticket
    }

    fn delete_run(&self, key: RunKey<'_>, etag: Option<u64>) -> Ticket {
        let (done, ticket) = oneshot::channel();
        self.send(Op::Delete(Delete::Run {
            session: key.session.into(),
            run: key.run_column().into(),
            etag,
            done,
        }));
        ticket
    }

    fn delete_session(&self, session: &str) -> Ticket {
        let (done, ticket) = oneshot::channel();
        self.send(Op::Delete(Delete::Session {
            session: session.into(),
            done,
        }));
        ticket
    }
}

fn closed() -> StoreError {
    StoreError::Unavailable("the store is closed".into())
}

fn sql_error(context: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("{context}: {e}"))
}

impl SqliteStore {
    /// Opens (creating it and its directory if needed) the database at `path`, and loads
    /// every live run state into memory. Blocks while it reads; call it before serving.
    pub fn open(
        path: &Path,
        limits: Limits,
        clock: SharedClock,
        options: SqliteOptions,
    ) -> Result<Self, StoreError> {
        create_private(path).map_err(|(what, e)| {
            StoreError::Unavailable(format!("cannot create {}: {e}", what.display()))
        })?;
        let what = format!("cannot open {}", path.display());
        let mut conn = Connection::open(path).map_err(|e| sql_error(&what, e))?;
        prepare(&conn, &options).map_err(|e| StoreError::Unavailable(format!("{what}: {e}")))?;

        let cache = Cache::new(limits, clock);
        let now = cache.now();
        // The change log is folded back into the rows first, so that every row is the run's
        // state and the writer starts with an empty log.
        let (folded, expired) = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .and_then(|tx| {
                let folded = fold_deltas(&tx)?;
                let expired = delete_idle(&tx, cache.limits().cutoff(now), None)?;
                tx.commit()?;
                Ok((folded, expired))
            })
            .map_err(|e| sql_error(&what, e))?;
        let log =
            Log::new(&conn, options.log_segment_rows.max(1)).map_err(|e| sql_error(&what, e))?;
        let (loaded, skipped) = load(&conn, &cache).map_err(|e| sql_error(&what, e))?;
        tracing::info!(
            target: "loopguard::store",
            path = %path.display(),
            runs = loaded,
            skipped,
            expired,
            folded,
            "store opened"
        );

        let checkpointer = spawn_checkpointer(path, &options).map_err(|e| sql_error(&what, e))?;
        let (batches, dispatch) = tokio::sync::mpsc::unbounded_channel();
        let dispatching = Arc::new(AtomicBool::new(false));
        let completions = Completions {
            batches,
            dispatching: Arc::clone(&dispatching),
        };
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters {
            healthy: AtomicBool::new(true),
            ..Counters::default()
        });
        let thread = {
            let counters = Arc::clone(&counters);
            let options = options.clone();
            std::thread::Builder::new()
                .name("lg-store-writer".into())
                .spawn(move || {
                    write_loop(
                        conn,
                        log,
                        rx,
                        &options,
                        &counters,
                        checkpointer,
                        completions,
                    )
                })
                .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?
        };
        Ok(Self {
            cache,
            writer: Writer {
                fast: tx,
                thread: Mutex::new(Some(thread)),
                counters,
                closed: AtomicBool::new(false),
            },
            path: path.to_owned(),
            last_full_sweep: AtomicU64::new(now),
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
            return Err(closed());
        }
        if !self.dispatching.load(Ordering::Acquire) {
            self.start_dispatcher();
        }
        Ok(())
    }

    /// Starts the task that hands out commit answers, on the runtime of the caller.
    #[cold]
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
    async fn settle(&self, key: RunKey<'_>, etag: u64, ticket: Ticket) -> Settled {
        match ticket.await {
            Ok(Ok(())) => Settled::Done,
            Ok(Err(WriteError::Conflict(reload))) => Settled::Retry(reload),
            Ok(Err(WriteError::Failed(message))) => {
                self.cache.forget(key, etag);
                Settled::Failed(StoreError::Unavailable(message))
            }
            Err(_) => {
                self.cache.forget(key, etag);
                Settled::Failed(closed())
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
        F: FnMut(&mut RunState, u64) -> R,
    {
        for _ in 1..MAX_ATTEMPTS {
            self.writer
                .counters
                .conflicts
                .fetch_add(1, Ordering::Relaxed);
            let applied = self.cache.apply(key, Some(reload), f, &self.writer)?;
            match self.settle(key, applied.etag, applied.ticket).await {
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
        F: FnMut(&mut RunState, u64) -> R + Send,
    {
        self.ensure_open()?;
        let applied = self.cache.apply(key, None, &mut f, &self.writer)?;
        match self.settle(key, applied.etag, applied.ticket).await {
            Settled::Done => Ok(applied.result),
            Settled::Retry(reload) => self.retry(key, &mut f, reload).await,
            Settled::Failed(e) => Err(e),
        }
    }

    async fn update_all<R, F>(&self, ops: Vec<(RunKey<'_>, F)>) -> Result<Vec<R>, StoreError>
    where
        R: Send,
        F: FnMut(&mut RunState, u64) -> R + Send,
    {
        self.ensure_open()?;
        // Apply all in order and queue their writes, so that they share a commit; then
        // wait for each in turn. A conflict is retried in order too, and every later write
        // to the same key conflicts with it and is retried after it.
        let mut pending = Vec::with_capacity(ops.len());
        let mut first_error = None;
        for (key, mut f) in ops {
            match self.cache.apply(key, None, &mut f, &self.writer) {
                Ok(applied) => pending.push((key, f, applied)),
                Err(e) => {
                    first_error = Some(e);
                    break;
                }
            }
        }
        let mut out = Vec::with_capacity(pending.len());
        let mut failure = None;
        for (key, mut f, applied) in pending {
            if failure.is_some() {
                // Still wait, so that nothing is left in flight when we answer.
                let _ = self.settle(key, applied.etag, applied.ticket).await;
                continue;
            }
            let result = match self.settle(key, applied.etag, applied.ticket).await {
                Settled::Done => Ok(applied.result),
                Settled::Retry(reload) => self.retry(key, &mut f, reload).await,
                Settled::Failed(e) => Err(e),
            };
            match result {
                Ok(r) => out.push(r),
                Err(e) => failure = Some(e),
            }
        }
        match failure.or(first_error) {
            Some(e) => Err(e),
            None => Ok(out),
        }
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

    async fn session(&self, session: &str) -> Result<Vec<RunSnapshot>, StoreError> {
        self.ensure_open()?;
        Ok(self.cache.snapshot(session))
    }

    async fn expire_idle(&self) -> Result<usize, StoreError> {
        self.ensure_open()?;
        let (expired, cutoff) = self.cache.sweep();
        let removed = expired.len();
        // Rows this store never held (written by another process) are found by a scan
        // of the whole table, once per TTL.
        let now = self.cache.now();
        let last = self.last_full_sweep.load(Ordering::Relaxed);
        let full = (now.saturating_sub(last) >= self.cache.limits().ttl_ms()).then(|| {
            self.last_full_sweep.store(now, Ordering::Relaxed);
            cutoff
        });
        let (done, wait) = oneshot::channel();
        self.writer.send(Op::Delete(Delete::Sweep {
            expired,
            full,
            done,
        }));
        match wait.await {
            Ok(Ok(_rows)) => Ok(removed),
            Ok(Err(message)) => Err(StoreError::Unavailable(message)),
            Err(_) => Err(closed()),
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
        let alive = self
            .writer
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished());
        if !alive {
            return Err(StoreError::Unavailable("the store writer stopped".into()));
        }
        if !self.writer.counters.healthy.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable(
                "the last transaction failed (see the logs)".into(),
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
            Ok(Err(message)) => Err(StoreError::Unavailable(message)),
            Err(_) => Err(closed()),
        }
    }
}

async fn wait(ticket: Ticket) -> Result<(), StoreError> {
    match ticket.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(WriteError::Failed(message))) => Err(StoreError::Unavailable(message)),
        // Deletes are unconditional here and cannot conflict.
        Ok(Err(WriteError::Conflict(_))) => Ok(()),
        Err(_) => Err(closed()),
    }
}

fn prepare(conn: &Connection, options: &SqliteOptions) -> Result<(), String> {
    let sql = |e: rusqlite::Error| e.to_string();
    conn.busy_timeout(options.busy_timeout).map_err(sql)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!(
            "the database cannot use WAL mode (journal_mode is {mode})"
        ));
    }
    let sync = options.synchronous.pragma();
    // Checkpoints run in their own thread (see `checkpoint_loop`); the writer checkpoints
    // only if the WAL grows past 64 MiB anyway. A 16 MiB page cache keeps the pages of
    // the most active runs in memory.
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA wal_autocheckpoint=16384; PRAGMA cache_size=-16384;"
    ))
    .map_err(sql)?;
    let tx =
        rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate).map_err(sql)?;
    ensure_schema(&tx).map_err(|e| e.to_string())?;
    tx.commit().map_err(sql)
}

/// Loads every live row into the cache; returns (kept, skipped).
fn load(conn: &Connection, cache: &Cache) -> rusqlite::Result<(usize, usize)> {
    let cutoff = cache.limits().cutoff(cache.now());
    let mut stmt = conn.prepare(
        "SELECT session, run, etag, state FROM runs WHERE last_active >= ?1
         ORDER BY last_active DESC",
    )?;
    let mut rows = stmt.query([as_sql(cutoff)])?;
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

/// Writes of one batch, with consecutive writes of one key merged.
enum Merged {
    Put(Put<Vec<Done>>),
    Delete(Delete),
}

/// What one merged entry came to inside the transaction.
enum Landed {
    Ok,
    Conflict(Reload),
    Rows(usize),
}

/// The checkpoint thread: asked to stop by dropping the sender.
type Checkpointer = (mpsc::Sender<()>, JoinHandle<()>);

/// Starts a thread with its own connection that folds the WAL back into the database
/// every 250 ms with PASSIVE checkpoints, which never block the writer: commits never pay
/// for a checkpoint, and pages rewritten many times are copied once.
fn spawn_checkpointer(path: &Path, options: &SqliteOptions) -> rusqlite::Result<Checkpointer> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(options.busy_timeout)?;
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("lg-store-ckpt".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(Duration::from_millis(250))
            {
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(target: "loopguard::store", error = %e, "checkpoint failed");
                }
            }
        })
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    Ok((stop, thread))
}

fn write_loop(
    mut conn: Connection,
    mut log: Log,
    rx: mpsc::Receiver<Op>,
    options: &SqliteOptions,
    counters: &Counters,
    checkpointer: Checkpointer,
    completions: Completions,
) {
    let max_batch = options.max_batch.max(1);
    let hasher = std::collections::hash_map::RandomState::new();
    let mut batch = Vec::with_capacity(max_batch.min(1024));
    let mut close = None;
    'serve: loop {
        let first = match rx.recv_timeout(options.idle_fold) {
            Ok(op) => op,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // Idle: fold the log back into the rows, for whoever reads the file next.
                if log.has_deltas() {
                    log.fold_all(&mut conn);
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let mut merged = Vec::with_capacity(batch.len());
        let mut last_put: HashMap<u64, usize> = HashMap::new();
        for op in batch.drain(..) {
            merge(op, &mut merged, &mut last_put, &hasher, &mut close);
            if close.is_some() {
                break;
            }
        }
        if !merged.is_empty() {
            commit(&mut conn, &mut log, merged, counters, &completions);
        }
        if close.is_some() {
            break 'serve;
        }
    }
    let (stop, thread) = checkpointer;
    drop(stop);
    let _ = thread.join();
    // Fold the log into the rows and the WAL into the database, so that the file stands
    // alone.
    if log.has_deltas() {
        log.fold_all(&mut conn);
    }
    let result = conn
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .and_then(|()| conn.close().map_err(|(_, e)| e))
        .map_err(|e| format!("closing the database: {e}"));
    if let Err(message) = &result {
        tracing::warn!(target: "loopguard::store", error = %message, "store closed with an error");
    }
    if let Some(done) = close {
        let _ = done.send(result);
    }
}

fn merge(
    op: Op,
    merged: &mut Vec<Merged>,
    last_put: &mut HashMap<u64, usize>,
    hasher: &std::collections::hash_map::RandomState,
    close: &mut Option<oneshot::Sender<Result<(), String>>>,
) {
    match op {
        Op::Put(put) => {
            let h = hasher.hash_one((&*put.session, &*put.run));
            if let Some(&i) = last_put.get(&h) {
                if let Merged::Put(previous) = &mut merged[i] {
                    // Only a write computed from the previous one continues the chain;
                    // anything else must meet the row as the previous write left it.
                    if previous.session == put.session
                        && previous.run == put.run
                        && put.expected == Some(previous.etag)
                    {
                        previous.state = put.state;
                        previous.last_active = put.last_active;
                        previous.etag = put.etag;
                        previous.done.push(put.done);
                        return;
                    }
                }
            }
            last_put.insert(h, merged.len());
            merged.push(Merged::Put(Put {
                session: put.session,
                run: put.run,
                state: put.state,
                last_active: put.last_active,
                expected: put.expected,
                etag: put.etag,
                done: vec![put.done],
            }));
        }
        Op::Delete(delete) => {
            match &delete {
                Delete::Run { session, run, .. } => {
                    last_put.remove(&hasher.hash_one((&**session, &**run)));
                }
                // Touch many rows: no write after them may merge into one before them.
                Delete::Session { .. } | Delete::Sweep { .. } => last_put.clear(),
            }
            merged.push(Merged::Delete(delete));
        }
        Op::Close { done } => *close = Some(done),
    }
}

fn commit(
    conn: &mut Connection,
    log: &mut Log,
    mut merged: Vec<Merged>,
    counters: &Counters,
    completions: &Completions,
) {
    let mut out = Vec::with_capacity(merged.len());
    let started = Instant::now();
    let outcome = run_transaction(conn, log, &mut merged);
    let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    counters.commit_micros.fetch_add(micros, Ordering::Relaxed);
    match outcome {
        Ok(landed) => {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters
                .deltas
                .fetch_add(log.take_appended(), Ordering::Relaxed);
            counters.healthy.store(true, Ordering::Release);
            for (entry, landed) in merged.into_iter().zip(landed) {
                answer(entry, landed, counters, &mut out);
            }
        }
        Err(e) => {
            // What the log knows of the rows may be what the rolled-back transaction did.
            log.stale = true;
            log.take_appended();
            counters.failures.fetch_add(1, Ordering::Relaxed);
            counters.healthy.store(false, Ordering::Release);
            let message = format!("database write failed: {e}");
            tracing::error!(target: "loopguard::store", error = %e, writes = merged.len(), "transaction failed");
            for entry in merged {
                fail(entry, &message, &mut out);
            }
        }
    }
    completions.deliver(out);
}

fn run_transaction(
    conn: &mut Connection,
    log: &mut Log,
    merged: &mut [Merged],
) -> rusqlite::Result<Vec<Landed>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    log.sync(&tx)?;
    let mut landed = Vec::with_capacity(merged.len());
    for entry in merged.iter_mut() {
        landed.push(match entry {
            Merged::Put(put) => log.put(&tx, put)?,
            Merged::Delete(Delete::Run {
                session, run, etag, ..
            }) => Landed::Rows(log.delete_run(&tx, session, run, *etag)?),
            Merged::Delete(Delete::Session { session, .. }) => {
                log.forget_session(session);
                Landed::Rows(
                    tx.prepare_cached("DELETE FROM runs WHERE session = ?1")?
                        .execute(params![&**session])?,
                )
            }
            Merged::Delete(Delete::Sweep { expired, full, .. }) => {
                let mut rows = 0;
                for e in expired.iter() {
                    if let Some(etag) = e.etag {
                        rows += log.delete_run(&tx, &e.session, &e.run, Some(etag))?;
                    }
                }
                if let Some(cutoff) = full {
                    // Rows this store did not write go too: fold the log first, so that
                    // no chain is left on a deleted row.
                    log.fold_in(&tx)?;
                    rows += delete_idle(&tx, *cutoff, None)?;
                }
                Landed::Rows(rows)
            }
        });
    }
    log.maintain(&tx)?;
    tx.commit()?;
    Ok(landed)
}

/// What the backend holds, as a [`Reload`].
fn reload(tx: &rusqlite::Transaction<'_>, session: &str, run: &str) -> rusqlite::Result<Reload> {
    Ok(match read_run(tx, session, run)? {
        Some(stored) => Reload::Row {
            bytes: stored.state,
            etag: stored.etag,
        },
        None => Reload::Absent,
    })
}

fn answer(entry: Merged, landed: Landed, counters: &Counters, out: &mut Vec<Completion>) {
    match (entry, landed) {
        (Merged::Put(Put { done, .. }), Landed::Ok) => {
            counters
                .writes
                .fetch_add(done.len() as u64, Ordering::Relaxed);
            out.extend(done.into_iter().map(|d| (d, Ok(()))));
        }
        (Merged::Put(Put { done, .. }), Landed::Conflict(reload)) => {
            out.extend(
                done.into_iter()
                    .map(|d| (d, Err(WriteError::Conflict(reload.clone())))),
            );
        }
        (Merged::Delete(Delete::Run { done, .. } | Delete::Session { done, .. }), _) => {
            out.push((done, Ok(())));
        }
        (Merged::Delete(Delete::Sweep { done, .. }), Landed::Rows(n)) => {
            let _ = done.send(Ok(n));
        }
        (Merged::Delete(Delete::Sweep { done, .. }), _) => {
            let _ = done.send(Ok(0));
        }
        (Merged::Put(Put { done, .. }), Landed::Rows(_)) => {
            out.extend(done.into_iter().map(|d| (d, Ok(()))));
        }
    }
}

fn fail(entry: Merged, message: &str, out: &mut Vec<Completion>) {
    let failed = || Err(WriteError::Failed(message.to_owned()));
    match entry {
        Merged::Put(Put { done, .. }) => out.extend(done.into_iter().map(|d| (d, failed()))),
        Merged::Delete(Delete::Run { done, .. } | Delete::Session { done, .. }) => {
            out.push((done, failed()));
        }
        Merged::Delete(Delete::Sweep { done, .. }) => {
            let _ = done.send(Err(message.to_owned()));
        }
    }
}

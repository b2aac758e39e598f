//! The writer thread: takes every write queued since its last commit, commits them as one
//! transaction, and answers the updates waiting for them (see the [module head](super)).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use loopguard::RunState;
use rusqlite::{params, Connection, TransactionBehavior};
use tokio::sync::oneshot;

use super::change_log::{FileSession, Landed, Log, Put, SessionRows, SessionWrite};
use super::checkpoint::Checkpointer;
use super::file::{delete_idle, read_run, read_session_state, StoredRun};
use super::SqliteOptions;
use crate::cache::{Expired, Reload, SessionPut, Sink};
use crate::{Cause, Failed, RunKey, StoreError};

/// Why a queued write did not land.
#[derive(Debug)]
pub(super) enum WriteError {
    /// The row is not at the version the write expected: here is what it holds.
    Conflict(Reload),
    /// The transaction failed.
    Failed(Cause),
}

pub(super) type Done = oneshot::Sender<Result<(), WriteError>>;

/// Rows deleted.
pub(super) enum Delete {
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
        /// Delete the session states unchanged since before this time.
        sessions_before: Option<u64>,
        done: oneshot::Sender<Result<usize, Cause>>,
    },
}

/// A read of one session's runs, in order with the writes queued before it.
pub(super) struct Read {
    pub(super) session: Box<str>,
    pub(super) done: oneshot::Sender<Result<SessionRows, Cause>>,
}

/// What the writer thread is sent.
pub(super) enum Op {
    Put(Put<Done>),
    Delete(Delete),
    Read(Read),
    Close {
        done: oneshot::Sender<Result<(), Cause>>,
    },
}

/// Counters shared with the writer thread.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) commits: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) deltas: AtomicU64,
    pub(super) conflicts: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) commit_micros: AtomicU64,
    /// False after a failed transaction, true again after a successful one.
    pub(super) healthy: AtomicBool,
}

/// The handle on the writer thread.
pub(super) struct Writer {
    thread: Mutex<Option<JoinHandle<()>>>,
    pub(super) counters: Arc<Counters>,
    /// The sender, cloned once: `Sender` is `Sync`, so the hot path needs no lock.
    pub(super) fast: mpsc::Sender<Op>,
    pub(super) closed: AtomicBool,
}

impl Writer {
    /// Starts the writer thread on `conn`, whose change log is `log`.
    pub(super) fn spawn(
        conn: Connection,
        log: Log,
        options: &SqliteOptions,
        checkpointer: Checkpointer,
        completions: Completions,
    ) -> Result<Self, StoreError> {
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
                .map_err(|e| StoreError::failed("cannot start the writer thread", e))?
        };
        Ok(Self {
            fast: tx,
            thread: Mutex::new(Some(thread)),
            counters,
            closed: AtomicBool::new(false),
        })
    }

    /// The writer thread's handle, for the one caller that joins it.
    /// Whether the writer thread is still running.
    pub(super) fn is_alive(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    pub(super) fn take_thread(&self) -> Option<JoinHandle<()>> {
        self.thread.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(super) fn send(&self, op: Op) {
        // A closed writer drops the op; its `done` sender goes with it, and the waiting
        // update sees the store as unavailable.
        if !self.closed.load(Ordering::Acquire) {
            let _ = self.fast.send(op);
        }
    }
}

pub(super) type Ticket = oneshot::Receiver<Result<(), WriteError>>;

/// The answer to one queued write.
pub(super) type Completion = (Done, Result<(), WriteError>);

/// How the writer thread hands the answers of a commit to the waiting updates: all of them
/// in one message to a dispatcher task on the server's runtime, which wakes each update
/// from inside the runtime (one cross-thread wake per commit instead of one per update);
/// directly when there is no dispatcher (yet, or any more).
pub(super) struct Completions {
    pub(super) batches: tokio::sync::mpsc::UnboundedSender<Vec<Completion>>,
    pub(super) dispatching: Arc<AtomicBool>,
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

    fn put(
        &self,
        key: RunKey<'_>,
        state: &RunState,
        expected: Option<u64>,
        etag: u64,
        session: SessionPut<'_>,
    ) -> Ticket {
        let (done, ticket) = oneshot::channel();
        self.send(Op::Put(Put {
            session: key.session.into(),
            run: key.run_column().into(),
            state: state.to_bytes(),
            last_active: state.last_active().get(),
            expected,
            etag,
            session_expected: session.expected,
            session_write: session.write.map(|(s, etag)| SessionWrite {
                state: s.to_bytes(),
                etag,
                last_active: s.last_active().get(),
            }),
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

/// Writes of one batch, with consecutive writes of one key merged.
enum Merged {
    Put(Put<Vec<Done>>),
    Delete(Delete),
    Read(Read),
}

/// The writer thread's loop: until the store closes or every sender is gone.
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
    checkpointer.stop();
    // Fold the log into the rows and the WAL into the database, so that the file stands
    // alone.
    if log.has_deltas() {
        log.fold_all(&mut conn);
    }
    let result = conn
        .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .and_then(|()| conn.close().map_err(|(_, e)| e))
        .map_err(|e| -> Cause { Arc::new(Failed::new("closing the database", e)) });
    if let Err(e) = &result {
        tracing::warn!(target: "loopguard::store", error = %e, "store closed with an error");
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
    close: &mut Option<oneshot::Sender<Result<(), Cause>>>,
) {
    match op {
        Op::Put(put) => {
            let h = hasher.hash_one((&*put.session, &*put.run));
            if let Some(&i) = last_put.get(&h) {
                if let Merged::Put(previous) = &mut merged[i] {
                    // Only a write computed from the previous one continues the chain
                    // (its run and its session as the previous write left them);
                    // anything else must meet the rows as the previous write left them.
                    let session_after = previous
                        .session_write
                        .as_ref()
                        .map_or(previous.session_expected, |w| Some(w.etag));
                    if previous.session == put.session
                        && previous.run == put.run
                        && put.expected == Some(previous.etag)
                        && put.session_expected == session_after
                    {
                        previous.state = put.state;
                        previous.last_active = put.last_active;
                        previous.etag = put.etag;
                        if put.session_write.is_some() {
                            previous.session_write = put.session_write;
                        }
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
                session_expected: put.session_expected,
                session_write: put.session_write,
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
        Op::Read(read) => merged.push(Merged::Read(read)),
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
            tracing::error!(target: "loopguard::store", error = %e, writes = merged.len(), "transaction failed");
            let cause: Cause = Arc::new(Failed::new("database write failed", e));
            for entry in merged {
                fail(entry, &cause, &mut out);
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
                super::file::delete_session(&tx, session)?;
                Landed::Rows(
                    tx.prepare_cached("DELETE FROM runs WHERE session = ?1")?
                        .execute(params![&**session])?,
                )
            }
            Merged::Delete(Delete::Sweep {
                expired,
                full,
                sessions_before,
                ..
            }) => {
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
                if let Some(cutoff) = sessions_before {
                    tx.prepare_cached("DELETE FROM sessions WHERE last_active < ?1")?
                        .execute(params![super::file::as_sql(*cutoff)])?;
                }
                Landed::Rows(rows)
            }
            Merged::Read(read) => Landed::Read(if log.shared {
                Some(FileSession {
                    runs: read_session_runs(&tx, &read.session)?,
                    state: read_session_state(&tx, &read.session)?,
                })
            } else {
                None
            }),
        });
    }
    log.maintain(&tx)?;
    tx.commit()?;
    Ok(landed)
}

/// Every run of `session` as the file holds it (the log was folded by [`Log::sync`] when
/// another connection wrote, so the rows are current).
fn read_session_runs(
    tx: &rusqlite::Transaction<'_>,
    session: &str,
) -> rusqlite::Result<Vec<(String, StoredRun)>> {
    let runs: Vec<String> = tx
        .prepare_cached("SELECT run FROM runs WHERE session = ?1")?
        .query_map(params![session], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        if let Some(stored) = read_run(tx, session, &run)? {
            out.push((run, stored));
        }
    }
    Ok(out)
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
        (Merged::Put(Put { done, .. }), Landed::Rows(_) | Landed::Read(_)) => {
            out.extend(done.into_iter().map(|d| (d, Ok(()))));
        }
        (Merged::Read(read), Landed::Read(rows)) => {
            let _ = read.done.send(Ok(rows));
        }
        (Merged::Read(read), _) => {
            let _ = read.done.send(Ok(None));
        }
    }
}

fn fail(entry: Merged, cause: &Cause, out: &mut Vec<Completion>) {
    let failed = || Err(WriteError::Failed(Arc::clone(cause)));
    match entry {
        Merged::Put(Put { done, .. }) => out.extend(done.into_iter().map(|d| (d, failed()))),
        Merged::Delete(Delete::Run { done, .. } | Delete::Session { done, .. }) => {
            out.push((done, failed()));
        }
        Merged::Delete(Delete::Sweep { done, .. }) => {
            let _ = done.send(Err(Arc::clone(cause)));
        }
        Merged::Read(read) => {
            let _ = read.done.send(Err(Arc::clone(cause)));
        }
    }
}

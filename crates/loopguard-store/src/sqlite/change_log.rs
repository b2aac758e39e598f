//! The writer thread's side of the change log (see
//! [`sqlite_file`](crate::sqlite_file) for the layout): which runs have live deltas, in
//! which table, and the bytes each delta is computed against.
//!
//! A write of a run whose last version this writer wrote, and which nobody else changed
//! since, appends a [`delta`] of the new state against the one it wrote last:
//! a few dozen bytes on the log table's last page, instead of the run's row (a 4 KiB page
//! of its own, two runs at most sharing one). Everything else writes the row whole, by a
//! compare-and-swap on its tag, which makes the run's deltas dead.
//!
//! The log is two tables used in turn. Deltas go to the current one until it holds
//! [`SqliteOptions::log_segment_rows`](crate::SqliteOptions::log_segment_rows) rows or is
//! [`SEGMENT_AGE`] old; then the other becomes current. A run whose chain is in the old
//! table ends it with its next write, a whole row; the chains left once the new table is
//! a quarter full (or [`SEGMENT_AGE`] old) are folded, [`FOLD_PER_COMMIT`] per commit:
//! their current state written to their row. When no chain is left in it, the old table
//! is emptied at once (`DELETE` of a whole table). So a busy run costs one row write per
//! table's worth of events, and the log holds little more than two tables' worth.
//!
//! Any commit by another connection (a hook, a second server) is seen through
//! `PRAGMA data_version`; the writer then folds the whole log into the rows and forgets
//! what it knew ([`Log::sync`]), as it does after a failed transaction, so that it never
//! appends a delta to a row it has not seen.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, Transaction, TransactionBehavior};

use super::file::{
    as_sql, fold_deltas, put_session, read_run, read_session_state, replace_row, session_tag,
    StoredRun, StoredSession, DELTA_TABLES,
};
use crate::cache::{Reload, Row};
use crate::delta;

/// A row write: a run's new state, compare-and-swapped on its tag, with its session's tag
/// checked and its session's new state when it changed. `D` is who waits for it: one
/// update when queued, every update merged into it within a batch.
pub(super) struct Put<D> {
    pub(super) session: Box<str>,
    pub(super) run: Box<str>,
    pub(super) state: Vec<u8>,
    pub(super) last_active: u64,
    pub(super) expected: Option<u64>,
    pub(super) etag: u64,
    /// The version of the session's state the update was computed from.
    pub(super) session_expected: Option<u64>,
    /// The session's new state, when the update changed it.
    pub(super) session_write: Option<SessionWrite>,
    pub(super) done: D,
}

/// A session state to write with a run.
pub(super) struct SessionWrite {
    pub(super) state: Vec<u8>,
    pub(super) etag: u64,
    pub(super) last_active: u64,
}

/// What one merged entry came to inside the transaction.
pub(super) enum Landed {
    Ok,
    Conflict(Reload),
    Rows(usize),
    Read(SessionRows),
}

/// One session as the file holds it: `None` when no other connection has written the
/// file, so the store's own map is the truth.
pub(super) type SessionRows = Option<FileSession>;

/// One session as the file holds it.
pub(super) struct FileSession {
    /// Its runs (run column, stored run).
    pub(super) runs: Vec<(String, StoredRun)>,
    /// Its state beyond its runs (what it spent), when it has one.
    pub(super) state: Option<StoredSession>,
}

/// What the backend holds, as a [`Reload`].
pub(super) fn reload(
    tx: &rusqlite::Transaction<'_>,
    session: &str,
    run: &str,
) -> rusqlite::Result<Reload> {
    Ok(Reload {
        run: match read_run(tx, session, run)? {
            Some(stored) => Row::Stored {
                bytes: stored.state,
                etag: stored.etag,
            },
            None => Row::Absent,
        },
        session: match read_session_state(tx, session)? {
            Some(stored) => Row::Stored {
                bytes: stored.state,
                etag: stored.etag,
            },
            None => Row::Absent,
        },
    })
}

/// Age after which a log table with deltas in it gives way to the other, so that the rows
/// of slow runs are rewritten (and their `last_active` brought up to date) now and then.
pub(super) const SEGMENT_AGE: Duration = Duration::from_secs(10);
/// Chains of the previous table folded into their rows per commit.
pub(super) const FOLD_PER_COMMIT: usize = 32;

/// What the writer knows of one run it wrote.
struct Tracked {
    /// The tag of the run's row.
    row: u64,
    /// The run's current version: `row`, or the tag of its last delta.
    head: u64,
    /// The log table holding the run's chain, when it has one.
    table: Option<usize>,
    /// The state at `head`, which the next delta is computed against.
    bytes: Vec<u8>,
    last_active: u64,
    /// The segment number of its last write.
    touched: u64,
}

type Key = (Box<str>, Box<str>);

/// Maps keyed by ids: the writer looks a run up on every write.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

pub(super) struct Log {
    /// session → run → what is known. Runs absent here have no live delta.
    runs: Map<Box<str>, Map<Box<str>, Tracked>>,
    /// The runs whose chain is in each table.
    chains: [Set<Key>; 2],
    /// The statement that appends a delta to each table.
    insert: [String; 2],
    /// Deltas in each table.
    rows: [u64; 2],
    /// Deltas a table takes before the other becomes current.
    segment_rows: u64,
    current: usize,
    /// When the current table became current.
    since: Instant,
    /// How many times the tables have switched.
    segment: u64,
    next_seq: i64,
    /// `PRAGMA data_version` at the last commit: another value means another connection
    /// committed since.
    data_version: i64,
    /// Set when what the log knows cannot be trusted (a transaction failed).
    pub(super) stale: bool,
    /// Set once another connection (a hook, `loopguard sessions reset`, a second server)
    /// has committed since the file was opened: the store's map may then hold states the
    /// file no longer does, and whoever reads a session for a caller reads the file.
    pub(super) shared: bool,
    /// Deltas appended since [`Log::take_appended`] last took them.
    appended: u64,
}

fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))
}

impl Log {
    /// A log for a file whose change log is empty (just folded).
    pub(super) fn new(conn: &Connection, segment_rows: u64) -> rusqlite::Result<Self> {
        Ok(Self {
            runs: Map::default(),
            chains: [Set::default(), Set::default()],
            insert: DELTA_TABLES.map(|table| {
                format!(
                    "INSERT INTO {table} (seq, session, run, base, etag, last_active, delta)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                )
            }),
            rows: [0, 0],
            segment_rows,
            current: 0,
            since: Instant::now(),
            segment: 0,
            next_seq: 1,
            data_version: data_version(conn)?,
            stale: false,
            shared: false,
            appended: 0,
        })
    }

    /// Deltas appended by the transaction that just ended.
    pub(super) fn take_appended(&mut self) -> u64 {
        std::mem::take(&mut self.appended)
    }

    pub(super) fn has_deltas(&self) -> bool {
        self.rows != [0, 0]
    }

    fn tracked(&self, session: &str, run: &str) -> Option<&Tracked> {
        self.runs.get(session)?.get(run)
    }

    /// Called first in every transaction: folds everything if another connection
    /// committed since this one last did, or if the log is stale.
    pub(super) fn sync(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let version = data_version(tx)?;
        self.shared |= version != self.data_version;
        if self.stale || version != self.data_version {
            self.fold_in(tx)?;
            self.data_version = version;
        }
        Ok(())
    }

    /// Folds the whole log into the rows inside `tx` and forgets every run.
    pub(super) fn fold_in(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        fold_deltas(tx)?;
        self.runs.clear();
        self.chains = [Set::default(), Set::default()];
        self.rows = [0, 0];
        self.since = Instant::now();
        self.stale = false;
        Ok(())
    }

    /// Folds the whole log in a transaction of its own (when idle, and at close).
    pub(super) fn fold_all(&mut self, conn: &mut Connection) {
        let result = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .and_then(|tx| {
                // Folding everything covers whatever another connection committed too.
                let version = data_version(&tx)?;
                self.shared |= version != self.data_version;
                self.data_version = version;
                self.fold_in(&tx)?;
                tx.commit()
            });
        if let Err(e) = result {
            self.stale = true;
            tracing::warn!(target: "loopguard::store", error = %e, "folding the change log failed");
        }
    }

    /// Writes one (merged) put: nothing when the session's state is not at the version the
    /// update was computed from; else the run (a delta when its chain can continue, else
    /// its row, by a compare-and-swap), then the session's state when it changed. The
    /// writer holds the database's write lock, so the check and the writes are one step.
    pub(super) fn put<D>(
        &mut self,
        tx: &Transaction<'_>,
        put: &mut Put<D>,
    ) -> rusqlite::Result<Landed> {
        if session_tag(tx, &put.session)? != put.session_expected {
            return Ok(Landed::Conflict(reload(tx, &put.session, &put.run)?));
        }
        let landed = self.put_run(tx, put)?;
        if let (Landed::Ok, Some(w)) = (&landed, &put.session_write) {
            put_session(tx, &put.session, w.etag, w.last_active, &w.state)?;
        }
        Ok(landed)
    }

    /// Writes the run of one (merged) put.
    fn put_run<D>(&mut self, tx: &Transaction<'_>, put: &mut Put<D>) -> rusqlite::Result<Landed> {
        let state = std::mem::take(&mut put.state);
        let Some(expected) = put.expected else {
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO runs (session, run, etag, last_active, state)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (session, run) DO NOTHING",
                )?
                .execute(params![
                    &*put.session,
                    &*put.run,
                    as_sql(put.etag),
                    as_sql(put.last_active),
                    &state
                ])?;
            if inserted == 0 {
                return Ok(Landed::Conflict(reload(tx, &put.session, &put.run)?));
            }
            // Not tracked yet: memory goes to runs written more than once (the second
            // write is a whole row, the third a delta).
            return Ok(Landed::Ok);
        };
        let (row, delta) = match self.tracked(&put.session, &put.run) {
            // Not a version this writer made: the row may hold it (a restart, a fold).
            None => (expected, None),
            Some(t) if t.head != expected => {
                return Ok(Landed::Conflict(reload(tx, &put.session, &put.run)?));
            }
            Some(t) => {
                // A chain left in the previous table is ended by a whole row instead.
                let continues = t.table.is_none_or(|table| table == self.current);
                (
                    t.row,
                    continues.then(|| delta::diff(&t.bytes, &state)).flatten(),
                )
            }
        };
        match delta {
            Some(delta) => {
                self.append(tx, put, expected, &delta)?;
                let current = self.current;
                let segment = self.segment;
                let t = self
                    .runs
                    .get_mut(&*put.session)
                    .and_then(|r| r.get_mut(&*put.run))
                    .expect("tracked above");
                if t.table.is_none() {
                    t.table = Some(current);
                    self.chains[current].insert((put.session.clone(), put.run.clone()));
                }
                t.head = put.etag;
                t.bytes = state;
                t.last_active = put.last_active;
                t.touched = segment;
                Ok(Landed::Ok)
            }
            None => {
                let (etag, at) = (put.etag, put.last_active);
                if !replace_row(tx, &put.session, &put.run, row, etag, at, &state)? {
                    return Ok(Landed::Conflict(reload(tx, &put.session, &put.run)?));
                }
                self.wrote_row(put, state);
                Ok(Landed::Ok)
            }
        }
    }

    fn append<D>(
        &mut self,
        tx: &Transaction<'_>,
        put: &Put<D>,
        base: u64,
        delta: &[u8],
    ) -> rusqlite::Result<()> {
        tx.prepare_cached(&self.insert[self.current])?
            .execute(params![
                self.next_seq,
                &*put.session,
                &*put.run,
                as_sql(base),
                as_sql(put.etag),
                as_sql(put.last_active),
                delta
            ])?;
        self.next_seq += 1;
        self.rows[self.current] += 1;
        self.appended += 1;
        Ok(())
    }

    /// The run's row now holds `state` under the put's tag: no chain.
    fn wrote_row<D>(&mut self, put: &Put<D>, state: Vec<u8>) {
        let tracked = Tracked {
            row: put.etag,
            head: put.etag,
            table: None,
            bytes: state,
            last_active: put.last_active,
            touched: self.segment,
        };
        let runs = self.runs.entry(put.session.clone()).or_default();
        let old = match runs.get_mut(&*put.run) {
            Some(slot) => std::mem::replace(slot, tracked),
            None => {
                runs.insert(put.run.clone(), tracked);
                return;
            }
        };
        if let Some(table) = old.table {
            self.chains[table].remove(&(put.session.clone(), put.run.clone()));
        }
    }

    /// Deletes a run's row, only at version `etag` when given. Returns the rows deleted.
    pub(super) fn delete_run(
        &mut self,
        tx: &Transaction<'_>,
        session: &str,
        run: &str,
        etag: Option<u64>,
    ) -> rusqlite::Result<usize> {
        let tracked = self.tracked(session, run);
        let deleted = match etag {
            None => tx
                .prepare_cached("DELETE FROM runs WHERE session = ?1 AND run = ?2")?
                .execute(params![session, run])?,
            Some(etag) => {
                // The row holds the chain's base; the caller knows the chain's head.
                let row = match tracked {
                    Some(t) if t.head == etag => t.row,
                    Some(_) => return Ok(0),
                    None => etag,
                };
                tx.prepare_cached("DELETE FROM runs WHERE session = ?1 AND run = ?2 AND etag = ?3")?
                    .execute(params![session, run, as_sql(row)])?
            }
        };
        if deleted > 0 {
            self.forget(session, run);
        }
        Ok(deleted)
    }

    fn forget(&mut self, session: &str, run: &str) {
        let Some(runs) = self.runs.get_mut(session) else {
            return;
        };
        if let Some((run, t)) = runs.remove_entry(run) {
            if let Some(table) = t.table {
                self.chains[table].remove(&(session.into(), run));
            }
        }
        if runs.is_empty() {
            self.runs.remove(session);
        }
    }

    pub(super) fn forget_session(&mut self, session: &str) {
        if let Some((session, runs)) = self.runs.remove_entry(session) {
            for (run, t) in runs {
                if let Some(table) = t.table {
                    self.chains[table].remove(&(session.clone(), run));
                }
            }
        }
    }

    /// After the writes of a commit: switches tables when the current one is full or old,
    /// folds some chains of the previous one, and empties it when none is left.
    pub(super) fn maintain(&mut self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let previous = 1 - self.current;
        if self.rows[previous] == 0 {
            let full = self.rows[self.current] >= self.segment_rows;
            let old = self.rows[self.current] > 0 && self.since.elapsed() >= SEGMENT_AGE;
            if full || old {
                self.switch();
            }
            return Ok(());
        }
        // Runs in use end their chain with their next write; give them a quarter of a
        // table (or the table's age) to do so before folding what is left.
        let due =
            self.rows[self.current] >= self.segment_rows / 4 || self.since.elapsed() >= SEGMENT_AGE;
        if !due {
            return Ok(());
        }
        let keys: Vec<Key> = self.chains[previous]
            .iter()
            .take(FOLD_PER_COMMIT)
            .cloned()
            .collect();
        for key in keys {
            self.fold_one(tx, &key)?;
        }
        if self.chains[previous].is_empty() {
            tx.execute_batch(&format!("DELETE FROM {};", DELTA_TABLES[previous]))?;
            self.rows[previous] = 0;
        }
        Ok(())
    }

    fn switch(&mut self) {
        self.current = 1 - self.current;
        self.since = Instant::now();
        // Runs not written during the segment that just ended, and without a chain, are
        // dropped with their bytes: memory goes to the runs in use.
        let ended = self.segment;
        self.runs.retain(|_, runs| {
            runs.retain(|_, t| t.table.is_some() || t.touched >= ended);
            !runs.is_empty()
        });
        self.segment += 1;
    }

    /// Writes the state a chain leads to into its row.
    fn fold_one(&mut self, tx: &Transaction<'_>, key: &Key) -> rusqlite::Result<()> {
        let (session, run) = key;
        self.chains[1 - self.current].remove(key);
        let Some(t) = self
            .runs
            .get_mut(&**session)
            .and_then(|r| r.get_mut(&**run))
        else {
            return Ok(());
        };
        let replaced = replace_row(tx, session, run, t.row, t.head, t.last_active, &t.bytes)?;
        t.row = t.head;
        t.table = None;
        if !replaced {
            // Someone else rewrote the row: nothing here can be trusted any more.
            self.stale = true;
        }
        Ok(())
    }
}

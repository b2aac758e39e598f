//! Where hook processes keep their state: the SQLite file `loopguard serve` uses.
//!
//! Each hook invocation is a process of its own that lives a few milliseconds, so it
//! cannot keep a cache, a writer thread or a group commit the way
//! `loopguard_store::SqliteStore` does (that store also reads every live run at start).
//! Instead, one invocation is one `BEGIN IMMEDIATE … COMMIT` transaction that reads the
//! one row it needs, applies the event and writes the row back:
//!
//! - **The same rows.** Run states live in the store's `runs` table (schema version 3, see
//!   `docs/serve.md`), keyed by (session, run), as `RunState::to_bytes()`, each write with a
//!   fresh unique tag. A run is read with the server's change log applied
//!   (`sqlite_file::read_run`) and written back whole, which ends its chain of deltas. A
//!   `loopguard serve` on the same file sees every hook commit as a change made by another
//!   process (it folds its log and reloads what it holds), so the two can share one
//!   database.
//! - **Safe with concurrent hooks.** `BEGIN IMMEDIATE` takes the write lock before the row
//!   is read, so two hook processes of one session (parallel tool calls) are serialized:
//!   neither can lose the other's update. Other writers are waited for up to the busy
//!   timeout (5 s).
//! - **Committed before the answer, without waiting for the disk.** WAL mode with
//!   `synchronous=NORMAL` by default: the commit is in the WAL before the hook prints its
//!   decision, so it survives the crash of any process; an OS crash or a power loss may lose
//!   the last few updates (history of a session that died with the machine). A commit that
//!   waits for an fsync costs a few milliseconds more, and tens of them on a disk busy with
//!   the agent's own builds, at every tool call. `Synchronous::Full` (`--sync full`) makes
//!   every commit wait for the disk.
//! - **Checkpoints of its own.** SQLite's last connection to close folds the WAL back into
//!   the database (several fsyncs), and the next process that opens the file alone reads
//!   the whole WAL again, because what was checkpointed is known only to the shared memory
//!   that closed with it. So hooks turn both automatic and closing checkpoints off, and the
//!   hook whose commit leaves the WAL over 512 KiB folds it back and empties it
//!   ([`HookDb::fold_wal`]): one hook in a few dozen pays the fsyncs, and every hook reads
//!   at most 512 KiB of WAL at open.
//! - **Bounded.** A run idle for 24 hours starts afresh; a session keeps at most 64 runs;
//!   idle rows are swept, a few hundred at a time, whenever a session or a run starts.
//!
//! Tables of its own sit beside `runs` in the same file: `hook_sessions` (the current
//! run number of each agent session, advanced at every user prompt) and `hook_notes`
//! (warnings waiting for the result of their call, for agents that can show the model a
//! note only after the tool ran). A third, `hook_transcripts`, keeps where the last read of
//! each session's transcript stopped ([`crate::transcript`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use loopguard::{Millis, RunState, SessionState};

use crate::transcript::Mark;
use loopguard_store::sqlite_file::{self, as_sql, fresh_tag, SchemaError};
pub use loopguard_store::{Synchronous, SCHEMA_VERSION};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// The bounds hooks keep to: the engine's defaults, as `loopguard serve` (a run idle for
/// `idle_ttl` starts afresh and its row is swept; a session keeps `max_runs_per_session`
/// runs).
fn limits() -> loopguard::Limits {
    loopguard::Limits::default()
}

/// Idle rows removed per table by one sweep, so that a sweep never makes a hook slow.
const SWEEP_BATCH: u32 = 256;

/// The hooks' own tables, as marked in `loopguard_meta` (`hook_schema_version`) once made.
const HOOK_SCHEMA_VERSION: &str = "2";

/// How long to wait for another process that holds the write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database directory or file could not be created.
    #[error("cannot create {path}: {source}")]
    Create {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// SQLite refused (locked longer than the busy timeout, disk full, not a database …).
    #[error("database {path}: {source}")]
    Sql {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The file's layout cannot be used.
    #[error("database {path}: {source}")]
    Layout {
        /// The database file.
        path: PathBuf,
        /// What is wrong with it.
        source: SchemaError,
    },
    /// The file cannot be shared safely: it cannot use write-ahead logging.
    #[error("database {path}: the database cannot use WAL mode (journal_mode is {mode})")]
    NotWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// The file was written by a newer loopguard with another layout.
    #[error("database {path}: schema version {found} is not supported (this build uses {SCHEMA_VERSION})")]
    Schema {
        /// The database file.
        path: PathBuf,
        /// The version found.
        found: String,
    },
}

/// How hook processes use the database file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbOptions {
    /// Durability of each commit (default [`Synchronous::Normal`]).
    pub synchronous: Synchronous,
    /// WAL size in bytes beyond which [`HookDb::fold_wal`] folds the WAL back into the
    /// database and empties it (default 512 KiB).
    pub wal_limit: u64,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            wal_limit: 512 << 10,
        }
    }
}

/// An open database file.
#[derive(Debug)]
pub struct HookDb {
    conn: Connection,
    path: PathBuf,
    options: DbOptions,
}

impl HookDb {
    /// Opens the database at `path` with the default [`DbOptions`], creating it (and its
    /// directory, private to the user) when missing.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with(path, DbOptions::default())
    }

    /// [`HookDb::open`] with `options`.
    pub fn open_with(path: &Path, options: DbOptions) -> Result<Self, StoreError> {
        sqlite_file::create_private(path).map_err(|(path, source)| StoreError::Create {
            path: path.to_owned(),
            source,
        })?;
        let sql = |e: rusqlite::Error| sql_error(path, e);
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(sql)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NotWal {
                path: path.to_owned(),
                mode,
            });
        }
        let sync = options.synchronous.pragma();
        // Checkpoints are the hooks' own (see `fold_wal`), not SQLite's: an automatic or
        // closing checkpoint in a process that is alone on the file is forgotten by the
        // next one, which then reads the whole WAL again.
        conn.execute_batch(&format!(
            "PRAGMA synchronous={sync}; PRAGMA wal_autocheckpoint=0;"
        ))
        .map_err(sql)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(sql)?;
        Ok(Self {
            conn,
            path: path.to_owned(),
            options,
        })
    }

    /// When the WAL has grown past [`DbOptions::wal_limit`], folds it back into the
    /// database and empties it (`wal_checkpoint(TRUNCATE)`), waiting at most 100 ms for
    /// other connections; returns whether it did. Call it after committing: it keeps the
    /// WAL that the next hook process reads at open small.
    pub fn fold_wal(&mut self) -> Result<bool, StoreError> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
        if size <= self.options.wal_limit {
            return Ok(false);
        }
        let sql = |e: rusqlite::Error| sql_error(&self.path, e);
        self.conn
            .busy_timeout(Duration::from_millis(100))
            .map_err(sql)?;
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(sql)?;
        self.conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
        Ok(busy == 0)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts a write transaction at clock time `now` (Unix milliseconds); nothing it does
    /// is visible to others until [`HookTx::commit`].
    pub fn begin(&mut self, now: Millis) -> Result<HookTx<'_>, StoreError> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&path, e))?;
        let tx = HookTx {
            tx,
            path,
            now,
            warnings: Vec::new(),
        };
        tx.ensure_schema()?;
        Ok(tx)
    }
}

/// One transaction: everything a hook invocation reads and writes.
#[derive(Debug)]
pub struct HookTx<'c> {
    tx: rusqlite::Transaction<'c>,
    path: PathBuf,
    now: Millis,
    warnings: Vec<String>,
}

impl HookTx<'_> {
    fn sql(&self, e: rusqlite::Error) -> StoreError {
        sql_error(&self.path, e)
    }

    fn ensure_schema(&self) -> Result<(), StoreError> {
        // A current file needs no schema statements: one read of the two version marks
        // (a hook process opens the file once per tool call).
        // The statement has the shape of the store's own version check, so that it runs
        // code the process has already faulted in.
        let mark = |key: &str| -> Option<String> {
            self.tx
                .prepare_cached("SELECT value FROM loopguard_meta WHERE key = ?1")
                .and_then(|mut s| s.query_row([key], |r| r.get(0)))
                .ok()
        };
        if mark("hook_schema_version").as_deref() == Some(HOOK_SCHEMA_VERSION)
            && mark("schema_version") == Some(SCHEMA_VERSION.to_string())
        {
            return Ok(());
        }
        // The store's tables first, then the hooks' own.
        sqlite_file::ensure_schema(&self.tx).map_err(|e| match e {
            SchemaError::Version { found } => StoreError::Schema {
                path: self.path.clone(),
                found,
            },
            SchemaError::Sql(e) => self.sql(e),
            other => StoreError::Layout {
                path: self.path.clone(),
                source: other,
            },
        })?;
        self.tx
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS hook_sessions (
                     session TEXT PRIMARY KEY,
                     run INTEGER NOT NULL,
                     last_active INTEGER NOT NULL
                 );
                 CREATE TABLE IF NOT EXISTS hook_notes (
                     session TEXT NOT NULL,
                     run TEXT NOT NULL,
                     call TEXT NOT NULL,
                     note TEXT NOT NULL,
                     last_active INTEGER NOT NULL,
                     PRIMARY KEY (session, run, call)
                 );
                 CREATE TABLE IF NOT EXISTS hook_transcripts (
                     session TEXT PRIMARY KEY,
                     path TEXT NOT NULL,
                     offset INTEGER NOT NULL,
                     tail_check INTEGER NOT NULL,
                     last_active INTEGER NOT NULL
                 );",
            )
            .map_err(|e| self.sql(e))?;
        self.tx
            .execute(
                "INSERT OR REPLACE INTO loopguard_meta (key, value)
                 VALUES ('hook_schema_version', ?1)",
                [HOOK_SCHEMA_VERSION],
            )
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// The clock time of this transaction.
    pub fn now(&self) -> Millis {
        self.now
    }

    fn cutoff(&self) -> u64 {
        limits().cutoff(self.now).get()
    }

    /// Things worth a line on stderr (an unreadable state that was started afresh).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Adds a line for stderr.
    pub fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    /// The current run number of `session`: how many runs started (user prompts) so far.
    pub fn run_number(&self, session: &str) -> Result<u64, StoreError> {
        let n: Option<i64> = self
            .tx
            .prepare_cached("SELECT run FROM hook_sessions WHERE session = ?1")
            .and_then(|mut s| s.query_row([session], |r| r.get(0)).optional())
            .map_err(|e| self.sql(e))?;
        Ok(n.map_or(0, |n| n.max(0) as u64))
    }

    /// Starts the next run of `session` and returns its number. Runs of the session beyond
    /// the `Limits::max_runs_per_session` most recently active are deleted.
    pub fn start_run(&self, session: &str) -> Result<u64, StoreError> {
        let n: i64 = self
            .tx
            .prepare_cached(
                "INSERT INTO hook_sessions (session, run, last_active) VALUES (?1, 1, ?2)
                 ON CONFLICT (session) DO UPDATE
                     SET run = run + 1, last_active = excluded.last_active
                 RETURNING run",
            )
            .and_then(|mut s| s.query_row(params![session, as_sql(self.now.get())], |r| r.get(0)))
            .map_err(|e| self.sql(e))?;
        self.tx
            .prepare_cached(
                "DELETE FROM runs WHERE session = ?1 AND run NOT IN
                     (SELECT run FROM runs WHERE session = ?1
                      ORDER BY last_active DESC LIMIT ?2)",
            )
            .and_then(|mut s| {
                let keep = limits().max_runs_per_session.saturating_sub(1);
                s.execute(params![session, i64::try_from(keep).unwrap_or(i64::MAX)])
            })
            .map_err(|e| self.sql(e))?;
        Ok(n.max(0) as u64)
    }

    /// Gives `f` the state of (`session`, `run`) (a fresh one when the run is new, idle
    /// past the time-to-live, or unreadable), the state of its session (its spend, the same
    /// way) and the clock time, and stores the states `f` leaves (the session's when it
    /// changed, under a fresh tag, so that a `loopguard serve` on the file sees the change).
    pub fn update_run<R>(
        &mut self,
        session: &str,
        run: Option<&str>,
        f: impl FnOnce(&mut RunState, &mut SessionState, Millis) -> R,
    ) -> Result<R, StoreError> {
        let run_column = run.unwrap_or("");
        let stored = sqlite_file::read_run(&self.tx, session, run_column)
            .map_err(|e| sql_error(&self.path, e))?;
        let mut state = match stored {
            Some(stored) if stored.last_active >= self.cutoff() => {
                match RunState::from_bytes(&stored.state) {
                    Ok(state) => state,
                    Err(e) => {
                        self.warnings.push(format!(
                            "the stored state of session {session:?} run {run_column:?} is unreadable ({e}); starting the run afresh"
                        ));
                        RunState::default()
                    }
                }
            }
            _ => RunState::default(),
        };
        let mut session_state = self.session_state(session)?.unwrap_or_default();
        let result = f(&mut state, &mut session_state, self.now);
        if session_state.changed() {
            sqlite_file::put_session(
                &self.tx,
                session,
                fresh_tag(),
                session_state.last_active().max(self.now).get(),
                &session_state.to_bytes(),
            )
            .map_err(|e| sql_error(&self.path, e))?;
        }
        let last_active = state.last_active().max(self.now);
        self.tx
            .prepare_cached(
                "INSERT INTO runs (session, run, etag, last_active, state)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session, run) DO UPDATE SET
                     etag = excluded.etag,
                     last_active = excluded.last_active,
                     state = excluded.state",
            )
            .and_then(|mut s| {
                s.execute(params![
                    session,
                    run_column,
                    as_sql(fresh_tag()),
                    as_sql(last_active.get()),
                    state.to_bytes()
                ])
            })
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(result)
    }

    /// Applies `f` to the state of `session` beyond its runs (a fresh one when it has none
    /// live) and stores it when it changed (the agent tree's steps touch a session's state
    /// apart from any run: [`loopguard::tree::SessionStates`]).
    pub fn update_session<R>(
        &mut self,
        session: &str,
        f: impl FnOnce(&mut SessionState) -> R,
    ) -> Result<R, StoreError> {
        let mut state = self.session_state(session)?.unwrap_or_default();
        let result = f(&mut state);
        if state.changed() {
            sqlite_file::put_session(
                &self.tx,
                session,
                fresh_tag(),
                state.last_active().max(self.now).get(),
                &state.to_bytes(),
            )
            .map_err(|e| sql_error(&self.path, e))?;
        }
        Ok(result)
    }

    /// The state of `session` beyond its runs (its spend), when it has a live one; an
    /// unreadable one counts as none, with a warning.
    pub fn session_state(&mut self, session: &str) -> Result<Option<SessionState>, StoreError> {
        let stored = sqlite_file::read_session_state(&self.tx, session)
            .map_err(|e| sql_error(&self.path, e))?;
        Ok(match stored {
            Some(stored) if stored.last_active >= self.cutoff() => {
                match SessionState::from_bytes(&stored.state) {
                    Ok(state) => Some(state),
                    Err(e) => {
                        self.warnings.push(format!(
                            "the stored state of session {session:?} is unreadable ({e}); its spend starts afresh"
                        ));
                        None
                    }
                }
            }
            _ => None,
        })
    }

    /// The state of (`session`, `run`) as stored, when there is one (for inspection).
    pub fn run_state(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> Result<Option<RunState>, StoreError> {
        let stored =
            sqlite_file::read_run(&self.tx, session, run.unwrap_or("")).map_err(|e| self.sql(e))?;
        Ok(stored.and_then(|s| RunState::from_bytes(&s.state).ok()))
    }

    /// Keeps a warning note for the call `call` of (`session`, `run`), to be shown with its
    /// result; replaces an older note of the same call.
    pub fn put_note(
        &self,
        session: &str,
        run: &str,
        call: &str,
        note: &str,
    ) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO hook_notes (session, run, call, note, last_active)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| s.execute(params![session, run, call, note, as_sql(self.now.get())]))
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Takes (reads and deletes) the note kept for the call `call`, if any.
    pub fn take_note(
        &self,
        session: &str,
        run: &str,
        call: &str,
    ) -> Result<Option<String>, StoreError> {
        let note: Option<String> = self
            .tx
            .prepare_cached(
                "DELETE FROM hook_notes WHERE session = ?1 AND run = ?2 AND call = ?3
                 RETURNING note",
            )
            .and_then(|mut s| {
                s.query_row(params![session, run, call], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.sql(e))?;
        Ok(note)
    }

    /// Where the last read of `session`'s transcript stopped, if it was read.
    pub fn transcript_mark(&self, session: &str) -> Result<Option<Mark>, StoreError> {
        self.tx
            .prepare_cached(
                "SELECT path, offset, tail_check FROM hook_transcripts WHERE session = ?1",
            )
            .and_then(|mut s| {
                s.query_row([session], |r| {
                    Ok(Mark {
                        path: r.get(0)?,
                        offset: r.get::<_, i64>(1)?.max(0) as u64,
                        check: r.get::<_, i64>(2)? as u64,
                    })
                })
                .optional()
            })
            .map_err(|e| self.sql(e))
    }

    /// Keeps where the last read of `session`'s transcript stopped.
    pub fn put_transcript_mark(&self, session: &str, mark: &Mark) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO hook_transcripts
                     (session, path, offset, tail_check, last_active)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    session,
                    mark.path,
                    as_sql(mark.offset),
                    mark.check as i64,
                    as_sql(self.now.get())
                ])
            })
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Forgets a session: its runs, its spend, its run number and its notes. Returns the runs removed.
    pub fn forget_session(&self, session: &str) -> Result<usize, StoreError> {
        let runs = self
            .tx
            .prepare_cached("DELETE FROM runs WHERE session = ?1")
            .and_then(|mut s| s.execute([session]))
            .map_err(|e| self.sql(e))?;
        sqlite_file::delete_session(&self.tx, session).map_err(|e| self.sql(e))?;
        for sql in [
            "DELETE FROM hook_sessions WHERE session = ?1",
            "DELETE FROM hook_notes WHERE session = ?1",
            "DELETE FROM hook_transcripts WHERE session = ?1",
        ] {
            self.tx
                .prepare_cached(sql)
                .and_then(|mut s| s.execute([session]))
                .map_err(|e| self.sql(e))?;
        }
        Ok(runs)
    }

    /// Every live run, or those of `session`: (session, run, state) in (session, run)
    /// order, `run` being `""` for calls outside any run. A state this build cannot read
    /// is left out, with a warning.
    pub fn runs(
        &mut self,
        session: Option<&str>,
    ) -> Result<Vec<(String, String, RunState)>, StoreError> {
        let keys: Vec<(String, String)> = self
            .tx
            .prepare(
                "SELECT session, run FROM runs WHERE ?1 IS NULL OR session = ?1
                 ORDER BY session, run",
            )
            .and_then(|mut stmt| {
                stmt.query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::with_capacity(keys.len());
        for (session, run) in keys {
            let stored =
                sqlite_file::read_run(&self.tx, &session, &run).map_err(|e| self.sql(e))?;
            match stored.map(|s| RunState::from_bytes(&s.state)) {
                Some(Ok(state)) => out.push((session, run, state)),
                Some(Err(e)) => self.warnings.push(format!(
                    "run {run:?} of session {session:?}: unreadable state ({e})"
                )),
                None => {}
            }
        }
        Ok(out)
    }

    /// Forgets one run of a session (`run` is `""` for calls outside any run) and its
    /// notes. Returns whether it was there.
    pub fn forget_run(&self, session: &str, run: &str) -> Result<bool, StoreError> {
        let removed = self
            .tx
            .prepare_cached("DELETE FROM runs WHERE session = ?1 AND run = ?2")
            .and_then(|mut s| s.execute([session, run]))
            .map_err(|e| self.sql(e))?;
        self.tx
            .prepare_cached("DELETE FROM hook_notes WHERE session = ?1 AND run = ?2")
            .and_then(|mut s| s.execute([session, run]))
            .map_err(|e| self.sql(e))?;
        Ok(removed > 0)
    }

    /// Removes rows idle for longer than `Limits::idle_ttl`, at most a few hundred per table
    /// (a later sweep takes the rest). A session's run number is kept while any of its runs
    /// is live. Returns the run rows removed.
    pub fn sweep(&self) -> Result<usize, StoreError> {
        let runs = sqlite_file::delete_idle(&self.tx, self.cutoff(), Some(SWEEP_BATCH))
            .map_err(|e| self.sql(e))?;
        let cutoff = as_sql(self.cutoff());
        for sql in [
            "DELETE FROM hook_notes WHERE rowid IN
                 (SELECT rowid FROM hook_notes WHERE last_active < ?1 LIMIT ?2)",
            "DELETE FROM hook_transcripts WHERE rowid IN
                 (SELECT rowid FROM hook_transcripts WHERE last_active < ?1 LIMIT ?2)",
            "DELETE FROM hook_sessions WHERE rowid IN
                 (SELECT h.rowid FROM hook_sessions h WHERE h.last_active < ?1
                  AND NOT EXISTS (SELECT 1 FROM runs r
                                  WHERE r.session = h.session AND r.last_active >= ?1)
                  LIMIT ?2)",
        ] {
            self.tx
                .prepare_cached(sql)
                .and_then(|mut s| s.execute(params![cutoff, SWEEP_BATCH]))
                .map_err(|e| self.sql(e))?;
        }
        Ok(runs)
    }

    /// Commits: everything done in this transaction becomes durable and visible at once.
    pub fn commit(self) -> Result<(), StoreError> {
        let path = self.path;
        self.tx.commit().map_err(|e| sql_error(&path, e))
    }
}

fn sql_error(path: &Path, e: rusqlite::Error) -> StoreError {
    StoreError::Sql {
        path: path.to_owned(),
        source: e,
    }
}

/// The hook's sessions' states, for the agent tree's steps: each read and written in the
/// hook's one transaction, so a sub-agent's link and its root's record change together.
impl loopguard::tree::SessionStates for HookTx<'_> {
    type Error = StoreError;

    fn read_state<R>(
        &mut self,
        session: &str,
        f: impl FnOnce(Option<&SessionState>) -> R,
    ) -> Result<R, StoreError> {
        Ok(f(self.session_state(session)?.as_ref()))
    }

    fn update_state<R>(
        &mut self,
        session: &str,
        f: impl FnOnce(&mut SessionState) -> R,
    ) -> Result<R, StoreError> {
        self.update_session(session, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loopguard::{Call, ConfigSet, Outcome};
    use serde_json::json;

    fn db() -> (tempfile::TempDir, HookDb) {
        let dir = tempfile::tempdir().unwrap();
        let db = HookDb::open(&dir.path().join("sub/loopguard.db")).unwrap();
        (dir, db)
    }

    fn call(tx: &mut HookTx<'_>, session: &str, run: &str) -> bool {
        let config = ConfigSet::enabled_defaults();
        let cfg = config.for_agent(None);
        let args = json!({"path": "/x"});
        let scope = loopguard::Scope::new(session).with_run(Some(run));
        tx.update_run(session, Some(run), |state, session_state, now| {
            let ticket = state.begin(session_state, cfg, &scope, &Call::new("read", &args), now);
            let blocked = ticket.is_blocked();
            let _ = state.finish(
                session_state,
                cfg,
                ticket,
                Outcome::Result(&json!("same")),
                now,
            );
            blocked
        })
        .unwrap()
    }

    #[test]
    fn states_survive_across_transactions_and_connections() {
        let (dir, mut db) = db();
        for _ in 0..3 {
            let mut tx = db.begin(Millis::new(1_000)).unwrap();
            assert!(!call(&mut tx, "s", "r"));
            tx.commit().unwrap();
        }
        drop(db);
        let mut db = HookDb::open(&dir.path().join("sub/loopguard.db")).unwrap();
        let tx = db.begin(Millis::new(2_000)).unwrap();
        let state = tx.run_state("s", Some("r")).unwrap().unwrap();
        assert_eq!(state.history().len(), 3);
        assert!(tx.run_state("s", Some("other")).unwrap().is_none());
    }

    #[test]
    fn an_uncommitted_transaction_leaves_no_trace() {
        let (_dir, mut db) = db();
        {
            let mut tx = db.begin(Millis::new(1_000)).unwrap();
            call(&mut tx, "s", "r");
            tx.start_run("s").unwrap();
        }
        let tx = db.begin(Millis::new(1_000)).unwrap();
        assert!(tx.run_state("s", Some("r")).unwrap().is_none());
        assert_eq!(tx.run_number("s").unwrap(), 0);
    }

    #[test]
    fn runs_are_numbered_per_session_and_capped() {
        let (_dir, mut db) = db();
        let mut tx = db.begin(Millis::new(1_000)).unwrap();
        assert_eq!(tx.run_number("s").unwrap(), 0);
        assert_eq!(tx.start_run("s").unwrap(), 1);
        assert_eq!(tx.start_run("s").unwrap(), 2);
        assert_eq!(tx.start_run("t").unwrap(), 1);
        assert_eq!(tx.run_number("s").unwrap(), 2);
        // 70 runs with a state each: only the 64 most recent survive the next start.
        for n in 0..70u64 {
            tx.now = Millis::new(2_000 + n);
            call(&mut tx, "s", &format!("prompt-{n}"));
        }
        tx.now = Millis::new(5_000);
        tx.start_run("s").unwrap();
        let left: i64 = tx
            .tx
            .query_row("SELECT count(*) FROM runs WHERE session = 's'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(left, limits().max_runs_per_session as i64 - 1);
        assert!(tx.run_state("s", Some("prompt-0")).unwrap().is_none());
        assert!(tx.run_state("s", Some("prompt-69")).unwrap().is_some());
    }

    #[test]
    fn idle_runs_start_afresh_and_are_swept() {
        let (_dir, mut db) = db();
        let mut tx = db.begin(Millis::new(1_000)).unwrap();
        call(&mut tx, "old", "r");
        tx.start_run("old").unwrap();
        tx.put_note("old", "r", "c", "note").unwrap();
        tx.commit().unwrap();

        let ttl = limits().ttl_ms();
        let later = 1_000 + ttl + 1;
        let mut tx = db.begin(Millis::new(later)).unwrap();
        // Read before the sweep: expired, so a fresh state.
        let len = tx
            .update_run("old", Some("r"), |s, _, _| s.history().len())
            .unwrap();
        assert_eq!(len, 0);
        tx.commit().unwrap();

        let mut tx = db.begin(Millis::new(later + ttl + 1)).unwrap();
        call(&mut tx, "live", "r");
        assert_eq!(tx.sweep().unwrap(), 1);
        assert!(tx.run_state("old", Some("r")).unwrap().is_none());
        assert_eq!(tx.run_number("old").unwrap(), 0);
        assert!(tx.take_note("old", "r", "c").unwrap().is_none());
        assert!(tx.run_state("live", Some("r")).unwrap().is_some());
    }

    #[test]
    fn notes_are_taken_once() {
        let (_dir, mut db) = db();
        let tx = db.begin(Millis::new(1)).unwrap();
        tx.put_note("s", "r", "c", "first").unwrap();
        tx.put_note("s", "r", "c", "second").unwrap();
        assert_eq!(
            tx.take_note("s", "r", "c").unwrap().as_deref(),
            Some("second")
        );
        assert_eq!(tx.take_note("s", "r", "c").unwrap(), None);
    }

    #[test]
    fn forgetting_a_session_removes_everything_of_it() {
        let (_dir, mut db) = db();
        let mut tx = db.begin(Millis::new(1)).unwrap();
        call(&mut tx, "s", "a");
        call(&mut tx, "s", "b");
        call(&mut tx, "t", "a");
        tx.start_run("s").unwrap();
        tx.put_note("s", "a", "c", "n").unwrap();
        assert_eq!(tx.forget_session("s").unwrap(), 2);
        assert_eq!(tx.run_number("s").unwrap(), 0);
        assert!(tx.take_note("s", "a", "c").unwrap().is_none());
        assert!(tx.run_state("t", Some("a")).unwrap().is_some());
    }

    #[test]
    fn unreadable_states_start_afresh_with_a_warning() {
        let (_dir, mut db) = db();
        let mut tx = db.begin(Millis::new(1)).unwrap();
        tx.tx
            .execute("INSERT INTO runs VALUES ('s', 'r', 1, 1, x'ff00ff')", [])
            .unwrap();
        let len = tx
            .update_run("s", Some("r"), |s, _, _| s.history().len())
            .unwrap();
        assert_eq!(len, 0);
        assert_eq!(tx.warnings().len(), 1);
    }

    #[test]
    fn a_store_file_gets_the_hook_tables_once_and_is_then_taken_as_current() {
        let (_dir, mut db) = db();
        // A file as `serve` makes it: the store's tables, none of the hooks'.
        sqlite_file::ensure_schema(&db.conn).unwrap();
        let mark = |db: &HookDb| -> Option<String> {
            db.conn
                .query_row(
                    "SELECT value FROM loopguard_meta WHERE key = 'hook_schema_version'",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .unwrap()
        };
        assert_eq!(mark(&db), None);
        let tx = db.begin(Millis::new(1)).unwrap();
        assert_eq!(tx.start_run("s").unwrap(), 1);
        tx.commit().unwrap();
        assert_eq!(mark(&db).as_deref(), Some(HOOK_SCHEMA_VERSION));
        let tx = db.begin(Millis::new(2)).unwrap();
        assert_eq!(tx.run_number("s").unwrap(), 1);
    }

    /// A session's spend is kept beside its runs: every hook process of the session reads
    /// it and adds to it, and forgetting the session forgets it.
    #[test]
    fn session_spend_is_shared_by_the_runs_of_a_session() {
        let (_dir, mut db) = db();
        let config = ConfigSet::enabled_defaults();
        let cfg = config.for_agent(None);
        for (i, run) in ["r1", "r2", "r1"].into_iter().enumerate() {
            let mut tx = db.begin(Millis::new(1_000 + i as u64)).unwrap();
            let scope = loopguard::Scope::new("s").with_run(Some(run));
            let usage = loopguard::Usage::new(100, 10).with_id(Some("u1"));
            tx.update_run("s", Some(run), |state, session, now| {
                state.usage(session, cfg, &scope, &usage, now).unwrap();
            })
            .unwrap();
            tx.commit().unwrap();
        }
        let mut tx = db.begin(Millis::new(2_000)).unwrap();
        let spent = tx.session_state("s").unwrap().unwrap();
        assert_eq!(
            spent.spend().tokens(),
            220,
            "r1's retry counted once, r2's apart"
        );
        assert_eq!(spent.spend().responses, 2);
        tx.forget_session("s").unwrap();
        assert!(tx.session_state("s").unwrap().is_none());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let (_dir, mut db) = db();
        db.begin(Millis::new(1)).unwrap().commit().unwrap();
        db.conn
            .execute(
                "UPDATE loopguard_meta SET value = '99' WHERE key = 'schema_version'",
                [],
            )
            .unwrap();
        let err = db.begin(Millis::new(1)).unwrap_err();
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }

    #[test]
    fn a_large_wal_is_folded_back_and_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lg.db");
        let options = DbOptions {
            wal_limit: 16 << 10,
            ..DbOptions::default()
        };
        let mut db = HookDb::open_with(&path, options).unwrap();
        assert!(!db.fold_wal().unwrap(), "nothing to fold yet");
        for i in 0..20 {
            let mut tx = db.begin(Millis::new(1_000 + i)).unwrap();
            call(&mut tx, "s", &format!("r{i}"));
            tx.commit().unwrap();
        }
        let wal = dir.path().join("lg.db-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 16 << 10);
        // Closing does not checkpoint: the next process would read it all again.
        drop(db);
        assert!(std::fs::metadata(&wal).unwrap().len() > 16 << 10);
        let mut db = HookDb::open_with(&path, options).unwrap();
        assert!(db.fold_wal().unwrap());
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
        drop(db);
        let mut db = HookDb::open(&path).unwrap();
        let tx = db.begin(Millis::new(2_000)).unwrap();
        for i in 0..20 {
            assert!(tx.run_state("s", Some(&format!("r{i}"))).unwrap().is_some());
        }
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, _db) = db();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("sub")), 0o700);
        assert_eq!(mode(&dir.path().join("sub/loopguard.db")), 0o600);
    }
}

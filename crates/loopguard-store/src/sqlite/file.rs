//! The layout of the SQLite state file, in one place for everything that opens it:
//! [`SqliteStore`](crate::SqliteStore) (a long-lived server) and processes that open the
//! file for a single update (the agent hooks, `loopguard hook`).
//!
//! - `loopguard_meta (key, value)` holds `schema_version` ([`SCHEMA_VERSION`]);
//! - `runs (session, run, etag, last_active, state)`, keyed by (session, run): one row per
//!   live run, `state` being `RunState::to_bytes()`, `run` the empty string for calls
//!   outside any run, `etag` a unique tag ([`fresh_tag`]) that every writer replaces, so
//!   that a compare-and-swap on it detects a write by another process, and `last_active`
//!   the run's last activity in clock milliseconds. Integers are stored as the bit
//!   patterns of the unsigned values ([`as_sql`]).
//! - `run_deltas_0` and `run_deltas_1 (seq, session, run, base, etag, last_active, delta)`:
//!   the change log ([`DELTA_TABLES`]). A row says: the run whose version is `base` became
//!   version `etag` by [`delta::apply`](crate::delta::apply) of `delta` to its state. A
//!   run's current state is its row's state with every delta whose `base` is the version
//!   reached so far applied in `seq` order ([`read_run`]); a delta whose `base` is no
//!   longer the run's version (its row was rewritten or deleted since) is dead and
//!   ignored. Appending a few dozen bytes per event to a log instead of rewriting a 4 KiB
//!   page per run is what makes `loopguard serve` fast on this file; it folds the log back
//!   into the rows as it goes and empties one table while it appends to the other. A
//!   process that writes a run's row whole (the hooks) makes the run's deltas dead by
//!   giving it a new tag, so it needs nothing but [`read_run`] to take part.
//! - `sessions (session, etag, last_active, state)`, keyed by session: the
//!   `SessionState::to_bytes()` of each session that has one (its spend), written whole,
//!   in the same transaction as the run whose event changed it, by a compare-and-swap on
//!   its tag ([`put_session`]); `last_active` is when it last changed. Schema version 3
//!   added it; a version 1 or 2 file is upgraded in place (an empty table).
//!
//! A file that holds tables but no `loopguard_meta` was made by another application:
//! [`ensure_schema`] refuses it ([`SchemaError::Foreign`]) rather than add loopguard's
//! tables to it. Tables added to a loopguard file later are left alone.

use std::collections::hash_map::{Entry, HashMap};
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

/// Version of the layout this build reads and writes. Versions 1 (no change log) and 2 (no
/// session states) are upgraded in place: they are version 3 with those tables empty.
pub const SCHEMA_VERSION: u32 = 3;

/// The two tables of the change log.
pub const DELTA_TABLES: [&str; 2] = ["run_deltas_0", "run_deltas_1"];

/// Why [`ensure_schema`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// SQLite refused.
    #[error("{0}")]
    Sql(#[from] rusqlite::Error),
    /// The file was written by a loopguard with another layout.
    #[error("database schema version {found} is not supported (this build uses {SCHEMA_VERSION})")]
    Version {
        /// The version the file holds.
        found: String,
    },
    /// The file belongs to another application: it has tables, none of them loopguard's.
    #[error("not a loopguard database: it holds tables of another application ({}); give a new file, or one loopguard created", .tables.join(", "))]
    Foreign {
        /// Some of its tables (at most 5).
        tables: Vec<String>,
    },
}

impl SchemaError {
    /// The error as a store reports it for the file at `path`: a refused file is a
    /// setting to change, an SQLite failure is the store being unavailable.
    pub fn into_store_error(self, path: &Path) -> crate::StoreError {
        let message = format!("{}: {self}", path.display());
        match self {
            Self::Sql(e) => crate::StoreError::failed(format!("cannot open {}", path.display()), e),
            Self::Version { .. } | Self::Foreign { .. } => crate::StoreError::InvalidSettings {
                message,
                source: Some(std::sync::Arc::new(self)),
            },
        }
    }
}

/// Creates the tables when missing and checks the file's layout version. Call it inside a
/// write transaction (`BEGIN IMMEDIATE`), so that two processes creating a fresh file do
/// not interleave.
pub fn ensure_schema(conn: &Connection) -> Result<(), SchemaError> {
    refuse_foreign(conn)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS loopguard_meta (
             key TEXT PRIMARY KEY,
             value TEXT NOT NULL
         );
         CREATE TABLE IF NOT EXISTS runs (
             session TEXT NOT NULL,
             run TEXT NOT NULL,
             etag INTEGER NOT NULL,
             last_active INTEGER NOT NULL,
             state BLOB NOT NULL,
             PRIMARY KEY (session, run)
         );
         CREATE TABLE IF NOT EXISTS sessions (
             session TEXT PRIMARY KEY,
             etag INTEGER NOT NULL,
             last_active INTEGER NOT NULL,
             state BLOB NOT NULL
         );",
    )?;
    for table in DELTA_TABLES {
        // No index: appends then land on the table's last page, whatever run they are of.
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (
                 seq INTEGER PRIMARY KEY,
                 session TEXT NOT NULL,
                 run TEXT NOT NULL,
                 base INTEGER NOT NULL,
                 etag INTEGER NOT NULL,
                 last_active INTEGER NOT NULL,
                 delta BLOB NOT NULL
             );"
        ))?;
    }
    conn.execute(
        "INSERT OR IGNORE INTO loopguard_meta (key, value) VALUES ('schema_version', ?1)",
        [SCHEMA_VERSION.to_string()],
    )?;
    conn.execute(
        "UPDATE loopguard_meta SET value = ?1 WHERE key = 'schema_version' AND value IN ('1', '2')",
        [SCHEMA_VERSION.to_string()],
    )?;
    let found: String = conn.query_row(
        "SELECT value FROM loopguard_meta WHERE key = 'schema_version'",
        [],
        |r| r.get(0),
    )?;
    if found != SCHEMA_VERSION.to_string() {
        return Err(SchemaError::Version { found });
    }
    Ok(())
}

/// Refuses a file with tables but no `loopguard_meta`: another application's database.
/// [`ensure_schema`] calls it; call it also before changing anything else about the file
/// (its journal mode, say).
pub fn refuse_foreign(conn: &Connection) -> Result<(), SchemaError> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
         ORDER BY name",
    )?;
    let tables = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if tables.is_empty() || tables.iter().any(|t| t == "loopguard_meta") {
        return Ok(());
    }
    Err(SchemaError::Foreign {
        tables: tables.into_iter().take(5).collect(),
    })
}

/// A run as stored: its row with the live deltas of the change log applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRun {
    /// `RunState::to_bytes()` of the current state.
    pub state: Vec<u8>,
    /// The current version: the row's tag, or the last live delta's.
    pub etag: u64,
    /// The tag of the row itself.
    pub row_etag: u64,
    /// Last activity, clock milliseconds.
    pub last_active: u64,
}

impl StoredRun {
    /// Whether deltas were applied to the row (it is not the current state by itself).
    pub fn has_deltas(&self) -> bool {
        self.etag != self.row_etag
    }

    /// Applies one delta of the log if it continues this run's chain; a delta that does
    /// not apply ends the chain (the state stays at the version before it), and is the
    /// one case that returns false.
    fn follow(&mut self, base: u64, etag: u64, last_active: u64, delta: &[u8]) -> bool {
        if base != self.etag {
            return true;
        }
        match crate::delta::apply(&self.state, delta) {
            Ok(state) => {
                self.state = state;
                self.etag = etag;
                self.last_active = last_active;
                true
            }
            Err(_) => false,
        }
    }
}

/// The deltas of both tables in log order, of one run (`?1`, `?2`) or of every run.
fn delta_query(one_run: bool) -> String {
    let filter = if one_run {
        " WHERE session = ?1 AND run = ?2"
    } else {
        ""
    };
    let [a, b] = DELTA_TABLES;
    format!(
        "SELECT session, run, base, etag, last_active, delta, seq FROM {a}{filter}
         UNION ALL
         SELECT session, run, base, etag, last_active, delta, seq FROM {b}{filter}
         ORDER BY seq"
    )
}

/// Applies the delta of a [`delta_query`] row to `stored`, if it continues its chain.
fn follow_row(stored: &mut StoredRun, r: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
    let delta: &[u8] = r.get_ref(5)?.as_blob()?;
    let applied = stored.follow(
        r.get::<_, i64>(2)? as u64,
        r.get::<_, i64>(3)? as u64,
        r.get::<_, i64>(4)? as u64,
        delta,
    );
    if !applied {
        // Only corruption does this: say which run lost its latest events.
        tracing::warn!(
            target: "loopguard::store",
            session = %r.get_ref(0)?.as_str().unwrap_or("?"),
            run = %r.get_ref(1)?.as_str().unwrap_or("?"),
            seq = r.get::<_, i64>(6)?,
            "a logged change of this run cannot be applied; the run keeps its state from before it"
        );
    }
    Ok(())
}

/// The row of (`session`, `run`) alone.
fn read_row(conn: &Connection, session: &str, run: &str) -> rusqlite::Result<Option<StoredRun>> {
    conn.prepare_cached(
        "SELECT state, etag, last_active FROM runs WHERE session = ?1 AND run = ?2",
    )?
    .query_row(params![session, run], |r| {
        let etag = r.get::<_, i64>(1)? as u64;
        Ok(StoredRun {
            state: r.get(0)?,
            etag,
            row_etag: etag,
            last_active: r.get::<_, i64>(2)? as u64,
        })
    })
    .optional()
}

/// Replaces the row of (`session`, `run`) with a new state under tag `etag`, if the row
/// holds version `expected` (a compare-and-swap); returns whether it did.
pub fn replace_row(
    conn: &Connection,
    session: &str,
    run: &str,
    expected: u64,
    etag: u64,
    last_active: u64,
    state: &[u8],
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE runs SET etag = ?3, last_active = ?4, state = ?5
             WHERE session = ?1 AND run = ?2 AND etag = ?6",
        )?
        .execute(params![
            session,
            run,
            as_sql(etag),
            as_sql(last_active),
            state,
            as_sql(expected)
        ])?;
    Ok(changed == 1)
}

/// A session's state as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// `SessionState::to_bytes()`.
    pub state: Vec<u8>,
    /// Its tag.
    pub etag: u64,
    /// When it last changed, clock milliseconds.
    pub last_active: u64,
}

/// The stored state of `session`, when it has one.
pub fn read_session_state(
    conn: &Connection,
    session: &str,
) -> rusqlite::Result<Option<StoredSession>> {
    conn.prepare_cached("SELECT state, etag, last_active FROM sessions WHERE session = ?1")?
        .query_row([session], |r| {
            Ok(StoredSession {
                state: r.get(0)?,
                etag: r.get::<_, i64>(1)? as u64,
                last_active: r.get::<_, i64>(2)? as u64,
            })
        })
        .optional()
}

/// The tag of `session`'s stored state, when it has one.
pub fn session_tag(conn: &Connection, session: &str) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached("SELECT etag FROM sessions WHERE session = ?1")?
        .query_row([session], |r| r.get::<_, i64>(0))
        .optional()
        .map(|t| t.map(|t| t as u64))
}

/// Writes `session`'s state under tag `etag` (replacing what it holds: check its tag first
/// with [`session_tag`] inside the same transaction when it matters).
pub fn put_session(
    conn: &Connection,
    session: &str,
    etag: u64,
    last_active: u64,
    state: &[u8],
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO sessions (session, etag, last_active, state) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session) DO UPDATE SET
             etag = excluded.etag, last_active = excluded.last_active, state = excluded.state",
    )?
    .execute(params![session, as_sql(etag), as_sql(last_active), state])?;
    Ok(())
}

/// Deletes the stored state of `session`. Returns whether there was one.
pub fn delete_session(conn: &Connection, session: &str) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached("DELETE FROM sessions WHERE session = ?1")?
        .execute([session])?
        > 0)
}

/// Reads the current state of (`session`, `run`) (`run` is `""` outside any run): its row,
/// then its live deltas. Without an index on the log this scans it, which the server keeps
/// short (a few thousand rows at most).
pub fn read_run(
    conn: &Connection,
    session: &str,
    run: &str,
) -> rusqlite::Result<Option<StoredRun>> {
    let Some(mut stored) = read_row(conn, session, run)? else {
        return Ok(None);
    };
    let mut stmt = conn.prepare_cached(&delta_query(true))?;
    let mut rows = stmt.query(params![session, run])?;
    while let Some(r) = rows.next()? {
        follow_row(&mut stored, r)?;
    }
    Ok(Some(stored))
}

/// Folds the whole change log back into the rows and empties it: every run with live
/// deltas gets its current state written to its row, under its current tag. Returns the
/// rows rewritten. Call it inside a write transaction.
pub fn fold_deltas(conn: &Connection) -> rusqlite::Result<usize> {
    let mut runs: HashMap<(String, String), Option<StoredRun>> = HashMap::new();
    {
        let mut stmt = conn.prepare(&delta_query(false))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let key: (String, String) = (r.get(0)?, r.get(1)?);
            let stored = match runs.entry(key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    let row = read_row(conn, &e.key().0, &e.key().1)?;
                    e.insert(row)
                }
            };
            if let Some(stored) = stored {
                follow_row(stored, r)?;
            }
        }
    }
    let mut written = 0;
    for ((session, run), stored) in &runs {
        if let Some(s) = stored.as_ref().filter(|s| s.has_deltas()) {
            let (etag, at) = (s.etag, s.last_active);
            written += usize::from(replace_row(
                conn, session, run, s.row_etag, etag, at, &s.state,
            )?);
        }
    }
    for table in DELTA_TABLES {
        conn.execute_batch(&format!("DELETE FROM {table};"))?;
    }
    Ok(written)
}

/// Deletes the rows of runs idle since before `cutoff` (clock milliseconds), at most
/// `limit` of them: a run whose row is older but whose deltas are not is live. Session
/// states unchanged since before `cutoff` go too (as many). Returns the run rows deleted.
pub fn delete_idle(conn: &Connection, cutoff: u64, limit: Option<u32>) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM sessions WHERE rowid IN
             (SELECT rowid FROM sessions WHERE last_active < ?1 LIMIT ?2)",
    )?
    .execute(params![as_sql(cutoff), limit.map_or(-1, i64::from)])?;
    let [a, b] = DELTA_TABLES;
    let sql = format!(
        "DELETE FROM runs WHERE rowid IN
             (SELECT rowid FROM runs WHERE last_active < ?1
              AND (session, run) NOT IN
                  (SELECT session, run FROM {a} WHERE last_active >= ?1
                   UNION ALL
                   SELECT session, run FROM {b} WHERE last_active >= ?1)
              LIMIT ?2)"
    );
    let limit = limit.map_or(-1, i64::from);
    conn.prepare_cached(&sql)?
        .execute(params![as_sql(cutoff), limit])
}

/// A tag for a row about to be written: unique among the writes of this process, and
/// astronomically unlikely to be used by another one.
pub fn fresh_tag() -> u64 {
    crate::etag::next()
}

/// SQLite integers are signed; tags and times are stored as their bit patterns.
pub fn as_sql(v: u64) -> i64 {
    v as i64
}

/// Creates the database file, and its directory, readable by the owner only (SQLite gives
/// the `-wal` and `-shm` files the file's permissions); what exists is left as it is.
/// Returns the path that could not be created with the error.
pub fn create_private(path: &Path) -> Result<(), (&Path, std::io::Error)> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(|e| (dir, e))?;
    }
    create_private_file(path).map_err(|e| (path, e))
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_created_once_and_checked() {
        let conn = Connection::open_in_memory().unwrap();
        ensure_schema(&conn).unwrap();
        ensure_schema(&conn).unwrap();
        conn.execute(
            "UPDATE loopguard_meta SET value = '99' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
        let err = ensure_schema(&conn).unwrap_err();
        assert!(matches!(&err, SchemaError::Version { found } if found == "99"));
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }

    /// Another application's file gets no loopguard table, whatever its tables are
    /// called; tables added to a loopguard file later are no reason to refuse it.
    #[test]
    fn another_applications_file_is_refused_untouched() {
        let tables = |conn: &Connection| -> Vec<String> {
            conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        for schema in [
            "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);",
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, started TEXT); CREATE TABLE jobs (x);",
        ] {
            let conn = Connection::open_in_memory().unwrap();
            conn.execute_batch(schema).unwrap();
            let before = tables(&conn);
            let err = ensure_schema(&conn).unwrap_err();
            assert!(
                matches!(&err, SchemaError::Foreign { tables } if *tables == before),
                "{err}"
            );
            assert!(
                err.to_string().starts_with("not a loopguard database"),
                "{err}"
            );
            assert_eq!(tables(&conn), before, "nothing was added");
        }
        let conn = Connection::open_in_memory().unwrap();
        ensure_schema(&conn).unwrap();
        conn.execute_batch("CREATE TABLE notes (x);").unwrap();
        ensure_schema(&conn).unwrap();
    }

    #[test]
    fn a_version_1_file_is_upgraded_in_place() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE loopguard_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO loopguard_meta VALUES ('schema_version', '1');
             CREATE TABLE runs (session TEXT NOT NULL, run TEXT NOT NULL, etag INTEGER NOT NULL,
                 last_active INTEGER NOT NULL, state BLOB NOT NULL, PRIMARY KEY (session, run));
             INSERT INTO runs VALUES ('s', 'r', 7, 100, x'0102');",
        )
        .unwrap();
        ensure_schema(&conn).unwrap();
        let version: String = conn
            .query_row("SELECT value FROM loopguard_meta", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION.to_string());
        let run = read_run(&conn, "s", "r").unwrap().unwrap();
        assert_eq!((run.state, run.etag), (vec![1, 2], 7));
    }

    /// A file with run ("s", "r") at version 1 (`old`), and a log that takes it to version
    /// 3 (`v3`) through both tables, with a dead delta of a former chain in between.
    fn chained(old: &[u8], v2: &[u8], v3: &[u8]) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        ensure_schema(&conn).unwrap();
        conn.execute(
            "INSERT INTO runs VALUES ('s', 'r', 1, 100, ?1)",
            params![old],
        )
        .unwrap();
        let delta = |a: &[u8], b: &[u8]| crate::delta::diff(a, b).unwrap();
        let [t0, t1] = DELTA_TABLES;
        let insert = |table: &str, seq: i64, base: i64, etag: i64, at: i64, d: Vec<u8>| {
            conn.execute(
                &format!("INSERT INTO {table} VALUES (?1, 's', 'r', ?2, ?3, ?4, ?5)"),
                params![seq, base, etag, at, d],
            )
            .unwrap();
        };
        insert(t1, 1, 9, 10, 90, delta(old, v3)); // dead: base 9 is no version of the run
        insert(t0, 2, 1, 2, 200, delta(old, v2));
        insert(t1, 3, 2, 3, 300, delta(v2, v3));
        conn
    }

    fn states() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let old: Vec<u8> = (0..200u8).collect();
        let mut v2 = old.clone();
        v2[50..60].fill(0xaa);
        let mut v3 = v2[20..].to_vec();
        v3.extend_from_slice(b"a new record");
        (old, v2, v3)
    }

    #[test]
    fn a_run_is_its_row_with_its_live_deltas() {
        let (old, v2, v3) = states();
        let conn = chained(&old, &v2, &v3);
        let run = read_run(&conn, "s", "r").unwrap().unwrap();
        assert_eq!(run.state, v3);
        assert_eq!((run.etag, run.row_etag, run.last_active), (3, 1, 300));
        assert!(run.has_deltas());
        assert_eq!(read_run(&conn, "s", "other").unwrap(), None);

        // A whole-row write (a hook) gives the row a new tag: every delta is dead.
        conn.execute("UPDATE runs SET etag = 5, state = x'00'", [])
            .unwrap();
        let run = read_run(&conn, "s", "r").unwrap().unwrap();
        assert_eq!((run.state, run.etag), (vec![0], 5));
    }

    #[test]
    fn a_corrupt_delta_ends_the_chain_before_it() {
        let (old, v2, v3) = states();
        let conn = chained(&old, &v2, &v3);
        conn.execute(
            &format!("UPDATE {} SET delta = x'ff' WHERE seq = 3", DELTA_TABLES[1]),
            [],
        )
        .unwrap();
        let run = read_run(&conn, "s", "r").unwrap().unwrap();
        assert_eq!((run.state, run.etag, run.last_active), (v2, 2, 200));
    }

    #[test]
    fn folding_writes_the_current_states_and_empties_the_log() {
        let (old, v2, v3) = states();
        let conn = chained(&old, &v2, &v3);
        assert_eq!(fold_deltas(&conn).unwrap(), 1);
        for table in DELTA_TABLES {
            let n: i64 = conn
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap();
            assert_eq!(n, 0);
        }
        let run = read_run(&conn, "s", "r").unwrap().unwrap();
        assert_eq!(
            (run.state, run.etag, run.row_etag, run.last_active),
            (v3, 3, 3, 300)
        );
    }

    #[test]
    fn a_row_with_recent_deltas_is_not_idle() {
        let (old, v2, v3) = states();
        let conn = chained(&old, &v2, &v3);
        conn.execute("INSERT INTO runs VALUES ('s', 'idle', 1, 100, x'00')", [])
            .unwrap();
        // Both rows were written at 100; only "s"/"r" has deltas since (at 200 and 300).
        assert_eq!(delete_idle(&conn, 250, None).unwrap(), 1);
        assert!(read_run(&conn, "s", "r").unwrap().is_some());
        assert!(read_run(&conn, "s", "idle").unwrap().is_none());
        assert_eq!(delete_idle(&conn, 400, None).unwrap(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/loopguard.db");
        create_private(&path).unwrap();
        create_private(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("sub")), 0o700);
        assert_eq!(mode(&path), 0o600);
    }
}

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
//!
//! Other programs may keep tables of their own in the same file.

use std::path::Path;

use rusqlite::Connection;

/// Version of the layout this build reads and writes.
pub const SCHEMA_VERSION: u32 = 1;

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
}

/// Creates the tables when missing and checks the file's layout version. Call it inside a
/// write transaction (`BEGIN IMMEDIATE`), so that two processes creating a fresh file do
/// not interleave.
pub fn ensure_schema(conn: &Connection) -> Result<(), SchemaError> {
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
         );",
    )?;
    conn.execute(
        "INSERT OR IGNORE INTO loopguard_meta (key, value) VALUES ('schema_version', ?1)",
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
            "UPDATE loopguard_meta SET value = '2' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
        let err = ensure_schema(&conn).unwrap_err();
        assert!(matches!(&err, SchemaError::Version { found } if found == "2"));
        assert!(err.to_string().contains("schema version 2"), "{err}");
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

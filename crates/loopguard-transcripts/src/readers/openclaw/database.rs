//! OpenClaw 2026.9 and later keep an agent's transcripts in its SQLite database
//! (`agents/<agent>/agent/openclaw-agent.sqlite`) instead of JSON Lines files. Each
//! transcript is a session window (`session_windows`: a session id, the session key it
//! belongs to, the key of the session that spawned it) and its events
//! (`transcript_events`, by `seq`): the very entries a transcript file holds, one per row,
//! as JSON text or, once large, compressed with zstd (`event_zstd`, with the size of the
//! text it holds). A transcript read here is those entries joined into lines and read by
//! the file reader, so a database and the files it replaced scan alike.
//!
//! The database is opened read-only and never written: OpenClaw may be running.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::SessionStore;

/// The file name OpenClaw gives an agent's database.
pub const FILE_NAME: &str = "openclaw-agent.sqlite";

/// Largest event decompressed: OpenClaw stores none larger (a constraint of its schema).
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// The part of OpenClaw's schema this reader uses (its tables hold more columns, and it
/// has many more tables): what a test writes to make a database of OpenClaw's shape.
pub const READ_SCHEMA: &str = "\
    CREATE TABLE session_windows (session_id TEXT PRIMARY KEY, session_key TEXT NOT NULL, \
      created_at INTEGER NOT NULL, parent_session_key TEXT, spawned_by TEXT, \
      updated_at INTEGER NOT NULL DEFAULT 0, transcript_updated_at INTEGER);
    CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, \
      event_json TEXT, created_at INTEGER NOT NULL, event_zstd BLOB, \
      event_utf8_bytes INTEGER, PRIMARY KEY (session_id, seq));";

/// Writing a database of OpenClaw's shape: what tests, benchmarks and fuzz targets use to
/// make one (the reader never writes). The tables are [`READ_SCHEMA`]'s; an event is kept
/// as OpenClaw keeps it, as text, or compressed with zstd from [`fixture::COMPRESSED_FROM`]
/// bytes on.
#[doc(hidden)]
pub mod fixture {
    use rusqlite::{params, Connection};

    /// Events this long or longer are stored compressed.
    pub const COMPRESSED_FROM: usize = 1024;

    /// Creates the tables the reader uses in `db`.
    pub fn create(db: &Connection) -> rusqlite::Result<()> {
        db.execute_batch(super::READ_SCHEMA)
    }

    /// Adds the transcript `session` of the session `key` (spawned by the session
    /// `spawned_by`), created at `created_at` (milliseconds since the Unix epoch).
    pub fn add_window(
        db: &Connection,
        session: &str,
        key: &str,
        created_at: i64,
        spawned_by: Option<&str>,
    ) -> rusqlite::Result<()> {
        db.execute(
            "INSERT INTO session_windows (session_id, session_key, created_at, spawned_by) \
             VALUES (?1, ?2, ?3, ?4)",
            params![session, key, created_at, spawned_by],
        )
        .map(drop)
    }

    /// Adds `lines` (a transcript file's lines, blank ones left out) as the events of
    /// `session`, numbered from 0.
    pub fn add_events<'a>(
        db: &Connection,
        session: &str,
        lines: impl IntoIterator<Item = &'a str>,
    ) -> rusqlite::Result<()> {
        let lines = lines.into_iter().filter(|l| !l.trim().is_empty());
        for (seq, line) in lines.enumerate() {
            let seq = seq as i64;
            if line.len() >= COMPRESSED_FROM {
                let compressed = zstd::bulk::compress(line.as_bytes(), 1)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                db.execute(
                    "INSERT INTO transcript_events VALUES (?1, ?2, NULL, 0, ?3, ?4)",
                    params![session, seq, compressed, line.len() as i64],
                )?;
            } else {
                db.execute(
                    "INSERT INTO transcript_events VALUES (?1, ?2, ?3, 0, NULL, NULL)",
                    params![session, seq, line],
                )?;
            }
        }
        Ok(())
    }
}

/// One transcript of the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Its session id (the transcript file's name before).
    pub session: String,
    /// The session key it belongs to (`agent:main:main`, `agent:main:subagent:…`).
    pub key: String,
    /// The key of the session that spawned it, if one did.
    pub parent_key: Option<String>,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at: i64,
    /// When it last changed (its record or its transcript), in milliseconds since the
    /// Unix epoch.
    pub updated_at: i64,
}

/// An agent database, open for reading.
pub struct Database {
    connection: Connection,
    /// The query of a transcript's events, for the columns this database has.
    events_sql: String,
    /// One zstd context for every event (making one per event was a fifth of a scan).
    decompressor: zstd::bulk::Decompressor<'static>,
}

/// What reading one transcript out of the database found besides its lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The transcript as the file reader reads it: one entry per line.
    pub lines: Vec<u8>,
    /// Events that could not be decompressed (or were larger than [`MAX_EVENT_BYTES`]):
    /// left out, counted.
    pub undecodable: u64,
    /// Events left out because the transcript had reached the size it may take.
    pub left_out: u64,
}

fn sql_error(e: rusqlite::Error) -> io::Error {
    io::Error::other(format!("OpenClaw database: {e}"))
}

impl Database {
    /// Opens the database at `path` read-only.
    pub fn open(path: &Path) -> io::Result<Self> {
        let connection = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql_error)?;
        // A database another process holds: wait for its writes rather than fail.
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql_error)?;
        let decompressor = zstd::bulk::Decompressor::new()?;
        let columns = table_columns(&connection, "transcript_events")?;
        require(
            "transcript_events",
            &columns,
            &["session_id", "seq", "event_json"],
        )?;
        // Builds before the compressed form kept every event as text.
        let compressed = ["event_zstd", "event_utf8_bytes"]
            .iter()
            .all(|c| columns.contains(*c));
        let events_sql = format!(
            "SELECT event_json, {} FROM transcript_events WHERE session_id = ?1 ORDER BY seq",
            if compressed {
                "event_zstd, event_utf8_bytes"
            } else {
                "NULL, NULL"
            }
        );
        Ok(Self {
            connection,
            events_sql,
            decompressor,
        })
    }

    /// Its transcripts, oldest first. The columns a build of OpenClaw lacks are read as
    /// absent (no parent, no later change than its creation).
    pub fn windows(&self) -> io::Result<Vec<Window>> {
        let columns = table_columns(&self.connection, "session_windows")?;
        require("session_windows", &columns, &["session_id", "session_key"])?;
        let has = |c: &str| columns.contains(c);
        let parents: Vec<&str> = ["spawned_by", "parent_session_key"]
            .into_iter()
            .filter(|c| has(c))
            .collect();
        let parent = match parents.as_slice() {
            [] => "NULL".to_owned(),
            [one] => (*one).to_owned(),
            many => format!("coalesce({})", many.join(", ")),
        };
        let created = if has("created_at") {
            "coalesce(created_at, 0)"
        } else {
            "0"
        };
        let mut times = vec![created.to_owned()];
        times.extend(
            ["updated_at", "transcript_updated_at"]
                .into_iter()
                .filter(|c| has(c))
                .map(|c| format!("coalesce({c}, 0)")),
        );
        // `max` of one argument is SQLite's aggregate: only a list takes the scalar one.
        let updated = match times.as_slice() {
            [one] => one.clone(),
            many => format!("max({})", many.join(", ")),
        };
        let mut statement = self
            .connection
            .prepare(&format!(
                "SELECT session_id, session_key, {parent}, {created}, {updated} \
                 FROM session_windows ORDER BY 4, session_id"
            ))
            .map_err(sql_error)?;
        let rows = statement
            .query_map([], |row| {
                Ok(Window {
                    session: row.get(0)?,
                    key: row.get(1)?,
                    parent_key: row.get(2)?,
                    created_at: row.get(3)?,
                    updated_at: row.get(4)?,
                })
            })
            .map_err(sql_error)?;
        rows.collect::<Result<_, _>>().map_err(sql_error)
    }

    /// The transcript of `session`: its events in order, one per line, up to `max_bytes`
    /// of lines (the events past it are counted, not kept).
    pub fn transcript(&mut self, session: &str, max_bytes: usize) -> io::Result<Extracted> {
        let mut statement = self
            .connection
            .prepare_cached(&self.events_sql)
            .map_err(sql_error)?;
        let mut rows = statement.query([session]).map_err(sql_error)?;
        let mut out = Extracted::default();
        while let Some(row) = rows.next().map_err(sql_error)? {
            let text: Option<String> = row.get(0).map_err(sql_error)?;
            let event = match text {
                Some(text) => text.into_bytes(),
                None => {
                    let compressed: Option<Vec<u8>> = row.get(1).map_err(sql_error)?;
                    let size: Option<i64> = row.get(2).map_err(sql_error)?;
                    let decompressor = &mut self.decompressor;
                    match compressed
                        .zip(size)
                        .and_then(|(c, n)| decompress(decompressor, &c, n))
                    {
                        Some(event) => event,
                        None => {
                            out.undecodable += 1;
                            continue;
                        }
                    }
                }
            };
            if out.left_out > 0 || out.lines.len() + event.len() + 1 > max_bytes {
                out.left_out += 1;
                continue;
            }
            // An entry is one line: a newline inside it (JSON has none outside strings)
            // would split it.
            let start = out.lines.len();
            out.lines.extend_from_slice(&event);
            if memchr::memchr(b'\n', &event).is_some() {
                for b in &mut out.lines[start..] {
                    if *b == b'\n' {
                        *b = b' ';
                    }
                }
            }
            out.lines.push(b'\n');
        }
        Ok(out)
    }

    /// The session store the windows make: each spawned transcript's parent transcript
    /// (the window of its parent key current when it was created) and its own key.
    pub fn store(windows: &[Window]) -> SessionStore {
        let mut by_key: HashMap<&str, Vec<&Window>> = HashMap::new();
        for window in windows {
            by_key.entry(&window.key).or_default().push(window);
        }
        let mut parents = HashMap::new();
        for window in windows {
            let Some(parent_key) = window.parent_key.as_deref() else {
                continue;
            };
            // The windows are oldest first: the parent's last one created before the child.
            let parent = by_key.get(parent_key).and_then(|list| {
                list.iter()
                    .rev()
                    .find(|w| w.created_at <= window.created_at)
                    .or(list.first())
            });
            let parent = parent.map_or(parent_key, |w| w.session.as_str());
            if parent != window.session {
                parents.insert(
                    window.session.clone(),
                    (parent.to_owned(), window.key.clone()),
                );
            }
        }
        SessionStore::from_parents(parents)
    }
}

/// The columns of `table` (none when there is no such table).
fn table_columns(connection: &Connection, table: &str) -> io::Result<HashSet<String>> {
    let mut statement = connection
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .map_err(sql_error)?;
    let names = statement
        .query_map([table], |row| row.get::<_, String>(0))
        .map_err(sql_error)?;
    names.collect::<Result<_, _>>().map_err(sql_error)
}

/// An error naming what `table` lacks of `needed`, if anything.
fn require(table: &str, columns: &HashSet<String>, needed: &[&str]) -> io::Result<()> {
    let missing: Vec<&str> = needed
        .iter()
        .copied()
        .filter(|c| !columns.contains(*c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(io::Error::other(if columns.is_empty() {
        format!("OpenClaw database: no table {table} (not an OpenClaw agent database?)")
    } else {
        format!(
            "OpenClaw database: table {table} has no column {} (a build of OpenClaw this reader does not know)",
            missing.join(", ")
        )
    }))
}

/// The text of a compressed event stored as `size` bytes, if it decompresses to that.
fn decompress(
    decompressor: &mut zstd::bulk::Decompressor<'_>,
    compressed: &[u8],
    size: i64,
) -> Option<Vec<u8>> {
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| n <= MAX_EVENT_BYTES)?;
    let text = decompressor.decompress(compressed, size).ok()?;
    (text.len() == size).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database of OpenClaw's shape (the columns read here), written by the test.
    fn database(dir: &Path) -> std::path::PathBuf {
        let path = dir.join(FILE_NAME);
        let db = Connection::open(&path).unwrap();
        fixture::create(&db).unwrap();
        db.execute_batch(
            "INSERT INTO session_windows (session_id, session_key, created_at, spawned_by) VALUES
               ('p1', 'agent:main:main', 1, NULL),
               ('c1', 'agent:main:subagent:x', 5, 'agent:main:main'),
               ('p2', 'agent:main:main', 9, NULL);
             UPDATE session_windows SET transcript_updated_at = 20 WHERE session_id = 'c1';",
        )
        .unwrap();
        let big = format!(r#"{{"type":"custom","data":"{}"}}"#, "x".repeat(3000));
        let compressed = zstd::bulk::compress(big.as_bytes(), 1).unwrap();
        db.execute(
            "INSERT INTO transcript_events VALUES ('c1', 1, NULL, 0, ?1, ?2)",
            rusqlite::params![compressed, big.len() as i64],
        )
        .unwrap();
        db.execute(
            "INSERT INTO transcript_events VALUES ('c1', 0, '{\"type\":\"session\",\n\"id\":\"c1\"}', 0, NULL, NULL)",
            [],
        )
        .unwrap();
        db.execute(
            "INSERT INTO transcript_events VALUES ('c1', 2, NULL, 0, x'00', 7)",
            [],
        )
        .unwrap();
        path
    }

    #[test]
    fn transcripts_come_out_as_lines_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Database::open(&database(dir.path())).unwrap();
        let windows = db.windows().unwrap();
        assert_eq!(
            windows
                .iter()
                .map(|w| w.session.as_str())
                .collect::<Vec<_>>(),
            ["p1", "c1", "p2"]
        );
        let out = db.transcript("c1", usize::MAX).unwrap();
        let text = String::from_utf8(out.lines).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], r#"{"type":"session", "id":"c1"}"#);
        assert!(lines[1].starts_with(r#"{"type":"custom""#) && lines[1].len() > 3000);
        // The row whose blob is not zstd is counted, not read.
        assert_eq!((out.undecodable, out.left_out), (1, 0));
        // A cap leaves out what does not fit, and counts it.
        let capped = db.transcript("c1", 100).unwrap();
        assert_eq!((capped.lines.len(), capped.left_out), (30, 1));
    }

    #[test]
    fn a_child_names_the_parent_window_of_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(&database(dir.path())).unwrap();
        let store = Database::store(&db.windows().unwrap());
        assert_eq!(store.parent_of("c1"), Some("p1"));
        assert_eq!(store.key_of("c1"), Some("agent:main:subagent:x"));
        assert_eq!(store.parent_of("p2"), None);
    }

    /// A build whose tables lack the compressed form, the parents and the update times:
    /// read with what it has.
    #[test]
    fn an_older_schema_is_read_with_what_it_has() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let db = Connection::open(&path).unwrap();
        db.execute_batch(
            "CREATE TABLE session_windows (session_id TEXT, session_key TEXT, created_at INTEGER);
             CREATE TABLE transcript_events (session_id TEXT, seq INTEGER, event_json TEXT);
             INSERT INTO session_windows VALUES ('s', 'agent:main:main', 3);
             INSERT INTO transcript_events VALUES ('s', 0, '{\"type\":\"session\"}');",
        )
        .unwrap();
        drop(db);
        let mut db = Database::open(&path).unwrap();
        let windows = db.windows().unwrap();
        assert_eq!(
            windows,
            [Window {
                session: "s".into(),
                key: "agent:main:main".into(),
                parent_key: None,
                created_at: 3,
                updated_at: 3,
            }]
        );
        let out = db.transcript("s", usize::MAX).unwrap();
        assert_eq!(out.lines, b"{\"type\":\"session\"}\n");
    }

    #[test]
    fn a_database_of_something_else_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE notes (text TEXT);")
            .unwrap();
        let error = Database::open(&path).err().unwrap().to_string();
        assert!(error.contains("no table transcript_events"), "{error}");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, b"not sqlite at all, just text").unwrap();
        let opened = Database::open(&path).and_then(|db| db.windows());
        assert!(opened
            .unwrap_err()
            .to_string()
            .contains("OpenClaw database"));
    }

    #[test]
    fn oversized_or_lying_sizes_are_refused() {
        let text = b"{\"a\":1}";
        let compressed = zstd::bulk::compress(text, 1).unwrap();
        let mut z = zstd::bulk::Decompressor::new().unwrap();
        assert_eq!(
            decompress(&mut z, &compressed, 7).as_deref(),
            Some(&text[..])
        );
        assert_eq!(decompress(&mut z, &compressed, 6), None);
        assert_eq!(decompress(&mut z, &compressed, 8), None);
        assert_eq!(decompress(&mut z, &compressed, -1), None);
        assert_eq!(
            decompress(&mut z, &compressed, MAX_EVENT_BYTES as i64 + 1),
            None
        );
        // The context is used again after a failure.
        assert_eq!(
            decompress(&mut z, &compressed, 7).as_deref(),
            Some(&text[..])
        );
    }
}

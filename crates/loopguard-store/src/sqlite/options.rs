//! How an [`SqliteStore`](crate::SqliteStore)(super::SqliteStore) uses its file.

use std::time::Duration;

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

/// How an [`SqliteStore`](crate::SqliteStore) uses its file.
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

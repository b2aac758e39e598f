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

mod change_log;
mod checkpoint;
pub mod file;
mod options;
mod store;
mod writer;

pub use options::{SqliteOptions, Synchronous};
pub use store::SqliteStore;

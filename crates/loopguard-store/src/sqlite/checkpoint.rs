//! The checkpoint thread: folds the WAL back into the database file beside the writer.
//!
//! It has its own connection and runs `PRAGMA wal_checkpoint(PASSIVE)` every
//! [`CHECKPOINT_EVERY`]. A passive checkpoint never blocks the writer (it copies the frames
//! no reader still needs and stops where it would have to wait), so a commit never pays
//! for a checkpoint, and a page rewritten many times in between is copied once.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use super::SqliteOptions;
use crate::StoreError;

/// How often the WAL is checkpointed.
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The checkpoint thread: asked to stop by dropping the sender, then joined.
pub(super) struct Checkpointer {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Checkpointer {
    /// Opens a connection to `path` and starts the thread.
    pub(super) fn spawn(path: &Path, options: &SqliteOptions) -> Result<Self, StoreError> {
        let opened = Connection::open(path).and_then(|conn| {
            conn.busy_timeout(options.busy_timeout)?;
            Ok(conn)
        });
        let conn =
            opened.map_err(|e| StoreError::failed("cannot open the checkpoint connection", e))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("lg-store-ckpt".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::warn!(target: "loopguard::store", error = %e, "checkpoint failed");
                    }
                }
            })
            .map_err(|e| StoreError::failed("cannot start the checkpoint thread", e))?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread and waits for it (at most one checkpoint's time).
    pub(super) fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

//! [`StoreError`]: what can go wrong in a store, typed by what the caller does about it.
//!
//! - [`StoreError::SessionLimit`]: the guard is full; not a failure of the backend.
//! - [`StoreError::Unavailable`], [`StoreError::Deadline`], [`StoreError::Contention`]: the
//!   backend failed for this operation and the same operation may succeed later
//!   ([`StoreError::is_transient`]); the cause is kept as a [`std::error::Error`] source
//!   (the `rusqlite`, `redis` or I/O error itself).
//! - [`StoreError::InvalidSettings`]: the store cannot work as configured (a URL, a prefix, a
//!   certificate or a database file it refuses, credentials Redis refuses); retrying will
//!   not help.
//! - [`StoreError::Closed`]: the store was closed.
//!
//! Which HTTP status each one is belongs to the server, not here.

use std::borrow::Cow;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

/// The underlying error of a failure, shared so that one failed commit can fail every
/// update it carried.
pub type Cause = Arc<dyn Error + Send + Sync + 'static>;

/// Why a store could not do what it was asked. Every variant leaves the state as it was
/// before the failed operation.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The event would open a session beyond [`crate::Limits::max_sessions`].
    #[error("session limit reached: {limit} sessions are live; idle ones expire, or end sessions that are over")]
    SessionLimit {
        /// The limit.
        limit: usize,
    },
    /// The backend cannot be used now (disk full, I/O error, database locked by another
    /// process for too long, Redis unreachable or refusing writes). Retrying later may
    /// succeed.
    #[error("store unavailable: {source}")]
    Unavailable {
        /// What failed.
        #[source]
        source: Cause,
    },
    /// The backend did not answer within the deadline of the operation.
    #[error("store unavailable: the store did not answer within the deadline of {} ms", limit.as_millis())]
    Deadline {
        /// The deadline.
        limit: Duration,
    },
    /// Other writers kept changing this run's state while the update was retried.
    #[error("the state of this run kept changing under concurrent writers; gave up after {attempts} attempts")]
    Contention {
        /// Attempts made.
        attempts: u32,
    },
    /// Not attempted: an earlier update of the same [`Store::update_all`](crate::Store::update_all)
    /// failed, and later ones are not applied without it (their order matters).
    #[error("not applied: an earlier event of the request could not be applied")]
    NotAttempted,
    /// The store was closed; it takes no more operations.
    #[error("store unavailable: the store is closed")]
    Closed,
    /// The store cannot work with these settings; retrying will not help.
    #[error("{message}")]
    InvalidSettings {
        /// What is wrong, and what to do about it.
        message: String,
        /// The error behind it, if any.
        #[source]
        source: Option<Cause>,
    },
}

impl StoreError {
    /// A backend failure caused by `source`.
    pub fn unavailable(source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self::Unavailable {
            source: Arc::from(source.into()),
        }
    }

    /// A backend failure while doing `context`, caused by `source`.
    pub fn failed(
        context: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Self::unavailable(Failed::new(context, source))
    }

    /// Settings the store refuses.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidSettings {
            message: message.into(),
            source: None,
        }
    }

    /// Whether the backend failed for this operation and the same operation may succeed
    /// later: [`StoreError::Unavailable`], [`StoreError::Deadline`] and
    /// [`StoreError::Contention`].
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::Deadline { .. } | Self::Contention { .. }
        )
    }
}

/// When the store work of one request must be done: a point in time, and the limit it was
/// set from (for the error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// The point in time.
    pub at: tokio::time::Instant,
    /// How long it was from its start.
    pub limit: Duration,
}

impl Deadline {
    /// A deadline `limit` from now.
    pub fn after(limit: Duration) -> Self {
        Self {
            at: tokio::time::Instant::now() + limit,
            limit,
        }
    }

    /// Runs `op`, failing with [`StoreError::Deadline`] if it is not done in time.
    pub async fn bound<T>(
        self,
        op: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout_at(self.at, op)
            .await
            .unwrap_or(Err(StoreError::Deadline { limit: self.limit }))
    }
}

/// Runs `op` within `deadline`, if there is one.
pub async fn bounded<T>(
    deadline: Option<Deadline>,
    op: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match deadline {
        Some(d) => d.bound(op).await,
        None => op.await,
    }
}

/// An error with what was being done when it happened (`"{context}: {source}"`).
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct Failed {
    context: Cow<'static, str>,
    #[source]
    source: Box<dyn Error + Send + Sync>,
}

impl Failed {
    /// `source`, which happened while doing `context`.
    pub fn new(
        context: impl Into<Cow<'static, str>>,
        source: impl Into<Box<dyn Error + Send + Sync>>,
    ) -> Self {
        Self {
            context: context.into(),
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_and_their_causes() {
        let io = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
        let e = StoreError::failed("database write failed", io);
        assert!(e.is_transient());
        assert_eq!(
            e.to_string(),
            "store unavailable: database write failed: disk full"
        );
        let cause = e.source().and_then(|s| s.source()).unwrap();
        assert_eq!(cause.to_string(), "disk full");
        assert!(StoreError::Deadline {
            limit: Duration::from_millis(250)
        }
        .to_string()
        .ends_with("deadline of 250 ms"));
        assert!(StoreError::Contention { attempts: 3 }.is_transient());
        for settled in [
            StoreError::SessionLimit { limit: 1 },
            StoreError::Closed,
            StoreError::invalid("bad prefix"),
        ] {
            assert!(!settled.is_transient(), "{settled}");
        }
    }
}

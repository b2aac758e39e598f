//! Time, injected: the engine never reads the system clock directly, so tests control it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A clock time in milliseconds since the clock's origin.
///
/// A newtype so that a host cannot pass seconds or a counter where clock time is meant.
/// It encodes as a plain number (serde, postcard), so stored states read unchanged.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[repr(transparent)]
#[serde(transparent)]
pub struct Millis(u64);

impl Millis {
    /// The clock's origin.
    pub const ZERO: Self = Self(0);

    /// `ms` milliseconds since the clock's origin.
    pub const fn new(ms: u64) -> Self {
        Self(ms)
    }

    /// The milliseconds since the clock's origin.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// This time moved back by `by`, stopping at the origin.
    pub fn saturating_sub(self, by: Duration) -> Self {
        Self(self.0.saturating_sub(duration_ms(by)))
    }

    /// This time moved forward by `by`, stopping at the largest time.
    pub fn saturating_add(self, by: Duration) -> Self {
        Self(self.0.saturating_add(duration_ms(by)))
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A duration in whole milliseconds, saturating.
fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A source of clock time.
pub trait Clock {
    /// The time since an arbitrary, fixed origin (the Unix epoch for [`SystemClock`]).
    fn now_ms(&self) -> Millis;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        Millis(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, duration_ms),
        )
    }
}

/// A clock that moves only when told to; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock stopped at `at`.
    pub fn new(at: Millis) -> Self {
        Self(Arc::new(AtomicU64::new(at.get())))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_ms(by), Ordering::SeqCst);
    }

    /// Sets the clock.
    pub fn set(&self, at: Millis) {
        self.0.store(at.get(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        Millis(self.0.load(Ordering::SeqCst))
    }
}

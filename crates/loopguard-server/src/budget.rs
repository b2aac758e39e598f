//! The memory budget of request bodies.
//!
//! A body of N bytes costs N while it arrives, and then what its parsed JSON costs while
//! it is turned into events and answered: far more than N for JSON made of many small
//! values (each value is a 32-byte slot, each object a 632-byte tree node before its
//! first entry, each array doubles as it grows). [`parse_cost`] bounds that cost from the
//! body's text before it is parsed, and the server keeps two counts, each bounded by
//! [`RequestLimits::memory_budget_bytes`](crate::RequestLimits):
//!
//! - bytes of bodies still arriving: a frame that would pass the budget fails its request
//!   at once (503), so a flood of large bodies cannot grow memory, and no request ever
//!   waits while holding part of the budget;
//! - reservations of requests whose body has arrived: each takes its [`parse_cost`] in one
//!   go, waiting in turn when others hold the budget, and gives it back once its answer is
//!   built. A body whose cost alone passes the budget is refused (413).
//!
//! A request never holds one count while waiting for the other, so the two cannot lock
//! each other up.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

pub use loopguard_events::{parse_cost, MAX_COST_PER_BODY_BYTE};

/// Reservations are counted in units of this many bytes (a semaphore counts in `u32`).
const UNIT: usize = 1024;

/// A request that reserved at least this much memory gives it back to the system once
/// answered (see [`Options::release_memory`](crate::Options)).
const RELEASE_ABOVE: usize = 16 << 20;

/// Releases are this far apart at least.
const RELEASE_EVERY: Duration = Duration::from_secs(1);

/// The budget; see the module docs.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    arriving: AtomicUsize,
    parsing: Semaphore,
    /// A release is running.
    releasing: Arc<AtomicBool>,
    /// When the last release started (ms since `origin`).
    released_at: AtomicU64,
    origin: Instant,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Self {
        let limit = limit.max(UNIT);
        Self {
            limit,
            arriving: AtomicUsize::new(0),
            parsing: Semaphore::new(limit / UNIT),
            releasing: Arc::default(),
            released_at: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    /// Counts `n` more bytes of a body that is arriving; `false` (and nothing counted)
    /// when that would pass the budget.
    pub(crate) fn arrive(&self, n: usize) -> bool {
        self.arriving
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes counted by [`Budget::arrive`].
    pub(crate) fn leave(&self, n: usize) {
        self.arriving.fetch_sub(n, Ordering::AcqRel);
    }

    /// The budget, in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Reserves `cost` bytes (at most the whole budget) for a request being parsed and
    /// answered; waits for room.
    pub(crate) async fn reserve(&self, cost: usize) -> Option<SemaphorePermit<'_>> {
        let bytes = cost.min(self.limit);
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
        if units == 0 {
            return None;
        }
        // Never closed; should it be, go on without a reservation.
        self.parsing.acquire_many(units).await.ok()
    }

    /// After a request that reserved `cost` was answered: runs `release` on a blocking
    /// thread when the cost was large, none is running, and the last was long enough ago.
    pub(crate) fn after(&self, cost: usize, release: Option<fn()>) {
        let Some(release) = release.filter(|_| cost >= RELEASE_ABOVE) else {
            return;
        };
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.released_at.load(Ordering::Acquire);
        if now.saturating_sub(last) < RELEASE_EVERY.as_millis() as u64 && last != 0 {
            return;
        }
        if self.releasing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.released_at.store(now.max(1), Ordering::Release);
        let releasing = Arc::clone(&self.releasing);
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            release();
            releasing.store(false, Ordering::Release);
            tracing::debug!(target: "loopguard::server", cost, ms = started.elapsed().as_secs_f64() * 1e3, "gave freed memory back");
        });
    }

    /// Bytes reserved now.
    #[cfg(test)]
    pub(crate) fn reserved(&self) -> usize {
        self.limit - self.parsing.available_permits() * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_arriving_bytes_and_reservations() {
        let budget = Budget::new(64 * UNIT);
        assert!(budget.arrive(60 * UNIT));
        assert!(!budget.arrive(5 * UNIT), "past the budget");
        budget.leave(60 * UNIT);
        assert!(budget.arrive(5 * UNIT));
        budget.leave(5 * UNIT);

        let one = budget.reserve(16 * UNIT).await.unwrap();
        assert_eq!(budget.reserved(), 16 * UNIT);
        // A cost beyond the budget takes all of it, and waits for the rest.
        let mut whole = std::pin::pin!(budget.reserve(100 * UNIT));
        assert!(futures_poll(&mut whole).is_none());
        drop(one);
        let whole = futures_poll(&mut whole).expect("room now").unwrap();
        assert_eq!(budget.reserved(), 64 * UNIT);
        drop(whole);
        assert_eq!(budget.reserved(), 0);
        assert!(budget.reserve(0).await.is_none());
    }

    /// Polls a future once.
    fn futures_poll<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match std::pin::Pin::new(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }
}

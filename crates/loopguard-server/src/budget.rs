//! The memory budget of request bodies.
//!
//! A body of N bytes costs about N while it arrives, and up to
//! [`MEMORY_PER_BODY_BYTE`]` × N` while it is parsed into events and answered (the parsed
//! JSON of small values takes many times the bytes of its text: a `0,` in an array is a
//! 32-byte value, and the array doubles as it grows). So the server keeps two counts,
//! each bounded by [`RequestLimits::memory_budget_bytes`](crate::RequestLimits):
//!
//! - bytes of bodies still arriving: a frame that would pass the budget fails its request
//!   at once (503), so a flood of large bodies cannot grow memory, and no request ever
//!   waits while holding part of the budget;
//! - reservations of requests whose body has arrived: each takes `k × N` (at most the whole
//!   budget) in one go, waiting in turn when others hold it, and gives it back once its
//!   answer is built.
//!
//! A request never holds one count while waiting for the other, so the two cannot lock
//! each other up.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Memory a request may need while it is parsed and answered, per byte of its body: the
/// bound `k` measured by the reliability suite (`tests/serve_reliability.rs` in the CLI
/// crate) over the shapes of JSON that cost the most per byte.
pub const MEMORY_PER_BODY_BYTE: usize = 16;

/// Reservations are counted in units of this many bytes (a semaphore counts in `u32`).
const UNIT: usize = 1024;

/// The budget; see the module docs.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: usize,
    arriving: AtomicUsize,
    parsing: Semaphore,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Self {
        let limit = limit.max(UNIT);
        Self {
            limit,
            arriving: AtomicUsize::new(0),
            parsing: Semaphore::new(limit / UNIT),
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

    /// Reserves what parsing and answering a body of `n` bytes may cost; waits for room.
    pub(crate) async fn reserve(&self, n: usize) -> Option<SemaphorePermit<'_>> {
        let bytes = n.saturating_mul(MEMORY_PER_BODY_BYTE).min(self.limit);
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
        if units == 0 {
            return None;
        }
        // Never closed; should it be, go on without a reservation.
        self.parsing.acquire_many(units).await.ok()
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

        let one = budget.reserve(UNIT).await.unwrap();
        assert_eq!(budget.reserved(), MEMORY_PER_BODY_BYTE * UNIT);
        // A body whose cost passes the budget takes all of it, and waits for the rest.
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

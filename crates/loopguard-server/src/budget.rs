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

/// The most [`parse_cost`] can be per byte of body (JSON such as `[{"a":0},…]`, an object
/// per 8 bytes); the measured cost of that shape is about 88 bytes per byte.
pub const MAX_COST_PER_BODY_BYTE: usize = 128;

/// Bodies up to this size are not scanned: they reserve [`MAX_COST_PER_BODY_BYTE`] times
/// their size, a few megabytes at most, which saves the scan on the common small request.
const SCAN_ABOVE: usize = 64 << 10;

/// An upper bound, in bytes, of the memory parsing `body` into `serde_json` values takes,
/// the body included: a slot per value (with room for arrays to have doubled), a share of
/// a B-tree node per object entry (nodes are at least 5/11 full), a whole node per object,
/// and each string's allocation. A single pass over the bytes, without parsing; for
/// bodies that are not JSON it still bounds what the parser could build before failing.
pub fn parse_cost(body: &[u8]) -> usize {
    if body.len() <= SCAN_ABOVE {
        return body.len().saturating_mul(MAX_COST_PER_BODY_BYTE);
    }
    let (mut values, mut entries, mut objects, mut strings, mut string_bytes) =
        (1usize, 0usize, 0usize, 0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => string_bytes += 1,
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                strings += 1;
            }
            b'{' => {
                objects += 1;
                values += 1;
            }
            b'[' => values += 1,
            b',' => values += 1,
            b':' => {
                entries += 1;
                values += 1;
            }
            _ => {}
        }
    }
    let tree = 64 * values + 128 * entries + 640 * objects + 32 * strings + string_bytes;
    // The body itself, a copy while it is assembled from its frames, and as much again
    // for the parser's and the engine's scratch (strings with escapes, key orders).
    tree.saturating_add(3 * body.len())
        .min(body.len().saturating_mul(MAX_COST_PER_BODY_BYTE))
}

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

    /// The bound holds the measured worst shapes (see the reliability suite for the
    /// measurements): it is at least what each shape costs per byte, and no more than
    /// [`MAX_COST_PER_BODY_BYTE`].
    #[test]
    fn parse_costs_bound_the_shapes_that_cost_most() {
        let n = 1 << 20;
        let wrap = |items: &str, count: usize| -> Vec<u8> {
            let mut body = b"{\"type\":\"call\",\"tool\":\"t\",\"args\":[".to_vec();
            for i in 0..count {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(items.as_bytes());
            }
            body.extend_from_slice(b"]}");
            body
        };
        for (shape, measured_per_byte) in [
            ("0", 18.4),
            ("{\"a\":0}", 88.0),
            ("\"a\"", 16.0),
            ("[]", 12.7),
        ] {
            let body = wrap(shape, n / (shape.len() + 1));
            let per_byte = parse_cost(&body) as f64 / body.len() as f64;
            assert!(
                per_byte >= measured_per_byte && per_byte <= MAX_COST_PER_BODY_BYTE as f64,
                "{shape}: {per_byte}"
            );
        }
        // Text costs little more than itself.
        let text = format!("{{\"type\":\"result\",\"result\":\"{}\"}}", "x".repeat(n));
        assert!(parse_cost(text.as_bytes()) < 5 * text.len());
        // Small bodies are not scanned.
        assert_eq!(parse_cost(b"{}"), 2 * MAX_COST_PER_BODY_BYTE);
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

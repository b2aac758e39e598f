//! Accepting and serving connections, each bounded in number and in time, so that clients
//! that connect and then trickle or say nothing cannot use up the server.
//!
//! - **How many.** At most [`ConnectionLimits::max_connections`] are open at once (keep it
//!   below the open-file limit: [`crate::connection_cap`]). At the cap, the connection that
//!   has waited the longest for its next request is closed to make room; when none is
//!   waiting, new connections wait in the listen queue until one closes (logged).
//! - **How long.** A connection waiting for a request is closed after
//!   [`ConnectionLimits::idle_timeout`]; one whose request head has begun but not ended
//!   after [`ConnectionLimits::header_timeout`]. A request body has its own timeout
//!   (`RequestLimits::body_timeout`, in [`crate::extract`]), and a request takes one of the
//!   request slots only once its body is in, so slow bodies hold no slot.
//!
//! Each connection's phase (idle, reading a head, handling a request) and when it began
//! are kept in atomics that its socket reads and its service calls update: a request costs
//! a few atomic stores, no timer. A reaper task looks at every open connection every
//! [`REAP_EVERY`] and tells the ones past their deadline to close (so a timeout is kept to
//! within that much).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::app::ConnectionLimits;
use crate::metrics::{Closed, Metrics};

const IDLE: u8 = 0;
const HEAD: u8 = 1;
const BUSY: u8 = 2;

/// The origin of the connections' clock: the first time it is read (tokio's clock, so
/// that tests can pause it).
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Milliseconds since [`base`]: a phase's start fits in an atomic.
fn now_ms() -> u64 {
    u64::try_from(base().elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// How often the reaper looks for connections past their deadline.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// One open connection, as its task, its socket and the accept loop see it.
#[derive(Debug)]
struct Conn {
    phase: AtomicU8,
    /// When the current phase began (`now_ms`).
    since: AtomicU64,
    /// Why it was asked to close (a [`Closed`] as `u8`, 0 for not asked), and the wake-up.
    asked: AtomicU8,
    told: Notify,
}

impl Conn {
    fn new() -> Self {
        Self {
            phase: AtomicU8::new(IDLE),
            since: AtomicU64::new(now_ms()),
            asked: AtomicU8::new(0),
            told: Notify::new(),
        }
    }

    /// Asks the connection to close, for `why`.
    fn ask_to_close(&self, why: Closed) {
        if self
            .asked
            .compare_exchange(0, why as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.told.notify_one();
        }
    }

    /// Takes the request to close, if it still holds: the connection may have become busy
    /// since it was asked (a request arrived), and then it stays.
    fn take_request_to_close(&self, limits: &ConnectionLimits) -> Option<Closed> {
        let why = Closed::from_u8(self.asked.swap(0, Ordering::AcqRel))?;
        let holds = match why {
            Closed::Evicted => self.phase.load(Ordering::Acquire) == IDLE,
            _ => self
                .deadline(limits)
                .is_some_and(|(due, now_why)| now_why == why && due <= now_ms()),
        };
        holds.then_some(why)
    }

    /// Bytes arrived: an idle connection starts reading a request head.
    fn reading(&self) {
        if self
            .phase
            .compare_exchange(IDLE, HEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.since.store(now_ms(), Ordering::Release);
        }
    }

    /// A request's head is in: its handling (and its body's timeout) takes over.
    fn busy(&self) {
        self.phase.store(BUSY, Ordering::Release);
    }

    /// The answer is out: the connection waits for its next request.
    fn idle(&self) {
        self.since.store(now_ms(), Ordering::Release);
        self.phase.store(IDLE, Ordering::Release);
    }

    /// When the current phase times out, and why.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(u64, Closed)> {
        let since = self.since.load(Ordering::Acquire);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match self.phase.load(Ordering::Acquire) {
            IDLE => Some((
                since.saturating_add(ms(limits.idle_timeout)),
                Closed::IdleTimeout,
            )),
            HEAD => Some((
                since.saturating_add(ms(limits.header_timeout)),
                Closed::HeaderTimeout,
            )),
            _ => None,
        }
    }
}

/// The open connections, for the accept loop to find the one idle the longest.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new());
        self.lock().insert(id, Arc::clone(&conn));
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the connection idle the longest to close; false when none is idle.
    fn evict_idlest(&self) -> bool {
        let open = self.lock();
        let idlest = open
            .values()
            .filter(|c| c.phase.load(Ordering::Acquire) == IDLE)
            .min_by_key(|c| c.since.load(Ordering::Acquire));
        match idlest {
            Some(conn) => {
                conn.ask_to_close(Closed::Evicted);
                true
            }
            None => false,
        }
    }

    /// Asks every connection past its deadline to close.
    fn reap(&self, limits: &ConnectionLimits) {
        let now = now_ms();
        for conn in self.lock().values() {
            if let Some((due, why)) = conn.deadline(limits) {
                if due <= now {
                    conn.ask_to_close(why);
                }
            }
        }
    }
}

/// A socket that tells its connection when request bytes arrive.
struct Watched {
    io: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.reading();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Accepts connections on `listener` and serves `router` on each until `shutdown`
/// resolves; then stops accepting, lets every connection finish its request in flight
/// (idle ones close at once), and returns once all are closed.
pub(crate) async fn accept(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let registry = Arc::new(Registry::default());
    let (closing, closed) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut shutdown = pin!(shutdown);
    let mut warned: Option<Instant> = None;
    let reaper = {
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                registry.reap(&limits);
            }
        })
    };
    'accept: loop {
        while tasks.try_join_next().is_some() {}
        let permit = match Arc::clone(&slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if !registry.evict_idlest()
                    && warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
                {
                    warned = Some(Instant::now());
                    tracing::warn!(
                        target: "loopguard::server",
                        open = limits.max_connections,
                        "connection limit reached and no connection is idle: new connections wait to be accepted"
                    );
                }
                tokio::select! {
                    permit = Arc::clone(&slots).acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break 'accept,
                    },
                    () = &mut shutdown => break 'accept,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors or memory: wait for some to come back.
                    tracing::error!(target: "loopguard::server", error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break 'accept,
        };
        let _ = stream.set_nodelay(true);
        let (id, conn) = registry.add();
        let registry = Arc::clone(&registry);
        let router = router.clone();
        let metrics = Arc::clone(&metrics);
        let closed = closed.clone();
        metrics.connection_opened();
        tasks.spawn(async move {
            let why = serve_one(stream, router, &conn, &limits, closed).await;
            registry.remove(id);
            metrics.connection_closed(why);
            drop(permit);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    while tasks.join_next().await.is_some() {}
    reaper.abort();
}

/// Accept errors that concern one connection only (it was reset before it was accepted).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Serves one connection until it ends, times out, is evicted or the server stops.
async fn serve_one(
    stream: TcpStream,
    router: Router,
    conn: &Arc<Conn>,
    limits: &ConnectionLimits,
    mut closing: watch::Receiver<bool>,
) -> Closed {
    let io = TokioIo::new(Watched {
        io: stream,
        conn: Arc::clone(conn),
    });
    let service = {
        let conn = Arc::clone(conn);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            conn.busy();
            let conn = Arc::clone(&conn);
            let answered = router.clone().oneshot(request.map(Body::new));
            async move {
                let response: Result<_, Infallible> = answered.await;
                conn.idle();
                response
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The reaper times heads and idleness.
    builder.header_read_timeout(None);
    let mut http = pin!(builder.serve_connection(io, service));
    let mut stopping = false;
    let mut stop = pin!(async move {
        let _ = closing.wait_for(|&c| c).await;
    });
    let mut told = pin!(conn.told.notified());
    std::future::poll_fn(|cx| {
        if !stopping && stop.as_mut().poll(cx).is_ready() {
            stopping = true;
            http.as_mut().graceful_shutdown();
        }
        if let Poll::Ready(ended) = http.as_mut().poll(cx) {
            return Poll::Ready(match ended {
                Ok(()) => Closed::Done,
                Err(_) => Closed::Error,
            });
        }
        while told.as_mut().poll(cx).is_ready() {
            if let Some(why) = conn.take_request_to_close(limits) {
                return Poll::Ready(why);
            }
            told.set(conn.told.notified());
        }
        Poll::Pending
    })
    .await
}

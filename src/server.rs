//! Serving HTTP until a shutdown signal, with a bounded drain, and with a
//! bound on how long a connection may take to send a request's headers.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

/// The header time-out `serve` is given by default (`--header-timeout-s`).
pub const DEFAULT_HEADER_TIMEOUT_S: u64 = 30;
/// The most connections `serve` holds open by default (`--max-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long a request's body may take to arrive by default
/// (`--body-timeout-s`).
pub const DEFAULT_BODY_TIMEOUT_S: u64 = 15;
/// The most request-body bytes held while they arrive, over all requests,
/// by default (`--max-receiving-bytes`).
pub const DEFAULT_RECEIVING_BYTES: usize = 128 << 20;
/// How often, at most, reaching the connection limit is logged.
const LIMIT_LOG_EVERY: Duration = Duration::from_secs(60);

/// How `serve` bounds its clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long in-flight requests may take to finish once `shutdown`
    /// completes.
    pub drain: Duration,
    /// How long a connection may take to send a request's headers, from its
    /// opening or its previous answer.
    pub header_timeout: Duration,
    /// The most connections open at once (at least 1).
    pub max_connections: usize,
    /// How long a request's body may take to arrive, from the request's
    /// headers.
    pub body_timeout: Duration,
    /// The most request-body bytes received and not yet handed on whole,
    /// over all requests (see `ReceivedBody`).
    pub receiving_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            drain: Duration::ZERO,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_S),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_S),
            receiving_bytes: DEFAULT_RECEIVING_BYTES,
        }
    }
}

/// Serve `router` on `listener` until `shutdown` completes; then stop accepting
/// connections and give in-flight requests up to `limits.drain` to finish.
///
/// A connection must send each request's headers within
/// `limits.header_timeout` of being opened or of its previous answer, or it
/// is closed: a client that opens connections and sends nothing, or a header
/// a byte at a time (slowloris), cannot hold them, and their file
/// descriptors, for ever. (axum's own `serve` sets no timer, so hyper applies
/// no such limit.)
///
/// At most `limits.max_connections` are open at once. Each costs the
/// service some 10 to 20 KiB, so a flood of clients holds memory in
/// proportion to the limit, not to the open-file limit (which
/// `raise_open_file_limit` sets high). A connection accepted at the limit
/// takes the place of the one idle longest (waiting for a request, not
/// answering one): that one is closed, so that clients with questions are
/// still answered while idle connections fill the limit. A connection
/// opened within `FRESH_GRACE` that has not sent a request yet is spared.
/// Only when every connection has a request in flight, or is that new,
/// does a new one wait for one to close.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: Limits,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    // At most u32::MAX, so that the drain can wait for every permit at once.
    let max = limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let open = Arc::new(Open::new(max));
    let bodies = Arc::new(Receiving {
        limit: limits.receiving_bytes,
        held: AtomicUsize::new(0),
        timeout: limits.body_timeout,
    });
    let (stop, stopping) = watch::channel(false);
    let mut last_logged: Option<Instant> = None;
    let mut shutdown = pin!(shutdown);
    'accept: loop {
        let (stream, _) = tokio::select! {
            // Accept errors (too many open files, a connection reset before
            // it was accepted) are logged and retried by axum's `Listener`.
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let permit = match open.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if last_logged.is_none_or(|at| at.elapsed() >= LIMIT_LOG_EVERY) {
                    tracing::warn!(
                        max_connections = max,
                        "connection limit reached: closing the connections idle longest"
                    );
                    last_logged = Some(Instant::now());
                }
                // Until a place is free: ask the connection idle longest to
                // close, again whenever none was idle or it is slow to go.
                let mut retry = tokio::time::interval(EVICTION_RETRY);
                loop {
                    tokio::select! {
                        permit = open.permits.clone().acquire_owned() => match permit {
                            Ok(permit) => break permit,
                            // The semaphore is never closed.
                            Err(_) => break 'accept,
                        },
                        _ = retry.tick() => open.evict_idlest(),
                        () = &mut shutdown => break 'accept,
                    }
                }
            }
        };
        let tracked = open.register(permit);
        let service = Counted {
            router: router.clone(),
            tracked: tracked.clone(),
            bodies: bodies.clone(),
        };
        let stream = Stalled::new(stream, limits.header_timeout);
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let (open, stopping) = (open.clone(), stopping.clone());
        tokio::spawn(async move {
            run_connection(connection, &tracked, stopping).await;
            open.unregister(&tracked);
        });
    }
    drop(listener);
    tracing::info!(
        drain_s = limits.drain.as_secs(),
        "shutting down: draining requests"
    );
    stop.send_replace(true);
    // Every connection holds a permit until it closes.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    tokio::select! {
        _ = open.permits.acquire_many(all) => {}
        () = tokio::time::sleep(limits.drain) => {
            tracing::warn!("drain time-out: closing the remaining connections");
        }
    }
}

/// hyper's read buffer limit while a request line and headers arrive: a
/// head of up to this many bytes is read, one of more than twice as many is
/// refused (431; hyper checks the limit between reads, so one in between
/// may be read). hyper's default, about 400 KiB, let a thousand connections
/// each sending 300 KiB of headers hold 590 MiB, and the default connection
/// limit ten times that.
const MAX_HEAD_BYTES: usize = 32 * 1024;

/// How often, at the limit, another connection is asked to close while no
/// place has come free.
const EVICTION_RETRY: Duration = Duration::from_millis(100);
/// A connection that has not yet handed a request to the router is not asked
/// to give way until it has been open this long: a new client's request may
/// be waiting in its socket, not yet read. (Before, at the limit, clients
/// that opened a connection and sent a request at once saw 8 % of them
/// closed unanswered, pushed out by each other.) A silent one goes after it.
const FRESH_GRACE: Duration = Duration::from_secs(1);
/// How long an evicted connection that has no request in flight is given to
/// close by itself (finishing an answer it is writing) before it is dropped.
const EVICTION_GRACE: Duration = Duration::from_millis(200);

type Connection = http1::Connection<TokioIo<Stalled>, Counted>;

/// A client connection whose writes may not stall longer than `limit`: a
/// client that asks for answers and never reads them (a probe held 460 MB
/// with 50 such connections for minutes) is dropped, and what it asked for
/// with it. A client that reads, however slowly, is not: a write may wait
/// longer than the limit for a large send buffer to drain, and the timer
/// then looks at the buffer before it gives up. Reads have their own limits
/// (headers, body, request).
struct Stalled {
    stream: TcpStream,
    limit: Duration,
    /// Armed while a write waits for the client to read, with the bytes
    /// then waiting in the send buffer.
    deadline: Option<(Pin<Box<tokio::time::Sleep>>, Option<i32>)>,
}

impl Stalled {
    fn new(stream: TcpStream, limit: Duration) -> Self {
        Stalled {
            stream,
            limit,
            deadline: None,
        }
    }

    /// After a write that could not go on: whether it has waited `limit`
    /// without the client taking a byte (arming the timer at its first
    /// wait, and again whenever the client has read some).
    fn stalled(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        let limit = self.limit;
        loop {
            let stream = &self.stream;
            let (deadline, queued) = self
                .deadline
                .get_or_insert_with(|| (Box::pin(tokio::time::sleep(limit)), unsent(stream)));
            if deadline.as_mut().poll(cx).is_pending() {
                return false;
            }
            let now = unsent(stream);
            let read_some = matches!((*queued, now), (Some(before), Some(now)) if now < before);
            if !read_some {
                return true;
            }
            // Progress: wait another `limit` from here.
            self.deadline = None;
        }
    }

    fn guard<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        polled: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        match polled {
            Poll::Pending if self.stalled(cx) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing of its answer for too long",
            ))),
            Poll::Pending => Poll::Pending,
            ready => {
                self.deadline = None;
                ready
            }
        }
    }
}

/// Bytes written to `stream` that its client has not yet acknowledged
/// (Linux's `SIOCOUTQ`); `None` if the kernel does not say.
fn unsent(stream: &TcpStream) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let mut queued: nix::libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ on a socket) writes one int to the pointer
    // given, which points at `queued`; the descriptor stays open while
    // `stream` is borrowed.
    let status = unsafe {
        nix::libc::ioctl(
            stream.as_raw_fd(),
            nix::libc::TIOCOUTQ,
            &mut queued as *mut nix::libc::c_int,
        )
    };
    (status == 0).then_some(queued)
}

impl tokio::io::AsyncRead for Stalled {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Stalled {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.guard(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.guard(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(cx);
        this.guard(cx, polled)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.guard(cx, polled)
    }
}

/// Drive one connection to its end: closing it gracefully on shutdown, and
/// on eviction closing it at once if idle or if it never sent a whole
/// request, after its answer if it has a request in flight, or after
/// `EVICTION_GRACE` if it is sending another request's headers.
async fn run_connection(
    connection: Connection,
    tracked: &Tracked,
    mut stopping: watch::Receiver<bool>,
) {
    let mut connection = pin!(connection);
    let mut closing = false;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            () = tracked.evict.notified(), if !closing => {
                // Silent, still sending its first request's headers, or
                // stalled in a request's body: nothing to finish (a handler
                // does nothing before it has the whole body).
                if !tracked.requested.load(Ordering::Acquire) || tracked.is_receiving() {
                    return;
                }
                connection.as_mut().graceful_shutdown();
                closing = true;
                match tokio::time::timeout(EVICTION_GRACE, connection.as_mut()).await {
                    Ok(result) => break result,
                    // Headers not yet complete (hyper closes a connection
                    // gracefully only between requests): drop it.
                    Err(_) if tracked.in_flight.load(Ordering::Acquire) == 0 => return,
                    Err(_) => {}
                }
            }
            // A closed channel (the server gone) stops too.
            () = async { drop(stopping.wait_for(|stop| *stop).await) }, if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection closed with an error");
    }
}

/// The open connections: the limit's permits, and each connection's
/// activity, from which the one idle longest is chosen at the limit.
struct Open {
    permits: Arc<Semaphore>,
    connections: Mutex<HashMap<u64, Arc<Tracked>>>,
    next_id: AtomicU64,
    epoch: Instant,
    gauge: Gauge,
}

impl Open {
    fn new(max: usize) -> Self {
        crate::telemetry::gauge("http_connections_max").set(max as f64);
        Open {
            permits: Arc::new(Semaphore::new(max)),
            connections: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            gauge: crate::telemetry::gauge("http_connections_open"),
        }
    }

    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Tracked>>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, permit: OwnedSemaphorePermit) -> Arc<Tracked> {
        let tracked = Arc::new(Tracked {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            epoch: self.epoch,
            last_active_us: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            requested: AtomicBool::new(false),
            receiving_since_us: AtomicU64::new(NOT_RECEIVING),
            evicting: AtomicBool::new(false),
            evict: Notify::new(),
            gauge: self.gauge.clone(),
            _permit: permit,
        });
        tracked.touch();
        self.gauge.increment(1.0);
        self.connections().insert(tracked.id, tracked.clone());
        tracked
    }

    fn unregister(&self, tracked: &Tracked) {
        self.connections().remove(&tracked.id);
    }

    /// Ask the connection idle longest, of those with no request in flight
    /// (and either answered once or open for `FRESH_GRACE`), to close; else
    /// the one whose request body has been arriving longest (for at least
    /// `FRESH_GRACE`): a client that trickles bodies must not hold every
    /// place. None if every connection is answering or new.
    fn evict_idlest(&self) {
        let grace_us = micros(FRESH_GRACE);
        let now_us = micros(self.epoch.elapsed());
        let connections = self.connections();
        let slowest_body = || {
            connections
                .values()
                .filter(|t| !t.evicting.load(Ordering::Relaxed))
                .filter_map(|t| {
                    let since = t.receiving_since_us.load(Ordering::Acquire);
                    (since != NOT_RECEIVING && now_us.saturating_sub(since) >= grace_us)
                        .then_some((since, t))
                })
                .min_by_key(|(since, t)| (*since, t.id))
                .map(|(_, t)| t)
        };
        let idlest = connections
            .values()
            .filter(|t| {
                // Until its first request, its last activity is its opening.
                t.in_flight.load(Ordering::Acquire) == 0
                    && !t.evicting.load(Ordering::Relaxed)
                    && (t.requested.load(Ordering::Acquire)
                        || now_us.saturating_sub(t.last_active_us.load(Ordering::Relaxed))
                            >= grace_us)
            })
            // The older connection first among equals.
            .min_by_key(|t| (t.last_active_us.load(Ordering::Relaxed), t.id))
            .or_else(slowest_body);
        if let Some(tracked) = idlest {
            tracked.evicting.store(true, Ordering::Relaxed);
            tracked.evict.notify_one();
        }
    }
}

/// One open connection: counted in `http_connections_open`, holding one of
/// the limit's permits, until the last reference is dropped.
struct Tracked {
    id: u64,
    epoch: Instant,
    /// When a request last began (or the connection opened), in µs since
    /// `epoch`.
    last_active_us: AtomicU64,
    /// Requests handed to the router and not yet answered.
    in_flight: AtomicUsize,
    /// Whether any request has been handed to the router.
    requested: AtomicBool,
    /// Since when a request's body has been arriving, in µs since `epoch`;
    /// `NOT_RECEIVING` when none is.
    receiving_since_us: AtomicU64,
    evicting: AtomicBool,
    evict: Notify,
    gauge: Gauge,
    _permit: OwnedSemaphorePermit,
}

impl Tracked {
    fn touch(&self) {
        self.last_active_us
            .store(micros(self.epoch.elapsed()), Ordering::Relaxed);
    }

    fn is_receiving(&self) -> bool {
        self.receiving_since_us.load(Ordering::Acquire) != NOT_RECEIVING
    }
}

/// `Tracked::receiving_since_us` when no body is arriving.
const NOT_RECEIVING: u64 = u64::MAX;

/// A duration in whole µs (saturating).
fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// The router as hyper calls it, counting each connection's requests in
/// flight and when the last began.
#[derive(Clone)]
struct Counted {
    router: Router,
    tracked: Arc<Tracked>,
    bodies: Arc<Receiving>,
}

impl hyper::service::Service<Request<Incoming>> for Counted {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let busy = InFlight::new(self.tracked.clone());
        let (mut parts, body) = request.into_parts();
        // Most requests (every GET) have no body: nothing to watch.
        let body = if hyper::body::Body::is_end_stream(&body) {
            axum::body::Body::new(body)
        } else {
            let stop = BodyStop::default();
            parts.extensions.insert(stop.clone());
            axum::body::Body::new(ReceivedBody::new(body, &self.tracked, &self.bodies, stop))
        };
        let answer = self
            .router
            .clone()
            .oneshot(Request::from_parts(parts, body));
        Box::pin(async move {
            let answer = answer.await;
            drop(busy);
            answer
        })
    }
}

/// One request in flight on a connection, until dropped.
struct InFlight(Arc<Tracked>);

impl InFlight {
    fn new(tracked: Arc<Tracked>) -> Self {
        tracked.in_flight.fetch_add(1, Ordering::AcqRel);
        tracked.requested.store(true, Ordering::Release);
        tracked.touch();
        InFlight(tracked)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The budget of request-body bytes being received, over all requests.
struct Receiving {
    limit: usize,
    held: AtomicUsize,
    timeout: Duration,
}

impl Receiving {
    /// Count `bytes` more, unless that passes the limit.
    fn take(&self, bytes: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Why the server stopped receiving a request's body, for the extractor
/// that then fails to read it (`http::extract`): set at most once.
#[derive(Debug, Clone, Default)]
pub struct BodyStop(Arc<std::sync::OnceLock<Stopped>>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The body did not arrive within the time allowed.
    TimedOut(Duration),
    /// The bodies being received at once reached their budget.
    OverBudget,
}

impl BodyStop {
    pub fn reason(&self) -> Option<Stopped> {
        self.0.get().copied()
    }
}

/// Data frames are handed on in pieces of at least this many bytes (or
/// the body's end).
const PIECE: usize = 64 << 10;

/// A request body as the router reads it: its bytes copied out of hyper's
/// read buffers into pieces of `PIECE` bytes (hyper's frames share its
/// buffer, so a body sent a byte at a time held kilobytes of buffer per
/// byte: 483 MB for 195 KiB sent, in a probe), counted against the budget
/// of all bodies arriving at once (`Receiving`), and due within its
/// time-out. While it arrives, its connection is marked as receiving, so
/// that at the connection limit a stalled body gives way (`evict_idlest`).
struct ReceivedBody {
    inner: Incoming,
    pending: bytes::BytesMut,
    /// Bytes counted against the budget.
    held: usize,
    bodies: Arc<Receiving>,
    tracked: Arc<Tracked>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    stop: BodyStop,
    ended: bool,
    /// Trailers that arrived while data was held, handed on after it.
    trailers: Option<Frame>,
}

impl ReceivedBody {
    /// Watch `inner`, a body still to arrive (requests without one are not
    /// wrapped).
    fn new(
        inner: Incoming,
        tracked: &Arc<Tracked>,
        bodies: &Arc<Receiving>,
        stop: BodyStop,
    ) -> Self {
        tracked
            .receiving_since_us
            .store(micros(tracked.epoch.elapsed()), Ordering::Release);
        ReceivedBody {
            inner,
            pending: bytes::BytesMut::new(),
            held: 0,
            bodies: bodies.clone(),
            tracked: tracked.clone(),
            deadline: Box::pin(tokio::time::sleep(bodies.timeout)),
            stop,
            ended: false,
            trailers: None,
        }
    }

    /// The body has ended (or failed): its connection is no longer
    /// receiving.
    fn end(&mut self) {
        self.ended = true;
        self.tracked
            .receiving_since_us
            .store(NOT_RECEIVING, Ordering::Release);
    }

    fn fail(&mut self, why: Stopped) -> std::task::Poll<Option<Result<Frame, BoxError>>> {
        // The first reason stands.
        let _ = self.stop.0.set(why);
        self.end();
        let message = match why {
            Stopped::TimedOut(limit) => {
                format!(
                    "the request body did not arrive within {} s",
                    limit.as_secs()
                )
            }
            Stopped::OverBudget => "too many request bodies are arriving at once".to_owned(),
        };
        std::task::Poll::Ready(Some(Err(message.into())))
    }
}

type Frame = hyper::body::Frame<bytes::Bytes>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl hyper::body::Body for ReceivedBody {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame, BoxError>>> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            if let Some(trailers) = this.trailers.take() {
                return Poll::Ready(Some(Ok(trailers)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if this.deadline.as_mut().poll(cx).is_ready() {
                return this.fail(Stopped::TimedOut(this.bodies.timeout));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if !this.bodies.take(data.len()) {
                            return this.fail(Stopped::OverBudget);
                        }
                        this.held += data.len();
                        this.pending.extend_from_slice(&data);
                        if this.pending.len() >= PIECE {
                            let piece = this.pending.split().freeze();
                            return Poll::Ready(Some(Ok(Frame::data(piece))));
                        }
                    }
                    // Trailers come after the data: the data held goes first.
                    Err(trailers) => {
                        if this.pending.is_empty() {
                            return Poll::Ready(Some(Ok(trailers)));
                        }
                        this.trailers = Some(trailers);
                        let piece = this.pending.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(piece))));
                    }
                },
                Poll::Ready(Some(Err(error))) => {
                    this.end();
                    return Poll::Ready(Some(Err(error.into())));
                }
                Poll::Ready(None) => {
                    this.end();
                    if !this.pending.is_empty() {
                        let piece = this.pending.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(piece))));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.trailers.is_none()
            && (self.ended || (self.pending.is_empty() && self.inner.is_end_stream()))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        let inner = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = hyper::body::SizeHint::new();
        // The upper bound first: a lower one above it would panic.
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint.set_lower(inner.lower().saturating_add(pending));
        hint
    }
}

impl Drop for ReceivedBody {
    fn drop(&mut self) {
        self.bodies.give_back(self.held);
        if !self.ended {
            self.end();
        }
    }
}

/// Connections the kernel queues before they are accepted: a burst of
/// clients beyond the default 128 (Rust's) saw theirs dropped and retried a
/// second later. The kernel caps it at `net.core.somaxconn` (4096 by default).
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `address`, with `LISTEN_BACKLOG` and address reuse (a
/// restart does not wait for the old connections' TIME_WAIT).
pub fn listen(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raise the soft limit on open files to the hard limit, as Go's runtime
/// does: every connection holds a descriptor, and a soft limit of 1,024 (the
/// default under systemd) is reached by a burst of clients, after which no
/// connection is accepted until some close. Returns the soft limit in force.
pub fn raise_open_file_limit() -> Option<u64> {
    const NR_OPEN_DEFAULT: u64 = 1 << 20;
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    // An unlimited hard limit cannot be the soft one: Linux caps descriptors
    // at fs.nr_open, by default 2^20.
    let target = hard.min(NR_OPEN_DEFAULT);
    if soft >= target {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = target, "raised the open-file limit");
            Some(target)
        }
        Err(error) => {
            tracing::warn!(%error, soft, hard, "cannot raise the open-file limit");
            Some(soft)
        }
    }
}

/// A future that completes on SIGTERM or Ctrl-C (SIGINT).
///
/// Both handlers are installed here, when it is made, not when the future is
/// first polled: a signal that arrived in between would meet the default
/// disposition and kill the process without a clean stop. (With axum's
/// `serve`, which polled the shutdown future from a task of its own, that
/// window could outlast the first answer.)
pub fn termination_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("received Ctrl-C"),
            _ = terminate.recv() => tracing::info!("received SIGTERM"),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use axum::Router;
    use axum::routing::get;
    use nix::sys::signal::{Signal, raise};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use std::sync::Arc;

    use tokio::sync::Notify;

    use super::{Limits, raise_open_file_limit, serve, termination_signal};

    /// How long until the server closes `stream` (reading and discarding what
    /// it sends), or `None` if it is still open after 20 s.
    async fn closed_after(stream: &mut TcpStream) -> Option<Duration> {
        let start = Instant::now();
        let mut buffer = [0u8; 1024];
        let closed = async {
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), closed)
            .await
            .ok()
            .map(|()| start.elapsed())
    }

    /// Connections that send no request, half a request's headers, or nothing
    /// after an answer are closed once the header time-out has passed; one
    /// that sends a whole request is answered first. (Draining requests in
    /// flight on shutdown is tested on the binary, in tests/api/embedded.rs.)
    #[tokio::test]
    async fn connections_that_send_no_headers_are_closed_after_the_time_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            router,
            async {
                let _ = stopped.await;
            },
            Limits {
                drain: Duration::from_secs(5),
                header_timeout: Duration::from_secs(1),
                ..Limits::default()
            },
        ));

        let mut silent = TcpStream::connect(address).await.unwrap();
        let mut partial = TcpStream::connect(address).await.unwrap();
        partial
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut kept_alive = TcpStream::connect(address).await.unwrap();
        kept_alive
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 256];
        let read = kept_alive.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");

        for (what, stream) in [
            ("a silent connection", &mut silent),
            ("half a request's headers", &mut partial),
            ("an idle kept-alive connection", &mut kept_alive),
        ] {
            let after = closed_after(stream).await;
            assert!(
                after.is_some_and(|a| a < Duration::from_secs(5)),
                "{what} was still open after {after:?}"
            );
        }

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server stopped")
            .unwrap();
    }

    /// Request headers up to `MAX_HEAD_BYTES` are read; past twice that the
    /// request is refused (431) and the connection closed, rather than
    /// buffered up to hyper's default of about 400 KiB.
    #[tokio::test]
    async fn headers_past_the_head_limit_are_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" }));
        tokio::spawn(serve(
            listener,
            router,
            std::future::pending(),
            Limits::default(),
        ));
        let head = |bytes: usize| {
            let pad = "a".repeat(1000);
            let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
            for i in 0..bytes / 1010 {
                head.push_str(&format!("X-Pad-{i:03}: {pad}\r\n"));
            }
            head + "\r\n"
        };
        let within = head(super::MAX_HEAD_BYTES - 4096);
        let past = head(2 * super::MAX_HEAD_BYTES + 4096);
        assert!(within.len() < super::MAX_HEAD_BYTES && past.len() > 2 * super::MAX_HEAD_BYTES);

        for (request, status) in [(within, "200"), (past, "431")] {
            let mut stream = TcpStream::connect(address).await.unwrap();
            // The server may refuse before it has read all of it.
            let _ = stream.write_all(request.as_bytes()).await;
            let mut answer = Vec::new();
            let _ =
                tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
            let answer = String::from_utf8_lossy(&answer);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}")),
                "{} bytes of headers: {answer}",
                request.len()
            );
        }
    }

    /// Send `request` on `stream` and read one answer (the test answers are
    /// short: one read).
    async fn ask(stream: &mut TcpStream, path: &str) -> String {
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = [0u8; 256];
        let read = stream.read(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer[..read]).into_owned()
    }

    /// A server with at most `max` connections: `/` answers at once,
    /// `/slow` once `release` is notified.
    async fn limited(max: usize, release: Arc<Notify>) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/", get(|| async { "ok" })).route(
            "/slow",
            get(move || async move {
                release.notified().await;
                "done"
            }),
        );
        let limits = Limits {
            max_connections: max,
            ..Limits::default()
        };
        tokio::spawn(serve(listener, router, std::future::pending(), limits));
        address
    }

    /// At the limit, a new connection takes the place of the one idle
    /// longest: first one that was answered and is sending half of another
    /// request, then a silent one.
    #[tokio::test]
    async fn at_the_connection_limit_the_connection_idle_longest_gives_way() {
        let address = limited(2, Arc::new(Notify::new())).await;
        // Answered once, then sending half of a second request.
        let mut answered = TcpStream::connect(address).await.unwrap();
        assert!(ask(&mut answered, "/").await.ends_with("ok"));
        answered
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut silent = TcpStream::connect(address).await.unwrap();
        // Silent past the grace a connection just opened is given.
        tokio::time::sleep(super::FRESH_GRACE + Duration::from_millis(100)).await;

        // The newcomers stay open, so that each needs a place of its own.
        let mut newcomers = Vec::new();
        for (newcomer, gives_way) in [
            ("a third connection", &mut answered),
            ("a fourth connection", &mut silent),
        ] {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(5), ask(&mut stream, "/"))
                .await
                .unwrap_or_else(|_| panic!("{newcomer} was not answered at the limit"));
            assert!(answer.ends_with("ok"), "{answer}");
            let closed = closed_after(gives_way).await;
            assert!(
                closed.is_some_and(|c| c < Duration::from_secs(5)),
                "the connection idle longest stayed open for {newcomer}: {closed:?}"
            );
            newcomers.push(stream);
        }
    }

    /// At the limit, a connection just opened is not pushed out before it
    /// could send its request: the newcomer waits, and the silent one gives
    /// way only once it has been open for the grace.
    #[tokio::test]
    async fn at_the_connection_limit_a_connection_just_opened_is_given_time() {
        let address = limited(1, Arc::new(Notify::new())).await;
        let mut fresh = TcpStream::connect(address).await.unwrap();
        let opened = Instant::now();
        let mut newcomer = TcpStream::connect(address).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), ask(&mut newcomer, "/"))
            .await
            .expect("the newcomer was not answered once the silent one was old enough");
        let answered_after = opened.elapsed();
        assert!(answer.ends_with("ok"), "{answer}");
        assert!(
            answered_after >= super::FRESH_GRACE,
            "the connection just opened gave way after {answered_after:?}"
        );
        let closed = closed_after(&mut fresh).await;
        assert!(closed.is_some(), "the silent connection stayed open");
    }

    /// At the limit with every connection answering, a new connection waits;
    /// the answer in flight is sent whole, then the new one is served.
    #[tokio::test]
    async fn at_the_connection_limit_answers_in_flight_finish_first() {
        let release = Arc::new(Notify::new());
        let address = limited(1, release.clone()).await;
        let mut busy = TcpStream::connect(address).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // Let the request reach the handler.
        tokio::time::sleep(Duration::from_millis(200)).await;

        let mut waiting = TcpStream::connect(address).await.unwrap();
        let pending = ask(&mut waiting, "/");
        tokio::pin!(pending);
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut pending)
                .await
                .is_err(),
            "a connection was served beyond the limit"
        );

        release.notify_one();
        let mut answer = [0u8; 256];
        let read = busy.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..read]);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        let answer = tokio::time::timeout(Duration::from_secs(5), pending)
            .await
            .expect("the waiting connection was served once the other was idle");
        assert!(answer.ends_with("ok"), "{answer}");
    }

    /// A soft limit below the hard one is raised to it (or to 2^20 if the
    /// hard limit is higher).
    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let target = hard.min(1 << 20);
        setrlimit(Resource::RLIMIT_NOFILE, target.min(4096) / 2, hard).unwrap();
        assert_eq!(raise_open_file_limit(), Some(target));
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (target, hard));
    }

    /// Raised before the future is ever polled, each signal is still caught
    /// (without the handler, the default disposition ends this test process)
    /// and completes the future.
    #[tokio::test]
    async fn a_signal_before_the_first_poll_is_caught() {
        for signal in [Signal::SIGTERM, Signal::SIGINT] {
            let stopped = termination_signal().unwrap();
            raise(signal).unwrap();
            tokio::time::timeout(Duration::from_secs(10), stopped)
                .await
                .unwrap_or_else(|_| panic!("{signal} did not complete the future"));
        }
    }
}

#[cfg(test)]
mod body_tests {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::{get, post};
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::{Limits, serve};
    use crate::http::extract::BodyBytes;

    /// A server whose `/count` answers how many data frames and bytes its
    /// body came in, `/echo` the length of its body as the API's extractor
    /// reads it, and `/` "ok".
    async fn server(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/", get(|| async { "ok" }))
            .route(
                "/count",
                post(|body: axum::body::Body| async move {
                    let (mut frames, mut bytes) = (0, 0);
                    let mut body = body;
                    while let Some(frame) = body.frame().await {
                        if let Ok(data) = frame.unwrap().into_data() {
                            frames += 1;
                            bytes += data.len();
                        }
                    }
                    format!("{frames} {bytes}")
                }),
            )
            .route(
                "/echo",
                post(|BodyBytes(body): BodyBytes| async move { body.len().to_string() }),
            );
        tokio::spawn(serve(listener, router, std::future::pending(), limits));
        address
    }

    /// A connection to `address` that has sent `bytes`.
    async fn sent(address: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        stream
    }

    async fn answer(stream: &mut TcpStream) -> String {
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        // One answer: stop at the first read that ends it (short answers).
        loop {
            let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer))
                .await
                .expect("an answer within 20 s")
                .unwrap();
            answer.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&answer);
            if read == 0 || text.contains("\r\n\r\n") && !text.ends_with("\r\n\r\n") {
                return text.into_owned();
            }
        }
    }

    /// A body sent a byte at a time reaches the handler as one piece, not
    /// one frame per byte: hyper's frames share its read buffer, and a
    /// handler collecting a thousand of them held a buffer for each.
    #[tokio::test]
    async fn a_body_sent_a_byte_at_a_time_arrives_in_one_piece() {
        let address = server(Limits::default()).await;
        let mut stream = sent(
            address,
            b"POST /count HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n",
        )
        .await;
        stream.set_nodelay(true).unwrap();
        for _ in 0..300 {
            stream.write_all(b"x").await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let answer = answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("1 300"), "{answer}");
    }

    /// A body that does not arrive within the body time-out is answered 408,
    /// as a problem document, well before the request time-out.
    #[tokio::test]
    async fn a_body_that_does_not_arrive_in_time_is_answered_408() {
        let limits = Limits {
            body_timeout: Duration::from_secs(1),
            ..Limits::default()
        };
        let address = server(limits).await;
        let mut stream = sent(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc",
        )
        .await;
        let started = std::time::Instant::now();
        let answer = answer(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(answer.contains("did not arrive within 1 s"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// Bodies arriving at once share a budget: past it a request is refused
    /// with 503 (and Retry-After) rather than held in memory; once those
    /// bodies are gone, the next fits again.
    #[tokio::test]
    async fn bodies_arriving_at_once_share_a_budget() {
        let limits = Limits {
            receiving_bytes: 1000,
            ..Limits::default()
        };
        let address = server(limits).await;
        // 800 bytes of a 900-byte body, held.
        let mut holding = sent(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n",
        )
        .await;
        holding.write_all(&[b'x'; 800]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut other = sent(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n",
        )
        .await;
        other.write_all(&[b'y'; 300]).await.unwrap();
        let refused = answer(&mut other).await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.to_ascii_lowercase().contains("retry-after: 1"),
            "{refused}"
        );
        assert!(refused.contains("too many request bodies"), "{refused}");
        // The first completes; its bytes go back to the budget.
        holding.write_all(&[b'x'; 100]).await.unwrap();
        let done = answer(&mut holding).await;
        assert!(done.ends_with("900"), "{done}");
        let mut again = sent(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n",
        )
        .await;
        again.write_all(&[b'y'; 300]).await.unwrap();
        let fits = answer(&mut again).await;
        assert!(fits.ends_with("300"), "{fits}");
    }

    /// At the connection limit, connections stalled in a request body give
    /// way to a new client, as idle ones do: before, a client that trickled
    /// bodies on every place kept all others out until the time-out.
    #[tokio::test]
    async fn stalled_bodies_give_way_at_the_connection_limit() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let address = server(limits).await;
        let mut stalled = Vec::new();
        for _ in 0..2 {
            let stream = sent(
                address,
                b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nab",
            )
            .await;
            stalled.push(stream);
        }
        // Past the grace given to new connections.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let mut client = sent(address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let started = std::time::Instant::now();
        let answer = answer(&mut client).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }
}

#[cfg(test)]
mod listen_tests {
    use std::time::Duration;

    /// A burst of connections beyond 128 is queued by the kernel while none
    /// is accepted yet: with Rust's default backlog (128) the rest were
    /// dropped and retried a second later.
    #[tokio::test]
    async fn the_listener_queues_a_burst_of_connections() {
        let listener = super::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = listener.local_addr().unwrap();
        let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(4096);
        let burst = 500.min(somaxconn);
        let connects = (0..burst).map(|_| {
            tokio::time::timeout(
                Duration::from_millis(800),
                tokio::net::TcpStream::connect(address),
            )
        });
        let results = futures_util::future::join_all(connects).await;
        let queued = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
        assert_eq!(queued, burst, "connections queued before any accept");
        drop(listener);
    }
}

#[cfg(test)]
mod stall_tests {
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::{Limits, serve};

    /// A server whose `/big` answers `bytes` bytes, with a write-stall (and
    /// header) limit of 1 s, and a client on it with a receive buffer of
    /// `receive_buffer` bytes that has asked for `/big`.
    async fn asked_for_big(bytes: usize, receive_buffer: u32) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/big", get(move || async move { vec![b'x'; bytes] }));
        let limits = Limits {
            header_timeout: Duration::from_secs(1),
            ..Limits::default()
        };
        tokio::spawn(serve(listener, router, std::future::pending(), limits));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(receive_buffer).unwrap();
        let mut stream = socket.connect(address).await.unwrap();
        stream
            .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        stream
    }

    /// A client that asks for a large answer and reads none of it for longer
    /// than the limit is dropped, its answer with it: it gets only what the
    /// sockets' buffers held.
    #[tokio::test]
    async fn a_client_that_does_not_read_its_answer_is_dropped() {
        const BYTES: usize = 32 << 20;
        let mut stream = asked_for_big(BYTES, 1 << 16).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut received = 0;
        let mut buffer = vec![0u8; 1 << 16];
        let read_all = async {
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => received += n,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), read_all)
            .await
            .expect("the connection ends");
        assert!(received < BYTES, "received all {received} bytes");
    }

    /// A client that reads its answer slowly but steadily gets all of it,
    /// however much longer than the limit that takes: only a write that
    /// waits the whole limit with the client reading nothing ends the
    /// connection. (A write can wait longer than the limit for a slow
    /// client to drain a large send buffer: a probe's client reading 30 KB/s
    /// lost the end of a 3 MB answer.)
    #[tokio::test]
    async fn a_client_reading_slowly_gets_its_whole_answer() {
        // More than a send buffer holds (up to 4 MiB by default).
        const BYTES: usize = 8 << 20;
        let mut stream = asked_for_big(BYTES, 4096).await;
        let mut received = 0;
        let mut buffer = vec![0u8; 4096];
        let started = std::time::Instant::now();
        loop {
            // For 3 s about 40 KB/s: the server's full send buffer drains
            // too slowly for a write to go on within the 1 s limit (the
            // kernel wakes a writer once a third of it is free). Then fast.
            if started.elapsed() < Duration::from_secs(3) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n,
            }
        }
        assert!(started.elapsed() > Duration::from_secs(3));
        assert!(
            received > BYTES,
            "received {received} of {BYTES} bytes and more"
        );
    }
}

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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            drain: Duration::ZERO,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_S),
            max_connections: DEFAULT_MAX_CONNECTIONS,
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
        .header_read_timeout(limits.header_timeout);
    // At most u32::MAX, so that the drain can wait for every permit at once.
    let max = limits
        .max_connections
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let open = Arc::new(Open::new(max));
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
        };
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

type Connection = http1::Connection<TokioIo<TcpStream>, Counted>;

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
                // Silent, or still sending its first request's headers:
                // nothing to finish.
                if !tracked.requested.load(Ordering::Acquire) {
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
    /// (and either answered once or open for `FRESH_GRACE`), to close; none
    /// if every connection is answering or new.
    fn evict_idlest(&self) {
        let grace_us = micros(FRESH_GRACE);
        let now_us = micros(self.epoch.elapsed());
        let connections = self.connections();
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
            .min_by_key(|t| (t.last_active_us.load(Ordering::Relaxed), t.id));
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
}

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
}

impl hyper::service::Service<Request<Incoming>> for Counted {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let busy = InFlight::new(self.tracked.clone());
        let answer = self.router.clone().oneshot(request);
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

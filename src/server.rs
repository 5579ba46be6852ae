//! Serving HTTP until a shutdown signal, with a bounded drain, and with a
//! bound on how long a connection may take to send a request's headers.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// The header time-out `serve` is given by default (`--header-timeout-s`).
pub const DEFAULT_HEADER_TIMEOUT_S: u64 = 30;

/// Serve `router` on `listener` until `shutdown` completes; then stop accepting
/// connections and give in-flight requests up to `drain` to finish.
///
/// A connection must send each request's headers within `header_timeout` of
/// being opened or of its previous answer, or it is closed: a client that
/// opens connections and sends nothing, or a header a byte at a time
/// (slowloris), cannot hold them, and their file descriptors, for ever.
/// (axum's own `serve` sets no timer, so hyper applies no such limit.)
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
    header_timeout: Duration,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let connections = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            // Accept errors (too many open files, a connection reset before
            // it was accepted) are logged and retried by axum's `Listener`.
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed with an error");
            }
        });
    }
    drop(listener);
    tracing::info!(
        drain_s = drain.as_secs(),
        "shutting down: draining requests"
    );
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(drain) => {
            tracing::warn!("drain time-out: closing the remaining connections");
        }
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

    use super::{raise_open_file_limit, serve, termination_signal};

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
            Duration::from_secs(5),
            Duration::from_secs(1),
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

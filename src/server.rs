//! Serving HTTP until a shutdown signal, with a bounded drain.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// Serve `router` on `listener` until `shutdown` completes; then stop accepting
/// connections and give in-flight requests up to `drain` to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) -> std::io::Result<()> {
    let draining = std::sync::Arc::new(Notify::new());
    let signal = {
        let draining = draining.clone();
        async move {
            shutdown.await;
            tracing::info!(
                drain_s = drain.as_secs(),
                "shutting down: draining requests"
            );
            draining.notify_one();
        }
    };
    let server = axum::serve(listener, router).with_graceful_shutdown(signal);
    tokio::select! {
        result = server => result,
        () = async {
            draining.notified().await;
            tokio::time::sleep(drain).await;
        } => {
            tracing::warn!("drain time-out: closing the remaining connections");
            Ok(())
        }
    }
}

/// A future that completes on SIGTERM or Ctrl-C (SIGINT).
///
/// Both handlers are installed here, before the future is first polled: a
/// signal that arrives between start-up and the first poll of the shutdown
/// future (which axum polls from a task of its own, possibly after the first
/// request is answered) would otherwise meet the default disposition and kill
/// the process without a clean stop.
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
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::termination_signal;

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

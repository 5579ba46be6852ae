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

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn termination_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}

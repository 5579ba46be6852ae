//! Logs (tracing) and metrics (Prometheus text format on `/metrics`).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Install the global log subscriber. Logs go to standard error.
pub fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| anyhow::anyhow!("--log {filter:?} is not a valid filter: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}

static METRICS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process-wide metrics recorder, installed on first use.
fn metrics_handle() -> Option<&'static PrometheusHandle> {
    METRICS
        .get_or_init(|| {
            const BUCKETS: &[f64] = &[
                0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ];
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("http_request_duration_seconds".into()),
                    BUCKETS,
                )
                .and_then(PrometheusBuilder::install_recorder)
                .inspect_err(|error| tracing::warn!(%error, "metrics are disabled"))
                .ok()
        })
        .as_ref()
}

/// Install the metrics recorder (call once at start-up, before serving).
pub fn init_metrics() {
    metrics_handle();
}

/// The metrics in Prometheus text exposition format.
pub fn render_metrics() -> String {
    match metrics_handle() {
        Some(handle) => {
            handle.run_upkeep();
            handle.render()
        }
        None => String::new(),
    }
}

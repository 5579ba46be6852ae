//! Logs (tracing) and metrics (Prometheus text format on `/metrics`).

use std::sync::OnceLock;

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Install the global log subscriber. Logs go to standard error.
pub fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(filter)
        .map_err(|e| anyhow::anyhow!("--log {filter:?} is not a valid filter: {e}"))?;
    // Colours only for a terminal: not in a file or the journal.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
            // Most answers take well under a millisecond (a kept answer
            // about 0.1 ms), a fit or a slow database tens to thousands.
            const BUCKETS: &[f64] = &[
                0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 10.0,
            ];
            // A fit takes from well under a millisecond to a few tens.
            const FIT_BUCKETS: &[f64] = &[
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
            ];
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("http_request_duration_seconds".into()),
                    BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("model_fit_duration_seconds".into()),
                        FIT_BUCKETS,
                    )
                })
                .and_then(PrometheusBuilder::install_recorder)
                .inspect_err(|error| tracing::warn!(%error, "metrics are disabled"))
                .ok()
        })
        .as_ref()
}

/// The `# HELP` text of each metric the recorder keeps (the gauges read
/// at scrape time carry their own, `service::gauges`), so that Prometheus
/// and `promtool check metrics` find every metric described.
const DESCRIPTIONS: &[(Kind, &str, &str)] = &[
    (
        Kind::Counter,
        "http_requests_total",
        "Requests answered, by method, route template and status.",
    ),
    (
        Kind::Histogram,
        "http_request_duration_seconds",
        "Time to answer a request, by method, route template and status.",
    ),
    (
        Kind::Gauge,
        "http_connections_open",
        "Client connections open.",
    ),
    (
        Kind::Gauge,
        "http_connections_max",
        "The most client connections held at once (--max-connections).",
    ),
    (
        Kind::Counter,
        "heavy_requests_refused_total",
        "Requests answered 429 because every permit for heavy computations was taken (--heavy-permits).",
    ),
    (
        Kind::Counter,
        crate::service::error::UNVALIDATED_VALUES,
        "Values the database refused that validation should have caught (answered 400; a bug to report).",
    ),
    (
        Kind::Counter,
        "admission_decisions_total",
        "Admission decisions, by request (question or job_start), decision and reason.",
    ),
    (
        Kind::Counter,
        "predictions_total",
        "Predictions answered, by metric and source (history or model).",
    ),
    (
        Kind::Counter,
        "prediction_flags_total",
        "Flags on the predictions answered, by metric and flag.",
    ),
    (Kind::Counter, "model_fits_total", "Model fits begun."),
    (
        Kind::Histogram,
        "model_fit_duration_seconds",
        "Time a model fit took, by metric (without reading the history).",
    ),
    (
        Kind::Counter,
        "model_cache_evictions_total",
        "Times the kept models of the applications used least recently were dropped.",
    ),
    (
        Kind::Counter,
        "cache_lookups_total",
        "Lookups of the in-memory copies, by cache and result (hit or miss).",
    ),
    (
        Kind::Counter,
        "jobs_run_unreserved_total",
        "Jobs a scheduler ran without a power reservation because the service could not be reached.",
    ),
];

/// What a described metric is.
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Install the metrics recorder (call once at start-up, before serving).
pub fn init_metrics() {
    if metrics_handle().is_some() {
        for (kind, name, help) in DESCRIPTIONS {
            match kind {
                Kind::Counter => metrics::describe_counter!(*name, *help),
                Kind::Gauge => metrics::describe_gauge!(*name, *help),
                Kind::Histogram => metrics::describe_histogram!(*name, *help),
            }
        }
    }
    // Counters an alert watches with increase() are shown from 0 at start,
    // so that their first event is an increase, not a new series.
    for name in [
        "jobs_run_unreserved_total",
        "model_fits_total",
        "heavy_requests_refused_total",
        crate::service::error::UNVALIDATED_VALUES,
    ] {
        counter(name, &[]).increment(0);
    }
    crate::predict::init_counters();
    crate::service::admission::init_counters();
}

/// Install the recorder if it is not yet: handles registered before it is
/// would count nowhere, for good.
pub fn ensure_recorder() {
    metrics_handle();
}

/// The counter `name` with `labels`, after the recorder is installed: a
/// handle to keep, so that counting is an atomic add with no registry
/// lookup (the prediction path counts several times per request).
pub fn counter(name: &'static str, labels: &[(&'static str, &'static str)]) -> Counter {
    ensure_recorder();
    metrics::counter!(name, static_labels(labels))
}

/// The histogram `name` with `labels`, after the recorder is installed.
pub fn histogram(name: &'static str, labels: &[(&'static str, &'static str)]) -> Histogram {
    ensure_recorder();
    metrics::histogram!(name, static_labels(labels))
}

/// The gauge `name` (no labels), after the recorder is installed.
pub fn gauge(name: &'static str) -> Gauge {
    ensure_recorder();
    metrics::gauge!(name)
}

fn static_labels(labels: &[(&'static str, &'static str)]) -> Vec<metrics::Label> {
    labels
        .iter()
        .map(|&(k, v)| metrics::Label::from_static_parts(k, v))
        .collect()
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

/// The in-memory copies whose lookups `/metrics` counts
/// (`cache_lookups_total{cache, result}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    Token,
    Application,
    NodePowers,
    Load,
    /// The node registry alone (`Caches::registry`).
    Registry,
    /// A rendered prediction answer (`Caches::answer`).
    Answer,
    /// A fitted model (`predict::Models`): a miss is a fit.
    Model,
}

impl Lookup {
    const ALL: [Lookup; 7] = [
        Lookup::Token,
        Lookup::Application,
        Lookup::NodePowers,
        Lookup::Load,
        Lookup::Registry,
        Lookup::Answer,
        Lookup::Model,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Lookup::Token => "token",
            Lookup::Application => "application",
            Lookup::NodePowers => "node_powers",
            Lookup::Load => "load",
            Lookup::Registry => "registry",
            Lookup::Answer => "answer",
            Lookup::Model => "model",
        }
    }
}

/// Count a lookup of `cache`, found (`hit`) or not.
pub fn count_lookup(cache: Lookup, hit: bool) {
    static COUNTERS: OnceLock<Vec<[Counter; 2]>> = OnceLock::new();
    let counters = COUNTERS.get_or_init(|| {
        Lookup::ALL
            .iter()
            .map(|c| {
                ["hit", "miss"].map(|result| {
                    counter(
                        "cache_lookups_total",
                        &[("cache", c.as_str()), ("result", result)],
                    )
                })
            })
            .collect()
    });
    // `ALL` lists the caches in their declared order.
    counters[cache as usize][usize::from(!hit)].increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cache_is_listed_in_its_declared_order() {
        for (i, cache) in Lookup::ALL.iter().enumerate() {
            assert_eq!(*cache as usize, i, "{cache:?}");
        }
    }

    /// A counter that appears at its first event hides that event from
    /// `rate()` and `increase()`: those alerts and panels read are shown
    /// from the start (values may have grown since: the recorder is the
    /// process's, shared with the other tests).
    #[test]
    fn counters_alerts_read_are_shown_before_their_first_event() {
        init_metrics();
        let text = render_metrics();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s))
            .collect();
        let decision = |request: &str, decision: &str, reason: &str| {
            format!(
                r#"admission_decisions_total{{request="{request}",decision="{decision}",reason="{reason}"}}"#
            )
        };
        let mut expected = vec![
            "jobs_run_unreserved_total".to_owned(),
            "heavy_requests_refused_total".to_owned(),
            r#"predictions_total{metric="tts",source="model"}"#.to_owned(),
            r#"prediction_flags_total{metric="apc",flag="database_unavailable"}"#.to_owned(),
            decision("question", "admit", "fits"),
            decision("job_start", "forced", "power_cap_and_energy_budget"),
        ];
        for reason in ["power_cap", "energy_budget", "power_cap_and_energy_budget"] {
            expected.push(decision("question", "refuse", reason));
            expected.push(decision("job_start", "refuse", reason));
        }
        for name in &expected {
            assert!(series.contains(&name.as_str()), "no {name} in {text}");
        }
        // Only the decisions that can happen: an admission fits.
        assert!(
            !text.contains(r#"decision="admit",reason="power_cap""#),
            "{text}"
        );
    }
}

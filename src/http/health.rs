//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ApiResult, Problem};
use crate::{db, service, telemetry};

#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
}

/// Liveness: the process is up and serving HTTP. Does not touch the database.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// How long readiness waits for the database.
const READINESS_TIME_OUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Readiness: the database is reachable and its migrations are applied
/// (`ready`); or the database became unreachable while serving
/// (`degraded`): predictions of the applications in memory are still
/// answered, flagged `database_unavailable`, and writes answer 503 with
/// Retry-After. A degraded replica stays in service, since every replica
/// would be degraded alike.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready to serve (`ready`), or serving from memory through a database outage (`degraded`)", body = Health),
        (status = 503, description = "Not ready; `detail` says why", body = Problem,
         content_type = "application/problem+json"),
    ))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    let degraded = || Ok(Json(Health { status: "degraded" }));
    if state.caches.degraded() {
        return degraded();
    }
    // A database that hangs answers nothing: no answer within a second is
    // an outage, as one that refuses (docs/operations.md).
    match tokio::time::timeout(READINESS_TIME_OUT, db::readiness(&state.pool)).await {
        Ok(Ok(())) => Ok(Json(Health { status: "ready" })),
        Ok(Err(reason @ (db::NOT_MIGRATED | db::STOPPING))) => Err(ApiError::Unavailable(reason)),
        // This answer only: a pool taken up by load times out too, and is
        // no outage; the probe (`cache::listen`) decides for the service.
        Ok(Err(_)) | Err(_) => degraded(),
    }
}

/// Prometheus metrics (text exposition format): `http_requests_total` and
/// `http_request_duration_seconds` by method, route and status, and what
/// operators watch (docs/operations.md): per power scope `power_cap_watts`,
/// `power_draw_watts`, `power_headroom_watts`, `power_reserved_watts` and
/// `jobs_running`; `jobs_stale` and `jobs_expired`; per account
/// `budget_limit_joules`, `budget_consumed_joules`,
/// `budget_committed_joules`, `budget_remaining_joules` and
/// `budget_runs_out_within_period`; `gauges_up` is 0 when these could not
/// be read (database unreachable); `admission_decisions_total`,
/// `predictions_total`, `prediction_flags_total`, `model_fits_total`,
/// `model_fit_duration_seconds`, `cache_lookups_total`,
/// `db_pool_connections`, `db_pool_max_connections`, `database_degraded`,
/// `http_connections_open`, `http_connections_max`,
/// `jobs_run_unreserved_total` and `db_values_refused_total`. No token
/// needed.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Metrics", body = String,
               content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(
    State(state): State<AppState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let mut text = telemetry::render_metrics();
    service::gauges::process(&state, &mut text);
    // Through an outage the database is not asked: the scrape stays quick.
    let gauges = if state.caches.degraded() {
        None
    } else {
        tokio::time::timeout(GAUGES_TIME_LIMIT, service::gauges::render(&state))
            .await
            .ok()
            .and_then(Result::ok)
    };
    text.push_str("# HELP gauges_up Whether the power and budget gauges could be read.\n");
    text.push_str("# TYPE gauges_up gauge\n");
    match gauges {
        Some(gauges) => {
            text.push_str("gauges_up 1\n");
            text.push_str(&gauges);
        }
        None => text.push_str("gauges_up 0\n"),
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
}

/// How long a scrape waits for the power and budget gauges.
const GAUGES_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ApiResult, Problem};
use crate::{db, telemetry};

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
    if state.caches.degraded() {
        return Ok(Json(Health { status: "degraded" }));
    }
    db::readiness(&state.pool)
        .await
        .map_err(ApiError::Unavailable)?;
    Ok(Json(Health { status: "ready" }))
}

/// Prometheus metrics (text exposition format): `http_requests_total` and
/// `http_request_duration_seconds` by method, route and status. No token needed.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Metrics", body = String,
               content_type = "text/plain; version=0.0.4")))]
pub async fn metrics() -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        telemetry::render_metrics(),
    )
}

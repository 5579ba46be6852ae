//! `GET /v1/power/headroom`: the power cap in force against the estimated
//! draw of running jobs and idle nodes (docs/model.md §5).

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::ApiResult;
use super::error::responses::{BadQuery, NeedsRead, Unauthorized, Unavailable};
use super::extract::Query;
use crate::service::power;
pub use crate::service::power::{DEFAULT_IDLE_POWER_W, Headroom, IdleDraw, JobDraw};

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HeadroomParams {
    /// One partition: its cap, its jobs and its nodes; default the whole system.
    pub partition: Option<String>,
    /// The time of the cap in force and of the draw (RFC 3339, default
    /// now). Later than now, the draw leaves out the running jobs whose
    /// reservations end by then; earlier, it is the draw of now.
    pub at: Option<DateTime<Utc>>,
}

/// The power headroom under the cap in force.
///
/// The draw is the running jobs' reserved power (their node set's APC, or
/// the worst-node bound when nodes are classified, else the expected APC)
/// plus the idle power of the registered nodes no job holds (from the
/// registry, else 100 W each). Jobs reported without a node list hold that
/// many of the scope's nodes, counted at their mean idle power.
#[utoipa::path(get, path = "/v1/power/headroom", tag = "power",
    params(HeadroomParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "Cap, draw and headroom", body = Headroom),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn headroom(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<HeadroomParams>,
) -> ApiResult<axum::Json<Headroom>> {
    super::caps::check_scope(params.partition.as_deref(), params.at)?;
    let now = Utc::now();
    let at = params.at.unwrap_or(now);
    let partition = params.partition.as_deref();
    let answer = power::headroom(&state, partition, at, now).await?;
    Ok(axum::Json(answer))
}

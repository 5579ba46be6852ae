//! `GET /v1/power/headroom`: the power cap in force against the estimated
//! draw of running jobs and idle nodes (design.md §5).

use std::collections::HashSet;

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::caps::PowerCap;
use super::error::{ApiResult, Problem};
use super::extract::Query;
use crate::store;

/// Idle draw of a registered node whose idle power is not recorded, W.
pub const DEFAULT_IDLE_POWER_W: f64 = 100.0;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HeadroomParams {
    /// One partition: its cap, its jobs and its nodes; default the whole system.
    pub partition: Option<String>,
    /// The time of the cap in force (RFC 3339, default now). The draw is
    /// always that of the jobs running now.
    pub at: Option<DateTime<Utc>>,
}

/// A running job's share of the draw.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobDraw {
    pub source: String,
    pub job_id: String,
    pub app: String,
    pub nodes: i32,
    pub reserved_w: f64,
    /// How the reservation was made (see `Job.reserved_basis`).
    pub basis: String,
}

/// The idle nodes' share of the draw.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IdleDraw {
    /// Registered nodes of the scope that no running job holds.
    pub nodes: usize,
    pub power_w: f64,
    /// How many of them have no recorded idle power and count at 100 W.
    pub nodes_at_default: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Headroom {
    pub partition: Option<String>,
    pub at: DateTime<Utc>,
    /// The cap in force at `at` for the scope; `null` when none is.
    pub cap: Option<PowerCap>,
    /// Σ of the running jobs' reserved power and the idle nodes' power, W.
    pub draw_w: f64,
    /// cap − draw, W; `null` without a cap. Negative: over the cap.
    pub headroom_w: Option<f64>,
    pub jobs: Vec<JobDraw>,
    pub idle: IdleDraw,
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
        (status = 400, description = "Bad query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or invalid token", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Database unavailable, or the request took too long; retry", body = Problem, content_type = "application/problem+json"),
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
    let answer = compute(&state, partition, at, now).await?;
    Ok(axum::Json(answer))
}

/// Cap, draw and headroom of a scope.
pub(super) async fn compute(
    state: &AppState,
    partition: Option<&str>,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ApiResult<Headroom> {
    let cap = store::caps::in_force(&state.pool, partition, at).await?;
    let jobs = store::jobs::list(&state.pool, partition, None).await?;
    let nodes = store::nodes::idle_powers(&state.pool, partition).await?;
    let held: HashSet<&str> = jobs
        .iter()
        .filter_map(|j| j.node_list.as_ref())
        .flatten()
        .map(String::as_str)
        .collect();
    let anonymous: usize = jobs
        .iter()
        .filter(|j| j.node_list.is_none())
        .map(|j| usize::try_from(j.nodes).unwrap_or(0))
        .sum();
    let free: Vec<Option<f64>> = nodes
        .iter()
        .filter(|(name, _)| !held.contains(name.as_str()))
        .map(|(_, idle)| *idle)
        .collect();
    let idle_nodes = free.len().saturating_sub(anonymous);
    let mean_idle = if free.is_empty() {
        0.0
    } else {
        free.iter()
            .map(|p| p.unwrap_or(DEFAULT_IDLE_POWER_W))
            .sum::<f64>()
            / free.len() as f64
    };
    let at_default = free.iter().filter(|p| p.is_none()).count();
    let idle = IdleDraw {
        nodes: idle_nodes,
        power_w: mean_idle * idle_nodes as f64,
        // Of the free nodes, those without a recorded idle power, in
        // proportion when some are held by jobs without a node list.
        nodes_at_default: if free.is_empty() {
            0
        } else {
            (at_default * idle_nodes).div_ceil(free.len())
        },
    };
    let jobs: Vec<JobDraw> = jobs
        .into_iter()
        .map(|j| JobDraw {
            source: j.source,
            job_id: j.job_id,
            app: j.app,
            nodes: j.nodes,
            reserved_w: j.reserved_w,
            basis: j.reserved_basis,
        })
        .collect();
    let draw_w = jobs.iter().map(|j| j.reserved_w).sum::<f64>() + idle.power_w;
    let cap = cap.map(|c| PowerCap::from_row(c, now));
    Ok(Headroom {
        partition: partition.map(str::to_owned),
        at,
        headroom_w: cap.as_ref().map(|c| c.limit_w - draw_w),
        cap,
        draw_w,
        jobs,
        idle,
    })
}

//! `GET /v1/nodes/classification`: nodes classed by the power they draw
//! under a reference workload (docs/model.md §3).

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{BadQuery, NeedsRead, Unauthorized, Unavailable};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::Query;
use crate::model::classify::{self, NodePower};
use crate::service::nodes;
use crate::validate::{self, FieldError};

/// Most classes of a classification.
pub const MAX_CLASSES: usize = 10;
/// Most histogram bins of a classification.
pub const MAX_BINS: usize = 200;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClassificationParams {
    /// The reference workload; default: the service's (`--reference-workload`).
    pub workload: Option<String>,
    /// Only nodes of this partition.
    pub partition: Option<String>,
    /// Number of classes, 1 to 10 (default 3: efficient, typical, hungry).
    #[param(minimum = 1, maximum = 10)]
    pub classes: Option<usize>,
    /// Histogram bins, 1 to 200 (default 20).
    #[param(minimum = 1, maximum = 200)]
    pub bins: Option<usize>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PowerClass {
    /// `efficient`, `typical`, `hungry` for three classes (`efficient`,
    /// `hungry` for two; `class_1` … `class_k` otherwise), by ascending power.
    pub name: String,
    pub lower_w: f64,
    pub upper_w: f64,
    /// Mean power of the class's nodes.
    pub centre_w: f64,
    pub nodes: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClassifiedNode {
    pub node: String,
    /// P_u: the mean of the node's samples within the window before its latest.
    pub power_w: f64,
    pub samples: i64,
    pub last_measured_at: DateTime<Utc>,
    /// The class's name.
    pub class: String,
    /// Modified z-score 0.6745·(P_u − median)/MAD.
    pub robust_z: f64,
    /// |robust_z| > 3.5.
    pub outlier: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistogramBin {
    pub lower_w: f64,
    pub upper_w: f64,
    pub nodes: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Classification {
    pub workload: String,
    pub partition: Option<String>,
    /// How far back from each node's latest sample its samples count.
    pub window_days: f64,
    /// Power of the best node.
    pub p_min_w: f64,
    /// Power of the worst node.
    pub p_max_w: f64,
    pub mean_w: f64,
    pub median_w: f64,
    pub std_dev_w: f64,
    /// Median absolute deviation.
    pub mad_w: f64,
    /// (P_max − P_min) / P_min, per cent.
    pub spread_pct: f64,
    pub classes: Vec<PowerClass>,
    /// By ascending power.
    pub nodes: Vec<ClassifiedNode>,
    /// Equal-width bins from P_min to P_max.
    pub histogram: Vec<HistogramBin>,
}

/// Classify nodes by the power they draw under a reference workload.
///
/// Each node's P_u is the mean of its samples within the window before its
/// latest sample. Classes come from optimal one-dimensional k-means (natural
/// breaks), not from fixed thresholds; outliers are flagged by robust z-score.
#[utoipa::path(get, path = "/v1/nodes/classification", tag = "nodes",
    params(ClassificationParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The classification", body = Classification),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No samples of this workload (in this partition)", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_classification(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<ClassificationParams>,
) -> ApiResult<axum::Json<Classification>> {
    let mut problems = Vec::new();
    let workload = checked_scope(
        &state,
        params.workload,
        params.partition.as_deref(),
        &mut problems,
    );
    let classes = params.classes.unwrap_or(classify::DEFAULT_CLASSES);
    if !(1..=MAX_CLASSES).contains(&classes) {
        problems.push(FieldError::new(
            "classes",
            format!("must be between 1 and {MAX_CLASSES} (got {classes})"),
        ));
    }
    let bins = params.bins.unwrap_or(20);
    if !(1..=MAX_BINS).contains(&bins) {
        problems.push(FieldError::new(
            "bins",
            format!("must be between 1 and {MAX_BINS} (got {bins})"),
        ));
    }
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    classification(&state, workload, params.partition, classes, bins)
        .await
        .map(axum::Json)
}

/// The workload of a classification (else the service's reference
/// workload), with its partition checked; what is wrong goes to `problems`.
pub(crate) fn checked_scope(
    state: &AppState,
    workload: Option<String>,
    partition: Option<&str>,
    problems: &mut Vec<FieldError>,
) -> String {
    let workload = crate::service::nodes::workload_or_default(state, workload, "", problems);
    if let Some(Err(reason)) = partition.map(|p| validate::identifier(p, validate::TAG_MAX)) {
        problems.push(FieldError::new("partition", reason));
    }
    workload
}

/// The nodes of `partition` (all without) classed by their power under
/// `workload`, checked already: `NotFound` without samples.
pub(crate) async fn classification(
    state: &AppState,
    workload: String,
    partition: Option<String>,
    classes: usize,
    bins: usize,
) -> ApiResult<Classification> {
    let rows = nodes::powers(state, &workload, partition.as_deref()).await?;
    let inputs: Vec<NodePower> = rows
        .iter()
        .map(|r| NodePower {
            node: r.name.clone(),
            power_w: r.power_w,
        })
        .collect();
    let scope = match &partition {
        Some(p) => format!(" in partition `{p}`"),
        None => String::new(),
    };
    let c = classify::classify(&inputs, classes, bins).ok_or_else(|| {
        ApiError::NotFound(format!("no power samples of workload `{workload}`{scope}"))
    })?;
    let by_name: std::collections::HashMap<&str, &nodes::NodePowerRow> =
        rows.iter().map(|r| (r.name.as_str(), r)).collect();
    let nodes = c
        .nodes
        .iter()
        .map(|n| {
            let row = by_name.get(n.node.as_str());
            ClassifiedNode {
                node: n.node.clone(),
                power_w: n.power_w,
                samples: row.map_or(0, |r| r.samples),
                last_measured_at: row.map_or_else(Utc::now, |r| r.last_measured_at),
                class: c.classes[n.class].name.clone(),
                robust_z: n.robust_z,
                outlier: n.outlier,
            }
        })
        .collect();
    Ok(Classification {
        workload,
        partition,
        window_days: state.settings.node_window.as_secs_f64() / 86_400.0,
        p_min_w: c.p_min_w,
        p_max_w: c.p_max_w,
        mean_w: c.mean_w,
        median_w: c.median_w,
        std_dev_w: c.std_dev_w,
        mad_w: c.mad_w,
        spread_pct: c.spread_pct,
        classes: c
            .classes
            .iter()
            .map(|k| PowerClass {
                name: k.name.clone(),
                lower_w: k.lower_w,
                upper_w: k.upper_w,
                centre_w: k.centre_w,
                nodes: k.nodes,
            })
            .collect(),
        nodes,
        histogram: c
            .histogram
            .iter()
            .map(|b| HistogramBin {
                lower_w: b.lower_w,
                upper_w: b.upper_w,
                nodes: b.nodes,
            })
            .collect(),
    })
}

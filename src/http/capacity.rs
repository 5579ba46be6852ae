//! Capacity questions (docs/model.md §5): the largest node count under a power
//! limit, the energy- or time-optimal node count, and the time/energy Pareto
//! front, each from the application's fitted predictors.
//!
//! They read the fitted curves at every node count, measured or not (unlike
//! a prediction, which answers a measured count from its runs): comparing
//! counts needs one consistent curve, and one lucky run must not make its
//! node count look best.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::apps::find_app;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadParameter, FitsBusy, NeedsRead, Unauthorized, Unavailable, UnknownApp,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Path, Query};
use super::predictions::{check_allowed, check_nodes, fitted_models, predict_error};
use crate::model::capacity::{self, Choice, Objective};
use crate::model::{Metric, bounds};
use crate::predict::{self, Fitted};
use crate::store::apps::AppRow;
use crate::validate::{self, FieldError};

/// Most node counts one question searches.
pub const MAX_SEARCH_NODES: u32 = 100_000;

/// The node counts searched: `min_nodes` (default 1) to `max_nodes` (default
/// twice the largest measured count).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct SearchRange {
    pub min_nodes: u32,
    pub max_nodes: u32,
}

fn check_range(
    min: Option<i64>,
    max: Option<i64>,
    problems: &mut Vec<FieldError>,
) -> (Option<u32>, Option<u32>) {
    let mut check = |field: &str, value: Option<i64>| {
        value.and_then(|v| check_nodes(field, v).map_err(|e| problems.push(e)).ok())
    };
    let (min, max) = (check("min_nodes", min), check("max_nodes", max));
    if let (Some(lo), Some(hi)) = (min, max)
        && lo > hi
    {
        problems.push(FieldError::new(
            "min_nodes",
            format!("must not exceed max_nodes ({lo} > {hi})"),
        ));
    }
    (min, max)
}

/// The range searched, once the history is known; refused (400) when it
/// spans more than [`MAX_SEARCH_NODES`] counts.
fn search_range(min: Option<u32>, max: Option<u32>, app: &AppRow) -> ApiResult<SearchRange> {
    let largest = app
        .nodes_max
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1);
    let min_nodes = min.unwrap_or(1);
    let max_nodes = max
        .unwrap_or_else(|| largest.saturating_mul(2))
        .max(min_nodes);
    if max_nodes - min_nodes >= MAX_SEARCH_NODES {
        return Err(ApiError::bad_request(
            "max_nodes",
            format!(
                "the range {min_nodes}..{max_nodes} spans more than {MAX_SEARCH_NODES} node counts"
            ),
        ));
    }
    Ok(SearchRange {
        min_nodes,
        max_nodes,
    })
}

/// The predictors an answer used.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelsUsed {
    pub model_version: String,
    /// The model family per metric (docs/model.md §2.1): the one inside the
    /// measured range, then ` / ` and the one beyond it where they differ.
    pub ets: Option<String>,
    pub apc: Option<String>,
    pub tts: Option<String>,
    /// The classification behind worst-node bounds, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
}

fn case_of(fitted: &Fitted) -> String {
    let selection = &fitted.model.selection;
    let inside = selection.winner(crate::model::Regime::Inside).family;
    let beyond = selection.winner(crate::model::Regime::Beyond).family;
    if inside == beyond {
        inside.as_str().to_owned()
    } else {
        format!("{} / {}", inside.as_str(), beyond.as_str())
    }
}

/// `expected` APC, or the `worst` node allocation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    #[default]
    Expected,
    Worst,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MaxNodesParams {
    /// The power limit, W.
    #[param(exclusive_minimum = 0.0)]
    pub power_limit_w: f64,
    /// `expected` (default): the predicted APC; `worst`: on the worst n
    /// nodes of the classification (needs one).
    pub bound: Option<Bound>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i64>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i64>,
    /// Reference workload for `bound=worst`; default the service's.
    pub workload: Option<String>,
    /// Only this partition's nodes give P_min and P_max.
    pub partition: Option<String>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MaxNodes {
    pub app: String,
    pub power_limit_w: f64,
    pub bound: Bound,
    pub range: SearchRange,
    /// The largest node count whose APC stays within the limit; `null` when
    /// even the smallest of the range exceeds it.
    pub nodes: Option<u32>,
    /// The APC there, W.
    pub apc_w: Option<f64>,
    /// The APC of the next node count, which exceeds the limit (absent at
    /// the top of the range).
    pub next_apc_w: Option<f64>,
    /// Why there is no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub models: ModelsUsed,
}

/// The largest node count whose predicted APC stays within a power limit.
///
/// Every count of the range is checked (APC need not grow with n). With
/// `bound=worst`, the APC is that of the worst n nodes of the classification.
#[utoipa::path(get, path = "/v1/apps/{app}/max-nodes", tag = "capacity",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           MaxNodesParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The answer, or why there is none", body = MaxNodes),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "No runs yet, or no classification for bound=worst", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn max_nodes(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(tag): Path<String>,
    Query(params): Query<MaxNodesParams>,
) -> ApiResult<axum::Json<MaxNodes>> {
    let mut problems = Vec::new();
    if let Err(reason) = validate::positive(params.power_limit_w) {
        problems.push(FieldError::new("power_limit_w", reason));
    }
    let (min, max) = check_range(params.min_nodes, params.max_nodes, &mut problems);
    let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    let workload = crate::service::nodes::workload_or_default(
        &state,
        params.workload,
        "workload".into(),
        &mut problems,
    );
    if let Some(Err(reason)) = params
        .partition
        .as_deref()
        .map(|p| validate::identifier(p, validate::TAG_MAX))
    {
        problems.push(FieldError::new("partition", reason));
    }
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let app = find_app(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let allowed = predict::allowed_rmse(&app, allowed);
    let bound = params.bound.unwrap_or_default();
    let apc_model = fitted_models(&state, &app, &[Metric::Apc], allowed)
        .await?
        .remove(0);
    let mut models = ModelsUsed {
        model_version: predict::model_version(&app),
        ets: None,
        apc: Some(case_of(&apc_model)),
        tts: None,
        workload: None,
    };
    let nodes_range = range.min_nodes..=range.max_nodes;
    let apc_at: Box<dyn Fn(u32) -> f64 + Send> = match bound {
        Bound::Expected => Box::new(move |n| apc_model.model.predict_model(n).value),
        Bound::Worst => {
            let Some(powers) =
                crate::service::nodes::node_powers(&state, &workload, params.partition.as_deref())
                    .await?
            else {
                return Err(ApiError::invalid(
                    "bound",
                    format!(
                        "worst needs a node classification; workload `{workload}` has no samples"
                    ),
                ));
            };
            let best = state
                .models
                .best_node_apc(&state.pool, &app, &powers, allowed)
                .await
                .map_err(|e| predict_error(&app.tag, e))?;
            models.apc = Some(case_of(&best));
            models.workload = Some(workload);
            let scale = powers.scale;
            Box::new(move |n| bounds::worst_of(best.model.predict_model(n).value, n, &scale))
        }
    };
    let found = capacity::max_nodes(nodes_range, params.power_limit_w, &apc_at);
    let (nodes, apc_w, next_apc_w, reason) = match found {
        Some((n, apc)) => (
            Some(n),
            Some(apc),
            (n < range.max_nodes).then(|| apc_at(n + 1)),
            None,
        ),
        None => (
            None,
            None,
            None,
            Some(format!(
                "even {} node(s) are predicted to draw {:.0} W, above the limit",
                range.min_nodes,
                apc_at(range.min_nodes)
            )),
        ),
    };
    Ok(axum::Json(MaxNodes {
        app: app.tag.clone(),
        power_limit_w: params.power_limit_w,
        bound,
        range,
        nodes,
        apc_w,
        next_apc_w,
        reason,
        models,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ObjectiveName {
    /// Least EtS (within `deadline_s`, if given).
    Energy,
    /// Least TtS (within `energy_budget_j`, if given).
    Time,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OptimalParams {
    pub objective: ObjectiveName,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i64>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i64>,
    /// Only node counts predicted to finish within this time, s.
    #[param(exclusive_minimum = 0.0)]
    pub deadline_s: Option<f64>,
    /// Only node counts predicted to need at most this energy, J.
    #[param(exclusive_minimum = 0.0)]
    pub energy_budget_j: Option<f64>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

/// A node count with its predicted energy and time.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct NodeChoice {
    pub nodes: u32,
    pub ets_j: f64,
    pub tts_s: f64,
}

impl From<Choice> for NodeChoice {
    fn from(c: Choice) -> Self {
        NodeChoice {
            nodes: c.nodes,
            ets_j: c.ets_j,
            tts_s: c.tts_s,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Optimal {
    pub app: String,
    pub objective: ObjectiveName,
    pub range: SearchRange,
    pub deadline_s: Option<f64>,
    pub energy_budget_j: Option<f64>,
    /// The best node count; `null` when none meets the constraints.
    pub choice: Option<NodeChoice>,
    /// Without constraints, for comparison: the least-energy and the fastest
    /// node counts of the range.
    pub least_energy: Option<NodeChoice>,
    pub fastest: Option<NodeChoice>,
    /// Why there is no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub models: ModelsUsed,
}

/// The energy-optimal node count (within a deadline), or the fastest (within
/// an energy budget).
///
/// Every count of the range is considered; ties go to fewer nodes.
#[utoipa::path(get, path = "/v1/apps/{app}/optimal-nodes", tag = "capacity",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           OptimalParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The answer, or why there is none", body = Optimal),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "No runs yet", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn optimal_nodes(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(tag): Path<String>,
    Query(params): Query<OptimalParams>,
) -> ApiResult<axum::Json<Optimal>> {
    let mut problems = Vec::new();
    let (min, max) = check_range(params.min_nodes, params.max_nodes, &mut problems);
    for (field, value) in [
        ("deadline_s", params.deadline_s),
        ("energy_budget_j", params.energy_budget_j),
    ] {
        if let Some(Err(reason)) = value.map(validate::positive) {
            problems.push(FieldError::new(field, reason));
        }
    }
    let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let app = find_app(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let (ets, tts, models) = energy_and_time(&state, &app, allowed).await?;
    let nodes = || range.min_nodes..=range.max_nodes;
    let objective = match params.objective {
        ObjectiveName::Energy => Objective::Energy,
        ObjectiveName::Time => Objective::Time,
    };
    let choice = capacity::optimal(
        nodes(),
        objective,
        &ets,
        &tts,
        params.deadline_s,
        params.energy_budget_j,
    );
    let least_energy = capacity::optimal(nodes(), Objective::Energy, &ets, &tts, None, None);
    let fastest = capacity::optimal(nodes(), Objective::Time, &ets, &tts, None, None);
    let reason = choice.is_none().then(|| {
        let mut why = Vec::new();
        if let (Some(deadline), Some(f)) = (params.deadline_s, fastest)
            && f.tts_s > deadline
        {
            why.push(format!(
                "the fastest count ({} nodes) needs {:.0} s, beyond the deadline of \
                 {deadline:.0} s",
                f.nodes, f.tts_s
            ));
        }
        if let (Some(budget), Some(e)) = (params.energy_budget_j, least_energy)
            && e.ets_j > budget
        {
            why.push(format!(
                "the least-energy count ({} nodes) needs {:.0} J, above the budget of \
                 {budget:.0} J",
                e.nodes, e.ets_j
            ));
        }
        if why.is_empty() {
            why.push(
                "no node count of the range meets the deadline and the budget together".into(),
            );
        }
        why.join("; ")
    });
    Ok(axum::Json(Optimal {
        app: app.tag.clone(),
        objective: params.objective,
        range,
        deadline_s: params.deadline_s,
        energy_budget_j: params.energy_budget_j,
        choice: choice.map(NodeChoice::from),
        least_energy: least_energy.map(NodeChoice::from),
        fastest: fastest.map(NodeChoice::from),
        reason,
        models,
    }))
}

/// The EtS and TtS predictors of `app` as functions of n.
async fn energy_and_time(
    state: &AppState,
    app: &AppRow,
    allowed: Option<f64>,
) -> ApiResult<(
    impl Fn(u32) -> f64 + use<>,
    impl Fn(u32) -> f64 + use<>,
    ModelsUsed,
)> {
    let allowed = predict::allowed_rmse(app, allowed);
    let mut fitted = fitted_models(state, app, &[Metric::Ets, Metric::Tts], allowed).await?;
    let (tts, ets) = (fitted.remove(1), fitted.remove(0));
    let models = ModelsUsed {
        model_version: predict::model_version(app),
        ets: Some(case_of(&ets)),
        apc: None,
        tts: Some(case_of(&tts)),
        workload: None,
    };
    Ok((
        move |n| ets.model.predict_model(n).value,
        move |n| tts.model.predict_model(n).value,
        models,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ParetoParams {
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i64>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i64>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Pareto {
    pub app: String,
    pub range: SearchRange,
    /// The node counts no other count beats on both time and energy, by
    /// ascending node count (so by falling time and rising energy).
    pub front: Vec<NodeChoice>,
    pub models: ModelsUsed,
}

/// The time/energy Pareto-optimal node counts.
#[utoipa::path(get, path = "/v1/apps/{app}/pareto", tag = "capacity",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ParetoParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The Pareto front", body = Pareto),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "No runs yet", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn pareto(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(tag): Path<String>,
    Query(params): Query<ParetoParams>,
) -> ApiResult<axum::Json<Pareto>> {
    let mut problems = Vec::new();
    let (min, max) = check_range(params.min_nodes, params.max_nodes, &mut problems);
    let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let app = find_app(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let (ets, tts, models) = energy_and_time(&state, &app, allowed).await?;
    let front = capacity::pareto(range.min_nodes..=range.max_nodes, ets, tts);
    Ok(axum::Json(Pareto {
        app: app.tag.clone(),
        range,
        front: front.into_iter().map(NodeChoice::from).collect(),
        models,
    }))
}

//! `GET /v1/apps/{app}/max-nodes`: the largest node count under a power limit.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    BadParameter, FitsBusy, NeedsRead, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::http::predictions::{check_allowed, fitted_models, predict_error};
use crate::model::capacity::{self};
use crate::model::{Metric, bounds};
use crate::predict::{self};
use crate::service::apps;
use crate::validate::{self, FieldError};

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
    #[param(minimum = 1e-100, maximum = 1e100)]
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
    AppPath(tag): AppPath,
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
    let workload =
        crate::service::nodes::workload_or_default(&state, params.workload, "", &mut problems);
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
    let app = apps::find(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let allowed = predict::allowed_rmse(&app, allowed);
    let bound = params.bound.unwrap_or_default();
    let fitted = fitted_models(&state, &app, &Metric::ALL, allowed).await?;
    let mut models = ModelsUsed {
        model_version: predict::model_version(&app),
        ets: Some(case_of(&fitted[0])),
        apc: Some(case_of(&fitted[1])),
        tts: Some(case_of(&fitted[2])),
        workload: None,
    };
    let nodes_range = range.min_nodes..=range.max_nodes;
    let apc_at: Box<dyn Fn(u32) -> f64 + Send> = match bound {
        // APC as the predictions give it: reconciled with EtS and TtS
        // (`consistency::curves`), so that the count found here draws what
        // `/predictions` says it draws.
        Bound::Expected => {
            let [ets, apc, tts]: [Arc<Fitted>; 3] = std::array::from_fn(|i| fitted[i].clone());
            Box::new(move |n| consistency::curves([&ets.model, &apc.model, &tts.model], n)[1].value)
        }
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
            models.ets = None;
            models.apc = Some(case_of(&best));
            models.tts = None;
            models.workload = Some(workload);
            let scale = powers.scale;
            Box::new(move |n| bounds::worst_of(best.model.predict_model(n).value, n, &scale))
        }
    };
    let limit_w = params.power_limit_w;
    let (found, apc_at) = scan(&state, &range, move || {
        (capacity::max_nodes(nodes_range, limit_w, &apc_at), apc_at)
    })
    .await?;
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

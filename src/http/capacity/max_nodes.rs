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
use crate::model::{Flags, Metric, Prediction, bounds};
use crate::predict::{self};
use crate::service::apps;
use crate::service::predictions::{AggregateName, NodeScope, check_named};
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
    /// At a measured node count, how its runs are combined, as in
    /// predictions: `mean` (default, as admission and job starts reserve
    /// by default), `min` or `max` (the most a run there drew).
    pub aggregate: Option<AggregateName>,
    /// Reference workload for `bound=worst`; default the service's.
    pub workload: Option<String>,
    /// Only this partition's nodes give P_min and P_max; with `bound=worst`
    /// the range also stops at its number of registered nodes.
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
    /// The largest node count whose reservation (`reserved_w`) stays within
    /// the limit; `null` when even the smallest of the range exceeds it.
    pub nodes: Option<u32>,
    /// The APC there, W.
    pub apc_w: Option<f64>,
    /// What is held to the limit, W: the APC (of `bound`), or the idle power
    /// of `nodes` of the scope's nodes if that is more (the mean idle power
    /// of its registered nodes, 100 W for a node registered without one;
    /// nothing without registered nodes). A job's nodes draw at least their
    /// idle power, and admission never reserves less. (Where the scope's
    /// nodes are classified, admission reserves the worst-node bound, which
    /// `bound=worst` gives.)
    pub reserved_w: Option<f64>,
    /// The APC of the next node count, whose reservation exceeds the limit
    /// (absent at the top of the range).
    pub next_apc_w: Option<f64>,
    /// How the runs at a measured count were combined.
    pub aggregate: AggregateName,
    /// The flags of the APC at `nodes` (without an answer, at the range's
    /// smallest count; none when the scope has fewer nodes than the range's
    /// smallest count), as its model gives them: `extrapolation`,
    /// `thin_history`, `allowed_rmse_not_met`, `outside_theoretical_bounds`,
    /// `bounded`, `database_unavailable`.
    pub flags: Vec<String>,
    /// Why there is no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub models: ModelsUsed,
}

/// The largest node count whose reservation stays within a power limit.
///
/// Every count of the range is checked (APC need not grow with n), at what
/// predictions answer there: at a measured count, its runs. What is held to
/// the limit is what admission would reserve: the APC, or the idle power
/// of that many of the scope's nodes if that is more. With
/// `bound=worst`, the APC is that of the worst n nodes of the classification,
/// and the range stops at the scope's number of registered nodes.
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
        (status = 422, description = "No runs yet, no classification for bound=worst, a partition no registered node is in, or a workload asked for by name without samples", body = Problem, content_type = "application/problem+json"),
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
    let scope = NodeScope::check(
        &state,
        params.workload,
        params.partition,
        None,
        "",
        &mut problems,
    );
    let Some(scope) = scope.filter(|_| problems.is_empty()) else {
        return Err(ApiError::BadRequest(problems));
    };
    let app = apps::find(&state, &tag).await?;
    let mut range = search_range(min, max, &app)?;
    check_named(&state, &scope).await?;
    let allowed = predict::allowed_rmse(&app, allowed);
    let (bound, aggregate) = (
        params.bound.unwrap_or_default(),
        params.aggregate.unwrap_or_default(),
    );
    let fitted = fitted_models(&state, &app, &Metric::ALL, allowed).await?;
    let mut models = ModelsUsed {
        model_version: predict::model_version(&app),
        ets: Some(case_of(&fitted[0])),
        apc: Some(case_of(&fitted[1])),
        tts: Some(case_of(&fitted[2])),
        workload: None,
    };
    let mut reason = None;
    let partition = scope.partition.as_deref();
    // The node registry, for the idle power admission reserves at the least
    // (`Estimate::at_least_idle`), kept in memory until the nodes change.
    // Through a database outage, a replica that has not read it since the
    // nodes last changed answers without that floor (flagged
    // `database_unavailable`), as it answers the rest from memory.
    let registry = match crate::service::power::registry(&state).await {
        Ok(registry) => Some(registry),
        Err(crate::service::Error::Unavailable(_))
            if bound == Bound::Expected && state.caches.degraded() =>
        {
            None
        }
        Err(e) => return Err(e),
    };
    let idle_per_node_w = registry.as_ref().map_or(0.0, |r| {
        crate::service::power::idle_floor(r, partition, None, 1)
    });
    let apc_at: Box<dyn Fn(u32) -> Prediction + Send + Sync> = match bound {
        // APC as the predictions give it: a measured count's runs, else the
        // models reconciled with EtS and TtS (`consistency::predict`), so
        // that the count found here draws what `/predictions` and
        // admission say it draws.
        Bound::Expected => {
            let [ets, apc, tts]: [Arc<Fitted>; 3] = std::array::from_fn(|i| fitted[i].clone());
            Box::new(move |n| {
                let [_, apc, _] =
                    consistency::predict([&ets.model, &apc.model, &tts.model], n, aggregate);
                apc
            })
        }
        Bound::Worst => {
            let Some(powers) =
                crate::service::nodes::node_powers(&state, &scope.workload, partition).await?
            else {
                return Err(ApiError::invalid(
                    "bound",
                    format!(
                        "worst needs a node classification; workload `{}` has no samples",
                        scope.workload
                    ),
                ));
            };
            // There are no worst n nodes beyond the nodes there are.
            let registered = registry.as_ref().map_or(0, |r| r.nodes_in(partition));
            let registered = u32::try_from(registered).unwrap_or(u32::MAX);
            if registered < range.max_nodes {
                range.max_nodes = registered.max(range.min_nodes);
                if registered < range.min_nodes {
                    reason = Some(format!(
                        "{} only {} registered, fewer than min_nodes ({})",
                        partition.map_or_else(
                            || "the registry has".to_owned(),
                            |p| format!("partition {p} has")
                        ),
                        crate::text::nodes(registered),
                        range.min_nodes
                    ));
                }
            }
            let best = state
                .models
                .best_node_apc(&state.pool, &app, &powers, allowed)
                .await
                .map_err(|e| predict_error(&app.tag, e))?;
            models.ets = None;
            models.apc = Some(case_of(&best));
            models.tts = None;
            models.workload = Some(scope.workload.clone());
            let scale = powers.scale;
            // Never below the expected APC, as `apc_bounds.worst_w` and
            // admission give it (`service::predictions::node_answers`).
            let [ets, apc, tts]: [Arc<Fitted>; 3] = std::array::from_fn(|i| fitted[i].clone());
            Box::new(move |n| {
                let [_, expected, _] =
                    consistency::predict([&ets.model, &apc.model, &tts.model], n, aggregate);
                let mut p = best.model.predict(n, aggregate);
                p.value = bounds::worst_of(p.value, n, &scale);
                if expected.value > p.value {
                    p.value = expected.value;
                    p.flags = p.flags.union(expected.flags);
                }
                p
            })
        }
    };
    let limit_w = params.power_limit_w;
    // A value that is not a number stays one, for the scan to pass over.
    let reserved_at = move |n: u32, apc: f64| {
        if apc.is_finite() {
            apc.max(idle_per_node_w * f64::from(n))
        } else {
            apc
        }
    };
    let (nodes, apc_w, reserved_w, next_apc_w, flags) = if reason.is_some() {
        (None, None, None, None, Flags::default())
    } else {
        let nodes = range.min_nodes..=range.max_nodes;
        let (found, apc_at) = scan(&state, &range, move || {
            let found = capacity::max_nodes(nodes, limit_w, |n| reserved_at(n, apc_at(n).value));
            (found, apc_at)
        })
        .await?;
        match found {
            Some((n, reserved)) => {
                let apc = apc_at(n);
                (
                    Some(n),
                    Some(apc.value),
                    Some(reserved),
                    (n < range.max_nodes).then(|| apc_at(n + 1).value),
                    apc.flags,
                )
            }
            None => {
                let first = apc_at(range.min_nodes);
                let reserved = reserved_at(range.min_nodes, first.value);
                let (verb, drawn) = if reserved > first.value {
                    ("idle at", reserved)
                } else {
                    ("predicted to draw", first.value)
                };
                reason = Some(format!(
                    "even {} {} {verb} {} W, above the limit",
                    crate::text::nodes(range.min_nodes),
                    if range.min_nodes == 1 { "is" } else { "are" },
                    crate::text::whole(drawn)
                ));
                (None, None, None, None, first.flags)
            }
        }
    };
    Ok(axum::Json(MaxNodes {
        app: app.tag.clone(),
        power_limit_w: params.power_limit_w,
        bound,
        range,
        nodes,
        apc_w,
        reserved_w,
        next_apc_w,
        aggregate,
        flags: flag_names(&state, flags),
        reason,
        models,
    }))
}

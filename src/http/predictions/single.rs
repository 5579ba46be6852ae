//! `GET /v1/apps/{app}/predictions`: one application on n nodes.

use axum::extract::State;
use axum::http::Uri;
use axum::response::Response;
use serde::Deserialize;
use utoipa::IntoParams;

use super::*;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    BadParameter, FitsBusy, NeedsRead, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::http::{AppState, json_body, json_response};
use crate::predict;
use crate::service::apps;
use crate::service::predictions;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PredictionParams {
    /// Node count, 1 to 1,000,000. Required unless `node_list` is given
    /// (whose length it must then equal).
    #[param(minimum = 1, maximum = 1_000_000)]
    pub nodes: Option<i64>,
    /// The exact node set, in Slurm hostlist syntax (`cn[01-04,07]`): adds
    /// `node_set`, the APC and EtS predicted on those nodes.
    pub node_list: Option<String>,
    /// Reference workload of the node classification behind `apc_bounds`
    /// and `node_set`; default: the service's (`--reference-workload`).
    pub workload: Option<String>,
    /// Only this partition's nodes give P_min and P_max.
    pub partition: Option<String>,
    /// One metric; all three when absent.
    pub metric: Option<MetricName>,
    /// How runs at a measured node count are combined (default mean).
    pub aggregate: Option<AggregateName>,
    /// Allowed %RMSE of the predictor, in (0, 100]; default: the
    /// application's setting, else 2.
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

/// Predict EtS, APC and TtS of an application on n nodes.
///
/// At a measured node count the answer is the aggregate of the runs there
/// (`source: history`); elsewhere it comes from the fitted predictor
/// (`source: model`), with its interval, back-test and flags.
#[utoipa::path(get, path = "/v1/apps/{app}/predictions", tag = "predictions",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           PredictionParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The predictions", body = Predictions),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "The application has no runs yet; or `node_list` names nodes not in the registry, `partition` a partition no registered node is in, or `workload` (asked for by name) a workload no node of the scope has samples of (`errors` names the field)", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_predictions(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    uri: Uri,
    AppPath(tag): AppPath,
) -> ApiResult<Response> {
    // An identical request answered before, with nothing changed since, is
    // answered as then, its query already known to be valid.
    let target = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    let body = predictions::kept_or_render(&state, target, || async {
        let Query(params) = Query::<PredictionParams>::parse(uri.query())?;
        let mut problems = Vec::new();
        let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
            .map_err(|e| problems.push(e))
            .ok()
            .flatten();
        let scope = NodeScope::check(
            &state,
            params.workload,
            params.partition,
            params.node_list.as_deref(),
            "",
            &mut problems,
        );
        let nodes = scope_nodes(params.nodes, &scope, "", &mut problems);
        let (Some(nodes), Some(scope)) = (nodes.filter(|_| problems.is_empty()), scope) else {
            return Err(ApiError::BadRequest(problems));
        };
        let app = apps::find(&state, &tag).await?;
        let query = predictions::Query {
            nodes,
            scope,
            metric: params.metric,
            aggregate: params.aggregate.unwrap_or_default(),
            allowed_rmse_pct: allowed,
        };
        let predictions::Predicted {
            models,
            predictions,
            aggregate,
            apc_bounds,
            node_set,
            tally,
        } = predictions::predict(&state, &app, query).await?;
        let answer = Predictions {
            model_version: predict::ModelVersion(&app),
            app: &app.tag,
            nodes,
            predictions: models
                .iter()
                .zip(&predictions)
                .map(|(m, p)| metric_prediction(m, nodes, p, aggregate))
                .collect(),
            apc_bounds,
            node_set,
        };
        // The rendered model parts make up most of the answer: size the
        // buffer for them at once.
        let size: usize = models
            .iter()
            .flat_map(|m| rendered(m).iter().map(|r| r.get().len()))
            .sum();
        Ok((json_body(&answer, size + 1024)?, tally))
    })
    .await?;
    Ok(json_response(body))
}

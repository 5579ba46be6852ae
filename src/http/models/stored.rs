//! `GET /v1/apps/{app}/scaling-model`: the scaling model of an application's
//! stored runs.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    BadParameter, HeavyBusy, NeedsRead, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::http::predictions::MetricName;
use crate::model::Metric;
use crate::service::apps;
use crate::service::scaling::stored_model;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScalingModelParams {
    /// The metric (default tts).
    pub metric: Option<MetricName>,
    /// Node counts to predict at, comma-separated: `64,128,1024`.
    pub targets: Option<String>,
    /// Expected growth in big-O, e.g. `O(1/p)` for the TtS of strong scaling.
    pub expectation: Option<String>,
    /// Default `O(log p)`.
    pub deviation_limit: Option<String>,
    /// Whether negative exponents are hypotheses (default `auto`).
    pub negative: Option<NegativeName>,
}

/// The empirical scaling model of an application's metric over its runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AppScalingModel {
    pub app: String,
    pub metric: MetricName,
    #[schema(example = "s")]
    pub unit: String,
    /// Runs behind the model.
    pub runs: usize,
    /// p is the node count.
    #[serde(flatten)]
    pub scaling: ScalingModel,
}

/// The empirical scaling model of one metric of an application.
///
/// The model search of `POST /v1/models/search` over the stored runs, p being
/// the node count and every run a repetition at its node count.
#[utoipa::path(get, path = "/v1/apps/{app}/scaling-model", tag = "scalability",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ScalingModelParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The model", body = AppScalingModel),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "Too few distinct node counts in the history, or a target where the model has no finite value", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = HeavyBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_scaling_model(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<ScalingModelParams>,
) -> ApiResult<axum::Json<AppScalingModel>> {
    let targets = number_list("targets", params.targets.as_deref())
        .map_err(|e| ApiError::BadRequest(vec![e]))?;
    let ask = AskInput {
        targets,
        expectation: params.expectation,
        deviation_limit: params.deviation_limit,
        negative: params.negative,
        ..AskInput::default()
    }
    .check()
    .map_err(ApiError::BadRequest)?;
    let app = apps::find(&state, &tag).await?;
    let metric: Metric = params.metric.unwrap_or(MetricName::Tts);
    let (runs, found) = stored_model(&state, app.id, metric, ask.settings.clone()).await?;
    let found =
        found.map_err(|e| ApiError::invalid("runs", format!("application `{tag}`: {e}")))?;
    let scaling = scaling_model(&found, runs, &ask, None, None)
        .check_finite()
        .map_err(|e| ApiError::Invalid(vec![e]))?;
    Ok(axum::Json(AppScalingModel {
        app: app.tag.clone(),
        metric,
        unit: metric.unit().into(),
        runs,
        scaling,
    }))
}

//! `GET /v1/apps/{app}/model`: the fitted model of one metric.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    BadParameter, FitsBusy, NeedsRead, NoRuns, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::model::{self, Metric};
use crate::predict;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ModelParams {
    /// Default ets.
    pub metric: Option<MetricName>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FittedModel {
    pub app: String,
    pub metric: MetricName,
    pub unit: String,
    pub model_version: String,
    /// The declared scaling mode used for the theoretical-bounds flag.
    pub scaling_mode: crate::domain::ScalingMode,
    pub model: PredictorInfo,
    pub history: HistorySummary,
    pub points: Vec<HistoryPoint>,
    pub backtest: BacktestInfo,
    /// Every family fitted, with its full back-test: the winners first
    /// (`chosen_for`), then by inside score.
    pub candidates: Vec<CandidateInfo>,
    /// The physics model fitted to the history, for an application declared
    /// `strong` or `weak` with at least two node counts measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physics: Option<PhysicsInfo>,
}

/// The laws of docs/model.md §4 fitted to the history: Amdahl (strong scaling)
/// or Gustafson (weak) from TtS, then the idle fraction k from APC.
/// Extrapolations departing from them by more than 10 % (or three times
/// their %RMSE) are flagged `outside_theoretical_bounds`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PhysicsInfo {
    /// Amdahl's p (strong) or Gustafson's p* (weak), in [0, 1].
    pub parallel_fraction: f64,
    /// Time on one node, s.
    pub t1_s: f64,
    pub time_rmse_pct: f64,
    /// k, the fraction of a busy node's power drawn when idle, in [0, 1].
    pub idle_fraction: Option<f64>,
    /// Power of one busy node, W.
    pub busy_node_power_w: Option<f64>,
    pub power_rmse_pct: Option<f64>,
    /// Whether k changes the predicted power by at least 1 % somewhere in
    /// the measured range; when not, its value means little.
    pub idle_fraction_identifiable: Option<bool>,
}

impl From<&model::physics::Physics> for PhysicsInfo {
    fn from(p: &model::physics::Physics) -> Self {
        PhysicsInfo {
            parallel_fraction: p.parallel_fraction,
            t1_s: p.t1_s,
            time_rmse_pct: p.time_rmse_pct,
            idle_fraction: p.idle.as_ref().map(|i| i.k),
            busy_node_power_w: p.idle.as_ref().map(|i| i.p1_w),
            power_rmse_pct: p.idle.as_ref().map(|i| i.rmse_pct),
            idle_fraction_identifiable: p.idle.as_ref().map(|i| i.identifiable),
        }
    }
}

/// The fitted predictor of one metric and its back-test.
#[utoipa::path(get, path = "/v1/apps/{app}/model", tag = "predictions",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ModelParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The model", body = FittedModel),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, response = NoRuns),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_model(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<ModelParams>,
) -> ApiResult<axum::Json<FittedModel>> {
    check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| ApiError::BadRequest(vec![e]))?;
    let metric: Metric = params.metric.unwrap_or(MetricName::Ets);
    let (app, fitted) =
        crate::service::predictions::model(&state, &tag, metric, params.allowed_rmse_pct).await?;
    let physics = state
        .models
        .physics(&state.pool, &app)
        .await
        .map_err(|e| predict_error(&app.tag, e))?;
    let model = &fitted.model;
    Ok(axum::Json(FittedModel {
        physics: physics.as_deref().map(PhysicsInfo::from),
        model_version: predict::model_version(&app),
        scaling_mode: app.scaling_mode,
        app: app.tag.clone(),
        metric,
        unit: metric.unit().into(),
        model: model_info(model),
        history: history_summary(model),
        points: history_points(model),
        backtest: backtest_info(model),
        candidates: candidates_info(model),
    }))
}

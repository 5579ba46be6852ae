//! `GET /v1/apps/{app}/curve`: predictions over a range of node counts.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    FitsBusy, NeedsRead, NoRuns, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::model::{self, Metric, Model, consistency};
use crate::predict;
use crate::validate::FieldError;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CurveParams {
    /// Default ets.
    pub metric: Option<MetricName>,
    /// First node count (default 1).
    #[param(minimum = 1, maximum = 1_000_000)]
    pub from: Option<i64>,
    /// Last node count (default twice the largest measured, at most 1,000,000).
    #[param(minimum = 1, maximum = 1_000_000)]
    pub to: Option<i64>,
    /// Number of points, 2 to 1000 (default 50).
    #[param(minimum = 2, maximum = 1000)]
    pub points: Option<usize>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CurvePoint {
    pub nodes: u32,
    pub value: f64,
    pub low: f64,
    pub high: f64,
    /// The model family that gives this point: the one chosen for node
    /// counts inside the measured range, above it or below it.
    pub family: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryPoint {
    pub nodes: u32,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Curve {
    pub app: String,
    pub metric: MetricName,
    pub unit: String,
    pub model_version: String,
    /// The predictor's curve (model values, also at measured node counts),
    /// made consistent with the other two metrics' as predictions are.
    pub curve: Vec<CurvePoint>,
    /// The measured points.
    pub history: Vec<HistoryPoint>,
    /// The families chosen inside, above and below the measured range.
    pub model: PredictorInfo,
    /// The winners' back-tests and the runners-up.
    pub backtest: BacktestInfo,
}

/// The predicted curve of one metric with its interval, and the history
/// points, for dashboards.
#[utoipa::path(get, path = "/v1/apps/{app}/curve", tag = "predictions",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           CurveParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The curve", body = Curve),
        (status = 400, description = "Bad parameter (from > to, too many points, ...)", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, response = NoRuns),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_curve(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<CurveParams>,
) -> ApiResult<axum::Json<Curve>> {
    let mut problems = Vec::new();
    let from = params
        .from
        .map(|f| check_nodes("from", f))
        .transpose()
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    let to = params
        .to
        .map(|t| check_nodes("to", t))
        .transpose()
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    if let (Some(from), Some(to)) = (from, to)
        && from > to
    {
        problems.push(FieldError::new(
            "from",
            format!("must not exceed to ({from} > {to})"),
        ));
    }
    let points = params.points.unwrap_or(50);
    if !(2..=MAX_CURVE_POINTS).contains(&points) {
        problems.push(FieldError::new(
            "points",
            format!("must be between 2 and {MAX_CURVE_POINTS} (got {points})"),
        ));
    }
    if let Err(e) = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct) {
        problems.push(e);
    }
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let metric: Metric = params.metric.unwrap_or(MetricName::Ets);
    let (app, fitted) =
        crate::service::predictions::model(&state, &tag, metric, params.allowed_rmse_pct).await?;
    let model = &fitted.model;
    // The three models, so that each point is the value the predictions
    // give there (EtS = APC × TtS reconciled), not this metric's curve alone.
    let allowed = predict::allowed_rmse(&app, params.allowed_rmse_pct);
    let all =
        crate::service::predictions::fitted_models(&state, &app, &Metric::ALL, allowed).await?;
    let models: [&Model; 3] = std::array::from_fn(|i| &all[i].model);
    let largest = model.history.points.last().map_or(1, |p| p.nodes);
    let from = from.unwrap_or(1);
    let to = to
        .unwrap_or_else(|| crate::service::predictions::default_last_nodes(largest))
        .max(from);
    let mut nodes: Vec<u32> = (0..points)
        .map(|i| {
            let fraction = i as f64 / (points - 1) as f64;
            (f64::from(from) + fraction * f64::from(to - from)).round() as u32
        })
        .collect();
    nodes.dedup();
    let curve = nodes
        .into_iter()
        .map(|n| {
            let p = &consistency::curves(models, n)[metric.index()];
            CurvePoint {
                nodes: n,
                value: p.value,
                low: p.low,
                high: p.high,
                family: p.family.map_or("", model::Family::as_str).to_owned(),
            }
        })
        .collect();
    Ok(axum::Json(Curve {
        model_version: predict::model_version(&app),
        app: app.tag.clone(),
        metric,
        unit: metric.unit().into(),
        curve,
        history: history_points(model),
        model: model_info(model),
        backtest: backtest_info(model),
    }))
}

pub(super) fn history_points(model: &Model) -> Vec<HistoryPoint> {
    model
        .history
        .points
        .iter()
        .map(|p| HistoryPoint {
            nodes: p.nodes,
            mean: p.mean,
            min: p.min,
            max: p.max,
            runs: p.runs,
        })
        .collect()
}

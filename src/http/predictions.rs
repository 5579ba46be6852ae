//! Predictions: `GET /v1/apps/{app}/predictions`, `POST /v1/predictions`,
//! `GET /v1/apps/{app}/curve`, `GET /v1/apps/{app}/model`.

use super::error::responses::{
    BadParameter, FitsBusy, MalformedJson, NeedsRead, NoRuns, NotJson, TooLarge, Unauthorized,
    Unavailable, UnknownApp,
};
use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use axum::response::Response;

use super::apps::find_app;
use super::auth::{self, Authorized};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, Path, Query};
use super::{AppState, json_reply};
use crate::hostlist;
use crate::model::{
    self, Aggregate, Candidate, Flag, Metric, Model, Prediction, Regime, Shape, Source, consistency,
};
use crate::predict::{self, Fitted, PredictError};
use crate::store::apps::AppRow;
use crate::validate::{self, FieldError};

/// Most queries in one `POST /v1/predictions`.
pub const MAX_BATCH_QUERIES: usize = 1000;
/// Most node names one answer lists (a node set may hold 100,000).
const MAX_NAMES_SHOWN: usize = 20;
/// Most points of one curve.
pub const MAX_CURVE_POINTS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MetricName {
    /// Energy-to-Solution (J)
    Ets,
    /// Average Power Consumption (W)
    Apc,
    /// Time-to-Solution (s)
    Tts,
}

impl From<MetricName> for Metric {
    fn from(m: MetricName) -> Self {
        match m {
            MetricName::Ets => Metric::Ets,
            MetricName::Apc => Metric::Apc,
            MetricName::Tts => Metric::Tts,
        }
    }
}

impl From<Metric> for MetricName {
    fn from(m: Metric) -> Self {
        match m {
            Metric::Ets => MetricName::Ets,
            Metric::Apc => MetricName::Apc,
            Metric::Tts => MetricName::Tts,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AggregateName {
    /// Quality-weighted mean of the runs at a measured node count.
    #[default]
    Mean,
    Min,
    /// The largest measured value (what a power-cap check wants).
    Max,
}

impl From<AggregateName> for Aggregate {
    fn from(a: AggregateName) -> Self {
        match a {
            AggregateName::Mean => Aggregate::Mean,
            AggregateName::Min => Aggregate::Min,
            AggregateName::Max => Aggregate::Max,
        }
    }
}

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

/// A value with its interval.
#[derive(Debug, Serialize, ToSchema)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
    /// `observed_range` (min and max of the runs at this node count) or
    /// `95pct` (the model's prediction interval).
    #[schema(example = "95pct")]
    pub kind: &'static str,
}

/// One segment of a segmented model: value(x) = Σ coefficients[k]·(x − from)ᵏ,
/// where x is n and value is y (family `segmented`), or x is ln n and value
/// is ln y (family `log_segmented`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SegmentInfo {
    /// The segment's first node count.
    pub from_nodes: f64,
    /// Its last node count.
    pub to_nodes: f64,
    /// `linear` or `non_linear`.
    pub kind: String,
    pub degree: usize,
    pub coefficients: Vec<f64>,
}

/// One family's curve.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CurveInfo {
    /// segmented, log_segmented, physics, normal_form, line, power_law,
    /// loglog_interpolation, or scaled (a single measured node count scaled
    /// by the metric's ideal behaviour).
    pub family: String,
    /// The curve as a formula in n.
    pub formula: String,
    /// I, II, III, IV or V, for the segmented families.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    /// The segmented families' segments.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub segments: Vec<SegmentInfo>,
    pub params: usize,
    /// %RMSE against the history (one point per node count).
    pub rmse_pct: f64,
    /// Whether `rmse_pct` is within the allowed %RMSE applied.
    pub within_allowed: bool,
}

/// The model of one metric: the family chosen by back-test for node counts
/// inside the measured range, and the one for node counts beyond it
/// (docs/model.md §2.1).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PredictorInfo {
    /// The family answering inside the measured range.
    pub family: String,
    /// The family answering below and above it.
    pub family_beyond: String,
    pub inside: CurveInfo,
    pub beyond: CurveInfo,
    /// The allowed %RMSE asked for.
    pub allowed_rmse_pct: f64,
    /// The allowed %RMSE applied: higher when repeated runs scatter more.
    pub effective_allowed_rmse_pct: f64,
    /// Families fitted and back-tested to choose from.
    pub candidates: usize,
    /// How the family beyond the range continues there, when it is a curve
    /// in (n, y) (`segmented` or `line`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extrapolation: Option<Extrapolation>,
}

/// The predictor below and above the measured range.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Extrapolation {
    pub below: ContinuationInfo,
    pub above: ContinuationInfo,
}

/// From the value at `from_nodes` with `slope`: `linear`, value + slope·(n −
/// from_nodes); or, where a line would head towards zero, `power_law`,
/// value·(n / from_nodes)^exponent, with the same value and slope there.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContinuationInfo {
    /// `linear` or `power_law`.
    pub kind: String,
    pub from_nodes: f64,
    pub value: f64,
    pub slope: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exponent: Option<f64>,
}

impl From<model::Continuation> for ContinuationInfo {
    fn from(c: model::Continuation) -> Self {
        ContinuationInfo {
            kind: if c.exponent.is_some() {
                "power_law"
            } else {
                "linear"
            }
            .into(),
            from_nodes: c.from_nodes,
            value: c.value,
            slope: c.slope,
            exponent: c.exponent,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistorySummary {
    pub runs: usize,
    pub node_counts: usize,
    pub nodes_min: u32,
    pub nodes_max: u32,
    /// Relative scatter of repeated runs, per cent, when some node count was
    /// measured more than once.
    pub replicate_noise_pct: Option<f64>,
}

/// Absolute % errors of a back-test.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Errors {
    pub median_pct: f64,
    pub mean_pct: f64,
    pub max_pct: f64,
    pub points: usize,
}

/// The largest node counts from `held_out_from_nodes` up (`errors.points` of
/// them), each predicted by the family refitted to the counts at most 2/3 of
/// it (to all counts below it where that leaves fewer than three); the first
/// of those training sets ends at `trained_up_to`. Beyond 24 measured node
/// counts, the interior ones are pooled by ln n (docs/accuracy.md), and these
/// are the pooled counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HoldoutInfo {
    pub held_out_from_nodes: u32,
    pub trained_up_to: u32,
    pub errors: Errors,
}

/// One family's back-test.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CandidateInfo {
    pub family: String,
    pub formula: String,
    pub params: usize,
    pub rmse_pct: f64,
    pub within_allowed: bool,
    /// Each interior node count predicted by the family fitted without it.
    pub leave_one_out: Option<Errors>,
    /// The largest node counts, each predicted from the counts at most 2/3
    /// of it.
    pub forward: Option<HoldoutInfo>,
    /// The weighted mean % error that ranks the families for a node count
    /// inside the measured range (mostly leave-one-out) and beyond it
    /// (mostly forward); null where the family could not be back-tested.
    pub score_inside_pct: Option<f64>,
    pub score_beyond_pct: Option<f64>,
    /// `inside` and/or `beyond` where this family answers; empty for a
    /// runner-up.
    pub chosen_for: Vec<String>,
}

/// A family that lost, by its scores.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunnerUp {
    pub family: String,
    pub params: usize,
    pub score_inside_pct: Option<f64>,
    pub score_beyond_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BacktestInfo {
    /// The inside family's leave-one-out test.
    pub leave_one_out: Option<Errors>,
    /// The beyond family's forward test.
    pub holdout: Option<HoldoutInfo>,
    /// The other families fitted, best inside score first (their full
    /// back-tests are in `GET /v1/apps/{app}/model`'s `candidates`).
    pub runners_up: Vec<RunnerUp>,
}

/// The prediction of one metric.
// It borrows the parts that describe the model, rendered once per fitted
// model: an answer copies them rather than building them again.
#[derive(Debug, Serialize, ToSchema)]
pub struct MetricPrediction<'a> {
    pub metric: MetricName,
    pub value: f64,
    /// J, W or s.
    pub unit: &'static str,
    /// `history` (runs at exactly this node count) or `model`.
    pub source: &'static str,
    /// The family that answered, for `source: model`.
    pub family: Option<&'static str>,
    /// That family's back-test score where this node count falls (inside
    /// or beyond the measured range): the weighted mean % error of its
    /// predictions of left-out history.
    pub backtest_error_pct: Option<f64>,
    pub aggregate: AggregateName,
    pub interval: Interval,
    /// extrapolation, thin_history, allowed_rmse_not_met,
    /// outside_theoretical_bounds, database_unavailable.
    #[schema(value_type = Vec<String>)]
    pub flags: FlagNames<'a>,
    #[schema(value_type = PredictorInfo)]
    pub model: &'a RawValue,
    #[schema(value_type = HistorySummary)]
    pub history: &'a RawValue,
    #[schema(value_type = BacktestInfo)]
    pub backtest: &'a RawValue,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Predictions<'a> {
    pub app: &'a str,
    pub nodes: u32,
    /// Changes whenever the application's history or settings change.
    #[schema(value_type = String)]
    pub model_version: predict::ModelVersion<'a>,
    pub predictions: Vec<MetricPrediction<'a>>,
    /// APC on the best and worst n nodes, once nodes are classified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apc_bounds: Option<ApcBounds>,
    /// APC and EtS on the nodes of `node_list`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_set: Option<NodeSet>,
}

/// APC on the best and the worst allocation of n nodes (docs/model.md §3): the
/// history normalised to the best node, predicted for n, plus nothing (best)
/// or n·(P_max − P_min) (worst).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApcBounds {
    pub workload: String,
    pub partition: Option<String>,
    pub best_w: f64,
    pub worst_w: f64,
    pub p_min_w: f64,
    pub p_max_w: f64,
    /// n × the largest vendor peak the registry knows, for comparison.
    pub vendor_peak_w: Option<f64>,
    /// `history` or `model`, as for the predictions.
    pub source: String,
}

/// The predicted APC and EtS on one node set: the best-node APC of n nodes
/// plus Σ (P_v − P_min) over the set, and that APC times the predicted TtS.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeSet {
    /// The set in hostlist syntax.
    pub node_list: String,
    pub nodes: u32,
    pub apc_w: f64,
    pub ets_j: f64,
    pub tts_s: f64,
    /// How many nodes of the set have no samples of the workload; they are
    /// counted at the mean node power.
    pub unclassified_count: usize,
    /// The first 20 of them.
    pub unclassified: Vec<String>,
    /// Σ of the set's vendor peaks, when the registry knows all of them.
    pub vendor_peak_w: Option<f64>,
}

/// Flags serialized by name, without collecting the names.
#[derive(Debug)]
pub struct FlagNames<'a>(pub &'a [Flag]);

impl Serialize for FlagNames<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|f| f.as_str()))
    }
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::History => "history",
        Source::Model => "model",
    }
}

fn errors(e: &model::ErrorSummary) -> Errors {
    Errors {
        median_pct: pct(e.median_pct),
        mean_pct: pct(e.mean_pct),
        max_pct: pct(e.max_pct),
        points: e.points,
    }
}

fn holdout_info(h: &model::Holdout) -> HoldoutInfo {
    HoldoutInfo {
        held_out_from_nodes: h.held_out.first().copied().unwrap_or_default(),
        trained_up_to: h.trained_up_to,
        errors: errors(&h.errors),
    }
}

fn curve_info(c: &Candidate) -> CurveInfo {
    let (case, segments) = match c.curve.segmented() {
        Some((
            model::Predictor {
                shape: Shape::Segmented { case, segments },
            },
            in_logs,
        )) => {
            // Segments over ln n say where they are in node counts.
            let nodes = |x: f64| if in_logs { x.exp().round() } else { x };
            (
                Some(case.as_str().to_owned()),
                segments
                    .iter()
                    .map(|s| SegmentInfo {
                        from_nodes: nodes(s.lo),
                        to_nodes: nodes(s.hi),
                        kind: match s.kind {
                            model::SegmentKind::Linear => "linear".into(),
                            model::SegmentKind::NonLinear => "non_linear".into(),
                        },
                        degree: s.degree,
                        coefficients: s.coeffs[..=s.degree].to_vec(),
                    })
                    .collect(),
            )
        }
        _ => (None, Vec::new()),
    };
    CurveInfo {
        family: c.family.as_str().into(),
        formula: c.curve.formula(),
        case,
        segments,
        params: c.params,
        rmse_pct: pct(c.rmse_pct),
        within_allowed: c.within_allowed,
    }
}

fn model_info(model: &Model) -> PredictorInfo {
    let (inside, beyond) = (
        model.selection.winner(Regime::Inside),
        model.selection.winner(Regime::Beyond),
    );
    let extrapolation = match &beyond.curve {
        model::Curve::Segmented(p) => p.continuations(),
        _ => None,
    };
    PredictorInfo {
        family: inside.family.as_str().into(),
        family_beyond: beyond.family.as_str().into(),
        inside: curve_info(inside),
        beyond: curve_info(beyond),
        allowed_rmse_pct: model.options.allowed_rmse_pct,
        effective_allowed_rmse_pct: model.effective_allowed_pct,
        candidates: model.selection.candidates.len(),
        extrapolation: extrapolation.map(|[below, above]| Extrapolation {
            below: below.into(),
            above: above.into(),
        }),
    }
}

fn history_summary(model: &Model) -> HistorySummary {
    let points = &model.history.points;
    HistorySummary {
        runs: model.history.runs,
        node_counts: points.len(),
        nodes_min: points.first().map_or(0, |p| p.nodes),
        nodes_max: points.last().map_or(0, |p| p.nodes),
        replicate_noise_pct: model.history.replicate_noise().map(|n| pct(100.0 * n)),
    }
}

/// The answering family's back-test score at `nodes`, for a model's answer.
fn backtest_error(model: &Model, nodes: u32, p: &Prediction) -> Option<f64> {
    let regime = model.regime(nodes);
    p.family
        .and_then(|_| finite_pct(model.selection.winner(regime).score[regime as usize]))
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A percentage as answers give it: to 0.0001 percentage points. The
/// back-tests are not known more closely, and 17 digits each made up a
/// fifth of a prediction's answer.
fn pct(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn finite_pct(x: f64) -> Option<f64> {
    finite(x).map(pct)
}

fn backtest_info(model: &Model) -> BacktestInfo {
    let selection = &model.selection;
    let [inside, beyond] = selection.winners;
    BacktestInfo {
        leave_one_out: selection.candidates[inside]
            .leave_one_out
            .as_ref()
            .map(errors),
        holdout: selection.candidates[beyond]
            .forward
            .as_ref()
            .map(holdout_info),
        runners_up: candidate_order(selection)
            .filter(|&i| i != inside && i != beyond)
            .map(|i| {
                let c = &selection.candidates[i];
                RunnerUp {
                    family: c.family.as_str().into(),
                    params: c.params,
                    score_inside_pct: finite_pct(c.score[0]),
                    score_beyond_pct: finite_pct(c.score[1]),
                }
            })
            .collect(),
    }
}

/// Candidates' indices: the winners first, then by inside score.
fn candidate_order(selection: &model::Selection) -> impl Iterator<Item = usize> {
    let [inside, beyond] = selection.winners;
    let mut order: Vec<usize> = (0..selection.candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let rank = |i: usize| (i != inside, i != beyond);
        rank(a)
            .cmp(&rank(b))
            .then(selection.candidates[a].score[0].total_cmp(&selection.candidates[b].score[0]))
    });
    order.into_iter()
}

/// Every candidate with its full back-test, for `/model`.
fn candidates_info(model: &Model) -> Vec<CandidateInfo> {
    let selection = &model.selection;
    let [inside, beyond] = selection.winners;
    candidate_order(selection)
        .map(|i| {
            let c = &selection.candidates[i];
            let chosen_for = [(inside, "inside"), (beyond, "beyond")]
                .into_iter()
                .filter(|(w, _)| *w == i)
                .map(|(_, name)| name.to_owned())
                .collect();
            CandidateInfo {
                family: c.family.as_str().into(),
                formula: c.curve.formula(),
                params: c.params,
                rmse_pct: pct(c.rmse_pct),
                within_allowed: c.within_allowed,
                leave_one_out: c.leave_one_out.as_ref().map(errors),
                forward: c.forward.as_ref().map(holdout_info),
                score_inside_pct: finite_pct(c.score[0]),
                score_beyond_pct: finite_pct(c.score[1]),
                chosen_for,
            }
        })
        .collect()
}

/// The model's description, history summary and back-test as JSON, rendered
/// once per fitted model.
fn rendered(fitted: &Fitted) -> &[Box<RawValue>; 3] {
    fitted.rendered.get_or_init(|| {
        let model = &fitted.model;
        [
            raw(&model_info(model)),
            raw(&history_summary(model)),
            raw(&backtest_info(model)),
        ]
    })
}

fn raw<T: Serialize>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value)
        .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("valid JSON"))
}

fn metric_prediction<'a>(
    fitted: &'a Fitted,
    nodes: u32,
    p: &'a Prediction,
    aggregate: AggregateName,
) -> MetricPrediction<'a> {
    let [model, history, backtest] = rendered(fitted);
    let metric = fitted.model.options.metric;
    MetricPrediction {
        metric: metric.into(),
        value: p.value,
        unit: metric.unit(),
        source: source_name(p.source),
        family: p.family.map(model::Family::as_str),
        backtest_error_pct: backtest_error(&fitted.model, nodes, p),
        aggregate,
        interval: Interval {
            low: p.low,
            high: p.high,
            kind: match p.source {
                Source::History => "observed_range",
                Source::Model => "95pct",
            },
        },
        flags: FlagNames(&p.flags),
        model,
        history,
        backtest,
    }
}

pub(super) fn check_nodes(field: &str, nodes: i64) -> Result<u32, FieldError> {
    validate::node_count(nodes).map_err(|reason| FieldError::new(field, reason))
}

pub(super) fn check_allowed(field: &str, allowed: Option<f64>) -> Result<Option<f64>, FieldError> {
    match allowed {
        Some(pct) => validate::allowed_rmse_pct(pct)
            .map(|()| Some(pct))
            .map_err(|reason| FieldError::new(field, reason)),
        None => Ok(None),
    }
}

pub(super) fn predict_error(tag: &str, error: PredictError) -> ApiError {
    match error {
        PredictError::NoRuns => ApiError::invalid(
            "app",
            format!("application `{tag}` has no runs to predict from yet"),
        ),
        PredictError::Database(e) => e.into(),
        PredictError::Fit(e) => ApiError::Internal(anyhow::anyhow!(e)),
        PredictError::Busy => ApiError::Busy(
            "another fit with an allowed_rmse_pct of its own is under way; retry shortly, \
             or use the application's setting",
        ),
    }
}

pub(super) async fn fitted_models(
    state: &AppState,
    app: &AppRow,
    metrics: &[Metric],
    allowed: f64,
) -> ApiResult<Vec<Arc<Fitted>>> {
    let mut out = Vec::with_capacity(metrics.len());
    for &metric in metrics {
        let model = state
            .models
            .model(&state.pool, app, metric, allowed)
            .await
            .map_err(|e| predict_error(&app.tag, e))?;
        out.push(model);
    }
    Ok(out)
}

/// All three metrics' models, and their predictions at one node count made
/// consistent (EtS = APC × TtS within the intervals, `model::consistency`):
/// every answer reads its metrics from here, so separate queries for each
/// metric, node sets and jobs agree.
pub(super) struct Consistent {
    models: [Arc<Fitted>; 3],
    predictions: [Prediction; 3],
}

impl Consistent {
    pub(super) async fn at(
        state: &AppState,
        app: &AppRow,
        allowed: f64,
        nodes: u32,
        aggregate: AggregateName,
    ) -> ApiResult<Consistent> {
        let models = match state.models.warm(app, allowed) {
            Some(models) => models,
            None => {
                let all = fitted_models(state, app, &Metric::ALL, allowed).await?;
                std::array::from_fn(|i| all[i].clone())
            }
        };
        let predictions = consistency::predict(
            [&models[0].model, &models[1].model, &models[2].model],
            nodes,
            aggregate.into(),
        );
        Ok(Consistent {
            models,
            predictions,
        })
    }

    /// `metric`'s prediction (`Metric::ALL` is the order of both arrays).
    pub(super) fn prediction(&self, metric: Metric) -> &Prediction {
        let i = Metric::ALL.iter().position(|m| *m == metric).unwrap_or(0);
        &self.predictions[i]
    }

    /// The models and predictions of `metrics`, in their order.
    fn of(&self, metrics: &[Metric]) -> (Vec<Arc<Fitted>>, Vec<Prediction>) {
        metrics
            .iter()
            .filter_map(|m| Metric::ALL.iter().position(|x| x == m))
            .map(|i| (self.models[i].clone(), self.predictions[i].clone()))
            .unzip()
    }
}

fn metrics_of(metric: Option<MetricName>) -> Vec<Metric> {
    metric.map_or_else(|| Metric::ALL.to_vec(), |m| vec![m.into()])
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
        (status = 422, response = NoRuns),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_predictions(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(tag): Path<String>,
    Query(params): Query<PredictionParams>,
) -> ApiResult<Response> {
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
    let app = find_app(&state, &tag).await?;
    let allowed = predict::allowed_rmse(&app, allowed);
    let aggregate = params.aggregate.unwrap_or_default();
    let metrics = metrics_of(params.metric);
    let consistent = Consistent::at(&state, &app, allowed, nodes, aggregate).await?;
    let (models, mut predicted) = consistent.of(&metrics);
    let tts_s = consistent.prediction(Metric::Tts).value;
    let (apc_bounds, node_set) = if metrics.contains(&Metric::Apc) || scope.list.is_some() {
        node_answers(&state, &app, nodes, &scope, allowed, aggregate, tts_s).await?
    } else {
        (None, None)
    };
    physics_flags(&state, &app, &models, nodes, &mut predicted).await?;
    outage_flags(&state, &mut predicted);
    let answer = Predictions {
        model_version: predict::ModelVersion(&app),
        app: &app.tag,
        nodes,
        predictions: models
            .iter()
            .zip(&predicted)
            .map(|(m, p)| metric_prediction(m, nodes, p, aggregate))
            .collect(),
        apc_bounds,
        node_set,
    };
    // The rendered model parts make up most of the answer: size the buffer
    // for them at once.
    let size: usize = models
        .iter()
        .flat_map(|m| rendered(m).iter().map(|r| r.get().len()))
        .sum();
    json_reply(&answer, size + 1024)
}

/// Flag extrapolations that depart from the application's physics model
/// (docs/model.md §4) by more than its own misfit explains. Inside the measured
/// range the data speak for themselves; beyond it, the laws of the declared
/// scaling mode are the best check there is.
async fn physics_flags(
    state: &AppState,
    app: &AppRow,
    models: &[Arc<Fitted>],
    nodes: u32,
    predicted: &mut [Prediction],
) -> ApiResult<()> {
    if !predicted
        .iter()
        .any(|p| p.flags.contains(&Flag::Extrapolation))
    {
        return Ok(());
    }
    let physics = match state.models.physics(&state.pool, app).await {
        Ok(physics) => physics,
        // Through a database outage, an application whose physics model
        // was never needed goes without this check.
        Err(PredictError::Database(e)) if state.caches.degraded() => {
            tracing::debug!(error = %e, "physics check skipped: database unreachable");
            None
        }
        Err(e) => return Err(predict_error(&app.tag, e)),
    };
    let Some(physics) = physics else {
        return Ok(());
    };
    for (fitted, p) in models.iter().zip(predicted) {
        let metric = fitted.model.options.metric;
        if p.flags.contains(&Flag::Extrapolation)
            && !p.flags.contains(&Flag::OutsideTheory)
            && physics.departs(metric, f64::from(nodes), p.value)
        {
            p.flags.push(Flag::OutsideTheory);
        }
    }
    Ok(())
}

/// Flag answers made from memory while the database is unreachable.
fn outage_flags(state: &AppState, predicted: &mut [Prediction]) {
    if state.caches.degraded() {
        for p in predicted {
            p.flags.push(Flag::DatabaseUnavailable);
        }
    }
}

/// Where node powers come from for one query, and its node list if any.
pub(super) struct NodeScope {
    pub(super) workload: String,
    pub(super) partition: Option<String>,
    pub(super) list: Option<Vec<String>>,
}

impl NodeScope {
    /// Check a query's workload, partition and node list (whose field names
    /// get `prefix`); `None` after recording what is wrong.
    pub(super) fn check(
        state: &AppState,
        workload: Option<String>,
        partition: Option<String>,
        node_list: Option<&str>,
        prefix: &str,
        problems: &mut Vec<FieldError>,
    ) -> Option<NodeScope> {
        let before = problems.len();
        let workload = super::nodes::workload_or_default(
            state,
            workload,
            format!("{prefix}workload"),
            problems,
        );
        if let Some(Err(reason)) = partition
            .as_deref()
            .map(|p| validate::identifier(p, validate::TAG_MAX))
        {
            problems.push(FieldError::new(format!("{prefix}partition"), reason));
        }
        let list = match node_list.map(hostlist::expand) {
            Some(Ok(list)) => Some(list),
            Some(Err(e)) => {
                problems.push(FieldError::new(format!("{prefix}node_list"), e.to_string()));
                None
            }
            None => None,
        };
        (problems.len() == before).then_some(NodeScope {
            workload,
            partition,
            list,
        })
    }
}

/// The node count of a query: `nodes`, or the length of its node list (which
/// `nodes`, when also given, must equal).
pub(super) fn scope_nodes(
    nodes: Option<i64>,
    scope: &Option<NodeScope>,
    prefix: &str,
    problems: &mut Vec<FieldError>,
) -> Option<u32> {
    let listed = scope.as_ref().and_then(|s| s.list.as_ref()).map(Vec::len);
    match (nodes, listed) {
        (Some(n), Some(len)) if usize::try_from(n).ok() != Some(len) => {
            problems.push(FieldError::new(
                format!("{prefix}nodes"),
                format!("must equal the number of nodes in node_list ({n} ≠ {len})"),
            ));
            None
        }
        (Some(n), _) => check_nodes(&format!("{prefix}nodes"), n)
            .map_err(|e| problems.push(e))
            .ok(),
        (None, Some(len)) => check_nodes(&format!("{prefix}node_list"), len as i64)
            .map_err(|e| problems.push(e))
            .ok(),
        (None, None) => {
            // A bad node list has been reported already.
            if !problems.iter().any(|p| p.field.ends_with("node_list")) {
                problems.push(FieldError::new(
                    format!("{prefix}nodes"),
                    "is required (or give node_list)",
                ));
            }
            None
        }
    }
}

/// The APC bounds of n nodes and the node set's predictions, where nodes are
/// classified; a node list naming unknown nodes is refused (422).
pub(super) async fn node_answers(
    state: &AppState,
    app: &AppRow,
    nodes: u32,
    scope: &NodeScope,
    allowed: f64,
    aggregate: AggregateName,
    tts_s: f64,
) -> ApiResult<(Option<ApcBounds>, Option<NodeSet>)> {
    if let Some(list) = &scope.list {
        // The registry as the in-memory load has it (see `cache`).
        let load = super::power::current_load(state).await?;
        let unknown: Vec<&str> = list
            .iter()
            .map(String::as_str)
            .filter(|n| !load.is_registered(n))
            .collect();
        if !unknown.is_empty() {
            let shown = unknown
                .iter()
                .take(MAX_NAMES_SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = if unknown.len() > MAX_NAMES_SHOWN {
                format!(" and {} more", unknown.len() - MAX_NAMES_SHOWN)
            } else {
                String::new()
            };
            return Err(ApiError::invalid(
                "node_list",
                format!("names nodes not in the registry: {shown}{more}"),
            ));
        }
    }
    let Some(powers) =
        super::nodes::node_powers(state, &scope.workload, scope.partition.as_deref()).await?
    else {
        return Ok((None, None));
    };
    let best_model = state
        .models
        .best_node_apc(&state.pool, app, &powers, allowed)
        .await
        .map_err(|e| predict_error(&app.tag, e))?;
    let best = best_model.model.predict(nodes, aggregate.into());
    let scale = &powers.scale;
    let max_peak = powers.peak_w.values().copied().reduce(f64::max);
    let bounds = ApcBounds {
        workload: scope.workload.clone(),
        partition: scope.partition.clone(),
        best_w: best.value,
        worst_w: model::bounds::worst_of(best.value, nodes, scale),
        p_min_w: scale.p_min,
        p_max_w: scale.p_max,
        vendor_peak_w: max_peak.map(|p| p * f64::from(nodes)),
        source: source_name(best.source).to_owned(),
    };
    let node_set = match &scope.list {
        None => None,
        Some(list) => {
            let node_powers = powers.of(list);
            let apc = model::bounds::on_nodes(best.value, &node_powers, scale);

            let peaks: Option<Vec<f64>> =
                list.iter().map(|n| powers.peak_w.get(n).copied()).collect();
            Some(NodeSet {
                node_list: hostlist::compress(list),
                nodes,
                apc_w: apc,
                ets_j: apc * tts_s,
                tts_s,
                unclassified_count: node_powers.iter().filter(|p| p.is_none()).count(),
                unclassified: list
                    .iter()
                    .zip(&node_powers)
                    .filter(|(_, p)| p.is_none())
                    .map(|(n, _)| n.clone())
                    .take(MAX_NAMES_SHOWN)
                    .collect(),
                vendor_peak_w: peaks.map(|p| p.iter().sum()),
            })
        }
    };
    Ok((Some(bounds), node_set))
}

/// One query of a batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionQuery {
    pub app: String,
    /// Required unless `node_list` is given.
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub nodes: Option<i64>,
    /// One metric; all three when absent.
    pub metric: Option<MetricName>,
    pub aggregate: Option<AggregateName>,
    /// The exact node set (Slurm hostlist syntax).
    pub node_list: Option<String>,
    pub workload: Option<String>,
    pub partition: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionBatch {
    /// 1 to 1,000 queries.
    #[schema(value_type = Vec<PredictionQuery>, min_items = 1, max_items = 1000)]
    pub queries: Vec<serde_json::Value>,
    /// Allowed %RMSE for every query; default: each application's setting, else 2.
    #[schema(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

/// A compact prediction for schedulers: no model details.
#[derive(Debug, Serialize, ToSchema)]
pub struct BriefPrediction {
    pub metric: MetricName,
    pub value: f64,
    pub unit: &'static str,
    pub source: &'static str,
    /// The model family that answered, for `source: model`.
    pub family: Option<&'static str>,
    /// That family's back-test score where this node count falls: the
    /// weighted mean % error of its predictions of left-out history.
    pub backtest_error_pct: Option<f64>,
    pub low: f64,
    pub high: f64,
    pub flags: Vec<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAnswer {
    pub index: usize,
    /// `ok` or `error`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predictions: Vec<BriefPrediction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apc_bounds: Option<ApcBounds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_set: Option<NodeSet>,
    /// Why the query failed: the HTTP status it would have had alone, and the fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAnswers {
    pub answers: Vec<BatchAnswer>,
}

/// Predict for up to 1,000 queries at once (for schedulers).
///
/// Each query is answered on its own: an unknown application or a bad query
/// fails that query (with the problem it would have had alone), not the batch.
#[utoipa::path(post, path = "/v1/predictions", tag = "predictions",
    request_body = PredictionBatch,
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "One answer per query, in order", body = BatchAnswers),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "No queries, too many, node lists naming more than 200,000 nodes in all, or a bad allowed_rmse_pct", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn post_predictions(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Json(batch): Json<PredictionBatch>,
) -> ApiResult<axum::Json<BatchAnswers>> {
    let count = batch.queries.len();
    if count == 0 || count > MAX_BATCH_QUERIES {
        return Err(ApiError::invalid(
            "queries",
            format!("must hold 1 to {MAX_BATCH_QUERIES} queries (got {count})"),
        ));
    }
    validate::node_names_within_budget(&batch.queries)
        .map_err(|e| ApiError::invalid("queries", e))?;
    let allowed = check_allowed("allowed_rmse_pct", batch.allowed_rmse_pct)
        .map_err(|e| ApiError::Invalid(vec![e]))?;
    let mut apps: HashMap<String, Result<Arc<AppRow>, Problem>> = HashMap::new();
    let mut answers = Vec::with_capacity(count);
    for (index, value) in batch.queries.into_iter().enumerate() {
        let answer = match answer(&state, &mut apps, index, value, allowed).await {
            Ok(ok) => BatchAnswer {
                index,
                status: "ok".into(),
                model_version: Some(ok.model_version),
                predictions: ok.predictions,
                apc_bounds: ok.apc_bounds,
                node_set: ok.node_set,
                error: None,
            },
            Err(problem) => BatchAnswer {
                index,
                status: "error".into(),
                model_version: None,
                predictions: Vec::new(),
                apc_bounds: None,
                node_set: None,
                error: Some(problem),
            },
        };
        answers.push(answer);
    }
    Ok(axum::Json(BatchAnswers { answers }))
}

async fn answer(
    state: &AppState,
    apps: &mut HashMap<String, Result<Arc<AppRow>, Problem>>,
    index: usize,
    value: serde_json::Value,
    allowed: Option<f64>,
) -> Result<Answered, Problem> {
    let prefix = format!("queries[{index}]");
    let query: PredictionQuery = super::extract::from_json_value(value, &prefix)
        .map_err(|e| ApiError::Invalid(e).into_problem())?;
    let mut problems = Vec::new();
    let dotted = format!("{prefix}.");
    let scope = NodeScope::check(
        state,
        query.workload,
        query.partition,
        query.node_list.as_deref(),
        &dotted,
        &mut problems,
    );
    let nodes = scope_nodes(query.nodes, &scope, &dotted, &mut problems);
    let (Some(nodes), Some(scope)) = (nodes.filter(|_| problems.is_empty()), scope) else {
        return Err(ApiError::Invalid(problems).into_problem());
    };
    if !apps.contains_key(&query.app) {
        let found = find_app(state, &query.app)
            .await
            .map_err(ApiError::into_problem);
        apps.insert(query.app.clone(), found);
    }
    let app = match &apps[&query.app] {
        Ok(app) => app.clone(),
        Err(problem) => return Err(problem.clone()),
    };
    let allowed = predict::allowed_rmse(&app, allowed);
    let aggregate = query.aggregate.unwrap_or_default();
    let metrics = metrics_of(query.metric);
    let consistent = Consistent::at(state, &app, allowed, nodes, aggregate)
        .await
        .map_err(ApiError::into_problem)?;
    let (models, mut predicted) = consistent.of(&metrics);
    let tts_s = consistent.prediction(Metric::Tts).value;
    let (apc_bounds, node_set) = if metrics.contains(&Metric::Apc) || scope.list.is_some() {
        node_answers(state, &app, nodes, &scope, allowed, aggregate, tts_s)
            .await
            .map_err(|e| match e {
                // Name the query's field, not the parameter's.
                ApiError::Invalid(errors) => {
                    ApiError::Invalid(errors.into_iter().map(|e| e.nested(&prefix)).collect())
                        .into_problem()
                }
                other => other.into_problem(),
            })?
    } else {
        (None, None)
    };
    physics_flags(state, &app, &models, nodes, &mut predicted)
        .await
        .map_err(ApiError::into_problem)?;
    outage_flags(state, &mut predicted);
    let predictions = models
        .iter()
        .zip(predicted)
        .map(|(fitted, p)| {
            let model = &fitted.model;
            BriefPrediction {
                metric: model.options.metric.into(),
                value: p.value,
                unit: model.options.metric.unit(),
                source: source_name(p.source),
                family: p.family.map(model::Family::as_str),
                backtest_error_pct: backtest_error(model, nodes, &p),
                low: p.low,
                high: p.high,
                flags: p.flags.iter().map(|f| f.as_str()).collect(),
            }
        })
        .collect();
    Ok(Answered {
        model_version: predict::model_version(&app),
        predictions,
        apc_bounds,
        node_set,
    })
}

struct Answered {
    model_version: String,
    predictions: Vec<BriefPrediction>,
    apc_bounds: Option<ApcBounds>,
    node_set: Option<NodeSet>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CurveParams {
    /// Default ets.
    pub metric: Option<MetricName>,
    /// First node count (default 1).
    #[param(minimum = 1, maximum = 1_000_000)]
    pub from: Option<i64>,
    /// Last node count (default twice the largest measured).
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
    /// counts inside the measured range, or the one beyond it.
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
    /// The predictor's curve (model values, also at measured node counts).
    pub curve: Vec<CurvePoint>,
    /// The measured points.
    pub history: Vec<HistoryPoint>,
    /// The families chosen inside and beyond the measured range.
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
    Path(tag): Path<String>,
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
    let app = find_app(&state, &tag).await?;
    let metric: Metric = params.metric.unwrap_or(MetricName::Ets).into();
    let allowed = predict::allowed_rmse(&app, params.allowed_rmse_pct);
    let fitted = fitted_models(&state, &app, &[metric], allowed)
        .await?
        .remove(0);
    let model = &fitted.model;
    let largest = model.history.points.last().map_or(1, |p| p.nodes);
    let from = from.unwrap_or(1);
    let to = to.unwrap_or_else(|| largest.saturating_mul(2)).max(from);
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
            let p = model.predict_model(n);
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
        metric: metric.into(),
        unit: metric.unit().into(),
        curve,
        history: history_points(model),
        model: model_info(model),
        backtest: backtest_info(model),
    }))
}

fn history_points(model: &Model) -> Vec<HistoryPoint> {
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
    pub scaling_mode: String,
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
    Path(tag): Path<String>,
    Query(params): Query<ModelParams>,
) -> ApiResult<axum::Json<FittedModel>> {
    check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| ApiError::BadRequest(vec![e]))?;
    let app = find_app(&state, &tag).await?;
    let metric: Metric = params.metric.unwrap_or(MetricName::Ets).into();
    let allowed = predict::allowed_rmse(&app, params.allowed_rmse_pct);
    let fitted = fitted_models(&state, &app, &[metric], allowed)
        .await?
        .remove(0);
    let physics = state
        .models
        .physics(&state.pool, &app)
        .await
        .map_err(|e| predict_error(&app.tag, e))?;
    let model = &fitted.model;
    Ok(axum::Json(FittedModel {
        physics: physics.as_deref().map(PhysicsInfo::from),
        model_version: predict::model_version(&app),
        scaling_mode: app.scaling_mode.clone(),
        app: app.tag.clone(),
        metric: metric.into(),
        unit: metric.unit().into(),
        model: model_info(model),
        history: history_summary(model),
        points: history_points(model),
        backtest: backtest_info(model),
        candidates: candidates_info(model),
    }))
}

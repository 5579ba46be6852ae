//! The answer of one prediction query, borrowing the model's rendered
//! description (the predictions themselves: `service::predictions`).

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::*;
use crate::model::{self, Prediction, Source};
use crate::predict::{self, Fitted};

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
    /// That family's back-test score where this node count falls (inside,
    /// above or below the measured range): the weighted mean % error of its
    /// predictions of left-out history.
    pub backtest_error_pct: Option<f64>,
    pub aggregate: AggregateName,
    pub interval: Interval,
    /// extrapolation, thin_history, allowed_rmse_not_met,
    /// outside_theoretical_bounds, database_unavailable, bounded.
    #[schema(value_type = Vec<String>)]
    pub flags: FlagNames,
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

pub(super) fn metric_prediction<'a>(
    fitted: &'a Fitted,
    nodes: u32,
    p: &'a Prediction,
    aggregate: AggregateName,
) -> MetricPrediction<'a> {
    let [model, history, backtest] = rendered(fitted);
    let metric = fitted.model.options.metric;
    MetricPrediction {
        metric,
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
                Source::History => IntervalKind::ObservedRange,
                Source::Model => IntervalKind::Prediction95,
            },
        },
        flags: FlagNames(p.flags),
        model,
        history,
        backtest,
    }
}

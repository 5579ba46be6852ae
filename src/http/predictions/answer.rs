//! The parts every prediction answer shares: the three metrics made
//! consistent, the node scope with its APC bounds and node-set answers, and
//! the flags that the physics model and an outage add.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::*;
use crate::hostlist;
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult};
use crate::model::{self, Flag, Metric, Prediction, Source, consistency};
use crate::predict::{self, Fitted, PredictError};
use crate::store::apps::AppRow;
use crate::validate::{self, FieldError};

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

pub(super) fn metric_prediction<'a>(
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

pub(in crate::http) async fn fitted_models(
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
pub(in crate::http) struct Consistent {
    models: [Arc<Fitted>; 3],
    predictions: [Prediction; 3],
}

impl Consistent {
    pub(in crate::http) async fn at(
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
    pub(in crate::http) fn prediction(&self, metric: Metric) -> &Prediction {
        let i = Metric::ALL.iter().position(|m| *m == metric).unwrap_or(0);
        &self.predictions[i]
    }

    /// The models and predictions of `metrics`, in their order.
    pub(super) fn of(&self, metrics: &[Metric]) -> (Vec<Arc<Fitted>>, Vec<Prediction>) {
        metrics
            .iter()
            .filter_map(|m| Metric::ALL.iter().position(|x| x == m))
            .map(|i| (self.models[i].clone(), self.predictions[i].clone()))
            .unzip()
    }
}

pub(super) fn metrics_of(metric: Option<MetricName>) -> Vec<Metric> {
    metric.map_or_else(|| Metric::ALL.to_vec(), |m| vec![m.into()])
}

/// Flag extrapolations that depart from the application's physics model
/// (docs/model.md §4) by more than its own misfit explains. Inside the measured
/// range the data speak for themselves; beyond it, the laws of the declared
/// scaling mode are the best check there is.
pub(super) async fn physics_flags(
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
pub(super) fn outage_flags(state: &AppState, predicted: &mut [Prediction]) {
    if state.caches.degraded() {
        for p in predicted {
            p.flags.push(Flag::DatabaseUnavailable);
        }
    }
}

/// Where node powers come from for one query, and its node list if any.
pub(in crate::http) struct NodeScope {
    pub(in crate::http) workload: String,
    pub(in crate::http) partition: Option<String>,
    pub(in crate::http) list: Option<Vec<String>>,
}

impl NodeScope {
    /// Check a query's workload, partition and node list (whose field names
    /// get `prefix`); `None` after recording what is wrong.
    pub(in crate::http) fn check(
        state: &AppState,
        workload: Option<String>,
        partition: Option<String>,
        node_list: Option<&str>,
        prefix: &str,
        problems: &mut Vec<FieldError>,
    ) -> Option<NodeScope> {
        let before = problems.len();
        let workload = crate::http::nodes::workload_or_default(
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
pub(in crate::http) fn scope_nodes(
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
pub(in crate::http) async fn node_answers(
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
        let load = crate::service::power::current_load(state).await?;
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
        crate::http::nodes::node_powers(state, &scope.workload, scope.partition.as_deref()).await?
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

//! Predictions of an application on n nodes, as every answer needs them:
//! the three metrics made consistent, the node scope with its APC bounds and
//! node-set answers, and the flags that the physics model and an outage add
//! (docs/model.md §2, §3).

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Error, Result, Service, apps, nodes, power};
use crate::hostlist;
use crate::model::{self, Aggregate, Flag, Metric, Prediction, Source, consistency};
use crate::predict::{self, Fitted, PredictError, Tally};
use crate::store::apps::AppRow;
use crate::validate::{self, FieldError, Tag};

/// Most node names one answer lists (a node set may hold 100,000).
pub const MAX_NAMES_SHOWN: usize = 20;

/// A metric as the API names it (`MetricName` in the document): the
/// domain's own enum, which the model computes with.
pub type MetricName = Metric;
/// How runs are combined, as the API names it (`AggregateName`).
pub type AggregateName = Aggregate;

/// Check a node count; `field` is written out only for a problem (a hot
/// path passes `format_args!`).
pub fn check_nodes(
    field: impl std::fmt::Display,
    nodes: i64,
) -> std::result::Result<u32, FieldError> {
    validate::node_count(nodes).map_err(|reason| FieldError::new(field.to_string(), reason))
}

/// The last node count a curve or a capacity search reaches by default:
/// twice the largest measured count, within the node count's limit.
pub fn default_last_nodes(largest: u32) -> u32 {
    largest
        .saturating_mul(2)
        .min(u32::try_from(validate::MAX_NODES).unwrap_or(u32::MAX))
}

pub fn check_allowed(
    field: &str,
    allowed: Option<f64>,
) -> std::result::Result<Option<f64>, FieldError> {
    match allowed {
        Some(pct) => validate::allowed_rmse_pct(pct)
            .map(|()| Some(pct))
            .map_err(|reason| FieldError::new(field, reason)),
        None => Ok(None),
    }
}

pub fn predict_error(tag: &str, error: PredictError) -> Error {
    match error {
        PredictError::NoRuns => Error::invalid(
            "app",
            format!("application `{tag}` has no runs to predict from yet"),
        ),
        PredictError::Database(e) => e.into(),
        PredictError::Fit(e) => Error::Internal(anyhow::anyhow!(e)),
        PredictError::Busy => Error::Busy(
            "another fit with an allowed_rmse_pct of its own is under way; retry shortly, \
             or use the application's setting",
        ),
    }
}

/// APC on the best and the worst allocation of n nodes (docs/model.md §3): the
/// history normalised to the best node, predicted for n, plus nothing (best)
/// or n·(P_max − P_min) (worst, and never below the expected APC).
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
    /// How many nodes of the set are outside the classification: without
    /// samples of the workload or, with `partition`, registered in another
    /// partition. They are counted at the mean node power, as the runs of
    /// the history on such nodes were.
    pub unclassified_count: usize,
    /// The first 20 of them.
    pub unclassified: Vec<String>,
    /// What a job on this set reserves (`reserved_basis: node_set`): `apc_w`
    /// with the unclassified nodes counted at `p_max_w` instead of the mean.
    pub reserved_w: f64,
    /// Σ of the set's vendor peaks, when the registry knows all of them.
    pub vendor_peak_w: Option<f64>,
}

pub async fn fitted_models(
    service: &Service,
    app: &AppRow,
    metrics: &[Metric],
    allowed: f64,
) -> Result<Vec<Arc<Fitted>>> {
    let mut out = Vec::with_capacity(metrics.len());
    for &metric in metrics {
        let model = service
            .models
            .model(&service.pool, app, metric, allowed)
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
pub struct Consistent {
    models: [Arc<Fitted>; 3],
    predictions: [Prediction; 3],
}

impl Consistent {
    pub async fn at(
        service: &Service,
        app: &AppRow,
        allowed: f64,
        nodes: u32,
        aggregate: AggregateName,
    ) -> Result<Consistent> {
        let models = match service.models.warm(app, allowed) {
            Some(models) => models,
            None => {
                let all = fitted_models(service, app, &Metric::ALL, allowed).await?;
                std::array::from_fn(|i| all[i].clone())
            }
        };
        let predictions = consistency::predict(
            [&models[0].model, &models[1].model, &models[2].model],
            nodes,
            aggregate,
        );
        Ok(Consistent {
            models,
            predictions,
        })
    }

    /// `metric`'s prediction (`Metric::ALL` is the order of both arrays).
    pub fn prediction(&self, metric: Metric) -> &Prediction {
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

/// One prediction query, checked: an application on `nodes` nodes.
pub struct Query {
    pub nodes: u32,
    pub scope: NodeScope,
    /// One metric; all three when `None`.
    pub metric: Option<MetricName>,
    pub aggregate: AggregateName,
    /// The allowed %RMSE the query asks for; else the application's.
    pub allowed_rmse_pct: Option<f64>,
}

/// What one query is answered with: its metrics' models and predictions,
/// consistent and flagged, and the answers of its node scope.
pub struct Predicted {
    pub aggregate: AggregateName,
    pub models: Vec<Arc<Fitted>>,
    pub predictions: Vec<Prediction>,
    pub apc_bounds: Option<ApcBounds>,
    pub node_set: Option<NodeSet>,
    /// What `/metrics` counted of it.
    pub tally: Tally,
}

/// Predict `app` for `query`: the one path of single and batch queries.
/// APC bounds come with APC, or with a node list (whose set is answered too).
pub async fn predict(service: &Service, app: &AppRow, query: Query) -> Result<Predicted> {
    let allowed = predict::allowed_rmse(app, query.allowed_rmse_pct);
    let (nodes, aggregate) = (query.nodes, query.aggregate);
    let metrics = metrics_of(query.metric);
    let consistent = Consistent::at(service, app, allowed, nodes, aggregate).await?;
    let (models, mut predictions) = consistent.of(metrics);
    let with_apc = metrics.contains(&Metric::Apc);
    let (apc_bounds, node_set) = if with_apc || query.scope.list.is_some() {
        // Without a partition, nodes are weighed where the registry has them,
        // as for a job start and an admission question: a node list of CPU
        // nodes was weighed against the whole registry's mean node, GPU
        // nodes included, and its APC came out at 41 % of what those nodes
        // drew (a review, 2026-11-28). A partition asked for is answered, as
        // asked (its scale, the list's other nodes at its mean).
        let mut scope = query.scope;
        if scope.partition.is_none() {
            settle_partition(service, &mut scope).await?;
        }
        check_named(service, &scope).await?;
        let (bounds, set) =
            node_answers(service, app, nodes, &scope, allowed, aggregate, &consistent).await?;
        // The bounds are APC's: a query of other metrics gets the node set.
        (bounds.filter(|_| with_apc), set)
    } else {
        (None, None)
    };
    physics_flags(service, app, &models, nodes, &mut predictions).await?;
    outage_flags(service, &mut predictions);
    let tally = Tally::of(&models, &predictions);
    tally.count();
    Ok(Predicted {
        tally,
        aggregate,
        models,
        predictions,
        apc_bounds,
        node_set,
    })
}

/// The answer to the prediction request `target` (its path and query), as
/// rendered for an identical request before when nothing it depends on
/// changed since (the application, the nodes, the database's reachability;
/// `Caches::answer`), else as `render` renders it now, kept for the next.
/// Dashboards poll the same queries, and schedulers ask the same
/// applications at the same node counts: they skip the prediction and its
/// rendering.
pub async fn kept_or_render<F: Future<Output = Result<(Vec<u8>, Tally)>>>(
    service: &Service,
    target: &str,
    render: impl FnOnce() -> F,
) -> Result<Bytes> {
    let caches = &service.caches;
    let (read_at, degraded) = (caches.answers_generation(), caches.degraded());
    if let Some((body, tally)) = caches.answer(target) {
        tally.count();
        return Ok(body);
    }
    // On the heap: the rendering's large future is not carried (and moved)
    // by every request's, kept answers included. `predict` counted it.
    let (body, tally) = Box::pin(render()).await?;
    let body = Bytes::from(body);
    caches.put_answer(target, body.clone(), tally, degraded, read_at);
    Ok(body)
}

/// The application named `tag` and its model of `metric`, fitted with the
/// allowed %RMSE asked for (else the application's).
pub async fn model(
    service: &Service,
    tag: &Tag,
    metric: Metric,
    allowed_rmse_pct: Option<f64>,
) -> Result<(Arc<AppRow>, Arc<Fitted>)> {
    let app = apps::find(service, tag).await?;
    let allowed = predict::allowed_rmse(&app, allowed_rmse_pct);
    let fitted = service
        .models
        .model(&service.pool, &app, metric, allowed)
        .await
        .map_err(|e| predict_error(&app.tag, e))?;
    Ok((app, fitted))
}

/// The metrics a query asks for, in `Metric::ALL`'s order.
fn metrics_of(metric: Option<MetricName>) -> &'static [Metric] {
    metric.map_or(&Metric::ALL, |m| {
        std::slice::from_ref(&Metric::ALL[m.index()])
    })
}

/// Flag extrapolations that depart from the application's physics model
/// (docs/model.md §4) by more than its own misfit explains. Inside the measured
/// range the data speak for themselves; beyond it, the laws of the declared
/// scaling mode are the best check there is.
async fn physics_flags(
    service: &Service,
    app: &AppRow,
    models: &[Arc<Fitted>],
    nodes: u32,
    predicted: &mut [Prediction],
) -> Result<()> {
    if !predicted
        .iter()
        .any(|p| p.flags.contains(Flag::Extrapolation))
    {
        return Ok(());
    }
    let physics = match service.models.physics(&service.pool, app).await {
        Ok(physics) => physics,
        // Through a database outage, an application whose physics model
        // was never needed goes without this check.
        Err(PredictError::Database(e)) if service.caches.degraded() => {
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
        if p.flags.contains(Flag::Extrapolation)
            && !p.flags.contains(Flag::OutsideTheory)
            && physics.departs(metric, f64::from(nodes), p.value)
        {
            p.flags.insert(Flag::OutsideTheory);
        }
    }
    Ok(())
}

/// Flag answers made from memory while the database is unreachable.
fn outage_flags(service: &Service, predicted: &mut [Prediction]) {
    if service.caches.degraded() {
        for p in predicted {
            p.flags.insert(Flag::DatabaseUnavailable);
        }
    }
}

/// Where node powers come from for one query, and its node list if any.
pub struct NodeScope {
    pub workload: String,
    /// `workload` was asked for by name (not the default).
    pub named_workload: bool,
    pub partition: Option<String>,
    pub list: Option<Vec<String>>,
    /// What the query's field names start with (`queries[3].` in a batch),
    /// for the problems found later, such as unknown nodes.
    pub prefix: String,
}

impl NodeScope {
    /// Check a query's workload, partition and node list (whose field names
    /// get `prefix`); `None` after recording what is wrong.
    pub fn check(
        service: &Service,
        workload: Option<String>,
        partition: Option<String>,
        node_list: Option<&str>,
        prefix: &str,
        problems: &mut Vec<FieldError>,
    ) -> Option<NodeScope> {
        let before = problems.len();
        let named_workload = workload.is_some();
        let workload = nodes::workload_or_default(service, workload, prefix, problems);
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
            named_workload,
            partition,
            list,
            prefix: prefix.to_owned(),
        })
    }
}

/// The node count of a query: `nodes`, or the length of its node list (which
/// `nodes`, when also given, must equal).
pub fn scope_nodes(
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
        (Some(n), _) => check_nodes(format_args!("{prefix}nodes"), n)
            .map_err(|e| problems.push(e))
            .ok(),
        (None, Some(len)) => check_nodes(format_args!("{prefix}node_list"), len as i64)
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

/// Count a job naming its nodes where they are: when the registry has every
/// listed node in one partition, that is the job's partition for power
/// (its caps, headroom and admission), whatever partition the job named or
/// if it named none. A partition cap limits what a partition's nodes draw;
/// a job counted elsewhere than its nodes took their idle power out of
/// their partition without adding its own, so a node list without a
/// partition passed under that partition's cap (a review, 2026-11-28). A
/// scheduler's partitions may overlap, so a partition named otherwise is
/// not refused. Nodes in several partitions leave the named one.
pub async fn settle_partition(service: &Service, scope: &mut NodeScope) -> Result<()> {
    let Some(list) = &scope.list else {
        return Ok(());
    };
    let load = power::registry(service).await?;
    if let Some(theirs) = load.partition_of_all(list)
        && scope.partition.as_deref() != Some(theirs)
    {
        scope.partition = Some(theirs.to_owned());
    }
    Ok(())
}

/// Refuse (`Invalid`) a partition no registered node is in, or a workload
/// asked for by name that no node of the scope has samples of: a typo
/// (`partition=gpu2`) would otherwise drop the bounds without a word, and a
/// scheduler checking a cap would get none.
pub async fn check_named(service: &Service, scope: &NodeScope) -> Result<()> {
    let field = |name: &str| format!("{}{name}", scope.prefix);
    let partition = scope.partition.as_deref();
    if let Some(p) = partition
        && !power::registry(service).await?.has_partition(p)
    {
        return Err(Error::invalid(
            &field("partition"),
            format!("names no partition of the registry: no registered node is in {p}"),
        ));
    }
    check_workload(service, scope, partition).await
}

/// Refuse (`Invalid`) a workload asked for by name that no node of
/// `partition` (of the registry, for `None`) has samples of. Admission and
/// job starts check it in the whole registry, and not the partition (a
/// scheduler's partitions need not all be registered, nor all sampled): a
/// mistyped workload would otherwise reserve the expected APC instead of
/// the worst-node bound, weakening every cap the job counts under.
pub async fn check_workload(
    service: &Service,
    scope: &NodeScope,
    partition: Option<&str>,
) -> Result<()> {
    let field = |name: &str| format!("{}{name}", scope.prefix);
    if scope.named_workload
        && nodes::node_powers(service, &scope.workload, partition)
            .await?
            .is_none()
    {
        let nodes = partition.map_or_else(
            || "no registered node".to_owned(),
            |p| format!("no node of partition {p}"),
        );
        return Err(Error::invalid(
            &field("workload"),
            format!(
                "names a workload without samples: {nodes} has samples of {}",
                scope.workload
            ),
        ));
    }
    Ok(())
}

/// Refuse (`Invalid`) a node list naming nodes not in the registry: a
/// job's nodes are counted against the idle draw of registered nodes only,
/// and a list of names nothing knows would be held, unbounded, in every
/// admission's load.
pub async fn check_registered(service: &Service, scope: &NodeScope) -> Result<()> {
    let Some(list) = &scope.list else {
        return Ok(());
    };
    // The registry as the in-memory load has it (see `cache`).
    let load = power::registry(service).await?;
    let unknown: Vec<&str> = list
        .iter()
        .map(String::as_str)
        .filter(|n| !load.is_registered(n))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let shown = crate::text::names_shown(&unknown, MAX_NAMES_SHOWN);
    Err(Error::invalid(
        &format!("{}node_list", scope.prefix),
        format!("names nodes not in the registry: {shown}"),
    ))
}

/// The APC bounds of n nodes and the node set's predictions, where nodes are
/// classified; a node list naming unknown nodes is refused (`Invalid`).
/// `expected` gives the node set its TtS, and the worst-node bound its
/// floor: the bound comes from the best-node model, which may extrapolate
/// on a family of its own, and the worst allocation draws no less than the
/// expected APC (a history whose power dips then rises gave 11,002 W against
/// 11,314 W expected at twice its largest count, and admission reserved
/// less than max-nodes held to a limit).
pub async fn node_answers(
    service: &Service,
    app: &AppRow,
    nodes: u32,
    scope: &NodeScope,
    allowed: f64,
    aggregate: AggregateName,
    expected: &Consistent,
) -> Result<(Option<ApcBounds>, Option<NodeSet>)> {
    let tts_s = expected.prediction(Metric::Tts).value;
    let apc_w = expected.prediction(Metric::Apc).value;
    check_registered(service, scope).await?;
    let Some(powers) =
        nodes::node_powers(service, &scope.workload, scope.partition.as_deref()).await?
    else {
        return Ok((None, None));
    };
    let best_model = service
        .models
        .best_node_apc(&service.pool, app, &powers, allowed)
        .await
        .map_err(|e| predict_error(&app.tag, e))?;
    let best = best_model.model.predict(nodes, aggregate);
    let scale = &powers.scale;
    let max_peak = powers.peak_w.values().copied().reduce(f64::max);
    let bounds = ApcBounds {
        workload: scope.workload.clone(),
        partition: scope.partition.clone(),
        best_w: best.value,
        worst_w: model::bounds::worst_of(best.value, nodes, scale).max(apc_w),
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

            let mut peaks: Option<Vec<f64>> =
                list.iter().map(|n| powers.peak_w.get(n).copied()).collect();
            // A peak is the registry's, whatever partition was asked.
            if peaks.is_none()
                && scope.partition.is_some()
                && let Some(all) = nodes::node_powers(service, &scope.workload, None).await?
            {
                peaks = list.iter().map(|n| all.peak_w.get(n).copied()).collect();
            }
            Some(NodeSet {
                node_list: hostlist::compress(list),
                nodes,
                apc_w: apc,
                ets_j: apc * tts_s,
                tts_s,
                reserved_w: model::bounds::reserve_on_nodes(best.value, &node_powers, scale),
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

pub fn source_name(source: Source) -> &'static str {
    match source {
        Source::History => "history",
        Source::Model => "model",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future that the closure would return, never called.
    fn future_size<F: Future>(_: &impl Fn() -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every request's future holds the futures of all the paths it might
    /// take. The database reads and fits behind a warm prediction are boxed,
    /// so the path that every warm prediction takes does not hold (and move)
    /// their kilobytes: `predict`'s was 5.5 KiB before, about 1.2 KiB after;
    /// `authenticate`'s 296 bytes before, 88 after.
    #[test]
    #[allow(unreachable_code, clippy::diverging_sub_expression)]
    fn a_warm_prediction_future_stays_small() {
        let predict = future_size(&|| predict(todo!(), todo!(), todo!()));
        assert!(predict < 2048, "predict's future is {predict} bytes");
        let authenticate = future_size(&|| crate::service::tokens::authenticate(todo!(), todo!()));
        assert!(
            authenticate < 256,
            "authenticate's future is {authenticate} bytes"
        );
    }
}

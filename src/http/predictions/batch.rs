//! `POST /v1/predictions`: many queries in one request.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    MalformedJson, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::{Json, JsonItem, NoQuery};
use crate::model;
use crate::predict;
use crate::service::apps::{AppRow, find, prefetch};
use crate::service::predictions::{self, Predicted, Query};
use crate::validate::{self, Tag};

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

/// Queries of a batch answered between two yields to the runtime.
const YIELD_EVERY: usize = 64;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionBatch {
    /// 1 to 1,000 queries.
    #[schema(value_type = Vec<PredictionQuery>, min_items = 1, max_items = 1000)]
    pub queries: Vec<JsonItem>,
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
    pub status: AnswerStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub predictions: Vec<BriefPrediction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apc_bounds: Option<ApcBounds>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_set: Option<NodeSet>,
    /// Why the query failed, as it would have alone: the same fields and
    /// reasons (a bad value 422, as a field of a JSON body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Problem>,
}

/// Whether a batch query was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnswerStatus {
    Ok,
    /// The query failed alone: `error` says why.
    Error,
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
    _: NoQuery,
    Json(batch): Json<PredictionBatch>,
) -> ApiResult<axum::Json<BatchAnswers>> {
    let count = batch.queries.len();
    if count == 0 || count > MAX_BATCH_QUERIES {
        return Err(ApiError::invalid(
            "queries",
            format!("must hold 1 to {MAX_BATCH_QUERIES} queries (got {count})"),
        ));
    }
    validate::node_names_within_budget(batch.queries.iter().map(|q| &q.value))
        .map_err(|e| ApiError::invalid("queries", e))?;
    let allowed = check_allowed("allowed_rmse_pct", batch.allowed_rmse_pct)
        .map_err(|e| ApiError::Invalid(vec![e]))?;
    let tags = batch
        .queries
        .iter()
        .filter_map(|q| q.value.get("app")?.as_str());
    prefetch(&state, tags).await;
    let mut apps: HashMap<String, Result<Arc<AppRow>, Problem>> = HashMap::new();
    let mut answers = Vec::with_capacity(count);
    for (index, value) in batch.queries.into_iter().enumerate() {
        // A thousand answers take tens of ms: let the worker's other
        // requests (a /healthz, a scheduler's question) in between.
        if index % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
        let answer = match answer(&state, &mut apps, index, value, allowed).await {
            Ok(ok) => BatchAnswer {
                index,
                status: AnswerStatus::Ok,
                model_version: Some(ok.model_version),
                predictions: ok.predictions,
                apc_bounds: ok.apc_bounds,
                node_set: ok.node_set,
                error: None,
            },
            Err(problem) => BatchAnswer {
                index,
                status: AnswerStatus::Error,
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

pub(super) async fn answer(
    state: &AppState,
    apps: &mut HashMap<String, Result<Arc<AppRow>, Problem>>,
    index: usize,
    item: JsonItem,
    allowed: Option<f64>,
) -> Result<Answered, Problem> {
    let prefix = format!("queries[{index}]");
    let query: PredictionQuery = item
        .read(&prefix)
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
    // A field of this query, as its other fields (it was a 400 naming `app`,
    // as a path's parameter is).
    let tag = validate::checked(
        &mut problems,
        &format!("{dotted}app"),
        Tag::parse(&query.app),
    );
    let (Some(nodes), Some(scope), Some(tag)) = (nodes.filter(|_| problems.is_empty()), scope, tag)
    else {
        return Err(ApiError::Invalid(problems).into_problem());
    };
    if !apps.contains_key(&query.app) {
        let found = find(state, &tag).await.map_err(ApiError::into_problem);
        apps.insert(query.app.clone(), found);
    }
    let app = match &apps[&query.app] {
        Ok(app) => app.clone(),
        Err(problem) => return Err(problem.clone()),
    };
    let query = Query {
        nodes,
        scope,
        metric: query.metric,
        aggregate: query.aggregate.unwrap_or_default(),
        allowed_rmse_pct: allowed,
    };
    let Predicted {
        models,
        predictions: predicted,
        apc_bounds,
        node_set,
        ..
    } = predictions::predict(state, &app, query)
        .await
        .map_err(ApiError::into_problem)?;
    let predictions = models
        .iter()
        .zip(predicted)
        .map(|(fitted, p)| {
            let model = &fitted.model;
            BriefPrediction {
                metric: model.options.metric,
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

pub(super) struct Answered {
    model_version: String,
    predictions: Vec<BriefPrediction>,
    apc_bounds: Option<ApcBounds>,
    node_set: Option<NodeSet>,
}

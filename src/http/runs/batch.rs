//! `POST /v1/runs/batch`: many runs in one request, item by item or atomically.

use axum::extract::State;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    HeavyBusy, MalformedJson, NeedsIngest, NotJson, TooLarge, Unauthorized, Unavailable,
};
use crate::http::error::{ApiError, ApiResult, Problem, ProblemField};
use crate::http::extract::{Json, JsonItem, NoQuery};
use crate::ingest::{self, Outcome};
use crate::service::runs;
use crate::validate::{self, FieldError};

/// A batch of runs.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchInput {
    /// 1 to 10,000 runs.
    #[schema(value_type = Vec<RunInput>, min_items = 1, max_items = 10_000)]
    pub runs: Vec<JsonItem>,
    /// `false` (default): store every valid run and reject the others, item by
    /// item. `true`: store nothing unless every run is valid (422 otherwise).
    #[serde(default)]
    pub atomic: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    Created,
    Duplicate,
    Rejected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Rejection {
    /// The run breaks a validation rule.
    Invalid,
    /// Its (source, job_id) is stored (or earlier in the batch) with other
    /// values; or it ended at or before the start of the attempt of its job
    /// running now (an earlier attempt's run, not stored; `errors` names
    /// `ended_at`, and there is no `run_id`).
    Conflict,
}

/// The answer for one run of a batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchItem {
    /// Position of the run in `runs`.
    pub index: usize,
    pub status: ItemStatus,
    /// The stored run (created or duplicate; for a conflict, the stored run it clashes with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Rejection>,
    /// Why the run was rejected, field by field (`runs[i].field`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProblemField>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BatchResult {
    pub created: usize,
    pub duplicate: usize,
    pub rejected: usize,
    /// One entry per submitted run, in order.
    pub items: Vec<BatchItem>,
}

/// Store a batch of up to 10,000 runs in one transaction.
///
/// By default each run is answered on its own: valid new runs are stored
/// (all together, after which the answer is sent), duplicates are reported,
/// and invalid or conflicting runs are rejected with their reasons and never
/// stored. With `"atomic": true`, any rejected run makes the whole batch fail
/// with 422 and nothing is stored.
#[utoipa::path(post, path = "/v1/runs/batch", tag = "runs",
    request_body = BatchInput,
    security(("bearer" = ["ingest"])),
    responses(
        (status = 200, description = "Per-item results; valid runs are committed", body = BatchResult),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsIngest),
        (status = 413, response = TooLarge),
        (status = 422, description = "Empty or oversized batch, node lists naming more than 200,000 nodes in all, or an atomic batch with a rejected run (nothing stored)", body = Problem, content_type = "application/problem+json"),
        (status = 415, response = NotJson),
        (status = 429, response = HeavyBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn create_batch(
    _: Authorized<auth::Ingest>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<BatchInput>,
) -> ApiResult<axum::Json<BatchResult>> {
    let count = input.runs.len();
    if count == 0 {
        return Err(ApiError::invalid("runs", "must hold at least one run"));
    }
    if count > ingest::MAX_BATCH {
        return Err(ApiError::invalid(
            "runs",
            format!(
                "holds {count} runs; at most {} per batch",
                ingest::MAX_BATCH
            ),
        ));
    }
    validate::node_names_within_budget(input.runs.iter().map(|r| &r.value))
        .map_err(|e| ApiError::invalid("runs", e))?;
    let now = Utc::now();
    // Checking thousands of runs and expanding their node lists is heavy.
    let items: Vec<_> = state
        .offload(move || {
            input
                .runs
                .into_iter()
                .enumerate()
                .map(|(i, value)| {
                    let prefix = format!("runs[{i}]");
                    super::read_run(value, &prefix).and_then(|run| {
                        ingest::validate(run.into(), now).map_err(|errors| {
                            errors.into_iter().map(|e| e.nested(&prefix)).collect()
                        })
                    })
                })
                .collect()
        })
        .await?;
    let ingested = runs::store_runs(&state, items, input.atomic).await?;

    if !ingested.committed {
        let errors: Vec<FieldError> = ingested
            .outcomes
            .into_iter()
            .enumerate()
            .flat_map(|(i, outcome)| rejection_errors(i, outcome))
            .collect();
        return Err(ApiError::Invalid(errors));
    }

    let items: Vec<BatchItem> = ingested
        .outcomes
        .into_iter()
        .enumerate()
        .map(|(index, outcome)| batch_item(index, outcome))
        .collect();
    let tally = |status| items.iter().filter(|i| i.status == status).count();
    Ok(axum::Json(BatchResult {
        created: tally(ItemStatus::Created),
        duplicate: tally(ItemStatus::Duplicate),
        rejected: tally(ItemStatus::Rejected),
        items,
    }))
}

/// The field errors of a rejected item, with `runs[i].` in front of conflicts'
/// field names (validation errors carry it already).
fn rejection_errors(index: usize, outcome: Outcome) -> Vec<FieldError> {
    match outcome {
        Outcome::Invalid(errors) => errors,
        Outcome::Conflict { differences, .. } => differences
            .into_iter()
            .map(|e| e.nested(&format!("runs[{index}]")))
            .collect(),
        Outcome::EarlierAttempt(error) => vec![error.nested(&format!("runs[{index}]"))],
        Outcome::Created(_) | Outcome::Duplicate(_) | Outcome::Withheld => Vec::new(),
    }
}

fn batch_item(index: usize, outcome: Outcome) -> BatchItem {
    let (status, run_id, rejection) = match &outcome {
        Outcome::Created(id) => (ItemStatus::Created, Some(*id), None),
        Outcome::Duplicate(id) => (ItemStatus::Duplicate, Some(*id), None),
        Outcome::Invalid(_) => (ItemStatus::Rejected, None, Some(Rejection::Invalid)),
        Outcome::Conflict { run_id, .. } => {
            (ItemStatus::Rejected, *run_id, Some(Rejection::Conflict))
        }
        Outcome::EarlierAttempt(_) => (ItemStatus::Rejected, None, Some(Rejection::Conflict)),
        Outcome::Withheld => unreachable!("only refused atomic batches withhold runs"),
    };
    let errors = rejection_errors(index, outcome)
        .into_iter()
        .map(ProblemField::from)
        .collect();
    BatchItem {
        index,
        status,
        run_id,
        rejection,
        errors,
    }
}

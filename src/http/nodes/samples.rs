//! `POST /v1/nodes/samples`: power samples of nodes under reference workloads.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    MalformedJson, NeedsIngest, NotJson, TooLarge, Unauthorized, Unavailable,
};
use crate::http::error::{ApiError, ApiResult, Problem, ProblemField};
use crate::http::extract::{Json, JsonItem, NoQuery};
use crate::http::runs::{ItemStatus, Rejection};
use crate::service::nodes::{self, NewSample, PEAK_FACTOR, SampleOutcome};
use crate::validate::{self, Errors, FieldError};

/// Most samples in one `POST /v1/nodes/samples`.
pub const MAX_SAMPLES: usize = 10_000;

/// One node's average power while it ran a reference workload.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleInput {
    /// A registered node.
    pub node: String,
    /// The reference workload (e.g. a stress benchmark), named like an application tag.
    #[schema(example = "hpl-stress")]
    pub workload: String,
    /// W; at most 100,000 per node.
    #[schema(minimum = 1e-100, maximum = 100_000.0)]
    pub avg_power_w: f64,
    /// When the measurement was taken (RFC 3339): from 1970 to 5 minutes
    /// after now. With node and workload, it identifies the sample.
    pub measured_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleBatch {
    /// 1 to 10,000 samples.
    #[schema(value_type = Vec<SampleInput>, min_items = 1, max_items = 10_000)]
    pub samples: Vec<JsonItem>,
}

/// The answer for one sample of a batch.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SampleItem {
    /// Position of the sample in `samples`.
    pub index: usize,
    pub status: ItemStatus,
    /// The stored sample (created or duplicate; for a conflict, the one it clashes with).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejection: Option<Rejection>,
    /// Why the sample was rejected, field by field (`samples[i].field`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProblemField>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SampleResult {
    pub created: usize,
    pub duplicate: usize,
    pub rejected: usize,
    /// One entry per submitted sample, in order.
    pub items: Vec<SampleItem>,
}

fn validate_sample(input: SampleInput, now: DateTime<Utc>) -> Result<NewSample, Vec<FieldError>> {
    let mut errors = Errors::default();
    errors.check("node", validate::node_name(&input.node));
    errors.check(
        "workload",
        validate::identifier(&input.workload, validate::TAG_MAX),
    );
    errors.check("avg_power_w", validate::node_power(input.avg_power_w));
    if input.measured_at < DateTime::<Utc>::UNIX_EPOCH {
        // As runs: nothing was measured before 1970.
        errors.add("measured_at", "must not be before 1970-01-01");
    } else if input.measured_at > now + chrono::Duration::minutes(5) {
        errors.add("measured_at", "is in the future");
    }
    errors.into_result(NewSample {
        node: input.node,
        workload: input.workload,
        avg_power_w: input.avg_power_w,
        measured_at: input.measured_at,
    })
}

/// Store a batch of up to 10,000 power samples in one transaction.
///
/// Each sample is answered on its own: valid new samples are stored (and
/// committed before the answer); the same `(node, workload, measured_at)`
/// with the same power is a duplicate; with another power, or for a node not
/// in the registry, or breaking a rule, the sample is rejected and not stored.
#[utoipa::path(post, path = "/v1/nodes/samples", tag = "nodes",
    request_body = SampleBatch,
    security(("bearer" = ["ingest"])),
    responses(
        (status = 200, description = "Per-item results; valid samples are committed", body = SampleResult),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsIngest),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Empty or oversized batch", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn post_samples(
    _: Authorized<auth::Ingest>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(batch): Json<SampleBatch>,
) -> ApiResult<axum::Json<SampleResult>> {
    let count = batch.samples.len();
    if count == 0 || count > MAX_SAMPLES {
        return Err(ApiError::invalid(
            "samples",
            format!("must hold 1 to {MAX_SAMPLES} samples (got {count})"),
        ));
    }
    let now = Utc::now();
    let checked: Vec<Result<NewSample, Vec<FieldError>>> = batch
        .samples
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let prefix = format!("samples[{i}]");
            item.read::<SampleInput>(&prefix).and_then(|input| {
                validate_sample(input, now)
                    .map_err(|errors| errors.into_iter().map(|e| e.nested(&prefix)).collect())
            })
        })
        .collect();
    let valid: Vec<NewSample> = checked.iter().flatten().cloned().collect();
    let mut stored = nodes::add_samples(&state, &valid).await?.into_iter();
    let items: Vec<SampleItem> = checked
        .into_iter()
        .enumerate()
        .map(|(index, item)| match item {
            Err(errors) => rejected(index, Rejection::Invalid, None, errors),
            Ok(sample) => sample_item(index, &sample, stored.next()),
        })
        .collect();
    let tally = |status| items.iter().filter(|i| i.status == status).count();
    Ok(axum::Json(SampleResult {
        created: tally(ItemStatus::Created),
        duplicate: tally(ItemStatus::Duplicate),
        rejected: tally(ItemStatus::Rejected),
        items,
    }))
}

fn rejected(
    index: usize,
    rejection: Rejection,
    sample_id: Option<i64>,
    errors: Vec<FieldError>,
) -> SampleItem {
    SampleItem {
        index,
        status: ItemStatus::Rejected,
        sample_id,
        rejection: Some(rejection),
        errors: errors.into_iter().map(ProblemField::from).collect(),
    }
}

fn sample_item(index: usize, sample: &NewSample, outcome: Option<SampleOutcome>) -> SampleItem {
    let stored = |status, id| SampleItem {
        index,
        status,
        sample_id: Some(id),
        rejection: None,
        errors: Vec::new(),
    };
    let field = |name: &str| format!("samples[{index}].{name}");
    match outcome {
        Some(SampleOutcome::Created(id)) => stored(ItemStatus::Created, id),
        Some(SampleOutcome::Duplicate(id)) => stored(ItemStatus::Duplicate, id),
        Some(SampleOutcome::Conflict {
            sample_id,
            stored_w,
        }) => rejected(
            index,
            Rejection::Conflict,
            Some(sample_id),
            vec![FieldError::new(
                field("avg_power_w"),
                format!(
                    "this (node, workload, measured_at) is stored with {stored_w} W, not {} W",
                    sample.avg_power_w
                ),
            )],
        ),
        Some(SampleOutcome::AbovePeak { peak_w }) => rejected(
            index,
            Rejection::Invalid,
            None,
            vec![FieldError::new(
                field("avg_power_w"),
                format!(
                    "{} W is more than {PEAK_FACTOR} × node `{}`'s registered peak power \
                     ({peak_w} W): a unit or a node mixed up? (correct the node's \
                     peak_power_w if it is wrong)",
                    sample.avg_power_w, sample.node
                ),
            )],
        ),
        Some(SampleOutcome::UnknownNode) | None => rejected(
            index,
            Rejection::Invalid,
            None,
            vec![FieldError::new(
                field("node"),
                format!(
                    "no node `{}` in the registry (register it with PUT /v1/nodes/{})",
                    sample.node, sample.node
                ),
            )],
        ),
    }
}

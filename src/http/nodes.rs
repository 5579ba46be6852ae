//! `/v1/nodes`: the node registry, power samples under reference workloads,
//! and the classification of nodes by the power they draw (docs/model.md §3).

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadQuery, MalformedJson, NeedsAdmin, NeedsIngest, NeedsRead, NotJson, TooLarge, Unauthorized,
    Unavailable,
};
use super::error::{ApiError, ApiResult, Problem, ProblemField};
use super::extract::{Json, Path, Query, from_json_value};
use super::page;
use super::runs::{ItemStatus, Rejection};
use crate::model::classify::{self, NodePower};
use crate::store::{
    self, nodes::NewSample, nodes::NodeMetadata, nodes::NodeRow, nodes::SampleOutcome,
};
use crate::validate::{self, Errors, FieldError};

/// Most samples in one `POST /v1/nodes/samples`.
pub const MAX_SAMPLES: usize = 10_000;
/// Most classes of a classification.
pub const MAX_CLASSES: usize = 10;
/// Most histogram bins of a classification.
pub const MAX_BINS: usize = 200;
const HARDWARE_MODEL_MAX: usize = 128;

/// A compute node.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Node {
    #[schema(example = "cn0412")]
    pub name: String,
    pub partition: Option<String>,
    pub hardware_model: String,
    /// Draw when idle, W, if known.
    pub idle_power_w: Option<f64>,
    /// The vendor's peak power, W, if known (gives the n × peak bound).
    pub peak_power_w: Option<f64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<NodeRow> for Node {
    fn from(n: NodeRow) -> Self {
        Node {
            name: n.name,
            partition: n.partition,
            hardware_model: n.hardware_model,
            idle_power_w: n.idle_power_w,
            peak_power_w: n.peak_power_w,
            created_at: n.created_at,
            updated_at: n.updated_at,
        }
    }
}

/// A node's metadata. `PUT` replaces all of it: an omitted field takes its
/// default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeInput {
    /// The partition (Slurm partition or similar) the node belongs to.
    #[schema(max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")]
    pub partition: Option<String>,
    /// At most 128 characters; default empty.
    #[serde(default)]
    #[schema(max_length = 128)]
    pub hardware_model: String,
    #[schema(exclusive_minimum = 0.0)]
    pub idle_power_w: Option<f64>,
    #[schema(exclusive_minimum = 0.0)]
    pub peak_power_w: Option<f64>,
}

fn check_node_name(name: &str) -> Result<(), ApiError> {
    validate::node_name(name).map_err(|reason| ApiError::bad_request("node", reason))
}

/// Register a node or replace its metadata.
///
/// The names `samples` and `classification` are taken by other resources.
#[utoipa::path(put, path = "/v1/nodes/{node}", tag = "nodes",
    params(("node" = String, Path, description = "Node (host) name",
             min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$")),
    request_body = NodeInput,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Registered", body = Node),
        (status = 200, description = "Metadata replaced", body = Node),
        (status = 400, description = "Malformed JSON or node name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid metadata", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn put_node(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(input): Json<NodeInput>,
) -> ApiResult<(StatusCode, axum::Json<Node>)> {
    check_node_name(&name)?;
    let mut errors = Errors::default();
    if let Some(partition) = &input.partition {
        errors.check(
            "partition",
            validate::identifier(partition, validate::TAG_MAX),
        );
    }
    errors.check_text("hardware_model", &input.hardware_model, HARDWARE_MODEL_MAX);
    for (field, value) in [
        ("idle_power_w", input.idle_power_w),
        ("peak_power_w", input.peak_power_w),
    ] {
        if let Some(watts) = value {
            errors.check(field, validate::node_power(watts));
        }
    }
    if let (Some(idle), Some(peak)) = (input.idle_power_w, input.peak_power_w)
        && idle > peak
    {
        errors.add(
            "idle_power_w",
            format!("must not exceed peak_power_w ({idle} W > {peak} W)"),
        );
    }
    let metadata = errors
        .into_result(NodeMetadata {
            partition: input.partition,
            hardware_model: input.hardware_model,
            idle_power_w: input.idle_power_w,
            peak_power_w: input.peak_power_w,
        })
        .map_err(ApiError::Invalid)?;
    let (row, created) = store::nodes::upsert(&state.pool, &name, &metadata).await?;
    state.caches.forget_nodes();
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(row.into())))
}

/// One registered node.
#[utoipa::path(get, path = "/v1/nodes/{node}", tag = "nodes",
    params(("node" = String, Path, description = "Node (host) name",
             min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$")),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The node", body = Node),
        (status = 400, description = "Bad node name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "Unknown node", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_node(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<Node>> {
    check_node_name(&name)?;
    let row = store::nodes::get(&state.pool, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no node `{name}` in the registry")))?;
    Ok(axum::Json(row.into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NodeListParams {
    /// Only nodes of this partition.
    pub partition: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct NodePage {
    pub items: Vec<Node>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List registered nodes in name order.
#[utoipa::path(get, path = "/v1/nodes", tag = "nodes",
    params(NodeListParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "One page of nodes", body = NodePage),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_nodes(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<NodeListParams>,
) -> ApiResult<axum::Json<NodePage>> {
    let limit = page::limit(params.limit)?;
    if let Some(partition) = &params.partition {
        validate::identifier(partition, validate::TAG_MAX)
            .map_err(|reason| ApiError::bad_request("partition", reason))?;
    }
    let after = page::cursor(params.cursor.as_deref())
        .map(|c| page::decode("nodes", c))
        .transpose()?;
    if let Some(name) = &after {
        validate::node_name(name)
            .map_err(|_| ApiError::bad_request("cursor", "is not a cursor of this listing"))?;
    }
    let mut rows = store::nodes::list(
        &state.pool,
        params.partition.as_deref(),
        after.as_deref(),
        limit + 1,
    )
    .await?;
    let next_cursor = page::next_cursor(&mut rows, limit, |n| page::encode("nodes", &n.name));
    Ok(axum::Json(NodePage {
        items: rows.into_iter().map(Node::from).collect(),
        next_cursor,
    }))
}

/// One node's average power while it ran a reference workload.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleInput {
    /// A registered node.
    pub node: String,
    /// The reference workload (e.g. a stress benchmark), named like an application tag.
    #[schema(example = "hpl-stress")]
    pub workload: String,
    #[schema(exclusive_minimum = 0.0)]
    pub avg_power_w: f64,
    /// When the measurement was taken (RFC 3339). With node and workload, it
    /// identifies the sample.
    pub measured_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleBatch {
    /// 1 to 10,000 samples.
    #[schema(value_type = Vec<SampleInput>, min_items = 1, max_items = 10_000)]
    pub samples: Vec<serde_json::Value>,
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
    errors.check("measured_at", validate::time_in_range(input.measured_at));
    if input.measured_at > now + chrono::Duration::minutes(5) {
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
        .map(|(i, value)| {
            let prefix = format!("samples[{i}]");
            from_json_value::<SampleInput>(value, &prefix).and_then(|input| {
                validate_sample(input, now)
                    .map_err(|errors| errors.into_iter().map(|e| e.nested(&prefix)).collect())
            })
        })
        .collect();
    let valid: Vec<NewSample> = checked.iter().flatten().cloned().collect();
    let mut stored = store::nodes::insert_samples(&state.pool, &valid)
        .await?
        .into_iter();
    state.caches.forget_nodes();
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

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ClassificationParams {
    /// The reference workload; default: the service's (`--reference-workload`).
    pub workload: Option<String>,
    /// Only nodes of this partition.
    pub partition: Option<String>,
    /// Number of classes, 1 to 10 (default 3: efficient, typical, hungry).
    #[param(minimum = 1, maximum = 10)]
    pub classes: Option<usize>,
    /// Histogram bins, 1 to 200 (default 20).
    #[param(minimum = 1, maximum = 200)]
    pub bins: Option<usize>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PowerClass {
    /// `efficient`, `typical`, `hungry` for three classes (`efficient`,
    /// `hungry` for two; `class_1` … `class_k` otherwise), by ascending power.
    pub name: String,
    pub lower_w: f64,
    pub upper_w: f64,
    /// Mean power of the class's nodes.
    pub centre_w: f64,
    pub nodes: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ClassifiedNode {
    pub node: String,
    /// P_u: the mean of the node's samples within the window before its latest.
    pub power_w: f64,
    pub samples: i64,
    pub last_measured_at: DateTime<Utc>,
    /// The class's name.
    pub class: String,
    /// Modified z-score 0.6745·(P_u − median)/MAD.
    pub robust_z: f64,
    /// |robust_z| > 3.5.
    pub outlier: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistogramBin {
    pub lower_w: f64,
    pub upper_w: f64,
    pub nodes: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Classification {
    pub workload: String,
    pub partition: Option<String>,
    /// How far back from each node's latest sample its samples count.
    pub window_days: f64,
    /// Power of the best node.
    pub p_min_w: f64,
    /// Power of the worst node.
    pub p_max_w: f64,
    pub mean_w: f64,
    pub median_w: f64,
    pub std_dev_w: f64,
    /// Median absolute deviation.
    pub mad_w: f64,
    /// (P_max − P_min) / P_min, per cent.
    pub spread_pct: f64,
    pub classes: Vec<PowerClass>,
    /// By ascending power.
    pub nodes: Vec<ClassifiedNode>,
    /// Equal-width bins from P_min to P_max.
    pub histogram: Vec<HistogramBin>,
}

/// Classify nodes by the power they draw under a reference workload.
///
/// Each node's P_u is the mean of its samples within the window before its
/// latest sample. Classes come from optimal one-dimensional k-means (natural
/// breaks), not from fixed thresholds; outliers are flagged by robust z-score.
#[utoipa::path(get, path = "/v1/nodes/classification", tag = "nodes",
    params(ClassificationParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The classification", body = Classification),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No samples of this workload (in this partition)", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_classification(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<ClassificationParams>,
) -> ApiResult<axum::Json<Classification>> {
    let mut problems = Vec::new();
    let workload = crate::service::nodes::workload_or_default(
        &state,
        params.workload,
        "workload".into(),
        &mut problems,
    );
    if let Some(Err(reason)) = params
        .partition
        .as_deref()
        .map(|p| validate::identifier(p, validate::TAG_MAX))
    {
        problems.push(FieldError::new("partition", reason));
    }
    let classes = params.classes.unwrap_or(classify::DEFAULT_CLASSES);
    if !(1..=MAX_CLASSES).contains(&classes) {
        problems.push(FieldError::new(
            "classes",
            format!("must be between 1 and {MAX_CLASSES} (got {classes})"),
        ));
    }
    let bins = params.bins.unwrap_or(20);
    if !(1..=MAX_BINS).contains(&bins) {
        problems.push(FieldError::new(
            "bins",
            format!("must be between 1 and {MAX_BINS} (got {bins})"),
        ));
    }
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let window = state.settings.node_window;
    let rows = store::nodes::powers(
        &state.pool,
        &workload,
        params.partition.as_deref(),
        window.as_secs_f64(),
    )
    .await?;
    let inputs: Vec<NodePower> = rows
        .iter()
        .map(|r| NodePower {
            node: r.name.clone(),
            power_w: r.power_w,
        })
        .collect();
    let scope = match &params.partition {
        Some(p) => format!(" in partition `{p}`"),
        None => String::new(),
    };
    let c = classify::classify(&inputs, classes, bins).ok_or_else(|| {
        ApiError::NotFound(format!("no power samples of workload `{workload}`{scope}"))
    })?;
    let by_name: std::collections::HashMap<&str, &store::nodes::NodePowerRow> =
        rows.iter().map(|r| (r.name.as_str(), r)).collect();
    let nodes = c
        .nodes
        .iter()
        .map(|n| {
            let row = by_name.get(n.node.as_str());
            ClassifiedNode {
                node: n.node.clone(),
                power_w: n.power_w,
                samples: row.map_or(0, |r| r.samples),
                last_measured_at: row.map_or_else(Utc::now, |r| r.last_measured_at),
                class: c.classes[n.class].name.clone(),
                robust_z: n.robust_z,
                outlier: n.outlier,
            }
        })
        .collect();
    Ok(axum::Json(Classification {
        workload,
        partition: params.partition,
        window_days: window.as_secs_f64() / 86_400.0,
        p_min_w: c.p_min_w,
        p_max_w: c.p_max_w,
        mean_w: c.mean_w,
        median_w: c.median_w,
        std_dev_w: c.std_dev_w,
        mad_w: c.mad_w,
        spread_pct: c.spread_pct,
        classes: c
            .classes
            .iter()
            .map(|k| PowerClass {
                name: k.name.clone(),
                lower_w: k.lower_w,
                upper_w: k.upper_w,
                centre_w: k.centre_w,
                nodes: k.nodes,
            })
            .collect(),
        nodes,
        histogram: c
            .histogram
            .iter()
            .map(|b| HistogramBin {
                lower_w: b.lower_w,
                upper_w: b.upper_w,
                nodes: b.nodes,
            })
            .collect(),
    }))
}

//! `/v1/nodes`: the node registry (this file), power samples under reference
//! workloads (`samples.rs`), and the classification of nodes by the power
//! they draw (`classification.rs`; docs/model.md §3).

mod classification;
mod samples;

pub use classification::*;
pub use samples::*;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadQuery, NeedsAdmin, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, NoQuery, Path, Query};
use super::page;
use crate::service::nodes::{self, NodeMetadata, NodeRow};
use crate::validate::{self, Errors, NodeName};

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
    /// W; at most 100,000 per node.
    #[schema(minimum = 1e-100, maximum = 100_000.0)]
    pub idle_power_w: Option<f64>,
    /// W; at most 100,000 per node.
    #[schema(minimum = 1e-100, maximum = 100_000.0)]
    pub peak_power_w: Option<f64>,
}

fn check_node_name(name: &str) -> Result<NodeName, ApiError> {
    NodeName::parse(name).map_err(|reason| ApiError::bad_request("node", reason))
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
    _: NoQuery,
    Json(input): Json<NodeInput>,
) -> ApiResult<(StatusCode, axum::Json<Node>)> {
    let name = check_node_name(&name)?;
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
    let (row, created) = nodes::put(&state, &name, &metadata).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(row.into())))
}

/// Remove a node (decommissioned) and its power samples: it no longer
/// counts in classifications, bounds or idle draw. Runs and jobs that named
/// it keep its name, which then counts as a node without samples.
#[utoipa::path(delete, path = "/v1/nodes/{node}", tag = "nodes",
    params(("node" = String, Path, description = "Node (host) name",
             min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Bad node name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 404, description = "Unknown node", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn delete_node(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    _: NoQuery,
) -> ApiResult<StatusCode> {
    let name = check_node_name(&name)?;
    if nodes::delete(&state, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "no node `{name}` in the registry"
        )))
    }
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
    _: NoQuery,
) -> ApiResult<axum::Json<Node>> {
    let name = check_node_name(&name)?;
    let row = nodes::get(&state, &name)
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
    let mut rows = nodes::list(
        &state,
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

//! `POST /v1/runs` and `GET /v1/runs/{id}` (this file), `POST /v1/runs/batch`
//! (`batch.rs`).

mod batch;

pub use batch::*;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    MalformedJson, NeedsIngest, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, JsonItem, NoQuery, Path, Query};
use crate::ingest::{self, NodeListDraft, NodeListSchema, RunDraft};
use crate::service::runs;
use crate::service::runs::RunRow;

/// A finished run. Give at least two of `energy_j`, `avg_power_w` and
/// `duration_s`; the third is derived (EtS = APC × TtS). If all three are
/// given they must agree within 5 %.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInput {
    /// Application (energy) tag: 1–128 of `A-Z a-z 0-9 . _ : @ + = -`, starting
    /// with a letter or digit. Unknown tags are created (scaling mode `unknown`).
    #[schema(
        example = "lammps-lj-2.4GHz",
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub app: String,
    /// The system the run comes from (e.g. the cluster name); with `job_id` it
    /// identifies the run. 1–64 characters, same set as `app`.
    #[schema(
        example = "clusterA",
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub source: String,
    /// The job's id on `source`. 1–128 characters, same set as `app`.
    #[schema(
        example = "884213",
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub job_id: String,
    /// Node count, 1 to 1,000,000.
    #[schema(example = 16, minimum = 1, maximum = 1_000_000)]
    pub nodes: i64,
    /// The nodes used: exactly `nodes` distinct names, as an array or in
    /// Slurm hostlist syntax (`"cn[01-04,07]"`).
    #[schema(value_type = Option<NodeListSchema>)]
    pub node_list: Option<NodeListDraft>,
    /// Energy-to-solution, joules (> 0).
    #[schema(example = 5_184_000.0, minimum = 1e-100, maximum = 1e100)]
    pub energy_j: Option<f64>,
    /// Average power, watts (> 0; at most 100 kW per node).
    #[schema(example = 3600.0, minimum = 1e-100, maximum = 1e100)]
    pub avg_power_w: Option<f64>,
    /// Time-to-solution, seconds (> 0). Must match `ended_at − started_at`
    /// within 5 % (or 1 s) when both times are given.
    #[schema(example = 1440.0, minimum = 1e-100, maximum = 315_576_000.0)]
    pub duration_s: Option<f64>,
    /// RFC 3339; not before 1970, not more than a day in the future.
    pub started_at: Option<DateTime<Utc>>,
    /// RFC 3339; after `started_at`. Default, given `started_at`:
    /// `started_at` + `duration_s`.
    pub ended_at: Option<DateTime<Utc>>,
    /// Measurement quality weight, from 1e-100 to 1; default 1.
    #[schema(minimum = 1e-100, maximum = 1.0)]
    pub quality: Option<f64>,
    /// Accounting project the run is charged to.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub account: Option<String>,
}

impl From<RunInput> for RunDraft {
    fn from(r: RunInput) -> Self {
        RunDraft {
            app: r.app,
            source: r.source,
            job_id: r.job_id,
            nodes: r.nodes,
            node_list: r.node_list,
            energy_j: r.energy_j,
            avg_power_w: r.avg_power_w,
            duration_s: r.duration_s,
            started_at: r.started_at,
            ended_at: r.ended_at,
            quality: r.quality,
            account: r.account,
        }
    }
}

/// A stored run.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Run {
    pub id: i64,
    pub app: String,
    pub source: String,
    pub job_id: String,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub duration_s: f64,
    /// Which quantity was derived from the other two, if any.
    #[schema(example = "duration_s")]
    pub derived: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub quality: f64,
    pub account: Option<String>,
    pub ingested_at: DateTime<Utc>,
    /// For a run with a node list, once nodes are classified (one run only,
    /// `GET /v1/runs/{id}`): its APC had all its nodes been the best or the
    /// worst (docs/model.md §3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apc_bounds: Option<RunApcBounds>,
}

/// APC_min(J) = APC(J) − Σ (P_u − P_min) and APC_max(J) = APC(J) + Σ (P_max − P_u).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunApcBounds {
    pub workload: String,
    /// The partition whose classification bounds the run: the one the
    /// registry has all its nodes in; `null` (the whole registry) when they
    /// are in several or none.
    pub partition: Option<String>,
    pub best_w: f64,
    pub worst_w: f64,
    /// Nodes of the run without samples of the workload, counted at the mean.
    pub unclassified: Vec<String>,
}

impl From<RunRow> for Run {
    fn from(r: RunRow) -> Self {
        Run {
            derived: r.derived().map(|d| d.as_str().to_owned()),
            id: r.id,
            app: r.app,
            source: r.source,
            job_id: r.job_id,
            nodes: r.nodes,
            node_list: r.node_list,
            energy_j: r.energy_j,
            avg_power_w: r.avg_power_w,
            duration_s: r.duration_s,
            started_at: r.started_at,
            ended_at: r.ended_at,
            quality: r.quality,
            account: r.account,
            ingested_at: r.ingested_at,
            apc_bounds: None,
        }
    }
}

pub use crate::service::runs::RunStatus;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunAccepted {
    pub status: RunStatus,
    pub run: Run,
}

/// Store one run.
///
/// Idempotent: sending the same `(source, job_id)` again with the same values
/// answers 200 `duplicate` and stores nothing; with different values, 409.
/// The answer comes after the run is committed.
#[utoipa::path(post, path = "/v1/runs", tag = "runs",
    request_body = RunInput,
    security(("bearer" = ["ingest"])),
    responses(
        (status = 201, description = "Stored", body = RunAccepted,
         headers(("location" = String, description = "URL of the stored run"))),
        (status = 200, description = "Already stored with the same values", body = RunAccepted),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsIngest),
        (status = 409, description = "Same (source, job_id) stored with other values (`errors` lists them); or the run ended at or before the start of the attempt of its job running now, an earlier attempt's run, not stored (`errors` names `ended_at`)", body = Problem, content_type = "application/problem+json"),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid run; `errors` names each field", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn create_run(
    _: Authorized<auth::Ingest>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<JsonItem>,
) -> ApiResult<Response> {
    let input = read_run(input, "").map_err(ApiError::Invalid)?;
    let run = ingest::validate(input.into(), Utc::now()).map_err(ApiError::Invalid)?;
    let (status, id) = runs::store_one(&state, run, "this (source, job_id)").await?;
    let row = runs::get(&state, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("run {id} vanished after it was stored"))?;
    let body = axum::Json(RunAccepted {
        status,
        run: row.into(),
    });
    Ok(match status {
        RunStatus::Created => (
            StatusCode::CREATED,
            [(header::LOCATION, format!("/v1/runs/{id}"))],
            body,
        )
            .into_response(),
        RunStatus::Duplicate => (StatusCode::OK, body).into_response(),
    })
}

/// The fields a run cannot do without (`RunInput`'s).
const REQUIRED: [&str; 4] = ["app", "source", "job_id", "nodes"];

/// Read one run from its JSON, naming fields under `prefix` (none: top
/// level). Every required field that is missing is named at once; otherwise
/// the first field that cannot be read is.
pub(super) fn read_run(
    item: JsonItem,
    prefix: &str,
) -> Result<RunInput, Vec<crate::validate::FieldError>> {
    let value = item.checked(prefix)?;
    if let Some(object) = value.as_object() {
        let missing: Vec<_> = REQUIRED
            .iter()
            .filter(|name| !object.contains_key(**name))
            .map(|name| {
                crate::validate::FieldError::new(*name, format!("missing field `{name}`"))
                    .nested(prefix)
            })
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
    }
    super::extract::from_json_value(value, prefix)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunParams {
    /// Reference workload of the classification behind `apc_bounds`;
    /// default the service's (`--reference-workload`).
    pub workload: Option<String>,
}

/// One stored run, with its APC bounds when it has a node list and the nodes
/// are classified.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = i64, Path, description = "Run id"), RunParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The run", body = Run),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No such run", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Bad path or query parameter", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_run(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(id): Path<i64>,
    Query(params): Query<RunParams>,
) -> ApiResult<axum::Json<Run>> {
    let mut problems = Vec::new();
    let workload =
        crate::service::nodes::workload_or_default(&state, params.workload, "", &mut problems);
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let row = runs::get(&state, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no run with id {id}")))?;
    let mut run = Run::from(row);
    let partition = match &run.node_list {
        Some(list) => crate::service::power::registry(&state)
            .await?
            .partition_of_all(list)
            .map(str::to_owned),
        None => None,
    };
    if let Some(list) = &run.node_list
        && let Some(powers) =
            crate::service::nodes::node_powers(&state, &workload, partition.as_deref()).await?
    {
        let node_powers = powers.of(list);
        let b = crate::model::bounds::job_bounds(run.avg_power_w, &node_powers, &powers.scale);
        run.apc_bounds = Some(RunApcBounds {
            workload,
            partition,
            best_w: b.best,
            worst_w: b.worst,
            unclassified: list
                .iter()
                .zip(&node_powers)
                .filter(|(_, p)| p.is_none())
                .map(|(n, _)| n.clone())
                .collect(),
        });
    }
    Ok(axum::Json(run))
}

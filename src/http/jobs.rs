//! `/v1/jobs`: jobs in flight (docs/model.md §5). A scheduler reports a job when
//! it starts (and gets its prediction), when it finishes (the job becomes a
//! run, so the predictor adapts), or when it is cancelled.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadQuery, NeedsRead, NeedsSchedule, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiError, ApiResult, PROBLEM_JSON, Problem};
use super::extract::{Json, NoQuery, Path, Query};
use super::page;
use super::runs::Run;
use crate::service::admission::Admission;
use crate::service::jobs::{self, Finish, JobCursor, JobFilter, Start};
pub use crate::service::jobs::{
    DEFAULT_NODE_POWER_W, FinishInput, Job, JobInput, Jobs, STALE_FACTOR,
};

/// Report a job's start: it is stored as running, with its prediction and
/// the power it reserves.
///
/// The admission decision (`POST /v1/admission`) is made again under a lock
/// and the job stored in the same transaction, so concurrent starts cannot
/// together pass a cap or budget only one of them fits in. A job that does
/// not fit is refused (409, nothing stored) unless `force` is set.
///
/// Idempotent: reporting a running `(source, job_id)` again answers 200 with
/// the job as stored.
///
/// Race-free with the end: a job stored as a run is never stored as running,
/// and a start that arrives after the job's end was reported (a prolog that
/// gave up waiting, overtaken by the epilog) is refused when its `started_at`
/// is at or before that end. Send `started_at`: without it the start is
/// taken as now, after any end.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs",
    request_body = JobInput,
    security(("bearer" = ["schedule"])),
    responses(
        (status = 201, description = "Stored as running", body = Job),
        (status = 200, description = "Already running", body = Job),
        (status = 400, description = "Malformed JSON or node list", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsSchedule),
        (status = 409, description = "This (source, job_id) is already a finished run or its end was reported, while it was not running, at or after this start's `started_at` (`errors` names `job_id`); or the same start (the same `started_at`) is running with other values (`errors` names each field that differs, with both values); or the job does not fit under a cap or its budget, and was not stored (`admission` says why)", body = Refusal, content_type = "application/problem+json"),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid job, or unknown nodes", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn start_job(
    _: Authorized<auth::Schedule>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<JobInput>,
) -> ApiResult<Response> {
    let job_id = input.job_id.clone();
    match jobs::start(&state, input).await? {
        Start::Running { job, created } => {
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok((status, axum::Json(job)).into_response())
        }
        Start::Refused(admission) => Ok(refused(&job_id, *admission)),
    }
}

/// A job start refused: 409. `admission` is the decision when the job did
/// not fit under a cap or its budget; it is absent when the job is already
/// a finished run (then `errors` names `job_id`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Refusal {
    #[serde(flatten)]
    pub problem: Problem,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
}

fn refused(job_id: &str, admission: Admission) -> Response {
    let mut why = Vec::new();
    if !admission.power.fits {
        why.push(format!(
            "it would exceed power cap {} by {:.0} W",
            admission.power.cap_name.as_deref().unwrap_or_default(),
            -admission.power.headroom_after_w.unwrap_or_default()
        ));
    }
    if !admission.energy.fits {
        why.push(match admission.energy.remaining_after_j {
            Some(after) => format!(
                "it would overdraw account {}'s energy budget by {:.3e} J",
                admission.energy.account.as_deref().unwrap_or_default(),
                -after
            ),
            None => format!(
                "its energy cannot be bounded against account {}'s budget",
                admission.energy.account.as_deref().unwrap_or_default()
            ),
        });
    }
    let problem = ApiError::Conflict {
        detail: format!("job {job_id} was not stored: {}", why.join("; ")),
        errors: vec![],
    }
    .into_problem();
    let mut response = (
        StatusCode::CONFLICT,
        axum::Json(Refusal {
            problem,
            admission: Some(admission),
        }),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobListParams {
    /// Only the jobs of this system.
    pub source: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// The listing's cursors continue after a job's start and row id.
const JOB_CURSOR: &str = "jobs";

fn encode_cursor(after: JobCursor) -> String {
    page::encode(
        JOB_CURSOR,
        &format!("{}:{}", after.started_at.timestamp_micros(), after.id),
    )
}

fn decode_cursor(cursor: &str) -> Result<JobCursor, ApiError> {
    let key = page::decode(JOB_CURSOR, cursor)?;
    key.split_once(':')
        .and_then(|(micros, id)| {
            Some(JobCursor {
                started_at: chrono::DateTime::from_timestamp_micros(micros.parse().ok()?)?,
                id: id.parse().ok()?,
            })
        })
        .ok_or_else(|| ApiError::bad_request("cursor", "is not a cursor of this listing"))
}

/// List jobs in flight, oldest first, in pages; the totals count every job
/// the filters match.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs",
    params(JobListParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "One page of running jobs", body = Jobs),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_jobs(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<JobListParams>,
) -> ApiResult<axum::Json<Jobs>> {
    let limit = usize::try_from(page::limit(params.limit)?).unwrap_or(usize::MAX);
    let after = page::cursor(params.cursor.as_deref())
        .map(decode_cursor)
        .transpose()?;
    let filter = JobFilter {
        source: params.source.as_deref(),
        partition: params.partition.as_deref(),
        account: params.account.as_deref(),
    };
    let (mut jobs, next) = jobs::list(&state, filter, after, Some(limit)).await?;
    jobs.next_cursor = next.map(encode_cursor);
    Ok(axum::Json(jobs))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Finished {
    pub status: FinishStatus,
    pub run: Run,
}

/// What a job's end came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinishStatus {
    /// The job became a run now.
    Finished,
    /// It had become one before; nothing changed.
    AlreadyFinished,
}

/// Report a job's end: it becomes a run in the history (so the predictor
/// adapts) and stops counting in headroom.
///
/// Idempotent: reporting it again answers 200 `already_finished` with the run.
#[utoipa::path(post, path = "/v1/jobs/{source}/{job_id}/finish", tag = "jobs",
    params(("source" = String, Path, description = "The job's system",
               min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ("job_id" = String, Path, description = "The job's id there",
               min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    request_body = FinishInput,
    security(("bearer" = ["schedule"])),
    responses(
        (status = 200, description = "The run the job became", body = Finished),
        (status = 400, description = "Malformed JSON, or a source or job id that is not one", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsSchedule),
        (status = 404, description = "No such job, running or finished; the end is remembered, so that a start of it reported later is refused", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already finished with other values: `errors` names each field sent that differs from the stored run; or a later attempt of the job (a requeue) started since, at or after this end (`errors` names `ended_at`)", body = Problem, content_type = "application/problem+json"),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid measurements", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn finish_job(
    _: Authorized<auth::Schedule>,
    State(state): State<AppState>,
    Path((source, job_id)): Path<(String, String)>,
    _: NoQuery,
    Json(input): Json<FinishInput>,
) -> ApiResult<axum::Json<Finished>> {
    let (source, job_id) = jobs::job_key(&source, &job_id).map_err(ApiError::BadRequest)?;
    let (status, row) = match jobs::finish(&state, &source, &job_id, input).await? {
        Finish::Finished(row) => (FinishStatus::Finished, row),
        Finish::AlreadyFinished(row) => (FinishStatus::AlreadyFinished, row),
    };
    Ok(axum::Json(Finished {
        status,
        run: row.into(),
    }))
}

/// One running job, as listed: its prediction, reservation and whether it
/// is stale or expired.
#[utoipa::path(get, path = "/v1/jobs/{source}/{job_id}", tag = "jobs",
    params(("source" = String, Path, description = "The job's system",
               min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ("job_id" = String, Path, description = "The job's id there",
               min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The running job", body = Job),
        (status = 400, description = "A source or job id that is not one, or a query parameter (none is taken)", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No such running job; `detail` names the run it became if it finished", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_job(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path((source, job_id)): Path<(String, String)>,
    _: NoQuery,
) -> ApiResult<axum::Json<Job>> {
    let (source, job_id) = jobs::job_key(&source, &job_id).map_err(ApiError::BadRequest)?;
    Ok(axum::Json(jobs::get(&state, &source, &job_id).await?))
}

/// Forget a cancelled or failed job: it leaves no history.
#[utoipa::path(delete, path = "/v1/jobs/{source}/{job_id}", tag = "jobs",
    params(("source" = String, Path, description = "The job's system",
               min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ("job_id" = String, Path, description = "The job's id there",
               min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    security(("bearer" = ["schedule"])),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "A source or job id that is not one", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsSchedule),
        (status = 404, description = "No such running job; the end is remembered, so that a start of it reported later is refused", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn cancel_job(
    _: Authorized<auth::Schedule>,
    State(state): State<AppState>,
    Path((source, job_id)): Path<(String, String)>,
    _: NoQuery,
) -> ApiResult<StatusCode> {
    let (source, job_id) = jobs::job_key(&source, &job_id).map_err(ApiError::BadRequest)?;
    jobs::cancel(&state, &source, &job_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

//! `POST /v1/jobs/unreserved`: jobs a scheduler ran without a power
//! reservation because the service could not be reached when they started
//! (`deploy/slurm`'s prolog failing open), reported once it answers again.
//! Each is counted once on `/metrics` (`jobs_run_unreserved_total`), so that
//! failing open is seen, not only logged on the controller.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    MalformedJson, NeedsSchedule, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, NoQuery};
use crate::service;
use crate::validate::{self, FieldError, JobId, Source};

/// At most this many jobs per report.
pub const MAX_UNRESERVED: usize = 10_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnreservedInput {
    /// The system the jobs ran on (as for jobs and runs).
    #[schema(
        example = "clusterA",
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub source: String,
    /// 1 to 10,000 jobs.
    pub jobs: Vec<UnreservedJob>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UnreservedJob {
    /// The job's id on `source` (as for jobs and runs).
    #[schema(
        example = "884213",
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub job_id: String,
    /// When the job started, unreserved.
    pub started_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UnreservedCount {
    /// Jobs counted now.
    pub counted: u64,
    /// Jobs reported before: not counted again.
    pub already_counted: u64,
}

/// Report jobs that ran without a reservation because the service could not
/// be reached when they started. Each (source, job_id) is counted once in
/// `jobs_run_unreserved_total` on `/metrics`; reporting it again changes
/// nothing.
#[utoipa::path(post, path = "/v1/jobs/unreserved", tag = "jobs",
    request_body = UnreservedInput,
    security(("bearer" = ["schedule"])),
    responses(
        (status = 200, description = "Counted", body = UnreservedCount),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsSchedule),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid source, job id or time, or no jobs or too many", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn report_unreserved(
    _: Authorized<auth::Schedule>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<UnreservedInput>,
) -> ApiResult<axum::Json<UnreservedCount>> {
    let mut problems = Vec::new();
    let source = validate::checked(&mut problems, "source", Source::parse(&input.source));
    if input.jobs.is_empty() || input.jobs.len() > MAX_UNRESERVED {
        problems.push(FieldError::new(
            "jobs",
            format!(
                "must hold 1 to {MAX_UNRESERVED} jobs (got {})",
                input.jobs.len()
            ),
        ));
    }
    let mut jobs: Vec<(JobId, DateTime<Utc>)> = Vec::with_capacity(input.jobs.len());
    let now = chrono::Utc::now();
    for (i, job) in input.jobs.iter().enumerate() {
        let field = format!("jobs[{i}].job_id");
        let started_at = validate::as_stored(job.started_at);
        if let Some(id) = validate::checked(&mut problems, &field, JobId::parse(&job.job_id)) {
            jobs.push((id, started_at));
        }
        if let Err(reason) = crate::ingest::check_time(started_at, now) {
            problems.push(FieldError::new(format!("jobs[{i}].started_at"), reason));
        }
    }
    let Some(source) = source.filter(|_| problems.is_empty()) else {
        return Err(ApiError::Invalid(problems));
    };
    let counted = service::jobs::record_unreserved(&state, &source, &jobs).await?;
    metrics::counter!("jobs_run_unreserved_total").increment(counted);
    if counted > 0 {
        tracing::warn!(
            source = %source,
            counted,
            "jobs ran without a power reservation while the service was unreachable"
        );
    }
    Ok(axum::Json(UnreservedCount {
        counted,
        already_counted: jobs.len() as u64 - counted,
    }))
}

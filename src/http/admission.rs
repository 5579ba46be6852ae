//! `POST /v1/admission`: may a queued job start now? (docs/model.md §5)
//!
//! Two checks, each with the numbers behind it:
//! - **power**: under the cap in force for the job's partition and for the
//!   whole system, the draw after the job starts (its reserved power replaces
//!   the idle power of the nodes it takes) must stay within the cap;
//! - **energy**: the job's predicted EtS must fit in what its account's
//!   budget has left (limit − consumed − committed by running jobs).
//!
//! The answer is advice: it reserves nothing. A job start (`POST /v1/jobs`)
//! makes the same decision again under a lock and stores the job in the same
//! transaction, so that two jobs cannot both take headroom only one fits in.

use axum::extract::State;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    MalformedJson, NeedsSchedule, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiResult, Problem};
use super::extract::{Json, NoQuery};
use crate::service::admission;
pub use crate::service::admission::{
    Admission, AdmissionInput, AdmissionPrediction, EnergyCheck, PowerCheck, ScopeCheck,
};

/// Whether a job may start now: under the power caps in force and within
/// its account's energy budget, with the numbers behind each answer.
///
/// Advice only: nothing is reserved. `POST /v1/jobs` re-checks and reserves
/// atomically.
#[utoipa::path(post, path = "/v1/admission", tag = "jobs",
    request_body = AdmissionInput,
    security(("bearer" = ["schedule"])),
    responses(
        (status = 200, description = "The decision and its figures", body = Admission),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsSchedule),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid field, bad node list or unknown nodes", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn admission(
    _: Authorized<auth::Schedule>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<AdmissionInput>,
) -> ApiResult<axum::Json<Admission>> {
    Ok(axum::Json(admission::advise(&state, input).await?))
}

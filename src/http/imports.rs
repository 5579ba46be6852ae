//! `POST /v1/import/sacct`: Slurm accounting records as runs (docs/model.md §7).

use axum::extract::State;
use chrono::{FixedOffset, Offset, Utc};
use clap::ValueEnum;
use serde::Deserialize;
use utoipa::IntoParams;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{NeedsIngest, Unauthorized, Unavailable};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{BodyBytes, Query};
use crate::import::Summary;
use crate::sacct::{AppFrom, Options};
use crate::service::imports;
use crate::validate::FieldError;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SacctParams {
    /// The field the application tag comes from: `jobname` (default),
    /// `comment` or `wckey`.
    pub app_from: Option<String>,
    /// The system's name; default the `Cluster` field, else `slurm`.
    pub source: Option<String>,
    /// Job states imported, comma-separated; default `COMPLETED`.
    pub states: Option<String>,
    /// Offset of sacct's local `Start`/`End` times from UTC, e.g. `+01:00`;
    /// default `+00:00` (run sacct with `TZ=UTC`).
    pub utc_offset: Option<String>,
}

impl SacctParams {
    /// The import options, or every parameter at fault.
    pub fn options(self) -> Result<Options, Vec<FieldError>> {
        let mut problems = Vec::new();
        let app_from = match self.app_from {
            None => AppFrom::default(),
            Some(field) => AppFrom::from_str(&field, true).unwrap_or_else(|_| {
                problems.push(FieldError::new(
                    "app_from",
                    format!("must be jobname, comment or wckey (got {field:?})"),
                ));
                AppFrom::default()
            }),
        };
        let utc_offset = match self.utc_offset {
            None => Utc.fix(),
            Some(offset) => offset.parse::<FixedOffset>().unwrap_or_else(|_| {
                problems.push(FieldError::new(
                    "utc_offset",
                    format!("must be an offset such as +01:00 or -05:00 (got {offset:?})"),
                ));
                Utc.fix()
            }),
        };
        let states = self.states.as_deref().unwrap_or("COMPLETED").split(',');
        match Options::checked(app_from, states, self.source, utc_offset) {
            Ok(options) if problems.is_empty() => Ok(options),
            Ok(_) => Err(problems),
            Err(more) => {
                problems.extend(more);
                Err(problems)
            }
        }
    }
}

/// Import `sacct --parsable2` output (the text body, header line first) as
/// runs.
///
/// Only jobs in the chosen states (default COMPLETED) become runs; job steps
/// are counted and folded (see the operations guide); every other line that
/// gives no run is listed with its line number and reason. Runs are
/// idempotent on (source, job id): importing the same records again adds
/// nothing. Every run is committed before the answer.
#[utoipa::path(post, path = "/v1/import/sacct", tag = "runs",
    params(SacctParams),
    request_body(content = String, content_type = "text/plain",
                 description = "`sacct --parsable2` output with its header line"),
    security(("bearer" = ["ingest"])),
    responses(
        (status = 200, description = "What was imported and what was skipped", body = Summary),
        (status = 400, description = "Bad query parameter, or a body that is not UTF-8", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsIngest),
        (status = 413, description = "Body too large, or node lists naming more than 200,000 nodes in all: nothing is stored (split the import, or import large files with `joulecast import sacct`)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No usable header line", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn import_sacct(
    _: Authorized<auth::Ingest>,
    State(state): State<AppState>,
    Query(params): Query<SacctParams>,
    BodyBytes(body): BodyBytes,
) -> ApiResult<axum::Json<Summary>> {
    let options = params.options().map_err(ApiError::BadRequest)?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::bad_request("body", format!("is not UTF-8 text ({e})")))?;
    Ok(axum::Json(imports::sacct(&state, text, &options).await?))
}

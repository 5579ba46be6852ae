//! `/v1/power-caps`: limits on the draw of the whole system or of one
//! partition, permanent or for a time window (docs/model.md §5).

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
use crate::service::caps::{self, NewCap};
use crate::validate::{self, Errors, FieldError};

pub use crate::service::caps::PowerCap;

/// A cap as set. `PUT` replaces all of it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerCapInput {
    #[schema(minimum = 1e-100, maximum = 1e100)]
    pub limit_w: f64,
    /// The partition to limit; absent or `null` for the whole system.
    pub partition: Option<String>,
    /// When a temporary cap begins (RFC 3339); absent: already.
    pub starts_at: Option<DateTime<Utc>>,
    /// When it ends; absent: never.
    pub ends_at: Option<DateTime<Utc>>,
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub description: String,
}

fn check_name(name: &str) -> Result<(), ApiError> {
    validate::identifier(name, validate::TAG_MAX)
        .map_err(|reason| ApiError::bad_request("name", reason))
}

/// Set a power cap (create or replace).
#[utoipa::path(put, path = "/v1/power-caps/{name}", tag = "power",
    params(("name" = String, Path, description = "Cap name",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    request_body = PowerCapInput,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created", body = PowerCap),
        (status = 200, description = "Replaced", body = PowerCap),
        (status = 400, description = "Malformed JSON or name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn put_cap(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    _: NoQuery,
    Json(input): Json<PowerCapInput>,
) -> ApiResult<(StatusCode, axum::Json<PowerCap>)> {
    check_name(&name)?;
    let mut errors = Errors::default();
    errors.check("limit_w", validate::positive(input.limit_w));
    if let Some(partition) = &input.partition {
        errors.check(
            "partition",
            validate::identifier(partition, validate::TAG_MAX),
        );
    }
    let starts_at = input.starts_at.map(validate::as_stored);
    let ends_at = input.ends_at.map(validate::as_stored);
    for (field, time) in [("starts_at", starts_at), ("ends_at", ends_at)] {
        if let Some(Err(reason)) = time.map(validate::time_in_range) {
            errors.add(field, reason);
        }
    }
    if let (Some(start), Some(end)) = (starts_at, ends_at)
        && end <= start
    {
        errors.add("ends_at", "must be after starts_at");
    }
    errors.check_text("description", &input.description, validate::DESCRIPTION_MAX);
    let cap = errors
        .into_result(NewCap {
            limit_w: input.limit_w,
            partition: input.partition,
            starts_at,
            ends_at,
            description: input.description,
        })
        .map_err(ApiError::Invalid)?;
    let (row, created) = caps::put(&state, &name, &cap).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(PowerCap::from_row(row, Utc::now()))))
}

/// One power cap.
#[utoipa::path(get, path = "/v1/power-caps/{name}", tag = "power",
    params(("name" = String, Path, description = "Cap name",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The cap", body = PowerCap),
        (status = 400, description = "Bad name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No such cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_cap(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    _: NoQuery,
) -> ApiResult<axum::Json<PowerCap>> {
    check_name(&name)?;
    let row = caps::get(&state, &name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no power cap `{name}`")))?;
    Ok(axum::Json(PowerCap::from_row(row, Utc::now())))
}

/// Remove a power cap.
#[utoipa::path(delete, path = "/v1/power-caps/{name}", tag = "power",
    params(("name" = String, Path, description = "Cap name",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Bad name", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 404, description = "No such cap", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn delete_cap(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(name): Path<String>,
    _: NoQuery,
) -> ApiResult<StatusCode> {
    check_name(&name)?;
    if caps::delete(&state, &name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no power cap `{name}`")))
    }
}

/// Check a power scope (a partition, or the whole system) and a time.
pub(super) fn check_scope(partition: Option<&str>, at: Option<DateTime<Utc>>) -> ApiResult<()> {
    let mut problems = Vec::new();
    if let Some(Err(reason)) = partition.map(|p| validate::identifier(p, validate::TAG_MAX)) {
        problems.push(FieldError::new("partition", reason));
    }
    if let Some(Err(reason)) = at.map(validate::time_in_range) {
        problems.push(FieldError::new("at", reason));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::BadRequest(problems))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CapListParams {
    /// Only this partition's caps, and `in_force` for it; without one, every
    /// cap, and `in_force` for the whole system.
    pub partition: Option<String>,
    /// Also give the cap in force at this time for the scope (RFC 3339;
    /// default now).
    pub at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PowerCaps {
    /// Every cap of the scope, by name.
    pub items: Vec<PowerCap>,
    /// The time `in_force` is for.
    pub at: DateTime<Utc>,
    /// The tightest cap of the scope (the partition, or the whole system
    /// without one) active at `at`; `null` when none is.
    pub in_force: Option<PowerCap>,
}

/// List power caps, with the one in force for a scope at a time.
#[utoipa::path(get, path = "/v1/power-caps", tag = "power",
    params(CapListParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The caps", body = PowerCaps),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_caps(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<CapListParams>,
) -> ApiResult<axum::Json<PowerCaps>> {
    check_scope(params.partition.as_deref(), params.at)?;
    let now = Utc::now();
    let at = validate::as_stored(params.at.unwrap_or(now));
    let partition = params.partition.as_deref();
    let items = caps::list(&state)
        .await?
        .into_iter()
        .filter(|c| partition.is_none() || c.partition.as_deref() == partition)
        .map(|c| PowerCap::from_row(c, now))
        .collect();
    let in_force = caps::in_force(&state, partition, at)
        .await?
        .map(|c| PowerCap::from_row(c, now));
    Ok(axum::Json(PowerCaps {
        items,
        at,
        in_force,
    }))
}

//! `/v1/apps`: applications, their metadata and their runs.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadQuery, NeedsAdmin, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable, UnknownApp,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, Query};
use super::page;
use super::runs::Run;
use crate::domain::ScalingMode;
use crate::http::extract::{AppPath, NoQuery};
use crate::service::apps::{self, AppMetadata, AppRow, RunFilter};
use crate::service::predictions::check_nodes;
use crate::validate::{self, Errors};

/// An application (energy tag) and a summary of its history.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct App {
    #[schema(example = "lammps-lj-2.4GHz")]
    pub tag: String,
    pub scaling_mode: ScalingMode,
    pub description: String,
    /// Allowed %RMSE of the predictor; `null` means the service default (2 %).
    pub allowed_rmse_pct: Option<f64>,
    /// Number of stored runs.
    pub run_count: i64,
    /// Smallest node count among the runs.
    pub nodes_min: Option<i32>,
    /// Largest node count among the runs.
    pub nodes_max: Option<i32>,
    /// When the latest run finished (its end time, else its ingestion time).
    pub last_run_at: Option<DateTime<Utc>>,
    /// Changes whenever runs are added; models fitted to an older version are stale.
    pub history_version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<AppRow> for App {
    fn from(a: AppRow) -> Self {
        App {
            scaling_mode: a.scaling_mode,
            tag: a.tag,
            description: a.description,
            allowed_rmse_pct: a.allowed_rmse_pct,
            run_count: a.run_count,
            nodes_min: a.nodes_min,
            nodes_max: a.nodes_max,
            last_run_at: a.last_run_at,
            history_version: a.history_version,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// An application's metadata. `PUT` replaces all of it: an omitted field
/// takes its default.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppMetadataInput {
    /// Default `unknown`.
    #[serde(default)]
    pub scaling_mode: ScalingMode,
    /// At most 4096 characters; default empty.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub description: String,
    /// Allowed %RMSE of the predictor, in (0, 100]; `null` or absent for the
    /// service default (2 %).
    #[schema(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

/// Create an application or replace its metadata.
#[utoipa::path(put, path = "/v1/apps/{app}", tag = "apps",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    request_body = AppMetadataInput,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created", body = App),
        (status = 200, description = "Metadata replaced", body = App),
        (status = 400, description = "Malformed JSON or tag", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 422, description = "Invalid metadata", body = Problem, content_type = "application/problem+json"),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 503, response = Unavailable),
    ))]
pub async fn put_app(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    _: NoQuery,
    Json(input): Json<AppMetadataInput>,
) -> ApiResult<(StatusCode, axum::Json<App>)> {
    let mut errors = Errors::default();
    errors.check_text("description", &input.description, validate::DESCRIPTION_MAX);
    if let Some(pct) = input.allowed_rmse_pct {
        errors.check("allowed_rmse_pct", validate::allowed_rmse_pct(pct));
    }
    let metadata = errors
        .into_result(AppMetadata {
            scaling_mode: input.scaling_mode,
            description: input.description,
            allowed_rmse_pct: input.allowed_rmse_pct,
        })
        .map_err(ApiError::Invalid)?;
    let (row, created) = apps::set_metadata(&state, &tag, &metadata).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(row.into())))
}

/// Get one application.
#[utoipa::path(get, path = "/v1/apps/{app}", tag = "apps",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The application", body = App),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 400, description = "Bad path or query parameter, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_app(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    _: NoQuery,
) -> ApiResult<axum::Json<App>> {
    let row = apps::find(&state, &tag).await?;
    Ok(axum::Json(AppRow::clone(&row).into()))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AppPage {
    pub items: Vec<App>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List applications in tag order.
#[utoipa::path(get, path = "/v1/apps", tag = "apps",
    params(PageParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "One page of applications", body = AppPage),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_apps(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Query(params): Query<PageParams>,
) -> ApiResult<axum::Json<AppPage>> {
    let limit = page::limit(params.limit)?;
    let after = page::cursor(params.cursor.as_deref())
        .map(|c| page::decode("apps", c))
        .transpose()?;
    if let Some(tag) = &after {
        validate::identifier(tag, validate::TAG_MAX)
            .map_err(|_| ApiError::bad_request("cursor", "is not a cursor of this listing"))?;
    }
    let mut rows = apps::list(&state, None, after.as_deref(), limit + 1).await?;
    let next_cursor = page::next_cursor(&mut rows, limit, |a| page::encode("apps", &a.tag));
    Ok(axum::Json(AppPage {
        items: rows.into_iter().map(App::from).collect(),
        next_cursor,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunListParams {
    /// Only runs on exactly this many nodes.
    #[param(minimum = 1, maximum = 1_000_000)]
    pub nodes: Option<i32>,
    /// Only runs on at least this many nodes.
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i32>,
    /// Only runs on at most this many nodes.
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i32>,
    /// Only runs that finished at or after this time (RFC 3339).
    pub from: Option<DateTime<Utc>>,
    /// Only runs that finished before this time (RFC 3339).
    pub to: Option<DateTime<Utc>>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    pub items: Vec<Run>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List an application's runs in the order they were stored.
///
/// "Finished" is a run's `ended_at`, or its `ingested_at` when it reported no
/// end time.
#[utoipa::path(get, path = "/v1/apps/{app}/runs", tag = "apps",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"), RunListParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "One page of runs", body = RunPage),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_app_runs(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<RunListParams>,
) -> ApiResult<axum::Json<RunPage>> {
    let mut errors = Vec::new();
    for (field, value) in [
        ("nodes", params.nodes),
        ("min_nodes", params.min_nodes),
        ("max_nodes", params.max_nodes),
    ] {
        if let Some(Err(e)) = value.map(|v| check_nodes(field, i64::from(v))) {
            errors.push(e);
        }
    }
    if let (Some(min), Some(max)) = (params.min_nodes, params.max_nodes)
        && min > max
    {
        errors.push(validate::FieldError::new(
            "min_nodes",
            "must not exceed max_nodes",
        ));
    }
    for (field, time) in [("from", params.from), ("to", params.to)] {
        if let Some(Err(reason)) = time.map(validate::time_in_range) {
            errors.push(validate::FieldError::new(field, reason));
        }
    }
    if let (Some(from), Some(to)) = (params.from, params.to)
        && from >= to
    {
        errors.push(validate::FieldError::new("from", "must be before to"));
    }
    if !errors.is_empty() {
        return Err(ApiError::BadRequest(errors));
    }
    let limit = page::limit(params.limit)?;
    let after_id = match page::cursor(params.cursor.as_deref()) {
        Some(cursor) => page::decode("runs", cursor)?
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request("cursor", "is not a cursor of this listing"))?,
        None => 0,
    };
    let app = apps::find(&state, &tag).await?;
    let filter = RunFilter {
        nodes: params.nodes,
        min_nodes: params.min_nodes,
        max_nodes: params.max_nodes,
        from: params.from,
        to: params.to,
    };
    let (rows, more) = apps::runs(&state, app.id, &filter, after_id, limit).await?;
    let next_cursor = rows
        .last()
        .filter(|_| more)
        .map(|r| page::encode("runs", &r.id.to_string()));
    Ok(axum::Json(RunPage {
        items: rows.into_iter().map(Run::from).collect(),
        next_cursor,
    }))
}

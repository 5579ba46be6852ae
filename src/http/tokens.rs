//! `/v1/tokens`: API tokens, for administrators.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{BadQuery, NeedsAdmin, NotJson, TooLarge, Unauthorized, Unavailable};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, NoQuery, Path};
use crate::service;
pub use crate::service::tokens::{CreatedToken, TokenInfo, create};
use crate::tokens::Scope;
use crate::validate::{self, Errors};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenInput {
    /// A name to recognise the token by, 1–128 characters.
    #[schema(example = "slurm-prolog", min_length = 1, max_length = 128)]
    pub name: String,
    /// At least one of read, ingest, schedule, admin.
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// When the token stops working (RFC 3339); never if absent.
    pub expires_at: Option<DateTime<Utc>>,
}

/// Create a token.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens",
    request_body = TokenInput,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created; the secret is in `token`", body = CreatedToken),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 422, description = "Invalid name, scopes or expiry", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Bad path or query parameter, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 503, response = Unavailable),
    ))]
pub async fn create_token(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(input): Json<TokenInput>,
) -> ApiResult<(StatusCode, axum::Json<CreatedToken>)> {
    let mut errors = Errors::default();
    let name_len = input.name.chars().count();
    if !(1..=128).contains(&name_len) {
        errors.add("name", "must be 1 to 128 characters");
    }
    errors.check("name", validate::name(&input.name));
    if let Some(Err(reason)) = input.expires_at.map(validate::time_in_range) {
        errors.add("expires_at", reason);
    }
    if input.scopes.is_empty() {
        errors.add("scopes", "must name at least one scope");
    }
    if input.expires_at.is_some_and(|t| t <= Utc::now()) {
        errors.add("expires_at", "must be in the future");
    }
    errors.into_result(()).map_err(ApiError::Invalid)?;
    let expires_at = input.expires_at.map(validate::as_stored);
    let created = create(&state.pool, &input.name, &input.scopes, expires_at).await?;
    Ok((StatusCode::CREATED, axum::Json(created)))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub items: Vec<TokenInfo>,
}

/// List tokens (without their secrets), revoked ones included.
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens",
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "All tokens", body = TokenList),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_tokens(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    _: NoQuery,
) -> ApiResult<axum::Json<TokenList>> {
    Ok(axum::Json(TokenList {
        items: service::tokens::list(&state).await?,
    }))
}

/// Revoke a token. Revoking twice is harmless.
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "tokens",
    params(("id" = i64, Path, description = "Token id")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "Revoked", body = TokenInfo),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 404, description = "No such token", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Bad path or query parameter, or malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn revoke_token(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(id): Path<i64>,
    _: NoQuery,
) -> ApiResult<axum::Json<TokenInfo>> {
    Ok(axum::Json(service::tokens::revoke(&state, id).await?))
}

//! `/v1/budgets/{account}`: energy budgets per account (docs/model.md §5).

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadQuery, NeedsAdmin, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, NoQuery, Path};
use crate::service::budgets;
pub use crate::service::budgets::{Budget, BudgetInput};
use crate::validate::Account;

fn check_account(account: &str) -> Result<Account, ApiError> {
    Account::parse(account).map_err(|reason| ApiError::bad_request("account", reason))
}

/// Set an account's energy budget.
#[utoipa::path(put, path = "/v1/budgets/{account}", tag = "budgets",
    params(("account" = String, Path, description = "Accounting project")),
    request_body = BudgetInput,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "Created", body = Budget),
        (status = 200, description = "Replaced", body = Budget),
        (status = 400, description = "Malformed JSON or account", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid budget", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn put_budget(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(account): Path<String>,
    _: NoQuery,
    Json(input): Json<BudgetInput>,
) -> ApiResult<(StatusCode, axum::Json<Budget>)> {
    let account = check_account(&account)?;
    let (budget, created) = budgets::set(&state, &account, &input).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(budget)))
}

/// Remove an account's budget: its jobs and runs stay, and admission no
/// longer checks an energy budget for it.
#[utoipa::path(delete, path = "/v1/budgets/{account}", tag = "budgets",
    params(("account" = String, Path, description = "Accounting project")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Bad account", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsAdmin),
        (status = 404, description = "No budget for the account", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn delete_budget(
    _: Authorized<auth::Admin>,
    State(state): State<AppState>,
    Path(account): Path<String>,
    _: NoQuery,
) -> ApiResult<StatusCode> {
    let account = check_account(&account)?;
    if budgets::delete(&state, &account).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "no budget for account `{account}`"
        )))
    }
}

/// Every account's budget and where it stands.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Budgets {
    /// By account; at most 10,000 (`/metrics` shows as many).
    pub items: Vec<Budget>,
}

/// Every budget, and where each account stands against it now.
#[utoipa::path(get, path = "/v1/budgets", tag = "budgets",
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The budgets, by account", body = Budgets),
        (status = 400, response = BadQuery),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 503, response = Unavailable),
    ))]
pub async fn list_budgets(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    _: NoQuery,
) -> ApiResult<axum::Json<Budgets>> {
    let items = budgets::standings(&state, budgets::MAX_STANDINGS).await?;
    Ok(axum::Json(Budgets { items }))
}

/// An account's budget: consumed, committed, remaining, and when it runs out.
#[utoipa::path(get, path = "/v1/budgets/{account}", tag = "budgets",
    params(("account" = String, Path, description = "Accounting project")),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The budget and where the account stands", body = Budget),
        (status = 400, description = "Bad account", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "No budget for the account", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_budget(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(account): Path<String>,
    _: NoQuery,
) -> ApiResult<axum::Json<Budget>> {
    let account = check_account(&account)?;
    Ok(axum::Json(budgets::get(&state, &account).await?))
}

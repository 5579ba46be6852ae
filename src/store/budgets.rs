//! The `budgets` table, and an account's consumption.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::domain::Period;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BudgetRow {
    pub account: String,
    pub limit_j: f64,
    pub period: Period,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str = "account, limit_j, period, starts_at, ends_at, created_at, updated_at";

/// Create or replace a budget; whether it was created.
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    account: &str,
    limit_j: f64,
    period: Period,
    window: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> sqlx::Result<(BudgetRow, bool)> {
    let query = format!(
        "INSERT INTO budgets (account, limit_j, period, starts_at, ends_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (account) DO UPDATE
         SET limit_j = EXCLUDED.limit_j, period = EXCLUDED.period,
             starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at, updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created"
    );
    #[derive(sqlx::FromRow)]
    struct Upserted {
        #[sqlx(flatten)]
        budget: BudgetRow,
        created: bool,
    }
    let row: Upserted = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(account)
        .bind(limit_j)
        .bind(period)
        .bind(window.map(|w| w.0))
        .bind(window.map(|w| w.1))
        .fetch_one(executor)
        .await?;
    Ok((row.budget, row.created))
}

/// Delete `account`'s budget; whether it had one.
pub async fn delete(executor: impl PgExecutor<'_>, account: &str) -> sqlx::Result<bool> {
    let deleted = sqlx::query("DELETE FROM budgets WHERE account = $1")
        .bind(account)
        .execute(executor)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// Up to `limit` budgets, by account.
pub async fn list(executor: impl PgExecutor<'_>, limit: i64) -> sqlx::Result<Vec<BudgetRow>> {
    let query = format!("SELECT {COLUMNS} FROM budgets ORDER BY account LIMIT $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(limit)
        .fetch_all(executor)
        .await
}

pub async fn get(executor: impl PgExecutor<'_>, account: &str) -> sqlx::Result<Option<BudgetRow>> {
    let query = format!("SELECT {COLUMNS} FROM budgets WHERE account = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(account)
        .fetch_optional(executor)
        .await
}

/// The energy of the account's runs that finished in [from, to), and how many.
pub async fn consumed(
    executor: impl PgExecutor<'_>,
    account: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<(f64, i64)> {
    sqlx::query_as(
        "SELECT COALESCE(sum(energy_j), 0), count(*) FROM runs
         WHERE account = $1
           AND COALESCE(ended_at, ingested_at) >= $2
           AND COALESCE(ended_at, ingested_at) < $3",
    )
    .bind(account)
    .bind(from)
    .bind(to)
    .fetch_one(executor)
    .await
}

/// The energy of the account's runs that finished in [from, to), summed
/// per step of `step_s` seconds from `from`: (the step's start, its energy),
/// steps without runs left out, oldest first. For burn-down charts.
pub async fn consumed_by_step(
    executor: impl PgExecutor<'_>,
    account: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step_s: i64,
) -> sqlx::Result<Vec<(DateTime<Utc>, f64)>> {
    sqlx::query_as(
        "SELECT date_bin(make_interval(secs => $4), COALESCE(ended_at, ingested_at), $2) AS step,
                sum(energy_j)
         FROM runs
         WHERE account = $1
           AND COALESCE(ended_at, ingested_at) >= $2
           AND COALESCE(ended_at, ingested_at) < $3
         GROUP BY step
         ORDER BY step",
    )
    .bind(account)
    .bind(from)
    .bind(to)
    .bind(step_s as f64)
    .fetch_all(executor)
    .await
}

//! The `api_tokens` table.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::notify::{self, Change};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, name, scopes, created_at, expires_at, last_used_at, revoked_at";

pub async fn insert(
    executor: impl PgExecutor<'_>,
    name: &str,
    hash: &[u8; 32],
    scopes: &[&str],
    expires_at: Option<DateTime<Utc>>,
) -> sqlx::Result<TokenRow> {
    let query = format!(
        "INSERT INTO api_tokens (name, token_hash, scopes, expires_at)
         VALUES ($1, $2, $3, $4)
         RETURNING {COLUMNS}"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(name)
        .bind(&hash[..])
        .bind(scopes)
        .bind(expires_at)
        .fetch_one(executor)
        .await
}

/// The id and scopes of the live (not revoked, not expired) token with this
/// hash. Records the use, at most once a minute per token so that reads do
/// not turn into a write each.
pub async fn authenticate(
    executor: impl PgExecutor<'_>,
    hash: &[u8; 32],
) -> sqlx::Result<Option<(i64, Vec<String>, Option<DateTime<Utc>>)>> {
    sqlx::query_as(
        "WITH live AS (
             SELECT id, scopes, expires_at, last_used_at FROM api_tokens
             WHERE token_hash = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > now())
         ),
         touched AS (
             UPDATE api_tokens SET last_used_at = now()
             WHERE id IN (SELECT id FROM live
                          WHERE last_used_at IS NULL
                             OR last_used_at < now() - interval '1 minute')
         )
         SELECT id, scopes, expires_at FROM live",
    )
    .bind(&hash[..])
    .fetch_optional(executor)
    .await
}

pub async fn list(executor: impl PgExecutor<'_>) -> sqlx::Result<Vec<TokenRow>> {
    let query = format!("SELECT {COLUMNS} FROM api_tokens ORDER BY id");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .fetch_all(executor)
        .await
}

/// Revoke a token; `None` when there is no such token. Notifies every
/// replica's cache (see `cache`).
pub async fn revoke(executor: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<TokenRow>> {
    let query = format!(
        "UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now())
         WHERE id = $1
         RETURNING {COLUMNS}, {notify} IS NULL AS _notified",
        notify = notify::sql(&Change::Tokens),
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(id)
        .fetch_optional(executor)
        .await
}

pub async fn count(executor: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM api_tokens")
        .fetch_one(executor)
        .await
}

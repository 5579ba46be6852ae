//! The `power_caps` table.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CapRow {
    pub id: i64,
    pub name: String,
    pub limit_w: f64,
    pub partition: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub description: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str =
    "id, name, limit_w, partition, starts_at, ends_at, description, created_at, updated_at";

/// A cap as administrators set it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewCap {
    pub limit_w: f64,
    pub partition: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub description: String,
}

/// Create a cap or replace it. Returns the row and whether it was created.
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    name: &str,
    cap: &NewCap,
) -> sqlx::Result<(CapRow, bool)> {
    let query = format!(
        "INSERT INTO power_caps (name, limit_w, partition, starts_at, ends_at, description)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (name) DO UPDATE
         SET limit_w = EXCLUDED.limit_w,
             partition = EXCLUDED.partition,
             starts_at = EXCLUDED.starts_at,
             ends_at = EXCLUDED.ends_at,
             description = EXCLUDED.description,
             updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created"
    );
    #[derive(sqlx::FromRow)]
    struct Upserted {
        #[sqlx(flatten)]
        cap: CapRow,
        created: bool,
    }
    let row: Upserted = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(name)
        .bind(cap.limit_w)
        .bind(&cap.partition)
        .bind(cap.starts_at)
        .bind(cap.ends_at)
        .bind(&cap.description)
        .fetch_one(executor)
        .await?;
    Ok((row.cap, row.created))
}

pub async fn get(executor: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<CapRow>> {
    let query = format!("SELECT {COLUMNS} FROM power_caps WHERE name = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(name)
        .fetch_optional(executor)
        .await
}

/// Every cap, by name (there are few).
pub async fn list(executor: impl PgExecutor<'_>) -> sqlx::Result<Vec<CapRow>> {
    let query = format!("SELECT {COLUMNS} FROM power_caps ORDER BY name");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .fetch_all(executor)
        .await
}

/// Delete a cap; whether it existed.
pub async fn delete(executor: impl PgExecutor<'_>, name: &str) -> sqlx::Result<bool> {
    let deleted = sqlx::query("DELETE FROM power_caps WHERE name = $1")
        .bind(name)
        .execute(executor)
        .await?;
    Ok(deleted.rows_affected() > 0)
}

/// The caps in force at `at` for a partition and for the whole system:
/// for each scope, the tightest cap active then, ties to the earliest ending.
/// `(partition's, system's)`; the first is `None` without a partition.
pub async fn in_force(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
    at: DateTime<Utc>,
) -> sqlx::Result<(Option<CapRow>, Option<CapRow>)> {
    // Over no time at all, only the caps in force at `at`: one per scope.
    let (own, system) = during(executor, partition, at, at).await?;
    Ok((own.into_iter().next(), system.into_iter().next()))
}

/// For a partition and for the whole system, the cap in force at `from`
/// (the tightest, as `in_force`) and every cap that begins after `from` and
/// before `until`, tightest first (the 100 tightest of both scopes): the
/// caps a job running over `[from, until)` must fit under, the one in force
/// at `from` first. `(partition's, system's)`.
pub async fn during(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> sqlx::Result<(Vec<CapRow>, Vec<CapRow>)> {
    let query = format!(
        "(SELECT DISTINCT ON (partition) {COLUMNS} FROM power_caps
          WHERE (partition IS NULL OR partition = $1)
            AND (starts_at IS NULL OR starts_at <= $2)
            AND (ends_at IS NULL OR ends_at > $2)
          ORDER BY partition, limit_w, ends_at NULLS LAST, name)
         UNION ALL
         (SELECT {COLUMNS} FROM power_caps
          WHERE (partition IS NULL OR partition = $1)
            AND starts_at > $2 AND starts_at < $3
          ORDER BY limit_w, starts_at, name
          LIMIT 100)"
    );
    let rows: Vec<CapRow> = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(partition)
        .bind(from)
        .bind(until)
        .fetch_all(executor)
        .await?;
    Ok(rows.into_iter().partition(|row| row.partition.is_some()))
}

/// The cap in force at `at` for one scope (`None`: the whole system).
pub async fn in_force_for(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
    at: DateTime<Utc>,
) -> sqlx::Result<Option<CapRow>> {
    let (own, system) = in_force(executor, partition, at).await?;
    Ok(if partition.is_some() { own } else { system })
}

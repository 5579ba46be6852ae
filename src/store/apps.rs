//! The `applications` table.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use super::notify;
use super::power::AdmissionLock;
use crate::domain::ScalingMode;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AppRow {
    pub id: i64,
    pub tag: String,
    pub scaling_mode: ScalingMode,
    pub description: String,
    pub allowed_rmse_pct: Option<f64>,
    pub run_count: i64,
    pub nodes_min: Option<i32>,
    pub nodes_max: Option<i32>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub history_version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
impl AppRow {
    /// A row for unit tests: no runs, created and updated at the epoch.
    pub fn sample(id: i64, tag: &str) -> AppRow {
        let epoch = DateTime::from_timestamp(0, 0).unwrap_or_default();
        AppRow {
            id,
            tag: tag.into(),
            scaling_mode: ScalingMode::Unknown,
            description: String::new(),
            allowed_rmse_pct: None,
            run_count: 0,
            nodes_min: None,
            nodes_max: None,
            last_run_at: None,
            history_version: 0,
            created_at: epoch,
            updated_at: epoch,
        }
    }
}

const COLUMNS: &str = "id, tag, scaling_mode, description, allowed_rmse_pct, run_count, \
     nodes_min, nodes_max, last_run_at, history_version, created_at, updated_at";

/// Application metadata set by administrators.
#[derive(Debug, Clone, PartialEq)]
pub struct AppMetadata {
    pub scaling_mode: ScalingMode,
    pub description: String,
    pub allowed_rmse_pct: Option<f64>,
}

/// The applications of a batch of runs.
#[derive(Debug)]
pub struct BatchApps {
    /// Each tag's id.
    pub ids: HashMap<String, i64>,
    /// The ids of those created just now.
    pub created: Vec<i64>,
}

/// Create the applications named by `tags` that do not exist yet, and lock
/// all of them (in id order, so concurrent batches cannot deadlock) until the
/// transaction ends. `FOR NO KEY UPDATE`: batches wait for each other, but a
/// job start (which only references the row) does not wait for a batch.
pub async fn ensure_and_lock(conn: &mut PgConnection, tags: &[&str]) -> sqlx::Result<BatchApps> {
    // Those created are told to every replica (one may have read the tag as
    // absent), when the transaction commits.
    let created: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO applications (tag)
         SELECT tag FROM unnest($1::text[]) AS t(tag) ORDER BY tag
         ON CONFLICT (tag) DO NOTHING
         RETURNING id, {notify} IS NULL",
        notify = notify::sql_app("tag"),
    )))
    .bind(tags)
    .fetch_all(&mut *conn)
    .await?;
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, tag FROM applications WHERE tag = ANY($1) ORDER BY id FOR NO KEY UPDATE",
    )
    .bind(tags)
    .fetch_all(&mut *conn)
    .await?;
    let mut apps = BatchApps {
        ids: rows.into_iter().map(|(id, tag)| (tag, id)).collect(),
        created,
    };
    // An application that existed when it was inserted (a job start created
    // it) may have been removed since by a cancellation of that job
    // (`remove_if_unused`), before the lock above. Insert those again, this
    // time locking whatever row the insertion meets: ON CONFLICT DO UPDATE
    // either inserts or locks, atomically, even against a concurrent delete.
    let missing: Vec<&str> = tags
        .iter()
        .copied()
        .filter(|tag| !apps.ids.contains_key(*tag))
        .collect();
    if !missing.is_empty() {
        let rows: Vec<(i64, String, bool)> = sqlx::query_as(
            "INSERT INTO applications AS a (tag)
             SELECT tag FROM unnest($1::text[]) AS t(tag) ORDER BY tag
             ON CONFLICT (tag) DO UPDATE SET tag = a.tag
             RETURNING a.id, a.tag, (a.xmax = 0) AS created",
        )
        .bind(&missing)
        .fetch_all(&mut *conn)
        .await?;
        for (id, tag, created) in rows {
            if created {
                apps.created.push(id);
            }
            apps.ids.insert(tag, id);
        }
    }
    Ok(apps)
}

/// Remove applications created by this transaction that received no run after
/// all (their only runs were conflicts): a rejected run leaves no trace.
pub async fn remove_unused(conn: &mut PgConnection, ids: &[i64]) -> sqlx::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM applications WHERE id = ANY($1) AND run_count = 0")
        .bind(ids)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Create or replace an application's metadata. Returns the row and whether it
/// was created.
pub async fn upsert_metadata(
    executor: impl PgExecutor<'_>,
    tag: &str,
    metadata: &AppMetadata,
) -> sqlx::Result<(AppRow, bool)> {
    let query = format!(
        "INSERT INTO applications AS a (tag, scaling_mode, description, allowed_rmse_pct,
                                        registered)
         VALUES ($1, $2, $3, $4, true)
         ON CONFLICT (tag) DO UPDATE
         SET scaling_mode = EXCLUDED.scaling_mode,
             description = EXCLUDED.description,
             allowed_rmse_pct = EXCLUDED.allowed_rmse_pct,
             registered = true,
             updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created,
                   {notify} IS NULL AS _notified",
        notify = notify::sql_app("a.tag"),
    );
    // The RETURNING clause also notifies every replica's cache (see `cache`).
    #[derive(sqlx::FromRow)]
    struct Upserted {
        #[sqlx(flatten)]
        app: AppRow,
        created: bool,
    }
    let row: Upserted = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(tag)
        .bind(metadata.scaling_mode)
        .bind(&metadata.description)
        .bind(metadata.allowed_rmse_pct)
        .fetch_one(executor)
        .await?;
    Ok((row.app, row.created))
}

pub async fn get(executor: impl PgExecutor<'_>, tag: &str) -> sqlx::Result<Option<AppRow>> {
    let query = format!("SELECT {COLUMNS} FROM applications WHERE tag = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(tag)
        .fetch_optional(executor)
        .await
}

/// The applications named by `tags` that exist, in no particular order.
pub async fn get_many(executor: impl PgExecutor<'_>, tags: &[&str]) -> sqlx::Result<Vec<AppRow>> {
    let query = format!("SELECT {COLUMNS} FROM applications WHERE tag = ANY($1)");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(tags)
        .fetch_all(executor)
        .await
}

/// One page of applications in tag order, after `after_tag`.
pub async fn list(
    executor: impl PgExecutor<'_>,
    contains: Option<&str>,
    after_tag: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<AppRow>> {
    let query = format!(
        "SELECT {COLUMNS} FROM applications
         WHERE ($1::text IS NULL OR tag > $1)
           AND ($3::text IS NULL OR strpos(lower(tag), lower($3)) > 0)
         ORDER BY tag
         LIMIT $2"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(after_tag)
        .bind(limit)
        .bind(contains)
        .fetch_all(executor)
        .await
}

/// The application `tag`, created with default metadata if it does not exist
/// (existing metadata is left alone). An application removed between the
/// insertion and the reading (`remove_if_unused`, for another job) is
/// inserted again.
pub async fn ensure(conn: &mut PgConnection, tag: &str) -> sqlx::Result<AppRow> {
    // Created: every replica is told (one may have read the tag as absent).
    let insert = format!(
        "INSERT INTO applications (tag) VALUES ($1) ON CONFLICT (tag) DO NOTHING
         RETURNING {notify} IS NULL",
        notify = notify::sql_app("tag"),
    );
    for _ in 0..3 {
        sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
            .bind(tag)
            .execute(&mut *conn)
            .await?;
        if let Some(app) = get(&mut *conn, tag).await? {
            return Ok(app);
        }
    }
    Err(sqlx::Error::RowNotFound)
}

/// Remove the applications among `ids` that have no run, no job, no
/// efficiency measurement and were never set up by `PUT /v1/apps/{app}`
/// (`registered`, even with default settings): those a job start created for a
/// name that never gave a run (the job was refused or cancelled, or its run
/// was stored under another name). Job names are free text, so without this
/// every one would stay an application. Call under the admission lock.
/// The tags removed (every replica is told, when the transaction commits).
pub async fn remove_if_unused(
    conn: &mut PgConnection,
    _: &AdmissionLock,
    ids: &[i64],
) -> sqlx::Result<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // SKIP LOCKED: a row locked by a batch is gaining runs; waiting for it
    // under the admission lock could deadlock with that batch. What uses an
    // application is read from its row (run count, settings, the efficiency
    // flag): a write that committed after this statement's snapshot changed
    // the row, and PostgreSQL checks the conditions again on the row as it is
    // now. Jobs are inserted under the admission lock, so all are seen.
    let query = format!(
        "WITH removed AS (
             DELETE FROM applications WHERE id IN (
                 SELECT a.id FROM applications a
                 WHERE a.id = ANY($1) AND a.run_count = 0 AND NOT a.registered
                   AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.app_id = a.id)
                   AND NOT a.has_efficiency
                 FOR UPDATE SKIP LOCKED
             )
             RETURNING tag
         )
         SELECT tag FROM removed, {notify}",
        notify = notify::sql_app("tag"),
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(query))
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
}

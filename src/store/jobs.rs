//! The `jobs` table: jobs in flight.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use super::notify::{self, Change};
use super::power::AdmissionLock;
use crate::domain::ReservedBasis;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: i64,
    pub source: String,
    pub job_id: String,
    pub app: String,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub started_at: DateTime<Utc>,
    pub predicted_apc_w: Option<f64>,
    pub predicted_ets_j: Option<f64>,
    pub predicted_tts_s: Option<f64>,
    pub reserved_w: f64,
    pub reserved_basis: ReservedBasis,
    pub time_limit_s: Option<f64>,
    pub created_at: DateTime<Utc>,
}

const COLUMNS: &str = "j.id, j.source, j.job_id, a.tag AS app, j.nodes, j.node_list, \
     j.partition, j.account, j.started_at, j.predicted_apc_w, j.predicted_ets_j, \
     j.predicted_tts_s, j.reserved_w, j.reserved_basis, j.time_limit_s, j.created_at";

/// A job about to be stored.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub source: String,
    pub job_id: String,
    pub app_id: i64,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub started_at: DateTime<Utc>,
    pub predicted_apc_w: Option<f64>,
    pub predicted_ets_j: Option<f64>,
    pub predicted_tts_s: Option<f64>,
    pub reserved_w: f64,
    pub reserved_basis: ReservedBasis,
    pub time_limit_s: Option<f64>,
}

/// Store a job unless its (source, job_id) is running already; the stored
/// job either way, and whether it was created now.
pub async fn insert(
    conn: &mut PgConnection,
    _: &AdmissionLock,
    job: &NewJob,
) -> sqlx::Result<(JobRow, bool)> {
    let created: Option<i64> = sqlx::query_scalar(
        "INSERT INTO jobs (source, job_id, app_id, nodes, node_list, partition, account,
                           started_at, predicted_apc_w, predicted_ets_j, predicted_tts_s,
                           reserved_w, reserved_basis, time_limit_s)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
         ON CONFLICT ON CONSTRAINT jobs_source_job_id_key DO NOTHING
         RETURNING id",
    )
    .bind(&job.source)
    .bind(&job.job_id)
    .bind(job.app_id)
    .bind(job.nodes)
    .bind(&job.node_list)
    .bind(&job.partition)
    .bind(&job.account)
    .bind(job.started_at)
    .bind(job.predicted_apc_w)
    .bind(job.predicted_ets_j)
    .bind(job.predicted_tts_s)
    .bind(job.reserved_w)
    .bind(job.reserved_basis)
    .bind(job.time_limit_s)
    .fetch_optional(&mut *conn)
    .await?;
    if created.is_some() {
        notify::send(&mut *conn, &Change::Load).await?;
    }
    let row = get(&mut *conn, &job.source, &job.job_id)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok((row, created.is_some()))
}

pub async fn get(
    executor: impl PgExecutor<'_>,
    source: &str,
    job_id: &str,
) -> sqlx::Result<Option<JobRow>> {
    let query = format!(
        "SELECT {COLUMNS} FROM jobs j JOIN applications a ON a.id = j.app_id
         WHERE j.source = $1 AND j.job_id = $2"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(source)
        .bind(job_id)
        .fetch_optional(executor)
        .await
}

/// Running jobs, oldest first, of one partition or account when given.
pub async fn list(
    executor: impl PgExecutor<'_>,
    source: Option<&str>,
    partition: Option<&str>,
    account: Option<&str>,
) -> sqlx::Result<Vec<JobRow>> {
    let query = format!(
        "SELECT {COLUMNS} FROM jobs j JOIN applications a ON a.id = j.app_id
         WHERE ($1::text IS NULL OR j.source = $1)
           AND ($2::text IS NULL OR j.partition = $2)
           AND ($3::text IS NULL OR j.account = $3)
         ORDER BY j.started_at, j.id"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(source)
        .bind(partition)
        .bind(account)
        .fetch_all(executor)
        .await
}

/// Record jobs that ran without a reservation (the service could not be
/// reached when they started); how many were not recorded before.
pub async fn record_unreserved(
    executor: impl PgExecutor<'_>,
    source: &str,
    jobs: &[(impl AsRef<str>, DateTime<Utc>)],
) -> sqlx::Result<u64> {
    let (ids, starts): (Vec<&str>, Vec<DateTime<Utc>>) =
        jobs.iter().map(|(id, at)| (id.as_ref(), *at)).unzip();
    Ok(sqlx::query(
        "INSERT INTO unreserved_jobs (source, job_id, started_at)
         SELECT $1, * FROM unnest($2::text[], $3::timestamptz[])
         ON CONFLICT (source, job_id) DO NOTHING",
    )
    .bind(source)
    .bind(ids)
    .bind(starts)
    .execute(executor)
    .await?
    .rows_affected())
}

/// How long the end of a job that was not running is remembered.
const END_MEMORY: &str = "7 days";

/// Remember that `(source, job_id)` was reported ended (or cancelled) at
/// `at`: a start of an attempt that began before then, reported later, is
/// refused (see `ended_at`). Forgets ends older than a week.
pub async fn remember_end(
    conn: &mut PgConnection,
    _: &AdmissionLock,
    source: &str,
    job_id: &str,
    at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM job_ends WHERE ended_at < now() - interval '{END_MEMORY}'"
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "INSERT INTO job_ends (source, job_id, ended_at) VALUES ($1, $2, $3)
         ON CONFLICT (source, job_id)
         DO UPDATE SET ended_at = GREATEST(job_ends.ended_at, EXCLUDED.ended_at)",
    )
    .bind(source)
    .bind(job_id)
    .bind(at)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// When `(source, job_id)` was last reported ended while not running.
pub async fn ended_at(
    executor: impl PgExecutor<'_>,
    source: &str,
    job_id: &str,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar("SELECT ended_at FROM job_ends WHERE source = $1 AND job_id = $2")
        .bind(source)
        .bind(job_id)
        .fetch_optional(executor)
        .await
}

/// Remove the running jobs that these (source, job_id) keys name, because
/// they are stored as runs now. Takes the admission lock, so that a start in
/// flight either committed before (and is removed here) or waits and then
/// sees the run (and is refused): no job is left running after its run.
/// The keys of the jobs removed, and the tags of the applications this
/// leaves unused, and removes.
pub async fn release_finished(
    conn: &mut PgConnection,
    sources: &[&str],
    job_ids: &[&str],
) -> sqlx::Result<(HashSet<(String, String)>, Vec<String>)> {
    let lock = super::power::lock_admission(&mut *conn).await?;
    let released: Vec<(i64, String, String)> = sqlx::query_as(
        "DELETE FROM jobs WHERE (source, job_id) IN
             (SELECT * FROM unnest($1::text[], $2::text[]))
         RETURNING app_id, source, job_id",
    )
    .bind(sources)
    .bind(job_ids)
    .fetch_all(&mut *conn)
    .await?;
    if released.is_empty() {
        return Ok((HashSet::new(), Vec::new()));
    }
    notify::send(&mut *conn, &Change::Load).await?;
    let apps: Vec<i64> = released.iter().map(|(app, ..)| *app).collect();
    let removed = super::apps::remove_if_unused(&mut *conn, &lock, &apps).await?;
    let keys = released
        .into_iter()
        .map(|(_, source, job_id)| (source, job_id))
        .collect();
    Ok((keys, removed))
}

/// Remove the running attempt of `(source, job_id)` that a later attempt
/// (a requeue) replaces, notifying the change; its application's id, if
/// there was one. The application is left: the caller stores the new
/// attempt in the same transaction, then removes the old attempt's
/// application if that is another and now unused.
pub async fn delete_attempt(
    conn: &mut PgConnection,
    _: &AdmissionLock,
    source: &str,
    job_id: &str,
) -> sqlx::Result<Option<i64>> {
    // The notification is sent by the statement itself, for the row it
    // deletes: one round trip.
    let query = format!(
        "DELETE FROM jobs WHERE source = $1 AND job_id = $2
         RETURNING app_id, {notify} IS NULL AS _notified",
        notify = notify::sql(&Change::Load),
    );
    sqlx::query_scalar(sqlx::AssertSqlSafe(query))
        .bind(source)
        .bind(job_id)
        .fetch_optional(&mut *conn)
        .await
}

/// Remove a job (notifying the change), and its application if that is left
/// unused (`store::apps::remove_if_unused`): `None` if there was no such job,
/// else the tags of the applications removed.
pub async fn delete(
    conn: &mut PgConnection,
    lock: &AdmissionLock,
    source: &str,
    job_id: &str,
) -> sqlx::Result<Option<Vec<String>>> {
    match delete_attempt(&mut *conn, lock, source, job_id).await? {
        Some(app) => Ok(Some(
            super::apps::remove_if_unused(&mut *conn, lock, &[app]).await?,
        )),
        None => Ok(None),
    }
}

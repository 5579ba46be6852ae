//! The `efficiency` table: efficiency factors per application, region and
//! process count.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

/// One measurement as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MeasurementRow {
    pub region: String,
    pub processes: i32,
    pub load_balance: f64,
    pub serialization: f64,
    pub transfer: f64,
    /// Whether load balance was computed from per-process compute times.
    pub from_compute_times: bool,
    pub updated_at: DateTime<Utc>,
}

/// A measurement to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMeasurement {
    pub region: String,
    pub processes: i32,
    pub load_balance: f64,
    pub serialization: f64,
    pub transfer: f64,
    pub compute_times: Option<Vec<f64>>,
}

/// Store measurements, each replacing any at its (region, process count).
/// Returns how many were new.
pub async fn upsert(
    conn: &mut PgConnection,
    app_id: i64,
    measurements: &[NewMeasurement],
) -> sqlx::Result<usize> {
    // On the application's row, where the clean-up of unused applications
    // sees it even when it reads an older snapshot
    // (`apps::remove_if_unused`).
    sqlx::query(
        "UPDATE applications SET has_efficiency = true WHERE id = $1 AND NOT has_efficiency",
    )
    .bind(app_id)
    .execute(&mut *conn)
    .await?;
    let mut created = 0;
    for m in measurements {
        let inserted: bool = sqlx::query_scalar(
            "INSERT INTO efficiency
                 (app_id, region, processes, load_balance, serialization, transfer, compute_times)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (app_id, region, processes) DO UPDATE
             SET load_balance = EXCLUDED.load_balance,
                 serialization = EXCLUDED.serialization,
                 transfer = EXCLUDED.transfer,
                 compute_times = EXCLUDED.compute_times,
                 updated_at = now()
             RETURNING (xmax = 0)",
        )
        .bind(app_id)
        .bind(&m.region)
        .bind(m.processes)
        .bind(m.load_balance)
        .bind(m.serialization)
        .bind(m.transfer)
        .bind(&m.compute_times)
        .fetch_one(&mut *conn)
        .await?;
        created += usize::from(inserted);
    }
    Ok(created)
}

/// An application's measurements (of one region, or all), by region and
/// process count.
pub async fn list(
    executor: impl PgExecutor<'_>,
    app_id: i64,
    region: Option<&str>,
) -> sqlx::Result<Vec<MeasurementRow>> {
    sqlx::query_as(
        "SELECT region, processes, load_balance, serialization, transfer,
                compute_times IS NOT NULL AS from_compute_times, updated_at
         FROM efficiency
         WHERE app_id = $1 AND ($2::text IS NULL OR region = $2)
         ORDER BY region, processes",
    )
    .bind(app_id)
    .bind(region)
    .fetch_all(executor)
    .await
}

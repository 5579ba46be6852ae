//! `run_stats`: each application's history as sufficient statistics, one
//! row per node count (docs/model.md §2.2), kept by `runs::insert_batch`.

use sqlx::{PgExecutor, PgPool};

/// The columns of `run_stats` after its key, and the aggregates that fill
/// them from rows of runs: one definition for the insert that keeps them
/// (`runs::insert_batch`) and for `rebuild` (the migration's backfill is
/// the same statement, frozen in its file).
macro_rules! run_stats_columns {
    () => {
        "runs, weight, energy_sum, energy_sumsq, energy_min, energy_max, \
         power_sum, power_sumsq, power_min, power_max, \
         time_sum, time_sumsq, time_min, time_max"
    };
}
macro_rules! run_stats_aggregates {
    () => {
        "count(*), sum(quality), \
         sum(quality * energy_j), sum(quality * energy_j * energy_j), \
         min(energy_j), max(energy_j), \
         sum(quality * avg_power_w), sum(quality * avg_power_w * avg_power_w), \
         min(avg_power_w), max(avg_power_w), \
         sum(quality * duration_s), sum(quality * duration_s * duration_s), \
         min(duration_s), max(duration_s)"
    };
}
pub(crate) use {run_stats_aggregates, run_stats_columns};

use crate::model::{Metric, NodeStats};

/// One node count's statistics of all three metrics.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct StatsRow {
    pub nodes: i32,
    pub runs: i64,
    pub weight: f64,
    pub energy_sum: f64,
    pub energy_sumsq: f64,
    pub energy_min: f64,
    pub energy_max: f64,
    pub power_sum: f64,
    pub power_sumsq: f64,
    pub power_min: f64,
    pub power_max: f64,
    pub time_sum: f64,
    pub time_sumsq: f64,
    pub time_min: f64,
    pub time_max: f64,
}

impl StatsRow {
    /// The statistics of one metric.
    pub fn of(&self, metric: Metric) -> NodeStats {
        let (sum, sum_squares, min, max) = match metric {
            Metric::Ets => (
                self.energy_sum,
                self.energy_sumsq,
                self.energy_min,
                self.energy_max,
            ),
            Metric::Apc => (
                self.power_sum,
                self.power_sumsq,
                self.power_min,
                self.power_max,
            ),
            Metric::Tts => (self.time_sum, self.time_sumsq, self.time_min, self.time_max),
        };
        NodeStats {
            nodes: u32::try_from(self.nodes).unwrap_or(0),
            runs: u64::try_from(self.runs).unwrap_or(0),
            weight: self.weight,
            sum,
            sum_squares,
            min,
            max,
        }
    }
}

/// An application's statistics, by node count.
pub async fn for_app(executor: impl PgExecutor<'_>, app_id: i64) -> sqlx::Result<Vec<StatsRow>> {
    sqlx::query_as(concat!(
        "SELECT nodes, ",
        run_stats_columns!(),
        " FROM run_stats WHERE app_id = $1 ORDER BY nodes"
    ))
    .bind(app_id)
    .fetch_all(executor)
    .await
}

/// Rebuild `app_id`'s statistics from its runs, under the application row's
/// lock (the one writers take), and return them. For statistics that fell
/// behind the runs: runs stored by a replica that predates `run_stats`
/// during an upgrade.
pub async fn rebuild(pool: &PgPool, app_id: i64) -> sqlx::Result<Vec<StatsRow>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM applications WHERE id = $1 FOR UPDATE")
        .bind(app_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM run_stats WHERE app_id = $1")
        .bind(app_id)
        .execute(&mut *tx)
        .await?;
    // The migration's backfill, for one application.
    sqlx::query(concat!(
        "INSERT INTO run_stats (app_id, nodes, ",
        run_stats_columns!(),
        ") SELECT app_id, nodes, ",
        run_stats_aggregates!(),
        " FROM runs WHERE app_id = $1 GROUP BY app_id, nodes"
    ))
    .bind(app_id)
    .execute(&mut *tx)
    .await?;
    let rows = for_app(&mut *tx, app_id).await?;
    tx.commit().await?;
    Ok(rows)
}

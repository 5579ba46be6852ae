//! `run_stats`: each application's history as sufficient statistics, one
//! row per node count (design.md §2.2), kept by `runs::insert_batch`.

use sqlx::PgExecutor;

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
    sqlx::query_as(
        "SELECT nodes, runs, weight, energy_sum, energy_sumsq, energy_min, energy_max,
                power_sum, power_sumsq, power_min, power_max,
                time_sum, time_sumsq, time_min, time_max
         FROM run_stats WHERE app_id = $1 ORDER BY nodes",
    )
    .bind(app_id)
    .fetch_all(executor)
    .await
}

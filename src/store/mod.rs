//! SQL. Free functions taking an executor (the pool or a transaction) and
//! returning row types; one module per table.

pub mod apps;
pub mod budgets;
pub mod caps;
pub mod efficiency;
pub mod jobs;
pub mod nodes;
pub mod notify;
pub mod power;
pub mod runs;
pub mod stats;
pub mod tokens;

/// Whether `error` is a transient concurrency failure that a retry of the whole
/// transaction resolves (deadlock detected, serialization failure).
pub fn is_retryable(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001"))
    )
}

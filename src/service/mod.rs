//! The use cases of the service: the rules, the transactions and the cache
//! invalidation, one function per use case. Callers (the HTTP handlers, the
//! command line) parse their input, call one of these and shape the answer;
//! this layer knows nothing of HTTP.

use std::sync::Arc;

use sqlx::PgPool;

use crate::config::Settings;

pub mod admission;
pub mod apps;
pub mod budgets;
pub mod caps;
pub mod efficiency;
pub mod error;
pub mod gauges;
pub mod imports;
pub mod jobs;
pub mod nodes;
pub mod power;
pub mod predictions;
pub mod runs;
pub mod scaling;
pub mod tokens;

pub use error::{Error, Result};

/// The service's state: the database pool, the settings, the fitted models
/// and the caches. The HTTP layer shares one behind an `Arc`.
pub struct Service {
    pub pool: PgPool,
    pub settings: Settings,
    pub models: Arc<crate::predict::Models>,
    pub caches: Arc<crate::cache::Caches>,
    /// Permits for heavy computations (model searches, rule checks,
    /// efficiency scalability, batch validation): see `offload`.
    pub heavy: Arc<tokio::sync::Semaphore>,
    /// The operators' gauges as last read, and when (see `gauges`).
    pub gauges: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
}

impl Service {
    pub fn new(pool: PgPool, settings: Settings) -> Service {
        Service {
            pool,
            caches: Arc::new(crate::cache::Caches::new(settings.cache_ttl)),
            heavy: Arc::new(tokio::sync::Semaphore::new(settings.heavy_permits.max(1))),
            settings,
            models: Arc::default(),
            gauges: tokio::sync::Mutex::default(),
        }
    }

    /// After a database read failed with `error`: when the database is
    /// unreachable and `stale` holds what was last read, that (the service
    /// is then degraded: docs/operations.md); else the error.
    pub(crate) fn stale_or<T>(&self, error: sqlx::Error, stale: Option<T>) -> Result<T> {
        match (Error::from(error), stale) {
            (Error::Unavailable(_), Some(value)) => {
                self.caches.read_failed();
                Ok(value)
            }
            (error, _) => Err(error),
        }
    }

    /// Run `work`, a CPU-heavy computation, on a blocking thread under one of
    /// the `heavy` permits, so that it never holds up the async workers
    /// that answer predictions; with every permit taken, `Error::Busy` at
    /// once rather than a queue that grows under load.
    pub async fn offload<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        let permit = self.heavy.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!("heavy_requests_refused_total").increment(1);
            Error::Busy("too many heavy requests under way; retry shortly")
        })?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work()
        })
        .await
        .map_err(|e| Error::Internal(anyhow::anyhow!("heavy task: {e}")))
    }
}

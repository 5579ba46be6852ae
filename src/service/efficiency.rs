//! Fundamental efficiency factors (docs/model.md §6.1): storing an
//! application's measurements and reading them back.

use super::{Error, Result, Service};
use crate::store;
pub use crate::store::efficiency::{MeasurementRow, NewMeasurement};

/// Store `measurements` of `tag` (created if new), replacing those with the
/// same region and process count, in one transaction: how many are new, and
/// the application's id.
pub async fn store(
    service: &Service,
    tag: &str,
    measurements: &[NewMeasurement],
) -> Result<(usize, i64)> {
    let mut tx = service.pool.begin().await?;
    let apps = store::apps::ensure_and_lock(&mut tx, &[tag]).await?;
    let app_id = *apps
        .ids
        .get(tag)
        .ok_or_else(|| Error::Internal(anyhow::anyhow!("application {tag} not ensured")))?;
    let created = store::efficiency::upsert(&mut tx, app_id, measurements).await?;
    tx.commit().await?;
    // The application may be new, and read as absent just before.
    if !apps.created.is_empty() {
        service.caches.forget_app(tag);
    }
    Ok((created, app_id))
}

/// The measurements of application `app_id` (of one region, when given).
pub async fn list(
    service: &Service,
    app_id: i64,
    region: Option<&str>,
) -> Result<Vec<MeasurementRow>> {
    Ok(store::efficiency::list(&service.pool, app_id, region).await?)
}

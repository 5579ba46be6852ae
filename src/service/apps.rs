//! Applications: finding one by its tag.

use std::sync::Arc;

use super::{Error, Result, Service};
use crate::store::{self, apps::AppRow};
use crate::validate;

/// Whether a tag is well formed (`BadRequest` naming `app` otherwise).
pub fn check_tag(tag: &str) -> Result<()> {
    validate::identifier(tag, validate::TAG_MAX).map_err(|reason| Error::bad_request("app", reason))
}

/// The application's row: from memory while it has not changed (see `cache`).
pub async fn find_app(service: &Service, tag: &str) -> Result<Arc<AppRow>> {
    check_tag(tag)?;
    if let Some(row) = service.caches.app(tag) {
        return Ok(row);
    }
    // During an outage, the row as last read (docs/operations.md).
    let stale = || service.caches.stale_app(tag);
    if service.caches.degraded()
        && let Some(row) = stale()
    {
        return Ok(row);
    }
    let read_at = service.caches.generation();
    let found = match store::apps::get(&service.pool, tag).await {
        Ok(found) => found,
        Err(e) => return service.stale_or(e, stale()),
    };
    let row = Arc::new(found.ok_or_else(|| Error::NotFound(format!("no application `{tag}`")))?);
    service.caches.put_app(row.clone(), read_at);
    Ok(row)
}

/// `find_app`, with an unknown application as `None` (admission and job
/// starts answer for applications not seen yet).
pub async fn find_known_app(service: &Service, tag: &str) -> Result<Option<Arc<AppRow>>> {
    match find_app(service, tag).await {
        Ok(app) => Ok(Some(app)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

//! Applications: finding one by its tag.

use std::sync::Arc;

use super::{Error, Result, Service};
pub use crate::store::apps::{AppMetadata, AppRow};
pub use crate::store::runs::RunFilter;
use crate::store::{self, runs::RunRow};
use crate::validate::Tag;

/// `tag` as a tag (`BadRequest` naming `app` otherwise).
pub fn check_tag(tag: &str) -> Result<Tag> {
    Tag::parse(tag).map_err(|reason| Error::bad_request("app", reason))
}

/// The row of the application named `tag`, checked first.
pub async fn find_app(service: &Service, tag: &str) -> Result<Arc<AppRow>> {
    find(service, &check_tag(tag)?).await
}

/// The application's row: from memory while it has not changed (see `cache`).
pub async fn find(service: &Service, tag: &Tag) -> Result<Arc<AppRow>> {
    let tag = tag.as_str();
    if let Some(row) = service.caches.app(tag) {
        return Ok(row);
    }
    let absent = || Error::NotFound(format!("no application `{tag}`"));
    if service.caches.app_absent(tag) {
        return Err(absent());
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
    let Some(found) = found else {
        service.caches.put_absent_app(tag, read_at);
        return Err(absent());
    };
    let row = Arc::new(found);
    service.caches.put_app(row.clone(), read_at);
    Ok(row)
}

/// `find`, with an unknown application as `None` (admission and job starts
/// answer for applications not seen yet).
pub async fn find_known(service: &Service, tag: &Tag) -> Result<Option<Arc<AppRow>>> {
    match find(service, tag).await {
        Ok(app) => Ok(Some(app)),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Create `tag` or replace its metadata: the row, and whether it is new.
/// Every replica drops its copy of the row.
pub async fn set_metadata(
    service: &Service,
    tag: &str,
    metadata: &AppMetadata,
) -> Result<(AppRow, bool)> {
    let stored = store::apps::upsert_metadata(&service.pool, tag, metadata).await?;
    service.caches.forget_app(tag);
    Ok(stored)
}

/// Up to `limit` applications in tag order, after `after`, whose tag
/// contains `contains` (ignoring case) when given.
pub async fn list(
    service: &Service,
    contains: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<AppRow>> {
    Ok(store::apps::list(&service.pool, contains, after, limit).await?)
}

/// Up to `limit` runs of application `app_id` matching `filter`, in id
/// order after `after_id`.
pub async fn runs(
    service: &Service,
    app_id: i64,
    filter: &RunFilter,
    after_id: i64,
    limit: i64,
) -> Result<Vec<RunRow>> {
    Ok(store::runs::list_for_app(&service.pool, app_id, filter, after_id, limit).await?)
}

/// The row of `tag` as stored now, if any (no cache, no check of the tag).
pub async fn get(service: &Service, tag: &str) -> Result<Option<AppRow>> {
    Ok(store::apps::get(&service.pool, tag).await?)
}

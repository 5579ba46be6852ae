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
    service.caches.count_app_read();
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

/// Read the applications named by `tags` that memory holds nothing about,
/// in one query, and remember each as found or absent: a batch naming a
/// thousand applications then costs one read, not one each. Tags that are
/// not valid are left to `find` to refuse; a failed read is left to `find`
/// too, which answers it for each query as it would alone.
pub async fn prefetch<'a>(service: &Service, tags: impl IntoIterator<Item = &'a str>) {
    if service.caches.degraded() {
        return;
    }
    let mut missing: Vec<&str> = tags
        .into_iter()
        .filter(|tag| {
            Tag::parse(tag).is_ok()
                && service.caches.app(tag).is_none()
                && !service.caches.app_absent(tag)
        })
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.len() < 2 {
        return;
    }
    let read_at = service.caches.generation();
    service.caches.count_app_read();
    let Ok(rows) = store::apps::get_many(&service.pool, &missing).await else {
        return;
    };
    let mut found = std::collections::HashSet::with_capacity(rows.len());
    for row in rows {
        found.insert(row.tag.clone());
        service.caches.put_app(Arc::new(row), read_at);
    }
    for tag in missing.into_iter().filter(|tag| !found.contains(*tag)) {
        service.caches.put_absent_app(tag, read_at);
    }
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

/// Node names one page of runs lists at most (beyond its first run), as
/// one request may send (`validate::MAX_NODE_NAMES_PER_REQUEST`): a page
/// of runs with long node lists stays a few megabytes.
pub const MAX_NODE_NAMES_PER_PAGE: u64 = crate::validate::MAX_NODE_NAMES_PER_REQUEST;

/// A page of the runs of application `app_id` matching `filter`, in id
/// order after `after_id`: up to `limit` runs, fewer where their node
/// lists name more than `MAX_NODE_NAMES_PER_PAGE` nodes (at least one);
/// and whether more follow.
pub async fn runs(
    service: &Service,
    app_id: i64,
    filter: &RunFilter,
    after_id: i64,
    limit: i64,
) -> Result<(Vec<RunRow>, bool)> {
    let names = MAX_NODE_NAMES_PER_PAGE as i64;
    let mut rows =
        store::runs::list_for_app(&service.pool, app_id, filter, after_id, limit + 1, names)
            .await?;
    let kept = store::runs::within_names(
        &rows,
        usize::try_from(limit).unwrap_or(usize::MAX),
        MAX_NODE_NAMES_PER_PAGE,
    );
    let more = rows.len() > kept;
    rows.truncate(kept);
    Ok((rows, more))
}

/// The row of `tag` as stored now, if any (no cache, no check of the tag).
pub async fn get(service: &Service, tag: &str) -> Result<Option<AppRow>> {
    Ok(store::apps::get(&service.pool, tag).await?)
}

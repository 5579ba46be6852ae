//! The node registry as predictions use it: the reference workload and the
//! node powers behind APC bounds.

use std::sync::Arc;

use super::{Result, Service};
use crate::predict::NodePowers;
use crate::store;
pub use crate::store::nodes::{
    NewSample, NodeMetadata, NodePowerRow, NodeRow, PEAK_FACTOR, SampleOutcome,
};
use crate::validate::{self, FieldError, NodeName};

/// The workload a request names (checked, a problem under `field` when bad),
/// else the service's reference workload, which was checked at start-up.
pub fn workload_or_default(
    service: &Service,
    requested: Option<String>,
    prefix: &str,
    problems: &mut Vec<FieldError>,
) -> String {
    match requested {
        Some(workload) => {
            if let Err(reason) = validate::identifier(&workload, validate::TAG_MAX) {
                problems.push(FieldError::new(format!("{prefix}workload"), reason));
            }
            workload
        }
        None => service.settings.reference_workload.clone(),
    }
}

/// The node powers of `workload` (in `partition`, when given), for APC
/// bounds: from memory while the nodes have not changed, else read once.
/// `None` when no node of the scope has samples of the workload.
pub async fn node_powers(
    service: &Service,
    workload: &str,
    partition: Option<&str>,
) -> Result<Option<Arc<NodePowers>>> {
    let key = (workload.to_owned(), partition.map(str::to_owned));
    if let Some(cached) = service.caches.node_powers(&key) {
        return Ok(cached);
    }
    // During an outage, the powers as last read (docs/operations.md).
    let stale = || service.caches.stale_node_powers(&key);
    if service.caches.degraded()
        && let Some(powers) = stale()
    {
        return Ok(powers);
    }
    let read_at = service.caches.generation();
    let window = service.settings.node_window.as_secs_f64();
    // Boxed: the cached path's future need not hold the reads'.
    let read = Box::pin(async {
        let rows = store::nodes::powers(&service.pool, workload, partition, window).await?;
        let peaks = store::nodes::peaks(&service.pool, partition).await?;
        Ok::<_, sqlx::Error>((rows, peaks))
    });
    let (rows, peaks) = match read.await {
        Ok(read) => read,
        Err(e) => return service.stale_or(e, stale()),
    };
    let rows: Vec<(String, f64)> = rows.into_iter().map(|r| (r.name, r.power_w)).collect();
    let powers = NodePowers::new(workload, partition, &rows, peaks).map(Arc::new);
    service.caches.put_node_powers(key, powers.clone(), read_at);
    Ok(powers)
}

/// Register node `name` or replace its metadata: the row, and whether it is
/// new. Every replica drops the node powers it keeps.
pub async fn put(
    service: &Service,
    name: &NodeName,
    metadata: &NodeMetadata,
) -> Result<(NodeRow, bool)> {
    let stored = store::nodes::upsert(&service.pool, name, metadata).await?;
    service.caches.forget_nodes();
    Ok(stored)
}

/// Remove node `name` and its samples; whether it was registered. Every
/// replica drops the node powers it keeps.
pub async fn delete(service: &Service, name: &NodeName) -> Result<bool> {
    let deleted = store::nodes::delete(&service.pool, name).await?;
    service.caches.forget_nodes();
    Ok(deleted)
}

/// Node `name`, if registered.
pub async fn get(service: &Service, name: &NodeName) -> Result<Option<NodeRow>> {
    Ok(store::nodes::get(&service.pool, name).await?)
}

/// Up to `limit` nodes (of `partition`) in name order, after `after`.
pub async fn list(
    service: &Service,
    partition: Option<&str>,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<NodeRow>> {
    Ok(store::nodes::list(&service.pool, partition, after, limit).await?)
}

/// Store power samples, one outcome each, in order. Every replica drops the
/// node powers it keeps.
pub async fn add_samples(service: &Service, samples: &[NewSample]) -> Result<Vec<SampleOutcome>> {
    let stored = store::nodes::insert_samples(&service.pool, samples).await?;
    service.caches.forget_nodes();
    Ok(stored)
}

/// Each node's power under `workload` (in `partition`) over the service's
/// node window, for a classification.
pub async fn powers(
    service: &Service,
    workload: &str,
    partition: Option<&str>,
) -> Result<Vec<NodePowerRow>> {
    let window = service.settings.node_window.as_secs_f64();
    Ok(store::nodes::powers(&service.pool, workload, partition, window).await?)
}

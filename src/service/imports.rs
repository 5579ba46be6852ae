//! Importing scheduler accounting records as runs.

use super::{Error, Result, Service};
use crate::import::{self, ImportError, Summary};
use crate::sacct::Options;
use crate::validate::MAX_NODE_NAMES_PER_REQUEST;

/// Import Slurm's `sacct --parsable2` output: its completed jobs become
/// runs, and this replica drops its copies of what they change (the others
/// hear of it through the transactions' notifications).
pub async fn sacct(service: &Service, text: &str, options: &Options) -> Result<Summary> {
    let budget = Some(MAX_NODE_NAMES_PER_REQUEST);
    let summary = match import::sacct(&service.pool, text, options, budget, |_, _| {}).await {
        Ok(summary) => summary,
        Err(ImportError::Header(e)) => return Err(Error::invalid("body", e.to_string())),
        // 413, as for a body too large: the shipped import script
        // (deploy/slurm/sacct-import.sh) then posts it again in halves.
        Err(e @ ImportError::TooManyNodeNames { .. }) => {
            return Err(Error::PayloadTooLarge(e.to_string()));
        }
        Err(ImportError::Database(e)) => return Err(e.into()),
    };
    for tag in summary.apps.iter().chain(&summary.removed_apps) {
        service.caches.forget_app(tag);
    }
    // Jobs whose runs were imported stopped running in the same transaction.
    service.caches.forget_load();
    Ok(summary)
}

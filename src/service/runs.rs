//! Storing runs: the history every prediction is made from.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Error, Result, Service};
use crate::ingest::{self, Outcome};
use crate::store;
use crate::store::runs::NewRun;
pub use crate::store::runs::RunRow;
use crate::validate::FieldError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Stored now.
    Created,
    /// Already stored with the same values; nothing changed.
    Duplicate,
}

/// Store one run: whether it is new and its id, or the answer its refusal
/// gets. `subject` says what a conflicting run was stored for.
pub async fn store_one(service: &Service, run: NewRun, subject: &str) -> Result<(RunStatus, i64)> {
    let ingested = store_runs(service, vec![Ok(run)], false).await?;
    the_one(ingested.outcomes.into_iter().next(), subject)
}

/// What became of a running job's end (`store_job_end`).
pub enum JobEnd {
    /// Stored now, or already (with the same values): whether it is new,
    /// and the run's id.
    Stored(RunStatus, i64),
    /// Nothing stored: the job was cancelled since the caller read it.
    Cancelled,
    /// Nothing stored: a later attempt of the job (a requeue) started at or
    /// after this end, which is an earlier attempt's (409).
    EarlierAttempt(Error),
}

/// Store the run that a running job became (`ingest::end_job`), as
/// `store_one` does.
pub async fn store_job_end(service: &Service, run: NewRun, subject: &str) -> Result<JobEnd> {
    let ended = ingest::end_job(&service.pool, &run).await;
    forget(
        service,
        &[run.app],
        ended.as_ref().ok().and_then(Option::as_ref),
    );
    match ended? {
        Some(ingested) => match ingested.outcomes.into_iter().next() {
            Some(Outcome::EarlierAttempt(error)) => {
                Ok(JobEnd::EarlierAttempt(earlier_attempt(error, subject)))
            }
            outcome => the_one(outcome, subject).map(|(status, id)| JobEnd::Stored(status, id)),
        },
        None => Ok(JobEnd::Cancelled),
    }
}

/// The 409 of an earlier attempt's run of `subject` (`error` names `ended_at`).
fn earlier_attempt(error: FieldError, subject: &str) -> Error {
    Error::Conflict {
        detail: format!("an earlier attempt's run of {subject} is not stored"),
        errors: vec![error],
    }
}

/// The answer for the one run stored, its `outcome`.
fn the_one(outcome: Option<Outcome>, subject: &str) -> Result<(RunStatus, i64)> {
    match outcome {
        Some(Outcome::Created(id)) => Ok((RunStatus::Created, id)),
        Some(Outcome::Duplicate(id)) => Ok((RunStatus::Duplicate, id)),
        Some(Outcome::Conflict {
            run_id,
            differences,
        }) => Err(Error::Conflict {
            detail: format!(
                "run {} is already stored with other values for {subject}",
                run_id.unwrap_or_default()
            ),
            errors: differences,
        }),
        Some(Outcome::Invalid(errors)) => Err(Error::Invalid(errors)),
        Some(Outcome::EarlierAttempt(error)) => Err(earlier_attempt(error, subject)),
        Some(Outcome::Withheld) | None => {
            Err(anyhow::anyhow!("a single run was neither stored nor rejected").into())
        }
    }
}

/// Store runs, then drop this replica's cached rows of their applications at
/// once (other replicas hear of it through the transaction's notification).
pub async fn store_runs(
    service: &Service,
    items: Vec<std::result::Result<NewRun, Vec<FieldError>>>,
    atomic: bool,
) -> std::result::Result<ingest::Ingested, sqlx::Error> {
    let mut tags: Vec<String> = items.iter().flatten().map(|r| r.app.clone()).collect();
    tags.sort_unstable();
    tags.dedup();
    let ingested = ingest::ingest(&service.pool, items, atomic).await?;
    forget(service, &tags, Some(&ingested));
    Ok(ingested)
}

/// Drop this replica's cached rows of the applications runs were stored
/// for (`tags`), and of those the storing removed.
fn forget(service: &Service, tags: &[String], ingested: Option<&ingest::Ingested>) {
    let removed = ingested.map_or(&[][..], |i| &i.removed_apps);
    for tag in tags.iter().chain(removed) {
        service.caches.forget_app(tag);
    }
    // Jobs whose runs these are stopped running in the same transaction.
    service.caches.forget_load();
}

/// Run `id`, if stored.
pub async fn get(service: &Service, id: i64) -> Result<Option<RunRow>> {
    Ok(store::runs::get(&service.pool, id).await?)
}

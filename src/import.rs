//! Importing scheduler accounting records: parse (`sacct`), validate each
//! job as a run, store them in batches. Shared by `joulecast import sacct`
//! and `POST /v1/import/sacct`.
//!
//! Runs are idempotent on (source, job id): importing the same records again
//! stores nothing new, and overlapping time windows are safe.

use std::collections::BTreeSet;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;

use crate::ingest::{self, NodeListDraft, Outcome, RunDraft};
use crate::sacct::{self, HeaderError, Options};
use crate::validate::{FieldError, MAX_NODE_NAMES_PER_REQUEST};

/// Runs stored per transaction.
pub const CHUNK: usize = 1000;

/// A line that gave no run, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SkippedLine {
    /// 1-based line number in the input.
    pub line: usize,
    pub job_id: Option<String>,
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Summary {
    /// Data lines read (the header and blank lines not counted).
    pub lines: usize,
    /// Job-step lines: counted, never imported (see the operations guide).
    pub steps: usize,
    /// Runs stored now.
    pub created: usize,
    /// Runs stored before with the same values: nothing changed.
    pub duplicate: usize,
    /// Lines that gave no run, by line number: skipped by the parser (state,
    /// energy, ...), invalid as runs, or in conflict with a stored run.
    pub skipped: Vec<SkippedLine>,
    /// Applications that gained runs.
    pub apps: Vec<String>,
    /// Applications removed because the jobs the imported runs ended left
    /// them without runs or jobs: for the caches, not part of the answer.
    #[serde(skip)]
    pub removed_apps: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The jobs' node lists name more nodes than the import may take at once.
    #[error(
        "the node lists name {total} nodes in all; at most {limit} per import \
         (split it, or import large files with `joulecast import sacct`)"
    )]
    TooManyNodeNames { total: u64, limit: u64 },
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Import `sacct --parsable2` output; `progress(done, total)` is called
/// after each stored chunk of runs. With `max_node_names`, an input whose
/// node lists name more nodes in all is refused before anything is stored.
/// Either way runs are validated (their node lists expanded) and stored a
/// chunk at a time, so that memory holds at most `CHUNK` runs or about
/// `MAX_NODE_NAMES_PER_REQUEST` names at once, not the whole input's.
pub async fn sacct(
    pool: &PgPool,
    text: &str,
    options: &Options,
    max_node_names: Option<u64>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Summary, ImportError> {
    let parsed = sacct::parse(text, options)?;
    if let Some(limit) = max_node_names {
        let total = parsed
            .records
            .iter()
            .fold(0u64, |total, r| total.saturating_add(names_in(&r.run)));
        if total > limit {
            return Err(ImportError::TooManyNodeNames { total, limit });
        }
    }
    let mut summary = Summary {
        lines: parsed.lines,
        steps: parsed.steps,
        ..Summary::default()
    };
    summary
        .skipped
        .extend(parsed.skipped.into_iter().map(|s| SkippedLine {
            line: s.line,
            job_id: s.job_id,
            reason: s.reason,
        }));
    let now = Utc::now();
    let total = parsed.records.len();
    let mut records = parsed.records.into_iter().peekable();
    let mut apps = BTreeSet::new();
    let mut done = 0;
    progress(done, total);
    while records.peek().is_some() {
        let mut chunk = Vec::new();
        let mut names = 0;
        while chunk.len() < CHUNK && names < MAX_NODE_NAMES_PER_REQUEST as usize {
            let Some(record) = records.next() else { break };
            let job_id = record.run.job_id.clone();
            match ingest::validate(record.run, now) {
                Ok(run) => {
                    names += run.node_list.as_ref().map_or(0, Vec::len);
                    chunk.push((record.line, run));
                }
                Err(errors) => {
                    summary.skipped.push(SkippedLine {
                        line: record.line,
                        job_id: Some(job_id),
                        reason: reasons(&errors),
                    });
                    done += 1;
                }
            }
        }
        if chunk.is_empty() {
            progress(done, total);
            break;
        }
        let lines: Vec<(usize, String, String)> = chunk
            .iter()
            .map(|(line, run)| (*line, run.job_id.clone(), run.app.clone()))
            .collect();
        let ingested =
            ingest::ingest(pool, chunk.into_iter().map(|(_, r)| Ok(r)).collect(), false).await?;
        summary.removed_apps.extend(ingested.removed_apps);
        for ((line, job_id, app), outcome) in lines.into_iter().zip(ingested.outcomes) {
            match outcome {
                Outcome::Created(_) => {
                    summary.created += 1;
                    apps.insert(app);
                }
                Outcome::Duplicate(_) => summary.duplicate += 1,
                Outcome::Conflict { differences, .. } => summary.skipped.push(SkippedLine {
                    line,
                    job_id: Some(job_id),
                    reason: format!(
                        "already stored with other values: {}",
                        reasons(&differences)
                    ),
                }),
                Outcome::EarlierAttempt(error) => summary.skipped.push(SkippedLine {
                    line,
                    job_id: Some(job_id),
                    reason: error.reason,
                }),
                Outcome::Invalid(errors) => summary.skipped.push(SkippedLine {
                    line,
                    job_id: Some(job_id),
                    reason: reasons(&errors),
                }),
                Outcome::Withheld => {}
            }
            done += 1;
        }
        progress(done, total);
    }
    summary.skipped.sort_by_key(|s| s.line);
    summary.apps = apps.into_iter().collect();
    Ok(summary)
}

/// The node names a parsed run's list would expand to; 0 when it does not
/// parse or names more than one list may (`hostlist::MAX_HOSTS`): that run
/// is refused on its own, and must not make the whole import too large.
fn names_in(run: &RunDraft) -> u64 {
    let names = match &run.node_list {
        Some(NodeListDraft::Hostlist(list)) => crate::hostlist::count(list).unwrap_or(0),
        Some(NodeListDraft::Names(names)) => names.len() as u64,
        None => 0,
    };
    if names > crate::hostlist::MAX_HOSTS as u64 {
        0
    } else {
        names
    }
}

fn reasons(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

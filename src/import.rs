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

use crate::ingest::{self, Outcome};
use crate::sacct::{self, HeaderError, Options};
use crate::validate::FieldError;

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
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Import `sacct --parsable2` output; `progress(done, total)` is called
/// after each stored chunk of runs.
pub async fn sacct(
    pool: &PgPool,
    text: &str,
    options: &Options,
    mut progress: impl FnMut(usize, usize),
) -> Result<Summary, ImportError> {
    let parsed = sacct::parse(text, options)?;
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
    let mut valid = Vec::with_capacity(parsed.records.len());
    for record in parsed.records {
        let job_id = record.run.job_id.clone();
        match ingest::validate(record.run, now) {
            Ok(run) => valid.push((record.line, run)),
            Err(errors) => summary.skipped.push(SkippedLine {
                line: record.line,
                job_id: Some(job_id),
                reason: reasons(&errors),
            }),
        }
    }
    let total = valid.len();
    let mut apps = BTreeSet::new();
    let mut done = 0;
    progress(done, total);
    while !valid.is_empty() {
        let rest = valid.split_off(valid.len().min(CHUNK));
        let chunk = std::mem::replace(&mut valid, rest);
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

fn reasons(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

//! Slurm accounting output (`sacct --parsable2`) read as runs.
//!
//! This module only parses: it does no IO and touches no database. Each job
//! becomes a [`RunDraft`] tagged with its line number; the caller validates
//! the drafts with [`crate::ingest::validate`] (which checks identifiers,
//! expands node lists and applies the EtS = APC × TtS rule) and can report any
//! failure against the line it came from.
//!
//! # Input
//!
//! The first non-blank line is the header: field names separated by `|`,
//! matched without regard to case, in any order. Every further non-blank line
//! is a record with as many `|`-separated fields as the header; a record with
//! another number of fields is skipped (even one that looks like a job step),
//! and so is one with an empty JobID. Blank lines are ignored. Output of
//! `sacct --parsable` (one `|` more at the end of every line) is read too.
//!
//! The header must name `JobID`, `State` and `ConsumedEnergyRaw`, and the field
//! the application tag is taken from (`JobName` by default); otherwise nothing
//! is read and the error names every missing field. Also read, when present:
//! `NNodes`, `NodeList`, `ElapsedRaw`, `Elapsed`, `Start`, `End`, `Account`,
//! `Comment`, `WCKey` and `Cluster`. `Partition` is recognised but not
//! imported; any other field is ignored. A suitable command is
//!
//! ```text
//! sacct --parsable2 --allusers --starttime=2026-03-01 \
//!   --format=JobID,JobName,Account,Partition,NNodes,NodeList,State,Start,End,ElapsedRaw,ConsumedEnergyRaw,Cluster
//! ```
//!
//! # Jobs, steps, arrays
//!
//! A JobID containing `.` (`123.batch`, `123.extern`, `123.0`, `123_4.batch`)
//! is a job step, not a run. Steps are never imported and never reported as
//! skipped; they are only counted. The one use of a step is its energy: when
//! a job's own `ConsumedEnergyRaw` is empty or 0, the energy of its `extern`
//! step is used instead, if positive, because the extern step spans the whole
//! allocation on every node. A step whose job is not in the input is just
//! counted.
//!
//! An array task (`123_4`) and a heterogeneous job component (`123+0`) are
//! jobs in their own right, keyed by their full JobID.
//!
//! When one job is listed on several lines, the first line in an imported
//! state is the job and every later one is skipped ("JobID 123 appears
//! again (first on line 5)"), whatever became of the first after that.
//! Lines in other states are skipped for their state and claim nothing:
//! `sacct --duplicates` lists a requeued job's earlier attempts (REQUEUED,
//! NODE_FAIL) before the one that completed, which is the run. A job is its
//! JobID on its source (below):
//! `sacct --clusters` numbers jobs per cluster, so the same JobID on two
//! clusters is two jobs, and a step belongs to the job of its own cluster,
//! and to the attempt of that job listed last before it.
//!
//! # From a job to a run
//!
//! - **State**: the first word of `State`, upper-cased (`CANCELLED by 1234`
//!   is `CANCELLED`), must be one of the states imported (by default only
//!   `COMPLETED`). A job in another state (PENDING, RUNNING, FAILED, TIMEOUT,
//!   OUT_OF_MEMORY, NODE_FAIL, CANCELLED...) is skipped for that reason alone.
//!   Only states of a job that has ended can be imported (`ENDED_STATES`).
//! - **Application**: the `JobName` field, or `Comment` or `WCKey` when asked
//!   for. A leading `*` (Slurm's mark of a default WCKey) is removed. An empty
//!   value skips the job.
//! - **Energy**: `ConsumedEnergyRaw`, in joules (Slurm's `NO_VAL64` and
//!   `INFINITE64` markers count as empty). When it is empty or 0 the
//!   extern step's energy is used (see above); without one the job is
//!   skipped. A negative value or one that is not a number skips the job
//!   (the extern step does not stand in for a value that is wrong).
//! - **Nodes**: `NNodes`, a whole number of at least 1; otherwise (absent
//!   included) the job is skipped.
//! - **Node list**: `NodeList` unless empty or `None assigned`, as a Slurm
//!   hostlist (`cn[001-004]`), expanded and checked against `NNodes` during
//!   validation.
//! - **Duration**: `ElapsedRaw` in seconds; when that is absent, empty or 0,
//!   `Elapsed` (`[D-]HH:MM:SS` or `MM:SS`); when that is too, `End` − `Start`.
//!   No positive duration skips the job, and so does an `ElapsedRaw` or
//!   `Elapsed` that cannot be read.
//! - **Start and end**: `Start` and `End` as `YYYY-MM-DDTHH:MM:SS` (sacct's
//!   standard format), a local time without zone, converted to UTC with the
//!   given offset (UTC by default). `Unknown`, `None` and empty mean not
//!   known; any other form skips the job (run sacct with
//!   `SLURM_TIME_FORMAT=standard`).
//! - **Source** (the system name): the one given, else the `Cluster` field
//!   when non-empty, else `slurm`.
//! - **Account**: the `Account` field when non-empty.
//!
//! A job whose state is imported but which has other problems is skipped
//! with all of them at once, separated by `; `. Field values are trimmed of
//! surrounding whitespace.

use std::collections::HashMap;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Offset, Utc};

use crate::ingest::{NodeListDraft, RunDraft};

/// The field the application tag is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AppFrom {
    /// `JobName`, the job's name (`sbatch --job-name`).
    #[default]
    #[value(name = "jobname")]
    JobName,
    /// `Comment` (`sbatch --comment`).
    #[value(name = "comment")]
    Comment,
    /// `WCKey`, the workload characterisation key (`sbatch --wckey`).
    #[value(name = "wckey")]
    WCKey,
}

impl AppFrom {
    /// The sacct field name.
    pub fn field(self) -> &'static str {
        match self {
            AppFrom::JobName => "JobName",
            AppFrom::Comment => "Comment",
            AppFrom::WCKey => "WCKey",
        }
    }
}

/// How sacct records become runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The field the application tag is taken from.
    pub app_from: AppFrom,
    /// Job states imported (first word of `State`, compared upper-cased).
    pub states: Vec<String>,
    /// The system name; when `None`, the `Cluster` field, else `slurm`.
    pub source: Option<String>,
    /// The offset of the local times in `Start` and `End` from UTC.
    pub utc_offset: FixedOffset,
    /// The line number of the text's first line: 1, or more when the text
    /// is a part of a longer input (its header then stands in for the line
    /// before the part), so that every number reported is the input's.
    pub first_line: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            app_from: AppFrom::default(),
            states: vec!["COMPLETED".to_owned()],
            source: None,
            utc_offset: Utc.fix(),
            first_line: 1,
        }
    }
}

/// The job states sacct writes (the first word of `State`; slurm.conf's
/// `JOB_STATE_*` names): a state outside them, a typo, would skip every
/// job without a word.
const SLURM_STATES: [&str; 24] = [
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "COMPLETING",
    "CONFIGURING",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PENDING",
    "PREEMPTED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "RESV_DEL_HOLD",
    "REVOKED",
    "RUNNING",
    "SIGNALING",
    "SPECIAL_EXIT",
    "STAGE_OUT",
    "STOPPED",
    "SUSPENDED",
    "TIMEOUT",
];

/// The states of a job (or of one attempt of it) that has ended: the only
/// ones a run can be imported in. A run is one finished execution, stored
/// once; a RUNNING job's time and energy so far would be kept and its real
/// end refused as a conflict.
const ENDED_STATES: [&str; 12] = [
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "REQUEUED",
    "REVOKED",
    "SPECIAL_EXIT",
    "TIMEOUT",
];

impl Options {
    /// Options from a user's choices: `states` upper-cased (each a Slurm
    /// state name), `source` an identifier. The errors name `states` and
    /// `source`.
    pub fn checked<'a>(
        app_from: AppFrom,
        states: impl IntoIterator<Item = &'a str>,
        source: Option<String>,
        utc_offset: FixedOffset,
    ) -> Result<Options, Vec<crate::validate::FieldError>> {
        let mut errors = crate::validate::Errors::default();
        let states: Vec<String> = states
            .into_iter()
            .map(|s| s.trim().to_ascii_uppercase())
            .collect();
        if let Some(bad) = states.iter().find(|s| !SLURM_STATES.contains(&s.as_str())) {
            errors.add(
                "states",
                format!(
                    "{bad:?} is not a Slurm job state as sacct writes it: one of {}",
                    SLURM_STATES.join(", ")
                ),
            );
        } else if let Some(bad) = states.iter().find(|s| !ENDED_STATES.contains(&s.as_str())) {
            errors.add(
                "states",
                format!(
                    "{bad} is not a state of a job that has ended: its time and energy are \
                     not yet final, and a run once stored is not replaced; import one of {}",
                    ENDED_STATES.join(", ")
                ),
            );
        }
        if let Some(source) = &source {
            errors.check(
                "source",
                crate::validate::identifier(source, crate::validate::SOURCE_MAX),
            );
        }
        errors.into_result(Options {
            app_from,
            states,
            source,
            utc_offset,
            first_line: 1,
        })
    }
}

/// A job read as a run, with the line it came from.
#[derive(Debug, Clone)]
pub struct Record {
    /// 1-based line number in the input.
    pub line: usize,
    pub run: RunDraft,
}

/// A line that gives no run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// 1-based line number in the input.
    pub line: usize,
    /// The JobID on the line, when there is one.
    pub job_id: Option<String>,
    pub reason: String,
}

/// What one input gave.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Runs, in input order.
    pub records: Vec<Record>,
    /// Lines skipped, by line number.
    pub skipped: Vec<Skipped>,
    /// Job-step lines (counted, never imported).
    pub steps: usize,
    /// Data lines read: every non-blank line after the header. Each is a
    /// record, a skipped line or a step.
    pub lines: usize,
}

/// Why an input cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("the input is empty: expected a `sacct --parsable2` header line of field names")]
    Empty,
    #[error(
        "the header (line {line}) lacks the required field(s) {}; \
         run sacct with --parsable2 --format=JobID,JobName,State,ConsumedEnergyRaw,...",
        .fields.join(", ")
    )]
    MissingFields {
        /// 1-based line number of the header.
        line: usize,
        /// The missing field names, as sacct spells them.
        fields: Vec<&'static str>,
    },
}

/// Where each recognised field is in a record.
struct Columns {
    count: usize,
    job_id: usize,
    state: usize,
    energy: usize,
    app: usize,
    account: Option<usize>,
    nnodes: Option<usize>,
    node_list: Option<usize>,
    elapsed_raw: Option<usize>,
    elapsed: Option<usize>,
    start: Option<usize>,
    end: Option<usize>,
    cluster: Option<usize>,
}

impl Columns {
    fn from_header(line: usize, header: &str, app_from: AppFrom) -> Result<Self, HeaderError> {
        let names: Vec<&str> = header.split('|').map(str::trim).collect();
        let find = |name: &str| names.iter().position(|n| n.eq_ignore_ascii_case(name));
        let mut missing = Vec::new();
        let mut required = |name: &'static str| {
            let found = find(name);
            if found.is_none() && !missing.contains(&name) {
                missing.push(name);
            }
            found.unwrap_or(0)
        };
        let job_id = required("JobID");
        let app = required(app_from.field());
        let state = required("State");
        let energy = required("ConsumedEnergyRaw");
        if !missing.is_empty() {
            return Err(HeaderError::MissingFields {
                line,
                fields: missing,
            });
        }
        Ok(Self {
            count: names.len(),
            job_id,
            state,
            energy,
            app,
            account: find("Account"),
            nnodes: find("NNodes"),
            node_list: find("NodeList"),
            elapsed_raw: find("ElapsedRaw"),
            elapsed: find("Elapsed"),
            start: find("Start"),
            end: find("End"),
            cluster: find("Cluster"),
        })
    }
}

/// One record's fields, trimmed.
struct Row<'a> {
    line: usize,
    fields: Vec<&'a str>,
}

impl<'a> Row<'a> {
    /// The value of a required field.
    fn get(&self, column: usize) -> &'a str {
        self.fields.get(column).copied().unwrap_or("")
    }

    /// The value of an optional field, `None` when the header lacks it.
    fn opt(&self, column: Option<usize>) -> Option<&'a str> {
        column.and_then(|c| self.fields.get(c).copied())
    }

    /// The value of an optional field, `None` when absent or empty.
    fn non_empty(&self, column: Option<usize>) -> Option<&'a str> {
        self.opt(column).filter(|v| !v.is_empty())
    }
}

/// Whether a line holds nothing to read: white space, or a byte-order mark
/// alone (an editor's, before a blank first line).
pub fn blank(line: &str) -> bool {
    line.trim_start_matches('\u{feff}').trim().is_empty()
}

/// The header's columns, and whether its lines end with a `|`.
fn read_header(
    line: usize,
    header: &str,
    app_from: AppFrom,
) -> Result<(Columns, bool), HeaderError> {
    let header = header.trim_start_matches('\u{feff}');
    // `sacct --parsable` ends every line, the header included, with a `|`.
    let trailing_bar = header.ends_with('|');
    let header = header.strip_suffix('|').unwrap_or(header);
    Ok((Columns::from_header(line, header, app_from)?, trailing_bar))
}

/// Where a long input may be cut into parts imported one after another (the
/// command line's import of a large file): before a job's line, never
/// before a step's, so that each job keeps its steps (and their energy).
pub struct JobStarts {
    job_id: usize,
}

impl JobStarts {
    /// From the input's header line (`line`, 1-based), as `parse` reads it.
    pub fn new(line: usize, header: &str, app_from: AppFrom) -> Result<Self, HeaderError> {
        let (columns, _) = read_header(line, header, app_from)?;
        Ok(Self {
            job_id: columns.job_id,
        })
    }

    /// The JobID of a job's data line: one that is not empty and names no
    /// step (`81001`, `4567_1`; not `81001.batch`).
    pub fn job<'l>(&self, line: &'l str) -> Option<&'l str> {
        line.split('|')
            .nth(self.job_id)
            .map(str::trim)
            .filter(|id| !id.is_empty() && !id.contains('.'))
    }

    /// Whether a data line is a job's.
    pub fn at(&self, line: &str) -> bool {
        self.job(line).is_some()
    }
}

/// Read `sacct --parsable2` output. Only a missing or incomplete header is an
/// error; every other problem skips its line, with the reason.
pub fn parse(text: &str, options: &Options) -> Result<Parsed, HeaderError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + options.first_line, line))
        .filter(|(_, line)| !blank(line));
    let Some((header_line, header)) = lines.next() else {
        return Err(HeaderError::Empty);
    };
    let (columns, trailing_bar) = read_header(header_line, header, options.app_from)?;

    let mut parsed = Parsed {
        records: Vec::new(),
        skipped: Vec::new(),
        steps: 0,
        lines: 0,
    };
    // First pass: split records, count steps and note extern-step energies.
    let mut jobs: Vec<Row<'_>> = Vec::new();
    // Keyed by cluster and job: one sacct listing may span clusters
    // (`--clusters`), each with its own job numbers.
    // An extern step belongs to the attempt whose job line came last
    // before it (`sacct --duplicates` lists each attempt of a requeued job
    // with its steps): `by_attempt`, by position in `jobs`. One listed
    // before any line of its job counts for the job (`extern_energy`).
    let mut extern_energy: HashMap<(&str, &str), f64> = HashMap::new();
    let mut by_attempt: HashMap<usize, f64> = HashMap::new();
    let mut latest: HashMap<(&str, &str), usize> = HashMap::new();
    for (line, text) in lines {
        parsed.lines += 1;
        let text = match text.strip_suffix('|') {
            Some(stripped) if trailing_bar => stripped,
            _ => text,
        };
        let fields: Vec<&str> = text.split('|').map(str::trim).collect();
        let row = Row { line, fields };
        let job_id = row.get(columns.job_id);
        if row.fields.len() != columns.count {
            parsed.skipped.push(Skipped {
                line,
                job_id: (!job_id.is_empty()).then(|| job_id.to_owned()),
                reason: format!(
                    "has {} fields, the header has {}",
                    row.fields.len(),
                    columns.count
                ),
            });
            continue;
        }
        if job_id.is_empty() {
            parsed.skipped.push(Skipped {
                line,
                job_id: None,
                reason: "JobID is empty".to_owned(),
            });
            continue;
        }
        if let Some((job, step)) = job_id.split_once('.') {
            parsed.steps += 1;
            if step == "extern"
                && let Ok(Some(energy)) = energy(row.get(columns.energy))
                && energy > 0.0
            {
                let cluster = row.opt(columns.cluster).unwrap_or("");
                match latest.get(&(cluster, job)) {
                    Some(&attempt) => {
                        by_attempt.entry(attempt).or_insert(energy);
                    }
                    None => {
                        extern_energy.entry((cluster, job)).or_insert(energy);
                    }
                }
            }
            continue;
        }
        latest.insert((row.opt(columns.cluster).unwrap_or(""), job_id), jobs.len());
        jobs.push(row);
    }

    // Second pass: jobs.
    let states: Vec<String> = options
        .states
        .iter()
        .map(|s| s.trim().to_ascii_uppercase())
        .collect();
    // A run is keyed by its source and job id: a JobID listed again for
    // another source (cluster) is another job.
    let mut first_line: HashMap<(&str, &str), usize> = HashMap::new();
    for (attempt, row) in jobs.iter().enumerate() {
        let job_id = row.get(columns.job_id);
        let cluster = row.opt(columns.cluster).unwrap_or("");
        let skip = |reason: String| Skipped {
            line: row.line,
            job_id: Some(job_id.to_owned()),
            reason,
        };
        let source = source_of(row, &columns, options);
        // A record in a state not imported (a requeued attempt listed by
        // `sacct --duplicates`) does not claim the JobID: the attempt that
        // completed is the run.
        if let Err(reason) = check_state(row.get(columns.state), &states) {
            parsed.skipped.push(skip(reason));
            continue;
        }
        if let Some(&first) = first_line.get(&(source, job_id)) {
            let reason = format!("JobID {job_id} appears again (first on line {first})");
            parsed.skipped.push(skip(reason));
            continue;
        }
        let extern_energy = by_attempt
            .get(&attempt)
            .or_else(|| extern_energy.get(&(cluster, job_id)))
            .copied();
        // Only a line that is a run claims the JobID: one skipped for its
        // own fault (no energy, say) leaves a later attempt's to be the run.
        match job_run(row, &columns, options, extern_energy) {
            Ok(run) => {
                first_line.insert((source, job_id), row.line);
                parsed.records.push(Record {
                    line: row.line,
                    run,
                });
            }
            Err(problems) => parsed.skipped.push(skip(problems.join("; "))),
        }
    }
    parsed.skipped.sort_by_key(|s| s.line);
    Ok(parsed)
}

fn check_state(state: &str, imported: &[String]) -> Result<(), String> {
    let Some(word) = state.split_whitespace().next() else {
        return Err("State is empty".to_owned());
    };
    let word = word.to_ascii_uppercase();
    if imported.contains(&word) {
        Ok(())
    } else {
        let importing = if imported.is_empty() {
            "no state".to_owned()
        } else {
            imported.join(", ")
        };
        Err(format!(
            "state {word} is not imported (importing {importing})"
        ))
    }
}

/// The system a job line's run is stored under: the one given, else the
/// line's cluster, else `slurm`.
fn source_of<'a>(row: &Row<'a>, columns: &Columns, options: &'a Options) -> &'a str {
    match &options.source {
        Some(source) => source,
        None => row.non_empty(columns.cluster).unwrap_or("slurm"),
    }
}

/// The run of one job line whose state is imported, or every problem with it.
fn job_run(
    row: &Row<'_>,
    columns: &Columns,
    options: &Options,
    extern_energy: Option<f64>,
) -> Result<RunDraft, Vec<String>> {
    let mut problems = Vec::new();

    let field = options.app_from.field();
    let mut app = row.get(columns.app);
    if options.app_from == AppFrom::WCKey {
        app = app.strip_prefix('*').unwrap_or(app).trim();
    }
    if app.is_empty() {
        problems.push(format!("{field} is empty"));
    }
    // Free text: the application it stands for, as the Slurm scripts map it.
    // A name without a letter or digit stands for the catch-all application,
    // whose jobs have nothing in common: no history for it.
    let tag = crate::validate::tag_from_name(app);
    if !app.is_empty() && tag == crate::validate::UNNAMED_APP && app != tag {
        problems.push(format!("{field} {app:?} has no letter or digit"));
    }
    let app = tag;

    let nodes = match row.opt(columns.nnodes) {
        None => Err("no NNodes field in the header".to_owned()),
        Some("") => Err("NNodes is empty".to_owned()),
        Some(value) => match value.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(n),
            Ok(n) => Err(format!("NNodes is {n}; a run needs at least one node")),
            Err(_) => Err(format!("NNodes {value:?} is not a whole number")),
        },
    };
    let nodes = nodes.map_err(|p| problems.push(p)).unwrap_or(0);

    let node_list = row
        .non_empty(columns.node_list)
        .filter(|list| !list.eq_ignore_ascii_case("None assigned"))
        .map(|list| NodeListDraft::Hostlist(list.to_owned()));

    let raw_energy = row.get(columns.energy);
    let energy_j = match energy(raw_energy) {
        Ok(Some(e)) if e > 0.0 => Some(e),
        Ok(Some(e)) if e < 0.0 => {
            problems.push(format!("ConsumedEnergyRaw {raw_energy} is negative"));
            None
        }
        // Empty or 0: the extern step's energy stands in.
        Ok(own) => {
            if extern_energy.is_none() {
                let own = if own.is_none() { "empty" } else { "0" };
                problems.push(format!(
                    "ConsumedEnergyRaw is {own} and there is no extern step with energy"
                ));
            }
            extern_energy
        }
        Err(problem) => {
            problems.push(problem);
            None
        }
    };

    let mut read_time = |name: &str, column: Option<usize>| {
        time(row.opt(column), name, options.utc_offset)
            .map_err(|p| problems.push(p))
            .ok()
            .flatten()
    };
    let started_at = read_time("Start", columns.start);
    let ended_at = read_time("End", columns.end);

    let duration_s = duration(row, columns, started_at, ended_at)
        .map_err(|p| problems.push(p))
        .ok();

    if !problems.is_empty() {
        return Err(problems);
    }
    // ElapsedRaw leaves out the time a job was suspended (gang scheduling,
    // `scontrol suspend`, preemption by suspension), End − Start does not:
    // such a job ran for its elapsed time and is stored with that duration
    // and its start, without an end that would contradict it.
    let ended_at = match (started_at, ended_at, duration_s) {
        (Some(start), Some(end), Some(ran))
            if ran < (end - start).as_seconds_f64() - suspension_slack(start, end) =>
        {
            None
        }
        _ => ended_at,
    };
    let source = source_of(row, columns, options).to_owned();
    Ok(RunDraft {
        app,
        source,
        job_id: row.get(columns.job_id).to_owned(),
        nodes,
        node_list,
        energy_j,
        avg_power_w: None,
        duration_s,
        started_at,
        ended_at,
        quality: None,
        account: row.non_empty(columns.account).map(str::to_owned),
    })
}

/// Slurm's markers for "no value" and "infinite" in a 64-bit counter
/// (`NO_VAL64`, `INFINITE64`), which some versions print for energy that
/// was not measured: missing, not 1.8e19 joules.
const NO_VALUE_64: [&str; 2] = ["18446744073709551614", "18446744073709551615"];

/// `ConsumedEnergyRaw`: `None` when empty (or Slurm's no-value marker),
/// else a finite number of joules.
fn energy(value: &str) -> Result<Option<f64>, String> {
    if value.is_empty() || NO_VALUE_64.contains(&value) {
        return Ok(None);
    }
    match value.parse::<f64>() {
        Ok(e) if e.is_finite() => Ok(Some(e)),
        Ok(_) | Err(_) => Err(format!(
            "ConsumedEnergyRaw {value:?} is not a number of joules"
        )),
    }
}

/// A `Start` or `End` time: `None` when not known.
fn time(
    value: Option<&str>,
    name: &str,
    offset: FixedOffset,
) -> Result<Option<DateTime<Utc>>, String> {
    let value = match value {
        None | Some("") => return Ok(None),
        Some(v) if v.eq_ignore_ascii_case("Unknown") || v.eq_ignore_ascii_case("None") => {
            return Ok(None);
        }
        Some(v) => v,
    };
    let local = NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S").map_err(|_| {
        format!(
            "{name} {value:?} is not a YYYY-MM-DDTHH:MM:SS time \
             (run sacct with SLURM_TIME_FORMAT=standard)"
        )
    })?;
    local
        .checked_sub_offset(offset)
        .map(|utc| Some(utc.and_utc()))
        .ok_or_else(|| format!("{name} {value:?} is out of range"))
}

/// How much shorter than End − Start a job's elapsed time may be before it
/// counts as suspended for the rest: what ingestion allows a run's
/// duration to differ from its window by.
fn suspension_slack(start: DateTime<Utc>, end: DateTime<Utc>) -> f64 {
    (crate::ingest::CONSISTENCY_TOLERANCE * (end - start).as_seconds_f64()).max(1.0)
}

/// `ElapsedRaw`, else `Elapsed`, else `End` − `Start`, in seconds.
fn duration(
    row: &Row<'_>,
    columns: &Columns,
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
) -> Result<f64, String> {
    if let Some(raw) = row.non_empty(columns.elapsed_raw) {
        match whole(raw) {
            Some(0) => {}
            Some(seconds) => return Ok(seconds as f64),
            None => {
                return Err(format!(
                    "ElapsedRaw {raw:?} is not a whole number of seconds"
                ));
            }
        }
    }
    if let Some(elapsed) = row.non_empty(columns.elapsed) {
        match elapsed_seconds(elapsed) {
            Some(0) => {}
            Some(seconds) => return Ok(seconds as f64),
            None => return Err(format!("Elapsed {elapsed:?} is not [D-]HH:MM:SS or MM:SS")),
        }
    }
    if let (Some(start), Some(end)) = (start, end)
        && end > start
    {
        return Ok((end - start).as_seconds_f64());
    }
    Err(
        "no duration: ElapsedRaw and Elapsed are absent, empty or 0, \
         and End − Start is not positive or not known"
            .to_owned(),
    )
}

/// Digits only (no sign), as a number.
fn whole(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// Slurm's elapsed time, `[D-]HH:MM:SS` or `MM:SS`, in seconds.
fn elapsed_seconds(value: &str) -> Option<u64> {
    let (days, clock) = match value.split_once('-') {
        Some((days, clock)) => (Some(whole(days)?), clock),
        None => (None, value),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let (hours, minutes, seconds) = match (parts.as_slice(), days) {
        ([h, m, s], _) => (whole(h)?, whole(m)?, whole(s)?),
        ([m, s], None) => (0, whole(m)?, whole(s)?),
        _ => return None,
    };
    if minutes >= 60 || seconds >= 60 {
        return None;
    }
    days.unwrap_or(0)
        .checked_mul(86_400)?
        .checked_add(hours.checked_mul(3_600)?)?
        .checked_add(minutes * 60 + seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = include_str!("../tests/fixtures/sacct/cluster.txt");
    const REORDERED: &str = include_str!("../tests/fixtures/sacct/reordered.txt");

    fn parse_default(text: &str) -> Parsed {
        parse(text, &Options::default()).expect("a valid header")
    }

    fn record<'a>(parsed: &'a Parsed, job_id: &str) -> &'a Record {
        parsed
            .records
            .iter()
            .find(|r| r.run.job_id == job_id)
            .unwrap_or_else(|| panic!("no record for {job_id}"))
    }

    /// Each imported record's job ID and application.
    fn job_apps(parsed: &Parsed) -> Vec<(&str, &str)> {
        parsed
            .records
            .iter()
            .map(|r| (r.run.job_id.as_str(), r.run.app.as_str()))
            .collect()
    }

    fn skipped_lines(parsed: &Parsed) -> Vec<(usize, &str)> {
        parsed
            .skipped
            .iter()
            .map(|s| (s.line, s.job_id.as_deref().unwrap_or("-")))
            .collect()
    }

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Parsed in parts cut before each job's line (but not between lines of
    /// one JobID: `sacct --duplicates`), the header repeated and numbered as
    /// the line before the part, the fixtures give what they give whole: the
    /// same runs, energies from steps included, and the same skipped lines
    /// with the same reasons (a repeat names its first line by the input's
    /// number).
    #[test]
    fn parts_cut_at_job_lines_parse_as_the_whole() {
        // 81004 again, right after its first record's steps.
        let repeated = CLUSTER.replacen(
            "4567_1|",
            "81004|cp2k|chem01|compute|1|cn005|COMPLETED|2026-03-02T11:40:00|\
             2026-03-02T11:55:00|900|468000|hawk\n4567_1|",
            1,
        );
        for text in [CLUSTER, REORDERED, &repeated] {
            let whole = parse_default(text);
            let lines: Vec<&str> = text.lines().collect();
            let starts = JobStarts::new(1, lines[0], AppFrom::JobName).unwrap();
            let mut cuts = Vec::new();
            let mut last = None;
            for (i, line) in lines.iter().enumerate().skip(2) {
                if let Some(job) = starts.job(line) {
                    if last != Some(job) {
                        cuts.push(i);
                    }
                    last = Some(job);
                }
            }
            cuts.push(lines.len());
            assert!(cuts.len() > 4, "{cuts:?}");
            let (mut records, mut skipped, mut steps) = (Vec::new(), Vec::new(), 0);
            let mut from = 1;
            for to in cuts {
                let part = std::iter::once(lines[0])
                    .chain(lines[from..to].iter().copied())
                    .collect::<Vec<_>>()
                    .join("\n");
                // lines[from] is line from + 1: the header stands for line from.
                let options = Options {
                    first_line: from,
                    ..Options::default()
                };
                let parsed = parse(&part, &options).unwrap();
                records.extend(parsed.records);
                skipped.extend(parsed.skipped);
                steps += parsed.steps;
                from = to;
            }
            assert_eq!(format!("{records:?}"), format!("{:?}", whole.records));
            assert_eq!(skipped, whole.skipped);
            assert_eq!(steps, whole.steps);
        }
        assert!(
            parse_default(&repeated)
                .skipped
                .iter()
                .any(|s| s.reason.contains("81004 appears again (first on line 14)")),
            "the repeat is there to be found"
        );
        // A byte-order mark alone on a first line is a blank line.
        let marked = parse_default(&format!("\u{feff}\n{CLUSTER}"));
        let whole = parse_default(CLUSTER);
        assert_eq!(marked.records.len(), whole.records.len());
        let lines = |p: &Parsed| p.skipped.iter().map(|s| s.line).collect::<Vec<_>>();
        let moved: Vec<usize> = lines(&whole).iter().map(|l| l + 1).collect();
        assert_eq!(lines(&marked), moved);
        // A step's line is not a job's; nor is a line without a JobID.
        let starts = JobStarts::new(1, "State|JobID|", AppFrom::JobName);
        assert!(starts.is_err(), "JobName and ConsumedEnergyRaw are missing");
        let starts = JobStarts::new(
            1,
            "JobName|JobID|State|ConsumedEnergyRaw|",
            AppFrom::JobName,
        )
        .unwrap();
        assert!(starts.at("a|81|COMPLETED|5|"));
        assert!(starts.at("a|4567_1|COMPLETED|5|"));
        assert!(!starts.at("a|81.extern|COMPLETED|5|"));
        assert!(!starts.at("a| |COMPLETED|5|"));
        assert!(!starts.at("a"));
    }

    const HEADER: &str = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw";

    #[test]
    fn the_cluster_fixture_gives_its_documented_counts() {
        let parsed = parse_default(CLUSTER);
        assert_eq!(parsed.lines, 44);
        assert_eq!(parsed.records.len(), 11);
        assert_eq!(parsed.skipped.len(), 7);
        assert_eq!(parsed.steps, 26);
        assert_eq!(
            parsed.lines,
            parsed.records.len() + parsed.skipped.len() + parsed.steps
        );
        let ids: Vec<&str> = parsed
            .records
            .iter()
            .map(|r| r.run.job_id.as_str())
            .collect();
        assert_eq!(
            ids,
            [
                "81001", "81002", "81003", "81004", "4567_1", "81005", "81013", "81014", "81015",
                "81016", "81017"
            ]
        );
        let lines: Vec<usize> = parsed.records.iter().map(|r| r.line).collect();
        assert_eq!(lines, [3, 7, 11, 14, 16, 19, 32, 35, 39, 41, 44]);
        assert_eq!(
            skipped_lines(&parsed),
            [
                (22, "81006"),
                (23, "81007"),
                (24, "81008"),
                (26, "81009"),
                (27, "81010"),
                (30, "81011"),
                (31, "81012"),
            ]
        );
    }

    #[test]
    fn a_cluster_record_carries_every_field() {
        let parsed = parse_default(CLUSTER);
        let run = &record(&parsed, "81002").run;
        assert_eq!(run.app, "gromacs");
        assert_eq!(run.source, "hawk");
        assert_eq!(run.nodes, 4);
        assert_eq!(
            run.node_list,
            Some(NodeListDraft::Hostlist("gpu[01,03-05]".into()))
        );
        assert_eq!(run.energy_j, Some(4_104_000.0));
        assert_eq!(run.avg_power_w, None);
        assert_eq!(run.duration_s, Some(1_800.0));
        assert_eq!(run.started_at, Some(utc("2026-03-02T08:15:00Z")));
        assert_eq!(run.ended_at, Some(utc("2026-03-02T08:45:00Z")));
        assert_eq!(run.quality, None);
        assert_eq!(run.account.as_deref(), Some("bio02"));

        let array = &record(&parsed, "4567_1").run;
        assert_eq!((array.app.as_str(), array.nodes), ("lammps", 2));
    }

    #[test]
    fn every_cluster_record_passes_validation() {
        let now = utc("2026-06-01T00:00:00Z");
        for record in parse_default(CLUSTER).records {
            let line = record.line;
            if let Err(errors) = crate::ingest::validate(record.run, now) {
                panic!("line {line}: {errors:?}");
            }
        }
    }

    #[test]
    fn a_job_without_energy_takes_its_extern_step_energy() {
        let parsed = parse_default(CLUSTER);
        // 81005 reports 0 J itself; its extern step 3 696 000 J.
        let folded = record(&parsed, "81005");
        assert_eq!(folded.line, 19);
        assert_eq!(folded.run.energy_j, Some(3_696_000.0));
        // A job with its own energy keeps it, even where the extern step differs.
        let text =
            format!("{HEADER}\n7|a|1|COMPLETED|10|500\n7.extern|extern|1|COMPLETED|10|900\n");
        assert_eq!(record(&parse_default(&text), "7").run.energy_j, Some(500.0));
        // An empty job energy is filled too; a zero extern energy does not fill it.
        let text = format!(
            "{HEADER}\n8|a|1|COMPLETED|10|\n8.extern|extern|1|COMPLETED|10|700\n\
             9|a|1|COMPLETED|10|0\n9.extern|extern|1|COMPLETED|10|0\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(record(&parsed, "8").run.energy_j, Some(700.0));
        assert_eq!(skipped_lines(&parsed), [(4, "9")]);
        // Other steps never fill it.
        let text = format!("{HEADER}\n10|a|1|COMPLETED|10|0\n10.batch|batch|1|COMPLETED|10|700\n");
        assert_eq!(skipped_lines(&parse_default(&text)), [(2, "10")]);
    }

    /// `sacct --duplicates` lists a requeued job's attempts, each with its
    /// steps: the attempt that completed takes its own extern step's
    /// energy, not the failed attempt's (review of 2026-11-29: 60 kJ of a
    /// five-minute attempt stood in for the 1.44 MJ of the run).
    #[test]
    fn a_requeued_job_takes_the_extern_energy_of_its_own_attempt() {
        let text = format!(
            "{HEADER}\n5001|a|2|NODE_FAIL|300|0\n5001.batch|batch|1|CANCELLED|300|0\n\
             5001.extern|extern|2|CANCELLED|300|60000\n5001|a|2|COMPLETED|3600|0\n\
             5001.batch|batch|1|COMPLETED|3600|0\n5001.extern|extern|2|COMPLETED|3600|1440000\n"
        );
        let parsed = parse_default(&text);
        let run = record(&parsed, "5001");
        assert_eq!(run.line, 5);
        assert_eq!(run.run.energy_j, Some(1_440_000.0));
        // Slurm's NO_VAL64 is no energy: the extern step stands in for it,
        // and as an extern step's energy it stands in for nothing.
        let text = format!(
            "{HEADER}\n3001|a|2|COMPLETED|3600|18446744073709551614\n\
             3001.extern|extern|2|COMPLETED|3600|2880000\n3002|a|2|COMPLETED|3600|0\n\
             3002.extern|extern|2|COMPLETED|3600|18446744073709551614\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(record(&parsed, "3001").run.energy_j, Some(2_880_000.0));
        assert_eq!(skipped_lines(&parsed), [(4, "3002")]);
        // An extern step listed before its job's line still counts for it.
        let text = format!("{HEADER}\n6.extern|extern|1|COMPLETED|10|700\n6|a|1|COMPLETED|10|0\n");
        assert_eq!(record(&parse_default(&text), "6").run.energy_j, Some(700.0));
    }

    /// A job suspended for part of its wall time: ElapsedRaw (3000 s) is
    /// the time it ran, End − Start (3600 s) includes the suspension. It is
    /// stored with its elapsed time and start, not skipped for the mismatch.
    #[test]
    fn a_suspended_job_is_stored_with_the_time_it_ran() {
        let text = "JobID|JobName|NNodes|State|Start|End|ElapsedRaw|ConsumedEnergyRaw\n\
                    2001|susp|1|COMPLETED|2026-11-20T10:00:00|2026-11-20T11:00:00|3000|900000\n\
                    2002|whole|1|COMPLETED|2026-11-20T10:00:00|2026-11-20T11:00:00|3600|900000\n";
        let parsed = parse_default(text);
        let run = &record(&parsed, "2001").run;
        assert_eq!(run.duration_s, Some(3000.0));
        assert_eq!(run.started_at, Some(utc("2026-11-20T10:00:00Z")));
        assert_eq!(run.ended_at, None);
        let now = utc("2026-11-29T00:00:00Z");
        assert!(crate::ingest::validate(run.clone(), now).is_ok());
        // Not suspended: its end is kept.
        let run = &record(&parsed, "2002").run;
        assert_eq!(run.ended_at, Some(utc("2026-11-20T11:00:00Z")));
    }

    /// `sacct --clusters=alpha,beta` numbers jobs per cluster: the same
    /// JobID on two clusters is two jobs, each with its own extern step
    /// (probe of 2026-11-27: beta's job was skipped as a repeat, and alpha's
    /// took beta's extern energy).
    #[test]
    fn the_same_job_id_on_two_clusters_is_two_jobs_with_their_own_steps() {
        let header = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw|Cluster";
        let text = format!(
            "{header}\n7|a|1|COMPLETED|10|0|alpha\n7.extern|extern|1|COMPLETED|10|900|beta\n\
             7.extern|extern|1|COMPLETED|10|360|alpha\n7|a|2|COMPLETED|10|0|beta\n\
             7|a|2|COMPLETED|10|0|beta\n"
        );
        let parsed = parse_default(&text);
        let runs: Vec<(&str, &str, Option<f64>)> = parsed
            .records
            .iter()
            .map(|r| (r.run.source.as_str(), r.run.job_id.as_str(), r.run.energy_j))
            .collect();
        assert_eq!(
            runs,
            [("alpha", "7", Some(360.0)), ("beta", "7", Some(900.0))]
        );
        // Listed again on the same cluster: a repeat.
        assert_eq!(skipped_lines(&parsed), [(6, "7")]);
        // With one source given for all, the two would be one run: a repeat.
        let options = Options {
            source: Some("hawk".into()),
            ..Options::default()
        };
        let parsed = parse(&text, &options).unwrap();
        assert_eq!(parsed.records.len(), 1);
        assert_eq!(parsed.records[0].run.energy_j, Some(360.0));
        assert_eq!(skipped_lines(&parsed), [(5, "7"), (6, "7")]);
    }

    #[test]
    fn skip_reasons_name_the_cause() {
        let parsed = parse_default(CLUSTER);
        let reasons: Vec<(usize, &str)> = parsed
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    22,
                    "ConsumedEnergyRaw is empty and there is no extern step with energy"
                ),
                (23, "NNodes is 0; a run needs at least one node"),
                (24, "state FAILED is not imported (importing COMPLETED)"),
                (26, "state CANCELLED is not imported (importing COMPLETED)"),
                (27, "state TIMEOUT is not imported (importing COMPLETED)"),
                (30, "state PENDING is not imported (importing COMPLETED)"),
                (31, "has 11 fields, the header has 12"),
            ]
        );
    }

    #[test]
    fn steps_are_counted_not_skipped_even_without_their_job() {
        let text = format!(
            "{HEADER}\n5.batch|batch|1|FAILED|10|\n5.extern|extern|1|COMPLETED|10|100\n\
             6_2.0|x|1|COMPLETED|10|abc\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(parsed.steps, 3);
        assert!(parsed.records.is_empty());
        assert!(parsed.skipped.is_empty());
        assert_eq!(parsed.lines, 3);
    }

    #[test]
    fn array_tasks_and_het_components_are_jobs_of_their_own() {
        let text = format!(
            "{HEADER}\n12_3|a|1|COMPLETED|10|100\n12_4|a|1|COMPLETED|10|100\n\
             13+0|b|2|COMPLETED|10|200\n13+1|b|1|COMPLETED|10|50\n13+0.extern|extern|2|COMPLETED|10|200\n"
        );
        let parsed = parse_default(&text);
        let ids: Vec<&str> = parsed
            .records
            .iter()
            .map(|r| r.run.job_id.as_str())
            .collect();
        assert_eq!(ids, ["12_3", "12_4", "13+0", "13+1"]);
        assert_eq!(parsed.steps, 1);
    }

    #[test]
    fn the_header_may_come_in_any_order_and_case_with_extra_fields() {
        let parsed = parse_default(REORDERED);
        assert_eq!(parsed.lines, 7);
        assert_eq!(parsed.steps, 2);
        let apps = job_apps(&parsed);
        assert_eq!(
            apps,
            [
                ("91001", "run.sh"),
                ("91002", "gmx"),
                ("91003", "wrf_d02"),
                ("91005", "cp2k.sh")
            ]
        );
        assert_eq!(skipped_lines(&parsed), [(7, "91004")]);
        // No Cluster field: the source is "slurm".
        assert!(parsed.records.iter().all(|r| r.run.source == "slurm"));
        // Elapsed stands in for ElapsedRaw: 1-02:00:00 and 45:30.
        assert_eq!(record(&parsed, "91002").run.duration_s, Some(93_600.0));
        assert_eq!(record(&parsed, "91003").run.duration_s, Some(2_730.0));

        let shouting = "jobid|STATE|consumedenergyraw|JOBNAME|nnodes|elapsedraw\n\
                        1|COMPLETED|100|a|1|10\n";
        let parsed = parse_default(shouting);
        let run = &record(&parsed, "1").run;
        assert_eq!((run.app.as_str(), run.nodes), ("a", 1));
        assert_eq!((run.energy_j, run.duration_s), (Some(100.0), Some(10.0)));
    }

    #[test]
    fn the_application_can_come_from_the_comment() {
        let options = Options {
            app_from: AppFrom::Comment,
            ..Options::default()
        };
        let parsed = parse(REORDERED, &options).unwrap();
        let apps = job_apps(&parsed);
        assert_eq!(
            apps,
            [("91001", "lammps-lj"), ("91003", "wrf"), ("91005", "cp2k")]
        );
        assert_eq!(skipped_lines(&parsed), [(4, "91002"), (7, "91004")]);
        assert_eq!(parsed.skipped[0].reason, "Comment is empty");
    }

    #[test]
    fn the_application_can_come_from_the_wckey_without_its_star() {
        let options = Options {
            app_from: AppFrom::WCKey,
            ..Options::default()
        };
        let parsed = parse(REORDERED, &options).unwrap();
        let apps = job_apps(&parsed);
        assert_eq!(
            apps,
            [("91001", "lammps"), ("91002", "gromacs"), ("91005", "cp2k")]
        );
        assert_eq!(skipped_lines(&parsed), [(6, "91003"), (7, "91004")]);
        assert_eq!(parsed.skipped[0].reason, "WCKey is empty");
        // A lone `*` is empty too.
        let text =
            "JobID|WCKey|NNodes|State|ElapsedRaw|ConsumedEnergyRaw\n1|*|1|COMPLETED|10|100\n";
        let parsed = parse(text, &options).unwrap();
        assert_eq!(parsed.skipped[0].reason, "WCKey is empty");
    }

    #[test]
    fn the_chosen_application_field_is_required_in_the_header() {
        let options = Options {
            app_from: AppFrom::WCKey,
            ..Options::default()
        };
        let error = parse(CLUSTER, &options).unwrap_err();
        assert_eq!(
            error,
            HeaderError::MissingFields {
                line: 1,
                fields: vec!["WCKey"]
            }
        );
    }

    #[test]
    fn local_times_are_converted_with_the_offset() {
        let options = Options {
            utc_offset: FixedOffset::east_opt(3_600).unwrap(),
            ..Options::default()
        };
        let parsed = parse(CLUSTER, &options).unwrap();
        let run = &record(&parsed, "81001").run;
        assert_eq!(run.started_at, Some(utc("2026-03-02T07:00:05Z")));
        assert_eq!(run.ended_at, Some(utc("2026-03-02T08:00:05Z")));

        let options = Options {
            utc_offset: FixedOffset::west_opt(5 * 3_600).unwrap(),
            ..Options::default()
        };
        let parsed = parse(CLUSTER, &options).unwrap();
        let run = &record(&parsed, "81001").run;
        assert_eq!(run.started_at, Some(utc("2026-03-02T13:00:05Z")));
    }

    #[test]
    fn times_out_of_range_or_in_another_format_skip_the_job() {
        let header = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw|Start|End";
        let text = format!(
            "{header}\n1|a|1|COMPLETED|10|100|+262142-12-31T23:59:59|Unknown\n\
             2|a|1|COMPLETED|10|100|03/02-08:00:00|None\n3|a|1|COMPLETED|10|100|Unknown|\n"
        );
        let options = Options {
            utc_offset: FixedOffset::west_opt(3_600).unwrap(),
            ..Options::default()
        };
        let parsed = parse(&text, &options).unwrap();
        assert_eq!(parsed.skipped.len(), 2);
        assert_eq!(
            parsed.skipped[0].reason,
            "Start \"+262142-12-31T23:59:59\" is out of range"
        );
        assert!(
            parsed.skipped[1]
                .reason
                .starts_with("Start \"03/02-08:00:00\" is not a YYYY-MM-DDTHH:MM:SS time"),
            "{}",
            parsed.skipped[1].reason
        );
        let run = &record(&parsed, "3").run;
        assert_eq!((run.started_at, run.ended_at), (None, None));
    }

    #[test]
    fn the_duration_falls_back_to_elapsed_then_end_minus_start() {
        let header = "JobID|JobName|NNodes|State|ElapsedRaw|Elapsed|ConsumedEnergyRaw|Start|End";
        let text = format!(
            "{header}\n\
             1|a|1|COMPLETED|70|00:01:00|100||\n\
             2|a|1|COMPLETED|0|2-00:00:01|100||\n\
             3|a|1|COMPLETED||00:00:00|100|2026-03-02T08:00:00|2026-03-02T08:05:00\n\
             4|a|1|COMPLETED|0|00:00:00|100||\n\
             5|a|1|COMPLETED|1.5||100||\n\
             6|a|1|COMPLETED||1-30:00|100||\n\
             7|a|1|COMPLETED||61:00|100||\n"
        );
        let parsed = parse_default(&text);
        let durations: Vec<(&str, Option<f64>)> = parsed
            .records
            .iter()
            .map(|r| (r.run.job_id.as_str(), r.run.duration_s))
            .collect();
        assert_eq!(
            durations,
            [
                ("1", Some(70.0)),
                ("2", Some(172_801.0)),
                ("3", Some(300.0))
            ]
        );
        let reasons: Vec<&str> = parsed.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "no duration: ElapsedRaw and Elapsed are absent, empty or 0, \
                 and End − Start is not positive or not known",
                "ElapsedRaw \"1.5\" is not a whole number of seconds",
                "Elapsed \"1-30:00\" is not [D-]HH:MM:SS or MM:SS",
                "Elapsed \"61:00\" is not [D-]HH:MM:SS or MM:SS",
            ]
        );
    }

    #[test]
    fn a_missing_required_header_field_is_named() {
        let error = parse(
            "JobID|JobName|NNodes|ElapsedRaw\n1|a|1|10\n",
            &Options::default(),
        )
        .unwrap_err();
        assert_eq!(
            error,
            HeaderError::MissingFields {
                line: 1,
                fields: vec!["State", "ConsumedEnergyRaw"]
            }
        );
        let message = error.to_string();
        assert!(message.contains("State, ConsumedEnergyRaw"), "{message}");
        // The header is the first non-blank line.
        let error = parse("\n\n  \nNNodes\n", &Options::default()).unwrap_err();
        assert_eq!(
            error,
            HeaderError::MissingFields {
                line: 4,
                fields: vec!["JobID", "JobName", "State", "ConsumedEnergyRaw"]
            }
        );
        assert_eq!(
            parse(" \n\n", &Options::default()).unwrap_err(),
            HeaderError::Empty
        );
        assert_eq!(
            parse("", &Options::default()).unwrap_err(),
            HeaderError::Empty
        );
    }

    #[test]
    fn a_record_with_the_wrong_number_of_fields_is_skipped() {
        let text = format!(
            "{HEADER}\n1|a|1|COMPLETED|10|100\n\n2|a|1|COMPLETED|10|100|extra\n3|a|1\n\
             4|a|1|COMPLETED|10|100\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(parsed.lines, 4);
        let ids: Vec<&str> = parsed
            .records
            .iter()
            .map(|r| r.run.job_id.as_str())
            .collect();
        assert_eq!(ids, ["1", "4"]);
        let reasons: Vec<(usize, &str)> = parsed
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (4, "has 7 fields, the header has 6"),
                (5, "has 3 fields, the header has 6")
            ]
        );
        assert_eq!(record(&parsed, "4").line, 6);
    }

    #[test]
    fn parsable_output_with_trailing_bars_is_read() {
        let text = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw|\n\
                    1|a|1|COMPLETED|10|100|\n2|a|1|COMPLETED|10|100\n";
        let parsed = parse_default(text);
        assert_eq!(parsed.records.len(), 2);
        assert!(parsed.skipped.is_empty());
        // Without a bar on the header, a last empty field is kept.
        let text = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw|Cluster\n\
                    1|a|1|COMPLETED|10|100|\n";
        let parsed = parse_default(text);
        assert_eq!(record(&parsed, "1").run.source, "slurm");
    }

    #[test]
    fn only_the_first_word_of_the_state_counts() {
        let text = format!(
            "{HEADER}\n1|a|1|CANCELLED by 1234|10|100\n2|a|1|completed|10|100\n\
             3|a|1|COMPLETED+|10|100\n4|a|1||10|100\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(parsed.records.len(), 1);
        assert_eq!(parsed.records[0].run.job_id, "2");
        let reasons: Vec<&str> = parsed.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "state CANCELLED is not imported (importing COMPLETED)",
                "state COMPLETED+ is not imported (importing COMPLETED)",
                "State is empty"
            ]
        );

        let options = Options {
            states: vec!["completed".into(), "Cancelled".into()],
            ..Options::default()
        };
        let parsed = parse(&text, &options).unwrap();
        let ids: Vec<&str> = parsed
            .records
            .iter()
            .map(|r| r.run.job_id.as_str())
            .collect();
        assert_eq!(ids, ["1", "2"]);
        assert_eq!(
            parsed.skipped[0].reason,
            "state COMPLETED+ is not imported (importing COMPLETED, CANCELLED)"
        );
    }

    #[test]
    fn job_names_stand_for_the_tags_the_slurm_scripts_send() {
        let text = format!(
            "{HEADER}\n1|my job!|1|COMPLETED|10|100\n2|!!!|1|COMPLETED|10|100\n\
             3|run_vasp|1|COMPLETED|10|100\n"
        );
        let parsed = parse_default(&text);
        assert_eq!(record(&parsed, "1").run.app, "my-job-");
        assert_eq!(record(&parsed, "3").run.app, "run_vasp");
        assert_eq!(skipped_lines(&parsed), [(3, "2")]);
    }

    #[test]
    fn a_jobid_seen_before_is_skipped_unless_that_attempt_was_not_imported() {
        let text = format!(
            "{HEADER}\n1|a|1|FAILED|10|100\n2|a|1|COMPLETED|10|100\n1|a|1|COMPLETED|10|100\n\
             2|b|1|COMPLETED|10|200\n"
        );
        let parsed = parse_default(&text);
        // Job 1's failed attempt claims nothing: its completed one is the run.
        assert_eq!(parsed.records.len(), 2);
        // Nor does an attempt skipped for its own fault (no energy, black-box
        // test of 2026-11-29: the completed attempt after it was skipped as
        // listed again).
        let faulty = format!(
            "{HEADER}\n7|a|1|COMPLETED|10|0\n7|a|1|COMPLETED|10|100\n7|a|1|COMPLETED|10|200\n"
        );
        let again = parse_default(&faulty);
        assert_eq!(record(&again, "7").line, 3);
        assert_eq!(record(&again, "7").run.energy_j, Some(100.0));
        assert_eq!(skipped_lines(&again), [(2, "7"), (4, "7")]);
        assert_eq!(record(&parsed, "2").run.app, "a");
        assert_eq!(record(&parsed, "1").line, 4);
        let reasons: Vec<(usize, &str)> = parsed
            .skipped
            .iter()
            .map(|s| (s.line, s.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (2, "state FAILED is not imported (importing COMPLETED)"),
                (5, "JobID 2 appears again (first on line 3)")
            ]
        );
    }

    #[test]
    fn every_problem_of_a_job_is_reported_at_once() {
        let header = "JobID|JobName|NNodes|State|ElapsedRaw|ConsumedEnergyRaw|End";
        let text = format!("{header}\n1||x|COMPLETED|0|-5|yesterday\n2|a|1|COMPLETED|10|NaN|\n");
        let parsed = parse_default(&text);
        assert_eq!(
            parsed.skipped[0].reason,
            "JobName is empty; NNodes \"x\" is not a whole number; \
             ConsumedEnergyRaw -5 is negative; \
             End \"yesterday\" is not a YYYY-MM-DDTHH:MM:SS time \
             (run sacct with SLURM_TIME_FORMAT=standard); \
             no duration: ElapsedRaw and Elapsed are absent, empty or 0, \
             and End − Start is not positive or not known"
        );
        assert_eq!(
            parsed.skipped[1].reason,
            "ConsumedEnergyRaw \"NaN\" is not a number of joules"
        );
    }

    #[test]
    fn nodes_node_list_source_and_account() {
        let header =
            "JobID|JobName|NNodes|NodeList|State|ElapsedRaw|ConsumedEnergyRaw|Account|Cluster";
        let text = format!(
            "{header}\n1|a|2|n[1-2]|COMPLETED|10|100|acct|hawk\n\
             2|a|1|None assigned|COMPLETED|10|100||\n3|a||n1|COMPLETED|10|100||\n"
        );
        let parsed = parse_default(&text);
        let one = &record(&parsed, "1").run;
        assert_eq!(
            one.node_list,
            Some(NodeListDraft::Hostlist("n[1-2]".into()))
        );
        assert_eq!(
            (one.source.as_str(), one.account.as_deref()),
            ("hawk", Some("acct"))
        );
        let two = &record(&parsed, "2").run;
        assert_eq!((two.node_list.as_ref(), two.account.as_ref()), (None, None));
        assert_eq!(two.source, "slurm");
        assert_eq!(parsed.skipped[0].reason, "NNodes is empty");

        let options = Options {
            source: Some("hawk-ng".into()),
            ..Options::default()
        };
        let parsed = parse(&text, &options).unwrap();
        assert!(parsed.records.iter().all(|r| r.run.source == "hawk-ng"));

        // Without an NNodes field every job is skipped, saying so.
        let text = "JobID|JobName|State|ElapsedRaw|ConsumedEnergyRaw\n1|a|COMPLETED|10|100\n";
        let parsed = parse_default(text);
        assert_eq!(parsed.skipped[0].reason, "no NNodes field in the header");
    }

    #[test]
    fn app_from_parses_from_its_command_line_names() {
        use clap::ValueEnum;
        for (name, value) in [
            ("jobname", AppFrom::JobName),
            ("comment", AppFrom::Comment),
            ("wckey", AppFrom::WCKey),
        ] {
            assert_eq!(AppFrom::from_str(name, false), Ok(value));
        }
        assert_eq!(AppFrom::default(), AppFrom::JobName);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    const HEADER: &str = "JobID|JobName|Account|NNodes|NodeList|State|Start|End|ElapsedRaw|\
                          Elapsed|ConsumedEnergyRaw|Cluster|WCKey|Comment";

    /// Values near the edges of what each field can hold.
    fn cell() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "",
                "0",
                "1",
                "-1",
                "4",
                "1.5",
                "NaN",
                "inf",
                "1e309",
                "Unknown",
                "None",
                "None assigned",
                "COMPLETED",
                "CANCELLED by 1",
                "FAILED",
                "7",
                "7.extern",
                "7.batch",
                "7_1",
                "7+0",
                ".",
                "..extern",
                "*",
                "*a",
                "cn[1-4]",
                "2026-03-02T08:00:00",
                "+262142-12-31T23:59:59",
                "-262144-01-01T00:00:00",
                "1-00:00:00",
                "99999999999999999999-00:00:00",
                "59:59",
                "00:00",
                "é",
                " ",
                "18446744073709551615",
                "9223372036854775808",
            ])
            .prop_map(str::to_owned),
            "[ -~é]{0,12}",
        ]
    }

    fn options() -> impl Strategy<Value = Options> {
        (
            prop::sample::select(vec![AppFrom::JobName, AppFrom::Comment, AppFrom::WCKey]),
            -86_399i32..86_400,
        )
            .prop_map(|(app_from, offset)| Options {
                app_from,
                utc_offset: FixedOffset::east_opt(offset).unwrap(),
                ..Options::default()
            })
    }

    fn check(parsed: &Parsed) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            parsed.lines,
            parsed.records.len() + parsed.skipped.len() + parsed.steps
        );
        prop_assert!(parsed.skipped.windows(2).all(|w| w[0].line < w[1].line));
        prop_assert!(parsed.records.windows(2).all(|w| w[0].line < w[1].line));
        Ok(())
    }

    proptest! {
        // Failing seeds are kept beside this file (sacct.proptest-regressions),
        // not in a directory at the top of the project.
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        })]

        /// Any text after a valid header gives lines accounted for, never a panic.
        #[test]
        fn any_text_after_a_header_never_panics(body in any::<String>(), options in options()) {
            let parsed = parse(&format!("{HEADER}\n{body}"), &options).unwrap();
            check(&parsed)?;
        }

        /// Records of edge values, of about the right width, never panic.
        #[test]
        fn edge_values_never_panic(
            rows in prop::collection::vec(prop::collection::vec(cell(), 12..16), 0..12),
            options in options(),
        ) {
            let body: Vec<String> = rows.iter().map(|row| row.join("|")).collect();
            let parsed = parse(&format!("{HEADER}\n{}\n", body.join("\n")), &options).unwrap();
            check(&parsed)?;
        }

        /// Any text at all is read or refused, never a panic.
        #[test]
        fn any_text_never_panics(text in any::<String>()) {
            if let Ok(parsed) = parse(&text, &Options::default()) {
                check(&parsed)?;
            }
        }
    }
}

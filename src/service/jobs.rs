//! Jobs in flight (docs/model.md §5). A scheduler reports a job when
//! it starts (and gets its prediction), when it finishes (the job becomes a
//! run, so the predictor adapts), or when it is cancelled.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admission::{
    Admission, Asked, Candidate, CheckedShape, JobShape, count_decision, decide,
};
use super::predictions::{
    AggregateName, Consistent, NodeScope, check_registered, check_workload, node_answers,
    settle_partition,
};
use super::runs::{JobEnd, RunStatus, store_job_end};
use super::{Error, Result, Service, apps};
use crate::domain::ReservedBasis;
use crate::ingest::{self, NodeListDraft, NodeListSchema, RunDraft};
use crate::model::Metric;
use crate::predict;
use crate::store::power::{Expiry, Load};
use crate::store::runs::{NewRun, RunRow};
use crate::store::{self, apps::AppRow, jobs::JobRow, jobs::NewJob};
use crate::validate::{self, FieldError, JobId, Source};

/// Power reserved per node for a job of an application without history,
/// when the registry knows no vendor peak: deliberately high, so that an
/// unknown job is not let in under a cap it would break.
pub const DEFAULT_NODE_POWER_W: f64 = 1000.0;
/// A job running longer than this many times its predicted TtS is stale.
pub const STALE_FACTOR: f64 = 2.0;

/// A job reported at its start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInput {
    /// The system the job runs on (as for runs): 1–64 of `A-Z a-z 0-9 . _
    /// : @ + = -`, starting with a letter or digit.
    #[schema(
        example = "clusterA",
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub source: String,
    /// The job's id on `source`. 1–128 characters, same set as `source`.
    #[schema(
        example = "884213",
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub job_id: String,
    /// Application tag, 1–128 characters, same set as `source`; created if
    /// new.
    #[schema(
        example = "lammps-lj-2.4GHz",
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub app: String,
    /// Node count, 1 to 1,000,000; required unless `node_list` is given.
    #[schema(minimum = 1, maximum = 1_000_000)]
    pub nodes: Option<i64>,
    /// The allocated nodes: names, or one string in Slurm hostlist syntax
    /// (`"cn[01-04,07]"`).
    #[schema(value_type = Option<NodeListSchema>)]
    pub node_list: Option<NodeListDraft>,
    pub partition: Option<String>,
    /// Accounting project the job is charged to (as for runs).
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"
    )]
    pub account: Option<String>,
    /// Default now. As a run's start: from 1970 to a day after now.
    pub started_at: Option<DateTime<Utc>>,
    /// Reference workload for the node classification; default the service's.
    pub workload: Option<String>,
    /// The job's time limit, s: without history, its energy is bounded by
    /// its reserved power × this limit (for budgets). At most ten years.
    #[schema(minimum = 1e-100, maximum = 315_576_000.0)]
    pub time_limit_s: Option<f64>,
    /// How the runs at the job's node count, if any were measured there,
    /// are combined: `mean` (the default) or `max`, which reserves what the
    /// hungriest of them drew, as max-nodes holds a limit with
    /// `aggregate=max`. `min` is refused: a job reserves at least the mean.
    pub aggregate: Option<AggregateName>,
    /// Store the job even when it does not fit under a cap or its budget
    /// (it runs already, whatever the answer). Default `false`: such a job
    /// is refused with 409 and not stored.
    #[serde(default)]
    pub force: bool,
}

/// A job in flight.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub source: String,
    pub job_id: String,
    pub app: String,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub started_at: DateTime<Utc>,
    /// Predicted at the start; `null` for an application without history.
    pub predicted_apc_w: Option<f64>,
    pub predicted_ets_j: Option<f64>,
    pub predicted_tts_s: Option<f64>,
    /// The power the job counts for in headroom and admission.
    pub reserved_w: f64,
    /// `node_set` (its nodes' APC), `worst_nodes` (the worst-node bound),
    /// `expected` (the predicted APC) or `no_history` (nodes × the largest
    /// vendor peak, else 1000 W per node).
    pub reserved_basis: ReservedBasis,
    pub time_limit_s: Option<f64>,
    /// When its reservation ends if its end is never reported: its time
    /// limit plus a grace period (`--reservation-grace-s`, 600 s), or
    /// without one `--max-reservation-s` (48 h) after its start.
    pub reservation_ends_at: DateTime<Utc>,
    /// Past `reservation_ends_at`: listed, but counted nowhere (headroom,
    /// admission, budgets).
    pub expired: bool,
    /// Running more than twice its predicted TtS.
    pub stale: bool,
    /// The admission decision made when the job was stored (answers to a
    /// job start only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
}

impl Job {
    pub(crate) fn from_row(j: JobRow, now: DateTime<Utc>, expiry: Expiry) -> Self {
        let elapsed = (now - j.started_at).as_seconds_f64();
        let reservation_ends_at = expiry.ends_at(j.started_at, j.time_limit_s);
        let expired = reservation_ends_at <= now;
        Job {
            reservation_ends_at,
            expired,
            // Stale comes before expired: an expired job is counted as
            // expired only, in the totals as on the job.
            stale: !expired
                && j.predicted_tts_s
                    .is_some_and(|tts| elapsed > STALE_FACTOR * tts),
            source: j.source,
            job_id: j.job_id,
            app: j.app,
            nodes: j.nodes,
            node_list: j.node_list,
            partition: j.partition,
            account: j.account,
            started_at: j.started_at,
            predicted_apc_w: j.predicted_apc_w,
            predicted_ets_j: j.predicted_ets_j,
            predicted_tts_s: j.predicted_tts_s,
            reserved_w: j.reserved_w,
            reserved_basis: j.reserved_basis,
            time_limit_s: j.time_limit_s,
            admission: None,
        }
    }
}

/// A job start's values, as compared with a running job's when the same
/// start is sent again (`None`: not sent, not compared).
struct Sent<'a> {
    app: &'a str,
    nodes: u32,
    account: Option<&'a str>,
    node_list: Option<&'a [String]>,
    /// The partition the job counts in (`NodeScope`), when one was sent or
    /// follows from the node list.
    partition: Option<Option<&'a str>>,
    time_limit_s: Option<f64>,
}

impl Sent<'_> {
    /// Each field that differs from the running job `row`, with both values.
    fn differences(&self, row: &store::jobs::JobRow) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut differ = |field: &str, sent: String, stored: String| {
            if sent != stored {
                errors.push(FieldError::new(
                    field,
                    format!("is {sent}, the running job's is {stored}"),
                ));
            }
        };
        let shown = |v: Option<&str>| v.map_or_else(|| "null".to_owned(), str::to_owned);
        differ("app", self.app.to_owned(), row.app.clone());
        differ("nodes", self.nodes.to_string(), row.nodes.to_string());
        if let Some(account) = self.account {
            differ("account", account.to_owned(), shown(row.account.as_deref()));
        }
        if let Some(list) = self.node_list {
            let sorted = |names: &[String]| {
                let mut names = names.to_vec();
                names.sort_unstable();
                names.join(",")
            };
            let stored = row
                .node_list
                .as_deref()
                .map_or_else(|| "null".to_owned(), sorted);
            differ("node_list", sorted(list), stored);
        }
        if let Some(partition) = self.partition {
            differ(
                "partition",
                shown(partition),
                shown(row.partition.as_deref()),
            );
        }
        if let Some(limit) = self.time_limit_s {
            let same = row
                .time_limit_s
                .is_some_and(|s| crate::domain::same_quantity(limit, s));
            if !same {
                let stored = row
                    .time_limit_s
                    .map_or_else(|| "null".to_owned(), |s| s.to_string());
                differ("time_limit_s", limit.to_string(), stored);
            }
        }
        errors
    }
}

/// What a job of `app` on `nodes` is predicted to need, and the power it
/// reserves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Estimate {
    pub apc_w: Option<f64>,
    pub ets_j: Option<f64>,
    pub tts_s: Option<f64>,
    pub reserved_w: f64,
    pub basis: ReservedBasis,
}

impl Estimate {
    /// The estimate with its reservation at least the idle power of the
    /// job's nodes (`power::idle_floor`), which the load counts for them
    /// until the job holds them: a reservation below it would raise the
    /// headroom by admitting the job (as a history measured on other
    /// nodes, carried to a partition whose nodes idle higher, did).
    pub(crate) fn at_least_idle(&self, load: &Load, scope: &NodeScope, nodes: u32) -> Estimate {
        let idle = super::power::idle_floor(
            load.registry(),
            scope.partition.as_deref(),
            scope.list.as_deref(),
            nodes,
        );
        Estimate {
            reserved_w: self.reserved_w.max(idle),
            ..*self
        }
    }
}

pub(crate) async fn estimate(
    service: &Service,
    app: Option<&AppRow>,
    nodes: u32,
    scope: &NodeScope,
    aggregate: AggregateName,
) -> Result<Estimate> {
    let partition = scope.partition.as_deref();
    let Some(app) = app.filter(|a| a.run_count > 0) else {
        // As `node_answers` checks it for an application with history.
        check_registered(service, scope).await?;
        // The largest vendor peak, or the most a node of the scope was
        // measured drawing (P_max of the reference workload), if larger:
        // nodes registered without a peak may draw kilowatts.
        let peak = store::nodes::max_peak(&service.pool, partition).await?;
        let measured = super::nodes::node_powers(service, &scope.workload, partition)
            .await?
            .map(|powers| powers.scale.p_max);
        let per_node = match (peak, measured) {
            (None, None) => DEFAULT_NODE_POWER_W,
            (peak, measured) => peak.unwrap_or(0.0).max(measured.unwrap_or(0.0)),
        };
        return Ok(Estimate {
            apc_w: None,
            ets_j: None,
            tts_s: None,
            reserved_w: per_node * f64::from(nodes),
            basis: ReservedBasis::NoHistory,
        });
    };
    let allowed = predict::allowed_rmse(app, None);
    let consistent = Consistent::at(service, app, allowed, nodes, aggregate).await?;
    let value = |metric: Metric| Some(consistent.prediction(metric).value);
    let (apc, ets, tts) = (value(Metric::Apc), value(Metric::Ets), value(Metric::Tts));
    let (bounds, set) =
        node_answers(service, app, nodes, scope, allowed, aggregate, &consistent).await?;
    let (reserved_w, basis) = match (set, bounds, apc) {
        (Some(set), _, _) => (set.reserved_w, ReservedBasis::NodeSet),
        // At least the expected APC (`node_answers`).
        (None, Some(bounds), _) => (bounds.worst_w, ReservedBasis::WorstNodes),
        (None, None, Some(apc)) => (apc, ReservedBasis::Expected),
        (None, None, None) => (
            DEFAULT_NODE_POWER_W * f64::from(nodes),
            ReservedBasis::NoHistory,
        ),
    };
    Ok(Estimate {
        apc_w: apc,
        ets_j: ets,
        tts_s: tts,
        reserved_w,
        basis,
    })
}

/// What a job start came to.
pub enum Start {
    /// Stored as running: now (`created`), or before, by an earlier report.
    Running { job: Box<Job>, created: bool },
    /// Not stored: the job does not fit under a cap or its budget, and was
    /// not forced.
    Refused(Box<Admission>),
}

/// Report a job's start: it is stored as running, with its prediction and
/// the power it reserves.
///
/// The admission decision (`admission::advise`) is made again under a lock
/// and the job stored in the same transaction, so concurrent starts cannot
/// together pass a cap or budget only one of them fits in. A job that does
/// not fit is refused (nothing stored) unless `force` is set.
///
/// Idempotent: reporting a running `(source, job_id)` again gives
/// the job as stored.
///
/// Race-free with the end: a job stored as a run is never stored as running,
/// and a start that arrives after the job's end was reported (a prolog that
/// gave up waiting, overtaken by the epilog) is refused when its `started_at`
/// is at or before that end. Send `started_at`: without it the start is
/// taken as now, after any end.
pub async fn start(service: &Service, mut input: JobInput) -> Result<Start> {
    input.started_at = input.started_at.map(validate::as_stored);
    let mut problems = Vec::new();
    let source = validate::checked(&mut problems, "source", Source::parse(&input.source));
    let job_id = validate::checked(&mut problems, "job_id", JobId::parse(&input.job_id));
    // As a run's start: the job's run must be storable when it finishes.
    let checked_at = Utc::now();
    if let Some(Err(reason)) = input
        .started_at
        .map(|time| ingest::check_time(time, checked_at))
    {
        problems.push(FieldError::new("started_at", reason));
    }
    let shape = JobShape {
        app: &input.app,
        nodes: input.nodes,
        node_list: input.node_list.as_ref(),
        partition: input.partition.clone(),
        account: input.account.as_deref(),
        time_limit_s: input.time_limit_s,
        workload: input.workload,
        aggregate: input.aggregate,
    };
    let (
        Some(source),
        Some(job_id),
        Some(CheckedShape {
            app: tag,
            account,
            nodes,
            mut scope,
            aggregate,
        }),
    ) = (source, job_id, shape.check(service, &mut problems))
    else {
        return Err(Error::Invalid(problems));
    };
    settle_partition(service, &mut scope).await?;
    check_workload(service, &scope, None).await?;
    // Checked again under the lock; here, to spare a prediction.
    if store::runs::id_by_key(&service.pool, &source, &job_id)
        .await?
        .is_some()
    {
        return Err(already_finished(&source, &job_id));
    }
    // Predicting may fit a model: done before the lock is taken.
    let known = apps::find_known(service, &tag).await?;
    let estimate = estimate(service, known.as_deref(), nodes, &scope, aggregate).await?;
    // An unknown application is created now, on its own, before the lock:
    // inserting a tag waits for a batch that is inserting the same one, and
    // that batch takes the admission lock before it commits, so waiting for
    // it under the lock would deadlock. A job not stored (refused, say)
    // removes it again.
    let created_app = match known {
        Some(_) => None,
        None => {
            let app = store::apps::ensure(&mut *service.pool.acquire().await?, &tag).await?;
            // It was read as absent just now; the notification follows.
            service.caches.forget_app(&tag);
            Some(app.id)
        }
    };
    let now = Utc::now();
    let started_at = input.started_at.unwrap_or(now);
    let start_given = input.started_at.is_some();

    let started: Result<Start> = async {
        // The decision and the reservation, atomically: every job start takes
        // the admission lock, so each sees the jobs stored before it.
        let mut tx = service.pool.begin().await?;
        let lock = store::power::lock_admission(&mut *tx).await?;
        let mut replaced_app = None;
        if let Some(row) = store::jobs::get(&mut *tx, &source, &job_id).await? {
            // The same start again (a retry) is answered with the job as
            // stored. A later attempt (a requeue, whose earlier attempt's end
            // never arrived) replaces it: that one no longer runs, and this
            // one must be decided and reserved, not told it holds the old,
            // perhaps expired, reservation. Kept if this one is refused.
            // The same start, sent again with other values, is not a retry:
            // refused, as a run sent again with other values is.
            if start_given && validate::as_stored(started_at) == row.started_at {
                let sent = Sent {
                    app: &tag,
                    nodes,
                    account: account.as_deref(),
                    node_list: scope.list.as_deref(),
                    partition: (input.partition.is_some() || scope.list.is_some())
                        .then_some(scope.partition.as_deref()),
                    time_limit_s: input.time_limit_s,
                };
                let errors = sent.differences(&row);
                if !errors.is_empty() {
                    return Err(Error::Conflict {
                        detail: format!(
                            "job {job_id} of {source} is running, started at the same time with \
                             other values; it was not changed"
                        ),
                        errors,
                    });
                }
            }
            if !(start_given && started_at > row.started_at) {
                return Ok(Start::Running {
                    job: Box::new(Job::from_row(row, now, service.settings.expiry)),
                    created: false,
                });
            }
            replaced_app = store::jobs::delete_attempt(&mut tx, &lock, &source, &job_id).await?;
        }
        // Under the lock, a run stored meanwhile, or an end reported before this
        // start arrived, is seen: the job would otherwise never be released.
        if store::runs::id_by_key(&mut *tx, &source, &job_id)
            .await?
            .is_some()
        {
            return Err(already_finished(&source, &job_id));
        }
        if let Some(ended_at) = store::jobs::ended_at(&mut *tx, &source, &job_id).await?
            && started_at <= ended_at
        {
            return Err(Error::Conflict {
                detail: format!(
                    "job {} of {} was reported ended at {ended_at} while not running, \
                     after this start ({started_at}); it was not stored",
                    job_id, source
                ),
                errors: vec![FieldError::new(
                    "job_id",
                    "names a job whose end was reported before its start arrived",
                )],
            });
        }
        // As times are stored and answered: to the microsecond.
        let stored_start = crate::validate::as_stored(started_at);
        let candidate = Candidate {
            app: &tag,
            nodes,
            scope: &scope,
            account: account.as_deref(),
            // Its own start, as `/v1/admission` asked with `start_at`: a
            // start reported late is not bound by a window its run ends
            // before, nor one a day ahead spared a window it runs into.
            // Stored, it counts from now (`counted_now`): the cap in force
            // now binds it too, whenever it says it began.
            at: stored_start,
            time_limit_s: input.time_limit_s,
            holds_until: service
                .settings
                .expiry
                .ends_at(stored_start, input.time_limit_s),
            counted_now: true,
        };
        let load = store::power::load(&mut tx, service.settings.expiry, now).await?;
        let estimate = estimate.at_least_idle(&load, &scope, nodes);
        let admission = decide(&mut tx, &load, &candidate, &estimate, now).await?;
        if !admission.admit && !input.force {
            drop(tx);
            count_decision(Asked::JobStart { stored: false }, &admission);
            return Ok(Start::Refused(Box::new(admission)));
        }
        // Under the lock: an application left without runs or jobs is removed
        // under it too (store::apps::remove_if_unused), so this one stays.
        // Looked up before it is created: inserting a tag, even one that exists,
        // waits for a batch that is updating its row, and that batch may be
        // waiting for this lock. Only an application removed since it was found
        // or created above (by a cancellation's clean-up) is created here.
        let app = match store::apps::get(&mut *tx, &tag).await? {
            Some(app) => app,
            None => store::apps::ensure(&mut tx, &tag).await?,
        };
        let job = NewJob {
            source: source.into(),
            job_id: job_id.into(),
            app_id: app.id,
            nodes: i32::try_from(nodes).unwrap_or(i32::MAX),
            node_list: scope.list,
            partition: scope.partition,
            account: account.map(String::from),
            started_at,
            predicted_apc_w: estimate.apc_w,
            predicted_ets_j: estimate.ets_j,
            predicted_tts_s: estimate.tts_s,
            reserved_w: estimate.reserved_w,
            reserved_basis: estimate.basis,
            time_limit_s: input.time_limit_s,
        };
        let (row, created) = store::jobs::insert(&mut tx, &lock, &job).await?;
        // A requeue under another application's name leaves the earlier
        // one's, if it was created for that attempt alone, unused.
        let removed = match replaced_app {
            Some(old) if old != app.id => {
                store::apps::remove_if_unused(&mut tx, &lock, &[old]).await?
            }
            _ => Vec::new(),
        };
        tx.commit().await?;
        service.caches.forget_load();
        for tag in &removed {
            service.caches.forget_app(tag);
        }
        if created {
            // A start reported again was counted the first time.
            count_decision(Asked::JobStart { stored: true }, &admission);
        }
        let mut job = Job::from_row(row, Utc::now(), service.settings.expiry);
        job.admission = Some(admission);
        Ok(Start::Running {
            job: Box::new(job),
            created,
        })
    }
    .await;
    // A job that was not stored leaves the application created for it
    // unused: remove it again, unless something else uses it by now.
    if let Some(id) = created_app
        && !matches!(started, Ok(Start::Running { .. }))
        && let Err(e) = forget_unused_app(service, id).await
    {
        // What is left is an application without runs, which the next
        // cancellation or refusal naming it removes.
        tracing::warn!(error = %e, "could not remove the application created for a job not stored");
    }
    started
}

/// Remove application `id` if nothing uses it (`store::apps::remove_if_unused`).
async fn forget_unused_app(service: &Service, id: i64) -> Result<()> {
    let mut tx = service.pool.begin().await?;
    let lock = store::power::lock_admission(&mut *tx).await?;
    let removed = store::apps::remove_if_unused(&mut tx, &lock, &[id]).await?;
    tx.commit().await?;
    for tag in &removed {
        service.caches.forget_app(tag);
    }
    Ok(())
}

fn already_finished(source: &str, job_id: &str) -> Error {
    Error::Conflict {
        detail: format!("job {job_id} of {source} has already finished and is stored as a run"),
        errors: vec![FieldError::new("job_id", "names a finished run")],
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Jobs {
    /// Running jobs, oldest first: one page of them.
    pub items: Vec<Job>,
    /// Σ of the reserved power of those not expired, W, over every job the
    /// filters match, not only this page's.
    pub reserved_w: f64,
    /// Jobs flagged `stale`, over every job the filters match.
    pub stale: usize,
    /// Jobs whose reservation has expired (still listed until their end is
    /// reported or they are cancelled), over every job the filters match.
    pub expired: usize,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Which running jobs to list.
#[derive(Debug, Default, Clone, Copy)]
pub struct JobFilter<'a> {
    pub source: Option<&'a str>,
    pub partition: Option<&'a str>,
    pub account: Option<&'a str>,
}

/// Where a page of jobs starts: after the job started at `started_at` with
/// row id `id` (jobs are listed by start, then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobCursor {
    pub started_at: DateTime<Utc>,
    pub id: i64,
}

impl JobCursor {
    fn of(row: &JobRow) -> JobCursor {
        JobCursor {
            started_at: row.started_at,
            id: row.id,
        }
    }
}

/// The running jobs `filter` matches, with their totals; of those, the
/// first `limit` after `after` (all with `limit` `None`), and the cursor
/// after the last one listed when more follow.
pub async fn list(
    service: &Service,
    filter: JobFilter<'_>,
    after: Option<JobCursor>,
    limit: Option<usize>,
) -> Result<(Jobs, Option<JobCursor>)> {
    for (field, value, max) in [
        ("partition", &filter.partition, validate::TAG_MAX),
        ("account", &filter.account, validate::ACCOUNT_MAX),
    ] {
        if let Some(Err(reason)) = value.map(|v| validate::identifier(v, max)) {
            return Err(Error::bad_request(field, reason));
        }
    }
    if let Some(Err(reason)) = filter.source.map(Source::parse) {
        return Err(Error::bad_request("source", reason));
    }
    let now = Utc::now();
    let rows = store::jobs::list(
        &service.pool,
        filter.source,
        filter.partition,
        filter.account,
    )
    .await?;
    let (mut reserved_w, mut stale, mut expired) = (0.0, 0, 0);
    let mut items = Vec::new();
    let (mut last, mut more) = (None, false);
    for row in rows {
        let key = JobCursor::of(&row);
        let job = Job::from_row(row, now, service.settings.expiry);
        if job.expired {
            expired += 1;
        } else {
            reserved_w += job.reserved_w;
            stale += usize::from(job.stale);
        }
        if after.is_some_and(|after| key <= after) {
            continue;
        }
        if limit.is_some_and(|limit| items.len() >= limit) {
            more = true;
            continue;
        }
        last = Some(key);
        items.push(job);
    }
    let jobs = Jobs {
        items,
        reserved_w,
        stale,
        expired,
        next_cursor: None,
    };
    Ok((jobs, last.filter(|_| more)))
}

/// The running job `(source, job_id)`, as listed. `NotFound` when it is not
/// running, naming the run it became if it finished.
pub async fn get(service: &Service, source: &str, job_id: &str) -> Result<Job> {
    if let Some(row) = store::jobs::get(&service.pool, source, job_id).await? {
        return Ok(Job::from_row(row, Utc::now(), service.settings.expiry));
    }
    Err(Error::NotFound(
        match store::runs::id_by_key(&service.pool, source, job_id).await? {
            Some(run) => format!(
                "job {job_id} of {source} is not running: it finished as run {run} \
                 (GET /v1/runs/{run})"
            ),
            None => format!("no running job {job_id} of {source}"),
        },
    ))
}

/// What was measured when a job ended: any two of energy, power and
/// duration, or one of energy and power (the duration is then the time from
/// the job's start to `ended_at`). Without `ended_at`, the end is the start
/// plus the duration, given or `energy_j` over `avg_power_w`; else now.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishInput {
    #[schema(minimum = 1e-100, maximum = 1e100)]
    pub energy_j: Option<f64>,
    #[schema(minimum = 1e-100, maximum = 1e100)]
    pub avg_power_w: Option<f64>,
    #[schema(minimum = 1e-100, maximum = 315_576_000.0)]
    pub duration_s: Option<f64>,
    /// Default: the start plus the duration, when the measurements give it
    /// (`duration_s`, or `energy_j` over `avg_power_w`); else now.
    pub ended_at: Option<DateTime<Utc>>,
    /// Measurement weight, from 1e-100 to 1; default 1.
    #[schema(minimum = 1e-100, maximum = 1.0)]
    pub quality: Option<f64>,
}

/// What a job's end came to.
pub enum Finish {
    /// The job became this run now.
    Finished(RunRow),
    /// It had become this run before; nothing changed.
    AlreadyFinished(RunRow),
}

/// Report a job's end: it becomes a run in the history (so the predictor
/// adapts) and stops counting in headroom. Idempotent.
pub async fn finish(
    service: &Service,
    source: &str,
    job_id: &str,
    input: FinishInput,
) -> Result<Finish> {
    let job = loop {
        if let Some(job) = store::jobs::get(&service.pool, source, job_id).await? {
            break Some(job);
        }
        // Finished before, or its start has not arrived (yet).
        if store::runs::id_by_key(&service.pool, source, job_id)
            .await?
            .is_some()
        {
            break None;
        }
        // The end as reported: a start reported after this finish but dated
        // after that end is a later attempt, not one this finish ended. No
        // later than now, and no earlier than a day ago: ends are
        // remembered for a week from when they are dated, and one replayed
        // from a backlog must still refuse the start it ended.
        let now = Utc::now();
        let ended = input.ended_at.map_or(now, |end| {
            validate::as_stored(end).clamp(now - chrono::TimeDelta::days(1), now)
        });
        if remember_end_unless_running(service, source, job_id, ended).await? {
            return Err(Error::NotFound(format!("no job {job_id} of {source}")));
        }
    };
    let Some(job) = job else {
        let id = store::runs::id_by_key(&service.pool, source, job_id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no job {job_id} of {source}")))?;
        let row = store::runs::get(&service.pool, id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no job {job_id} of {source}")))?;
        // What it sends must be what was stored, as for a run sent again
        // (before, other values were answered `already_finished`, 200).
        let errors = sent_differences(&row, &input);
        if !errors.is_empty() {
            return Err(Error::Conflict {
                detail: format!(
                    "run {} is already stored with other values for this job",
                    row.id
                ),
                errors,
            });
        }
        return Ok(Finish::AlreadyFinished(row));
    };
    // Without an end time, a measured duration, or the energy over the
    // power, dates the end (as ingestion dates a run by its start and
    // duration, and names `duration_s` when that end cannot be); else now.
    // (Energy and power once ended the job now: an end reported more than 5 %
    // of its duration late was refused as inconsistent, every time.)
    let timed =
        input.duration_s.is_some() || (input.energy_j.is_some() && input.avg_power_w.is_some());
    let ended_at = match input.ended_at {
        Some(end) => Some(end),
        None if timed => None,
        // A job dated to start later (a scheduler's clock ahead of this
        // one's) has no end at this time: say what to send rather than
        // reject fields the client never sent.
        None if job.started_at >= Utc::now() => {
            return Err(Error::Invalid(vec![FieldError::new(
                "ended_at",
                format!(
                    "is needed: without it the end is now, which is not after the job's \
                     start ({}); send ended_at or duration_s",
                    job.started_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                ),
            )]));
        }
        None => Some(Utc::now()),
    };
    let measured = [input.energy_j, input.avg_power_w, input.duration_s]
        .iter()
        .filter(|v| v.is_some())
        .count();
    // One measurement: the duration is the time the job ran.
    let duration_s = input.duration_s.or_else(|| {
        (measured < 2)
            .then(|| ended_at.map(|end| (end - job.started_at).as_seconds_f64()))
            .flatten()
    });
    let draft = RunDraft {
        app: job.app.clone(),
        source: job.source.clone(),
        job_id: job.job_id.clone(),
        nodes: i64::from(job.nodes),
        node_list: job.node_list.clone().map(NodeListDraft::Names),
        energy_j: input.energy_j,
        avg_power_w: input.avg_power_w,
        duration_s,
        started_at: Some(job.started_at),
        ended_at,
        quality: input.quality,
        account: job.account.clone(),
    };
    // What the client sent, as opposed to what was filled in from the time
    // of this request.
    let sent = |field: &str| match field {
        "energy_j" => input.energy_j.is_some(),
        "avg_power_w" => input.avg_power_w.is_some(),
        "duration_s" => input.duration_s.is_some(),
        "ended_at" => input.ended_at.is_some(),
        _ => true,
    };
    let run = ingest::validate(draft, Utc::now()).map_err(Error::Invalid)?;
    // The run and the job's removal commit together (store::runs::insert_batch),
    // also when the run was stored before with other values (a conflict).
    let stored = store_job_end(service, run, "this job").await;
    let (finished, id) = match stored {
        Ok(JobEnd::Stored(status, id)) => (status == RunStatus::Created, id),
        // Cancelled since it was read above: it leaves no history, and this
        // end finds no job, as one reported after the cancellation does.
        Ok(JobEnd::Cancelled) => {
            return Err(Error::NotFound(format!("no job {job_id} of {source}")));
        }
        // A later attempt started since it was read above (a requeue): this
        // end, before that start, is an earlier attempt's.
        Ok(JobEnd::EarlierAttempt(error)) => return Err(error),
        // The same report sent again while the first was being stored (a
        // retry): identical (above), or different only in what each filled
        // in from its own "now".
        Err(Error::Conflict { errors, .. }) if errors.iter().all(|e| !sent(&e.field)) => {
            let id = store::runs::id_by_key(&service.pool, source, job_id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the run of a conflict vanished"))?;
            (false, id)
        }
        Err(e) => return Err(e),
    };
    let row = store::runs::get(&service.pool, id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("run {id} vanished after it was stored"))?;
    Ok(if finished {
        Finish::Finished(row)
    } else {
        Finish::AlreadyFinished(row)
    })
}

/// How the values a finish sent differ from the run stored for its job
/// (those it did not send are not compared).
fn sent_differences(row: &RunRow, input: &FinishInput) -> Vec<FieldError> {
    let stored = NewRun::from(row);
    let mut sent = stored.clone();
    for (value, field) in [
        (input.energy_j, &mut sent.energy_j),
        (input.avg_power_w, &mut sent.avg_power_w),
        (input.duration_s, &mut sent.duration_s),
        (input.quality, &mut sent.quality),
    ] {
        if let Some(value) = value {
            *field = value;
        }
    }
    if let Some(end) = input.ended_at {
        sent.ended_at = Some(validate::as_stored(end));
    }
    ingest::differences(&sent, &stored)
}

/// The job a path names, or every parameter that is not what it names
/// (before, a 3,000-character id reached the database: a 500).
pub fn job_key(
    source: &str,
    job_id: &str,
) -> std::result::Result<(Source, JobId), Vec<FieldError>> {
    let mut problems = Vec::new();
    let source = validate::checked(&mut problems, "source", Source::parse(source));
    let job_id = validate::checked(&mut problems, "job_id", JobId::parse(job_id));
    match (source, job_id) {
        (Some(source), Some(job_id)) => Ok((source, job_id)),
        _ => Err(problems),
    }
}

/// Forget a cancelled or failed job: it leaves no history. `NotFound` when
/// it is not running. Either way its end is remembered, so that a start of
/// it reported again later (a prolog's retry overtaken by the cancellation)
/// is refused rather than reserving power for a job that no longer runs.
pub async fn cancel(service: &Service, source: &str, job_id: &str) -> Result<()> {
    let mut tx = service.pool.begin().await?;
    let lock = store::power::lock_admission(&mut *tx).await?;
    if let Some(removed) = store::jobs::delete(&mut tx, &lock, source, job_id).await? {
        store::jobs::remember_end(&mut tx, &lock, source, job_id, Utc::now()).await?;
        tx.commit().await?;
        service.caches.forget_load();
        for tag in &removed {
            service.caches.forget_app(tag);
        }
        return Ok(());
    }
    store::jobs::remember_end(&mut tx, &lock, source, job_id, Utc::now()).await?;
    tx.commit().await?;
    Err(Error::NotFound(format!(
        "no running job {job_id} of {source}"
    )))
}

/// Remember the end of `(source, job_id)` reported while it is not running,
/// so that its start, if it arrives later, is refused rather than reserving
/// power. False (and nothing remembered) if it is running by now.
async fn remember_end_unless_running(
    service: &Service,
    source: &str,
    job_id: &str,
    ended_at: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let mut tx = service.pool.begin().await?;
    let lock = store::power::lock_admission(&mut *tx).await?;
    if store::jobs::get(&mut *tx, source, job_id).await?.is_some() {
        return Ok(false);
    }
    store::jobs::remember_end(&mut tx, &lock, source, job_id, ended_at).await?;
    tx.commit().await?;
    Ok(true)
}

/// Record jobs of `source` that started without a reservation (the
/// scheduler's fail-open path): how many were new.
pub async fn record_unreserved(
    service: &Service,
    source: &Source,
    jobs: &[(JobId, DateTime<Utc>)],
) -> Result<u64> {
    Ok(store::jobs::record_unreserved(&service.pool, source, jobs).await?)
}

//! Taking runs in: validation, the EtS = APC × TtS rule, idempotent storage.
//!
//! A batch is stored per item: valid new runs are committed together in one
//! transaction, and every item gets its own answer (created, duplicate or
//! rejected with reasons). A rejected item is never stored. With `atomic`, a
//! batch with any rejected item stores nothing at all.

use std::borrow::Cow;
use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use sqlx::PgPool;

use crate::hostlist;
use crate::store::{self, runs::Derived, runs::Inserted, runs::NewRun};
use crate::validate::{self, Errors, FieldError, MAX_DURATION_S, MAX_POWER_PER_NODE_W};

/// EtS, APC × TtS and start/end times may disagree by at most this fraction.
pub const CONSISTENCY_TOLERANCE: f64 = 0.05;
/// At most this far in the future (clock skew between systems).
pub const FUTURE_TOLERANCE: Duration = Duration::days(1);
pub const MAX_BATCH: usize = 10_000;

/// A node list as submitted: names, or Slurm hostlist syntax (`cn[01-04]`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(
    untagged,
    expecting = "an array of node names, or one string in Slurm hostlist syntax"
)]
pub enum NodeListDraft {
    Names(Vec<String>),
    Hostlist(String),
}

impl NodeListDraft {
    /// As one host list: names are checked one by one (a name is not a
    /// range: `cn[1-2]` is refused, not expanded; none may repeat), each
    /// problem under `{field}[i]`, and joined by commas, which then expand
    /// to themselves.
    pub fn as_hostlist(&self, field: &str, problems: &mut Vec<FieldError>) -> Cow<'_, str> {
        match self {
            NodeListDraft::Hostlist(list) => Cow::Borrowed(list),
            NodeListDraft::Names(names) => {
                problems.extend(check_node_names(names, field));
                Cow::Owned(names.join(","))
            }
        }
    }
}

/// The forms a node list takes in the API document: names, or one string in
/// Slurm hostlist syntax.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Only describes the accepted forms.
pub enum NodeListSchema {
    Names(Vec<String>),
    #[schema(example = "cn[01-04,07]")]
    Hostlist(String),
}

/// A run as submitted, before validation.
#[derive(Debug, Clone, Default)]
pub struct RunDraft {
    pub app: String,
    pub source: String,
    pub job_id: String,
    pub nodes: i64,
    pub node_list: Option<NodeListDraft>,
    pub energy_j: Option<f64>,
    pub avg_power_w: Option<f64>,
    pub duration_s: Option<f64>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub quality: Option<f64>,
    pub account: Option<String>,
}

/// Check every rule and derive the missing quantity. All errors are reported,
/// not just the first.
pub fn validate(mut draft: RunDraft, now: DateTime<Utc>) -> Result<NewRun, Vec<FieldError>> {
    let mut errors = Errors::default();
    errors.check("app", validate::identifier(&draft.app, validate::TAG_MAX));
    errors.check(
        "source",
        validate::identifier(&draft.source, validate::SOURCE_MAX),
    );
    errors.check(
        "job_id",
        validate::identifier(&draft.job_id, validate::JOB_ID_MAX),
    );
    if let Some(account) = &draft.account {
        errors.check(
            "account",
            validate::identifier(account, validate::ACCOUNT_MAX),
        );
    }

    let nodes_ok = validate::node_count(draft.nodes)
        .map_err(|reason| errors.add("nodes", reason))
        .is_ok();
    let node_list = match draft.node_list.take() {
        None => None,
        // As many names as a host list may expand to: the same node list
        // written either way is taken or refused alike.
        Some(NodeListDraft::Names(names)) if names.len() > hostlist::MAX_HOSTS => {
            errors.add(
                "node_list",
                format!(
                    "too many hosts: the list names {} nodes, more than {}",
                    names.len(),
                    hostlist::MAX_HOSTS
                ),
            );
            None
        }
        Some(NodeListDraft::Names(names)) => Some(names),
        Some(NodeListDraft::Hostlist(list)) => hostlist::expand(&list)
            .map_err(|e| errors.add("node_list", e.to_string()))
            .ok(),
    };
    if let Some(list) = &node_list {
        check_node_list(&mut errors, list, nodes_ok.then_some(draft.nodes));
    }

    let quality = draft.quality.unwrap_or(1.0);
    errors.check("quality", validate::quality(quality));

    let started_at = draft.started_at.map(validate::as_stored);
    let ended_at = draft.ended_at.map(validate::as_stored);
    for (field, time) in [("started_at", started_at), ("ended_at", ended_at)] {
        if let Some(time) = time {
            errors.check(field, check_time(time, now));
        }
    }
    if let (Some(start), Some(end)) = (started_at, ended_at)
        && end <= start
    {
        errors.add("ended_at", "must be after started_at");
    }

    let quantities = derive_quantities(&mut errors, &draft);
    let Some((energy_j, avg_power_w, duration_s, derived)) = quantities else {
        return Err(errors.into_vec());
    };
    if nodes_ok {
        let per_node = avg_power_w / draft.nodes as f64;
        if per_node > MAX_POWER_PER_NODE_W {
            errors.add(
                "avg_power_w",
                format!(
                    "{per_node} W per node is implausible (limit {MAX_POWER_PER_NODE_W} W); \
                     is the unit watts?"
                ),
            );
        }
    }
    if let (Some(start), Some(end)) = (started_at, ended_at) {
        check_window(&mut errors, duration_s, start, end);
    }
    // Given its start and duration, a run ended at their sum: budgets and
    // listings date a run by its end.
    let ended_at = match (started_at, ended_at) {
        (Some(start), None) => {
            let end = end_of(start, duration_s);
            let checked = match end {
                None => Err("is too long".into()),
                // Times are kept to the microsecond.
                Some(end) if end <= start => Err("falls within the microsecond it started".into()),
                Some(end) => check_time(end, now),
            };
            if let Err(reason) = checked {
                errors.add(
                    "duration_s",
                    format!("started_at plus duration_s, the run's end, {reason}"),
                );
            }
            end
        }
        (_, given) => given,
    };

    let run = NewRun {
        app: draft.app,
        source: draft.source,
        job_id: draft.job_id,
        nodes: draft.nodes.clamp(0, i64::from(i32::MAX)) as i32,
        node_list,
        energy_j,
        avg_power_w,
        duration_s,
        derived,
        started_at,
        ended_at,
        quality,
        account: draft.account,
    };
    errors.into_result(run)
}

fn check_node_list(errors: &mut Errors, list: &[String], nodes: Option<i64>) {
    if let Some(nodes) = nodes
        && list.len() as i64 != nodes
    {
        errors.add(
            "node_list",
            format!("has {} names but nodes is {nodes}", list.len()),
        );
    }
    for problem in check_node_names(list, "node_list") {
        errors.add(&problem.field, problem.reason);
    }
}

/// Each name of a node list on its own, under `{field}[i]`: a node name, and
/// not one listed before.
fn check_node_names(list: &[String], field: &str) -> Vec<FieldError> {
    let mut seen = std::collections::HashSet::new();
    let mut problems = Vec::new();
    for (i, name) in list.iter().enumerate() {
        if let Err(reason) = validate::node_name(name) {
            problems.push(FieldError::new(format!("{field}[{i}]"), reason));
        }
        if !seen.insert(name) {
            let reason = format!("{name:?} is listed twice");
            problems.push(FieldError::new(format!("{field}[{i}]"), reason));
        }
    }
    problems
}

/// Apply EtS = APC × TtS: two of the three give the third; all three must agree.
fn derive_quantities(
    errors: &mut Errors,
    draft: &RunDraft,
) -> Option<(f64, f64, f64, Option<Derived>)> {
    let fields = [
        ("energy_j", draft.energy_j),
        ("avg_power_w", draft.avg_power_w),
        ("duration_s", draft.duration_s),
    ];
    // Each given value is checked alone first, so that all its problems are
    // named at once (a duration over ten years was not named beside a
    // negative energy).
    let mut valid = true;
    for (field, value) in fields {
        let Some(value) = value else { continue };
        let checked = validate::positive(value).and_then(|()| match field {
            "duration_s" => within_ten_years(value),
            _ => Ok(()),
        });
        if let Err(reason) = checked {
            errors.add(field, reason);
            valid = false;
        }
    }
    let given = fields.iter().filter(|(_, v)| v.is_some()).count();
    if given < 2 {
        for (field, value) in fields {
            if value.is_none() {
                errors.add(
                    field,
                    "missing: give at least two of energy_j, avg_power_w and duration_s \
                     (the third is derived)",
                );
            }
        }
        return None;
    }
    if !valid {
        return None;
    }
    let (e, p, d, derived) = match (draft.energy_j, draft.avg_power_w, draft.duration_s) {
        (Some(e), Some(p), Some(d)) => {
            let product = p * d;
            let disagreement = (e - product).abs() / e.max(product);
            // An overflowing product makes the ratio NaN: that is disagreement too.
            if disagreement.is_nan() || disagreement > CONSISTENCY_TOLERANCE {
                let reason = format!(
                    "energy_j ({e}) and avg_power_w × duration_s ({product}) differ by {:.1} %, \
                     more than {:.0} %",
                    disagreement * 100.0,
                    CONSISTENCY_TOLERANCE * 100.0
                );
                for (field, _) in fields {
                    errors.add(field, reason.clone());
                }
                return None;
            }
            (e, p, d, None)
        }
        (None, Some(p), Some(d)) => (p * d, p, d, Some(Derived::EnergyJ)),
        (Some(e), None, Some(d)) => (e, e / d, d, Some(Derived::AvgPowerW)),
        (Some(e), Some(p), None) => (e, p, e / p, Some(Derived::DurationS)),
        _ => unreachable!("at least two quantities are given"),
    };
    if let Some(derived) = derived {
        let value = match derived {
            Derived::EnergyJ => e,
            Derived::AvgPowerW => p,
            Derived::DurationS => d,
        };
        if let Err(reason) = validate::positive(value) {
            errors.add(derived.as_str(), format!("derived value {reason}"));
            return None;
        }
    }
    if let Err(reason) = within_ten_years(d) {
        errors.add("duration_s", reason);
        return None;
    }
    Some((e, p, d, derived))
}

fn within_ten_years(duration_s: f64) -> Result<(), String> {
    if duration_s > MAX_DURATION_S {
        return Err(format!(
            "{duration_s} s is more than ten years; is the unit seconds?"
        ));
    }
    Ok(())
}

/// The end of a run that started at `start` and lasted `duration_s`, to the
/// microsecond (rounded half to even, as PostgreSQL's `make_interval` does).
fn end_of(start: DateTime<Utc>, duration_s: f64) -> Option<DateTime<Utc>> {
    let micros = (duration_s * 1e6).round_ties_even();
    if !(0.0..=i64::MAX as f64).contains(&micros) {
        return None;
    }
    start.checked_add_signed(chrono::Duration::microseconds(micros as i64))
}

/// Start and end times, when both are given, bound the duration.
fn check_window(errors: &mut Errors, duration_s: f64, start: DateTime<Utc>, end: DateTime<Utc>) {
    let window = (end - start).as_seconds_f64();
    if window <= 0.0 {
        return;
    }
    // Scheduler timestamps have one-second resolution.
    let slack = (CONSISTENCY_TOLERANCE * window).max(1.0);
    if (duration_s - window).abs() > slack {
        let reason = format!(
            "duration_s ({duration_s} s) does not match ended_at − started_at ({window} s)"
        );
        for field in ["duration_s", "started_at", "ended_at"] {
            errors.add(field, reason.clone());
        }
    }
}

/// A run's start or end, or a job's start: from 1970 up to
/// `FUTURE_TOLERANCE` after `now`.
pub fn check_time(time: DateTime<Utc>, now: DateTime<Utc>) -> Result<(), String> {
    if time < DateTime::<Utc>::UNIX_EPOCH {
        Err("must not be before 1970-01-01".into())
    } else if time > now + FUTURE_TOLERANCE {
        Err(format!("is in the future ({time})"))
    } else {
        Ok(())
    }
}

/// The answer for one submitted item.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Created(i64),
    Duplicate(i64),
    Invalid(Vec<FieldError>),
    /// The key names a run with other values: the stored run, or `None` in a
    /// refused atomic batch whose items of one key disagree.
    Conflict {
        run_id: Option<i64>,
        differences: Vec<FieldError>,
    },
    /// Valid, but not stored because the atomic batch it was part of was refused.
    Withheld,
    /// Not stored: the run ended at or before the start of the attempt of
    /// its job running now (a requeue), so it is an earlier attempt's; the
    /// error names `ended_at` and that start.
    EarlierAttempt(FieldError),
}

impl Outcome {
    pub fn is_rejected(&self) -> bool {
        matches!(
            self,
            Outcome::Invalid(_) | Outcome::Conflict { .. } | Outcome::EarlierAttempt(_)
        )
    }
}

/// When the running attempt of each job named started.
type Running = HashMap<(String, String), chrono::DateTime<Utc>>;

/// The run a key names after a batch is stored: (id, its values, created by
/// the batch), or the start of the later attempt of its job that runs.
type Named<'a> = Result<(i64, Cow<'a, NewRun>, bool), DateTime<Utc>>;

/// Why a run of an earlier attempt of a running job is not stored.
fn earlier_attempt(run: &NewRun, started: DateTime<Utc>) -> Outcome {
    Outcome::EarlierAttempt(FieldError::new(
        "ended_at",
        format!(
            "the run ended at or before {}, when the attempt of job {} of {} running now \
             started: it is an earlier attempt's (a requeue), and the running attempt's end \
             is the job's run",
            started.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            run.job_id,
            run.source
        ),
    ))
}

#[derive(Debug)]
pub struct Ingested {
    pub outcomes: Vec<Outcome>,
    /// False when an atomic batch was refused and nothing was stored.
    pub committed: bool,
    /// Applications removed because the jobs these runs ended left them
    /// without runs or jobs (`store::apps::remove_if_unused`).
    pub removed_apps: Vec<String>,
}

/// Store the valid items; answer for each. The answer is given only after the
/// transaction has committed.
///
/// Every item is compared with the run its key ends up naming: the stored one,
/// or the item of the batch chosen for that key (`choose`) when that one is
/// stored now. Equal values make a duplicate, other values a conflict; an
/// earlier attempt's run beside it is refused as one.
pub async fn ingest(
    pool: &PgPool,
    items: Vec<Result<NewRun, Vec<FieldError>>>,
    atomic: bool,
) -> sqlx::Result<Ingested> {
    if atomic {
        // Items of one key with different values cannot all be stored, nor
        // an earlier attempt's run: refused whole, before the transaction,
        // as the running attempts stand (the choice is made again inside
        // it, `insert_chosen`, and a rejection found then refuses it too).
        let running = running_starts(pool, &items).await?;
        let Chosen { first, .. } = choose(&items, &running);
        let clashes: Vec<(usize, Outcome)> = first
            .iter()
            .enumerate()
            .filter_map(|(i, j)| {
                let j = j.filter(|&j| j != i)?;
                if let Some(outcome) = beside(&first, &running, i, valid(&items, i)) {
                    return Some((i, outcome));
                }
                let other = format!("item {j} of this batch has");
                let differences = compare(valid(&items, i), valid(&items, j), &other);
                (!differences.is_empty()).then_some((
                    i,
                    Outcome::Conflict {
                        run_id: None,
                        differences,
                    },
                ))
            })
            .collect();
        if !clashes.is_empty() || items.iter().any(Result::is_err) {
            let mut outcomes = refused(&items);
            for (i, outcome) in clashes {
                outcomes[i] = outcome;
            }
            return Ok(Ingested {
                outcomes,
                committed: false,
                removed_apps: Vec::new(),
            });
        }
    }

    let (tx, batch, running, Chosen { first, firsts }) = insert_chosen(pool, &items).await?;
    // The run each key names now: (id, its values, created by this batch),
    // or the start of the later attempt that runs.
    let named: HashMap<usize, Named<'_>> = firsts
        .iter()
        .zip(batch.inserted)
        .map(|(&j, inserted)| match inserted {
            Inserted::Created(id) => (j, Ok((id, Cow::Borrowed(valid(&items, j)), true))),
            Inserted::Existing(row) => (
                j,
                Ok((row.id, Cow::Owned(NewRun::from(row.as_ref())), false)),
            ),
            Inserted::EarlierAttempt(started) => (j, Err(started)),
        })
        .collect();
    let outcomes: Vec<Outcome> = items
        .iter()
        .enumerate()
        .map(|(i, item)| match (item, first[i]) {
            (Ok(run), Some(j)) => match &named[&j] {
                Ok((id, values, created)) => beside(&first, &running, i, run)
                    .unwrap_or_else(|| answer(run, values, *id, i == j && *created)),
                Err(started) => earlier_attempt(run, *started),
            },
            (Err(errors), _) => Outcome::Invalid(errors.clone()),
            (Ok(_), None) => unreachable!("every valid item has a first occurrence"),
        })
        .collect();
    if atomic && outcomes.iter().any(Outcome::is_rejected) {
        tx.rollback().await?;
        let outcomes = outcomes
            .into_iter()
            .map(|o| match o {
                Outcome::Created(_) | Outcome::Duplicate(_) => Outcome::Withheld,
                rejected => rejected,
            })
            .collect();
        return Ok(Ingested {
            outcomes,
            committed: false,
            removed_apps: Vec::new(),
        });
    }
    tx.commit().await?;
    Ok(Ingested {
        outcomes,
        committed: true,
        removed_apps: batch.removed_apps,
    })
}

/// Store the run that a running job became, in one transaction with the
/// job's removal. `None`, and nothing stored, when the run would be new but
/// the job no longer runs: its cancellation committed after the caller read
/// the job, and a cancelled job leaves no history. (Before, the end and the
/// cancellation both succeeded, and the cancelled job was stored as a run.)
pub async fn end_job(pool: &PgPool, run: &NewRun) -> sqlx::Result<Option<Ingested>> {
    let (tx, batch, ..) = insert_chosen(pool, &[Ok(run.clone())]).await?;
    let outcome = match batch.inserted.into_iter().next() {
        Some(Inserted::Created(id)) if batch.released.contains(&run.key()) => Outcome::Created(id),
        Some(Inserted::Created(_)) => {
            tx.rollback().await?;
            return Ok(None);
        }
        Some(Inserted::Existing(row)) => answer(run, &NewRun::from(row.as_ref()), row.id, false),
        Some(Inserted::EarlierAttempt(started)) => earlier_attempt(run, started),
        None => {
            return Err(sqlx::Error::Protocol(format!(
                "run {}/{} was neither inserted nor found",
                run.source, run.job_id
            )));
        }
    };
    tx.commit().await?;
    Ok(Some(Ingested {
        outcomes: vec![outcome],
        committed: true,
        removed_apps: batch.removed_apps,
    }))
}

/// An earlier attempt's run (by `running`) other than the item chosen for
/// its key (`first`): refused as one.
fn beside(first: &[Option<usize>], running: &Running, i: usize, run: &NewRun) -> Option<Outcome> {
    (first[i] != Some(i))
        .then(|| store::runs::earlier_attempt(running, run))
        .flatten()
        .map(|started| earlier_attempt(run, started))
}

/// For each valid item, the index of the item stored for its key, and
/// those indices in order.
struct Chosen {
    first: Vec<Option<usize>>,
    firsts: Vec<usize>,
}

/// The item stored for each key: the first, or the first that is not an
/// earlier attempt's run by `running` (so that one listed first does not
/// turn away the running attempt's own).
fn choose(items: &[Result<NewRun, Vec<FieldError>>], running: &Running) -> Chosen {
    let earlier = |run: &NewRun| store::runs::earlier_attempt(running, run);
    let mut chosen: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        if let Ok(run) = item {
            chosen
                .entry((run.source.as_str(), run.job_id.as_str()))
                .and_modify(|j| {
                    if earlier(valid(items, *j)).is_some() && earlier(run).is_none() {
                        *j = i;
                    }
                })
                .or_insert(i);
        }
    }
    let mut first: Vec<Option<usize>> = vec![None; items.len()];
    let mut firsts: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Ok(run) = item {
            let j = chosen[&(run.source.as_str(), run.job_id.as_str())];
            first[i] = Some(j);
            if i == j {
                firsts.push(i);
            }
        }
    }
    Chosen { first, firsts }
}

/// When the running attempts of the jobs the valid `items` name started
/// (`store::runs::running_starts`).
async fn running_starts(
    executor: impl sqlx::PgExecutor<'_>,
    items: &[Result<NewRun, Vec<FieldError>>],
) -> sqlx::Result<Running> {
    let runs: Vec<&NewRun> = items.iter().flatten().collect();
    store::runs::running_starts(executor, &runs).await
}

/// Begin a transaction, read the running attempts in it, choose the item
/// stored for each key (`choose`) and insert those (`store::runs::insert_batch`),
/// trying again, twice at most, after a deadlock or a serialization failure,
/// and, under the admission lock from the start, after a later attempt of
/// one of their jobs started while they were inserted (`Batch::raced`).
async fn insert_chosen<'p>(
    pool: &'p PgPool,
    items: &[Result<NewRun, Vec<FieldError>>],
) -> sqlx::Result<(
    sqlx::Transaction<'p, sqlx::Postgres>,
    store::runs::Batch,
    Running,
    Chosen,
)> {
    let mut transient = 0;
    let mut lock_first = false;
    loop {
        let mut tx = pool.begin().await?;
        let attempt = async {
            // The lock lasts until the transaction ends, whatever becomes
            // of this proof of it.
            let _first = if lock_first {
                Some(store::power::lock_admission(&mut *tx).await?)
            } else {
                None
            };
            let running = running_starts(&mut *tx, items).await?;
            let chosen = choose(items, &running);
            let to_insert: Vec<&NewRun> = chosen.firsts.iter().map(|&i| valid(items, i)).collect();
            let batch =
                store::runs::insert_batch(&mut tx, &to_insert, &running, lock_first).await?;
            Ok::<_, sqlx::Error>((batch, running, chosen))
        }
        .await;
        match attempt {
            Ok((batch, ..)) if batch.raced => {
                tx.rollback().await?;
                tracing::debug!("a job's later attempt started meanwhile; retrying under the lock");
                lock_first = true;
            }
            Ok((batch, running, chosen)) => return Ok((tx, batch, running, chosen)),
            Err(error) if store::is_retryable(&error) && transient < 2 => {
                transient += 1;
                tracing::debug!(%error, transient, "retrying a batch after a transient conflict");
            }
            Err(error) => return Err(error),
        }
    }
}

/// The answer for `run`, whose key names the run `id` with `values`: created
/// (when `created`, by this item) or a duplicate if the values agree, else a
/// conflict naming each difference.
fn answer(run: &NewRun, values: &NewRun, id: i64, created: bool) -> Outcome {
    let differences = differences(run, values);
    if !differences.is_empty() {
        Outcome::Conflict {
            run_id: Some(id),
            differences,
        }
    } else if created {
        Outcome::Created(id)
    } else {
        Outcome::Duplicate(id)
    }
}

fn valid(items: &[Result<NewRun, Vec<FieldError>>], i: usize) -> &NewRun {
    items[i].as_ref().expect("a valid item")
}

/// The answers of a refused atomic batch: invalid items say why, the others
/// were withheld.
fn refused(items: &[Result<NewRun, Vec<FieldError>>]) -> Vec<Outcome> {
    items
        .iter()
        .map(|item| match item {
            Err(errors) => Outcome::Invalid(errors.clone()),
            Ok(_) => Outcome::Withheld,
        })
        .collect()
}

/// How `new` differs from `stored`, field by field (all but the key). Quantities
/// are compared with a relative tolerance of 1e-9, so a resend that spells out
/// the derived quantity still counts as the same run.
pub fn differences(new: &NewRun, stored: &NewRun) -> Vec<FieldError> {
    compare(new, stored, "stored value is")
}

/// How `new` differs from `stored`, which the reasons call `what` ("stored
/// value is", or another item of the batch: a clash within a refused
/// atomic batch was called a stored value before).
fn compare(new: &NewRun, stored: &NewRun, what: &str) -> Vec<FieldError> {
    // A node list is a set: the same nodes in another order are the same.
    fn sorted(list: &Option<Vec<String>>) -> Option<Vec<&str>> {
        let mut names: Vec<&str> = list.as_ref()?.iter().map(String::as_str).collect();
        names.sort_unstable();
        Some(names)
    }
    // Equal within the tolerance compares as equal; otherwise the values themselves.
    fn quantity(new: f64, stored: f64) -> (f64, f64) {
        if crate::domain::same_quantity(new, stored) {
            (stored, stored)
        } else {
            (new, stored)
        }
    }
    let mut out = Differences {
        what,
        errors: Vec::new(),
    };
    out.differ("app", &new.app, &stored.app);
    out.differ("nodes", new.nodes, stored.nodes);
    if sorted(&new.node_list) != sorted(&stored.node_list) {
        out.differ("node_list", &new.node_list, &stored.node_list);
    }
    for (field, n, s) in [
        ("energy_j", new.energy_j, stored.energy_j),
        ("avg_power_w", new.avg_power_w, stored.avg_power_w),
        ("duration_s", new.duration_s, stored.duration_s),
        ("quality", new.quality, stored.quality),
    ] {
        let (n, s) = quantity(n, s);
        out.differ(field, n, s);
    }
    out.differ("started_at", new.started_at, stored.started_at);
    out.differ("ended_at", new.ended_at, stored.ended_at);
    // A run sent without an account may have been given its job's
    // (`store::runs::insert_batch`): only an account sent is compared.
    if new.account.is_some() {
        out.differ("account", &new.account, &stored.account);
    }
    out.errors
}

/// The fields found to differ, each with both values, the other one
/// introduced by `what`.
struct Differences<'a> {
    what: &'a str,
    errors: Vec<FieldError>,
}

impl Differences<'_> {
    fn differ<T: PartialEq + serde::Serialize>(&mut self, field: &str, new: T, stored: T) {
        if new != stored {
            // As JSON, as the client wrote them.
            let json = |v: &T| serde_json::to_string(v).unwrap_or_default();
            let reason = format!(
                "{} {}, this one is {}",
                self.what,
                json(&stored),
                json(&new)
            );
            self.errors.push(FieldError::new(field, reason));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-06-01T12:00:00Z".parse().unwrap()
    }

    fn draft() -> RunDraft {
        RunDraft {
            app: "lammps-lj".into(),
            source: "clusterA".into(),
            job_id: "1001".into(),
            nodes: 4,
            energy_j: Some(1_000_000.0),
            avg_power_w: Some(1_000.0),
            ..RunDraft::default()
        }
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn the_third_quantity_is_derived() {
        let run = validate(draft(), now()).unwrap();
        assert_eq!(run.duration_s, 1_000.0);
        assert_eq!(run.derived, Some(Derived::DurationS));

        let d = RunDraft {
            energy_j: None,
            duration_s: Some(50.0),
            ..draft()
        };
        let run = validate(d, now()).unwrap();
        assert_eq!(run.energy_j, 50_000.0);
        assert_eq!(run.derived, Some(Derived::EnergyJ));

        let d = RunDraft {
            avg_power_w: None,
            duration_s: Some(4_000.0),
            ..draft()
        };
        let run = validate(d, now()).unwrap();
        assert_eq!(run.avg_power_w, 250.0);
        assert_eq!(run.derived, Some(Derived::AvgPowerW));
    }

    #[test]
    fn three_quantities_must_agree_within_five_percent() {
        let within = RunDraft {
            duration_s: Some(1_040.0),
            ..draft()
        };
        let run = validate(within, now()).unwrap();
        assert_eq!(run.derived, None);
        assert_eq!(run.duration_s, 1_040.0);

        let apart = RunDraft {
            duration_s: Some(1_060.0),
            ..draft()
        };
        let errors = validate(apart, now()).unwrap_err();
        assert_eq!(fields(&errors), ["energy_j", "avg_power_w", "duration_s"]);
    }

    #[test]
    fn quantities_at_the_ends_of_their_range_are_compared_and_derived_safely() {
        // Each within the accepted range (a duration up to ten years), their
        // product far from the energy.
        let d = RunDraft {
            nodes: 1_000_000,
            energy_j: Some(1.0),
            avg_power_w: Some(1e11),
            duration_s: Some(MAX_DURATION_S),
            ..draft()
        };
        let errors = validate(d, now()).unwrap_err();
        assert_eq!(fields(&errors), ["energy_j", "avg_power_w", "duration_s"]);
        // Derived from two in range: the product leaves the range, and the
        // derived field is the one named.
        let d = RunDraft {
            energy_j: None,
            avg_power_w: Some(1e100),
            duration_s: Some(MAX_DURATION_S),
            ..draft()
        };
        let errors = validate(d, now()).unwrap_err();
        assert_eq!(fields(&errors), ["energy_j"]);
        assert!(errors[0].reason.starts_with("derived value"), "{errors:?}");
        // Beyond the range, each given value is refused by name.
        let d = RunDraft {
            energy_j: None,
            avg_power_w: Some(1e200),
            duration_s: Some(1e-200),
            ..draft()
        };
        assert_eq!(
            fields(&validate(d, now()).unwrap_err()),
            ["avg_power_w", "duration_s"]
        );
    }

    #[test]
    fn durations_over_ten_years_are_refused() {
        let d = RunDraft {
            energy_j: None,
            avg_power_w: Some(100.0),
            duration_s: Some(MAX_DURATION_S * 1.01),
            ..draft()
        };
        assert_eq!(fields(&validate(d, now()).unwrap_err()), ["duration_s"]);
        // Named beside the other fields' problems, not only once they are
        // fixed; derived from energy and power, too.
        let d = RunDraft {
            nodes: 0,
            energy_j: Some(-5.0),
            avg_power_w: None,
            duration_s: Some(1e12),
            ..draft()
        };
        assert_eq!(
            fields(&validate(d, now()).unwrap_err()),
            ["nodes", "energy_j", "duration_s"]
        );
        let d = RunDraft {
            energy_j: Some(MAX_DURATION_S * 2.0),
            avg_power_w: Some(1.0),
            duration_s: None,
            ..draft()
        };
        let errors = validate(d, now()).unwrap_err();
        assert_eq!(fields(&errors), ["duration_s"]);
        assert!(errors[0].reason.contains("ten years"), "{errors:?}");
    }

    #[test]
    fn fewer_than_two_quantities_names_the_missing_ones() {
        let d = RunDraft {
            avg_power_w: None,
            ..draft()
        };
        let errors = validate(d, now()).unwrap_err();
        assert_eq!(fields(&errors), ["avg_power_w", "duration_s"]);
    }

    #[test]
    fn every_rule_names_its_field() {
        let cases: Vec<(RunDraft, &str)> = vec![
            (
                RunDraft {
                    nodes: 0,
                    ..draft()
                },
                "nodes",
            ),
            (
                RunDraft {
                    nodes: validate::MAX_NODES + 1,
                    ..draft()
                },
                "nodes",
            ),
            (
                RunDraft {
                    energy_j: Some(0.0),
                    ..draft()
                },
                "energy_j",
            ),
            (
                RunDraft {
                    avg_power_w: Some(-5.0),
                    ..draft()
                },
                "avg_power_w",
            ),
            (
                RunDraft {
                    duration_s: Some(f64::NAN),
                    energy_j: None,
                    ..draft()
                },
                "duration_s",
            ),
            (
                RunDraft {
                    quality: Some(0.0),
                    ..draft()
                },
                "quality",
            ),
            (
                RunDraft {
                    quality: Some(1.5),
                    ..draft()
                },
                "quality",
            ),
            (
                RunDraft {
                    app: "bad tag".into(),
                    ..draft()
                },
                "app",
            ),
            (
                RunDraft {
                    app: "x".repeat(129),
                    ..draft()
                },
                "app",
            ),
            (
                RunDraft {
                    source: String::new(),
                    ..draft()
                },
                "source",
            ),
            (
                RunDraft {
                    job_id: "12/3".into(),
                    ..draft()
                },
                "job_id",
            ),
            (
                RunDraft {
                    account: Some("a b".into()),
                    ..draft()
                },
                "account",
            ),
            (
                RunDraft {
                    node_list: Some(NodeListDraft::Names(vec!["n1".into(), "n2".into()])),
                    ..draft()
                },
                "node_list",
            ),
            (
                RunDraft {
                    started_at: Some(now()),
                    ended_at: Some(now() - Duration::seconds(10)),
                    ..draft()
                },
                "ended_at",
            ),
            (
                RunDraft {
                    ended_at: Some(now() + Duration::days(2)),
                    ..draft()
                },
                "ended_at",
            ),
            (
                RunDraft {
                    avg_power_w: Some(1e9),
                    energy_j: Some(1e12),
                    ..draft()
                },
                "avg_power_w",
            ),
        ];
        for (case, field) in cases {
            let described = format!("{case:?}");
            let errors = validate(case, now()).expect_err(&described);
            assert!(fields(&errors).contains(&field), "{described}: {errors:?}");
        }
    }

    #[test]
    fn node_list_entries_are_checked_one_by_one() {
        let d = RunDraft {
            nodes: 3,
            node_list: Some(NodeListDraft::Names(vec![
                "n1".into(),
                "n,2".into(),
                "n1".into(),
            ])),
            ..draft()
        };
        let errors = validate(d, now()).unwrap_err();
        assert_eq!(fields(&errors), ["node_list[1]", "node_list[2]"]);
    }

    #[test]
    fn a_list_of_names_is_held_to_what_a_host_list_may_name() {
        let names = |n: usize| (0..n).map(|i| format!("cn{i}")).collect::<Vec<_>>();
        let at_most = RunDraft {
            nodes: hostlist::MAX_HOSTS as i64,
            node_list: Some(NodeListDraft::Names(names(hostlist::MAX_HOSTS))),
            energy_j: Some(1e11),
            avg_power_w: Some(1e8),
            ..draft()
        };
        assert!(validate(at_most, now()).is_ok());
        let more = RunDraft {
            nodes: hostlist::MAX_HOSTS as i64 + 1,
            node_list: Some(NodeListDraft::Names(names(hostlist::MAX_HOSTS + 1))),
            ..draft()
        };
        let errors = validate(more, now()).unwrap_err();
        assert_eq!(fields(&errors), ["node_list"]);
        // The same list as a host list is refused too.
        let written = RunDraft {
            nodes: hostlist::MAX_HOSTS as i64 + 1,
            node_list: Some(NodeListDraft::Hostlist(format!(
                "cn[0-{}]",
                hostlist::MAX_HOSTS
            ))),
            ..draft()
        };
        assert_eq!(
            fields(&validate(written, now()).unwrap_err()),
            ["node_list"]
        );
    }

    #[test]
    fn start_and_end_must_match_the_duration() {
        let start = now() - Duration::seconds(2_000);
        let ok = RunDraft {
            started_at: Some(start),
            ended_at: Some(start + Duration::seconds(1_000)),
            ..draft()
        };
        assert!(validate(ok, now()).is_ok());
        let off = RunDraft {
            started_at: Some(start),
            ended_at: Some(start + Duration::seconds(1_500)),
            ..draft()
        };
        let errors = validate(off, now()).unwrap_err();
        assert_eq!(fields(&errors), ["duration_s", "started_at", "ended_at"]);
    }

    #[test]
    fn timestamps_are_kept_to_the_microsecond() {
        let end: DateTime<Utc> = "2026-05-01T00:00:00.123456789Z".parse().unwrap();
        let run = validate(
            RunDraft {
                ended_at: Some(end),
                ..draft()
            },
            now(),
        )
        .unwrap();
        assert_eq!(run.ended_at.unwrap().timestamp_subsec_nanos(), 123_456_000);
    }

    #[test]
    fn a_resend_with_the_derived_value_spelled_out_is_the_same_run() {
        let first = validate(draft(), now()).unwrap();
        let explicit = validate(
            RunDraft {
                duration_s: Some(first.duration_s),
                ..draft()
            },
            now(),
        )
        .unwrap();
        assert!(differences(&explicit, &first).is_empty());
        let changed = validate(
            RunDraft {
                energy_j: Some(1_100_000.0),
                ..draft()
            },
            now(),
        )
        .unwrap();
        let diff = differences(&changed, &first);
        assert_eq!(fields(&diff), ["energy_j", "duration_s"]);
    }
}

//! Admission: may a queued job start now? (docs/model.md §5)
//!
//! Two checks, each with the numbers behind it:
//! - **power**: under the cap in force for the job's partition and for the
//!   whole system, the draw after the job starts (its reserved power replaces
//!   the idle power of the nodes it takes) must stay within the cap;
//! - **energy**: the job's predicted EtS must fit in what its account's
//!   budget has left (limit − consumed − committed by running jobs).
//!
//! The answer is advice: it reserves nothing. A job start (`jobs::start`)
//! makes the same decision again under a lock and stores the job in the same
//! transaction, so that two jobs cannot both take headroom only one fits in.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::budgets::standing;
use super::jobs::{Estimate, estimate};
use super::power::ScopeDraws;
use super::predictions::{AggregateName, NodeScope, check_workload, scope_nodes, settle_partition};
use super::{Error, Result, Service, apps, power};
use crate::domain::ReservedBasis;
use crate::ingest::{NodeListDraft, NodeListSchema};
use crate::store::{self, caps::CapRow, power::Load};
use crate::text::whole;
use crate::validate::{self, Account, FieldError, Tag};

/// A queued job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionInput {
    /// Application tag. An application never seen, or without runs, gets the
    /// conservative answer (see `Admission`).
    pub app: String,
    /// Node count; required unless `node_list` is given.
    pub nodes: Option<i64>,
    /// The nodes it would run on: names, or one string in Slurm hostlist syntax
    /// (`"cn[01-04,07]"`).
    #[schema(value_type = Option<NodeListSchema>)]
    pub node_list: Option<NodeListDraft>,
    /// Checked against this partition's cap as well as the system's.
    pub partition: Option<String>,
    /// Checked against this account's energy budget.
    pub account: Option<String>,
    /// When the job would start (RFC 3339, default now): its run, from then
    /// for its time limit (else its predicted TtS), is judged under the
    /// tightest cap in force during it (from now on, for a start in the
    /// past). The draw is that at the start (or at a later cap's start), as
    /// far as it is known now: without the running jobs whose reservations
    /// end by then. The budget is that of now.
    pub start_at: Option<DateTime<Utc>>,
    /// The job's time limit, s: how long its run may reach into a cap that
    /// begins later. Without history, the job's energy is bounded by its
    /// reserved power × this limit. At most ten years.
    #[schema(minimum = 1e-100, maximum = 315_576_000.0)]
    pub time_limit_s: Option<f64>,
    /// Reference workload for the node classification; default the service's.
    pub workload: Option<String>,
    /// How the runs at the job's node count, if any were measured there,
    /// are combined: `mean` (the default) or `max`, which reserves what the
    /// hungriest of them drew, as max-nodes holds a limit with
    /// `aggregate=max`. `min` is refused: a job reserves at least the mean.
    pub aggregate: Option<AggregateName>,
}

/// The fields a job start and an admission question share, checked alike.
pub(crate) struct JobShape<'a> {
    pub app: &'a str,
    pub nodes: Option<i64>,
    pub node_list: Option<&'a NodeListDraft>,
    pub partition: Option<String>,
    pub account: Option<&'a str>,
    pub time_limit_s: Option<f64>,
    pub workload: Option<String>,
    pub aggregate: Option<AggregateName>,
}

/// A job's shape, checked: its application, account, node count and node
/// scope, and how runs at its node count are combined.
pub(crate) struct CheckedShape {
    pub app: Tag,
    pub account: Option<Account>,
    pub nodes: u32,
    pub scope: NodeScope,
    pub aggregate: AggregateName,
}

impl JobShape<'_> {
    /// The shape checked, after recording what is wrong.
    pub fn check(self, service: &Service, problems: &mut Vec<FieldError>) -> Option<CheckedShape> {
        let app = validate::checked(problems, "app", Tag::parse(self.app));
        let account = self.account.map(Account::parse).transpose();
        let account = validate::checked(problems, "account", account);
        if let Some(Err(reason)) = self.time_limit_s.map(validate::time_limit) {
            problems.push(FieldError::new("time_limit_s", reason));
        }
        // A reservation below the runs' mean draw would let a job pass a
        // cap its runs say it breaks, and commit less energy to a budget.
        if self.aggregate == Some(AggregateName::Min) {
            problems.push(FieldError::new(
                "aggregate",
                "must be mean or max: a job reserves at least the mean of the runs at its node count",
            ));
        }
        let before = problems.len();
        let node_list = self.node_list.map(|l| l.as_hostlist("node_list", problems));
        if problems.len() > before {
            // Named name by name: the joined list would only repeat them.
            return None;
        }
        let scope = NodeScope::check(
            service,
            self.workload,
            self.partition,
            node_list.as_deref(),
            "",
            problems,
        );
        let nodes = scope_nodes(self.nodes, &scope, "", problems);
        match (app, account, nodes, scope) {
            (Some(app), Some(account), Some(nodes), Some(scope)) if problems.is_empty() => {
                Some(CheckedShape {
                    app,
                    account,
                    nodes,
                    scope,
                    aggregate: self.aggregate.unwrap_or_default(),
                })
            }
            _ => None,
        }
    }
}

/// What is predicted for the job (`null` without history).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AdmissionPrediction {
    /// Whether the application has runs to predict from.
    pub history: bool,
    pub apc_w: Option<f64>,
    pub ets_j: Option<f64>,
    pub tts_s: Option<f64>,
}

/// The power check of one scope.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ScopeCheck {
    /// The partition, or `null` for the whole system.
    pub partition: Option<String>,
    /// The cap the job fits under least while it would run (from its start
    /// for its time limit, else for its predicted time): the one in force at
    /// its start, or one beginning later; `null` (and the headrooms too)
    /// when none is.
    pub cap_name: Option<String>,
    pub cap_w: Option<f64>,
    /// When that cap begins, if after the job's start (a maintenance window
    /// within its run); the draw is then the one expected then: without
    /// the running jobs whose reservations end before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_from: Option<DateTime<Utc>>,
    /// Draw now (or from `cap_from`): running jobs' reserved power plus
    /// idle nodes, W.
    pub draw_w: f64,
    pub headroom_before_w: Option<f64>,
    /// The idle power of the nodes the job would take, which its own power
    /// replaces, W.
    pub idle_released_w: f64,
    /// cap − (draw − idle released + the job's reserved power), W.
    pub headroom_after_w: Option<f64>,
    pub fits: bool,
}

/// The power answer: the binding scope's figures (the capped scope with the
/// least headroom after the job), and every scope's check.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PowerCheck {
    /// The job fits under every cap in force.
    pub fits: bool,
    /// The binding scope's partition, or `null` for the whole system.
    pub partition: Option<String>,
    pub cap_name: Option<String>,
    pub cap_w: Option<f64>,
    /// When that cap begins, if during the job's run (see `ScopeCheck`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_from: Option<DateTime<Utc>>,
    pub headroom_before_w: Option<f64>,
    /// The power the job would reserve, W: its node set's APC, else the
    /// worst-node bound, else the expected APC; without history, nodes × the
    /// largest vendor peak (else 1000 W per node).
    pub predicted_apc_w: f64,
    pub basis: ReservedBasis,
    pub idle_released_w: f64,
    pub headroom_after_w: Option<f64>,
    /// The partition's check (when a partition is given), then the system's.
    pub scopes: Vec<ScopeCheck>,
}

/// What the energy a job is checked with comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnergyBasis {
    /// The predicted EtS.
    Predicted,
    /// No history: the reserved power × `time_limit_s`.
    TimeLimit,
    /// No history and no time limit.
    Unknown,
}

impl std::fmt::Display for EnergyBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EnergyBasis::Predicted => "predicted",
            EnergyBasis::TimeLimit => "time_limit",
            EnergyBasis::Unknown => "unknown",
        })
    }
}

/// The energy answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnergyCheck {
    pub fits: bool,
    pub account: Option<String>,
    /// Whether the account has a budget in force now (a custom budget
    /// outside its period is not); without one nothing limits it.
    pub budget: bool,
    /// What the budget has left: limit − consumed − committed, J.
    pub remaining_j: Option<f64>,
    /// The job's energy, J: predicted EtS; without history, its reserved
    /// power × `time_limit_s`; `null` when neither is known.
    pub predicted_ets_j: Option<f64>,
    pub basis: EnergyBasis,
    /// What the job counts against the budget now, as the budget counts
    /// running jobs, J: its energy above; more for a start reported after
    /// its predicted TtS (EtS ÷ TtS × the time since its start); nothing for
    /// one whose reservation would have ended; `null` when unknown.
    pub committed_j: Option<f64>,
    /// remaining − committed, J.
    pub remaining_after_j: Option<f64>,
    /// The end of the budget's current period.
    pub period_end: Option<DateTime<Utc>>,
}

/// Whether the job may start, and why.
///
/// An application without history is answered conservatively: it reserves
/// nodes × the largest vendor peak of the scope's nodes (1000 W per node
/// when no peak is registered), and its energy is that power × its time
/// limit; without a time limit its energy is unknown, which an account
/// with a budget does not admit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Admission {
    /// `power.fits && energy.fits`.
    pub admit: bool,
    pub app: String,
    pub nodes: u32,
    /// The job's start: caps are checked from then (from now, for a start
    /// in the past or a job start, which counts from now) to the end of
    /// its run.
    pub at: DateTime<Utc>,
    /// One sentence per check, saying what was compared.
    pub reasons: Vec<String>,
    pub prediction: AdmissionPrediction,
    pub power: PowerCheck,
    pub energy: EnergyCheck,
}

/// A job about to be admitted.
pub(crate) struct Candidate<'a> {
    pub app: &'a str,
    pub nodes: u32,
    pub scope: &'a NodeScope,
    pub account: Option<&'a str>,
    pub at: DateTime<Utc>,
    pub time_limit_s: Option<f64>,
    /// When its reservation would end (`Expiry::ends_at`): from then it
    /// counts nowhere.
    pub holds_until: DateTime<Utc>,
    /// A job start, which counts from now, whenever it says it began.
    pub counted_now: bool,
}

/// Decide on `job` against `load` (the running jobs and nodes) and the caps
/// and budget read through `conn` (inside the admission lock, with a fresh
/// load, for a job start).
pub(crate) async fn decide(
    conn: &mut PgConnection,
    load: &Load,
    job: &Candidate<'_>,
    estimate: &Estimate,
    now: DateTime<Utc>,
) -> Result<Admission> {
    let partition = job.scope.partition.as_deref();
    // A cap that begins while the job would still run binds it too (a
    // maintenance window): each scope's cap in force at the start and every
    // cap beginning during the run (from its start for its time limit, else
    // for its predicted time), each against the load when it begins, as far
    // as it is known now (`Load::at`: the jobs whose reservations have ended
    // by then no longer count). The scope's answer is the check with the
    // least headroom after the job.
    //
    // A run that began before now is bound by the caps from now to its
    // end (at the least the cap in force now, where its time limit, else
    // its predicted time, has passed: its reservation still counts until
    // it ends), not by one that ended before this check (a start reported
    // late, or a job that began before the window). A job start counts
    // from now whenever it says it began, so a start dated ahead (a clock
    // that runs fast) is bound from now too. A run asked about for a later
    // start is weighed, under the cap in force at its start, against the
    // load then as far as it is known now, as the headroom at that time
    // is. Only a job whose reservation would have ended by now, which
    // counts nowhere, is bound by no cap. The budget is that of now,
    // whenever the job starts.
    let until = run_until(job.at, job.time_limit_s.or(estimate.tts_s));
    let checked_from = if job.counted_now {
        now
    } else {
        job.at.max(now)
    };
    let over = job.holds_until <= now;
    let later = (checked_from > now).then(|| load.at(checked_from));
    let power_load = later.as_ref().unwrap_or(load);
    let (own_caps, system_caps) = if over {
        (Vec::new(), Vec::new())
    } else {
        store::caps::during(&mut *conn, partition, checked_from, until.max(checked_from)).await?
    };
    let check = |scope: Option<&str>, caps: Vec<CapRow>| {
        caps.into_iter()
            .map(|cap| {
                let from = cap.starts_at.filter(|&t| t > checked_from);
                let then = from.map(|t| power_load.at(t));
                let load = then.as_ref().unwrap_or(power_load);
                scope_check(load, scope, Some(cap), job, estimate.reserved_w, from)
            })
            .min_by(least_headroom_after)
            .unwrap_or_else(|| scope_check(power_load, scope, None, job, estimate.reserved_w, None))
    };
    let mut scopes = Vec::with_capacity(2);
    if partition.is_some() {
        scopes.push(check(partition, own_caps));
    }
    scopes.push(check(None, system_caps));
    let energy = energy_check(conn, load, job, estimate, now).await?;

    let binding = scopes
        .iter()
        .filter(|s| s.headroom_after_w.is_some())
        .min_by(|a, b| least_headroom_after(a, b))
        .unwrap_or(&scopes[0])
        .clone();
    let mut reasons = Vec::new();
    if estimate.apc_w.is_none() {
        reasons.push(format!(
            "{} has no history: it reserves {} W for {} nodes, the conservative default",
            job.app,
            whole(estimate.reserved_w),
            job.nodes
        ));
    }
    if over {
        reasons.push(format!(
            "power: its reservation would have ended by now (started {}), so it counts \
             against no cap",
            job.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    } else {
        for s in &scopes {
            reasons.push(power_reason(s, estimate));
        }
    }
    if let Some(list) = &job.scope.list {
        let shared = load.held_of(list);
        if !shared.is_empty() {
            reasons.push(shared_reason(&shared));
        }
    }
    reasons.push(energy_reason(&energy));
    let power = PowerCheck {
        fits: scopes.iter().all(|s| s.fits),
        partition: binding.partition,
        cap_name: binding.cap_name,
        cap_w: binding.cap_w,
        cap_from: binding.cap_from,
        headroom_before_w: binding.headroom_before_w,
        predicted_apc_w: estimate.reserved_w,
        basis: estimate.basis,
        idle_released_w: binding.idle_released_w,
        headroom_after_w: binding.headroom_after_w,
        scopes,
    };
    Ok(Admission {
        admit: power.fits && energy.fits,
        app: job.app.to_owned(),
        nodes: job.nodes,
        at: job.at,
        reasons,
        prediction: AdmissionPrediction {
            history: estimate.apc_w.is_some(),
            apc_w: estimate.apc_w,
            ets_j: estimate.ets_j,
            tts_s: estimate.tts_s,
        },
        power,
        energy,
    })
}

/// Orders checks by their headroom after the job, least first (a scope
/// without a cap last).
fn least_headroom_after(a: &ScopeCheck, b: &ScopeCheck) -> std::cmp::Ordering {
    let after = |s: &ScopeCheck| s.headroom_after_w.unwrap_or(f64::INFINITY);
    after(a).total_cmp(&after(b))
}

/// The end of a job's run from `at`, for `seconds` (at most the longest
/// time limit); `at` itself when the duration is unknown.
fn run_until(at: DateTime<Utc>, seconds: Option<f64>) -> DateTime<Utc> {
    seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| {
            let s = s.min(crate::domain::MAX_DURATION_S);
            chrono::TimeDelta::milliseconds((s * 1000.0).ceil() as i64)
        })
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(at)
}

fn scope_check(
    load: &Load,
    partition: Option<&str>,
    cap: Option<CapRow>,
    job: &Candidate<'_>,
    reserved_w: f64,
    cap_from: Option<DateTime<Utc>>,
) -> ScopeCheck {
    let (cap_name, cap_w) = (cap.as_ref().map(|c| c.name.clone()), cap.map(|c| c.limit_w));
    let list = job.scope.list.as_deref().unwrap_or_default();
    // In the system's scope, each partition's idle nodes at their own power
    // (`power::ScopeDraws`), the job's among its partition's: one pass over
    // the load for the draw before the job and after it.
    let own = job.scope.partition.as_deref();
    let draws = ScopeDraws::of(load, partition, list, own);
    let before = draws.idle(|_, d| (d.free, d.anonymous_nodes));
    let after = if job.scope.list.is_some() {
        draws.idle(|_, d| (d.free.without(d.taken), d.anonymous_nodes))
    } else {
        let nodes = i64::from(job.nodes);
        draws.idle(|p, d| {
            let here = partition.is_some() || p == own;
            (d.free, d.anonymous_nodes + if here { nodes } else { 0 })
        })
    };
    let draw_w = draws.reserved_w() + before.power_w;
    let idle_released_w = before.power_w - after.power_w;
    let headroom_after_w = cap_w.map(|cap| cap - (draw_w - idle_released_w + reserved_w));
    ScopeCheck {
        partition: partition.map(str::to_owned),
        cap_name,
        cap_w,
        cap_from,
        draw_w,
        headroom_before_w: cap_w.map(|cap| cap - draw_w),
        idle_released_w,
        fits: headroom_after_w.is_none_or(|h| h >= 0.0),
        headroom_after_w,
    }
}

async fn energy_check(
    conn: &mut PgConnection,
    load: &Load,
    job: &Candidate<'_>,
    estimate: &Estimate,
    now: DateTime<Utc>,
) -> Result<EnergyCheck> {
    let (predicted_ets_j, basis) = match (estimate.ets_j, job.time_limit_s) {
        (Some(ets), _) => (Some(ets), EnergyBasis::Predicted),
        (None, Some(limit)) => (Some(estimate.reserved_w * limit), EnergyBasis::TimeLimit),
        (None, None) => (None, EnergyBasis::Unknown),
    };
    let committed_j = if job.holds_until <= now {
        Some(0.0)
    } else {
        match (estimate.ets_j, estimate.tts_s) {
            (Some(ets), Some(tts)) => Some(super::budgets::committed_by(ets, tts, job.at, now)),
            _ => predicted_ets_j,
        }
    };
    let budget = match job.account {
        Some(account) => store::budgets::get(&mut *conn, account).await?,
        None => None,
    };
    let Some(budget) = budget else {
        return Ok(EnergyCheck {
            fits: true,
            account: job.account.map(str::to_owned),
            budget: false,
            remaining_j: None,
            predicted_ets_j,
            basis,
            committed_j,
            remaining_after_j: None,
            period_end: None,
        });
    };
    let standing = standing(conn, load, budget, now).await?;
    if !super::budgets::in_force(standing.period_start, standing.period_end, now) {
        // A custom period that has ended or not yet begun: the energy used
        // now cannot count against it.
        return Ok(EnergyCheck {
            fits: true,
            account: Some(standing.account),
            budget: false,
            remaining_j: None,
            predicted_ets_j,
            basis,
            committed_j,
            remaining_after_j: None,
            period_end: Some(standing.period_end),
        });
    }
    let remaining_after_j = committed_j.map(|e| standing.remaining_j - e);
    Ok(EnergyCheck {
        // A job that commits nothing cannot overdraw the budget, even one
        // used up already.
        fits: committed_j == Some(0.0) || remaining_after_j.is_some_and(|r| r >= 0.0),
        account: Some(standing.account),
        budget: true,
        remaining_j: Some(standing.remaining_j),
        predicted_ets_j,
        basis,
        committed_j,
        remaining_after_j,
        period_end: Some(standing.period_end),
    })
}

fn scope_name(partition: Option<&str>) -> String {
    partition.map_or_else(
        || "the whole system".to_owned(),
        |p| format!("partition {p}"),
    )
}

fn power_reason(s: &ScopeCheck, estimate: &Estimate) -> String {
    let scope = scope_name(s.partition.as_deref());
    let (Some(cap), Some(name), Some(before), Some(after)) = (
        s.cap_w,
        s.cap_name.as_deref(),
        s.headroom_before_w,
        s.headroom_after_w,
    ) else {
        return format!("power: no cap is in force for {scope}");
    };
    let needs = whole(estimate.reserved_w - s.idle_released_w);
    let (cap, before) = (whole(cap), whole(before));
    // A cap that begins during the job's run says when.
    let from = s.cap_from.map_or_else(String::new, |t| {
        format!(
            ", from {} within the job's run",
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    });
    if s.fits {
        format!(
            "power: fits under cap {name} ({cap} W, {scope}{from}): {before} W of headroom, \
             {} W after the job adds {needs} W ({} W {}, less {} W its nodes draw idle)",
            whole(after),
            whole(estimate.reserved_w),
            estimate.basis,
            whole(s.idle_released_w)
        )
    } else {
        format!(
            "power: does not fit under cap {name} ({cap} W, {scope}{from}): the job adds \
             {needs} W but only {before} W of headroom is left ({} W over)",
            whole(-after)
        )
    }
}

/// Nodes of the job's list that a running job names too: shared nodes, or a
/// job whose end was never reported (`GET /v1/jobs` shows which).
fn shared_reason(shared: &[&str]) -> String {
    let names = crate::text::names_shown(shared, 10);
    let (count, verb) = match shared.len() {
        1 => ("1 of its nodes".to_owned(), "is"),
        n => (format!("{n} of its nodes"), "are"),
    };
    format!(
        "nodes: {count} ({names}) {verb} held by a running job too: shared nodes, or a job \
         whose end was not reported; both jobs' power counts, and those nodes release no idle \
         power"
    )
}

/// An energy for people: kWh, to three significant figures (budgets are
/// set and read in kWh; "0.000e0 J" said nothing).
fn kwh(joules: f64) -> String {
    format!("{} kWh", crate::text::sig3(joules / 3.6e6))
}

fn energy_reason(e: &EnergyCheck) -> String {
    let account = e.account.as_deref().unwrap_or_default();
    // A start reported after its predicted time commits more than its EtS.
    let basis = if e.committed_j == e.predicted_ets_j {
        e.basis.to_string()
    } else {
        "EtS ÷ TtS since its start".to_owned()
    };
    match (e.account.is_some(), e.budget, e.committed_j, e.remaining_j) {
        (false, ..) => "energy: no account given, so no budget applies".to_owned(),
        (true, false, ..) => format!("energy: account {account} has no budget in force now"),
        (true, true, _, Some(remaining)) if !e.fits && remaining <= 0.0 => format!(
            "energy: account {account}'s budget is used up ({} left, counting the running \
             jobs' commitments){}",
            kwh(remaining),
            e.committed_j
                .map(|ets| format!(", so the job's {} ({basis}) cannot fit", kwh(ets)))
                .unwrap_or_default()
        ),
        (true, true, None, Some(remaining)) => format!(
            "energy: the application has no history and no time_limit_s was given, so its \
             energy cannot be bounded against the {} left in account {account}'s budget",
            kwh(remaining)
        ),
        (true, true, Some(0.0), Some(_)) => format!(
            "energy: its reservation would have ended by now, so it commits nothing to \
             account {account}'s budget"
        ),
        (true, true, Some(ets), Some(remaining)) if e.fits => format!(
            "energy: the job's {} ({}) fit in the {} left in account {account}'s budget",
            kwh(ets),
            basis,
            kwh(remaining)
        ),
        (true, true, Some(ets), Some(remaining)) => format!(
            "energy: the job's {} ({}) exceed the {} left in account {account}'s budget",
            kwh(ets),
            basis,
            kwh(remaining)
        ),
        (true, true, _, None) => format!("energy: account {account}'s budget is unknown"),
    }
}

/// Whether `input`'s job may start now, with the numbers behind the answer.
/// Advice only: nothing is reserved (`jobs::start` decides again and
/// reserves under the admission lock).
pub async fn advise(service: &Service, input: AdmissionInput) -> Result<Admission> {
    let mut problems = Vec::new();
    if let Some(Err(reason)) = input.start_at.map(validate::time_in_range) {
        problems.push(FieldError::new("start_at", reason));
    }
    let shape = JobShape {
        app: &input.app,
        nodes: input.nodes,
        node_list: input.node_list.as_ref(),
        partition: input.partition,
        account: input.account.as_deref(),
        time_limit_s: input.time_limit_s,
        workload: input.workload,
        aggregate: input.aggregate,
    };
    let Some(CheckedShape {
        app: tag,
        account,
        nodes,
        mut scope,
        aggregate,
    }) = shape.check(service, &mut problems)
    else {
        return Err(Error::Invalid(problems));
    };
    settle_partition(service, &mut scope).await?;
    check_workload(service, &scope, None).await?;
    let app = apps::find_known(service, &tag).await?;
    let estimate = estimate(service, app.as_deref(), nodes, &scope, aggregate).await?;
    let now = Utc::now();
    let at = validate::as_stored(input.start_at.unwrap_or(now));
    let job = Candidate {
        app: &tag,
        nodes,
        scope: &scope,
        account: account.as_deref(),
        // As times are stored and answered: to the microsecond.
        at,
        time_limit_s: input.time_limit_s,
        holds_until: service.settings.expiry.ends_at(at, input.time_limit_s),
        counted_now: false,
    };
    let load = power::current_load(service).await?;
    let estimate = estimate.at_least_idle(&load, &scope, nodes);
    let mut conn = service.pool.acquire().await?;
    let admission = decide(&mut conn, &load, &job, &estimate, now).await?;
    count_decision(Asked::Question, &admission);
    Ok(admission)
}

/// What an admission decision answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Asked {
    /// `POST /v1/admission`: may this job start?
    Question,
    /// `POST /v1/jobs`: a job starting, and whether it was stored (a job
    /// that does not fit is stored only when forced).
    JobStart { stored: bool },
}

/// Count a decision on `/metrics`:
/// `admission_decisions_total{request, decision, reason}`, the decision
/// `admit`, `refuse`, or `forced` (a job start stored although it did not
/// fit), the reason `fits`, `power_cap`, `energy_budget` or
/// `power_cap_and_energy_budget` (what it did not fit).
pub(crate) fn count_decision(asked: Asked, admission: &Admission) {
    let request = match asked {
        Asked::Question => "question",
        Asked::JobStart { .. } => "job_start",
    };
    let decision = match (admission.admit, asked) {
        (true, _) => "admit",
        (false, Asked::JobStart { stored: true }) => "forced",
        (false, _) => "refuse",
    };
    let reason = match (admission.power.fits, admission.energy.fits) {
        (true, true) => "fits",
        (false, true) => "power_cap",
        (true, false) => "energy_budget",
        (false, false) => "power_cap_and_energy_budget",
    };
    decision_counter(request, decision, reason).increment(1);
}

fn decision_counter(
    request: &'static str,
    decision: &'static str,
    reason: &'static str,
) -> metrics::Counter {
    metrics::counter!("admission_decisions_total",
        "request" => request, "decision" => decision, "reason" => reason)
}

/// Show every decision that can be counted from 0 before the first one, so
/// that `rate()` and `increase()` count that one too: an admission with the
/// reason `fits`, a refusal (or a forced job start) with any other.
pub fn init_counters() {
    const NOT_FITTING: [&str; 3] = ["power_cap", "energy_budget", "power_cap_and_energy_budget"];
    for request in ["question", "job_start"] {
        decision_counter(request, "admit", "fits").increment(0);
        for reason in NOT_FITTING {
            decision_counter(request, "refuse", reason).increment(0);
        }
    }
    for reason in NOT_FITTING {
        decision_counter("job_start", "forced", reason).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::{EnergyBasis, EnergyCheck, energy_reason, kwh};

    #[test]
    fn a_spent_budget_is_said_used_up_with_or_without_an_estimate() {
        let check = |ets: Option<f64>| EnergyCheck {
            fits: false,
            account: Some("proj42".into()),
            budget: true,
            remaining_j: Some(-464_400.0),
            predicted_ets_j: ets,
            basis: if ets.is_some() {
                EnergyBasis::Predicted
            } else {
                EnergyBasis::Unknown
            },
            committed_j: ets,
            remaining_after_j: None,
            period_end: None,
        };
        let without = energy_reason(&check(None));
        assert!(
            without.starts_with("energy: account proj42's budget is used up (-0.129 kWh left"),
            "{without}"
        );
        assert!(!without.contains("cannot be bounded"), "{without}");
        let with = energy_reason(&check(Some(6.6e6)));
        assert!(
            with.contains("used up") && with.contains("the job's 1.83 kWh"),
            "{with}"
        );
    }

    #[test]
    fn energies_read_in_kwh_to_three_figures() {
        assert_eq!(kwh(6.6e6), "1.83 kWh");
        assert_eq!(kwh(600.0), "1.67e-4 kWh");
        assert_eq!(kwh(4.444e9), "1234 kWh");
        assert_eq!(kwh(-464_400.0), "-0.129 kWh");
        assert_eq!(kwh(0.0), "0 kWh");
        assert_eq!(kwh(1.04e14), "2.89e7 kWh");
    }
}

//! Energy budgets per account, and where an account stands in its current
//! period (docs/model.md §5).

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use utoipa::ToSchema;

use super::{Error, Result, Service, power};
use crate::domain::Period;
use crate::store::{self, budgets::BudgetRow, power::Load};
use crate::validate::{self, Account, Errors};

/// A budget as set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetInput {
    #[schema(minimum = 1e-100, maximum = 1e100)]
    pub limit_j: f64,
    pub period: Period,
    /// Required for `custom`, refused otherwise.
    pub starts_at: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// A budget and where the account stands in its current period.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Budget {
    pub account: String,
    pub limit_j: f64,
    pub period: Period,
    /// The current period.
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// Energy of the account's runs that finished in the period, J.
    pub consumed_j: f64,
    pub runs: i64,
    /// Predicted energy of the account's running jobs, J, used so far and
    /// still to come (their runs' measured energy counts in `consumed_j`
    /// only once they end): each job's predicted EtS, or its predicted power
    /// × the time it has run when that is longer than its predicted TtS. A
    /// job without history but with a time limit commits its reserved power
    /// × that limit.
    pub committed_j: f64,
    /// Running jobs without a prediction (their application has no
    /// history) nor a time limit: they commit an unknown amount.
    pub unpredicted_jobs: usize,
    /// limit − consumed − committed, J (negative: overdrawn).
    pub remaining_j: f64,
    /// When the remaining energy runs out at the period's average burn rate
    /// so far; `null` when nothing was consumed yet, nothing remains, it
    /// would last more than 100 years at that rate, or the period is not in
    /// force (a custom period that has ended or not begun).
    pub runs_out_at: Option<DateTime<Utc>>,
    /// Whether that is before the period ends.
    pub runs_out_within_period: bool,
}

/// Further than this, a run-out date says nothing a scheduler or an
/// administrator can act on (and past the year 9999 it is no RFC 3339 date).
const RUN_OUT_HORIZON_S: f64 = 100.0 * 365.25 * 86_400.0;

/// When `remaining_j` runs out at the rate of `consumed_j` per `elapsed_s`,
/// from `now`; `None` without a rate, without anything remaining, or beyond
/// the horizon.
fn run_out(
    now: DateTime<Utc>,
    remaining_j: f64,
    consumed_j: f64,
    elapsed_s: f64,
) -> Option<DateTime<Utc>> {
    let positive = |x: f64| x > 0.0;
    if !(positive(consumed_j) && positive(remaining_j) && positive(elapsed_s)) {
        return None;
    }
    let seconds = remaining_j / (consumed_j / elapsed_s);
    if seconds.is_nan() || seconds > RUN_OUT_HORIZON_S {
        return None;
    }
    now.checked_add_signed(Duration::milliseconds((seconds * 1000.0) as i64))
}

/// The bounds of the period of `budget` containing `now`.
fn period_bounds(budget: &BudgetRow, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let midnight =
        |d: NaiveDate| Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default());
    match (budget.period, budget.starts_at, budget.ends_at) {
        (Period::Custom, Some(start), Some(end)) => (start, end),
        (Period::Week, ..) => {
            let monday =
                now.date_naive() - Duration::days(i64::from(now.weekday().num_days_from_monday()));
            let start = midnight(monday);
            (start, start + Duration::days(7))
        }
        // A custom period always has both ends (the table's CHECK).
        (Period::Month | Period::Custom, ..) => {
            let first = NaiveDate::from_ymd_opt(now.year(), now.month(), 1).unwrap_or_default();
            let next = first
                .checked_add_months(chrono::Months::new(1))
                .unwrap_or(first);
            (midnight(first), midnight(next))
        }
    }
}

/// Set `account`'s budget to `input`: where the account then stands, and
/// whether the budget is new.
pub async fn set(
    service: &Service,
    account: &Account,
    input: &BudgetInput,
) -> Result<(Budget, bool)> {
    let mut errors = Errors::default();
    errors.check("limit_j", validate::positive(input.limit_j));
    let (starts_at, ends_at) = (
        input.starts_at.map(validate::as_stored),
        input.ends_at.map(validate::as_stored),
    );
    for (field, time) in [("starts_at", starts_at), ("ends_at", ends_at)] {
        if let Some(Err(reason)) = time.map(validate::time_in_range) {
            errors.add(field, reason);
        }
    }
    let window = match (input.period, starts_at, ends_at) {
        (Period::Custom, Some(start), Some(end)) if end > start => Some((start, end)),
        (Period::Custom, Some(_), Some(_)) => {
            errors.add("ends_at", "must be after starts_at");
            None
        }
        (Period::Custom, ..) => {
            errors.add("period", "custom needs starts_at and ends_at");
            None
        }
        (_, None, None) => None,
        _ => {
            errors.add(
                "period",
                "starts_at and ends_at go with a custom period only",
            );
            None
        }
    };
    let window = errors.into_result(window).map_err(Error::Invalid)?;
    // The load first: reading it may take a pooled connection, which must
    // not wait while this request holds another.
    let load = power::current_load(service).await?;
    let mut conn = service.pool.acquire().await?;
    let (row, created) =
        store::budgets::upsert(&mut *conn, account, input.limit_j, input.period, window).await?;
    let standing = standing(&mut conn, &load, row, Utc::now()).await?;
    Ok((standing, created))
}

/// Where `account` stands against its budget now.
pub async fn get(service: &Service, account: &Account) -> Result<Budget> {
    // The load before the connection, as in `set`.
    let load = power::current_load(service).await?;
    let mut conn = service.pool.acquire().await?;
    let row = store::budgets::get(&mut *conn, account)
        .await?
        .ok_or_else(|| Error::NotFound(format!("no budget for account `{account}`")))?;
    standing(&mut conn, &load, row, Utc::now()).await
}

/// Remove `account`'s budget (its jobs and runs stay); whether it had one.
pub async fn delete(service: &Service, account: &Account) -> Result<bool> {
    Ok(store::budgets::delete(&service.pool, account).await?)
}

/// Accounts whose standings are shown at most (`/metrics`, the dashboard).
pub const MAX_STANDINGS: i64 = 10_000;

/// Where up to `limit` accounts with a budget stand now, by account.
pub async fn standings(service: &Service, limit: i64) -> Result<Vec<Budget>> {
    // The load before the connection, as in `set`.
    let load = power::current_load(service).await?;
    let mut conn = service.pool.acquire().await?;
    let now = Utc::now();
    let mut standings = Vec::new();
    for row in store::budgets::list(&mut *conn, limit).await? {
        standings.push(standing(&mut conn, &load, row, now).await?);
    }
    Ok(standings)
}

/// An account's standing and its consumption through the period so far:
/// what a burn-down chart shows.
#[derive(Debug)]
pub struct BurnDown {
    pub budget: Budget,
    /// (a step's start, the energy consumed from the period's start to the
    /// step's end, J), oldest first; steps of `step_s`.
    pub consumed: Vec<(DateTime<Utc>, f64)>,
    pub step_s: i64,
}

/// Steps of a burn-down chart in one period, about.
const BURN_DOWN_STEPS: i64 = 60;

/// `account`'s burn-down; `NotFound` without a budget.
pub async fn burn_down(service: &Service, account: &Account) -> Result<BurnDown> {
    let budget = get(service, account).await?;
    let span = (budget.period_end - budget.period_start)
        .num_seconds()
        .max(1);
    // Whole hours, or whole days beyond a few days.
    let round_up = |s: i64, unit: i64| (s + unit - 1) / unit * unit;
    let step_s = match span / BURN_DOWN_STEPS {
        s if s > 6 * 3600 => round_up(s, 86_400),
        s => round_up(s.max(1), 3600),
    };
    let steps = store::budgets::consumed_by_step(
        &service.pool,
        &budget.account,
        budget.period_start,
        budget.period_end,
        step_s,
    )
    .await?;
    let mut total = 0.0;
    let consumed = steps
        .into_iter()
        .map(|(at, energy_j)| {
            total += energy_j;
            (at, total)
        })
        .collect();
    Ok(BurnDown {
        budget,
        consumed,
        step_s,
    })
}

/// The energy a running job counts against its account's budget: all of it,
/// the part already used as well as the part to come, since its run's
/// measured energy counts (in `consumed_j`) only once it has ended. That is
/// its predicted EtS, or more for a job running past its predicted TtS: its
/// predicted power (EtS / TtS) for as long as it has run.
pub(crate) fn committed_by(
    ets: f64,
    tts: f64,
    started_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> f64 {
    // A job dated to start later has used none of its time yet.
    let elapsed = (now - started_at).as_seconds_f64().max(0.0);
    if elapsed > tts {
        ets / tts * elapsed
    } else {
        ets
    }
}

/// Whether a period [start, end) is in force at `now`.
pub fn in_force(start: DateTime<Utc>, end: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    start <= now && now < end
}

/// Where the budget's account stands at `now`.
pub async fn standing(
    conn: &mut PgConnection,
    load: &Load,
    row: BudgetRow,
    now: DateTime<Utc>,
) -> Result<Budget> {
    let (start, end) = period_bounds(&row, now);
    let (consumed_j, runs) = store::budgets::consumed(&mut *conn, &row.account, start, end).await?;
    let mut committed_j = 0.0;
    let mut unpredicted_jobs = 0;
    // Jobs running now end now or later: in this period only if it is in
    // force (a custom period may have ended, or not yet begun).
    let counted = in_force(start, end, now);
    for job in load.of_account(&row.account).filter(|_| counted) {
        match (job.predicted_ets_j, job.predicted_tts_s, job.time_limit_s) {
            (Some(ets), Some(tts), _) => committed_j += committed_by(ets, tts, job.started_at, now),
            // No history: at most its reserved power for its whole time limit.
            (_, _, Some(limit)) => committed_j += job.reserved_w * limit,
            _ => unpredicted_jobs += 1,
        }
    }
    let remaining_j = row.limit_j - consumed_j - committed_j;
    let elapsed_s = (now.min(end) - start).as_seconds_f64();
    // Outside its period a budget burns nothing more: no date to run out.
    let runs_out_at = counted
        .then(|| run_out(now, remaining_j, consumed_j, elapsed_s))
        .flatten();
    Ok(Budget {
        account: row.account,
        limit_j: row.limit_j,
        period: row.period,
        period_start: start,
        period_end: end,
        consumed_j,
        runs,
        committed_j,
        unpredicted_jobs,
        remaining_j,
        runs_out_within_period: runs_out_at.is_some_and(|t| t < end),
        runs_out_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_out_date_is_a_date_or_nothing_whatever_the_rate() {
        let now = Utc::now();
        // 10 J left at 1 J/s: 10 s.
        assert_eq!(
            run_out(now, 10.0, 5.0, 5.0),
            Some(now + Duration::seconds(10))
        );
        // A first joule of a 1 TJ budget, or a rate too small to register:
        // millions of years, or an overflow; no date.
        for (remaining, consumed, elapsed) in [
            (1e12, 1.0, 1.0),
            (1e12, 1.0, 3e6),
            (f64::MAX, 1e-300, 1.0),
            (1e12, f64::MIN_POSITIVE, 1.0),
        ] {
            assert_eq!(run_out(now, remaining, consumed, elapsed), None);
        }
        // Nothing consumed, nothing left, no time elapsed, or NaN: no date.
        for (remaining, consumed, elapsed) in [
            (10.0, 0.0, 5.0),
            (-1.0, 5.0, 5.0),
            (10.0, 5.0, 0.0),
            (f64::NAN, 5.0, 5.0),
        ] {
            assert_eq!(run_out(now, remaining, consumed, elapsed), None);
        }
        // Just within the horizon: a date, in RFC 3339.
        let date = run_out(now, RUN_OUT_HORIZON_S - 1.0, 1.0, 1.0).unwrap();
        assert!(date.to_rfc3339().starts_with('2'), "{date}");
    }

    fn budget(period: Period) -> BudgetRow {
        BudgetRow {
            account: "a".into(),
            limit_j: 1.0,
            period,
            starts_at: None,
            ends_at: None,
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn periods_are_calendar_months_and_iso_weeks() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        // Saturday 21 November 2026.
        let now = at("2026-11-21T22:30:00Z");
        assert_eq!(
            period_bounds(&budget(Period::Month), now),
            (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"))
        );
        assert_eq!(
            period_bounds(&budget(Period::Week), now),
            (at("2026-11-16T00:00:00Z"), at("2026-11-23T00:00:00Z"))
        );
        // December rolls over into the next year; a Monday starts its own week.
        let december = at("2026-12-31T23:59:59Z");
        assert_eq!(
            period_bounds(&budget(Period::Month), december).1,
            at("2027-01-01T00:00:00Z")
        );
        let monday = at("2026-11-23T00:00:00Z");
        assert_eq!(period_bounds(&budget(Period::Week), monday).0, monday);
    }
}

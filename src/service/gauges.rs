//! What operators watch, for `/metrics`: per power scope (the whole system,
//! and each partition that has a cap) the cap in force, the draw, the
//! headroom, the reserved power and the running jobs; the stale and expired
//! jobs; per account with a budget its limit, consumption, commitment, what
//! remains and whether it runs out within its period. Read afresh
//! (at most every `FRESH_FOR`) and written in the Prometheus text format
//! beside the exporter's own metrics, so that a scope or an account that
//! goes away leaves no stale series. Labels are bounded by what
//! administrators create: partitions with caps, accounts with budgets.

use std::fmt::Write;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::{Result, Service, budgets, jobs, power};

/// How long one reading serves scrapes (several Prometheus servers, or a
/// client polling `/metrics`, cost the database one reading per this).
const FRESH_FOR: Duration = Duration::from_secs(2);

/// The gauges as Prometheus text: from the last reading if recent enough.
pub async fn render(service: &Service) -> Result<String> {
    let mut kept = service.gauges.lock().await;
    if let Some((at, text)) = kept.as_ref()
        && at.elapsed() < FRESH_FOR
    {
        return Ok(text.clone());
    }
    let text = read(service).await?;
    *kept = Some((Instant::now(), text.clone()));
    Ok(text)
}

/// What this process knows without asking the database: whether it takes
/// the database for unreachable, and its connection pool's use.
pub fn process(service: &Service, out: &mut String) {
    write_gauge(
        out,
        "database_degraded",
        "1 while the database is taken for unreachable: answers come from memory, writes are refused.",
        &mut std::iter::once(("", f64::from(u8::from(service.caches.degraded())))),
    );
    let (open, idle) = (service.pool.size(), service.pool.num_idle());
    let in_use = (open as usize).saturating_sub(idle);
    write_gauge(
        out,
        "db_pool_connections",
        "The database pool's open connections, by whether a request holds them.",
        &mut [
            ("{state=\"in_use\"}", in_use as f64),
            ("{state=\"idle\"}", idle as f64),
        ]
        .into_iter(),
    );
    write_gauge(
        out,
        "db_pool_max_connections",
        "The most connections the pool opens (--db-max-connections).",
        &mut std::iter::once(("", f64::from(service.pool.options().get_max_connections()))),
    );
}

fn write_gauge(
    out: &mut String,
    name: &str,
    help: &str,
    values: &mut dyn Iterator<Item = (&str, f64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (labels, value) in values {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

async fn read(service: &Service) -> Result<String> {
    let scopes: Vec<(String, power::Headroom)> = power::capped_scopes(service, Utc::now())
        .await?
        .into_iter()
        .map(|h| {
            let labels = h
                .partition
                .as_ref()
                .map_or_else(String::new, |p| format!("{{partition=\"{p}\"}}"));
            (labels, h)
        })
        .collect();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, values: &mut dyn Iterator<Item = (&str, f64)>| {
        write_gauge(&mut out, name, help, values);
    };
    gauge(
        "power_cap_watts",
        "The power cap in force, W; the whole system without a partition label (absent without a cap).",
        &mut scopes
            .iter()
            .filter_map(|(l, h)| h.cap.as_ref().map(|c| (l.as_str(), c.limit_w))),
    );
    gauge(
        "power_draw_watts",
        "Running jobs' reserved power plus the idle nodes' power, W.",
        &mut scopes.iter().map(|(l, h)| (l.as_str(), h.draw_w)),
    );
    gauge(
        "power_headroom_watts",
        "Cap minus draw, W (absent without a cap; negative: over the cap).",
        &mut scopes
            .iter()
            .filter_map(|(l, h)| h.headroom_w.map(|w| (l.as_str(), w))),
    );
    gauge(
        "power_reserved_watts",
        "The running jobs' reserved power, W.",
        &mut scopes
            .iter()
            // Folded from +0: an empty f64 sum is -0, shown as "-0.0".
            .map(|(l, h)| (l.as_str(), h.jobs.iter().fold(0.0, |w, j| w + j.reserved_w))),
    );
    gauge(
        "jobs_running",
        "Running jobs whose reservation has not expired.",
        &mut scopes
            .iter()
            .map(|(l, h)| (l.as_str(), h.jobs.len() as f64)),
    );

    // Only the totals: a page of no job.
    let (all, _) = jobs::list(service, jobs::JobFilter::default(), None, Some(0)).await?;
    gauge(
        "jobs_stale",
        "Running jobs that have run more than twice their predicted TtS: their end was likely never reported.",
        &mut std::iter::once(("", all.stale as f64)),
    );
    gauge(
        "jobs_expired",
        "Jobs whose reservation expired before their end was reported.",
        &mut std::iter::once(("", all.expired as f64)),
    );

    let standings = budgets::standings(service, budgets::MAX_STANDINGS).await?;
    let accounts: Vec<(String, &budgets::Budget)> = standings
        .iter()
        .map(|b| (format!("{{account=\"{}\"}}", b.account), b))
        .collect();
    for (name, help, value) in [
        (
            "budget_limit_joules",
            "The account's energy budget for its period, J.",
            (|b| b.limit_j) as fn(&budgets::Budget) -> f64,
        ),
        (
            "budget_consumed_joules",
            "Energy of the account's runs in the period, J.",
            |b| b.consumed_j,
        ),
        (
            "budget_committed_joules",
            "Energy the account's running jobs are still predicted to use, J.",
            |b| b.committed_j,
        ),
        (
            "budget_remaining_joules",
            "Limit minus consumed minus committed, J.",
            |b| b.remaining_j,
        ),
        (
            "budget_runs_out_within_period",
            "1 when the account's budget runs out before its period ends at the current pace.",
            |b| f64::from(u8::from(b.runs_out_within_period)),
        ),
    ] {
        gauge(
            name,
            help,
            &mut accounts.iter().map(|(l, b)| (l.as_str(), value(b))),
        );
    }
    Ok(out)
}

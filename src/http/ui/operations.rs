//! Power now (per scope: cap, draw, headroom, running jobs and their
//! reservations) and energy budgets (per account: consumed, committed,
//! remaining, and a burn-down with the projected run-out date).

use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::apps::app_path;
use super::chart::{self, Axis, Layers, Series};
use super::format;
use super::{PageResult, Viewer, or_error_page, page};
use crate::http::AppState;
use crate::service::{budgets, jobs, power};
use crate::validate::Account;

/// Running jobs listed at most, by reserved power.
const MAX_JOBS_SHOWN: usize = 500;

pub async fn power(viewer: Viewer, State(state): State<AppState>) -> PageResult {
    let now = Utc::now();
    let scopes = or_error_page(power::capped_scopes(&state, now).await, &viewer)?;
    let listed = jobs::list(&state, jobs::JobFilter::default(), None, None).await;
    let (mut running, _) = or_error_page(listed, &viewer)?;
    running
        .items
        .sort_by(|a, b| b.reserved_w.total_cmp(&a.reserved_w));
    let total = running.items.len();
    let body = html! {
        h1 { "Power now" }
        p.hint { "As " code { "GET /v1/power/headroom" } " answers, at "
            time datetime=(now.to_rfc3339()) { (now.format("%Y-%m-%d %H:%M:%S UTC")) } "." }
        div.cards {
            @for h in &scopes {
                @let scope = h.partition.as_deref().unwrap_or("");
                div.card.scope data-scope=(scope) {
                    h2 { @match &h.partition { Some(p) => { "Partition " (p) }, None => "Whole system" } }
                    @if let (Some(cap), Some(headroom)) = (&h.cap, h.headroom_w) {
                        @let used = ((cap.limit_w - headroom) / cap.limit_w).clamp(0.0, 1.0);
                        meter min="0" max="1" low="0.8" high="0.95" optimum="0" value=(used)
                            aria-label="share of the cap drawn" {}
                        p.big data-check="headroom_w" { (format::power(headroom)) " headroom" }
                        dl {
                            dt { "Cap" } dd data-check="cap_w" { (format::power(cap.limit_w)) " (" (cap.name) ")" }
                            dt { "Draw" } dd data-check="draw_w" { (format::power(h.draw_w)) }
                            dt { "Reserved by jobs" } dd data-check="reserved_w" { (format::power(h.jobs.iter().fold(0.0, |w, j| w + j.reserved_w))) }
                            dt { "Idle nodes" } dd { (h.idle.nodes) " drawing " (format::power(h.idle.power_w)) }
                            dt { "Running jobs" } dd data-check="jobs" data-si=(h.jobs.len()) { (h.jobs.len()) }
                        }
                    } @else {
                        p.big { "No cap in force" }
                        dl {
                            dt { "Draw" } dd data-check="draw_w" { (format::power(h.draw_w)) }
                            dt { "Running jobs" } dd data-check="jobs" data-si=(h.jobs.len()) { (h.jobs.len()) }
                        }
                    }
                }
            }
        }
        h2 { "Running jobs" }
        p { (total) " running, " (running.stale) " stale (past twice their predicted time), "
            (running.expired) " with an expired reservation."
            @if total > MAX_JOBS_SHOWN { " The " (MAX_JOBS_SHOWN) " reserving the most power:" } }
        @if total > 0 {
            table.jobs {
                thead { tr {
                    th { "Job" } th { "Application" } th { "Partition" } th { "Account" }
                    th.num { "Nodes" } th.num { "Reserved" } th { "Basis" } th { "Started (UTC)" } th { "State" }
                } }
                tbody {
                    @for j in running.items.iter().take(MAX_JOBS_SHOWN) {
                        tr data-job=(format!("{}/{}", j.source, j.job_id)) {
                            td { (j.source) "/" (j.job_id) }
                            td { a href=(app_path(&j.app)) { (j.app) } }
                            td { (j.partition.as_deref().unwrap_or("–")) }
                            td { (j.account.as_deref().unwrap_or("–")) }
                            td.num { (j.nodes) }
                            td.num data-check="reserved_w" { (format::power(j.reserved_w)) }
                            td { (j.reserved_basis.as_str()) }
                            td { time datetime=(j.started_at.to_rfc3339()) { (j.started_at.format("%Y-%m-%d %H:%M")) } }
                            td { @if j.expired { span.tag.bad { "expired" } } @else if j.stale { span.tag.warn { "stale" } } }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Power", Some("/ui/power"), &viewer, body))
}

pub async fn budgets(viewer: Viewer, State(state): State<AppState>) -> PageResult {
    let standings = or_error_page(
        budgets::standings(&state, budgets::MAX_STANDINGS).await,
        &viewer,
    )?;
    let body = html! {
        h1 { "Energy budgets" }
        @if standings.is_empty() {
            p.empty { "No budget yet: set one with PUT /v1/budgets/{account}." }
        } @else {
            table.budgets {
                thead { tr {
                    th { "Account" } th { "Period" } th.num { "Limit" } th.num { "Consumed" }
                    th.num { "Committed" } th.num { "Remaining" } th { "Runs out" }
                } }
                tbody {
                    @for b in &standings {
                        tr data-account=(b.account) {
                            td { a href=(format!("/ui/budgets/{}", b.account)) { (b.account) } }
                            td { (format::name(&b.period)) }
                            td.num data-check="limit_j" { (format::energy(b.limit_j)) }
                            td.num data-check="consumed_j" { (format::energy(b.consumed_j)) }
                            td.num data-check="committed_j" { (format::energy(b.committed_j)) }
                            td.num data-check="remaining_j" { (format::energy(b.remaining_j)) }
                            td { (run_out(b.runs_out_at, b.runs_out_within_period, b.remaining_j)) }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Budgets", Some("/ui/budgets"), &viewer, body))
}

fn run_out(at: Option<DateTime<Utc>>, within: bool, remaining_j: f64) -> Markup {
    html! {
        @if remaining_j <= 0.0 {
            span.tag.bad data-check="exhausted" { "exhausted" }
        } @else {
        @match at {
            Some(t) => span class=(if within { "tag bad" } else { "tag" }) {
                time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M UTC")) }
                @if within { " (within the period)" }
            },
            None => "–",
        }
        }
    }
}

pub async fn budget(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(account): Path<String>,
) -> PageResult {
    let account = or_error_page(
        Account::parse(&account)
            .map_err(|reason| crate::service::Error::bad_request("account", reason)),
        &viewer,
    )?;
    let burn = or_error_page(budgets::burn_down(&state, &account).await, &viewer)?;
    let b = &burn.budget;
    let now = Utc::now();
    let start = b.period_start;
    let days = |t: DateTime<Utc>| (t - start).as_seconds_f64() / 86_400.0;
    // Remaining before commitments, from the limit down, step by step.
    // Level until a step with runs, down through it.
    let mut remaining = vec![(0.0, b.limit_j)];
    let mut before = b.limit_j;
    for (at, consumed) in &burn.consumed {
        let end = (*at + chrono::Duration::seconds(burn.step_s)).min(now);
        remaining.push((days(*at), before));
        before = b.limit_j - consumed;
        remaining.push((days(end), before));
    }
    let now_d = days(now.min(b.period_end));
    remaining.push((now_d, b.limit_j - b.consumed_j));
    let mut layers = Layers {
        lines: vec![Series::new("consumed", remaining)],
        rules: vec![(0.0, "0".into())],
        markers: vec![
            (now_d, "now".into()),
            (days(b.period_end), "period end".into()),
        ],
        ..Layers::default()
    };
    // From now: the commitments of running jobs, then the pace so far,
    // to the period's end or to 0, whichever comes first.
    let after_commitments = b.limit_j - b.consumed_j - b.committed_j;
    let mut projection = vec![
        (now_d, b.limit_j - b.consumed_j),
        (now_d, after_commitments),
    ];
    let elapsed_d = now_d.max(1e-9);
    let pace = b.consumed_j / elapsed_d;
    let end_d = days(b.period_end);
    let at_end = after_commitments - pace * (end_d - now_d);
    if after_commitments > 0.0 && at_end < 0.0 && pace > 0.0 {
        projection.push((now_d + after_commitments / pace, 0.0));
    } else if after_commitments > 0.0 {
        projection.push((end_d, at_end));
    }
    layers
        .lines
        .push(Series::new("projection", projection).dashed());
    let day = |d: f64| {
        let t = start + chrono::Duration::seconds((d * 86_400.0) as i64);
        t.format("%m-%d").to_string()
    };
    let (energy_unit, divisor, energy) =
        format::axis("J", b.limit_j.abs().max(b.remaining_j.abs()));
    let body = html! {
        h1 { "Budget of " (b.account) }
        p.hint { "As " code { "GET /v1/budgets/" (b.account) } " answers: the "
            (format::name(&b.period)) " from " (b.period_start.format("%Y-%m-%d %H:%M")) " to "
            (b.period_end.format("%Y-%m-%d %H:%M UTC")) "." }
        div.summary {
            div.card data-account=(b.account) {
                dl {
                    dt { "Limit" } dd data-check="limit_j" { (format::energy(b.limit_j)) }
                    dt { "Consumed" } dd data-check="consumed_j" { (format::energy(b.consumed_j)) " in " (b.runs) " runs" }
                    dt { "Committed by running jobs" } dd data-check="committed_j" { (format::energy(b.committed_j)) }
                    dt { "Remaining" } dd data-check="remaining_j" { (format::energy(b.remaining_j)) }
                    dt { "Runs out" } dd { (run_out(b.runs_out_at, b.runs_out_within_period, b.remaining_j)) }
                }
            }
        }
        figure {
            (chart::chart("Burn-down", Axis { label: "day of the period", log: false, divisor: 1.0, ticks: &day },
                Axis { label: &format!("remaining, {energy_unit}"), log: false, divisor, ticks: &energy }, &layers))
            figcaption { "Solid: what remained as runs finished. Dashed: the running jobs' commitments now, then the pace so far until the budget runs out." }
        }
    };
    Ok(page(
        &format!("Budget of {}", b.account),
        Some("/ui/budgets"),
        &viewer,
        body,
    ))
}

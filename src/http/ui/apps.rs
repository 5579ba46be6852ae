//! Applications: a searchable list, and per application its curves, history,
//! winning models with their back-tests, and its energy-optimal and fastest
//! node counts.

use axum::extract::{Path, State};
use maud::{Markup, html};
use serde::Deserialize;

use super::chart::{self, Axis, Dot, Layers, Series};
use super::format::{self, sig3};
use super::{PageQuery, PageResult, Viewer, fail, or_error_page, page};
use crate::http::AppState;
use crate::http::capacity::least_energy_and_fastest;
use crate::http::error::ApiError;
use crate::http::predictions::{backtest_info, model_info};
use crate::model::Metric;
use crate::service::{apps, predictions};

/// Applications per page of the list.
const PAGE: i64 = 200;
/// Points of a drawn curve.
const CURVE_POINTS: u32 = 80;

#[derive(Deserialize)]
pub struct ListQuery {
    /// Part of the tag, any case.
    q: Option<String>,
    /// The last tag of the previous page.
    after: Option<String>,
}

pub async fn list(
    viewer: Viewer,
    State(state): State<AppState>,
    PageQuery(query): PageQuery<ListQuery>,
) -> PageResult {
    let q = query.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    // Longer than any tag: nothing can match, and the query stays cheap.
    let q = q.map(|q| &q[..q.floor_char_boundary(256)]);
    let mut rows = or_error_page(
        apps::list(&state, q, query.after.as_deref(), PAGE + 1).await,
        &viewer,
    )?;
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let next = more.then(|| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        if let Some(q) = q {
            s.append_pair("q", q);
        }
        if let Some(last) = rows.last() {
            s.append_pair("after", &last.tag);
        }
        format!("/ui/apps?{}", s.finish())
    });
    let body = html! {
        h1 { "Applications" }
        form.search method="get" action="/ui/apps" role="search" {
            label for="q" { "Search" }
            input #q type="search" name="q" value=[q] placeholder="part of a tag";
            button type="submit" { "Search" }
        }
        @if rows.is_empty() {
            p.empty {
                @if query.after.is_some() {
                    "No application after this one. " a href="/ui/apps" { "Back to the first page" } "."
                } @else if q.is_some() {
                    "No application matches."
                } @else {
                    "No application yet: store runs with POST /v1/runs."
                }
            }
        } @else {
            table.apps {
                thead { tr {
                    th { "Application" } th.num { "Runs" } th.num { "Node counts" }
                    th { "Scaling" } th { "Last run (UTC)" }
                } }
                tbody {
                    @for app in &rows {
                        tr data-app=(app.tag) {
                            td { a href=(app_path(&app.tag)) { (app.tag) } }
                            td.num data-check="run_count" data-si=(app.run_count) { (app.run_count) }
                            td.num {
                                @match (app.nodes_min, app.nodes_max) {
                                    (Some(lo), Some(hi)) if lo == hi => (lo),
                                    (Some(lo), Some(hi)) => { (lo) "–" (hi) },
                                    _ => "–",
                                }
                            }
                            td { (format::name(&app.scaling_mode)) }
                            td { @match app.last_run_at { Some(t) => time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M")) }, None => "–" } }
                        }
                    }
                }
            }
            @if let Some(next) = next { p.more { a href=(next) rel="next" { "Next applications →" } } }
        }
    };
    Ok(page("Applications", Some("/ui/apps"), &viewer, body))
}

/// The page of application `tag`.
pub fn app_path(tag: &str) -> String {
    let tag: String = form_urlencoded::byte_serialize(tag.as_bytes()).collect();
    format!("/ui/apps/{tag}")
}

pub async fn detail(
    viewer: Viewer,
    State(state): State<AppState>,
    Path(tag): Path<String>,
) -> PageResult {
    let tag = or_error_page(apps::check_tag(&tag), &viewer)?;
    let app = or_error_page(apps::find(&state, &tag).await, &viewer)?;
    // What cannot be answered (no runs yet: 422; a range too wide to
    // search: 400) is said on the page, whose other parts still show.
    let mut notes = Vec::new();
    if state.caches.degraded() {
        // As the API flags such answers `database_unavailable`.
        notes.push(
            "The database cannot be reached: what this page shows is from memory, and runs \
             stored meanwhile are not in it."
                .to_owned(),
        );
    }
    let (least_energy, fastest) = match least_energy_and_fastest(&state, &app).await {
        Ok(extremes) => extremes,
        Err(e @ (ApiError::Invalid(_) | ApiError::BadRequest(_))) => {
            notes.push(explain(e));
            (None, None)
        }
        Err(e) => return Err(fail(e, &viewer)),
    };
    let mut sections = Vec::new();
    let allowed = crate::predict::allowed_rmse(&app, None);
    match predictions::fitted_models(&state, &app, &Metric::ALL, allowed).await {
        Ok(fitted) => {
            let models: [&crate::model::Model; 3] = std::array::from_fn(|i| &fitted[i].model);
            let nodes = curve_nodes(models[0]);
            // The three curves as the predictions give them: reconciled so
            // that EtS = APC × TtS at every drawn count (`consistency::curves`).
            let curves: Vec<[crate::model::Prediction; 3]> = nodes
                .iter()
                .map(|&n| crate::model::consistency::curves(models, n))
                .collect();
            for metric in Metric::ALL {
                let marks: Vec<(u32, &str)> = match metric {
                    Metric::Ets => least_energy
                        .iter()
                        .map(|c| (c.nodes, "least energy"))
                        .collect(),
                    Metric::Tts => fastest.iter().map(|c| (c.nodes, "fastest")).collect(),
                    Metric::Apc => Vec::new(),
                };
                let curve: Vec<(f64, &crate::model::Prediction)> = nodes
                    .iter()
                    .zip(&curves)
                    .map(|(&n, at)| (f64::from(n), &at[metric.index()]))
                    .collect();
                sections.push(metric_section(
                    metric,
                    &fitted[metric.index()].model,
                    &curve,
                    &marks,
                ));
            }
        }
        Err(e @ ApiError::Invalid(_)) => {
            // Once, though the search above may have said it too.
            let note = explain(e);
            if !notes.contains(&note) {
                notes.push(note);
            }
        }
        Err(e) => return Err(fail(e, &viewer)),
    }
    let body = html! {
        h1 { (app.tag) }
        @if !app.description.is_empty() { p.description { (app.description) } }
        dl.facts {
            dt { "Runs" } dd data-check="run_count" data-si=(app.run_count) { (app.run_count) }
            dt { "Node counts" } dd {
                @match (app.nodes_min, app.nodes_max) {
                    (Some(lo), Some(hi)) if lo == hi => (lo),
                    (Some(lo), Some(hi)) => { (lo) "–" (hi) }
                    _ => "–",
                }
            }
            dt { "Scaling mode" } dd { (format::name(&app.scaling_mode)) }
            @if let Some(t) = app.last_run_at { dt { "Last run" } dd { time datetime=(t.to_rfc3339()) { (t.format("%Y-%m-%d %H:%M UTC")) } } }
        }
        @for note in &notes { p.note role="status" { (note) } }
        div.cards {
            @if let Some(c) = &least_energy {
                div.card data-check="least_energy" {
                    h2 { "Least energy" }
                    p.big { span data-check="least_energy.nodes" data-si=(c.nodes) { (c.nodes) } (if c.nodes == 1 { " node" } else { " nodes" }) }
                    p { (format::energy(c.ets_j)) " in " (format::duration(c.tts_s)) }
                    (outside_measured(c.nodes, app.nodes_min, app.nodes_max))
                }
            }
            @if let Some(c) = &fastest {
                div.card data-check="fastest" {
                    h2 { "Fastest" }
                    p.big { span data-check="fastest.nodes" data-si=(c.nodes) { (c.nodes) } (if c.nodes == 1 { " node" } else { " nodes" }) }
                    p { (format::duration(c.tts_s)) " using " (format::energy(c.ets_j)) }
                    (outside_measured(c.nodes, app.nodes_min, app.nodes_max))
                }
            }
        }
        @if least_energy.is_some() || fastest.is_some() {
            p.hint { "Searched from 1 to twice the largest measured node count (at most 100,000 counts), as "
                code { "GET /v1/apps/{app}/optimal-nodes" } " answers." }
        }
        @for s in sections { (s) }
    };
    Ok(page(&app.tag, Some("/ui/apps"), &viewer, body))
}

/// A count outside the measured ones, said so (the API flags it
/// `extrapolation`): nothing otherwise.
fn outside_measured(nodes: u32, smallest: Option<i32>, largest: Option<i32>) -> Markup {
    let n = i64::from(nodes);
    html! {
        @if let Some(largest) = largest.filter(|l| n > i64::from(*l)) {
            p.note data-check="extrapolated" {
                "Extrapolated: beyond the largest measured count (" (largest) "), so less certain."
            }
        } @else if let Some(smallest) = smallest.filter(|s| n < i64::from(*s)) {
            p.note data-check="extrapolated" {
                "Extrapolated: below the smallest measured count (" (smallest) "), so less certain."
            }
        }
    }
}

/// What an error says, as a sentence on the page.
fn explain(error: ApiError) -> String {
    let problem = error.into_problem();
    match problem.errors.first() {
        Some(e) => format!("{}: {}", e.field, e.reason),
        None => problem.detail,
    }
}

/// Log-spaced node counts to draw, each once: from half the smallest
/// measured count to twice the largest (the histories of the three metrics
/// hold the same counts).
fn curve_nodes(model: &crate::model::Model) -> Vec<u32> {
    let points = &model.history.points;
    let largest = points.last().map_or(1, |p| p.nodes);
    let smallest = points.first().map_or(1, |p| p.nodes);
    let (from, to) = ((smallest / 2).max(1), largest.saturating_mul(2).max(2));
    let mut nodes: Vec<u32> = (0..CURVE_POINTS)
        .map(|i| {
            let t = f64::from(i) / f64::from(CURVE_POINTS - 1);
            (f64::from(from).ln() + t * (f64::from(to).ln() - f64::from(from).ln()))
                .exp()
                .round() as u32
        })
        .collect();
    nodes.dedup();
    nodes
}

fn metric_section(
    metric: Metric,
    model: &crate::model::Model,
    curve: &[(f64, &crate::model::Prediction)],
    marks: &[(u32, &str)],
) -> Markup {
    let unit = metric.unit();
    let points = &model.history.points;
    let layers = Layers {
        bands: vec![Series::new(
            "interval",
            curve.iter().map(|(n, p)| (*n, p.low, p.high)).collect(),
        )],
        lines: vec![Series::new(
            "model",
            curve.iter().map(|(n, p)| (*n, p.value)).collect(),
        )],
        dots: vec![Series::new(
            "history",
            points
                .iter()
                .map(|p| Dot {
                    x: f64::from(p.nodes),
                    y: p.mean,
                    spread: (p.runs > 1).then_some((p.min, p.max)),
                    title: format!(
                        "{}: {} ({}, {} to {})",
                        crate::text::nodes(p.nodes),
                        format::short(unit, p.mean),
                        crate::text::runs(p.runs as u64),
                        format::short(unit, p.min),
                        format::short(unit, p.max)
                    ),
                })
                .collect(),
        )],
        markers: marks
            .iter()
            .map(|(n, label)| (f64::from(*n), format!("{label}: {n}")))
            .collect(),
        ..Layers::default()
    };
    let top = curve
        .iter()
        .map(|(_, p)| p.high)
        .chain(points.iter().map(|p| p.max))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (y_unit, divisor, label) = format::axis(unit, top);
    let count = |v: f64| format!("{v}");
    let title = match metric {
        Metric::Ets => "Energy to solution (EtS)",
        Metric::Apc => "Average power (APC)",
        Metric::Tts => "Time to solution (TtS)",
    };
    let info = model_info(model);
    let backtest = backtest_info(model);
    html! {
        section.metric id=(metric.as_str()) data-metric=(metric.as_str()) {
            h2 { (title) }
            figure {
                (chart::chart(title, Axis { label: "nodes", log: true, divisor: 1.0, ticks: &count },
                    Axis { label: y_unit, log: metric != Metric::Apc, divisor, ticks: &label }, &layers))
                figcaption { "Line: the predictor; band: its 95 % interval; points: the measured means, with the runs' range." }
            }
            div.model {
                p {
                    "Winning model: " strong data-check="family" { (info.family) }
                    @if info.family_beyond != info.family || info.family_below != info.family {
                        " inside the measured range"
                        @if info.family_below == info.family { " and below it" }
                        ", " strong data-check="family_beyond" { (info.family_beyond) } " above it"
                        @if info.family_below != info.family {
                            ", " strong data-check="family_below" { (info.family_below) } " below it"
                        }
                    }
                    " (" (info.inside.params) " parameters, %RMSE " (format::percent(info.inside.rmse_pct))
                    " against an allowed " (format::percent(info.effective_allowed_rmse_pct)) ")."
                }
                p.formula { code { (info.inside.formula) } }
                table.backtest {
                    thead { tr { th { "Back-test" } th.num { "median error" } th.num { "max error" } th.num { "cases" } } }
                    tbody {
                        @if let Some(e) = &backtest.leave_one_out {
                            tr { td { "leave one node count out" } td.num data-check="loo_median_pct" { (format::percent(e.median_pct)) }
                                 td.num { (format::percent(e.max_pct)) } td.num { (e.points) } }
                        }
                        @if let Some(h) = &backtest.holdout {
                            tr { td { "largest counts from those up to " (h.trained_up_to) }
                                 td.num data-check="holdout_median_pct" { (format::percent(h.errors.median_pct)) }
                                 td.num { (format::percent(h.errors.max_pct)) } td.num { (h.errors.points) } }
                        }
                        @if let Some(e) = &backtest.backward {
                            tr { td { "smallest counts from those 1.5 times them and more" }
                                 td.num data-check="backward_median_pct" { (format::percent(e.median_pct)) }
                                 td.num { (format::percent(e.max_pct)) } td.num { (e.points) } }
                        }
                    }
                }
                @if !backtest.runners_up.is_empty() {
                    details {
                        summary { "Runners-up (" (backtest.runners_up.len()) ")" }
                        table.runners {
                            thead { tr { th { "family" } th.num { "parameters" } th.num { "score inside" } th.num { "score beyond" } th.num { "score below" } } }
                            tbody {
                                @for r in &backtest.runners_up {
                                    tr { td { (r.family) } td.num { (r.params) }
                                         td.num { (r.score_inside_pct.map_or("–".into(), |v| format!("{} %", sig3(v)))) }
                                         td.num { (r.score_beyond_pct.map_or("–".into(), |v| format!("{} %", sig3(v)))) }
                                         td.num { (r.score_below_pct.map_or("–".into(), |v| format!("{} %", sig3(v)))) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

//! Nodes: the power classification under the reference workload, its
//! histogram, classes and outliers (docs/nodes.md).

use axum::extract::State;
use maud::html;
use serde::Deserialize;

use super::chart::{self, Axis, Bar, Layers, Series};
use super::format;
use super::{PageQuery, PageResult, Viewer, page};
use crate::http::AppState;
use crate::http::nodes::{checked_scope, classification};
use crate::model::classify;
use crate::service::Error;

/// Bars of the histogram.
const BINS: usize = 20;

#[derive(Deserialize)]
pub struct NodesQuery {
    workload: Option<String>,
    partition: Option<String>,
}

async fn render(viewer: &Viewer, state: &AppState, query: NodesQuery) -> PageResult {
    let mut problems = Vec::new();
    // The form sends empty fields for "the default" and "all nodes".
    let partition = query.partition.filter(|p| !p.is_empty());
    let workload = checked_scope(
        state,
        query.workload.filter(|w| !w.is_empty()),
        partition.as_deref(),
        &mut problems,
    );
    if !problems.is_empty() {
        return Err(super::fail(Error::BadRequest(problems), viewer));
    }
    let c = match classification(
        state,
        workload.clone(),
        partition.clone(),
        classify::DEFAULT_CLASSES,
        BINS,
    )
    .await
    {
        Ok(c) => c,
        Err(Error::NotFound(detail)) => {
            let body = html! {
                h1 { "Nodes" }
                p.empty { (detail) ". Nodes are classed from their power samples ("
                    code { "POST /v1/nodes/samples" } ")." }
            };
            return Ok(page("Nodes", Some("/ui/nodes"), viewer, body));
        }
        Err(e) => return Err(super::fail(e, viewer)),
    };
    let outliers: Vec<_> = c.nodes.iter().filter(|n| n.outlier).collect();
    let layers = Layers {
        bars: vec![Series::new(
            "histogram",
            c.histogram
                .iter()
                .map(|b| Bar {
                    from: b.lower_w,
                    to: b.upper_w,
                    height: b.nodes as f64,
                    title: format!(
                        "{} nodes from {:.1} to {:.1} W",
                        b.nodes, b.lower_w, b.upper_w
                    ),
                })
                .collect(),
        )],
        markers: c
            .classes
            .iter()
            .skip(1)
            .map(|k| (k.lower_w, k.name.clone()))
            .collect(),
        ..Layers::default()
    };
    let (power_unit, divisor, watts) = format::axis("W", c.p_max_w);
    let count = |v: f64| format!("{v}");
    let body = html! {
        h1 { "Nodes" }
        form.search method="get" action="/ui/nodes" {
            label for="workload" { "Workload" }
            input #workload name="workload" value=(c.workload);
            label for="partition" { "Partition" }
            input #partition name="partition" value=[c.partition.as_deref()] placeholder="all";
            button type="submit" { "Show" }
        }
        p.hint { "As " code { "GET /v1/nodes/classification" } " answers: " (c.nodes.len())
            " nodes measured under " code { (c.workload) } " in the last " (c.window_days) " days." }
        dl.facts {
            dt { "P_min" } dd data-check="p_min_w" { (format::power(c.p_min_w)) }
            dt { "P_max" } dd data-check="p_max_w" { (format::power(c.p_max_w)) }
            dt { "Median" } dd data-check="median_w" { (format::power(c.median_w)) }
            dt { "Spread" } dd data-check="spread_pct" { (format::percent(c.spread_pct)) }
        }
        figure {
            (chart::chart("Node power histogram", Axis { label: &format!("power under the workload, {power_unit}"), log: false, divisor, ticks: &watts },
                Axis { label: "nodes", log: false, divisor: 1.0, ticks: &count }, &layers))
            figcaption { "Nodes by the power they draw; lines: where each class begins." }
        }
        h2 { "Classes" }
        table.classes {
            thead { tr { th { "Class" } th.num { "From" } th.num { "To" } th.num { "Centre" } th.num { "Nodes" } } }
            tbody {
                @for k in &c.classes {
                    tr data-class=(k.name) {
                        td { (k.name) }
                        td.num { (format::power(k.lower_w)) }
                        td.num { (format::power(k.upper_w)) }
                        td.num { (format::power(k.centre_w)) }
                        td.num data-check="nodes" data-si=(k.nodes) { (k.nodes) }
                    }
                }
            }
        }
        h2 { "Outliers" }
        @if outliers.is_empty() {
            p { "None: every node is within the robust z-score limit." }
        } @else {
            table.outliers {
                thead { tr { th { "Node" } th.num { "Power" } th.num { "Robust z" } th { "Class" } th.num { "Samples" } } }
                tbody {
                    @for n in &outliers {
                        tr data-node=(n.node) {
                            td { (n.node) }
                            td.num data-check="power_w" { (format::power(n.power_w)) }
                            td.num { (format!("{:.2}", n.robust_z)) }
                            td { (n.class) }
                            td.num { (n.samples) }
                        }
                    }
                }
            }
        }
    };
    Ok(page("Nodes", Some("/ui/nodes"), viewer, body))
}

pub async fn show(
    viewer: Viewer,
    State(state): State<AppState>,
    PageQuery(query): PageQuery<NodesQuery>,
) -> PageResult {
    render(&viewer, &state, query).await
}

//! Capacity questions (docs/model.md §5): the largest node count under a power
//! limit, the energy- or time-optimal node count, and the time/energy Pareto
//! front, each from the application's fitted predictors.
//!
//! Optimal-nodes and pareto read the fitted curves at every node count,
//! measured or not (unlike a prediction, which answers a measured count from
//! its runs): comparing counts needs one consistent curve, and one lucky run
//! must not make its node count look best. Max-nodes asks whether a job's
//! own draw fits under a power limit, so it reads what the predictions
//! answer, a measured count's runs included: what admission reserves for a
//! job of that count.
//!
//! Each answer carries the flags of the predictions behind its counts
//! (`extrapolation`, `thin_history`, …), as the predictions do.
//!
//! This file holds what the three share; `max_nodes.rs` and `optimal.rs`
//! (the optimal node count and the Pareto front) the routes.

mod max_nodes;
mod optimal;

pub use max_nodes::*;
pub use optimal::*;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ApiResult};
use super::predictions::{check_nodes, fitted_models};
use crate::model::capacity::{self, Choice};
use crate::model::{Flag, Flags, Metric, Prediction, consistency};
use crate::predict::{self, Fitted};
use crate::service::apps::AppRow;
use crate::validate::FieldError;

/// Most node counts one question searches.
pub const MAX_SEARCH_NODES: u32 = 100_000;

/// The node counts searched: `min_nodes` (default 1) to `max_nodes` (default
/// twice the largest measured count, at most 1,000,000 and at most 100,000
/// counts from `min_nodes`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
pub struct SearchRange {
    pub min_nodes: u32,
    pub max_nodes: u32,
}

pub(super) fn check_range(
    min: Option<i64>,
    max: Option<i64>,
    problems: &mut Vec<FieldError>,
) -> (Option<u32>, Option<u32>) {
    let mut check = |field: &str, value: Option<i64>| {
        value.and_then(|v| check_nodes(field, v).map_err(|e| problems.push(e)).ok())
    };
    let (min, max) = (check("min_nodes", min), check("max_nodes", max));
    if let (Some(lo), Some(hi)) = (min, max)
        && lo > hi
    {
        problems.push(FieldError::new(
            "min_nodes",
            format!("must not exceed max_nodes ({lo} > {hi})"),
        ));
    }
    (min, max)
}

/// The range searched, once the history is known; refused (400) when the
/// asked range spans more than [`MAX_SEARCH_NODES`] counts. The default
/// upper end, twice the largest measured count, is kept within the node
/// count's limit and that many counts above `min_nodes`: a default never
/// refuses the question.
pub(super) fn search_range(
    min: Option<u32>,
    max: Option<u32>,
    app: &AppRow,
) -> ApiResult<SearchRange> {
    let largest = app
        .nodes_max
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(1);
    let min_nodes = min.unwrap_or(1);
    let max_nodes = max
        .unwrap_or_else(|| {
            crate::service::predictions::default_last_nodes(largest)
                .min(min_nodes.saturating_add(MAX_SEARCH_NODES - 1))
        })
        .max(min_nodes);
    if max_nodes - min_nodes >= MAX_SEARCH_NODES {
        return Err(ApiError::bad_request(
            "max_nodes",
            format!(
                "the range {min_nodes}..{max_nodes} spans more than {MAX_SEARCH_NODES} node counts"
            ),
        ));
    }
    Ok(SearchRange {
        min_nodes,
        max_nodes,
    })
}

/// The predictors an answer used.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelsUsed {
    pub model_version: String,
    /// The model family per metric (docs/model.md §2.1): `inside`, the one
    /// inside the measured range; `inside / above` where only the one above
    /// it differs; `inside / above / below` whenever the one below it
    /// differs (the one above then named even when it is the one inside).
    pub ets: Option<String>,
    pub apc: Option<String>,
    pub tts: Option<String>,
    /// The classification behind worst-node bounds, when used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
}

/// Node counts a scan evaluates on the request's own worker; a longer one
/// (up to a million counts) runs under a heavy permit off the workers, so
/// that a flood of wide scans is refused (429) rather than starving every
/// other request (a probe: `/healthz` at 0.9–1.6 s under 128 parallel
/// Pareto fronts of 100,000 counts).
const INLINE_COUNTS: u32 = 4_096;

/// Run `work`, a scan over the node counts of `range`, inline when it is
/// short and under a heavy permit otherwise (`Service::offload`).
pub(super) async fn scan<T: Send + 'static>(
    state: &AppState,
    range: &SearchRange,
    work: impl FnOnce() -> T + Send + 'static,
) -> ApiResult<T> {
    let counts = range
        .max_nodes
        .saturating_sub(range.min_nodes)
        .saturating_add(1);
    if counts <= INLINE_COUNTS {
        Ok(work())
    } else {
        Ok(state.offload(work).await?)
    }
}

pub(super) fn case_of(fitted: &Fitted) -> String {
    let selection = &fitted.model.selection;
    let [inside, beyond, below] =
        crate::model::Regime::ALL.map(|r| selection.winner(r).family.as_str());
    if below != inside {
        format!("{inside} / {beyond} / {below}")
    } else if beyond != inside {
        format!("{inside} / {beyond}")
    } else {
        inside.to_owned()
    }
}

/// The three reconciled curves of an application (`consistency::curves`):
/// what optimal-nodes and pareto read at each count, so that a count chosen
/// there has the EtS and TtS its predictions give (they differed where
/// reconciling moved them, below the measured range say).
#[derive(Clone)]
pub(super) struct Curves([Arc<Fitted>; 3]);

impl Curves {
    /// The curves of `app`'s fitted models, and the models named.
    pub(super) async fn of(
        state: &AppState,
        app: &AppRow,
        allowed: Option<f64>,
    ) -> ApiResult<(Curves, ModelsUsed)> {
        let allowed = predict::allowed_rmse(app, allowed);
        let fitted = fitted_models(state, app, &Metric::ALL, allowed).await?;
        let models = ModelsUsed {
            model_version: predict::model_version(app),
            ets: Some(case_of(&fitted[0])),
            apc: Some(case_of(&fitted[1])),
            tts: Some(case_of(&fitted[2])),
            workload: None,
        };
        Ok((Curves(std::array::from_fn(|i| fitted[i].clone())), models))
    }

    fn at(&self, n: u32) -> [Prediction; 3] {
        let [ets, apc, tts] = &self.0;
        consistency::curves([&ets.model, &apc.model, &tts.model], n)
    }

    /// The EtS and TtS at `n`, from one reconciliation of the three.
    pub(super) fn energy_and_time(&self, n: u32) -> (f64, f64) {
        let [ets, _, tts] = self.at(n);
        (ets.value, tts.value)
    }

    /// Every count of `range` with finite EtS and TtS, in ascending order.
    pub(super) fn choices(&self, range: &SearchRange) -> Vec<Choice> {
        capacity::choices(range.min_nodes..=range.max_nodes, |n| {
            self.energy_and_time(n)
        })
        .collect()
    }

    /// The flags of the EtS and TtS read at `n`.
    pub(super) fn flags(&self, n: u32) -> Flags {
        let [ets, _, tts] = self.at(n);
        ets.flags.union(tts.flags)
    }
}

/// A capacity answer's flags by name, as predictions name them, with
/// `database_unavailable` when answered from memory through an outage.
pub(super) fn flag_names(state: &AppState, mut flags: Flags) -> Vec<String> {
    if state.caches.degraded() {
        flags.insert(Flag::DatabaseUnavailable);
    }
    flags.iter().map(|f| f.as_str().to_owned()).collect()
}

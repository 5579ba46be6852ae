//! `GET /v1/apps/{app}/optimal-nodes` and `GET /v1/apps/{app}/pareto`: the
//! energy- or time-optimal node count, and the time/energy Pareto front.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    BadParameter, FitsBusy, NeedsRead, Unauthorized, Unavailable, UnknownApp,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::Query;
use crate::http::predictions::check_allowed;
use crate::model::capacity::{self, Choice, Objective};
use crate::service::apps;
use crate::validate::{self, FieldError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ObjectiveName {
    /// Least EtS (within `deadline_s`, if given).
    Energy,
    /// Least TtS (within `energy_budget_j`, if given).
    Time,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OptimalParams {
    pub objective: ObjectiveName,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i64>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i64>,
    /// Only node counts predicted to finish within this time, s.
    #[param(minimum = 1e-100, maximum = 1e100)]
    pub deadline_s: Option<f64>,
    /// Only node counts predicted to need at most this energy, J.
    #[param(minimum = 1e-100, maximum = 1e100)]
    pub energy_budget_j: Option<f64>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

/// A node count with its predicted energy and time.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NodeChoice {
    pub nodes: u32,
    pub ets_j: f64,
    pub tts_s: f64,
    /// The flags of the EtS and TtS models there: `extrapolation` (outside
    /// the measured range), `thin_history` (fewer than three node counts
    /// measured: a single count predicts the same energy everywhere),
    /// `allowed_rmse_not_met`, `outside_theoretical_bounds`, `bounded`,
    /// `database_unavailable`.
    pub flags: Vec<String>,
}

impl NodeChoice {
    fn of(c: Choice, curves: &Curves, state: &AppState) -> NodeChoice {
        NodeChoice {
            nodes: c.nodes,
            ets_j: c.ets_j,
            tts_s: c.tts_s,
            flags: flag_names(state, curves.flags(c.nodes)),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Optimal {
    pub app: String,
    pub objective: ObjectiveName,
    pub range: SearchRange,
    pub deadline_s: Option<f64>,
    pub energy_budget_j: Option<f64>,
    /// The best node count; `null` when none meets the constraints.
    pub choice: Option<NodeChoice>,
    /// Without constraints, for comparison: the least-energy and the fastest
    /// node counts of the range.
    pub least_energy: Option<NodeChoice>,
    pub fastest: Option<NodeChoice>,
    /// Why there is no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub models: ModelsUsed,
}

/// The energy-optimal node count (within a deadline), or the fastest (within
/// an energy budget).
///
/// Every count of the range is considered; ties go to fewer nodes.
#[utoipa::path(get, path = "/v1/apps/{app}/optimal-nodes", tag = "capacity",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           OptimalParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The answer, or why there is none", body = Optimal),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "No runs yet", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn optimal_nodes(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<OptimalParams>,
) -> ApiResult<axum::Json<Optimal>> {
    let mut problems = Vec::new();
    let (min, max) = check_range(params.min_nodes, params.max_nodes, &mut problems);
    for (field, value) in [
        ("deadline_s", params.deadline_s),
        ("energy_budget_j", params.energy_budget_j),
    ] {
        if let Some(Err(reason)) = value.map(validate::positive) {
            problems.push(FieldError::new(field, reason));
        }
    }
    let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let app = apps::find(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let (curves, models) = Curves::of(&state, &app, allowed).await?;
    let objective = match params.objective {
        ObjectiveName::Energy => Objective::Energy,
        ObjectiveName::Time => Objective::Time,
    };
    let (deadline_s, energy_budget_j) = (params.deadline_s, params.energy_budget_j);
    let scanned = curves.clone();
    // Each count read once, then judged three ways.
    let (choice, (least_energy, fastest)) = scan(&state, &range, move || {
        let all = scanned.choices(&range);
        let choice = capacity::optimal(all.iter().copied(), objective, deadline_s, energy_budget_j);
        (choice, extremes(&all))
    })
    .await?;
    let reason = choice.is_none().then(|| {
        let mut why = Vec::new();
        if let (Some(deadline), Some(f)) = (params.deadline_s, fastest)
            && f.tts_s > deadline
        {
            let (needs, deadline) = crate::text::whole_apart(f.tts_s, deadline);
            why.push(format!(
                "the fastest count ({}) needs {needs} s, beyond the deadline of {deadline} s",
                crate::text::nodes(f.nodes),
            ));
        }
        if let (Some(budget), Some(e)) = (params.energy_budget_j, least_energy)
            && e.ets_j > budget
        {
            let (needs, budget) = crate::text::whole_apart(e.ets_j, budget);
            why.push(format!(
                "the least-energy count ({}) needs {needs} J, above the budget of {budget} J",
                crate::text::nodes(e.nodes),
            ));
        }
        if why.is_empty() {
            why.push(
                "no node count of the range meets the deadline and the budget together".into(),
            );
        }
        why.join("; ")
    });
    Ok(axum::Json(Optimal {
        app: app.tag.clone(),
        objective: params.objective,
        range,
        deadline_s: params.deadline_s,
        energy_budget_j: params.energy_budget_j,
        choice: choice.map(|c| NodeChoice::of(c, &curves, &state)),
        least_energy: least_energy.map(|c| NodeChoice::of(c, &curves, &state)),
        fastest: fastest.map(|c| NodeChoice::of(c, &curves, &state)),
        reason,
        models,
    }))
}

/// The least-energy and the fastest of `all` (ascending node counts).
fn extremes(all: &[Choice]) -> (Option<Choice>, Option<Choice>) {
    (
        capacity::optimal(all.iter().copied(), Objective::Energy, None, None),
        capacity::optimal(all.iter().copied(), Objective::Time, None, None),
    )
}

/// The least-energy and the fastest node counts of `app` over the default
/// range, as `GET /v1/apps/{app}/optimal-nodes` answers them.
pub(crate) async fn least_energy_and_fastest(
    state: &AppState,
    app: &crate::service::apps::AppRow,
) -> ApiResult<(Option<NodeChoice>, Option<NodeChoice>)> {
    let range = search_range(None, None, app)?;
    let (curves, _) = Curves::of(state, app, None).await?;
    let scanned = curves.clone();
    let (energy, time) = scan(state, &range, move || extremes(&scanned.choices(&range))).await?;
    Ok((
        energy.map(|c| NodeChoice::of(c, &curves, state)),
        time.map(|c| NodeChoice::of(c, &curves, state)),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ParetoParams {
    #[param(minimum = 1, maximum = 1_000_000)]
    pub min_nodes: Option<i64>,
    #[param(minimum = 1, maximum = 1_000_000)]
    pub max_nodes: Option<i64>,
    #[param(exclusive_minimum = 0.0, maximum = 100.0)]
    pub allowed_rmse_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Pareto {
    pub app: String,
    pub range: SearchRange,
    /// The node counts no other count beats on both time and energy, by
    /// ascending node count (so by falling time and rising energy). At most
    /// 1,000 of them: a longer front is thinned to counts evenly spread in
    /// log n, its two ends kept.
    pub front: Vec<NodeChoice>,
    /// How many node counts the whole front has.
    pub front_counts: usize,
    pub models: ModelsUsed,
}

/// The most points a Pareto answer lists (a front over 100,000 counts was
/// 6.8 MB of JSON).
const MAX_FRONT_POINTS: usize = 1_000;

/// At most `MAX_FRONT_POINTS` of `front` (ascending node counts): its ends,
/// and between them the first count at or past each of evenly spaced steps
/// in log n.
fn thin(front: Vec<Choice>) -> Vec<Choice> {
    let (Some(first), Some(last)) = (front.first(), front.last()) else {
        return front;
    };
    if front.len() <= MAX_FRONT_POINTS {
        return front;
    }
    let (low, high) = (f64::from(first.nodes).ln(), f64::from(last.nodes).ln());
    let steps = (MAX_FRONT_POINTS - 1) as f64;
    let mut kept = Vec::with_capacity(MAX_FRONT_POINTS);
    let mut step = 0.0;
    for (i, choice) in front.iter().enumerate() {
        let at = f64::from(choice.nodes).ln();
        let is_last = i + 1 == front.len();
        if is_last || at >= low + step / steps * (high - low) {
            kept.push(*choice);
            // The next step past this count.
            step = ((at - low) / (high - low) * steps).floor() + 1.0;
        }
        if kept.len() == MAX_FRONT_POINTS - 1 && !is_last {
            kept.extend(front.last().copied());
            break;
        }
    }
    kept
}

/// The time/energy Pareto-optimal node counts.
#[utoipa::path(get, path = "/v1/apps/{app}/pareto", tag = "capacity",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ParetoParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The Pareto front", body = Pareto),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "No runs yet", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = FitsBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn pareto(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<ParetoParams>,
) -> ApiResult<axum::Json<Pareto>> {
    let mut problems = Vec::new();
    let (min, max) = check_range(params.min_nodes, params.max_nodes, &mut problems);
    let allowed = check_allowed("allowed_rmse_pct", params.allowed_rmse_pct)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    if !problems.is_empty() {
        return Err(ApiError::BadRequest(problems));
    }
    let app = apps::find(&state, &tag).await?;
    let range = search_range(min, max, &app)?;
    let (curves, models) = Curves::of(&state, &app, allowed).await?;
    let scanned = curves.clone();
    let front = scan(&state, &range, move || {
        capacity::pareto(scanned.choices(&range))
    })
    .await?;
    let front_counts = front.len();
    // Flags only for the points listed (a front may have 100,000).
    let front = thin(front)
        .into_iter()
        .map(|c| NodeChoice::of(c, &curves, &state))
        .collect();
    Ok(axum::Json(Pareto {
        app: app.tag.clone(),
        range,
        front_counts,
        front,
        models,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front(nodes: impl Iterator<Item = u32>) -> Vec<Choice> {
        nodes
            .map(|n| Choice {
                nodes: n,
                ets_j: f64::from(n),
                tts_s: 1.0 / f64::from(n),
            })
            .collect()
    }

    #[test]
    fn a_long_front_is_thinned_evenly_in_log_n_keeping_its_ends() {
        let short = front(1..=MAX_FRONT_POINTS as u32);
        assert_eq!(
            thin(short.clone()).len(),
            short.len(),
            "short fronts are whole"
        );
        let long = front(1..=100_000);
        let kept = thin(long);
        assert!(kept.len() <= MAX_FRONT_POINTS, "{}", kept.len());
        // Small counts are further apart in log n than a step: fewer kept.
        assert!(kept.len() >= MAX_FRONT_POINTS / 2, "{}", kept.len());
        assert_eq!(kept.first().unwrap().nodes, 1);
        assert_eq!(kept.last().unwrap().nodes, 100_000);
        assert!(kept.windows(2).all(|w| w[0].nodes < w[1].nodes));
        // Evenly in log n: no gap in ln n wider than a few steps.
        let step = (100_000f64).ln() / (MAX_FRONT_POINTS - 1) as f64;
        let widest = kept
            .windows(2)
            .map(|w| f64::from(w[1].nodes).ln() - f64::from(w[0].nodes).ln())
            .fold(0.0, f64::max);
        assert!(
            widest <= 2.0 * step + 0.7,
            "widest gap {widest} (ln 2 at the start)"
        );
    }
}

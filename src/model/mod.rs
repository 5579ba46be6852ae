//! The mathematics of docs/model.md: pure functions from history to predictions.
//!
//! No I/O, no async, no serde: slices of numbers in, fitted functions and
//! numbers out.

pub mod bounds;
pub mod capacity;
pub mod classify;
pub mod consistency;
pub mod efficiency;
pub mod expectation;
pub mod families;
pub mod fit;
pub mod lsq;
pub mod physics;
pub mod pmnf;
pub mod predictor;
pub mod search;
pub mod segmented;
pub mod select;
pub mod synth;
pub mod theory;

pub use families::{Curve, Family};
pub use fit::{
    ErrorSummary, Flag, Flags, Held, History, Holdout, Model, NodePoint, NodeStats, Prediction,
    Source, fit, fit_history,
};
pub use predictor::{Case, Continuation, Predictor, Segment, SegmentKind, Shape};
pub use select::{Candidate, Regime, Selection};

/// The allowed %RMSE when neither the request nor the application sets one.
pub const DEFAULT_ALLOWED_RMSE_PCT: f64 = 2.0;

pub use crate::domain::ScalingMode;
pub use crate::domain::{Aggregate, Metric};

/// One run's value of a metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    pub nodes: u32,
    pub value: f64,
    /// Quality weight in (0, 1].
    pub weight: f64,
}

impl Observation {
    /// Whether a history counts it: a finite positive value with a positive
    /// weight at one node or more.
    pub fn is_usable(&self) -> bool {
        self.value.is_finite() && self.value > 0.0 && self.weight > 0.0 && self.nodes > 0
    }

    /// Its statistics as one run of its node count, if usable.
    pub fn stats(&self) -> Option<NodeStats> {
        self.is_usable()
            .then(|| NodeStats::run(self.nodes, self.value, self.weight))
    }
}

/// Runs of full quality at (node count, value) pairs, for tests.
#[cfg(test)]
pub(crate) fn runs(points: &[(u32, f64)]) -> Vec<Observation> {
    points
        .iter()
        .map(|&(nodes, value)| Observation {
            nodes,
            value,
            weight: 1.0,
        })
        .collect()
}

/// Options for `metric` with an unknown scaling mode and the default 2 %
/// allowed %RMSE, for tests.
#[cfg(test)]
pub(crate) fn options_for(metric: Metric) -> FitOptions {
    FitOptions {
        metric,
        mode: ScalingMode::Unknown,
        allowed_rmse_pct: DEFAULT_ALLOWED_RMSE_PCT,
    }
}

/// The history of one run of `f(n)` at each of `nodes`, for tests.
#[cfg(test)]
pub(crate) fn sampled(f: impl Fn(f64) -> f64, nodes: &[u32]) -> History {
    let points: Vec<(u32, f64)> = nodes.iter().map(|&n| (n, f(f64::from(n)))).collect();
    History::new(&runs(&points))
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitOptions {
    pub metric: Metric,
    pub mode: ScalingMode,
    pub allowed_rmse_pct: f64,
}

//! Domain values that every layer shares, each defined once: the model
//! computes with them, the store keeps them as PostgreSQL types, and the API
//! names them in its document.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How the problem size changes with the node count (docs/model.md §1).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema, sqlx::Type,
)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "scaling_mode", rename_all = "lowercase")]
pub enum ScalingMode {
    /// Fixed total problem.
    Strong,
    /// Fixed problem per node.
    Weak,
    /// Not declared.
    #[default]
    Unknown,
}

/// The period of an account's energy budget (docs/model.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, sqlx::Type)]
#[serde(rename_all = "lowercase")]
#[sqlx(type_name = "budget_period", rename_all = "lowercase")]
pub enum Period {
    /// The calendar month (UTC) containing now.
    Month,
    /// The ISO week (Monday 00:00 UTC) containing now.
    Week,
    /// `starts_at` to `ends_at`.
    Custom,
}

/// What the power a running job reserves against the caps comes from
/// (docs/model.md §5), best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "reserved_basis", rename_all = "snake_case")]
pub enum ReservedBasis {
    /// The APC predicted on the job's own nodes.
    NodeSet,
    /// The worst-node bound of n nodes.
    WorstNodes,
    /// The expected APC of n nodes.
    Expected,
    /// No history: n × the largest vendor peak, else 1000 W per node.
    NoHistory,
}

impl ReservedBasis {
    /// The name the API and the database use.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservedBasis::NodeSet => "node_set",
            ReservedBasis::WorstNodes => "worst_nodes",
            ReservedBasis::Expected => "expected",
            ReservedBasis::NoHistory => "no_history",
        }
    }
}

impl std::fmt::Display for ReservedBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is predicted.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[schema(as = MetricName)]
pub enum Metric {
    /// Energy-to-Solution, joules.
    Ets,
    /// Average Power Consumption, watts.
    Apc,
    /// Time-to-Solution, seconds.
    Tts,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::Ets, Metric::Apc, Metric::Tts];

    /// The position of this metric in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Ets => "ets",
            Metric::Apc => "apc",
            Metric::Tts => "tts",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::Ets => "J",
            Metric::Apc => "W",
            Metric::Tts => "s",
        }
    }

    /// The exponent e of value ∝ nᵉ under ideal scaling, used when a single
    /// node count has been measured.
    pub fn ideal_exponent(self, mode: ScalingMode) -> f64 {
        match (mode, self) {
            (_, Metric::Apc) => 1.0,
            (ScalingMode::Weak, Metric::Ets) => 1.0,
            (ScalingMode::Weak, Metric::Tts) => 0.0,
            (_, Metric::Ets) => 0.0,
            (_, Metric::Tts) => -1.0,
        }
    }
}

/// How runs at a measured node count are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[schema(as = AggregateName)]
pub enum Aggregate {
    /// Quality-weighted mean of the runs at a measured node count.
    #[default]
    Mean,
    Min,
    /// The largest measured value (what a power-cap check wants).
    Max,
}

/// Whether a scaling-model search (docs/model.md §6.2) takes terms with
/// negative exponents as hypotheses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
#[schema(as = NegativeName)]
pub enum Negative {
    /// When the data fall with p (the default).
    Auto,
    Always,
    Never,
}

/// The three outcomes of comparing a model's leading term with an
/// expectation (docs/model.md §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = OutcomeName)]
pub enum Outcome {
    /// The model grows no faster than expected: δ(p) is O(1).
    Match,
    /// Faster, but within the deviation limit.
    Approximate,
    /// Faster than the deviation limit allows.
    NoMatch,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Match => "match",
            Outcome::Approximate => "approximate",
            Outcome::NoMatch => "no_match",
        }
    }
}

/// The shape of a fundamental efficiency factor as a function of the
/// process count P (docs/model.md §6.1): each is fitted, the best kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = FamilyName)]
pub enum FactorFamily {
    /// a0 / (f + (1 − f)·P)
    Amdahl,
    /// a0·P / ((1 − f) + f·(2P − 1))
    Pipeline,
    /// a0
    Constant,
}

/// Whether a segment is a straight line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = SegmentKindName)]
pub enum SegmentKind {
    Linear,
    NonLinear,
}

/// Ten years: a longer run or time limit is taken for a unit mistake (ms
/// sent as s), and no prediction goes past it.
pub const MAX_DURATION_S: f64 = 10.0 * 365.25 * 86_400.0;

/// The most a single node is believed to draw, W: ten times today's
/// densest GPU nodes. More is a unit error (and squares of such values in
/// the statistics would overflow), and no prediction goes past it.
pub const MAX_POWER_PER_NODE_W: f64 = 100_000.0;

/// Whether a quantity sent again is the one stored: equal within a relative
/// 1e-9, so that a resend through another tool's decimal rendering (or that
/// spells out a derived quantity) counts as the same measurement (runs and
/// power samples alike).
pub fn same_quantity(new: f64, stored: f64) -> bool {
    (new - stored).abs() <= 1e-9 * new.abs().max(stored.abs())
}

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

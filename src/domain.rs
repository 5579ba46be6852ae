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

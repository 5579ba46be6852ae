//! Predictions: `GET /v1/apps/{app}/predictions`, `POST /v1/predictions`,
//! `GET /v1/apps/{app}/curve`, `GET /v1/apps/{app}/model`.

mod answer;
mod batch;
mod curve;
mod describe;
mod fitted;
mod single;

pub use answer::*;
pub use batch::*;
pub use curve::*;
pub use describe::*;
pub use fitted::*;
pub use single::*;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::error::ApiError;
use crate::model::{Aggregate, Metric};
use crate::predict::PredictError;
use crate::validate::{self, FieldError};

/// Most queries in one `POST /v1/predictions`.
pub const MAX_BATCH_QUERIES: usize = 1000;
/// Most node names one answer lists (a node set may hold 100,000).
pub(super) const MAX_NAMES_SHOWN: usize = 20;
/// Most points of one curve.
pub const MAX_CURVE_POINTS: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MetricName {
    /// Energy-to-Solution (J)
    Ets,
    /// Average Power Consumption (W)
    Apc,
    /// Time-to-Solution (s)
    Tts,
}

impl From<MetricName> for Metric {
    fn from(m: MetricName) -> Self {
        match m {
            MetricName::Ets => Metric::Ets,
            MetricName::Apc => Metric::Apc,
            MetricName::Tts => Metric::Tts,
        }
    }
}

impl From<Metric> for MetricName {
    fn from(m: Metric) -> Self {
        match m {
            Metric::Ets => MetricName::Ets,
            Metric::Apc => MetricName::Apc,
            Metric::Tts => MetricName::Tts,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AggregateName {
    /// Quality-weighted mean of the runs at a measured node count.
    #[default]
    Mean,
    Min,
    /// The largest measured value (what a power-cap check wants).
    Max,
}

impl From<AggregateName> for Aggregate {
    fn from(a: AggregateName) -> Self {
        match a {
            AggregateName::Mean => Aggregate::Mean,
            AggregateName::Min => Aggregate::Min,
            AggregateName::Max => Aggregate::Max,
        }
    }
}

pub(in crate::http) fn check_nodes(field: &str, nodes: i64) -> Result<u32, FieldError> {
    validate::node_count(nodes).map_err(|reason| FieldError::new(field, reason))
}

pub(in crate::http) fn check_allowed(
    field: &str,
    allowed: Option<f64>,
) -> Result<Option<f64>, FieldError> {
    match allowed {
        Some(pct) => validate::allowed_rmse_pct(pct)
            .map(|()| Some(pct))
            .map_err(|reason| FieldError::new(field, reason)),
        None => Ok(None),
    }
}

pub(in crate::http) fn predict_error(tag: &str, error: PredictError) -> ApiError {
    match error {
        PredictError::NoRuns => ApiError::invalid(
            "app",
            format!("application `{tag}` has no runs to predict from yet"),
        ),
        PredictError::Database(e) => e.into(),
        PredictError::Fit(e) => ApiError::Internal(anyhow::anyhow!(e)),
        PredictError::Busy => ApiError::Busy(
            "another fit with an allowed_rmse_pct of its own is under way; retry shortly, \
             or use the application's setting",
        ),
    }
}

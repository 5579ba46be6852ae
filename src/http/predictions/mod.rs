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

pub use crate::service::predictions::*;

/// Most queries in one `POST /v1/predictions`.
pub const MAX_BATCH_QUERIES: usize = 1000;
/// Most points of one curve.
pub const MAX_CURVE_POINTS: usize = 1000;

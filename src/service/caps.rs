//! Power caps, as the API shows them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Result, Service};
use crate::store;
pub use crate::store::caps::{CapRow, NewCap};

/// A power cap.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PowerCap {
    #[schema(example = "cooling-maintenance")]
    pub name: String,
    pub limit_w: f64,
    /// The partition it limits; `null` for the whole system.
    pub partition: Option<String>,
    /// `null`: since ever.
    pub starts_at: Option<DateTime<Utc>>,
    /// `null`: for ever.
    pub ends_at: Option<DateTime<Utc>>,
    pub description: String,
    /// Whether it is active now.
    pub active: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl PowerCap {
    pub fn from_row(c: CapRow, now: DateTime<Utc>) -> Self {
        PowerCap {
            active: c.starts_at.is_none_or(|s| s <= now) && c.ends_at.is_none_or(|e| e > now),
            name: c.name,
            limit_w: c.limit_w,
            partition: c.partition,
            starts_at: c.starts_at,
            ends_at: c.ends_at,
            description: c.description,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// Set cap `name` (create or replace): the row, and whether it is new.
pub async fn put(service: &Service, name: &str, cap: &NewCap) -> Result<(CapRow, bool)> {
    Ok(store::caps::upsert(&service.pool, name, cap).await?)
}

/// Cap `name`, if set.
pub async fn get(service: &Service, name: &str) -> Result<Option<CapRow>> {
    Ok(store::caps::get(&service.pool, name).await?)
}

/// Remove cap `name`: whether it was set.
pub async fn delete(service: &Service, name: &str) -> Result<bool> {
    Ok(store::caps::delete(&service.pool, name).await?)
}

/// Every cap, by name.
pub async fn list(service: &Service) -> Result<Vec<CapRow>> {
    Ok(store::caps::list(&service.pool).await?)
}

/// The tightest cap of `partition` (or of the whole system) active at `at`.
pub async fn in_force(
    service: &Service,
    partition: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Option<CapRow>> {
    Ok(store::caps::in_force_for(&service.pool, partition, at).await?)
}

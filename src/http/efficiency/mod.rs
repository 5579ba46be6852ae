//! Fundamental efficiency factors (docs/model.md §6.1): measurements per
//! application, region and process count (this file), and their
//! extrapolation (`scalability.rs`).

mod scalability;

pub use scalability::*;

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    NeedsIngest, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable, UnknownApp,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, Query};
use crate::http::extract::{AppPath, NoQuery};
use crate::model::efficiency::{self as factors};
use crate::service::apps;
use crate::service::efficiency::{self, MeasurementRow, NewMeasurement};
use crate::text::exact;
use crate::validate::{self, Errors};

/// The region of measurements that name none.
pub const DEFAULT_REGION: &str = "all";
/// Most measurements per request.
pub const MAX_MEASUREMENTS: usize = 1000;
/// The largest process count, measured or asked about.
pub const MAX_PROCESSES: i64 = 10_000_000;
/// Most targets per question.
pub const MAX_TARGETS: usize = 1000;

/// The three factors, in the order of their indices in fits and answers.
const NAMES: [&str; 3] = ["load_balance", "serialization", "transfer"];

/// One measurement: the three factors, or compute times in place of load
/// balance.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasurementInput {
    /// The code region (default `all`).
    #[schema(example = "solver")]
    pub region: Option<String>,
    /// Number of processes, ≥ 1.
    #[schema(minimum = 1, maximum = 10_000_000)]
    pub processes: i64,
    /// LB in (0, 1]; give this or `compute_times`.
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub load_balance: Option<f64>,
    /// Compute time of each process, seconds (as many as `processes`): load
    /// balance is then (Σ tᵢ) / (P · max tᵢ).
    pub compute_times: Option<Vec<f64>>,
    /// Ser in (0, 1]: the efficiency with an ideal network.
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub serialization: f64,
    /// Trf in (0, 1]: CommEff / Ser.
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub transfer: f64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MeasurementsInput {
    /// 1 to 1000 measurements; each replaces any stored at its region and
    /// process count.
    pub measurements: Vec<MeasurementInput>,
}

/// A stored measurement.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Measurement {
    pub region: String,
    pub processes: u32,
    pub load_balance: f64,
    pub serialization: f64,
    pub transfer: f64,
    /// η = LB · Ser · Trf.
    pub efficiency: f64,
    /// Whether load balance was computed from compute times.
    pub from_compute_times: bool,
    pub updated_at: DateTime<Utc>,
}

impl From<MeasurementRow> for Measurement {
    fn from(r: MeasurementRow) -> Self {
        Measurement {
            efficiency: r.load_balance * r.serialization * r.transfer,
            region: r.region,
            processes: u32::try_from(r.processes).unwrap_or(0),
            load_balance: r.load_balance,
            serialization: r.serialization,
            transfer: r.transfer,
            from_compute_times: r.from_compute_times,
            updated_at: r.updated_at,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Stored {
    pub app: String,
    /// Measurements new at their region and process count.
    pub created: usize,
    /// Measurements that replaced a stored one.
    pub replaced: usize,
    /// The application's measurements now, of the regions written.
    pub measurements: Vec<Measurement>,
}

fn factor(errors: &mut Errors, field: &str, value: f64) {
    if !(value > 0.0 && value <= 1.0) {
        errors.add(field, format!("must be in (0, 1] (got {})", exact(value)));
    }
}

fn check(input: MeasurementsInput) -> Result<Vec<NewMeasurement>, Vec<validate::FieldError>> {
    let mut errors = Errors::default();
    let count = input.measurements.len();
    if count == 0 || count > MAX_MEASUREMENTS {
        errors.add(
            "measurements",
            format!("give 1 to {MAX_MEASUREMENTS} measurements (got {count})"),
        );
    }
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    for (k, m) in input.measurements.into_iter().enumerate() {
        let at = |name: &str| format!("measurements[{k}].{name}");
        let region = m.region.unwrap_or_else(|| DEFAULT_REGION.to_owned());
        errors.check(
            &at("region"),
            validate::identifier(&region, validate::TAG_MAX),
        );
        if !(1..=MAX_PROCESSES).contains(&m.processes) {
            errors.add(
                &at("processes"),
                format!(
                    "must be between 1 and {MAX_PROCESSES} (got {})",
                    m.processes
                ),
            );
        } else if !seen.insert((region.clone(), m.processes)) {
            errors.add(
                &at("processes"),
                format!(
                    "region {region} has a second measurement at {} processes in this request",
                    m.processes
                ),
            );
        }
        factor(&mut errors, &at("serialization"), m.serialization);
        factor(&mut errors, &at("transfer"), m.transfer);
        let load_balance = match (m.load_balance, &m.compute_times) {
            (Some(_), Some(_)) => {
                errors.add(
                    &at("compute_times"),
                    "give load_balance or compute_times, not both",
                );
                None
            }
            (None, None) => {
                errors.add(&at("load_balance"), "give load_balance or compute_times");
                None
            }
            (Some(lb), None) => {
                factor(&mut errors, &at("load_balance"), lb);
                Some(lb)
            }
            (None, Some(times)) => {
                if i64::try_from(times.len()).ok() != Some(m.processes) {
                    errors.add(
                        &at("compute_times"),
                        format!(
                            "needs one time per process: {} (got {})",
                            m.processes,
                            times.len()
                        ),
                    );
                    None
                } else if let Some((i, t)) = times
                    .iter()
                    .enumerate()
                    .find(|(_, t)| !(t.is_finite() && **t >= 0.0))
                {
                    errors.add(
                        &format!("{}[{i}]", at("compute_times")),
                        format!("must be a finite time ≥ 0 (got {})", exact(*t)),
                    );
                    None
                } else {
                    let lb = factors::load_balance(times);
                    if lb.is_none_or(|v| v <= 0.0) {
                        errors.add(&at("compute_times"), "are all zero");
                    }
                    lb
                }
            }
        };
        if let (Some(load_balance), Ok(processes)) = (load_balance, i32::try_from(m.processes)) {
            out.push(NewMeasurement {
                region,
                processes,
                load_balance,
                serialization: m.serialization,
                transfer: m.transfer,
                compute_times: m.compute_times,
            });
        }
    }
    errors.into_result(out)
}

/// Store efficiency-factor measurements of an application.
///
/// Each measurement gives load balance, serialization and transfer at one
/// process count of one region; per-process compute times may stand in for
/// load balance, which is then computed. A measurement replaces any stored
/// at its region and process count, so retrying a request changes nothing.
/// The application is created if it does not exist. All or nothing: one bad
/// measurement and none is stored.
#[utoipa::path(post, path = "/v1/apps/{app}/efficiency", tag = "scalability",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$")),
    request_body = MeasurementsInput,
    security(("bearer" = ["ingest"])),
    responses(
        (status = 201, description = "Stored, some new", body = Stored),
        (status = 200, description = "Stored, all replacing earlier ones", body = Stored),
        (status = 400, description = "Malformed JSON or tag", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsIngest),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid measurements", body = Problem, content_type = "application/problem+json"),
        (status = 503, response = Unavailable),
    ))]
pub async fn post_efficiency(
    _: Authorized<auth::Ingest>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    _: NoQuery,
    Json(input): Json<MeasurementsInput>,
) -> ApiResult<(StatusCode, axum::Json<Stored>)> {
    let measurements = check(input).map_err(ApiError::Invalid)?;
    let (created, app_id) = efficiency::store(&state, &tag, &measurements).await?;
    let mut regions: Vec<&str> = measurements.iter().map(|m| m.region.as_str()).collect();
    regions.sort_unstable();
    regions.dedup();
    let stored = efficiency::list(&state, app_id, None)
        .await?
        .into_iter()
        .filter(|r| regions.binary_search(&r.region.as_str()).is_ok())
        .map(Measurement::from)
        .collect();
    let status = if created > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        axum::Json(Stored {
            app: tag.into(),
            created,
            replaced: measurements.len() - created,
            measurements: stored,
        }),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RegionParams {
    /// One region; all when absent.
    pub region: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MeasurementList {
    pub app: String,
    pub measurements: Vec<Measurement>,
}

fn check_region(region: Option<&str>) -> ApiResult<()> {
    if let Some(region) = region {
        validate::identifier(region, validate::TAG_MAX)
            .map_err(|reason| ApiError::bad_request("region", reason))?;
    }
    Ok(())
}

/// An application's efficiency measurements.
#[utoipa::path(get, path = "/v1/apps/{app}/efficiency", tag = "scalability",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           RegionParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The measurements, by region and process count", body = MeasurementList),
        (status = 400, description = "Bad tag or region", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_efficiency(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<RegionParams>,
) -> ApiResult<axum::Json<MeasurementList>> {
    check_region(params.region.as_deref())?;
    let app = apps::find(&state, &tag).await?;
    let rows = efficiency::list(&state, app.id, params.region.as_deref()).await?;
    Ok(axum::Json(MeasurementList {
        app: app.tag.clone(),
        measurements: rows.into_iter().map(Measurement::from).collect(),
    }))
}

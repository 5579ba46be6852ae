//! `GET /v1/apps/{app}/scalability`: the efficiency factors of each region
//! fitted and extrapolated to larger process counts.

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{HeavyBusy, NeedsRead, Unauthorized, Unavailable};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::AppPath;
use crate::http::extract::{Query, comma_separated, given_blank};
use crate::model::efficiency::{self as factors, FactorFit, Family};
use crate::service::apps;
use crate::service::efficiency::MeasurementRow;
use crate::validate::Errors;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScalabilityParams {
    /// Process counts to extrapolate to, comma-separated (default: 2× and
    /// 16× the largest measured, at most 10,000,000).
    pub targets: Option<String>,
    /// One region; all when absent.
    pub region: Option<String>,
}

/// An efficiency factor's family, as the API names it (`FamilyName`).
pub type FamilyName = Family;

/// A factor's chosen fit.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FactorModel {
    pub family: FamilyName,
    /// The factor at P = 1.
    pub a0: f64,
    /// The shape parameter (`null` for a constant).
    pub f: Option<f64>,
    /// Root-mean-square error of the fit.
    pub rmse: f64,
    /// Leave-one-out RMSE (with at least 3 process counts), by which the
    /// family was chosen.
    pub cv_rmse: Option<f64>,
    pub points: usize,
}

impl From<&FactorFit> for FactorModel {
    fn from(f: &FactorFit) -> Self {
        FactorModel {
            family: f.family,
            a0: f.a0,
            f: (f.family != Family::Constant).then_some(f.f),
            rmse: f.rmse,
            cv_rmse: f.cv_rmse,
            points: f.points,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FactorModels {
    pub load_balance: FactorModel,
    pub serialization: FactorModel,
    pub transfer: FactorModel,
}

/// The factors at one process count.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct FactorsAt {
    pub processes: u64,
    pub load_balance: f64,
    pub serialization: f64,
    pub transfer: f64,
    /// η = LB · Ser · Trf.
    pub efficiency: f64,
    /// The smallest factor: what limits efficiency there.
    #[schema(example = "transfer")]
    pub dominant: String,
    /// Outside the measured process counts (below the smallest or beyond
    /// the largest).
    pub extrapolated: bool,
}

/// Where the dominant factor changes.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DominantChange {
    /// The first process count at which `to` dominates.
    pub processes: u64,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RegionScalability {
    pub region: String,
    /// The measured process counts.
    pub measured: Vec<u32>,
    pub factors: FactorModels,
    pub targets: Vec<FactorsAt>,
    /// From the smallest measured process count to the largest target.
    pub dominant_changes: Vec<DominantChange>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Scalability {
    pub app: String,
    pub regions: Vec<RegionScalability>,
}

fn targets_of(text: Option<&str>) -> ApiResult<Option<Vec<u64>>> {
    if let Some(e) = given_blank("targets", text) {
        return Err(ApiError::BadRequest(vec![e]));
    }
    if comma_separated(text).next().is_none() {
        return Ok(None);
    }
    let mut errors = Errors::default();
    let mut out = Vec::new();
    for item in comma_separated(text) {
        match item.parse::<i64>() {
            Ok(p) if (1..=MAX_PROCESSES).contains(&p) => out.push(p as u64),
            _ => errors.add(
                "targets",
                format!("`{item}` is not a process count from 1 to {MAX_PROCESSES}"),
            ),
        }
    }
    if out.len() > MAX_TARGETS {
        errors.add(
            "targets",
            format!("at most {MAX_TARGETS} targets (got {})", out.len()),
        );
    }
    errors.into_result(Some(out)).map_err(ApiError::BadRequest)
}

/// 2× and 16× the largest measured process count, each at most the most
/// a question may name (`MAX_PROCESSES`), once each.
fn default_targets(largest: u64) -> Vec<u64> {
    let most = MAX_PROCESSES as u64;
    let mut targets = vec![(2 * largest).min(most), (16 * largest).min(most)];
    targets.dedup();
    targets
}

/// Extrapolate an application's efficiency factors to larger process counts.
///
/// For each region, each factor (load balance, serialization, transfer) is
/// fitted by the Amdahl-like, pipeline or constant law (least squares, values
/// kept in [0, 1], the family chosen by leave-one-out error) and extrapolated
/// on its own; parallel efficiency is their product. The answer gives the
/// factors and efficiency at each target, the dominant (smallest) factor
/// there, and the process counts where the dominant factor changes.
#[utoipa::path(get, path = "/v1/apps/{app}/scalability", tag = "scalability",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ScalabilityParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The extrapolation, per region", body = Scalability),
        (status = 400, description = "Bad targets or region", body = Problem, content_type = "application/problem+json"),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, description = "Unknown application, or no such region", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "No efficiency measurements yet", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = HeavyBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_scalability(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    AppPath(tag): AppPath,
    Query(params): Query<ScalabilityParams>,
) -> ApiResult<axum::Json<Scalability>> {
    check_region(params.region.as_deref())?;
    let targets = targets_of(params.targets.as_deref())?;
    let app = apps::find(&state, &tag).await?;
    let rows = crate::service::efficiency::list(&state, app.id, params.region.as_deref()).await?;
    if rows.is_empty() {
        return Err(match params.region {
            Some(region) => ApiError::NotFound(format!(
                "application `{tag}` has no measurements of region `{region}`"
            )),
            None => ApiError::invalid(
                "measurements",
                format!("application `{tag}` has no efficiency measurements yet"),
            ),
        });
    }
    let regions = state
        .offload(move || scalability(&rows, targets.as_deref()))
        .await?;
    Ok(axum::Json(Scalability {
        app: app.tag.clone(),
        regions,
    }))
}

/// Fit and extrapolate each region of `rows` (ordered by region).
fn scalability(rows: &[MeasurementRow], targets: Option<&[u64]>) -> Vec<RegionScalability> {
    rows.chunk_by(|a, b| a.region == b.region)
        .map(|rows| {
            let points = |value: fn(&MeasurementRow) -> f64| -> Vec<(f64, f64)> {
                rows.iter()
                    .map(|r| (f64::from(r.processes), value(r)))
                    .collect()
            };
            // Every row has all three factors in (0, 1], so each fit exists.
            let fits: [FactorFit; 3] = [
                points(|r| r.load_balance),
                points(|r| r.serialization),
                points(|r| r.transfer),
            ]
            .map(|p| factors::fit(&p).expect("measurements exist"));
            let present: Vec<Option<&FactorFit>> = fits.iter().map(Some).collect();
            let measured: Vec<u32> = rows
                .iter()
                .map(|r| u32::try_from(r.processes).unwrap_or(0))
                .collect();
            let (smallest, largest) = (
                u64::from(measured[0]),
                u64::from(*measured.last().unwrap_or(&1)),
            );
            let targets: Vec<u64> =
                targets.map_or_else(|| default_targets(largest), <[u64]>::to_vec);
            let at = |p: u64| {
                let values = factors::factors_at(&present, p as f64);
                let [lb, ser, trf] = [0, 1, 2].map(|k| values[k].unwrap_or(f64::NAN));
                FactorsAt {
                    processes: p,
                    load_balance: lb,
                    serialization: ser,
                    transfer: trf,
                    efficiency: factors::efficiency(&values).unwrap_or(f64::NAN),
                    dominant: NAMES[factors::dominant(&values).unwrap_or(0)].to_owned(),
                    extrapolated: p < smallest || p > largest,
                }
            };
            let scan_to = targets
                .iter()
                .copied()
                .max()
                .unwrap_or(largest)
                .max(largest);
            RegionScalability {
                region: rows[0].region.clone(),
                factors: FactorModels {
                    load_balance: (&fits[0]).into(),
                    serialization: (&fits[1]).into(),
                    transfer: (&fits[2]).into(),
                },
                targets: targets.iter().map(|&p| at(p)).collect(),
                dominant_changes: factors::change_points(&present, smallest, scan_to)
                    .into_iter()
                    .map(|c| DominantChange {
                        processes: c.processes,
                        from: NAMES[c.from].to_owned(),
                        to: NAMES[c.to].to_owned(),
                    })
                    .collect(),
                measured,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_targets_stay_within_what_a_question_may_name() {
        assert_eq!(default_targets(8), [16, 128]);
        // 16 × 1,000,000 would be refused if asked for by name.
        assert_eq!(default_targets(1_000_000), [2_000_000, 10_000_000]);
        assert_eq!(default_targets(10_000_000), [10_000_000]);
        // Every default is a target `targets=` accepts.
        let asked = default_targets(700_000)
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            targets_of(Some(&asked)).unwrap(),
            Some(default_targets(700_000))
        );
    }
}

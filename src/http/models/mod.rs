//! Empirical scaling models (docs/model.md §6.2–6.3): the stateless model
//! search (this file), the scaling model of an application's stored runs
//! (`stored.rs`), and rules across metrics on their leading terms
//! (`rules.rs`).

mod rules;
mod stored;

pub use rules::*;
pub use stored::*;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::auth::{self, Authorized};
use super::error::responses::{
    HeavyBusy, MalformedJson, NeedsRead, NotJson, TooLarge, Unauthorized,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, NoQuery, comma_separated, given_blank};
use crate::extrap::Series;
use crate::model::expectation;
use crate::model::pmnf::Shape;
use crate::model::search::{self, SearchError};
use crate::text::exact;
use crate::validate::{Errors, FieldError};

/// Most values (repetitions included) in a stateless search.
pub const MAX_VALUES: usize = 100_000;

pub use crate::service::scaling::*;

/// A measured point with its repetitions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PointInput {
    /// The parameter value (processes, nodes, problem size), from 1e-9 to
    /// 1e15.
    #[schema(minimum = 1e-9, maximum = 1e15)]
    pub p: f64,
    /// The repetitions measured there (at least one), each at most 1e100 in
    /// magnitude.
    #[schema(min_items = 1)]
    pub values: Vec<f64>,
}

/// A p value to predict at, in the range of a point's `p`
/// (`search::P_RANGE`): the schema of `SearchRequest.targets`' items.
pub struct TargetP;

impl utoipa::PartialSchema for TargetP {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        let (low, high) = search::P_RANGE;
        ObjectBuilder::new()
            .schema_type(Type::Number)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
            .minimum(Some(low))
            .maximum(Some(high))
            .into()
    }
}

impl ToSchema for TargetP {}

/// A stateless model search: the data as points or as an Extra-P text file,
/// and what to ask.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The measurements; give these or `extrap`.
    pub points: Option<Vec<PointInput>>,
    /// An Extra-P single-parameter text file (PARAMETER / POINTS / DATA,
    /// optional REGION and METRIC); each series gets its model.
    pub extrap: Option<String>,
    /// The p values to predict at (at most 1,000), each from 1e-9 to 1e15
    /// as a point's `p`.
    #[serde(default)]
    #[schema(value_type = Vec<TargetP>, max_items = 1000)]
    pub targets: Vec<f64>,
    /// Expected growth in big-O, e.g. `O(p log p)`.
    #[schema(example = "O(p log p)")]
    pub expectation: Option<String>,
    /// How much faster than expected is still an approximate match, in
    /// big-O (default `O(log p)`).
    pub deviation_limit: Option<String>,
    /// Exponent set, as fractions ("1/4", "3/2", "-1"); default docs/model.md
    /// §6.2's 19 from 0 to 3.
    pub exponents: Option<Vec<String>>,
    /// Powers of log2 p, each 0 to 2; default all three.
    pub log_powers: Option<Vec<i64>>,
    /// Whether the negatives of the exponents are hypotheses too; default
    /// `auto`: when the data fall with p.
    pub negative: Option<NegativeName>,
    /// 1 or 2 terms besides the constant (default 2; two terms need five
    /// distinct p values).
    pub max_terms: Option<i64>,
}

/// The models found.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SearchAnswer {
    /// One per series: one for `points`, one per region and metric of an
    /// Extra-P file.
    pub models: Vec<ScalingModel>,
}

/// The series of the request, checked, and the field they came in.
fn request_series(
    points: Option<Vec<PointInput>>,
    extrap: Option<String>,
    errors: &mut Errors,
) -> (&'static str, Vec<Series>) {
    let (field, series) = match (points, extrap) {
        (Some(_), Some(_)) => {
            errors.add("extrap", "give points or extrap, not both");
            return ("extrap", Vec::new());
        }
        (None, None) => {
            errors.add(
                "points",
                "give the measurements as points or as an Extra-P file in extrap",
            );
            return ("points", Vec::new());
        }
        (Some(points), None) => (
            "points",
            vec![Series {
                region: None,
                metric: None,
                points: points.into_iter().map(|p| (p.p, p.values)).collect(),
            }],
        ),
        (None, Some(text)) => match crate::extrap::parse(&text) {
            Ok(experiment) => ("extrap", experiment.series),
            Err(e) => {
                errors.add("extrap", e.to_string());
                return ("extrap", Vec::new());
            }
        },
    };
    let total: usize = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|(_, values)| values.len())
        .sum();
    if total > MAX_VALUES {
        errors.add(
            field,
            format!("at most {MAX_VALUES} values in all (got {total})"),
        );
        return (field, Vec::new());
    }
    // The Extra-P reader has checked its numbers; points are checked here.
    if field == "points" {
        for (k, (p, values)) in series.iter().flat_map(|s| &s.points).enumerate() {
            if !search::valid_p(*p) {
                let (low, high) = search::P_RANGE;
                errors.add(
                    &format!("points[{k}].p"),
                    format!("must be from {low:e} to {high:e} (got {})", exact(*p)),
                );
            }
            if values.is_empty() {
                errors.add(&format!("points[{k}].values"), "give at least one value");
            }
            for (r, v) in values.iter().enumerate() {
                if !search::valid_value(*v) {
                    errors.add(
                        &format!("points[{k}].values[{r}]"),
                        format!(
                            "must be finite and at most {:e} in magnitude (got {})",
                            search::VALUE_LIMIT,
                            exact(*v)
                        ),
                    );
                }
            }
        }
    }
    (field, series)
}

fn search_error(
    field: &str,
    series: (&Option<String>, &Option<String>),
    e: SearchError,
) -> FieldError {
    let label = match series {
        (None, None) => String::new(),
        (region, metric) => format!(
            "region {}, metric {}: ",
            region.as_deref().unwrap_or("-"),
            metric.as_deref().unwrap_or("-")
        ),
    };
    FieldError::new(field, format!("{label}{e}"))
}

/// Search empirical scaling models of data sent with the request.
///
/// The data are points with repeated values, or an Extra-P single-parameter
/// text file. Every hypothesis of the normal form c0 + Σ c·p^i·log2(p)^j with
/// one or two terms is fitted by least squares and scored by leave-one-out
/// SMAPE; the answer gives the model, its fit, the predictions at the
/// targets and, when an expectation is given, how the leading term compares.
#[utoipa::path(post, path = "/v1/models/search", tag = "scalability",
    request_body = SearchRequest,
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The models", body = SearchAnswer),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid data or options (too few distinct p, a bad expectation, ...)", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = HeavyBusy),
        (status = 503, description = "The request took too long; retry", body = Problem, content_type = "application/problem+json"),
    ))]
pub async fn search_models(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    _: NoQuery,
    Json(request): Json<SearchRequest>,
) -> ApiResult<axum::Json<SearchAnswer>> {
    let mut errors = Errors::default();
    let (field, series) = request_series(request.points, request.extrap, &mut errors);
    let ask = AskInput {
        targets: request.targets,
        expectation: request.expectation,
        deviation_limit: request.deviation_limit,
        exponents: request.exponents,
        log_powers: request.log_powers,
        negative: request.negative,
        max_terms: request.max_terms,
    }
    .check();
    let ask = match ask {
        Ok(ask) => ask,
        Err(more) => {
            let mut all = errors.into_vec();
            all.extend(more);
            return Err(ApiError::Invalid(all));
        }
    };
    errors.into_result(()).map_err(ApiError::Invalid)?;
    let models = state
        .offload(move || {
            series
                .into_iter()
                .map(|s| {
                    answer(&s.observations(), &ask, s.region.clone(), s.metric.clone())
                        .map_err(|e| search_error(field, (&s.region, &s.metric), e))
                        .and_then(ScalingModel::check_finite)
                })
                .collect::<Vec<Result<ScalingModel, FieldError>>>()
        })
        .await?;
    let mut answers = Vec::with_capacity(models.len());
    let mut problems = Vec::new();
    for model in models {
        match model {
            Ok(m) => answers.push(m),
            Err(e) => problems.push(e),
        }
    }
    if !problems.is_empty() {
        return Err(ApiError::Invalid(problems));
    }
    Ok(axum::Json(SearchAnswer { models: answers }))
}

/// Parse a comma-separated list of numbers from the query string.
fn number_list(field: &str, text: Option<&str>) -> Result<Vec<f64>, FieldError> {
    if let Some(e) = given_blank(field, text) {
        return Err(e);
    }
    comma_separated(text)
        .map(|item| {
            item.parse::<f64>()
                .map_err(|_| FieldError::new(field, format!("`{item}` is not a number")))
        })
        .collect()
}

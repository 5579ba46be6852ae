//! Empirical scaling models (docs/model.md §6.2–6.3): the stateless model search,
//! the scaling model of an application's stored runs, and rules across
//! metrics on their leading terms.

use std::collections::BTreeMap;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::AppState;
use super::apps::find_app;
use super::auth::{self, Authorized};
use super::error::responses::{
    BadParameter, HeavyBusy, MalformedJson, NeedsRead, NotJson, TooLarge, Unauthorized,
    Unavailable, UnknownApp,
};
use super::error::{ApiError, ApiResult, Problem};
use super::extract::{Json, Path, Query, comma_separated};
use super::predictions::MetricName;
use crate::extrap::Series;
use crate::model::expectation::{self, Outcome};
use crate::model::pmnf::{Exponent, Shape};
use crate::model::search::{self, Found, Negative, SearchError, Settings};
use crate::model::{Metric, pmnf};
use crate::store;
use crate::validate::{Errors, FieldError};

/// Most target p values per question.
pub const MAX_TARGETS: usize = 1000;
/// Most values (repetitions included) in a stateless search.
pub const MAX_VALUES: usize = 100_000;
/// Most exponents in a custom set.
pub const MAX_EXPONENTS: usize = 40;
/// Most rules per check.
pub const MAX_RULES: usize = 50;
/// Most operands on the right of a rule.
pub const MAX_OPERANDS: usize = 10;
/// The largest target p.
pub const MAX_P: f64 = 1e9;

/// One term c · p^i · log2(p)^j.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TermInfo {
    pub coefficient: f64,
    /// The exponent i, as a fraction: "1", "3/2", "-1".
    #[schema(example = "3/2")]
    pub exponent: String,
    /// The power j of log2(p).
    pub log_power: i32,
    /// The term without its coefficient: "p^(3/2) * log2(p)".
    #[schema(example = "p^(3/2)")]
    pub term: String,
}

/// A model in normal form and how well it fits.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelInfo {
    #[schema(example = "10 + 2.5 * p")]
    pub formula: String,
    pub constant: f64,
    /// Slowest-growing first; empty for a constant model.
    pub terms: Vec<TermInfo>,
    /// The fastest-growing term: the model in big-O.
    #[schema(example = "O(p)")]
    pub big_o: String,
    /// Residual sum of squares at the mean of each p.
    pub rss: f64,
    /// `null` when no degree of freedom is left or the data are flat.
    pub adjusted_r2: Option<f64>,
    /// Symmetric mean absolute percentage error of the fit, %.
    pub smape_pct: f64,
    /// The same for the leave-one-out predictions: the selection criterion.
    pub cv_smape_pct: Option<f64>,
    /// Whether terms with negative exponents were considered (for data that
    /// fall with p, or when asked).
    pub negative_exponents: bool,
    /// Number of hypotheses scored.
    pub hypotheses: usize,
}

/// The model's value at a target.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PredictionAt {
    pub p: f64,
    pub value: f64,
    /// Beyond the largest measured p.
    pub extrapolated: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeName {
    /// The model grows no faster than expected: δ(p) is O(1).
    Match,
    /// Faster, but within the deviation limit.
    Approximate,
    /// Faster than the deviation limit allows.
    NoMatch,
}

impl From<Outcome> for OutcomeName {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Match => OutcomeName::Match,
            Outcome::Approximate => OutcomeName::Approximate,
            Outcome::NoMatch => OutcomeName::NoMatch,
        }
    }
}

/// The model's leading term against the expectation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ExpectationInfo {
    #[schema(example = "O(p * log2(p))")]
    pub expected: String,
    #[schema(example = "O(p)")]
    pub leading_term: String,
    /// δ(p) = leading term / expectation.
    #[schema(example = "log2(p)^(-1)")]
    pub divergence: String,
    #[schema(example = "O(log2(p))")]
    pub deviation_limit: String,
    pub outcome: OutcomeName,
}

/// A scaling model with its predictions.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ScalingModel {
    /// The Extra-P series' region and metric (absent for plain points, and
    /// so for an application's model, whose `metric` is its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Distinct p values.
    pub points: usize,
    /// Values, repetitions included.
    pub observations: usize,
    pub p_min: f64,
    pub p_max: f64,
    pub model: ModelInfo,
    pub predictions: Vec<PredictionAt>,
    /// Present when an expectation was given.
    pub expectation: Option<ExpectationInfo>,
}

/// How a model is searched and what is asked of it, checked.
#[derive(Debug, Clone)]
pub struct Ask {
    pub settings: Settings,
    pub targets: Vec<f64>,
    pub expectation: Option<Shape>,
    pub deviation: Shape,
}

/// The options of a search as given (by JSON, query string or command line).
#[derive(Debug, Default, Clone)]
pub struct AskInput {
    pub targets: Vec<f64>,
    pub expectation: Option<String>,
    pub deviation_limit: Option<String>,
    pub exponents: Option<Vec<String>>,
    pub log_powers: Option<Vec<i64>>,
    pub negative: Option<NegativeName>,
    pub max_terms: Option<i64>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum NegativeName {
    /// When the data fall with p (the default).
    Auto,
    Always,
    Never,
}

impl From<NegativeName> for Negative {
    fn from(n: NegativeName) -> Self {
        match n {
            NegativeName::Auto => Negative::Auto,
            NegativeName::Always => Negative::Always,
            NegativeName::Never => Negative::Never,
        }
    }
}

impl AskInput {
    /// Check every option, naming the field of each problem.
    pub fn check(self) -> Result<Ask, Vec<FieldError>> {
        let mut errors = Errors::default();
        if self.targets.len() > MAX_TARGETS {
            errors.add(
                "targets",
                format!("at most {MAX_TARGETS} targets (got {})", self.targets.len()),
            );
        }
        for (k, &t) in self.targets.iter().enumerate() {
            if !(t.is_finite() && t > 0.0 && t <= MAX_P) {
                errors.add(
                    &format!("targets[{k}]"),
                    format!("must be positive and at most {MAX_P:e} (got {t})"),
                );
            }
        }
        let mut big_o = |field: &str, text: Option<&str>| {
            text.and_then(|t| {
                expectation::parse(t)
                    .map_err(|e| errors.add(field, e.to_string()))
                    .ok()
            })
        };
        let expected = big_o("expectation", self.expectation.as_deref());
        let deviation = big_o("deviation_limit", self.deviation_limit.as_deref());
        if let Some(limit) = deviation
            && limit <= Shape::ONE
        {
            errors.add(
                "deviation_limit",
                format!("must grow with p (got {})", expectation::big_o(limit)),
            );
        }
        let mut settings = Settings::default();
        if let Some(list) = self.exponents {
            if list.is_empty() || list.len() > MAX_EXPONENTS {
                errors.add(
                    "exponents",
                    format!("give 1 to {MAX_EXPONENTS} exponents (got {})", list.len()),
                );
            }
            let mut parsed = Vec::with_capacity(list.len());
            for (k, text) in list.iter().enumerate() {
                match Exponent::parse(text) {
                    Ok(e) => parsed.push(e),
                    Err(reason) => errors.add(&format!("exponents[{k}]"), reason),
                }
            }
            parsed.sort();
            parsed.dedup();
            settings.exponents = parsed;
        }
        if let Some(list) = self.log_powers {
            if list.is_empty() {
                errors.add("log_powers", "give at least one log power");
            }
            for (k, &j) in list.iter().enumerate() {
                if !(0..=i64::from(search::MAX_LOG_POWER)).contains(&j) {
                    errors.add(
                        &format!("log_powers[{k}]"),
                        format!("must be 0 to {} (got {j})", search::MAX_LOG_POWER),
                    );
                }
            }
            let mut powers: Vec<i32> = list.iter().filter_map(|&j| i32::try_from(j).ok()).collect();
            powers.sort_unstable();
            powers.dedup();
            settings.log_powers = powers;
        }
        if let Some(negative) = self.negative {
            settings.negative = negative.into();
        }
        if let Some(terms) = self.max_terms {
            match usize::try_from(terms) {
                Ok(t) if (1..=search::MAX_TERMS).contains(&t) => settings.max_terms = t,
                _ => errors.add(
                    "max_terms",
                    format!("must be 1 or {} (got {terms})", search::MAX_TERMS),
                ),
            }
        }
        errors.into_result(Ask {
            settings,
            targets: self.targets,
            expectation: expected,
            deviation: deviation.unwrap_or(expectation::DEFAULT_DEVIATION),
        })
    }
}

/// Search the model of one series and answer with it.
pub fn answer(
    observations: &[(f64, f64)],
    ask: &Ask,
    region: Option<String>,
    metric: Option<String>,
) -> Result<ScalingModel, SearchError> {
    let found = search::search(observations, &ask.settings)?;
    Ok(scaling_model(
        &found,
        observations.len(),
        ask,
        region,
        metric,
    ))
}

fn scaling_model(
    found: &Found,
    observations: usize,
    ask: &Ask,
    region: Option<String>,
    metric: Option<String>,
) -> ScalingModel {
    let model = &found.model;
    let p_max = found.p.last().copied().unwrap_or(0.0);
    let leading = model.leading();
    ScalingModel {
        region,
        metric,
        points: found.p.len(),
        observations,
        p_min: found.p.first().copied().unwrap_or(0.0),
        p_max,
        model: ModelInfo {
            formula: model.formula(),
            constant: model.constant,
            terms: model
                .terms
                .iter()
                .map(|t| TermInfo {
                    coefficient: t.coefficient,
                    exponent: t.shape.exponent.to_string(),
                    log_power: t.shape.log_power,
                    term: t.shape.to_string(),
                })
                .collect(),
            big_o: expectation::big_o(leading),
            rss: found.rss,
            adjusted_r2: found.adjusted_r2,
            smape_pct: found.smape_pct,
            cv_smape_pct: found.cv_smape_pct.is_finite().then_some(found.cv_smape_pct),
            negative_exponents: found.negative_exponents,
            hypotheses: found.hypotheses,
        },
        predictions: ask
            .targets
            .iter()
            .map(|&p| PredictionAt {
                p,
                value: model.at(p),
                extrapolated: p > p_max,
            })
            .collect(),
        expectation: ask.expectation.map(|expected| {
            let c = expectation::compare(leading, expected, ask.deviation);
            ExpectationInfo {
                expected: expectation::big_o(expected),
                leading_term: expectation::big_o(leading),
                divergence: c.divergence.to_string(),
                deviation_limit: expectation::big_o(ask.deviation),
                outcome: c.outcome.into(),
            }
        }),
    }
}

/// A measured point with its repetitions.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PointInput {
    /// The parameter value (processes, nodes, problem size), > 0.
    #[schema(exclusive_minimum = 0.0)]
    pub p: f64,
    /// The repetitions measured there (at least one).
    #[schema(min_items = 1)]
    pub values: Vec<f64>,
}

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
    /// The p values to predict at.
    #[serde(default)]
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
            if !(p.is_finite() && *p > 0.0) {
                errors.add(
                    &format!("points[{k}].p"),
                    format!("must be positive (got {p})"),
                );
            }
            if values.is_empty() {
                errors.add(&format!("points[{k}].values"), "give at least one value");
            }
            for (r, v) in values.iter().enumerate() {
                if !v.is_finite() {
                    errors.add(
                        &format!("points[{k}].values[{r}]"),
                        format!("must be finite (got {v})"),
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
    comma_separated(text)
        .map(|item| {
            item.parse::<f64>()
                .map_err(|_| FieldError::new(field, format!("`{item}` is not a number")))
        })
        .collect()
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ScalingModelParams {
    /// The metric (default tts).
    pub metric: Option<MetricName>,
    /// Node counts to predict at, comma-separated: `64,128,1024`.
    pub targets: Option<String>,
    /// Expected growth in big-O, e.g. `O(1/p)` for the TtS of strong scaling.
    pub expectation: Option<String>,
    /// Default `O(log p)`.
    pub deviation_limit: Option<String>,
    /// Whether negative exponents are hypotheses (default `auto`).
    pub negative: Option<NegativeName>,
}

/// The empirical scaling model of an application's metric over its runs.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AppScalingModel {
    pub app: String,
    pub metric: MetricName,
    #[schema(example = "s")]
    pub unit: String,
    /// Runs behind the model.
    pub runs: usize,
    /// p is the node count.
    #[serde(flatten)]
    pub scaling: ScalingModel,
}

/// The empirical scaling model of one metric of an application.
///
/// The model search of `POST /v1/models/search` over the stored runs, p being
/// the node count and every run a repetition at its node count.
#[utoipa::path(get, path = "/v1/apps/{app}/scaling-model", tag = "scalability",
    params(("app" = String, Path, description = "Application tag",
             min_length = 1, max_length = 128, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]*$"),
           ScalingModelParams),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "The model", body = AppScalingModel),
        (status = 400, response = BadParameter),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 404, response = UnknownApp),
        (status = 422, description = "Too few distinct node counts in the history", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = HeavyBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn get_scaling_model(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Path(tag): Path<String>,
    Query(params): Query<ScalingModelParams>,
) -> ApiResult<axum::Json<AppScalingModel>> {
    let targets = number_list("targets", params.targets.as_deref())
        .map_err(|e| ApiError::BadRequest(vec![e]))?;
    let ask = AskInput {
        targets,
        expectation: params.expectation,
        deviation_limit: params.deviation_limit,
        negative: params.negative,
        ..AskInput::default()
    }
    .check()
    .map_err(ApiError::BadRequest)?;
    let app = find_app(&state, &tag).await?;
    let metric: Metric = params.metric.unwrap_or(MetricName::Tts).into();
    let (runs, found) = stored_model(&state, app.id, metric, ask.settings.clone()).await?;
    let found =
        found.map_err(|e| ApiError::invalid("runs", format!("application `{tag}`: {e}")))?;
    Ok(axum::Json(AppScalingModel {
        app: app.tag.clone(),
        metric: metric.into(),
        unit: metric.unit().into(),
        runs,
        scaling: scaling_model(&found, runs, &ask, None, None),
    }))
}

/// The model of one metric over an application's stored runs, searched off
/// the async runtime: the number of runs and the search's result.
async fn stored_model(
    state: &AppState,
    app_id: i64,
    metric: Metric,
    settings: Settings,
) -> ApiResult<(usize, Result<Found, SearchError>)> {
    let runs = store::runs::quantities(&state.pool, app_id).await?;
    let observations: Vec<(f64, f64)> = crate::predict::observations(&runs, metric)
        .iter()
        .map(|o| (f64::from(o.nodes), o.value))
        .collect();
    let count = observations.len();
    let found = state
        .offload(move || search::search(&observations, &settings))
        .await?;
    Ok((count, found))
}

/// A metric of an application, as an operand of a rule.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields)]
pub struct Operand {
    #[schema(example = "allreduce")]
    pub app: String,
    pub metric: MetricName,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub enum Relation {
    /// Grows no faster than.
    #[serde(rename = "<=")]
    AtMost,
    /// Grows as fast as (same leading term).
    #[serde(rename = "=")]
    Same,
    /// Grows at least as fast as.
    #[serde(rename = ">=")]
    AtLeast,
}

/// `left relation sum(right)`, on leading terms: "Allreduce grows no faster
/// than Reduce + Bcast".
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name to find the rule by in the answer.
    pub name: Option<String>,
    pub left: Operand,
    pub relation: Relation,
    /// The operands summed on the right (1 to 10).
    pub right: Vec<Operand>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RulesRequest {
    /// 1 to 50 rules.
    pub rules: Vec<Rule>,
}

/// An operand's model, in big-O.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct OperandModel {
    pub app: String,
    pub metric: MetricName,
    #[schema(example = "O(log2(p))")]
    pub big_o: String,
    #[schema(example = "12.5 + 3.1 * log2(p)")]
    pub formula: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RuleResult {
    pub name: Option<String>,
    pub holds: bool,
    pub relation: Relation,
    pub left: OperandModel,
    pub right: Vec<OperandModel>,
    /// The leading term of the sum on the right.
    #[schema(example = "O(log2(p))")]
    pub right_big_o: String,
    /// The rule and its verdict in words.
    pub statement: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RulesAnswer {
    pub rules: Vec<RuleResult>,
    /// Whether every rule holds.
    pub all_hold: bool,
}

/// Check rules across metrics on the leading terms of stored scaling models.
///
/// Each operand is an application's metric; its model is the one
/// `GET /v1/apps/{app}/scaling-model` gives. A rule compares the leading term
/// of its left operand with that of the sum on its right (the fastest of the
/// right's leading terms).
#[utoipa::path(post, path = "/v1/scaling-rules", tag = "scalability",
    request_body = RulesRequest,
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "Each rule with its verdict", body = RulesAnswer),
        (status = 400, response = MalformedJson),
        (status = 401, response = Unauthorized),
        (status = 403, response = NeedsRead),
        (status = 413, response = TooLarge),
        (status = 415, response = NotJson),
        (status = 422, description = "Invalid rules, an unknown application, or one whose history has too few node counts", body = Problem, content_type = "application/problem+json"),
        (status = 429, response = HeavyBusy),
        (status = 503, response = Unavailable),
    ))]
pub async fn check_rules(
    _: Authorized<auth::Read>,
    State(state): State<AppState>,
    Json(request): Json<RulesRequest>,
) -> ApiResult<axum::Json<RulesAnswer>> {
    let mut errors = Errors::default();
    if request.rules.is_empty() || request.rules.len() > MAX_RULES {
        errors.add(
            "rules",
            format!("give 1 to {MAX_RULES} rules (got {})", request.rules.len()),
        );
    }
    // Each distinct operand once, with the first field that names it.
    let mut operands: BTreeMap<Operand, String> = BTreeMap::new();
    for (k, rule) in request.rules.iter().enumerate() {
        if let Some(name) = &rule.name {
            errors.check_text(&format!("rules[{k}].name"), name, 256);
        }
        if rule.right.is_empty() || rule.right.len() > MAX_OPERANDS {
            errors.add(
                &format!("rules[{k}].right"),
                format!(
                    "give 1 to {MAX_OPERANDS} operands (got {})",
                    rule.right.len()
                ),
            );
        }
        let named = std::iter::once((format!("rules[{k}].left"), &rule.left)).chain(
            rule.right
                .iter()
                .enumerate()
                .map(|(r, o)| (format!("rules[{k}].right[{r}]"), o)),
        );
        for (field, operand) in named {
            if let Err(reason) = crate::validate::identifier(&operand.app, crate::validate::TAG_MAX)
            {
                errors.add(&format!("{field}.app"), reason);
                continue;
            }
            operands.entry(operand.clone()).or_insert(field);
        }
    }
    errors.into_result(()).map_err(ApiError::Invalid)?;

    let mut models: BTreeMap<Operand, pmnf::Model> = BTreeMap::new();
    let mut problems = Vec::new();
    for (operand, field) in operands {
        let Some(app) = store::apps::get(&state.pool, &operand.app).await? else {
            problems.push(FieldError::new(
                format!("{field}.app"),
                format!("no application `{}`", operand.app),
            ));
            continue;
        };
        match stored_model(&state, app.id, operand.metric.into(), Settings::default()).await? {
            (_, Ok(found)) => {
                models.insert(operand, found.model);
            }
            (_, Err(e)) => problems.push(FieldError::new(
                format!("{field}.app"),
                format!("application `{}`: {e}", operand.app),
            )),
        }
    }
    if !problems.is_empty() {
        return Err(ApiError::Invalid(problems));
    }
    let describe = |o: &Operand| {
        let model = &models[o];
        OperandModel {
            app: o.app.clone(),
            metric: o.metric,
            big_o: expectation::big_o(model.leading()),
            formula: model.formula(),
        }
    };
    let rules: Vec<RuleResult> = request
        .rules
        .iter()
        .map(|rule| {
            let left = models[&rule.left].leading();
            let right_parts: Vec<Shape> = rule.right.iter().map(|o| models[o].leading()).collect();
            let right = expectation::leading_of_sum(&right_parts);
            let (holds, words) = match rule.relation {
                Relation::AtMost => (left <= right, "grows no faster than"),
                Relation::Same => (left == right, "grows as fast as"),
                Relation::AtLeast => (left >= right, "grows at least as fast as"),
            };
            let sum = rule
                .right
                .iter()
                .map(|o| format!("{} {}", o.app, Metric::from(o.metric).as_str()))
                .collect::<Vec<_>>()
                .join(" + ");
            RuleResult {
                name: rule.name.clone(),
                holds,
                relation: rule.relation,
                statement: format!(
                    "{} {} ({}) {words} {sum} ({}): {}",
                    rule.left.app,
                    Metric::from(rule.left.metric).as_str(),
                    expectation::big_o(left),
                    expectation::big_o(right),
                    if holds { "holds" } else { "violated" }
                ),
                left: describe(&rule.left),
                right: rule.right.iter().map(describe).collect(),
                right_big_o: expectation::big_o(right),
            }
        })
        .collect();
    Ok(axum::Json(RulesAnswer {
        all_hold: rules.iter().all(|r| r.holds),
        rules,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_field_by_field() {
        let errors = AskInput {
            targets: vec![64.0, -1.0],
            expectation: Some("O(q)".into()),
            deviation_limit: Some("O(1)".into()),
            exponents: Some(vec!["1".into(), "x".into()]),
            log_powers: Some(vec![0, 3]),
            max_terms: Some(3),
            negative: None,
        }
        .check()
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "targets[1]",
                "expectation",
                "deviation_limit",
                "exponents[1]",
                "log_powers[1]",
                "max_terms"
            ]
        );
    }

    #[test]
    fn an_answer_carries_predictions_and_the_expectation() {
        let observations: Vec<(f64, f64)> = [4.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&p| (p, 10.0 + 2.5 * p))
            .collect();
        let ask = AskInput {
            targets: vec![32.0, 128.0],
            expectation: Some("O(log p)".into()),
            ..AskInput::default()
        }
        .check()
        .unwrap();
        let answer = answer(&observations, &ask, None, None).unwrap();
        assert_eq!(answer.model.formula, "10 + 2.5 * p");
        assert_eq!(answer.model.big_o, "O(p)");
        assert!((answer.predictions[1].value - 330.0).abs() < 1e-6);
        assert!(!answer.predictions[0].extrapolated && answer.predictions[1].extrapolated);
        let expectation = answer.expectation.unwrap();
        assert_eq!(expectation.outcome, OutcomeName::NoMatch);
        assert_eq!(expectation.divergence, "p * log2(p)^(-1)");
    }
}

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
use crate::model::expectation;
use crate::model::pmnf::Shape;
use crate::model::search::{self, Found, SearchError, Settings};
use crate::model::{Metric, pmnf};
use crate::store;
use crate::validate::{Errors, FieldError};

/// Most values (repetitions included) in a stateless search.
pub const MAX_VALUES: usize = 100_000;
/// Most rules per check.
pub const MAX_RULES: usize = 50;
/// Most operands on the right of a rule.
pub const MAX_OPERANDS: usize = 10;

pub use crate::service::scaling::*;

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

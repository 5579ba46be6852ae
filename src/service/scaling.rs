//! Empirical scaling models (docs/model.md §6.2–6.3): the question asked of
//! a search (targets, expectation, exponent set) checked once, and the model
//! found for one series, as the API and `joulecast model` show it.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Result, Service};
use crate::model::Metric;
use crate::model::expectation::{self, Outcome};
use crate::model::pmnf::{Exponent, Shape};
use crate::model::search::{self, Found, Negative, SearchError, Settings};
use crate::store;
use crate::validate::{Errors, FieldError};

/// Most target p values per question.
pub const MAX_TARGETS: usize = 1000;
/// Most exponents in a custom set.
pub const MAX_EXPONENTS: usize = 40;

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
    /// Outside the measured p (below the smallest or beyond the largest).
    pub extrapolated: bool,
}

/// An expectation's outcome as the API names it (`OutcomeName`).
pub type OutcomeName = Outcome;

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

impl ScalingModel {
    /// Refuse a target where the model has no finite value (a negative
    /// exponent at a tiny p, say): JSON has no number for it.
    pub fn check_finite(self) -> std::result::Result<ScalingModel, FieldError> {
        match self.predictions.iter().position(|x| !x.value.is_finite()) {
            None => Ok(self),
            Some(k) => Err(FieldError::new(
                format!("targets[{k}]"),
                format!(
                    "the model {} has no finite value at {:e}",
                    self.model.formula, self.predictions[k].p
                ),
            )),
        }
    }
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

/// Negative exponents, as the API and the command line name the choice
/// (`NegativeName`).
pub type NegativeName = Negative;

impl AskInput {
    /// Check every option, naming the field of each problem.
    pub fn check(self) -> std::result::Result<Ask, Vec<FieldError>> {
        let mut errors = Errors::default();
        if self.targets.len() > MAX_TARGETS {
            errors.add(
                "targets",
                format!("at most {MAX_TARGETS} targets (got {})", self.targets.len()),
            );
        }
        // The range of a measured p: a model measured at p = 1e12 (a problem
        // size) can be asked about 2e12 (targets stopped at 1e9 before).
        let (low, high) = search::P_RANGE;
        for (k, &t) in self.targets.iter().enumerate() {
            if !search::valid_p(t) {
                errors.add(
                    &format!("targets[{k}]"),
                    format!(
                        "must be from {low:e} to {high:e}, as a measured p (got {})",
                        crate::text::exact(t)
                    ),
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
            settings.negative = negative;
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
) -> std::result::Result<ScalingModel, SearchError> {
    let found = search::search(observations, &ask.settings)?;
    Ok(scaling_model(
        &found,
        observations.len(),
        ask,
        region,
        metric,
    ))
}

pub fn scaling_model(
    found: &Found,
    observations: usize,
    ask: &Ask,
    region: Option<String>,
    metric: Option<String>,
) -> ScalingModel {
    let model = &found.model;
    let (p_min, p_max) = (
        found.p.first().copied().unwrap_or(0.0),
        found.p.last().copied().unwrap_or(0.0),
    );
    let leading = model.leading();
    ScalingModel {
        region,
        metric,
        points: found.p.len(),
        observations,
        p_min,
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
                extrapolated: p < p_min || p > p_max,
            })
            .collect(),
        expectation: ask.expectation.map(|expected| {
            let c = expectation::compare(leading, expected, ask.deviation);
            ExpectationInfo {
                expected: expectation::big_o(expected),
                leading_term: expectation::big_o(leading),
                divergence: c.divergence.to_string(),
                deviation_limit: expectation::big_o(ask.deviation),
                outcome: c.outcome,
            }
        }),
    }
}

/// The model of one metric over an application's stored runs, searched off
/// the async runtime: the number of runs and the search's result.
pub async fn stored_model(
    service: &Service,
    app_id: i64,
    metric: Metric,
    settings: Settings,
) -> Result<(usize, std::result::Result<Found, SearchError>)> {
    let runs = store::runs::quantities(&service.pool, app_id).await?;
    let observations: Vec<(f64, f64)> = crate::predict::observations(&runs, metric)
        .iter()
        .map(|o| (f64::from(o.nodes), o.value))
        .collect();
    let count = observations.len();
    let found = service
        .offload(move || search::search(&observations, &settings))
        .await?;
    Ok((count, found))
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

    /// Targets span the p a search accepts as measured, so that a model of a
    /// problem size measured up to 1e12 answers at 2e12 (refused before,
    /// above 1e9); beyond that range, or not positive, they are refused.
    #[test]
    fn targets_span_the_range_of_a_measured_p() {
        let (low, high) = search::P_RANGE;
        let ask = |targets: Vec<f64>| {
            AskInput {
                targets,
                ..AskInput::default()
            }
            .check()
        };
        assert!(ask(vec![low, 1.0, 2e12, high]).is_ok());
        let errors = ask(vec![0.0, low / 2.0, 2.0 * high, f64::NAN]).unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["targets[0]", "targets[1]", "targets[2]", "targets[3]"]
        );
        assert!(errors[2].reason.contains("1e15"), "{}", errors[2].reason);

        // A model of a problem size answered at 2e12: finite, extrapolated.
        let observations: Vec<(f64, f64)> = [1e9, 1e10, 1e11, 1e12, 5e11]
            .iter()
            .map(|&p| (p, 3.0 + 2e-9 * p))
            .collect();
        let answer = answer(&observations, &ask(vec![2e12]).unwrap(), None, None).unwrap();
        let at = &answer.predictions[0];
        assert!(at.extrapolated);
        assert!((at.value / (3.0 + 4e3) - 1.0).abs() < 1e-6, "{}", at.value);
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

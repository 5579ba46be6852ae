//! `POST /v1/scaling-rules`: rules across metrics on the leading terms of
//! stored scaling models.

use std::collections::BTreeMap;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::*;
use crate::http::AppState;
use crate::http::auth::{self, Authorized};
use crate::http::error::responses::{
    HeavyBusy, MalformedJson, NeedsRead, NotJson, TooLarge, Unauthorized, Unavailable,
};
use crate::http::error::{ApiError, ApiResult, Problem};
use crate::http::extract::{Json, NoQuery};
use crate::http::predictions::MetricName;
use crate::model::pmnf;
use crate::model::search::Settings;
use crate::service::scaling::stored_model;

/// Most rules per check.
pub const MAX_RULES: usize = 50;
/// Most operands on the right of a rule.
pub const MAX_OPERANDS: usize = 10;

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
    _: NoQuery,
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
        let Some(app) = crate::service::apps::get(&state, &operand.app).await? else {
            problems.push(FieldError::new(
                format!("{field}.app"),
                format!("no application `{}`", operand.app),
            ));
            continue;
        };
        match stored_model(&state, app.id, operand.metric, Settings::default()).await? {
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
                .map(|o| format!("{} {}", o.app, o.metric.as_str()))
                .collect::<Vec<_>>()
                .join(" + ");
            RuleResult {
                name: rule.name.clone(),
                holds,
                relation: rule.relation,
                statement: format!(
                    "{} {} ({}) {words} {sum} ({}): {}",
                    rule.left.app,
                    rule.left.metric.as_str(),
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

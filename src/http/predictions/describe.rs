//! How a fitted model is described in answers: its curve, history and
//! back-test, rendered once per fitted model.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::model::{self, Candidate, Flags, Model, Prediction, Regime, Shape};
use crate::predict::Fitted;

/// A value with its interval.
#[derive(Debug, Serialize, ToSchema)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
    pub kind: IntervalKind,
}

/// What an interval is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum IntervalKind {
    /// The min and max of the runs at this node count.
    #[serde(rename = "observed_range")]
    ObservedRange,
    /// The model's 95 % prediction interval.
    #[serde(rename = "95pct")]
    Prediction95,
}

/// Whether a segment is a straight line, as the API names it.
pub type SegmentKindName = model::SegmentKind;

/// How a model continues beyond the measured range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContinuationKind {
    Linear,
    PowerLaw,
}

/// One segment of a segmented model: value(x) = Σ coefficients[k]·(x − from)ᵏ,
/// where x is n and value is y (family `segmented`), or x is ln n and value
/// is ln y (family `log_segmented`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SegmentInfo {
    /// The segment's first node count.
    pub from_nodes: f64,
    /// Its last node count.
    pub to_nodes: f64,
    pub kind: SegmentKindName,
    pub degree: usize,
    pub coefficients: Vec<f64>,
}

/// One family's curve.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CurveInfo {
    /// segmented, log_segmented, physics, normal_form, line, power_law,
    /// loglog_interpolation, or scaled (a single measured node count scaled
    /// by the metric's ideal behaviour).
    pub family: String,
    /// The curve as a formula in n.
    pub formula: String,
    /// I, II, III, IV or V, for the segmented families.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
    /// The segmented families' segments.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub segments: Vec<SegmentInfo>,
    pub params: usize,
    /// %RMSE against the history (one point per node count).
    pub rmse_pct: f64,
    /// Whether `rmse_pct` is within the allowed %RMSE applied.
    pub within_allowed: bool,
}

/// The model of one metric: the families chosen by back-test for node
/// counts inside the measured range, above it and below it (docs/model.md
/// §2.1).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PredictorInfo {
    /// The family answering inside the measured range.
    pub family: String,
    /// The family answering above it.
    pub family_beyond: String,
    /// The family answering below it: `family` unless another extrapolates
    /// downwards clearly better in the backward test.
    pub family_below: String,
    pub inside: CurveInfo,
    pub beyond: CurveInfo,
    pub below: CurveInfo,
    /// The allowed %RMSE asked for.
    pub allowed_rmse_pct: f64,
    /// The allowed %RMSE applied: higher when repeated runs scatter more.
    pub effective_allowed_rmse_pct: f64,
    /// Families fitted and back-tested to choose from.
    pub candidates: usize,
    /// How the families continue past the range's ends, where they are
    /// segmented curves: below it `family_below`, above it `family_beyond`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extrapolation: Option<Extrapolation>,
}

/// How a segmented predictor continues below and above the measured range:
/// below, the family below the range (`family_below`), above it the family
/// beyond (`family_beyond`); each present when that family is a
/// segmentation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Extrapolation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below: Option<ContinuationInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub above: Option<ContinuationInfo>,
}

/// From the value at `from_nodes` with `slope`: `linear`, value + slope·(n −
/// from_nodes); or, where a line would head towards zero, `power_law`,
/// value·(n / from_nodes)^exponent, with the same value and slope there.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ContinuationInfo {
    pub kind: ContinuationKind,
    pub from_nodes: f64,
    pub value: f64,
    pub slope: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exponent: Option<f64>,
}

impl From<model::Continuation> for ContinuationInfo {
    fn from(c: model::Continuation) -> Self {
        ContinuationInfo {
            kind: if c.exponent.is_some() {
                ContinuationKind::PowerLaw
            } else {
                ContinuationKind::Linear
            },
            from_nodes: c.from_nodes,
            value: c.value,
            slope: c.slope,
            exponent: c.exponent,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistorySummary {
    pub runs: usize,
    pub node_counts: usize,
    pub nodes_min: u32,
    pub nodes_max: u32,
    /// Relative scatter of repeated runs, per cent, when repeated runs give
    /// it at least two degrees of freedom (two runs beyond the first at one
    /// node count, or at two counts together): one pair is no estimate.
    pub replicate_noise_pct: Option<f64>,
}

/// Absolute % errors of a back-test.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Errors {
    pub median_pct: f64,
    pub mean_pct: f64,
    pub max_pct: f64,
    pub points: usize,
}

/// The largest node counts from `held_out_from_nodes` up (`errors.points` of
/// them), each predicted by the family refitted to the counts at most 2/3 of
/// it (to all counts below it where that leaves fewer than three); the first
/// of those training sets ends at `trained_up_to`. Beyond 24 measured node
/// counts, the interior ones are pooled by ln n (docs/accuracy.md), and these
/// are the pooled counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HoldoutInfo {
    pub held_out_from_nodes: u32,
    pub trained_up_to: u32,
    pub errors: Errors,
}

/// One family's back-test.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CandidateInfo {
    pub family: String,
    pub formula: String,
    pub params: usize,
    pub rmse_pct: f64,
    pub within_allowed: bool,
    /// Each interior node count predicted by the family fitted without it.
    pub leave_one_out: Option<Errors>,
    /// The largest node counts, each predicted from the counts at most 2/3
    /// of it.
    pub forward: Option<HoldoutInfo>,
    /// How far the family's prediction at twice the largest count moves
    /// between the leave-one-out refits: their jackknife standard error, in
    /// % of it (for the interpolation, at least what the noise of its two
    /// largest counts' means gives); null without a leave-one-out test.
    pub spread_beyond_pct: Option<f64>,
    /// The smallest node counts (at most three), each predicted by the
    /// family refitted to the counts at least 1.5 times it (to all counts
    /// above it where that leaves fewer than three); null where the range
    /// starts at 1 node (nothing is asked below it) or the family could not
    /// be refitted there.
    pub backward: Option<Errors>,
    /// The weighted mean % error that ranks the families for a node count
    /// inside the measured range (0.8 × leave-one-out + 0.2 × forward mean
    /// errors), above it (0.25 × leave-one-out + 0.75 × forward + 0.5 ×
    /// `spread_beyond_pct`) and below it (0.25 × leave-one-out + 0.75 ×
    /// backward); null where the family could not be back-tested.
    pub score_inside_pct: Option<f64>,
    pub score_beyond_pct: Option<f64>,
    pub score_below_pct: Option<f64>,
    /// `inside`, `beyond` and/or `below` where this family answers; empty
    /// for a runner-up.
    pub chosen_for: Vec<String>,
}

/// A family that lost, by its scores.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RunnerUp {
    pub family: String,
    pub params: usize,
    pub score_inside_pct: Option<f64>,
    pub score_beyond_pct: Option<f64>,
    pub score_below_pct: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BacktestInfo {
    /// The inside family's leave-one-out test.
    pub leave_one_out: Option<Errors>,
    /// The beyond family's forward test.
    pub holdout: Option<HoldoutInfo>,
    /// The below family's backward test.
    pub backward: Option<Errors>,
    /// The other families fitted, best inside score first (their full
    /// back-tests are in `GET /v1/apps/{app}/model`'s `candidates`).
    pub runners_up: Vec<RunnerUp>,
}

/// Flags serialized by name, without collecting the names.
#[derive(Debug)]
pub struct FlagNames(pub Flags);

impl Serialize for FlagNames {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(model::Flag::as_str))
    }
}

pub(super) fn errors(e: &model::ErrorSummary) -> Errors {
    Errors {
        median_pct: pct(e.median_pct),
        mean_pct: pct(e.mean_pct),
        max_pct: pct(e.max_pct),
        points: e.points,
    }
}

pub(super) fn holdout_info(h: &model::Holdout) -> HoldoutInfo {
    HoldoutInfo {
        held_out_from_nodes: h.held_out.first().copied().unwrap_or_default(),
        trained_up_to: h.trained_up_to,
        errors: errors(&h.errors),
    }
}

pub(super) fn curve_info(c: &Candidate) -> CurveInfo {
    let (case, segments) = match c.curve.segmented() {
        Some((
            model::Predictor {
                shape: Shape::Segmented { case, segments },
            },
            in_logs,
        )) => {
            // Segments over ln n say where they are in node counts.
            let nodes = |x: f64| if in_logs { x.exp().round() } else { x };
            (
                Some(case.as_str().to_owned()),
                segments
                    .iter()
                    .map(|s| SegmentInfo {
                        from_nodes: nodes(s.lo),
                        to_nodes: nodes(s.hi),
                        kind: s.kind,
                        degree: s.degree,
                        coefficients: s.coeffs[..=s.degree].to_vec(),
                    })
                    .collect(),
            )
        }
        _ => (None, Vec::new()),
    };
    CurveInfo {
        family: c.family.as_str().into(),
        formula: c.curve.formula(),
        case,
        segments,
        params: c.params,
        rmse_pct: pct(c.rmse_pct),
        within_allowed: c.within_allowed,
    }
}

pub(crate) fn model_info(model: &Model) -> PredictorInfo {
    let [inside, beyond, below] = Regime::ALL.map(|r| model.selection.winner(r));
    // Each end of the range continues its own winner's curve.
    let continuations = |c: &model::Candidate| match &c.curve {
        model::Curve::Segmented(p) => p.continuations(),
        _ => None,
    };
    let (down, up) = (
        continuations(below).map(|[down, _]| down.into()),
        continuations(beyond).map(|[_, up]| up.into()),
    );
    let extrapolation = (down.is_some() || up.is_some()).then_some(Extrapolation {
        below: down,
        above: up,
    });
    PredictorInfo {
        family: inside.family.as_str().into(),
        family_beyond: beyond.family.as_str().into(),
        family_below: below.family.as_str().into(),
        inside: curve_info(inside),
        beyond: curve_info(beyond),
        below: curve_info(below),
        allowed_rmse_pct: model.options.allowed_rmse_pct,
        effective_allowed_rmse_pct: model.effective_allowed_pct,
        candidates: model.selection.candidates.len(),
        extrapolation,
    }
}

pub(super) fn history_summary(model: &Model) -> HistorySummary {
    let points = &model.history.points;
    HistorySummary {
        runs: model.history.runs,
        node_counts: points.len(),
        nodes_min: points.first().map_or(0, |p| p.nodes),
        nodes_max: points.last().map_or(0, |p| p.nodes),
        replicate_noise_pct: model.history.replicate_noise().map(|n| pct(100.0 * n)),
    }
}

/// The answering family's back-test score at `nodes`, for a model's answer.
pub(super) fn backtest_error(model: &Model, nodes: u32, p: &Prediction) -> Option<f64> {
    let regime = model.regime(nodes);
    p.family
        .and_then(|_| finite_pct(model.selection.winner(regime).score[regime as usize]))
}

pub(super) fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A percentage as answers give it: to 0.0001 percentage points. The
/// back-tests are not known more closely, and 17 digits each made up a
/// fifth of a prediction's answer.
pub(super) fn pct(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

pub(super) fn finite_pct(x: f64) -> Option<f64> {
    finite(x).map(pct)
}

pub(crate) fn backtest_info(model: &Model) -> BacktestInfo {
    let selection = &model.selection;
    let [inside, beyond, below] = Regime::ALL.map(|r| selection.winner(r));
    BacktestInfo {
        leave_one_out: inside.leave_one_out.as_ref().map(errors),
        holdout: beyond.forward.as_ref().map(holdout_info),
        backward: below.backward.as_ref().map(errors),
        runners_up: candidate_order(selection)
            .filter(|i| !selection.winners.contains(i))
            .map(|i| {
                let c = &selection.candidates[i];
                let [score_inside_pct, score_beyond_pct, score_below_pct] = c.score.map(finite_pct);
                RunnerUp {
                    family: c.family.as_str().into(),
                    params: c.params,
                    score_inside_pct,
                    score_beyond_pct,
                    score_below_pct,
                }
            })
            .collect(),
    }
}

/// Candidates' indices: the winners first (inside, beyond, below), then by
/// inside score.
pub(super) fn candidate_order(selection: &model::Selection) -> impl Iterator<Item = usize> {
    let [inside, beyond, below] = selection.winners;
    let mut order: Vec<usize> = (0..selection.candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let rank = |i: usize| (i != inside, i != beyond, i != below);
        rank(a)
            .cmp(&rank(b))
            .then(selection.candidates[a].score[0].total_cmp(&selection.candidates[b].score[0]))
    });
    order.into_iter()
}

/// Every candidate with its full back-test, for `/model`.
pub(super) fn candidates_info(model: &Model) -> Vec<CandidateInfo> {
    let selection = &model.selection;
    let [inside, beyond, below] = selection.winners;
    candidate_order(selection)
        .map(|i| {
            let c = &selection.candidates[i];
            let chosen_for = [(inside, "inside"), (beyond, "beyond"), (below, "below")]
                .into_iter()
                .filter(|(w, _)| *w == i)
                .map(|(_, name)| name.to_owned())
                .collect();
            let [score_inside_pct, score_beyond_pct, score_below_pct] = c.score.map(finite_pct);
            CandidateInfo {
                family: c.family.as_str().into(),
                formula: c.curve.formula(),
                params: c.params,
                rmse_pct: pct(c.rmse_pct),
                within_allowed: c.within_allowed,
                leave_one_out: c.leave_one_out.as_ref().map(errors),
                forward: c.forward.as_ref().map(holdout_info),
                spread_beyond_pct: c.spread_pct.and_then(finite_pct),
                backward: c.backward.as_ref().map(errors),
                score_inside_pct,
                score_beyond_pct,
                score_below_pct,
                chosen_for,
            }
        })
        .collect()
}

/// The model's description, history summary and back-test as JSON, rendered
/// once per fitted model.
pub(super) fn rendered(fitted: &Fitted) -> &[Box<RawValue>; 3] {
    fitted.rendered.get_or_init(|| {
        let model = &fitted.model;
        [
            raw(&model_info(model)),
            raw(&history_summary(model)),
            raw(&backtest_info(model)),
        ]
    })
}

pub(super) fn raw<T: Serialize>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value)
        .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("valid JSON"))
}

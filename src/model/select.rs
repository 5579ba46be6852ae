//! One predictor per metric, chosen by back-test (docs/model.md §2.1).
//!
//! Every family of families.rs is fitted to the history, and back-tested
//! twice, each time refitting the whole family (its own choice of
//! segmentation, terms or exponent included) on part of the history:
//! - leave one node count out: each interior node count predicted from the
//!   others (an interpolation);
//! - forward: each of the largest node counts predicted from the counts
//!   below it (an extrapolation one step beyond the range).
//!
//! - backward: each of the smallest node counts predicted from the counts
//!   above it (an extrapolation one step below the range).
//!
//! A query inside the measured range is answered by the family with the best
//! score weighted towards leave-one-out, one above it by the best weighted
//! towards the forward test, plus how far the family's prediction at twice
//! the largest count moves between the leave-one-out refits (its jackknife
//! standard error, `SPREAD_WEIGHT`; for the interpolation at least what
//! the noise of its two largest counts gives, `end_slope_error`): an
//! extrapolation that hangs on one count is a guess, however well it
//! happened to back-test. Scores within
//! noise of the best are tied: among those, a candidate within the allowed
//! %RMSE beats one outside it, then fewer parameters win (docs/model.md §2's
//! rule), then the better score. So a model far outside the allowed %RMSE
//! can only win by back-testing better.
//! Beyond the range, the tied candidates within the allowed %RMSE (if there
//! are any) are ranked instead by their prediction at twice the largest
//! measured count, and the upper median answers (`upper_median`;
//! docs/model.md §2.1).
//!
//! Below the range the winner inside is the incumbent: another family
//! answers there only when its score weighted towards the backward test is
//! clearly better (`below`).
//!
//! Inside the range, the interpolation through the measured means is the
//! incumbent: the rule's winner answers there only when it back-tests
//! clearly better (`INCUMBENT_MARGIN`), or when it fits the history within
//! the noise of the means (it then smooths that noise, which an
//! interpolation would pass on). Where repeated runs measure that noise,
//! the part of each score it explains is taken out before the two are
//! compared. Real strong-scaling curves bend where no
//! family of few parameters does; a family that merely ties the
//! interpolation in back-testing then misses the counts between the
//! measured ones by more than the interpolation does (docs/accuracy.md).

use super::families::{self, Curve, Family, FamilyFit};
use super::fit::{ErrorSummary, History, Holdout};
use super::segmented;
use super::{FitOptions, Metric};

/// At most this many interior node counts are left out in turn (evenly
/// spread), which bounds the cost of a selection for any history.
const MAX_LEAVE_ONE_OUT: usize = 6;
/// At most this many of the largest node counts are predicted forward (and
/// of the smallest, backward).
const MAX_FORWARD: usize = 3;
/// The forward and backward tests need at least this many node counts to
/// train on, except in a history of three (where they train on two).
const MIN_FORWARD_TRAINING: usize = 3;
/// The forward test predicts a node count from those at most 1/this of it
/// (the backward test from those at least this times it):
/// queries beyond the range ask at 1.5× to 2× the largest count, and a
/// curve's end slope over a short step says little about that far.
const FORWARD_RATIO: f64 = 1.5;
/// Weights of (leave-one-out, end test) mean errors in the score of a query
/// inside the measured range, of one above it (the end test: forward), and
/// of one below it (backward; the mirror of above, without the spread).
const WEIGHTS: [(f64, f64); 3] = [(0.8, 0.2), (0.25, 0.75), (0.25, 0.75)];
/// Weight of the jackknife spread of the prediction at twice the largest
/// count (`Candidate::spread_pct`) in the score beyond the range. Over the
/// second generator's eight seeds, EtS / TtS at 2× 3.47 / 3.54 → 3.34 /
/// 3.41 %; the suite's own APC at 2× 1.36 → 1.12 % (docs/accuracy.md);
/// 0.25 and 1 gave less.
const SPREAD_WEIGHT: f64 = 0.5;
/// Scores within this fraction of the best are tied, and so are those within
/// one standard error of the best score (the "one standard error" rule of
/// cross-validation: a difference its own cases cannot tell apart)…
const TIE_FRACTION: f64 = 0.1;
/// …or within this many percentage points: numerically the same.
const TIE_FLOOR_PCT: f64 = 1e-6;
/// …or within this many standard errors of a node count's mean (from the
/// scatter of repeated runs): a difference the noise alone makes.
const TIE_STANDARD_ERRORS: f64 = 0.5;
/// Inside the range, the interpolation answers unless the rule's winner
/// fits within the noise of the means, or the interpolation's score is
/// above the best by more than this fraction of the best (or by more than
/// the best's standard error, if that is larger), both taken less what the
/// noise of the held-out means explains (`winner`). On 1,077 held-out counts of real
/// ARCHER2 collective latencies a margin of 0.4 gives a median error of
/// 4.3 % against the plain rule's 4.8 % and log-log neighbours' 4.5 %.
/// Below the range the winner inside keeps the same margin over the best
/// score there, without the allowance for the means' noise (`below`).
const INCUMBENT_MARGIN: f64 = 0.4;
/// The mean absolute value of a normal deviate, in standard deviations
/// (√(2/π)): the mean % error that a held-out mean's own noise alone gives.
const MEAN_ABS_PER_SD: f64 = std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;

/// Where a query falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// Between the smallest and largest measured node counts.
    Inside = 0,
    /// Above the largest.
    Beyond = 1,
    /// Below the smallest.
    Below = 2,
}

impl Regime {
    pub const ALL: [Regime; 3] = [Regime::Inside, Regime::Beyond, Regime::Below];
}

/// One family's curve with its back-test.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub family: Family,
    pub curve: Curve,
    pub params: usize,
    /// %RMSE against the history.
    pub rmse_pct: f64,
    /// `rmse_pct` is within the allowed %RMSE applied.
    pub within_allowed: bool,
    /// Interior node counts, each predicted by the family fitted without it.
    pub leave_one_out: Option<ErrorSummary>,
    /// The jackknife standard error of the family's prediction at twice the
    /// largest count, in % of it (in the logs), from the same refits as
    /// `leave_one_out`: how much the extrapolation hangs on single counts;
    /// for the interpolation at least `end_slope_error`.
    pub spread_pct: Option<f64>,
    /// The largest node counts, each predicted by the family fitted to the
    /// counts below it.
    pub forward: Option<Holdout>,
    /// The smallest node counts, each predicted by the family fitted to the
    /// counts above it (`backward`).
    pub backward: Option<ErrorSummary>,
    /// Weighted mean % error per regime (`Regime`'s order); infinite where
    /// it could not be back-tested (the family did not fit part of the
    /// history).
    pub score: [f64; 3],
    /// The standard error of each score, from the spread of its cases.
    pub score_error: [f64; 3],
}

/// Every candidate, and the winner of each regime.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub candidates: Vec<Candidate>,
    /// Indices into `candidates`, by regime (`Regime`'s order).
    pub winners: [usize; 3],
}

impl Selection {
    pub fn winner(&self, regime: Regime) -> &Candidate {
        &self.candidates[self.winners[regime as usize]]
    }
}

/// The noise a selection allows for, from the whole history (before any
/// pooling, which would mistake the curve's change across a group for
/// scatter).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// The allowed %RMSE applied, to the whole history and to every refit.
    pub allowed_pct: f64,
    /// The standard error of a node count's mean, in % of it, from the
    /// scatter of repeated runs (0 when they are too few to measure the
    /// noise: `History::replicate_noise`).
    pub mean_error_pct: f64,
}

impl Noise {
    pub fn of(history: &History, allowed_pct: f64) -> Noise {
        let mean_error_pct = history.replicate_noise().map_or(0.0, |noise| {
            let runs_per_point = history.runs.max(1) as f64 / history.points.len().max(1) as f64;
            100.0 * noise / runs_per_point.max(1.0).sqrt()
        });
        Noise {
            allowed_pct,
            mean_error_pct,
        }
    }

    /// Scores closer than this to the best are tied (percentage points).
    fn tie_pct(&self) -> f64 {
        TIE_STANDARD_ERRORS * self.mean_error_pct
    }
}

/// Fit and back-test every family on `history` (at least one node count).
pub fn select(history: &History, options: &FitOptions, noise: Noise) -> Selection {
    let allowed = noise.allowed_pct;
    let m = history.points.len();
    // One node count, or nothing else fits: the value at the middle count,
    // scaled by the metric's ideal behaviour.
    let scaled = || {
        let p = &history.points[m / 2];
        let curve = Curve::Scaled {
            n0: f64::from(p.nodes),
            y0: p.mean,
            exponent: options.metric.ideal_exponent(options.mode),
        };
        let residuals = history
            .points
            .iter()
            .map(|q| q.mean - curve.value(f64::from(q.nodes)));
        let rmse_pct = segmented::pct(residuals, history);
        let fit = FamilyFit {
            curve,
            params: 1,
            rmse_pct,
        };
        Candidate::new(Family::Scaled, fit, allowed, Tests::default())
    };
    if m == 1 {
        return alone(scaled());
    }
    // Nothing to back-test with two node counts: power grows like a line in
    // n, time and energy like a power law (docs/model.md §4). Log-log
    // interpolation fits any two or more points: the last resort.
    let preferred: &[Family] = match (m, options.metric) {
        (2, Metric::Apc) => &[Family::Line, Family::PowerLaw],
        (2, _) => &[Family::PowerLaw, Family::Line],
        _ => &[],
    };
    if m == 2 {
        let untested = preferred
            .iter()
            .chain(&[Family::Interpolation])
            .find_map(|&family| {
                let fit = families::fit(family, history, options, allowed)?;
                Some(Candidate::new(family, fit, allowed, Tests::default()))
            });
        return alone(untested.unwrap_or_else(scaled));
    }
    // Twice the largest count, as far as queries go.
    let reference = (2.0 * f64::from(history.points[m - 1].nodes)).min(families::HORIZON.1);
    // Below a range that starts at 1 node nothing can be asked: no
    // backward test, so no score below it, and `below` names the winner
    // inside there.
    let below_asked = history.points[0].nodes > 1;
    let candidates: Vec<Candidate> = Family::FITTED
        .into_iter()
        .filter_map(|family| {
            let fit = families::fit(family, history, options, allowed)?;
            let tests = Tests {
                leave_one_out: leave_one_out(family, history, options, noise, reference),
                forward: forward(family, history, options, allowed),
                backward: below_asked
                    .then(|| backward(family, history, options, allowed))
                    .flatten(),
            };
            Some(Candidate::new(family, fit, allowed, tests))
        })
        .collect();
    if candidates.is_empty() {
        return alone(scaled());
    }
    let inside = winner(&candidates, Regime::Inside, noise, reference);
    let mut winners = [
        inside,
        winner(&candidates, Regime::Beyond, noise, reference),
        below(&candidates, inside),
    ];
    if options.metric == Metric::Ets {
        let beyond = &mut winners[Regime::Beyond as usize];
        *beyond = energy_floor(&candidates, history, *beyond, reference);
    }
    Selection {
        candidates,
        winners,
    }
}

/// A family's back-tests, as `Candidate::new` takes them.
#[derive(Default)]
struct Tests {
    leave_one_out: Option<LeaveOneOut>,
    forward: Option<Holdout>,
    backward: Option<ErrorSummary>,
}

impl Candidate {
    /// `family`'s fit with its back-tests and the scores they give.
    fn new(family: Family, fit: FamilyFit, allowed: f64, tests: Tests) -> Candidate {
        let Tests {
            leave_one_out,
            forward,
            backward,
        } = tests;
        let (leave_one_out, spread_pct) =
            leave_one_out.map_or((None, None), |l| (Some(l.errors), Some(l.spread_pct)));
        // Each test's mean % error and its standard error, in `Regime`'s
        // order: leave-one-out, forward, backward.
        let parts = [
            leave_one_out.as_ref(),
            forward.as_ref().map(|h| &h.errors),
            backward.as_ref(),
        ]
        .map(|e| {
            e.map_or((f64::INFINITY, 0.0), |e| {
                (e.mean_pct, e.standard_error_pct())
            })
        });
        // Each regime's score weighs leave-one-out with its end test:
        // inside and above the range the forward test, below it the
        // backward test.
        let end = [1, 1, 2];
        let mut score =
            [0, 1, 2].map(|r| WEIGHTS[r].0 * parts[0].0 + WEIGHTS[r].1 * parts[end[r]].0);
        score[Regime::Beyond as usize] += SPREAD_WEIGHT * spread_pct.unwrap_or(0.0);
        Candidate {
            family,
            within_allowed: fit.rmse_pct <= allowed + 1e-9,
            curve: fit.curve,
            params: fit.params,
            rmse_pct: fit.rmse_pct,
            leave_one_out,
            spread_pct,
            forward,
            backward,
            score,
            score_error: [0, 1, 2].map(|r| {
                let (a, b) = WEIGHTS[r];
                ((a * parts[0].1).powi(2) + (b * parts[end[r]].1).powi(2)).sqrt()
            }),
        }
    }
}

fn alone(candidate: Candidate) -> Selection {
    Selection {
        candidates: vec![candidate],
        winners: [0; 3],
    }
}

/// The candidate answering `regime`: beyond the range `upper_median`'s;
/// inside it the rule's winner (`by_rule`), except where the interpolation
/// stays the incumbent.
fn winner(candidates: &[Candidate], regime: Regime, noise: Noise, reference: f64) -> usize {
    if regime == Regime::Beyond {
        return upper_median(candidates, noise, reference);
    }
    let ruled = by_rule(candidates, regime, noise);
    if candidates[ruled].rmse_pct <= noise.mean_error_pct.max(TIE_FLOOR_PCT) {
        return ruled;
    }
    let r = regime as usize;
    let Some(best) = best(candidates, regime).map(|i| &candidates[i]) else {
        return ruled;
    };
    // The back-tests are scored against the held-out counts' means, whose
    // own noise every family's errors share: compare what is left of the
    // scores once that is taken out (in quadrature). Otherwise noisy means
    // bring every score close to the noise, and the interpolation, which
    // passes the noise of its neighbours on, stays within the margin of a
    // curve that smooths it.
    let floor = MEAN_ABS_PER_SD * noise.mean_error_pct;
    let beyond_noise = |score: f64| (score * score - floor * floor).max(0.0).sqrt();
    let best_score = beyond_noise(best.score[r]);
    let margin = (INCUMBENT_MARGIN * best_score)
        .max(best.score_error[r])
        .max(TIE_FLOOR_PCT);
    candidates
        .iter()
        .position(|c| {
            c.family == Family::Interpolation && beyond_noise(c.score[r]) <= best_score + margin
        })
        .unwrap_or(ruled)
}

/// The candidate answering below the range: the winner inside (`inside`),
/// unless the best score below the range (weighted towards the backward
/// test) is better than its own by more than `INCUMBENT_MARGIN` of the best
/// (or the best's standard error, if that is larger); then that best, or
/// among candidates numerically equal to it the §2 rule's choice
/// (`simplest`). Not the rule's choice among all those within noise of the
/// best: on the real smallest counts that gave 12.6 % against the best's
/// 12.0 %. A winner inside that could not be back-tested backward (it did
/// not fit the larger counts alone) gives way to the best that could: it
/// has no evidence below the range to hold its place with.
///
/// The backward test rests on at most three of the smallest counts, each
/// one noisy run where runs are not repeated: on its own it chose worse
/// than the winner inside on the real smallest counts (ARCHER2's 224,
/// mostly single runs of collectives: 13.5 against 12.1 %). Kept as the incumbent, the winner
/// inside gives way only where another family extrapolates downwards
/// clearly better (docs/accuracy.md, "Below the range").
fn below(candidates: &[Candidate], inside: usize) -> usize {
    let r = Regime::Below as usize;
    let Some(best) = best(candidates, Regime::Below) else {
        return inside;
    };
    let (score, error) = (candidates[best].score[r], candidates[best].score_error[r]);
    let margin = (INCUMBENT_MARGIN * score).max(error).max(TIE_FLOOR_PCT);
    if candidates[inside].score[r] <= score + margin {
        inside
    } else {
        simplest(candidates, Regime::Below, score, TIE_FLOOR_PCT)
    }
}

/// The index of the candidate with the best finite score of `regime`, if
/// any could be back-tested.
fn best(candidates: &[Candidate], regime: Regime) -> Option<usize> {
    let r = regime as usize;
    (0..candidates.len())
        .filter(|&i| candidates[i].score[r].is_finite())
        .min_by(|&a, &b| candidates[a].score[r].total_cmp(&candidates[b].score[r]))
}

/// The best score of `regime` and the tolerance within which others tie it
/// (an infinite score when nothing could be back-tested).
fn tie(candidates: &[Candidate], regime: Regime, noise: Noise) -> (f64, f64) {
    let r = regime as usize;
    best(candidates, regime).map_or((f64::INFINITY, 0.0), |i| {
        let best = &candidates[i];
        let tolerance = (TIE_FRACTION * best.score[r])
            .max(noise.tie_pct())
            .max(best.score_error[r])
            .max(TIE_FLOOR_PCT);
        (best.score[r], tolerance)
    })
}

/// Among the candidates with the best score of `regime` or within the tie
/// tolerance of it, the one within the allowed %RMSE, with the fewest
/// parameters, the best score, the simplest family (`Family`'s order), in
/// that order (when nothing could be back-tested, every candidate is tied).
fn by_rule(candidates: &[Candidate], regime: Regime, noise: Noise) -> usize {
    let (best, tolerance) = tie(candidates, regime, noise);
    simplest(candidates, regime, best, tolerance)
}

/// Among the candidates whose score of `regime` is within `tolerance` of
/// `best` (every candidate when `best` is not finite), the one within the
/// allowed %RMSE, with the fewest parameters, the best score, the simplest
/// family (`Family`'s order), in that order.
fn simplest(candidates: &[Candidate], regime: Regime, best: f64, tolerance: f64) -> usize {
    let r = regime as usize;
    let tied = |c: &Candidate| !best.is_finite() || c.score[r] <= best + tolerance;
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| tied(c))
        .min_by(|(_, a), (_, b)| {
            let score = if (a.score[r] - b.score[r]).abs() <= TIE_FLOOR_PCT {
                std::cmp::Ordering::Equal
            } else {
                a.score[r].total_cmp(&b.score[r])
            };
            b.within_allowed
                .cmp(&a.within_allowed)
                .then(a.params.cmp(&b.params))
                .then(score)
                .then(a.family.cmp(&b.family))
        })
        .map_or(0, |(i, _)| i)
}

/// Beyond the range: among the candidates tied with the best and within
/// the allowed %RMSE, the one whose prediction at `reference` is the upper
/// median of theirs; among equal predictions, the fewest parameters. When
/// no tied candidate is within the allowed %RMSE, the §2 rule decides
/// (`by_rule`), so a model far outside it never wins over a simpler one.
/// Tied back-tests cannot tell the candidates apart, and their
/// extrapolations part: the median sets aside one that wanders off, and
/// the upper of two errs on the side a budget or a cap can absorb. On
/// the second generator's histories (eight seeds, docs/accuracy.md) every
/// median beyond the range fell against the §2 rule's fewest parameters
/// (EtS at 1.5× / 2× 2.76 / 3.66 → 2.67 / 3.47 %).
fn upper_median(candidates: &[Candidate], noise: Noise, reference: f64) -> usize {
    let r = Regime::Beyond as usize;
    let (best, tolerance) = tie(candidates, Regime::Beyond, noise);
    let tied = |c: &Candidate| !best.is_finite() || c.score[r] <= best + tolerance;
    let mut set: Vec<(usize, f64)> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| tied(c) && c.within_allowed)
        .map(|(i, c)| (i, c.curve.value(reference)))
        .collect();
    if set.is_empty() {
        return by_rule(candidates, Regime::Beyond, noise);
    }
    set.sort_by(|a, b| a.1.total_cmp(&b.1));
    let median = set[set.len() / 2].1;
    set.iter()
        .filter(|(_, v)| (v - median).abs() <= 1e-9 * median.abs())
        .min_by(|a, b| {
            let (ca, cb) = (&candidates[a.0], &candidates[b.0]);
            ca.params.cmp(&cb.params).then(ca.family.cmp(&cb.family))
        })
        .map_or(set[set.len() / 2].0, |(i, _)| *i)
}

/// The candidate answering energy beyond the range: `winner`, unless the
/// history bends upwards in the logs and the least-squares line predicts
/// more at `reference`; then the line, whatever its back-tests. There the
/// line's extension is a floor, not a better fit. Energy is node-seconds
/// n·T(n) times a power per node held between idle and peak, and under
/// Amdahl's law with communication (model.md §4) node-seconds are convex
/// in n: s·n + (1 − s) is linear, communication in n·log n or n^(1+a)
/// convex. A convex curve lies above its least-squares line beyond the
/// line's last crossing, which is inside the range. The families that
/// back-test best on a few counts (a power law of exponent below 1 through
/// energy that is flat and then rises with communication) extrapolate
/// below it: too low, the error a budget cannot absorb. Not every code is
/// convex (time falling as a power n^-a, as surface-to-volume
/// communication gives, makes node-seconds n^(1-a), concave), so the floor
/// holds only where the history itself bends upwards in the logs
/// (`bends_upward`); a power law is straight there and keeps its family.
/// On the second generator's histories this took EtS at 1.5× / 2× from
/// behind the line or power law picked by leave-one-out to ahead of it
/// (docs/accuracy.md, "Energy beyond the range").
fn energy_floor(
    candidates: &[Candidate],
    history: &History,
    winner: usize,
    reference: f64,
) -> usize {
    let line = candidates.iter().position(|c| c.family == Family::Line);
    match line {
        Some(line)
            if candidates[line].curve.value(reference)
                > candidates[winner].curve.value(reference)
                && bends_upward(history) =>
        {
            line
        }
        _ => winner,
    }
}

/// The least curvature in the logs that counts as bending: a power law's,
/// zero, is found as a rounding error of about 1e-15.
const MIN_CURVATURE: f64 = 1e-6;

/// Whether the history's means bend upwards in the logs: the quadratic in
/// ln n fitted to their logarithms (least squares, each count alike)
/// curves up. `false` with fewer than three counts or a mean not above
/// zero.
fn bends_upward(history: &History) -> bool {
    let points = &history.points;
    if points.len() < 3 || points.iter().any(|p| p.mean <= 0.0 || !p.mean.is_finite()) {
        return false;
    }
    let rows: Vec<f64> = points
        .iter()
        .flat_map(|p| {
            let x = f64::from(p.nodes).ln();
            [1.0, x, x * x]
        })
        .collect();
    let y: Vec<f64> = points.iter().map(|p| p.mean.ln()).collect();
    let w = vec![1.0; points.len()];
    super::lsq::fit(&rows, 3, &y, &w).is_some_and(|fit| fit.beta[2] > MIN_CURVATURE)
}

/// % error of `family` fitted to `training`, at `point` of the history.
fn error_at(
    family: Family,
    training: &History,
    options: &FitOptions,
    allowed: f64,
    point: (u32, f64),
) -> Option<f64> {
    let fit = families::fit(family, training, options, allowed)?;
    error_of(&fit.curve, point)
}

/// % error of `curve` at `point` of the history.
fn error_of(curve: &Curve, (nodes, truth): (u32, f64)) -> Option<f64> {
    let error = 100.0 * ((curve.value(f64::from(nodes)) - truth) / truth).abs();
    error.is_finite().then_some(error)
}

/// A family's leave-one-out test.
struct LeaveOneOut {
    errors: ErrorSummary,
    /// `Candidate::spread_pct`.
    spread_pct: f64,
}

/// Each interior node count (at most `MAX_LEAVE_ONE_OUT`, evenly spread)
/// predicted from the others, and the spread of those refits' predictions
/// at `reference` (for the interpolation, at least what the noise of its
/// end counts gives, `end_slope_error`); `None` without interior counts, or
/// when the family fails on some reduced history.
fn leave_one_out(
    family: Family,
    history: &History,
    options: &FitOptions,
    noise: Noise,
    reference: f64,
) -> Option<LeaveOneOut> {
    let allowed = noise.allowed_pct;
    let m = history.points.len();
    if m < 3 {
        return None;
    }
    let interior = m - 2;
    let cases = interior.min(MAX_LEAVE_ONE_OUT);
    let errors = (0..cases)
        .map(|k| {
            let i = 1 + if cases == 1 {
                0
            } else {
                k * (interior - 1) / (cases - 1)
            };
            let p = &history.points[i];
            let fit = families::fit(family, &history.without(i), options, allowed)?;
            Some((
                error_of(&fit.curve, (p.nodes, p.mean))?,
                fit.curve.value(reference).ln(),
            ))
        })
        .collect::<Option<Vec<(f64, f64)>>>()?;
    let (errors, logs): (Vec<f64>, Vec<f64>) = errors.into_iter().unzip();
    // Curves are positive wherever a query can ask, and `reference` is such
    // a count; a family that broke that could not be trusted beyond.
    let mut spread = jackknife_error(&logs);
    // Leaving interior counts out hardly moves the interpolation's end
    // slope, which is what it extrapolates with: its spread is at least
    // what the noise of the two end counts gives. Only where the jackknife
    // measures every family's spread (two refits or more), lest the
    // interpolation alone carry one.
    if family == Family::Interpolation && logs.len() >= 2 {
        spread = spread.max(end_slope_error(history, noise, reference));
    }
    Some(LeaveOneOut {
        errors: ErrorSummary::new(errors)?,
        spread_pct: if spread.is_finite() {
            100.0 * spread
        } else {
            f64::INFINITY
        },
    })
}

/// The standard error, in the logs, of the power law through the two
/// largest counts a and b evaluated at `reference` (the interpolation's
/// extrapolation), when each count's mean carries the relative standard
/// error of `noise`: ln y(r) = (1 + t) ln y_b − t ln y_a with
/// t = ln(r / b) / ln(b / a), so s · √((1 + t)² + t²). 0 when repeated
/// runs are too few to measure the noise (it is then not known).
fn end_slope_error(history: &History, noise: Noise, reference: f64) -> f64 {
    let [a, b] = match history.points.as_slice() {
        [.., a, b] => [a, b].map(|p| f64::from(p.nodes)),
        _ => return 0.0,
    };
    let t = ((reference / b).ln() / (b / a).ln()).max(0.0);
    noise.mean_error_pct / 100.0 * ((1.0 + t).powi(2) + t * t).sqrt()
}

/// The jackknife standard error of an estimate from its leave-one-out
/// values: √((k − 1)/k · Σ (vᵢ − v̄)²); 0 for a single value.
fn jackknife_error(values: &[f64]) -> f64 {
    let k = values.len() as f64;
    if k < 2.0 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / k;
    let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    ((k - 1.0) / k * squares).sqrt()
}

/// How many end counts the forward and backward tests of a history of `m`
/// counts predict, and the fewest counts each trains on; `None` for fewer
/// than three.
fn end_test_sizes(m: usize) -> Option<(usize, usize)> {
    (m >= 3).then(|| {
        (
            m.saturating_sub(MIN_FORWARD_TRAINING).clamp(1, MAX_FORWARD),
            MIN_FORWARD_TRAINING.min(m - 1),
        )
    })
}

/// Each of the largest node counts (at most `MAX_FORWARD`) predicted from
/// the counts at most 1/`FORWARD_RATIO` of it, as far as an extrapolation
/// reaches; where that leaves too few to train on, from all counts below
/// it. `None` for fewer than three node counts.
fn forward(
    family: Family,
    history: &History,
    options: &FitOptions,
    allowed: f64,
) -> Option<Holdout> {
    let m = history.points.len();
    let (cases, min_training) = end_test_sizes(m)?;
    let first = m - cases;
    let training = |i: usize| {
        let reach = f64::from(history.points[i].nodes) / FORWARD_RATIO;
        let far = history
            .points
            .partition_point(|p| f64::from(p.nodes) <= reach);
        if far >= min_training { far } else { i }
    };
    let errors = (first..m)
        .map(|i| {
            let p = &history.points[i];
            error_at(
                family,
                &history.prefix(training(i)),
                options,
                allowed,
                (p.nodes, p.mean),
            )
        })
        .collect::<Option<Vec<f64>>>()?;
    Some(Holdout {
        held_out: history.points[first..].iter().map(|p| p.nodes).collect(),
        trained_up_to: history.points[training(first) - 1].nodes,
        errors: ErrorSummary::new(errors)?,
    })
}

/// The mirror of `forward`: each of the smallest node counts (at most
/// `MAX_FORWARD`) predicted from the counts at least `FORWARD_RATIO` times
/// it, as far as a query below the range reaches; where that leaves too
/// few to train on, from all counts above it. `None` for fewer than three
/// node counts, or where `family` cannot be fitted to a part.
fn backward(
    family: Family,
    history: &History,
    options: &FitOptions,
    allowed: f64,
) -> Option<ErrorSummary> {
    let m = history.points.len();
    let (cases, min_training) = end_test_sizes(m)?;
    let errors = (0..cases)
        .map(|i| {
            let p = &history.points[i];
            let reach = f64::from(p.nodes) * FORWARD_RATIO;
            let far = history
                .points
                .partition_point(|q| f64::from(q.nodes) < reach);
            let from = if m - far >= min_training { far } else { i + 1 };
            error_at(
                family,
                &history.suffix(from),
                options,
                allowed,
                (p.nodes, p.mean),
            )
        })
        .collect::<Option<Vec<f64>>>()?;
    ErrorSummary::new(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Observation, fit};
    use crate::model::{options_for as options, sampled};

    const POWERS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

    /// The candidate of `family` in `selection`.
    fn candidate(selection: &Selection, family: Family) -> &Candidate {
        selection
            .candidates
            .iter()
            .find(|c| c.family == family)
            .unwrap_or_else(|| panic!("{family:?} was not fitted"))
    }

    #[test]
    fn exact_power_law_data_are_recovered_by_a_log_log_family() {
        let truth = |n: f64| 3600.0 * n.powf(-0.83);
        let h = sampled(truth, &POWERS);
        let selection = select(&h, &options(Metric::Tts), Noise::of(&h, 2.0));
        for regime in [Regime::Inside, Regime::Beyond] {
            let winner = selection.winner(regime);
            assert_eq!(winner.family, Family::PowerLaw, "{regime:?}");
            for n in [3.0, 48.0, 512.0, 4096.0] {
                let v = winner.curve.value(n);
                assert!((v / truth(n) - 1.0).abs() < 1e-9, "{n}: {v}");
            }
        }
    }

    #[test]
    fn exact_amdahl_plus_log_data_are_recovered_by_the_physics_family() {
        let truth = |n: f64| 50.0 + 1000.0 / n + 8.0 * n.log2();
        let h = sampled(truth, &POWERS);
        let selection = select(&h, &options(Metric::Tts), Noise::of(&h, 2.0));
        for regime in [Regime::Inside, Regime::Beyond] {
            let winner = selection.winner(regime);
            assert_eq!(winner.family, Family::Physics, "{regime:?}");
            let Curve::Physics(terms) = &winner.curve else {
                unreachable!()
            };
            assert_eq!(terms.len(), 3, "{terms:?}");
            for n in [3.0, 48.0, 512.0, 4096.0] {
                let v = winner.curve.value(n);
                assert!((v / truth(n) - 1.0).abs() < 1e-9, "{n}: {v}");
            }
        }
    }

    #[test]
    fn a_badly_fitting_model_never_wins_over_a_better_backtest() {
        // Strong-scaling time: a line is far outside the allowed %RMSE and
        // back-tests far worse; it must not win, whatever its parameters.
        // (With a serial part of 20 s rather than 1000 s the least-squares
        // line turns negative inside the range and is not offered at all.)
        let steep = sampled(|n| 20.0 + 5000.0 / n, &POWERS);
        let selection = select(&steep, &options(Metric::Tts), Noise::of(&steep, 2.0));
        assert!(
            selection
                .candidates
                .iter()
                .all(|c| c.family != Family::Line)
        );
        let truth = |n: f64| 1000.0 + 5000.0 / n;
        let h = sampled(truth, &POWERS);
        let selection = select(&h, &options(Metric::Tts), Noise::of(&h, 2.0));
        let line = candidate(&selection, Family::Line);
        assert!(!line.within_allowed);
        for regime in [Regime::Inside, Regime::Beyond] {
            let winner = selection.winner(regime);
            assert_ne!(winner.family, Family::Line);
            assert!(winner.score[regime as usize] < line.score[regime as usize] / 10.0);
        }
    }

    #[test]
    fn the_jackknife_error_is_that_of_the_mean_for_a_mean() {
        // Leave-one-out means of x are (Σx − xᵢ)/(k − 1); their jackknife
        // error is the standard error of the mean, s/√k.
        let x = [3.0, 7.0, 4.0, 10.0, 6.0];
        let k = x.len() as f64;
        let sum: f64 = x.iter().sum();
        let means: Vec<f64> = x.iter().map(|xi| (sum - xi) / (k - 1.0)).collect();
        let mean = sum / k;
        let s2 = x.iter().map(|xi| (xi - mean).powi(2)).sum::<f64>() / (k - 1.0);
        assert!((jackknife_error(&means) - (s2 / k).sqrt()).abs() < 1e-12);
        assert_eq!(jackknife_error(&[5.0]), 0.0);
    }

    #[test]
    fn backward_predicts_the_smallest_counts_from_those_half_again_larger() {
        // An exact power law: every refit of the power law is exact.
        let h = sampled(|n| 3600.0 * n.powf(-0.83), &POWERS);
        let options = options(Metric::Tts);
        let exact = backward(Family::PowerLaw, &h, &options, 2.0).unwrap();
        assert_eq!(exact.points, MAX_FORWARD);
        assert!(exact.max_pct < 1e-9, "{exact:?}");
        // One node twice as slow as the law says: predicting it from 2
        // nodes up (1.5 × 1 = 1.5) misses by half; the others are exact.
        let mut h = h;
        h.points[0].mean *= 2.0;
        let off = backward(Family::PowerLaw, &h, &options, 2.0).unwrap();
        assert!((off.max_pct - 50.0).abs() < 1e-6, "{off:?}");
        assert!(off.median_pct < 1e-6, "{off:?}");
        // Three counts: one case, trained on the two above it.
        let three = sampled(|n| 10.0 * n, &[4, 5, 6]);
        let line = backward(Family::Line, &three, &options, 2.0).unwrap();
        assert_eq!(line.points, 1);
        assert!(line.max_pct < 1e-9, "{line:?}");
        assert!(backward(Family::Line, &three.prefix(2), &options, 2.0).is_none());
    }

    #[test]
    fn beyond_the_range_an_extrapolation_that_hangs_on_one_count_scores_its_spread() {
        // A power law: every refit of the power law predicts the same at
        // twice the largest count, so it adds nothing to its score.
        let h = sampled(|n| 3600.0 * n.powf(-0.83), &POWERS);
        let selection = select(&h, &options(Metric::Tts), Noise::of(&h, 2.0));
        let power = candidate(&selection, Family::PowerLaw);
        assert!(power.spread_pct.unwrap() < 1e-9);
        // A line with one count off it: the interpolation's end slope, and
        // so its extrapolation, moves when the count before the last is
        // left out; the line's barely does.
        let mut h = sampled(|n| 100.0 + 3.0 * n, &[4, 8, 12, 16, 20, 24, 28, 32]);
        h.points[6].mean *= 1.05;
        let selection = select(&h, &options(Metric::Apc), Noise::of(&h, 2.0));
        let (line, interpolation) = (
            candidate(&selection, Family::Line),
            candidate(&selection, Family::Interpolation),
        );
        assert!(interpolation.spread_pct.unwrap() > 2.0 * line.spread_pct.unwrap());
        for c in [line, interpolation] {
            let loo = c.leave_one_out.as_ref().unwrap().mean_pct;
            let forward = c.forward.as_ref().unwrap().errors.mean_pct;
            let beyond = 0.25 * loo + 0.75 * forward + 0.5 * c.spread_pct.unwrap();
            assert!((c.score[Regime::Beyond as usize] - beyond).abs() < 1e-9);
            assert!((c.score[Regime::Inside as usize] - (0.8 * loo + 0.2 * forward)).abs() < 1e-9);
        }
    }

    #[test]
    fn backtests_leave_out_interior_counts_and_predict_the_largest_forward() {
        let h = sampled(|n| 100.0 + 3.0 * n, &[4, 8, 12, 16, 20, 24, 28, 32, 36, 40]);
        let selection = select(&h, &options(Metric::Apc), Noise::of(&h, 2.0));
        let line = candidate(&selection, Family::Line);
        let loo = line.leave_one_out.as_ref().unwrap();
        // Six interior counts at most.
        assert_eq!(loo.points, 6);
        assert!(loo.max_pct < 1e-9);
        let forward = line.forward.as_ref().unwrap();
        assert_eq!(forward.held_out, [32, 36, 40]);
        // 32 is predicted from the counts up to 32 / 1.5, the others from
        // more.
        assert_eq!(forward.trained_up_to, 20);
        assert!(forward.errors.max_pct < 1e-9);
        // On exact data every back-test is ~0: the tie goes to the fewest
        // parameters within the allowed %RMSE (a line, as the line or as
        // physics' a + b·n).
        let winner = selection.winner(Regime::Inside);
        assert_eq!(winner.params, 2, "{:?}", winner.family);
        assert!((winner.curve.value(50.0) - 250.0).abs() < 1e-9);
    }

    /// A candidate of `family` predicting `y0` at 100 nodes (flat), with
    /// `score` beyond the range.
    fn flat(family: Family, y0: f64, params: usize, score: f64, within: bool) -> Candidate {
        Candidate {
            family,
            curve: Curve::Scaled {
                n0: 100.0,
                y0,
                exponent: 0.0,
            },
            params,
            rmse_pct: if within { 1.0 } else { 10.0 },
            within_allowed: within,
            leave_one_out: None,
            spread_pct: None,
            forward: None,
            backward: None,
            score: [score; 3],
            score_error: [0.0; 3],
        }
    }

    #[test]
    fn below_the_range_a_family_that_extrapolates_downwards_better_answers() {
        // A power law, 1000 n^-0.8 seconds, measured on 2 to 64 nodes, every
        // other count 3 % off it. The interpolation answers inside; below
        // the range it carries on the slope of 2 to 3 nodes (3 % slow)
        // and misses 1 node by 5 %, where the power law, far better in the
        // backward test, misses by less than 1 % (the log-log segmentation
        // is the same curve here, and scores the same, with more
        // parameters).
        let law = |n: f64| 1000.0 * n.powf(-0.8);
        let counts = [2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];
        let off = [0.0, 0.03, 0.0, -0.03];
        let data: Vec<Observation> = counts
            .iter()
            .zip(off.iter().cycle())
            .map(|(&nodes, e)| Observation {
                nodes,
                value: law(f64::from(nodes)) * (1.0 + e),
                weight: 1.0,
            })
            .collect();
        let model = fit(&data, options(Metric::Tts)).unwrap();
        let selection = &model.selection;
        let (inside, below) = (
            selection.winner(Regime::Inside),
            selection.winner(Regime::Below),
        );
        assert_eq!(inside.family, Family::Interpolation);
        assert_eq!(below.family, Family::PowerLaw);
        let r = Regime::Below as usize;
        assert!(
            2.0 * below.score[r] < inside.score[r],
            "{} against {}",
            below.score[r],
            inside.score[r]
        );
        let error = |c: &Candidate| (c.curve.value(1.0) / law(1.0) - 1.0).abs();
        assert!(error(inside) > 0.04, "{}", error(inside));
        assert!(error(below) < 0.01, "{}", error(below));
        // The model answers below the range (1 node; 2 is the range's
        // first count) with it, inside with the interpolation.
        assert_eq!(model.regime(1), Regime::Below);
        assert_eq!(model.regime(2), Regime::Inside);
        assert_eq!(model.regime(64), Regime::Inside);
        assert_eq!(model.regime(65), Regime::Beyond);
        assert_eq!(model.predict_model(1).family, Some(Family::PowerLaw));
        assert_eq!(model.predict_model(5).family, Some(Family::Interpolation));
        // Its interval is as wide as the incumbent's would be: σ below the
        // range is the larger of the two families' backward RMS errors.
        let rms = |c: &Candidate| c.backward.as_ref().unwrap().rms_pct / 100.0;
        assert!(rms(inside) > rms(below), "{} {}", rms(inside), rms(below));
        assert!(
            (model.sigma[r] - rms(inside)).abs() < 1e-12,
            "σ {} against {}",
            model.sigma[r],
            rms(inside)
        );
    }

    #[test]
    fn below_the_range_the_winner_inside_gives_way_only_to_a_clearly_better_backtest() {
        let below = Regime::Below as usize;
        let with = |family, score: f64, error: f64| {
            let mut c = flat(family, 1.0, 3, 1.0, true);
            c.score[below] = score;
            c.score_error[below] = error;
            c
        };
        // The winner inside (index 0) scores 10 below the range.
        let inside = || with(Family::Interpolation, 10.0, 0.0);
        // 7.5 is not clearly better: 10 is within 0.4 × 7.5 of it.
        let candidates = [inside(), with(Family::PowerLaw, 7.5, 0.0)];
        assert_eq!(super::below(&candidates, 0), 0);
        // 7 is: 10 > 7 + 2.8.
        let candidates = [inside(), with(Family::PowerLaw, 7.0, 0.0)];
        assert_eq!(super::below(&candidates, 0), 1);
        // Unless its own standard error covers the difference.
        let candidates = [inside(), with(Family::PowerLaw, 7.0, 3.5)];
        assert_eq!(super::below(&candidates, 0), 0);
        // The best answers, not the first clearly better.
        let candidates = [
            inside(),
            with(Family::PowerLaw, 6.0, 0.0),
            with(Family::Physics, 5.0, 0.0),
        ];
        assert_eq!(super::below(&candidates, 0), 2);
        // Not the fewest parameters within a tenth of the best (as the §2
        // rule would choose)…
        let mut fewer = with(Family::PowerLaw, 5.4, 0.0);
        fewer.params = 2;
        let candidates = [inside(), fewer.clone(), with(Family::Physics, 5.0, 0.0)];
        assert_eq!(super::below(&candidates, 0), 2);
        // …only among scores numerically the same (exact data).
        fewer.score[below] = 5.0 + 1e-9;
        let candidates = [inside(), with(Family::Physics, 5.0, 0.0), fewer];
        assert_eq!(super::below(&candidates, 0), 2);
        // Nothing back-tested backward: the winner inside answers.
        let candidates = [
            with(Family::Interpolation, f64::INFINITY, 0.0),
            with(Family::PowerLaw, f64::INFINITY, 0.0),
        ];
        assert_eq!(super::below(&candidates, 0), 0);
    }

    #[test]
    fn beyond_the_range_the_upper_median_of_the_tied_answers() {
        let noise = Noise {
            allowed_pct: 2.0,
            mean_error_pct: 0.0,
        };
        // Four tied within 10 % of the best score (3.0), one not (5.0).
        let candidates = [
            flat(Family::Line, 100.0, 2, 3.1, true),
            flat(Family::PowerLaw, 130.0, 2, 3.0, true),
            flat(Family::Physics, 110.0, 3, 3.2, true),
            flat(Family::Segmented, 90.0, 4, 3.25, true),
            flat(Family::NormalForm, 120.0, 2, 5.0, true),
        ];
        // Tied predictions 90, 100, 110, 130: the upper median is 110.
        assert_eq!(upper_median(&candidates, noise, 200.0), 2);
        // A tied candidate outside the allowed %RMSE does not count: 90,
        // 100, 130 leave 100.
        let mut outside = candidates.clone();
        outside[2].within_allowed = false;
        assert_eq!(upper_median(&outside, noise, 200.0), 0);
        // None within it: the §2 rule, the fewest parameters (the line and
        // the power law), then the better score.
        for c in &mut outside {
            c.within_allowed = false;
        }
        assert_eq!(upper_median(&outside, noise, 200.0), 1);
        // Equal predictions: the fewest parameters.
        let equal = [
            flat(Family::Physics, 100.0, 3, 3.0, true),
            flat(Family::PowerLaw, 100.0, 2, 3.1, true),
        ];
        assert_eq!(upper_median(&equal, noise, 200.0), 1);
    }

    #[test]
    fn the_noise_of_the_held_out_means_does_not_keep_the_interpolation() {
        // A power law back-testing at 3.0 % inside the range, the
        // interpolation at 4.0 %: within the incumbent's margin (4.2 %)
        // when nothing is known of the noise, so the interpolation answers.
        let mut candidates = [
            flat(Family::PowerLaw, 100.0, 2, 3.0, true),
            flat(Family::Interpolation, 100.0, 9, 4.0, true),
        ];
        // Neither fits within the noise of the means (3.5 %).
        candidates[0].rmse_pct = 5.0;
        let quiet = Noise {
            allowed_pct: 10.0,
            mean_error_pct: 0.0,
        };
        assert_eq!(winner(&candidates, Regime::Inside, quiet, 200.0), 1);
        // Means known to 3.5 %: their noise alone gives a mean error of
        // 2.79 %; left over, the power law's 1.10 % against the
        // interpolation's 2.86 %, beyond the margin: the power law answers.
        let noisy = Noise {
            mean_error_pct: 3.5,
            ..quiet
        };
        assert_eq!(winner(&candidates, Regime::Inside, noisy, 200.0), 0);
        // Within the best score's standard error, the interpolation stays.
        candidates[0].score_error = [2.0; 3];
        assert_eq!(winner(&candidates, Regime::Inside, noisy, 200.0), 1);
    }

    #[test]
    fn the_interpolation_extrapolates_with_the_noise_of_its_end_counts() {
        // Three runs at each count, ±4 % about a power law: the means are
        // known to about 2.3 %.
        let observations: Vec<Observation> = POWERS
            .iter()
            .flat_map(|&n| {
                [0.96, 1.0, 1.04].map(|e| Observation {
                    nodes: n,
                    value: 1000.0 * f64::from(n).powf(-0.9) * e,
                    weight: 1.0,
                })
            })
            .collect();
        let h = History::new(&observations);
        let noise = Noise::of(&h, 2.0);
        assert!(noise.mean_error_pct > 2.0, "{noise:?}");
        // At 512 nodes, from 128 and 256: t = 1, √5 standard errors.
        let end = end_slope_error(&h, noise, 512.0);
        assert!((end - 5f64.sqrt() * noise.mean_error_pct / 100.0).abs() < 1e-12);
        let selection = select(&h, &options(Metric::Tts), noise);
        let interpolation = candidate(&selection, Family::Interpolation);
        // The refits without interior counts share its end slope, and
        // hardly move its prediction at 512; the end counts' noise does.
        assert!(interpolation.spread_pct.unwrap() >= 100.0 * end - 1e-9);
        assert!(candidate(&selection, Family::PowerLaw).spread_pct.unwrap() < 100.0 * end);
        // Without repeated runs the noise is not known: nothing is added.
        let quiet = Noise {
            mean_error_pct: 0.0,
            ..noise
        };
        assert_eq!(end_slope_error(&h, quiet, 512.0), 0.0);
    }

    #[test]
    fn the_model_answers_inside_and_beyond_with_their_winners() {
        let observations: Vec<Observation> = POWERS
            .iter()
            .map(|&n| Observation {
                nodes: n,
                value: 50.0 + 1000.0 / f64::from(n) + 8.0 * f64::from(n).log2(),
                weight: 1.0,
            })
            .collect();
        let model = fit(&observations, options(Metric::Tts)).unwrap();
        assert_eq!(model.regime(100), Regime::Inside);
        assert_eq!(model.regime(257), Regime::Beyond);
        let p = model.predict_model(512);
        assert_eq!(
            p.family,
            Some(model.selection.winner(Regime::Beyond).family)
        );
    }

    /// The second generator's seed 11, application 7, with its repeated
    /// runs at 4, 5, 6 and 24 nodes reduced to their means: energy flat
    /// and then rising with communication. The power law back-tests best
    /// beyond the range and predicts 15.6 % too little at 48 nodes
    /// (truth 1.719 MJ); the line's extension, a floor for energy, is 3 %
    /// off.
    #[test]
    fn energy_beyond_the_range_is_not_below_the_lines_extension() {
        let means = [
            (4, 559_676.68),
            (5, 563_534.37),
            (6, 634_305.04),
            (24, 1_108_395.42),
        ];
        let observations: Vec<Observation> = means
            .iter()
            .map(|&(nodes, value)| Observation {
                nodes,
                value,
                weight: 1.0,
            })
            .collect();
        let energy = fit(&observations, options(Metric::Ets)).unwrap();
        let line = candidate(&energy.selection, Family::Line);
        let p = energy.predict_model(48);
        assert_eq!(p.family, Some(Family::Line));
        assert!(p.value >= line.curve.value(48.0) - 1e-6);
        assert!((p.value / 1.719e6 - 1.0).abs() < 0.05, "{}", p.value);
        // The same numbers as time: nothing floors time, which falls.
        let time = fit(&observations, options(Metric::Tts)).unwrap();
        let ruled = &time.selection.candidates[super::winner(
            &time.selection.candidates,
            Regime::Beyond,
            Noise::of(&time.history, 2.0),
            48.0,
        )];
        assert_eq!(time.selection.winner(Regime::Beyond), ruled);
    }

    /// Energy straight in the logs (a power law of exponent 0.2: time
    /// falling as n^-0.8) is concave in n, and the line would overshoot
    /// it; it is not floored, and its power law is recovered. Amdahl's
    /// node-seconds bend upwards in the logs and are.
    #[test]
    fn only_energy_that_bends_upwards_is_floored() {
        let history = |f: &dyn Fn(f64) -> f64| {
            let observations: Vec<Observation> = POWERS[..6]
                .iter()
                .map(|&nodes| Observation {
                    nodes,
                    value: f(f64::from(nodes)),
                    weight: 1.0,
                })
                .collect();
            History::new(&observations)
        };
        let power_law = |n: f64| 3e5 * n.powf(0.2);
        let h = history(&power_law);
        assert!(!bends_upward(&h));
        let model = fit(
            &h.points
                .iter()
                .map(|p| Observation {
                    nodes: p.nodes,
                    value: p.mean,
                    weight: 1.0,
                })
                .collect::<Vec<_>>(),
            options(Metric::Ets),
        )
        .unwrap();
        let p = model.predict_model(64);
        assert!(
            (p.value / power_law(64.0) - 1.0).abs() < 1e-6,
            "{}",
            p.value
        );
        let amdahl = |n: f64| 400.0 * n * 1000.0 * (0.05 + 0.95 / n);
        assert!(bends_upward(&history(&amdahl)));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 48,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Whatever the history, the winner of each regime back-tests
            /// within the tie tolerance of the best candidate (inside the
            /// range, the interpolation within the incumbent's margin; below
            /// it, the winner inside within the same margin): a candidate
            /// that back-tests clearly better is never passed over.
            #[test]
            fn the_winner_is_within_noise_of_the_best_backtest(
                t1 in 10.0f64..1e5,
                serial in 0.0f64..0.2,
                comm in 0.0f64..0.05,
                noise in prop::collection::vec(-0.05f64..0.05, 9),
                metric in prop::sample::select(Metric::ALL.to_vec()),
            ) {
                let observations: Vec<Observation> = POWERS
                    .iter()
                    .zip(&noise)
                    .map(|(&n, e)| {
                        let x = f64::from(n);
                        Observation {
                            nodes: n,
                            value: t1 * (serial + (1.0 - serial) / x + comm * x.log2()) * (1.0 + e),
                            weight: 1.0,
                        }
                    })
                    .collect();
                let h = History::new(&observations);
                let selection = select(&h, &options(metric), Noise::of(&h, 2.0));
                for regime in [Regime::Inside, Regime::Beyond] {
                    let r = regime as usize;
                    let best = selection
                        .candidates
                        .iter()
                        .min_by(|a, b| a.score[r].total_cmp(&b.score[r]))
                        .unwrap();
                    let mut tolerance = (TIE_FRACTION * best.score[r])
                        .max(best.score_error[r])
                        .max(TIE_FLOOR_PCT);
                    let winner = selection.winner(regime);
                    // Energy beyond the range is floored by the line
                    // (`energy_floor`): the line answers there only
                    // where the back-tests' winner would have answered
                    // less at twice the largest count.
                    let reference = 2.0 * f64::from(POWERS[POWERS.len() - 1]);
                    let line = selection.candidates.iter().find(|c| c.family == Family::Line);
                    if let (Metric::Ets, Regime::Beyond, Some(line)) = (metric, regime, line) {
                        let ruled = &selection.candidates
                            [super::winner(&selection.candidates, regime, Noise::of(&h, 2.0), reference)];
                        let line = line.curve.value(reference);
                        if winner.family == Family::Line && ruled.family != Family::Line {
                            prop_assert!(bends_upward(&h));
                            prop_assert!(line > ruled.curve.value(reference));
                            continue;
                        }
                        if bends_upward(&h) {
                            prop_assert!(winner.curve.value(reference) >= line);
                        }
                    }
                    if regime == Regime::Inside && winner.family == Family::Interpolation {
                        tolerance = tolerance.max(INCUMBENT_MARGIN * best.score[r]);
                    }
                    prop_assert!(
                        winner.score[r] <= best.score[r] + tolerance + 1e-12,
                        "{regime:?}: {} won with {} against {} at {}",
                        winner.family.as_str(), winner.score[r], best.family.as_str(), best.score[r]
                    );
                }
                // From 1 node nothing is asked below the range: no backward
                // test, and the winner inside is named there.
                prop_assert_eq!(selection.winners[2], selection.winners[0]);
                prop_assert!(selection.candidates.iter().all(|c| c.backward.is_none()));
                // From 2 nodes: the winner inside, unless the best score
                // below the range beats its own by more than the margin;
                // then (up to numerical ties) that best.
                let from_two = History::new(&observations[1..]);
                let selection = select(&from_two, &options(metric), Noise::of(&from_two, 2.0));
                let r = Regime::Below as usize;
                let (inside, below) = (selection.winner(Regime::Inside), selection.winner(Regime::Below));
                let best = selection
                    .candidates
                    .iter()
                    .min_by(|a, b| a.score[r].total_cmp(&b.score[r]))
                    .unwrap();
                let margin = (INCUMBENT_MARGIN * best.score[r])
                    .max(best.score_error[r])
                    .max(TIE_FLOOR_PCT);
                if selection.winners[2] == selection.winners[0] {
                    prop_assert!(
                        !best.score[r].is_finite() || inside.score[r] <= best.score[r] + margin,
                        "{} kept below with {} against {} at {}",
                        inside.family.as_str(), inside.score[r], best.family.as_str(), best.score[r]
                    );
                } else {
                    prop_assert!(inside.score[r] > best.score[r] + margin);
                    prop_assert!(below.score[r] <= best.score[r] + TIE_FLOOR_PCT);
                }
            }
        }
    }
}

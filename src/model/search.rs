//! Empirical model search (docs/model.md §6.2): the model in normal form
//! y(p) = c0 + Σ_k c_k · p^(i_k) · log2(p)^(j_k) with one or two terms that
//! best predicts the points it was not fitted to.
//!
//! Every hypothesis (the constant, each term alone, each pair of terms) is
//! fitted by least squares to the mean value at each distinct p, and scored
//! by its leave-one-out cross-validated SMAPE: each point predicted by the
//! fit to the others. The leave-one-out residuals come from the hat matrix
//! (eᵢ / (1 − hᵢᵢ), exact for linear least squares), so a hypothesis costs one
//! small solve, not one per point. Measurement noise is relative, so the
//! least squares are weighted by 1/y² (relative errors), unless some mean is 0.
//!
//! Choosing among the classes (constant, one term, two terms) guards against
//! fitting noise, which thousands of two-term hypotheses on a handful of
//! points would otherwise do:
//! - with repetitions at the points, their spread gives the standard error of
//!   each mean, and the simplest class whose best model fits within the noise
//!   (`NOISE_RATIO`) ends the search; within a class, the models that fit
//!   within the noise are equally good, and the one with fewer log factors
//!   wins, then the lower cross-validated SMAPE;
//! - otherwise a more complex class replaces a simpler one only when it
//!   predicts clearly better (`IMPROVEMENT`; for two terms far better,
//!   `TWO_TERM_IMPROVEMENT`, and on at least `TWO_TERM_POINTS_UNREPEATED`
//!   points), and hypotheses within `TIE` of a class's best are ranked as
//!   above.
//!
//! Negative exponents (p^-1, p^-1/2, ...) describe metrics that fall with p,
//! such as the time of a strong-scaling run. By default they are considered
//! when the data fall, i.e. when the least-squares slope of y on log2 p is
//! negative. For data that are all positive, a model that goes to zero or
//! below anywhere in [smallest p, 16 × largest p] is passed over for the next
//! best of its class: a negative time or energy is no prediction.

use std::fmt;

use super::pmnf::{Exponent, Model, Shape, Term};

pub use crate::domain::Negative;

/// What the search considers.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The exponents i. Zero gives the pure log terms; negative exponents
    /// listed here are always used; the negatives of the positive ones are
    /// added as `negative` says.
    pub exponents: Vec<Exponent>,
    /// The log powers j.
    pub log_powers: Vec<i32>,
    pub negative: Negative,
    /// One or two terms besides the constant.
    pub max_terms: usize,
}

/// Design.md §6.2's exponent set: {0, 1/4, 1/3, 1/2, 2/3, 3/4, 1, 5/4, 4/3,
/// 3/2, 5/3, 7/4, 2, 9/4, 7/3, 5/2, 8/3, 11/4, 3}, the one Extra-P uses.
pub const DEFAULT_EXPONENTS: [(i32, i32); 19] = [
    (0, 1),
    (1, 4),
    (1, 3),
    (1, 2),
    (2, 3),
    (3, 4),
    (1, 1),
    (5, 4),
    (4, 3),
    (3, 2),
    (5, 3),
    (7, 4),
    (2, 1),
    (9, 4),
    (7, 3),
    (5, 2),
    (8, 3),
    (11, 4),
    (3, 1),
];

pub const MAX_LOG_POWER: i32 = 2;
pub const MAX_TERMS: usize = 2;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            exponents: DEFAULT_EXPONENTS
                .iter()
                .filter_map(|&(n, d)| Exponent::new(n, d))
                .collect(),
            log_powers: (0..=MAX_LOG_POWER).collect(),
            negative: Negative::Auto,
            max_terms: MAX_TERMS,
        }
    }
}

/// Fewest distinct p values for a search: a one-term model left one point
/// out is still fitted to two.
pub const MIN_POINTS: usize = 3;
/// Fewest distinct p values for two-term hypotheses: each leave-one-out fit
/// of three coefficients keeps one degree of freedom.
pub const TWO_TERM_POINTS: usize = 5;
/// Without repetitions, one term must lower the constant's cross-validated
/// SMAPE by this fraction of it (and by 1e-6 percentage points), or the
/// constant stays…
pub const IMPROVEMENT: f64 = 0.1;
/// …and two terms must lower the best single term's by this fraction: to a
/// tenth. Among some 1,500 pairs of terms, one fits the noise of a few
/// points: with 0.1, a line measured once at five to eight counts with
/// ±0.5–2 % noise was answered with two terms in 11 to 18 of 20 draws
/// (`noisy_single_runs_keep_their_class`); with a tenth, in none from six
/// counts, while a clear two-term law (Amdahl plus a linear term) keeps both
/// terms in every draw.
pub const TWO_TERM_IMPROVEMENT: f64 = 0.9;
/// Without repetitions, two-term hypotheses need this many distinct p: on
/// five, each leave-one-out fit of three coefficients to four points is
/// nearly exact whatever the terms, and 2 to 4 draws of 20 still chose two.
pub const TWO_TERM_POINTS_UNREPEATED: usize = 6;
/// With repeated values, a model fits within the noise when its residuals
/// are at most this many standard errors of the means (root mean square).
pub const NOISE_RATIO: f64 = 2.0;
/// Without repetitions, hypotheses of one class whose cross-validated SMAPE
/// is within this fraction of the best are taken as equally good, and the one
/// with fewer log factors is preferred.
pub const TIE: f64 = 0.1;
/// How far beyond the largest p a model of positive data must stay positive.
pub const POSITIVE_HORIZON: f64 = 16.0;
/// The p a search accepts: within it, p^±3 log2² p and the squares of the
/// normal equations stay finite.
pub const P_RANGE: (f64, f64) = (1e-9, 1e15);
/// The largest magnitude of a value a search accepts: sums of 100,000
/// squared residuals stay finite.
pub const VALUE_LIMIT: f64 = 1e100;

/// Whether `p` is one a search accepts (finite, within `P_RANGE`).
pub fn valid_p(p: f64) -> bool {
    (P_RANGE.0..=P_RANGE.1).contains(&p)
}

/// Whether `v` is a value a search accepts (finite, within `VALUE_LIMIT`).
pub fn valid_value(v: f64) -> bool {
    v.abs() <= VALUE_LIMIT
}

#[derive(Debug, Clone, PartialEq)]
pub enum SearchError {
    TooFewPoints {
        distinct: usize,
    },
    /// p must be within `P_RANGE` (log2 p and p^-i must exist and stay
    /// finite).
    InvalidP(f64),
    InvalidValue(f64),
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::TooFewPoints { distinct } => write!(
                f,
                "needs at least {MIN_POINTS} distinct p values (got {distinct})"
            ),
            SearchError::InvalidP(p) => write!(
                f,
                "p must be from {:e} to {:e} (got {p})",
                P_RANGE.0, P_RANGE.1
            ),
            SearchError::InvalidValue(v) => write!(
                f,
                "values must be finite and at most {VALUE_LIMIT:e} in magnitude (got {v})"
            ),
        }
    }
}

impl std::error::Error for SearchError {}

/// The chosen model and how well it fits.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub model: Model,
    /// Residual sum of squares at the per-p means.
    pub rss: f64,
    /// `None` when there are no degrees of freedom left or the data are flat.
    pub adjusted_r2: Option<f64>,
    /// Mean symmetric absolute percentage error of the fit, in %.
    pub smape_pct: f64,
    /// The same for the leave-one-out predictions: the selection criterion.
    pub cv_smape_pct: f64,
    /// Whether negative exponents were among the hypotheses.
    pub negative_exponents: bool,
    /// Number of hypotheses scored.
    pub hypotheses: usize,
    /// Distinct p values and their means, ascending.
    pub p: Vec<f64>,
    pub means: Vec<f64>,
}

/// The observations grouped by distinct p, ascending.
#[derive(Debug, Clone, PartialEq)]
struct Grouped {
    p: Vec<f64>,
    means: Vec<f64>,
    /// Repetitions at each p.
    counts: Vec<usize>,
    /// Sample variance at each p (0 with one repetition).
    variances: Vec<f64>,
}

impl Grouped {
    fn new(observations: &[(f64, f64)]) -> Result<Grouped, SearchError> {
        if let Some(&(p, _)) = observations.iter().find(|(p, _)| !valid_p(*p)) {
            return Err(SearchError::InvalidP(p));
        }
        if let Some(&(_, v)) = observations.iter().find(|(_, v)| !valid_value(*v)) {
            return Err(SearchError::InvalidValue(v));
        }
        let mut sorted = observations.to_vec();
        sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut grouped = Grouped {
            p: Vec::new(),
            means: Vec::new(),
            counts: Vec::new(),
            variances: Vec::new(),
        };
        // Welford's running mean and sum of squares per p.
        let mut squares = Vec::new();
        for (x, v) in sorted {
            if grouped.p.last() != Some(&x) {
                grouped.p.push(x);
                grouped.means.push(0.0);
                grouped.counts.push(0);
                squares.push(0.0);
            }
            let k = grouped.p.len() - 1;
            grouped.counts[k] += 1;
            let delta = v - grouped.means[k];
            grouped.means[k] += delta / grouped.counts[k] as f64;
            squares[k] += delta * (v - grouped.means[k]);
        }
        grouped.variances = squares
            .iter()
            .zip(&grouped.counts)
            .map(|(s, &n)| if n > 1 { s / (n - 1) as f64 } else { 0.0 })
            .collect();
        Ok(grouped)
    }

    /// The standard error of each mean, from the relative spread of the
    /// repetitions pooled over the points that have them: `None` unless at
    /// least half the points are repeated. Floored at 1e-9 relative, so
    /// identical repetitions still admit rounding.
    fn standard_errors(&self) -> Option<Vec<f64>> {
        let repeated: Vec<f64> = (0..self.p.len())
            .filter(|&k| self.counts[k] > 1 && self.means[k] != 0.0)
            .map(|k| self.variances[k] / self.means[k].powi(2))
            .collect();
        if repeated.len() * 2 < self.p.len() {
            return None;
        }
        let relative = mean(&repeated).sqrt().max(1e-9);
        Some(
            (0..self.p.len())
                .map(|k| {
                    relative * self.means[k].abs().max(f64::MIN_POSITIVE)
                        / (self.counts[k] as f64).sqrt()
                })
                .collect(),
        )
    }
}

/// Search the model of `observations` (p, value), repeated p allowed.
pub fn search(observations: &[(f64, f64)], settings: &Settings) -> Result<Found, SearchError> {
    let grouped = Grouped::new(observations)?;
    let errors = grouped.standard_errors();
    let (p, y) = (grouped.p, grouped.means);
    let m = p.len();
    if m < MIN_POINTS {
        return Err(SearchError::TooFewPoints { distinct: m });
    }
    let negative = match settings.negative {
        Negative::Always => true,
        Negative::Never => false,
        Negative::Auto => falls(&p, &y),
    };
    let columns = Columns::new(&p, &y, errors.as_deref(), &candidates(settings, negative));
    let positive = y.iter().all(|v| *v > 0.0);
    let horizon = Horizon::new(p[0], p[m - 1] * POSITIVE_HORIZON);

    let two_terms = if errors.is_some() {
        TWO_TERM_POINTS
    } else {
        TWO_TERM_POINTS_UNREPEATED
    };
    let max_terms = if m >= two_terms {
        settings.max_terms.min(MAX_TERMS)
    } else {
        settings.max_terms.min(1)
    };
    // Classes are scored in order of complexity, and a class only when the
    // simpler ones have not settled the question.
    let n = columns.shapes.len();
    let mut hypotheses = 0;
    let mut chosen: Option<(Model, f64)> = None;
    for terms in 0..=max_terms {
        let class: Vec<Scored> = match terms {
            0 => columns.score(&[], [None, None]).into_iter().collect(),
            1 => (0..n)
                .filter_map(|a| columns.score(&[a], [Some(a), None]))
                .collect(),
            _ => (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .filter_map(|(a, b)| columns.score(&[a, b], [Some(a), Some(b)]))
                .collect(),
        };
        hypotheses += class.len();
        let Some((model, scored)) = best_of(&class, &columns, positive.then_some(&horizon)) else {
            continue;
        };
        let cv = scored.cv;
        // With repetitions, the simplest class that fits within the noise
        // ends the search: more terms would fit the noise.
        if scored.within_noise() {
            chosen = Some((model, cv));
            break;
        }
        let improvement = if terms < 2 {
            IMPROVEMENT
        } else {
            TWO_TERM_IMPROVEMENT
        };
        let better = match &chosen {
            None => true,
            Some((_, best)) => cv < best - (improvement * best).max(1e-6),
        };
        if better {
            chosen = Some((model, cv));
        }
    }
    // The constant is positive whenever the data are, so something is chosen;
    // the fallback only covers data that are neither.
    let (model, cv) = chosen.unwrap_or_else(|| (Model::constant(mean(&y)), f64::NAN));

    let fitted: Vec<f64> = p.iter().map(|&x| model.at(x)).collect();
    let rss: f64 = y.iter().zip(&fitted).map(|(a, b)| (a - b).powi(2)).sum();
    let y_mean = mean(&y);
    let tss: f64 = y.iter().map(|v| (v - y_mean).powi(2)).sum();
    let k = model.terms.len() as f64;
    let dof = m as f64 - k - 1.0;
    // Data constant to rounding (a spread within 1e-9 of their mean, as
    // products of measured values leave) have no variance to explain.
    let varies = tss > (1e-9 * y_mean).powi(2) * m as f64;
    let adjusted_r2 = (dof > 0.0 && varies).then(|| 1.0 - (rss / dof) / (tss / (m as f64 - 1.0)));
    let smape_pct = y
        .iter()
        .zip(&fitted)
        .map(|(a, b)| smape(*a, *b))
        .sum::<f64>()
        / m as f64;
    Ok(Found {
        model,
        rss,
        adjusted_r2,
        smape_pct,
        cv_smape_pct: cv,
        negative_exponents: negative,
        hypotheses,
        p,
        means: y,
    })
}

/// Whether the data fall with p: the least-squares slope of y on log2 p is
/// negative.
fn falls(p: &[f64], y: &[f64]) -> bool {
    let x: Vec<f64> = p.iter().map(|v| v.log2()).collect();
    let (x_mean, y_mean) = (mean(&x), mean(y));
    let slope: f64 = x
        .iter()
        .zip(y)
        .map(|(a, b)| (a - x_mean) * (b - y_mean))
        .sum();
    slope < 0.0
}

fn candidates(settings: &Settings, negative: bool) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for &i in &settings.exponents {
        for &j in &settings.log_powers {
            shapes.push(Shape::new(i, j));
            if negative && i > Exponent::ZERO {
                shapes.push(Shape::new(i.negated(), j));
            }
        }
    }
    shapes.retain(|s| !s.is_constant());
    shapes.sort();
    shapes.dedup();
    shapes
}

/// Σ_k w(k) a(k) b(k).
fn weighted_dot(a: &[f64], b: &[f64], w: &[f64]) -> f64 {
    a.iter().zip(b).zip(w).map(|((a, b), w)| a * b * w).sum()
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Symmetric absolute percentage error of one prediction, in %.
fn smape(actual: f64, predicted: f64) -> f64 {
    let scale = actual.abs() + predicted.abs();
    if scale == 0.0 {
        0.0
    } else {
        200.0 * (actual - predicted).abs() / scale
    }
}

/// A hypothesis and how well it did.
#[derive(Debug, Clone, Copy)]
struct Scored {
    terms: [Option<usize>; 2],
    /// Leave-one-out SMAPE, %.
    cv: f64,
    /// The root mean square of the fit's residuals at the means, in standard
    /// errors of the means; `None` without repetitions.
    noise: Option<f64>,
}

impl Scored {
    fn within_noise(&self) -> bool {
        self.noise.is_some_and(|n| n <= NOISE_RATIO)
    }
}

/// The hypothesis of a class to keep. Those that noise cannot tell apart
/// (all that fit within the noise when there are repetitions and some do;
/// else those whose cross-validated SMAPE is within `TIE` of the best) are
/// ranked by fewer log factors first, then by SMAPE; the rest follow by SMAPE.
/// The first whose model passes the horizon check (when there is one) is kept.
fn best_of(
    class: &[Scored],
    columns: &Columns,
    horizon: Option<&Horizon>,
) -> Option<(Model, Scored)> {
    let best = class.iter().map(|s| s.cv).min_by(f64::total_cmp)?;
    let by_noise = class.iter().any(Scored::within_noise);
    let tied = |s: &Scored| {
        if by_noise {
            s.within_noise()
        } else {
            s.cv <= best * (1.0 + TIE)
        }
    };
    let acceptable = |s: &Scored| {
        let model = columns.model(s)?;
        horizon
            .is_none_or(|h| h.positive(&model))
            .then_some((model, *s))
    };
    // The tied few first, ranked; the rest (sorted only if none of the tied
    // passes) by SMAPE.
    let (mut first, mut rest): (Vec<Scored>, Vec<Scored>) = class.iter().partition(|s| tied(s));
    first.sort_by_cached_key(|s| (columns.log_powers(s), Ordered(s.cv)));
    if let Some(found) = first.iter().find_map(acceptable) {
        return Some(found);
    }
    rest.sort_unstable_by(|a, b| a.cv.total_cmp(&b.cv));
    rest.iter().find_map(acceptable)
}

/// An f64 ordered by `total_cmp`, as a sort key.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ordered(f64);

impl Eq for Ordered {}

impl PartialOrd for Ordered {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ordered {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Log-spaced p values over which a model of positive data must stay positive.
struct Horizon(Vec<f64>);

impl Horizon {
    const POINTS: usize = 64;

    fn new(from: f64, to: f64) -> Horizon {
        let (a, b) = (from.ln(), to.ln());
        Horizon(
            (0..Self::POINTS)
                .map(|k| (a + (b - a) * k as f64 / (Self::POINTS - 1) as f64).exp())
                .collect(),
        )
    }

    fn positive(&self, model: &Model) -> bool {
        self.0.iter().all(|&p| model.at(p) > 0.0)
    }
}

/// The candidate terms evaluated at the points, each column scaled to a
/// weighted norm of 1 (which leaves the fit unchanged and keeps the normal
/// equations well conditioned), with their inner products.
struct Columns<'a> {
    y: &'a [f64],
    /// Least-squares weights, summing to 1: in proportion to 1/y²
    /// (relative errors) when no value is 0, else equal.
    w: Vec<f64>,
    /// Standard errors of the means, when the points are repeated.
    errors: Option<&'a [f64]>,
    /// A column of zeros, standing in for absent terms.
    zeros: Vec<f64>,
    shapes: Vec<Shape>,
    scale: Vec<f64>,
    /// Column-major: values[t * m + k] is term t at point k.
    values: Vec<f64>,
    sums: Vec<f64>,
    sums_y: Vec<f64>,
    /// squares[t] = Σ_k w(k) u_t(k)²: the Gram matrix's diagonal. Its other
    /// entries are computed when a two-term hypothesis needs them (`dot`),
    /// each once: a one-term search, the predictor's `normal_form` family,
    /// never does, and computing all n² of them took a third of its time.
    squares: Vec<f64>,
    /// Σ w y and Σ w.
    y_sum: f64,
    w_sum: f64,
}

impl<'a> Columns<'a> {
    fn new(p: &[f64], y: &'a [f64], errors: Option<&'a [f64]>, shapes: &[Shape]) -> Columns<'a> {
        let m = p.len();
        // 1/y², taken relative to the smallest |y| so that none overflows,
        // then made to sum to 1: the weights' scale leaves the fit as it
        // is, and the constant's entry of the Gram matrix is then 1, like
        // every column's (below).
        let w: Vec<f64> = if y.iter().all(|v| *v != 0.0) {
            let smallest = y.iter().fold(f64::INFINITY, |a, v| a.min(v.abs()));
            let raw: Vec<f64> = y.iter().map(|v| (smallest / v).powi(2)).collect();
            let total: f64 = raw.iter().sum();
            raw.iter().map(|r| r / total).collect()
        } else {
            vec![1.0 / m as f64; m]
        };
        let mut kept = Vec::with_capacity(shapes.len());
        let mut scale = Vec::with_capacity(shapes.len());
        let mut values = Vec::with_capacity(shapes.len() * m);
        for &shape in shapes {
            let column: Vec<f64> = p.iter().map(|&x| shape.at(x)).collect();
            let largest = column.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            // A term that vanishes at every point (log terms when all p are 1)
            // or overflows cannot be fitted.
            if !(largest.is_finite() && largest > 0.0) {
                continue;
            }
            // Its weighted norm 1, so that the conditioning check sees how
            // nearly columns repeat each other, not how their scales differ:
            // scaled to a largest value of 1 instead, y = p over p from 1 to
            // 1e9 (weights 1/p²) left p's column a norm of 1e-9 beside the
            // constant's 1, and the search answered a constant.
            let norm = column
                .iter()
                .zip(&w)
                .map(|(v, w)| w * (v / largest).powi(2))
                .sum::<f64>()
                .sqrt();
            if !(norm.is_finite() && norm > 0.0) {
                continue;
            }
            kept.push(shape);
            scale.push(largest * norm);
            values.extend(column.iter().map(|v| v / largest / norm));
        }
        let n = kept.len();
        let column = |t: usize| &values[t * m..(t + 1) * m];
        let sums = (0..n)
            .map(|t| column(t).iter().zip(&w).map(|(u, w)| u * w).sum())
            .collect();
        let sums_y = (0..n)
            .map(|t| {
                column(t)
                    .iter()
                    .zip(y)
                    .zip(&w)
                    .map(|((u, v), w)| u * v * w)
                    .sum()
            })
            .collect();
        let squares = (0..n)
            .map(|t| weighted_dot(column(t), column(t), &w))
            .collect();
        Columns {
            y,
            y_sum: y.iter().zip(&w).map(|(v, w)| v * w).sum(),
            w_sum: w.iter().sum(),
            w,
            errors,
            zeros: vec![0.0; m],
            shapes: kept,
            scale,
            values,
            sums,
            sums_y,
            squares,
        }
    }

    fn m(&self) -> usize {
        self.y.len()
    }

    fn column(&self, t: usize) -> &[f64] {
        let m = self.m();
        &self.values[t * m..(t + 1) * m]
    }

    /// The normal equations of the constant plus `terms`, solved: the
    /// coefficients (of the scaled columns) and the inverse Gram matrix.
    fn solve(&self, terms: &[usize]) -> Option<Solved> {
        let q = terms.len() + 1;
        let mut g = [[0.0f64; 3]; 3];
        let mut r = [0.0f64; 3];
        g[0][0] = self.w_sum;
        r[0] = self.y_sum;
        for (a, &t) in terms.iter().enumerate() {
            g[0][a + 1] = self.sums[t];
            g[a + 1][0] = self.sums[t];
            r[a + 1] = self.sums_y[t];
            g[a + 1][a + 1] = self.squares[t];
            for (b, &s) in terms.iter().enumerate().skip(a + 1) {
                let dot = weighted_dot(self.column(t), self.column(s), &self.w);
                g[a + 1][b + 1] = dot;
                g[b + 1][a + 1] = dot;
            }
        }
        let inverse = invert(&g, q)?;
        let mut beta = [0.0f64; 3];
        for a in 0..q {
            beta[a] = (0..q).map(|b| inverse[a][b] * r[b]).sum();
        }
        Some(Solved { beta, inverse })
    }

    /// The constant plus `terms` fitted and scored: the leave-one-out
    /// SMAPE, and the residuals against the noise. `None` when the system is
    /// (near) singular or one point alone determines the fit.
    fn score(&self, terms: &[usize], ids: [Option<usize>; 2]) -> Option<Scored> {
        let solved = self.solve(terms)?;
        let m = self.m();
        // Absent terms are a zero column with zero coefficients, so one
        // branch-free loop serves every class.
        let column = |a: usize| terms.get(a).map_or(&self.zeros[..], |&t| self.column(t));
        let (ua, ub) = (column(0), column(1));
        let [b0, b1, b2] = solved.beta;
        let g = solved.inverse;
        let mut smapes = 0.0;
        let mut noise = 0.0;
        for k in 0..m {
            let (actual, xa, xb) = (self.y[k], ua[k], ub[k]);
            let fitted = b0 + b1 * xa + b2 * xb;
            let leverage = self.w[k]
                * (g[0][0]
                    + g[1][1] * xa * xa
                    + g[2][2] * xb * xb
                    + 2.0 * (g[0][1] * xa + g[0][2] * xb + g[1][2] * xa * xb));
            let left = 1.0 - leverage;
            if left <= 1e-9 {
                return None;
            }
            let residual = actual - fitted;
            smapes += smape(actual, actual - residual / left);
            if let Some(errors) = self.errors {
                noise += (residual / errors[k]).powi(2);
            }
        }
        let cv = smapes / m as f64;
        cv.is_finite().then_some(Scored {
            terms: ids,
            cv,
            noise: self.errors.map(|_| (noise / m as f64).sqrt()),
        })
    }

    /// The total log power of a hypothesis's terms.
    fn log_powers(&self, scored: &Scored) -> i32 {
        scored
            .terms
            .iter()
            .flatten()
            .map(|&t| self.shapes[t].log_power)
            .sum()
    }

    /// The model of a scored hypothesis, with unscaled coefficients.
    fn model(&self, scored: &Scored) -> Option<Model> {
        let terms: Vec<usize> = scored.terms.iter().flatten().copied().collect();
        let solved = self.solve(&terms)?;
        let mut model_terms: Vec<Term> = terms
            .iter()
            .enumerate()
            .map(|(a, &t)| Term {
                coefficient: solved.beta[a + 1] / self.scale[t],
                shape: self.shapes[t],
            })
            .collect();
        model_terms.sort_by_key(|t| t.shape);
        // A constant that moves no value by a trillionth is the fit's
        // rounding where the data have none: kept, it would be the leading
        // term of every falling model ("-1e-19 + p^-2" read as O(1)).
        let smallest = self.y.iter().fold(f64::INFINITY, |a, v| a.min(v.abs()));
        let constant = solved.beta[0];
        let constant = if constant.abs() <= 1e-12 * smallest {
            0.0
        } else {
            constant
        };
        Some(Model {
            constant,
            terms: model_terms,
        })
    }
}

struct Solved {
    beta: [f64; 3],
    inverse: [[f64; 3]; 3],
}

#[allow(clippy::needless_range_loop)] // index arithmetic mirrors the algebra
/// The inverse of the leading q×q block of a symmetric positive definite
/// matrix, by Cholesky; `None` when it is (near) singular: the factor's
/// diagonal spanning more than six orders of magnitude, a condition number
/// beyond ~1e12.
fn invert(g: &[[f64; 3]; 3], q: usize) -> Option<[[f64; 3]; 3]> {
    let mut l = [[0.0f64; 3]; 3];
    for i in 0..q {
        for j in 0..=i {
            let s: f64 = g[i][j] - (0..j).map(|k| l[i][k] * l[j][k]).sum::<f64>();
            if i == j {
                if s.is_nan() || s <= 0.0 {
                    return None;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let (small, large) = (0..q).fold((f64::INFINITY, 0.0f64), |(s, b), i| {
        (s.min(l[i][i]), b.max(l[i][i]))
    });
    if small <= large * 1e-6 {
        return None;
    }
    // L⁻¹ by forward substitution, then G⁻¹ = L⁻ᵀ L⁻¹.
    let mut li = [[0.0f64; 3]; 3];
    for i in 0..q {
        li[i][i] = 1.0 / l[i][i];
        for j in 0..i {
            let s: f64 = (j..i).map(|k| l[i][k] * li[k][j]).sum();
            li[i][j] = -s / l[i][i];
        }
    }
    let mut inverse = [[0.0f64; 3]; 3];
    for i in 0..q {
        for j in 0..q {
            inverse[i][j] = (i.max(j)..q).map(|k| li[k][i] * li[k][j]).sum();
        }
    }
    inverse
        .iter()
        .flatten()
        .all(|v| v.is_finite())
        .then_some(inverse)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: [f64; 5] = [4.0, 8.0, 16.0, 32.0, 64.0];

    fn e(text: &str) -> Exponent {
        Exponent::parse(text).unwrap()
    }

    fn exact(f: impl Fn(f64) -> f64, p: &[f64]) -> Vec<(f64, f64)> {
        p.iter().map(|&x| (x, f(x))).collect()
    }

    /// ±`pct` % multiplicative noise, `reps` repetitions per point, from a
    /// fixed seed.
    fn noisy(
        f: impl Fn(f64) -> f64,
        p: &[f64],
        pct: f64,
        reps: usize,
        seed: u64,
    ) -> Vec<(f64, f64)> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        p.iter()
            .flat_map(|&x| (0..reps).map(move |_| x))
            .map(|x| (x, f(x) * (1.0 + rng.random_range(-pct..=pct) / 100.0)))
            .collect()
    }

    fn shapes(found: &Found) -> Vec<Shape> {
        found.model.terms.iter().map(|t| t.shape).collect()
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1.0)
    }

    #[test]
    fn single_term_functions_are_recovered_from_exact_data() {
        let cases: [(Shape, f64, f64); 6] = [
            (Shape::new(Exponent::ONE, 0), 10.0, 2.5),
            (Shape::new(Exponent::ZERO, 1), 5.0, 3.0),
            (Shape::new(e("3/2"), 0), 2.0, 0.1),
            (Shape::new(e("1/2"), 0), 1.0, 4.0),
            (Shape::new(Exponent::ONE, 1), 7.0, 0.02),
            (Shape::new(e("2"), 2), 3.0, 0.001),
        ];
        for (shape, c0, c1) in cases {
            let found =
                search(&exact(|p| c0 + c1 * shape.at(p), &P), &Settings::default()).unwrap();
            assert_eq!(
                shapes(&found),
                vec![shape],
                "{shape}: {}",
                found.model.formula()
            );
            assert!(
                close(found.model.constant, c0, 1e-6),
                "{shape}: c0 {}",
                found.model.constant
            );
            assert!(close(found.model.terms[0].coefficient, c1, 1e-6), "{shape}");
            assert!(found.cv_smape_pct < 1e-6 && found.rss < 1e-9);
            assert_eq!(found.adjusted_r2.map(|r| (r * 1e6).round()), Some(1e6));
        }
    }

    /// Power laws over many orders of magnitude, where weights 1/y² span
    /// 1e18: each is found, and stays positive where it was measured (a
    /// probe got a constant for p over 1 to 1e9 and p² over 1 to 1e6, and a
    /// model negative at p = 1 for p over 1e-9 to 1).
    #[test]
    fn power_laws_over_many_decades_are_recovered() {
        let decades = |from: f64, to: f64| -> Vec<f64> {
            let (a, b) = (from.log10(), to.log10());
            (0..6)
                .map(|k| 10f64.powf(a + (b - a) * f64::from(k) / 5.0))
                .collect()
        };
        for (exponent, from, to) in [("1", 1.0, 1e9), ("2", 1.0, 1e6), ("1", 1e-9, 1.0)] {
            let shape = Shape::new(e(exponent), 0);
            let p = decades(from, to);
            let found = search(&exact(|p| shape.at(p), &p), &Settings::default()).unwrap();
            let formula = found.model.formula();
            assert_eq!(
                shapes(&found),
                vec![shape],
                "{exponent} on [{from}, {to}]: {formula}"
            );
            assert!(
                close(found.model.terms[0].coefficient, 1.0, 1e-6),
                "{formula}"
            );
            assert!(found.smape_pct < 1e-6, "{formula}");
            for x in p {
                assert!(
                    close(found.model.at(x), shape.at(x), 1e-6),
                    "{formula} at {x}"
                );
            }
        }
    }

    /// Exact data without a constant: the constant the fit leaves is
    /// rounding, and is read as none, so the big-O is the term's (a probe
    /// got "-3.85e-34 + p^-2" reported as O(1)).
    #[test]
    fn a_constant_of_rounding_is_none() {
        for (exponent, c1) in [
            ("-2", 1.0),
            ("-1", 7.5),
            ("-1/2", 0.3),
            ("1", 2.0),
            ("2", 1e-3),
        ] {
            let shape = Shape::new(e(exponent), 0);
            for p in [
                &P[..],
                &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0][..],
            ] {
                let found = search(&exact(|p| c1 * shape.at(p), p), &Settings::default()).unwrap();
                let formula = found.model.formula();
                assert_eq!(shapes(&found), vec![shape], "{formula}");
                assert_eq!(found.model.constant, 0.0, "{formula}");
                assert_eq!(found.model.leading(), shape, "{formula}");
            }
        }
        // A constant that is really there stays, however small beside the
        // term where p is large.
        let shape = Shape::new(e("-1"), 0);
        let found = search(
            &exact(|p| 1e-6 + 1e3 * shape.at(p), &P),
            &Settings::default(),
        )
        .unwrap();
        assert!(
            close(found.model.constant, 1e-6, 1e-3),
            "{}",
            found.model.formula()
        );
        assert_eq!(found.model.leading(), Shape::ONE);
    }

    #[test]
    fn two_term_functions_are_recovered_from_exact_data() {
        let p: Vec<f64> = (1..=8).map(|k| f64::from(1 << k)).collect();
        let cases = [
            (
                Shape::new(Exponent::ZERO, 1),
                Shape::new(Exponent::ONE, 0),
                3.0,
                2.0,
                0.5,
            ),
            (
                Shape::new(e("1/2"), 0),
                Shape::new(e("2"), 0),
                10.0,
                1.0,
                0.01,
            ),
            (
                Shape::new(e("-1"), 0),
                Shape::new(Exponent::ONE, 0),
                1.0,
                100.0,
                0.05,
            ),
        ];
        for (first, second, c0, c1, c2) in cases {
            let f = |x: f64| c0 + c1 * first.at(x) + c2 * second.at(x);
            let found = search(&exact(f, &p), &Settings::default()).unwrap();
            assert_eq!(
                shapes(&found),
                vec![first, second],
                "{}",
                found.model.formula()
            );
            assert!(close(found.model.terms[0].coefficient, c1, 1e-5));
            assert!(close(found.model.terms[1].coefficient, c2, 1e-5));
        }
    }

    /// ±2 % noise, five repetitions, twenty different draws each.
    #[test]
    fn noisy_single_term_data_keep_their_class() {
        for (shape, c0, c1) in [
            (Shape::new(Exponent::ONE, 0), 10.0, 2.5),
            (Shape::new(Exponent::ZERO, 1), 5.0, 3.0),
            (Shape::new(e("3/2"), 0), 2.0, 0.1),
            (Shape::new(e("-1"), 0), 20.0, 980.0),
        ] {
            let mut wrong = Vec::new();
            for seed in 0..20 {
                let data = noisy(|p| c0 + c1 * shape.at(p), &P, 2.0, 5, seed);
                let found = search(&data, &Settings::default()).unwrap();
                if shapes(&found) != vec![shape] {
                    wrong.push(found.model.formula());
                }
            }
            assert!(
                wrong.is_empty(),
                "{shape}: {} of 20 wrong: {wrong:?}",
                wrong.len()
            );
        }
    }

    /// Measured once per p, with ±`pct` % noise: twenty draws each keep a
    /// one-term class (a review found 0.5 % noise on a line answered as
    /// O(p^(3/4) log p), 19 % low at p = 1024), while a clear two-term law
    /// keeps both terms.
    #[test]
    fn noisy_single_runs_keep_their_class() {
        let powers = |from: u32, to: u32| -> Vec<f64> {
            (from..=to).map(|k| f64::from(1u32 << k)).collect()
        };
        for p in [powers(2, 6), powers(2, 7), powers(2, 8), powers(1, 8)] {
            for pct in [0.5, 2.0] {
                let wrong: Vec<String> = (0..20)
                    .map(|seed| noisy(|p| 10.0 + 10.0 * p, &p, pct, 1, seed))
                    .map(|data| search(&data, &Settings::default()).unwrap())
                    .filter(|found| found.model.terms.len() > 1)
                    .map(|found| found.model.formula())
                    .collect();
                assert!(wrong.is_empty(), "{} points, ±{pct} %: {wrong:?}", p.len());
            }
        }
        let f = |x: f64| 200.0 + 4000.0 / x + 2.0 * x;
        for pct in [0.5, 1.0, 2.0] {
            for seed in 0..20 {
                let found =
                    search(&noisy(f, &powers(1, 9), pct, 1, seed), &Settings::default()).unwrap();
                // Two terms, the first Amdahl's; the growing one may be
                // another that the noise cannot tell from p.
                let two = shapes(&found);
                assert!(
                    two.len() == 2
                        && two[0] == Shape::new(e("-1"), 0)
                        && close(found.model.at(1024.0), f(1024.0), 0.05),
                    "±{pct} %, seed {seed}: {}",
                    found.model.formula()
                );
            }
        }
    }

    /// The API guide's example (about 10p + 10, two of five points
    /// repeated) is a line, not p·log²p.
    #[test]
    fn the_guide_s_example_is_a_line() {
        let data = [
            (4.0, 50.2),
            (4.0, 49.8),
            (4.0, 50.5),
            (8.0, 90.1),
            (8.0, 89.7),
            (16.0, 170.3),
            (32.0, 330.9),
            (64.0, 650.2),
        ];
        let found = search(&data, &Settings::default()).unwrap();
        assert_eq!(
            shapes(&found),
            vec![Shape::new(Exponent::ONE, 0)],
            "{}",
            found.model.formula()
        );
    }

    #[test]
    fn noisy_two_term_data_are_recovered() {
        let p: Vec<f64> = (1..=9).map(|k| f64::from(1 << k)).collect();
        let f = |x: f64| 200.0 + 4000.0 / x + 2.0 * x;
        let found = search(&noisy(f, &p, 1.0, 5, 3), &Settings::default()).unwrap();
        assert_eq!(
            shapes(&found),
            vec![Shape::new(e("-1"), 0), Shape::new(Exponent::ONE, 0)],
            "{}",
            found.model.formula()
        );
        for target in [512.0, 4096.0] {
            assert!(
                close(found.model.at(target), f(target), 0.05),
                "at {target}"
            );
        }
    }

    #[test]
    fn amdahl_shaped_times_get_negative_exponents_and_positive_predictions() {
        let f = |p: f64| 1000.0 * (0.02 + 0.98 / p);
        for data in [exact(f, &P), noisy(f, &P, 2.0, 5, 11)] {
            let found = search(&data, &Settings::default()).unwrap();
            assert!(found.negative_exponents);
            assert_eq!(
                shapes(&found),
                vec![Shape::new(e("-1"), 0)],
                "{}",
                found.model.formula()
            );
            for target in [128.0, 1024.0, 1e6] {
                let predicted = found.model.at(target);
                assert!(
                    predicted > 0.0 && close(predicted, f(target), 0.1),
                    "at {target}: {predicted}"
                );
            }
        }
    }

    #[test]
    fn negative_exponents_are_left_out_for_rising_data_unless_asked() {
        let data = exact(|p| 10.0 + 2.5 * p, &P);
        let auto = search(&data, &Settings::default()).unwrap();
        assert!(!auto.negative_exponents);
        let always = search(
            &data,
            &Settings {
                negative: Negative::Always,
                ..Settings::default()
            },
        )
        .unwrap();
        assert!(always.negative_exponents && always.hypotheses > auto.hypotheses);
        let never = search(
            &exact(|p| 1.0 + 100.0 / p, &P),
            &Settings {
                negative: Negative::Never,
                ..Settings::default()
            },
        )
        .unwrap();
        assert!(
            never
                .model
                .terms
                .iter()
                .all(|t| !t.shape.exponent.is_negative())
        );
    }

    #[test]
    fn flat_noisy_data_fall_back_to_the_constant() {
        let found = search(&noisy(|_| 42.0, &P, 2.0, 5, 5), &Settings::default()).unwrap();
        assert!(found.model.terms.is_empty(), "{}", found.model.formula());
        assert!(close(found.model.constant, 42.0, 0.01));
        let flat = search(&exact(|_| 3.0, &P), &Settings::default()).unwrap();
        assert!(flat.model.terms.is_empty() && close(flat.model.constant, 3.0, 1e-12));
        assert_eq!(flat.adjusted_r2, None);
        // Constant but for rounding (energies as power × time): no variance
        // to explain, so no R², not a large negative one.
        let rounded = search(
            &exact(
                |p| 3.6e6 * (1.0 + 4.0 * f64::EPSILON * (p.log2() % 2.0)),
                &P,
            ),
            &Settings::default(),
        )
        .unwrap();
        assert_eq!(rounded.adjusted_r2, None, "{}", rounded.model.formula());
    }

    #[test]
    fn models_of_positive_data_stay_positive_over_the_horizon() {
        // Falling log-like data: the best unconstrained fit, c0 − c1·log2 p,
        // crosses zero soon after the last point.
        let data = exact(
            |p| 100.0 - 20.0 * p.log2() + 0.1,
            &[2.0, 4.0, 8.0, 16.0, 32.0],
        );
        let found = search(&data, &Settings::default()).unwrap();
        for k in 0..=64 {
            let p = 2.0 * (512.0f64 / 2.0).powf(f64::from(k) / 64.0);
            assert!(found.model.at(p) > 0.0, "{} at {p}", found.model.formula());
        }
    }

    #[test]
    fn settings_restrict_the_hypotheses() {
        let data = exact(|p| 10.0 + 2.5 * p, &P);
        let settings = Settings {
            exponents: vec![e("1/2"), e("2")],
            log_powers: vec![0],
            negative: Negative::Never,
            max_terms: 1,
        };
        let found = search(&data, &settings).unwrap();
        assert_eq!(found.hypotheses, 3);
        assert!(
            found
                .model
                .terms
                .iter()
                .all(|t| t.shape.exponent != Exponent::ONE)
        );
    }

    #[test]
    fn repeated_values_are_averaged_and_too_few_points_refused() {
        let grouped = Grouped::new(&[(4.0, 1.0), (2.0, 5.0), (4.0, 3.0)]).unwrap();
        assert_eq!(
            (grouped.p, grouped.means, grouped.counts),
            (vec![2.0, 4.0], vec![5.0, 2.0], vec![1, 2])
        );
        assert_eq!(
            search(&[(4.0, 1.0), (2.0, 5.0), (4.0, 3.0)], &Settings::default()),
            Err(SearchError::TooFewPoints { distinct: 2 })
        );
        assert_eq!(
            search(&[(0.0, 1.0)], &Settings::default()),
            Err(SearchError::InvalidP(0.0))
        );
        assert!(matches!(
            search(&[(1.0, f64::NAN)], &Settings::default()),
            Err(SearchError::InvalidValue(_))
        ));
        // Magnitudes whose powers or squares would overflow (found by
        // fuzzing: they answered rss and smape_pct as null).
        for (p, v) in [(1.6e308, 1.0), (2e-70, 1.0), (2.0, 3.5e307), (2.0, -1e101)] {
            let refused = search(&[(p, v), (4.0, 1.0), (8.0, 1.0)], &Settings::default());
            assert!(
                matches!(
                    refused,
                    Err(SearchError::InvalidP(_) | SearchError::InvalidValue(_))
                ),
                "({p}, {v}): {refused:?}"
            );
        }
    }

    /// At the edges of what a search accepts, its figures stay finite.
    #[test]
    fn the_accepted_extremes_give_finite_figures() {
        let (small, large) = P_RANGE;
        for (p, scale) in [(large, VALUE_LIMIT), (small, VALUE_LIMIT), (large, 1e-300)] {
            let points: Vec<(f64, f64)> = (0..6)
                .map(|k| {
                    let q = if p > 1.0 {
                        p / 2f64.powi(k)
                    } else {
                        p * 2f64.powi(k)
                    };
                    (q, scale * if k % 2 == 0 { 1.0 } else { -0.5 })
                })
                .collect();
            let found = search(&points, &Settings::default()).unwrap();
            assert!(
                found.rss.is_finite() && found.smape_pct.is_finite(),
                "p {p}, values ±{scale}: {found:?}"
            );
            assert!(
                found.adjusted_r2.is_none_or(f64::is_finite),
                "p {p}, values ±{scale}: {found:?}"
            );
        }
    }

    #[test]
    fn four_points_allow_one_term_only() {
        let data = exact(|p| 3.0 + p.log2() + 0.5 * p, &[2.0, 4.0, 8.0, 16.0]);
        let found = search(&data, &Settings::default()).unwrap();
        assert!(found.model.terms.len() <= 1);
    }
}

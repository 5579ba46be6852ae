//! The model families of docs/model.md §2.1: each fits one kind of curve to one
//! point per measured node count and says how many parameters it used.
//!
//! Every family fits relative errors (measurement noise is relative): in
//! (n, y) with weights quality / y², in logs with weights quality (the
//! normal form, through the §6.2 search, weighs each point's mean alike). Every
//! curve is strictly positive wherever it can be asked (1 to 10⁶ nodes):
//! families whose form cannot promise it check it, and give up otherwise.

use std::fmt::Write;

use super::fit::History;
use super::pmnf;
use super::predictor::{EXPONENT_RANGE, Predictor, Shape};
use super::search;
use super::segmented::{self, Space};
use super::{FitOptions, Metric, lsq};

/// Node counts a curve may be asked about: validation caps requests at 10⁶.
pub const HORIZON: (f64, f64) = (1.0, 1e6);

/// A kind of curve, simplest first (the order breaks exact ties).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// A single measured node count, scaled by the metric's ideal behaviour.
    Scaled,
    /// One least-squares line.
    Line,
    /// One least-squares power law a·n^b.
    PowerLaw,
    /// §4's laws with a communication term: non-negative combinations of
    /// 1, 1/n, log2 n, n (time), and the power and energy forms that follow.
    Physics,
    /// §6.2's normal form with one term: c0 + c·n^i·log2(n)^j.
    NormalForm,
    /// The A2EP2 segmentations (cases I–V) in (n, y).
    Segmented,
    /// The same segmentations in (ln n, ln y): power-law pieces.
    LogSegmented,
    /// A cubic through the points in (ln n, ln y), exact on a power law:
    /// monotone (Fritsch–Carlson), or Akima's on three points and where
    /// those predict the history's own interior points clearly better.
    Interpolation,
}

impl Family {
    /// The families a selection fits.
    pub const FITTED: [Family; 7] = [
        Family::Line,
        Family::PowerLaw,
        Family::Physics,
        Family::NormalForm,
        Family::Segmented,
        Family::LogSegmented,
        Family::Interpolation,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Segmented => "segmented",
            Family::LogSegmented => "log_segmented",
            Family::Physics => "physics",
            Family::NormalForm => "normal_form",
            Family::Line => "line",
            Family::PowerLaw => "power_law",
            Family::Interpolation => "loglog_interpolation",
            Family::Scaled => "scaled",
        }
    }
}

/// A term of a physics curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Basis {
    One,
    /// 1/n: the parallel part of strong scaling.
    Inverse,
    /// log2 n: tree-shaped communication.
    Log,
    /// n: linear communication or power.
    Linear,
    /// n·log2 n: communication energy or power on n nodes.
    LinearLog,
}

impl Basis {
    fn at(self, n: f64) -> f64 {
        match self {
            Basis::One => 1.0,
            Basis::Inverse => 1.0 / n,
            Basis::Log => n.log2(),
            Basis::Linear => n,
            Basis::LinearLog => n * n.log2(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Basis::One => "1",
            Basis::Inverse => "1/n",
            Basis::Log => "log2(n)",
            Basis::Linear => "n",
            Basis::LinearLog => "n*log2(n)",
        }
    }

    /// The terms for `metric`: time is Amdahl's a + b/n with log2 n and n
    /// communication (weak scaling's Gustafson time is the a + c·n limit);
    /// power is a + b·n with communication's n·log2 n; energy is their
    /// product.
    fn of(metric: Metric) -> &'static [Basis] {
        match metric {
            Metric::Tts => &[Basis::One, Basis::Inverse, Basis::Log, Basis::Linear],
            Metric::Apc => &[Basis::One, Basis::Linear, Basis::Log, Basis::LinearLog],
            Metric::Ets => &[
                Basis::One,
                Basis::Inverse,
                Basis::Log,
                Basis::Linear,
                Basis::LinearLog,
            ],
        }
    }
}

/// A fitted curve y(n) > 0.
#[derive(Debug, Clone, PartialEq)]
pub enum Curve {
    /// y over n, continued beyond the range as predictor.rs says.
    Segmented(Predictor),
    /// ln y over ln n, continued beyond the range linearly in the logs (a
    /// power law) with an exponent the theory allows.
    LogSegmented(Predictor),
    /// Σ c·term, every c ≥ 0.
    Physics(Vec<(Basis, f64)>),
    NormalForm(pmnf::Model),
    /// e^ln_a · n^b.
    PowerLaw {
        ln_a: f64,
        b: f64,
    },
    /// Through (ln n, ln y) of each point, a cubic between them with
    /// `slopes` at the points; beyond the ends, the end segment's power law
    /// (exponent within the theory's).
    Interpolation {
        x: Vec<f64>,
        y: Vec<f64>,
        slopes: Slopes,
    },
    /// y0·(n/n0)^exponent.
    Scaled {
        n0: f64,
        y0: f64,
        exponent: f64,
    },
}

impl Curve {
    pub fn value(&self, n: f64) -> f64 {
        match self {
            Curve::Segmented(predictor) => predictor.value(n),
            Curve::LogSegmented(predictor) => log_segmented(predictor, n.ln()).exp(),
            Curve::Physics(terms) => terms.iter().map(|(b, c)| c * b.at(n)).sum(),
            Curve::NormalForm(model) => model.at(n),
            Curve::PowerLaw { ln_a, b } => (ln_a + b * n.ln()).exp(),
            Curve::Interpolation { x, y, slopes } => interpolate(x, y, *slopes, n.ln()).exp(),
            Curve::Scaled { n0, y0, exponent } => y0 * (n / n0).powf(*exponent),
        }
    }

    /// The curve as a formula in n (segmented curves by their case; their
    /// segments are described separately).
    pub fn formula(&self) -> String {
        match self {
            Curve::Segmented(p) if p.is_line() => {
                let Shape::Segmented { segments, .. } = &p.shape else {
                    unreachable!("a line is segmented")
                };
                let s = &segments[0];
                let (a, b) = (s.coeffs[0] - s.coeffs[1] * s.lo, s.coeffs[1]);
                let sign = if a < 0.0 { '-' } else { '+' };
                format!("{} * n {sign} {}", pmnf::number(b), pmnf::number(a.abs()))
            }
            Curve::Segmented(p) | Curve::LogSegmented(p) => match &p.shape {
                Shape::Segmented { case, segments } => format!(
                    "A2EP2 case {} ({} segment{}) in {}",
                    case.as_str(),
                    segments.len(),
                    if segments.len() == 1 { "" } else { "s" },
                    if matches!(self, Curve::LogSegmented(_)) {
                        "(ln n, ln y)"
                    } else {
                        "(n, y)"
                    }
                ),
                Shape::Scaled { .. } => String::new(),
            },
            Curve::Physics(terms) => {
                let mut out = String::new();
                for (i, (basis, c)) in terms.iter().enumerate() {
                    if i > 0 {
                        out.push_str(" + ");
                    }
                    let _ = match basis {
                        Basis::One => write!(out, "{}", pmnf::number(*c)),
                        _ => write!(out, "{} * {}", pmnf::number(*c), basis.name()),
                    };
                }
                out
            }
            Curve::NormalForm(model) => model.formula().replace('p', "n"),
            Curve::PowerLaw { ln_a, b } => {
                format!("{} * n^{}", pmnf::number(ln_a.exp()), pmnf::number(*b))
            }
            Curve::Interpolation { x, slopes, .. } => format!(
                "{} in (ln n, ln y) through the {} measured node counts",
                match slopes {
                    Slopes::Monotone => "monotone cubic (Fritsch-Carlson)",
                    Slopes::Akima => "Akima cubic",
                },
                x.len()
            ),
            Curve::Scaled { n0, y0, exponent } => format!(
                "{} * (n / {})^{}",
                pmnf::number(*y0),
                pmnf::number(*n0),
                pmnf::number(*exponent)
            ),
        }
    }

    /// The segmented predictor, and whether it is over the logs.
    pub fn segmented(&self) -> Option<(&Predictor, bool)> {
        match self {
            Curve::Segmented(p) => Some((p, false)),
            Curve::LogSegmented(p) => Some((p, true)),
            _ => None,
        }
    }
}

/// A family's curve for a history.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyFit {
    pub curve: Curve,
    pub params: usize,
    /// %RMSE (docs/model.md §2) against the history's points.
    pub rmse_pct: f64,
}

/// Fit `family` to `history` (at least two node counts), choosing within the
/// family by the §2 rule with `allowed` %RMSE; `None` when the family cannot
/// describe it (too few points, or no positive curve).
pub fn fit(
    family: Family,
    history: &History,
    options: &FitOptions,
    allowed: f64,
) -> Option<FamilyFit> {
    let points = &history.points;
    if points.len() < 2 {
        return None;
    }
    let with_rmse = |curve: Curve, params: usize| {
        let rmse_pct = segmented::pct(
            points
                .iter()
                .map(|p| p.mean - curve.value(f64::from(p.nodes))),
            history,
        );
        rmse_pct.is_finite().then_some(FamilyFit {
            curve,
            params,
            rmse_pct,
        })
    };
    match family {
        Family::Segmented | Family::LogSegmented => {
            let space = if family == Family::Segmented {
                Space::Linear
            } else {
                Space::Log
            };
            let fitted = segmented::fit(history, space, allowed)?;
            Some(FamilyFit {
                curve: match space {
                    Space::Linear => Curve::Segmented(fitted.predictor),
                    Space::Log => Curve::LogSegmented(fitted.predictor),
                },
                params: fitted.params,
                rmse_pct: fitted.rmse_pct,
            })
        }
        Family::Line => {
            let fitted = segmented::line(history)?;
            Some(FamilyFit {
                curve: Curve::Segmented(fitted.predictor),
                params: 2,
                rmse_pct: fitted.rmse_pct,
            })
        }
        Family::PowerLaw => {
            let (x, y, w) = logs(history);
            let rows: Vec<f64> = x.iter().flat_map(|x| [1.0, *x]).collect();
            let fitted = lsq::fit(&rows, 2, &y, &w)?;
            with_rmse(
                Curve::PowerLaw {
                    ln_a: fitted.beta[0],
                    b: fitted.beta[1],
                },
                2,
            )
        }
        Family::Interpolation => {
            let (x, y, _) = logs(history);
            let slopes = Slopes::chosen(&x, &y);
            with_rmse(Curve::Interpolation { x, y, slopes }, points.len())
        }
        Family::Physics => physics(history, options.metric, allowed),
        Family::NormalForm => {
            let observations: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (f64::from(p.nodes), p.mean))
                .collect();
            let settings = search::Settings {
                max_terms: 1,
                ..search::Settings::default()
            };
            let found = search::search(&observations, &settings).ok()?;
            let params = 1 + found.model.terms.len();
            let curve = Curve::NormalForm(found.model);
            positive_over_horizon(&curve).then_some(())?;
            with_rmse(curve, params)
        }
        Family::Scaled => None,
    }
}

/// ln n, ln y and the weights of a fit in logs.
fn logs(history: &History) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let points = &history.points;
    (
        points.iter().map(|p| f64::from(p.nodes).ln()).collect(),
        points.iter().map(|p| p.mean.ln()).collect(),
        points.iter().map(|p| p.weight).collect(),
    )
}

/// Whether `curve` is finite and positive at log-spaced node counts over
/// the whole horizon.
fn positive_over_horizon(curve: &Curve) -> bool {
    const PROBES: usize = 64;
    let (a, b) = (HORIZON.0.ln(), HORIZON.1.ln());
    (0..PROBES).all(|k| {
        let v = curve.value((a + (b - a) * k as f64 / (PROBES - 1) as f64).exp());
        v.is_finite() && v > 0.0
    })
}

/// The best non-negative combination of the metric's physics terms: every
/// subset is fitted by least squares (non-negative least squares for so few
/// terms is the best feasible subset), the §2 rule choosing among the
/// feasible ones.
fn physics(history: &History, metric: Metric, allowed: f64) -> Option<FamilyFit> {
    let points = &history.points;
    let m = points.len();
    let basis = Basis::of(metric);
    let n: Vec<f64> = points.iter().map(|p| f64::from(p.nodes)).collect();
    let y: Vec<f64> = points.iter().map(|p| p.mean).collect();
    let w: Vec<f64> = points
        .iter()
        .map(|p| p.weight / (p.mean * p.mean))
        .collect();
    let mut best: Option<(FamilyFit, f64)> = None;
    let mut rows = Vec::new();
    for subset in 1u32..(1 << basis.len()) {
        let terms: Vec<Basis> = (0..basis.len())
            .filter(|k| subset & (1 << k) != 0)
            .map(|k| basis[k])
            .collect();
        let k = terms.len();
        // Keep a residual degree of freedom, as the other families do.
        if k >= m {
            continue;
        }
        rows.clear();
        for &x in &n {
            rows.extend(terms.iter().map(|b| b.at(x)));
        }
        let Some(fitted) = lsq::fit(&rows, k, &y, &w) else {
            continue;
        };
        if fitted.beta.iter().any(|c| *c < 0.0) {
            continue;
        }
        let curve = Curve::Physics(
            terms
                .iter()
                .copied()
                .zip(fitted.beta.iter().copied())
                .collect(),
        );
        if curve.value(HORIZON.0).partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            continue;
        }
        let rmse_pct = segmented::pct(y.iter().zip(&fitted.fitted).map(|(y, f)| y - f), history);
        let loo = fitted.loo(&rows, &y, &w).map_or(f64::INFINITY, |loo| {
            segmented::pct(loo.into_iter(), history)
        });
        let candidate = FamilyFit {
            curve,
            params: k,
            rmse_pct,
        };
        let better = match &best {
            None => true,
            Some((b, b_loo)) => {
                let (within, b_within) = (rmse_pct <= allowed + 1e-9, b.rmse_pct <= allowed + 1e-9);
                match (within, b_within) {
                    (true, false) => true,
                    (false, true) => false,
                    (true, true) => (k, loo) < (b.params, *b_loo),
                    (false, false) => loo < *b_loo,
                }
            }
        };
        if better && rmse_pct.is_finite() {
            best = Some((candidate, loo));
        }
    }
    best.map(|(fit, _)| fit)
}

/// A segmented predictor over x = ln n, continued linearly in the logs with
/// the end segment's slope, held within the theory's exponents.
fn log_segmented(predictor: &Predictor, x: f64) -> f64 {
    let Shape::Segmented { segments, .. } = &predictor.shape else {
        return predictor.value(x.exp()).ln();
    };
    let (first, last) = (&segments[0], &segments[segments.len() - 1]);
    let clamp = |s: f64| s.clamp(EXPONENT_RANGE.0, EXPONENT_RANGE.1);
    if x < first.lo {
        first.value(first.lo) + clamp(first.end_slope(false)) * (x - first.lo)
    } else if x > last.hi {
        last.value(last.hi) + clamp(last.end_slope(true)) * (x - last.hi)
    } else {
        segments.iter().find(|s| x <= s.hi).unwrap_or(last).value(x)
    }
}

/// Akima's slopes replace the monotone ones only when they predict a
/// history's interior points from the others with less than this fraction
/// of the monotone ones' error. The monotone cubic never overshoots between
/// two counts, so it stays unless the evidence is clear: a history's own
/// leave-one-out over a few points is noisy. On the real ARCHER2 times
/// (docs/accuracy.md), choosing with 0.8 took the OSU collectives' median
/// leave-one-out error from 4.29 % to 4.15 % and changed no other data set;
/// choosing on any advantage (1.0) reached 4.07 % there but put VASP behind
/// log-log neighbours (3.82 % against 3.15 %) and OpenSBLI from 4.11 % to
/// 4.43 %; Akima's slopes alone gave 3.75 % and 6.24 % there.
const AKIMA_MARGIN: f64 = 0.8;

/// How the slopes of an interpolation at the measured counts are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slopes {
    /// Fritsch–Carlson: the harmonic mean of the secants on either side
    /// (zero at a local extremum), the end secant at the ends. The cubic
    /// between two counts then stays within their values.
    Monotone,
    /// Akima (1970): the secants on either side, weighted by how much the
    /// secants beyond them change, so that a bend in the data bends the
    /// curve near it only; past the ends the secants are extended linearly.
    /// Zero at a local extremum and beside a flat step, so that the curve
    /// neither overshoots a turning point nor dips between equal values.
    Akima,
}

impl Slopes {
    /// Akima's slopes when they predict the interior points of (x, y), each
    /// from the others, clearly better than the monotone ones (total
    /// relative error below `AKIMA_MARGIN` times theirs); else the monotone
    /// ones.
    ///
    /// Three points leave nothing to choose by (leaving the middle one out
    /// leaves a line for both): there Akima's slopes are taken. On three
    /// points they are the slopes of the parabola through them (in the
    /// logs), which follows the curve's bend; the monotone ones take the end
    /// secants at the ends, as if the curve were straight there. On the real
    /// CASTEP times, whose curves bend through a minimum, this took four of
    /// its eight configurations' leave-one-out errors down (OFI_4thr 55 % to
    /// 5.7 %, UCX_8thr 33 % to 17 %) and none up; no synthetic median moved.
    fn chosen(x: &[f64], y: &[f64]) -> Slopes {
        let m = x.len();
        if m < 3 {
            return Slopes::Monotone;
        }
        if m == 3 {
            return Slopes::Akima;
        }
        let (mut xs, mut ys) = (Vec::with_capacity(m - 1), Vec::with_capacity(m - 1));
        let mut error = |slopes: Slopes| {
            (1..m - 1)
                .map(|i| {
                    xs.clear();
                    ys.clear();
                    for j in (0..m).filter(|&j| j != i) {
                        xs.push(x[j]);
                        ys.push(y[j]);
                    }
                    (interpolate(&xs, &ys, slopes, x[i]) - y[i]).exp_m1().abs()
                })
                .sum::<f64>()
        };
        let (monotone, akima) = (error(Slopes::Monotone), error(Slopes::Akima));
        if akima < AKIMA_MARGIN * monotone {
            Slopes::Akima
        } else {
            Slopes::Monotone
        }
    }

    /// The slope at point `i` of (x, y) (at least two points).
    fn at(self, x: &[f64], y: &[f64], i: usize) -> f64 {
        let last = x.len() as isize - 2;
        // Secant j joins points j and j + 1 (0 ≤ j ≤ last).
        let measured = |j: isize| secant(x, y, j.clamp(0, last) as usize);
        let i = i as isize;
        // The secants on either side (at an end, the end secant twice).
        let (left, right) = (measured(i - 1), measured(i));
        let turning = i > 0 && i <= last && left * right <= 0.0;
        match self {
            Slopes::Monotone if turning => 0.0,
            Slopes::Monotone => 2.0 / (1.0 / left + 1.0 / right),
            Slopes::Akima => {
                let secant = |j: isize| {
                    if j < 0 {
                        measured(0) + (measured(0) - measured(1)) * (-j) as f64
                    } else if j > last {
                        measured(last) + (measured(last) - measured(last - 1)) * (j - last) as f64
                    } else {
                        measured(j)
                    }
                };
                let (left, right) = (secant(i - 1), secant(i));
                let flat = (i == 0 && right == 0.0) || (i == last + 1 && left == 0.0);
                if turning || flat {
                    return 0.0;
                }
                let (far_left, far_right) = (secant(i - 2), secant(i + 1));
                let (w_left, w_right) = ((far_right - right).abs(), (left - far_left).abs());
                if w_left + w_right == 0.0 {
                    (left + right) / 2.0
                } else {
                    (w_left * left + w_right * right) / (w_left + w_right)
                }
            }
        }
    }
}

/// The slope of (x, y) between points `j` and `j + 1`.
fn secant(x: &[f64], y: &[f64], j: usize) -> f64 {
    (y[j + 1] - y[j]) / (x[j + 1] - x[j])
}

/// The cubic Hermite interpolation of (x, y) with `slopes` at `at`; beyond
/// the ends, the end segment continued with its slope held within the
/// theory's exponents.
fn interpolate(x: &[f64], y: &[f64], slopes: Slopes, at: f64) -> f64 {
    let m = x.len();
    if m == 1 {
        return y[0];
    }
    let k = x.partition_point(|v| *v < at).clamp(1, m - 1);
    if at < x[0] || at > x[m - 1] {
        let (x0, y0) = if at < x[0] {
            (x[0], y[0])
        } else {
            (x[m - 1], y[m - 1])
        };
        return y0 + secant(x, y, k - 1).clamp(EXPONENT_RANGE.0, EXPONENT_RANGE.1) * (at - x0);
    }
    let h = x[k] - x[k - 1];
    let t = (at - x[k - 1]) / h;
    let (t2, t3) = (t * t, t * t * t);
    (2.0 * t3 - 3.0 * t2 + 1.0) * y[k - 1]
        + (t3 - 2.0 * t2 + t) * h * slopes.at(x, y, k - 1)
        + (-2.0 * t3 + 3.0 * t2) * y[k]
        + (t3 - t2) * h * slopes.at(x, y, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{options_for as options, sampled};

    #[test]
    fn the_power_law_family_recovers_an_exact_power_law() {
        let h = sampled(|n| 250.0 * n.powf(0.9), &[2, 3, 5, 8, 13, 21]);
        let fit = super::fit(Family::PowerLaw, &h, &options(Metric::Apc), 2.0).unwrap();
        let Curve::PowerLaw { ln_a, b } = fit.curve else {
            unreachable!()
        };
        assert!((ln_a.exp() - 250.0).abs() < 1e-9 && (b - 0.9).abs() < 1e-12);
        assert!(fit.rmse_pct < 1e-9 && fit.params == 2);
    }

    #[test]
    fn the_physics_family_keeps_only_the_terms_the_data_call_for() {
        // Amdahl without communication: a + b/n, so no log2 n or n term.
        let h = sampled(|n| 40.0 + 960.0 / n, &[1, 2, 4, 8, 16, 32]);
        let fit = super::fit(Family::Physics, &h, &options(Metric::Tts), 2.0).unwrap();
        let Curve::Physics(terms) = &fit.curve else {
            unreachable!()
        };
        assert_eq!(fit.params, 2, "{terms:?}");
        assert_eq!(
            terms.iter().map(|t| t.0).collect::<Vec<_>>(),
            [Basis::One, Basis::Inverse]
        );
        assert!((terms[0].1 - 40.0).abs() < 1e-9 && (terms[1].1 - 960.0).abs() < 1e-9);
        assert_eq!(fit.curve.formula(), "40 + 960 * 1/n");
    }

    #[test]
    fn a_line_reads_as_a_line() {
        let h = sampled(|n| 100.0 + 3.0 * n, &[2, 4, 8, 16]);
        let fit = super::fit(Family::Line, &h, &options(Metric::Apc), 2.0).unwrap();
        assert_eq!(fit.curve.formula(), "3 * n + 100");
        let h = sampled(|n| 3.0 * n - 5.0, &[2, 4, 8, 16]);
        let fit = super::fit(Family::Line, &h, &options(Metric::Apc), 2.0).unwrap();
        assert_eq!(fit.curve.formula(), "3 * n - 5");
    }

    #[test]
    fn the_line_is_the_plain_least_squares_line() {
        // Latencies that bend upwards: the ordinary least-squares line (the
        // textbook formulas, computed here) follows the largest counts,
        // where a line weighted by relative errors would follow the smallest.
        let nodes = [1, 2, 4, 8, 16, 32, 64];
        let truth = |n: f64| 50.0 + 0.02 * n * n;
        let h = sampled(truth, &nodes);
        let x: Vec<f64> = nodes.iter().map(|&n| f64::from(n)).collect();
        let y: Vec<f64> = x.iter().map(|&n| truth(n)).collect();
        let k = x.len() as f64;
        let (mx, my) = (x.iter().sum::<f64>() / k, y.iter().sum::<f64>() / k);
        let sxy: f64 = x.iter().zip(&y).map(|(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = x.iter().map(|x| (x - mx) * (x - mx)).sum();
        let slope = sxy / sxx;
        let intercept = my - slope * mx;
        let fit = super::fit(Family::Line, &h, &options(Metric::Tts), 2.0).unwrap();
        for n in [1.0, 64.0, 128.0] {
            let ols = intercept + slope * n;
            assert!(
                (fit.curve.value(n) / ols - 1.0).abs() < 1e-9,
                "{n}: {} against {ols}",
                fit.curve.value(n)
            );
        }
    }

    #[test]
    fn physics_coefficients_are_never_negative() {
        // A time that rises then falls: any fit with a negative coefficient
        // would do better in-sample, and is not a physics curve.
        let h = sampled(|n| 100.0 + 10.0 * n - 0.3 * n * n, &[1, 2, 4, 8, 12, 16]);
        let fit = super::fit(Family::Physics, &h, &options(Metric::Tts), 2.0).unwrap();
        let Curve::Physics(terms) = &fit.curve else {
            unreachable!()
        };
        assert!(terms.iter().all(|(_, c)| *c >= 0.0), "{terms:?}");
    }

    #[test]
    fn interpolation_passes_through_the_points_and_extends_in_the_logs() {
        let h = sampled(
            |n| if n < 10.0 { 800.0 / n } else { 100.0 },
            &[1, 4, 16, 64],
        );
        let fit = super::fit(Family::Interpolation, &h, &options(Metric::Tts), 2.0).unwrap();
        assert!(fit.rmse_pct < 1e-12 && fit.params == 4);
        // Between two counts, within their values and monotone.
        let between: Vec<f64> = [1.5, 2.0, 3.0, 3.9]
            .iter()
            .map(|&n| fit.curve.value(n))
            .collect();
        assert!(between.windows(2).all(|w| w[0] > w[1]), "{between:?}");
        assert!(
            between.iter().all(|&v| v < 800.0 && v > 200.0),
            "{between:?}"
        );
        // Flat where the points are: no overshoot between 16 and 64.
        assert!((fit.curve.value(32.0) - 100.0).abs() < 1e-9);
        // Exact on a power law, between the counts too.
        let power = sampled(|n| 800.0 * n.powf(-0.8), &[1, 4, 16, 64]);
        let fit_power =
            super::fit(Family::Interpolation, &power, &options(Metric::Tts), 2.0).unwrap();
        for n in [2.0, 10.0, 50.0] {
            let v = fit_power.curve.value(n);
            assert!(
                (v / (800.0 * f64::powf(n, -0.8)) - 1.0).abs() < 1e-12,
                "{n}: {v}"
            );
        }
        // Beyond 64: flat, as between 16 and 64.
        assert!((fit.curve.value(1000.0) - 100.0).abs() < 1e-9);
        // Below 1 node is never asked; above, slopes steeper than the
        // theory's are held to it: 1/n at most.
        let steep = sampled(|n| 1e6 / (n * n * n), &[1, 2, 4]);
        let fit = super::fit(Family::Interpolation, &steep, &options(Metric::Tts), 2.0).unwrap();
        assert!((fit.curve.value(8.0) - 1e6 / 64.0 / 2.0).abs() < 1e-6);
    }

    #[test]
    fn interpolation_takes_akimas_slopes_only_where_they_predict_clearly_better() {
        let slopes_of = |curve: &Curve| match curve {
            Curve::Interpolation { slopes, .. } => *slopes,
            other => panic!("{other:?}"),
        };
        // On a power law both are exact, between the counts too, and the
        // monotone slopes stay.
        let law = |n: f64| 800.0 * n.powf(-0.8);
        let power = sampled(law, &[1, 3, 4, 10, 16, 40, 64]);
        let fit = super::fit(Family::Interpolation, &power, &options(Metric::Tts), 2.0).unwrap();
        assert_eq!(slopes_of(&fit.curve), Slopes::Monotone);
        let (x, y, _) = logs(&power);
        for n in [2.0, 7.0, 30.0, 50.0] {
            let akima = interpolate(&x, &y, Slopes::Akima, f64::ln(n)).exp();
            assert!((akima / law(n) - 1.0).abs() < 1e-12, "{n}: {akima}");
        }
        // Amdahl with tree-shaped communication bends smoothly in the logs:
        // Akima's slopes predict the left-out counts with 0.4 times the
        // monotone ones' error, so they are taken, and they are closer to
        // the curve between the counts.
        let amdahl = |n: f64| 100.0 + 10_000.0 / n + 20.0 * n.log2();
        let h = sampled(amdahl, &[1, 2, 4, 8, 16, 32, 64, 128, 256]);
        let fit = super::fit(Family::Interpolation, &h, &options(Metric::Tts), 2.0).unwrap();
        assert_eq!(slopes_of(&fit.curve), Slopes::Akima);
        let (x, y, _) = logs(&h);
        let error = |slopes| {
            [3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0]
                .iter()
                .map(|&n| (interpolate(&x, &y, slopes, f64::ln(n)).exp() / amdahl(n) - 1.0).abs())
                .sum::<f64>()
        };
        assert!(
            error(Slopes::Akima) < 0.7 * error(Slopes::Monotone),
            "{} against {}",
            error(Slopes::Akima),
            error(Slopes::Monotone)
        );
        // Three counts, equally spaced in the logs: Akima's slopes are the
        // parabola's through them, and the curve is that parabola.
        let parabola = |n: f64| (7.0 - 1.2 * n.ln() + 0.15 * n.ln().powi(2)).exp();
        let three = sampled(parabola, &[1, 2, 4]);
        let fit = super::fit(Family::Interpolation, &three, &options(Metric::Tts), 2.0).unwrap();
        assert_eq!(slopes_of(&fit.curve), Slopes::Akima);
        for n in [1.2, 1.5, 2.5, 3.5] {
            let v = fit.curve.value(n);
            assert!((v / parabola(n) - 1.0).abs() < 1e-12, "{n}: {v}");
        }
    }

    #[test]
    fn akima_slopes_neither_overshoot_a_turn_nor_dip_between_equal_values() {
        // Falls, turns at 16, then stays level from 32: zero slope at the
        // turning point and beside the level step.
        let ns = [1.0f64, 4.0, 16.0, 32.0, 64.0];
        let ys = [800.0f64, 200.0, 50.0, 90.0, 90.0];
        let (x, y): (Vec<f64>, Vec<f64>) =
            ns.iter().zip(&ys).map(|(n, v)| (n.ln(), v.ln())).unzip();
        let at = |n: f64| interpolate(&x, &y, Slopes::Akima, n.ln()).exp();
        for n in [10.0, 14.0, 18.0, 24.0] {
            assert!(at(n) >= 50.0 - 1e-9, "{n}: {}", at(n));
        }
        for n in [40.0, 48.0, 60.0] {
            assert!((at(n) - 90.0).abs() < 1e-9, "{n}: {}", at(n));
        }
        // Through every point.
        for (n, v) in ns.iter().zip(&ys) {
            assert!((at(*n) / v - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn every_family_gives_positive_curves_over_the_horizon() {
        let h = sampled(|n| 1000.0 / n + 0.5 * n, &[1, 2, 4, 8, 16, 32, 64]);
        for family in Family::FITTED {
            for metric in Metric::ALL {
                if let Some(fit) = super::fit(family, &h, &options(metric), 2.0) {
                    assert!(positive_over_horizon(&fit.curve), "{family:?} {metric:?}");
                }
            }
        }
    }
}

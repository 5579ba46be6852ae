//! Fundamental efficiency factors of a code region, fitted at a few process
//! counts and extrapolated.
//!
//! The parallel efficiency of a region is the product of factors in [0, 1]:
//!
//! ```text
//! η = LB · Ser · Trf        LB = (Σᵢ tᵢ) / (P · maxᵢ tᵢ)
//! ```
//!
//! tᵢ being the compute time of process i of P. Serialization and transfer
//! are measured elsewhere and come in as numbers.
//!
//! Each factor, measured at a few low process counts P ≥ 1, is fitted by least
//! squares with one of three families g(P), all with g(1) = a0:
//!
//! ```text
//! Constant   g(P) = a0
//! Amdahl     g(P) = a0 / (f + (1 − f)·P)                 a0 ∈ [0, 1], f ∈ [0, 1]
//! Pipeline   g(P) = a0·P / ((1 − f) + f·(2P − 1))
//!                 = a0·P / (1 + 2f·(P − 1))              a0 ∈ [0, 1], f ∈ [a0/2, 1]
//! ```
//!
//! The bounds keep every value in [0, 1] at every P ≥ 1: Amdahl's denominator
//! is at least 1; the pipeline's a0·P ≤ 1 + 2f·(P − 1) follows from 2f ≥ a0
//! and a0 ≤ 1. Amdahl with f = 1 and the pipeline with f = 1/2 are constant;
//! the pipeline rises towards a0/(2f) when f < 1/2 and falls towards it when
//! f > 1/2.
//!
//! For a fixed f a family is a0·h(P), linear in a0, whose least-squares value
//! is Σ y·h / Σ h², clamped to its interval (the residual sum of squares is a
//! parabola in a0, so the clamped optimum is the constrained one). What is
//! left is a function of f alone, minimised on a grid over [0, 1] and refined
//! by golden-section search around the best grid point: no derivatives,
//! deterministic, a few thousand evaluations.

/// Grid intervals over f ∈ [0, 1] before the golden-section refinement.
const F_GRID: usize = 64;

/// Golden-section search stops when its bracket is this narrow.
const F_TOLERANCE: f64 = 1e-13;

/// Errors within this fraction of the best one count as equal when choosing a
/// family, and the simpler family is taken.
const RELATIVE_TIE: f64 = 0.05;

/// Errors within this of the best one count as equal (exact data).
const ABSOLUTE_TIE: f64 = 1e-9;

/// Points of the log-spaced scan for change points of the dominant factor.
const SCAN_POINTS: usize = 4096;

/// The shape of a factor as a function of the process count: g(P) = a0
/// (`Constant`), a0 / (f + (1 − f)·P), which decays like Amdahl's speed-up
/// per process (`Amdahl`), or a0·P / (1 + 2f·(P − 1)), a pipeline's fill
/// and drain (`Pipeline`).
pub use crate::domain::FactorFamily as Family;

impl Family {
    /// Every family, in order of preference: the simplest first.
    pub const ALL: [Family; 3] = [Family::Constant, Family::Amdahl, Family::Pipeline];

    /// h(P) with g(P) = a0·h(P).
    fn shape(self, f: f64, p: f64) -> f64 {
        match self {
            Family::Constant => 1.0,
            Family::Amdahl => 1.0 / (f + (1.0 - f) * p),
            Family::Pipeline => p / (1.0 + 2.0 * f * (p - 1.0)),
        }
    }

    /// The largest a0 allowed with this f.
    fn a0_max(self, f: f64) -> f64 {
        match self {
            Family::Pipeline => (2.0 * f).min(1.0),
            Family::Constant | Family::Amdahl => 1.0,
        }
    }

    /// The f that makes the family constant: kept when the data cannot tell
    /// f apart (one point, or constant data).
    fn flat_f(self) -> f64 {
        match self {
            Family::Constant => 0.0,
            Family::Amdahl => 1.0,
            Family::Pipeline => 0.5,
        }
    }
}

/// A factor fitted to its measurements.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FactorFit {
    pub family: Family,
    /// The value at P = 1, in [0, 1].
    pub a0: f64,
    /// The shape parameter, in [0, 1] (Pipeline: in [a0/2, 1]); 0 and unused
    /// for Constant.
    pub f: f64,
    /// Root-mean-square residual of the fit over its points.
    pub rmse: f64,
    /// Leave-one-out cross-validated RMSE: each point predicted by a refit on
    /// the others. Only with at least 3 distinct process counts.
    pub cv_rmse: Option<f64>,
    /// Number of points the fit used.
    pub points: usize,
}

impl FactorFit {
    /// The fitted factor at `p` processes, in [0, 1]. P below 1 (and NaN) is
    /// taken as 1.
    pub fn at(&self, p: f64) -> f64 {
        self.a0 * self.family.shape(self.f, p.max(1.0))
    }

    /// The error by which families are compared: the cross-validated RMSE
    /// where there is one, otherwise the RMSE of the fit.
    pub fn selection_error(&self) -> f64 {
        self.cv_rmse.unwrap_or(self.rmse)
    }
}

/// Load balance LB = (Σᵢ tᵢ) / (P · maxᵢ tᵢ) of the compute times of the P
/// processes: 1 when all are equal, 1/P when one process does all the work.
/// `None` for no times, a time that is negative or not finite, or all zero.
pub fn load_balance(times: &[f64]) -> Option<f64> {
    if times.iter().any(|t| !t.is_finite() || *t < 0.0) {
        return None;
    }
    let max = times.iter().copied().fold(0.0, f64::max);
    if max <= 0.0 {
        return None;
    }
    // Each time over the maximum, then their mean: no sum or product of
    // times, which could overflow for times near f64::MAX.
    let sum: f64 = times.iter().map(|t| t / max).sum();
    Some((sum / times.len() as f64).clamp(0.0, 1.0))
}

/// The measurements a fit can use: P finite and at least 1, value finite.
fn usable(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .copied()
        .filter(|(p, y)| p.is_finite() && *p >= 1.0 && y.is_finite())
        .collect()
}

/// For a fixed f: the least-squares a0, clamped to its interval, and the
/// residual sum of squares.
fn profile(family: Family, f: f64, points: &[(f64, f64)]) -> (f64, f64) {
    let (yh, hh) = points.iter().fold((0.0, 0.0), |(yh, hh), &(p, y)| {
        let h = family.shape(f, p);
        (yh + y * h, hh + h * h)
    });
    let a0 = if hh > 0.0 { yh / hh } else { 0.0 };
    let a0 = a0.clamp(0.0, family.a0_max(f));
    let rss = points
        .iter()
        .map(|&(p, y)| (y - a0 * family.shape(f, p)).powi(2))
        .sum();
    (a0, rss)
}

/// The least-squares (a0, f) of a family on non-empty usable points.
fn parameters(family: Family, points: &[(f64, f64)]) -> (f64, f64) {
    if family == Family::Constant {
        let mean = points.iter().map(|(_, y)| y).sum::<f64>() / points.len() as f64;
        return (mean.clamp(0.0, 1.0), 0.0);
    }
    // Start from the flat shape, replaced only by a strictly better f, so
    // that data which cannot tell f apart keep it.
    let mut best_f = family.flat_f();
    let (mut best_a0, mut best_rss) = profile(family, best_f, points);
    for k in 0..=F_GRID {
        let f = k as f64 / F_GRID as f64;
        let (a0, rss) = profile(family, f, points);
        if rss < best_rss {
            (best_f, best_a0, best_rss) = (f, a0, rss);
        }
    }
    // Golden-section search over the grid cells either side of the best point.
    let step = 1.0 / F_GRID as f64;
    let (mut lo, mut hi) = ((best_f - step).max(0.0), (best_f + step).min(1.0));
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let mut x1 = hi - ratio * (hi - lo);
    let mut x2 = lo + ratio * (hi - lo);
    let mut r1 = profile(family, x1, points).1;
    let mut r2 = profile(family, x2, points).1;
    while hi - lo > F_TOLERANCE {
        if r1 <= r2 {
            hi = x2;
            (x2, r2) = (x1, r1);
            x1 = hi - ratio * (hi - lo);
            r1 = profile(family, x1, points).1;
        } else {
            lo = x1;
            (x1, r1) = (x2, r2);
            x2 = lo + ratio * (hi - lo);
            r2 = profile(family, x2, points).1;
        }
    }
    let f = (lo + hi) / 2.0;
    let (a0, rss) = profile(family, f, points);
    if rss < best_rss {
        (a0, f)
    } else {
        (best_a0, best_f)
    }
}

fn distinct_processes(points: &[(f64, f64)]) -> usize {
    let mut ps: Vec<f64> = points.iter().map(|(p, _)| *p).collect();
    ps.sort_by(f64::total_cmp);
    ps.dedup();
    ps.len()
}

/// Fits one family to `(P, value)` measurements, with its RMSE and, with at
/// least 3 distinct P, its leave-one-out RMSE. Points with P < 1 or anything
/// not finite are ignored; `None` when no point is left.
pub fn fit_family(family: Family, points: &[(f64, f64)]) -> Option<FactorFit> {
    let points = usable(points);
    if points.is_empty() {
        return None;
    }
    let n = points.len() as f64;
    let (a0, f) = parameters(family, &points);
    let residual = |&(p, y): &(f64, f64), a0: f64, f: f64| y - a0 * family.shape(f, p);
    let rmse = (points
        .iter()
        .map(|pt| residual(pt, a0, f).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let cv_rmse = (distinct_processes(&points) >= 3).then(|| {
        let mut rest = Vec::with_capacity(points.len() - 1);
        let press: f64 = (0..points.len())
            .map(|i| {
                rest.clear();
                rest.extend(points[..i].iter().chain(&points[i + 1..]).copied());
                let (a0, f) = parameters(family, &rest);
                residual(&points[i], a0, f).powi(2)
            })
            .sum();
        (press / n).sqrt()
    });
    Some(FactorFit {
        family,
        a0,
        f,
        rmse,
        cv_rmse,
        points: points.len(),
    })
}

/// Fits every family and keeps the one of smallest selection error
/// (leave-one-out RMSE with at least 3 distinct P, the fit's RMSE with fewer),
/// preferring the simpler family (Constant, then Amdahl, then Pipeline)
/// whose error is within 5 % or 1e-9 of the smallest. A single point is
/// therefore Constant. `None` when no point is usable.
pub fn fit(points: &[(f64, f64)]) -> Option<FactorFit> {
    let fits: Vec<FactorFit> = Family::ALL
        .iter()
        .filter_map(|&family| fit_family(family, points))
        .collect();
    let best = fits
        .iter()
        .map(FactorFit::selection_error)
        .fold(f64::INFINITY, f64::min);
    let tolerance = (RELATIVE_TIE * best).max(ABSOLUTE_TIE);
    fits.into_iter()
        .find(|fit| fit.selection_error() <= best + tolerance)
}

/// The factors present among `fits` at `p` processes (`None` where missing).
pub fn factors_at(fits: &[Option<&FactorFit>], p: f64) -> Vec<Option<f64>> {
    fits.iter().map(|fit| fit.map(|fit| fit.at(p))).collect()
}

/// The efficiency η from the factors' values at one process count (as
/// `factors_at` gives them): the product of those present; `None` when none
/// is.
pub fn efficiency(values: &[Option<f64>]) -> Option<f64> {
    values
        .iter()
        .flatten()
        .fold(None, |product, value| Some(product.unwrap_or(1.0) * value))
}

/// The index of the smallest of the values present, the factor that limits
/// efficiency most; the first of equal ones. `None` when none is present.
pub fn dominant(values: &[Option<f64>]) -> Option<usize> {
    smallest(values.iter().copied())
}

fn smallest(values: impl Iterator<Item = Option<f64>>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, value) in values.enumerate() {
        if let Some(v) = value
            && best.is_none_or(|(_, b)| v < b)
        {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i)
}

fn dominant_at(fits: &[Option<&FactorFit>], p: u64) -> Option<usize> {
    smallest(fits.iter().map(|fit| fit.map(|fit| fit.at(p as f64))))
}

/// A process count at which another factor becomes dominant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangePoint {
    /// The first process count at which `to` is dominant.
    pub processes: u64,
    /// Index of the factor dominant just below.
    pub from: usize,
    /// Index of the factor dominant from `processes` on.
    pub to: usize,
}

/// Integers from `from` to `to` (from < to), log-spaced, both ends included.
fn log_grid(from: u64, to: u64) -> Vec<u64> {
    let ratio = (to as f64 / from as f64).ln();
    let mut grid: Vec<u64> = (0..SCAN_POINTS)
        .map(|k| {
            let x = k as f64 / (SCAN_POINTS - 1) as f64;
            ((from as f64 * (ratio * x).exp()).round() as u64).clamp(from, to)
        })
        .collect();
    grid[0] = from;
    grid[SCAN_POINTS - 1] = to;
    grid.dedup();
    grid
}

/// The process counts between `from` and `to` (indices into `fits`, missing
/// factors ignored) at which the dominant factor changes, in increasing order.
///
/// The scan evaluates a log-spaced grid of a few thousand integers and, where
/// the dominant factor differs between neighbouring grid points, bisects the
/// integers between them for the first one at which it changed; several
/// changes within one grid cell are found one after the other, but a factor
/// that dominates only strictly inside a cell without being found by the
/// bisection can be missed. A change at `from` itself is not reported.
pub fn change_points(fits: &[Option<&FactorFit>], from: u64, to: u64) -> Vec<ChangePoint> {
    let from = from.max(1);
    let mut changes = Vec::new();
    if to <= from || fits.iter().all(Option::is_none) {
        return changes;
    }
    let grid = log_grid(from, to);
    let mut last = (grid[0], dominant_at(fits, grid[0]));
    for &p in &grid[1..] {
        let here = dominant_at(fits, p);
        while here != last.1 {
            // dominant(lo) = last.1 ≠ dominant(hi).
            let (mut lo, mut hi) = (last.0, p);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if dominant_at(fits, mid) == last.1 {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let next = dominant_at(fits, hi);
            if let (Some(from), Some(to)) = (last.1, next) {
                changes.push(ChangePoint {
                    processes: hi,
                    from,
                    to,
                });
            }
            last = (hi, next);
        }
        last = (p, here);
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: [f64; 5] = [1.0, 2.0, 4.0, 8.0, 16.0];

    fn amdahl(a0: f64, f: f64, p: f64) -> f64 {
        a0 / (f + (1.0 - f) * p)
    }

    fn pipeline(a0: f64, f: f64, p: f64) -> f64 {
        a0 * p / ((1.0 - f) + f * (2.0 * p - 1.0))
    }

    fn exact(g: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        PS.iter().map(|&p| (p, g(p))).collect()
    }

    fn given(family: Family, a0: f64, f: f64) -> FactorFit {
        FactorFit {
            family,
            a0,
            f,
            rmse: 0.0,
            cv_rmse: None,
            points: 0,
        }
    }

    #[test]
    fn each_family_recovers_its_parameters_from_exact_data() {
        let fit = fit_family(Family::Amdahl, &exact(|p| amdahl(0.98, 0.9, p))).unwrap();
        assert!((fit.a0 - 0.98).abs() < 1e-6, "{fit:?}");
        assert!((fit.f - 0.9).abs() < 1e-6, "{fit:?}");
        assert!(fit.rmse < 1e-9 && fit.cv_rmse.unwrap() < 1e-9, "{fit:?}");

        let fit = fit_family(Family::Pipeline, &exact(|p| pipeline(0.95, 0.8, p))).unwrap();
        assert!((fit.a0 - 0.95).abs() < 1e-6, "{fit:?}");
        assert!((fit.f - 0.8).abs() < 1e-6, "{fit:?}");
        assert!(fit.rmse < 1e-9 && fit.cv_rmse.unwrap() < 1e-9, "{fit:?}");

        let fit = fit_family(Family::Constant, &exact(|_| 0.93)).unwrap();
        assert!((fit.a0 - 0.93).abs() < 1e-12, "{fit:?}");
        assert_eq!(fit.points, 5);
    }

    #[test]
    fn a_rising_pipeline_is_recovered_too() {
        // f < 1/2: rises from a0 towards a0/(2f) = 0.9.
        let fit = fit_family(Family::Pipeline, &exact(|p| pipeline(0.54, 0.3, p))).unwrap();
        assert!(
            (fit.a0 - 0.54).abs() < 1e-6 && (fit.f - 0.3).abs() < 1e-6,
            "{fit:?}"
        );
    }

    #[test]
    fn selection_picks_the_family_the_exact_data_came_from() {
        let chosen = |points: Vec<(f64, f64)>| fit(&points).unwrap().family;
        assert_eq!(chosen(exact(|_| 0.93)), Family::Constant);
        assert_eq!(chosen(exact(|p| amdahl(0.98, 0.9, p))), Family::Amdahl);
        assert_eq!(chosen(exact(|p| pipeline(0.95, 0.8, p))), Family::Pipeline);
        assert_eq!(chosen(exact(|p| pipeline(0.54, 0.3, p))), Family::Pipeline);
        // With 3 or more distinct P the choice is cross-validated.
        assert!(
            fit(&exact(|p| amdahl(0.98, 0.9, p)))
                .unwrap()
                .cv_rmse
                .is_some()
        );
    }

    #[test]
    fn a_single_point_is_a_constant() {
        let fit = fit(&[(4.0, 0.8)]).unwrap();
        assert_eq!(fit.family, Family::Constant);
        assert_eq!((fit.a0, fit.points, fit.cv_rmse), (0.8, 1, None));
        assert_eq!(fit.at(1e6), 0.8);
    }

    #[test]
    fn two_points_that_fall_are_amdahl_by_their_fit_error() {
        // Both two-parameter families fit two points exactly; Amdahl is simpler.
        let fit = fit(&[(1.0, 0.98), (2.0, 0.9)]).unwrap();
        assert_eq!(fit.family, Family::Amdahl);
        assert!(fit.cv_rmse.is_none() && fit.rmse < 1e-9, "{fit:?}");
    }

    #[test]
    fn no_usable_point_gives_no_fit() {
        assert!(fit(&[]).is_none());
        assert!(fit(&[(0.5, 0.9), (2.0, f64::NAN)]).is_none());
        assert!(fit_family(Family::Amdahl, &[]).is_none());
    }

    #[test]
    fn values_above_one_are_clamped_to_one() {
        let points = [(1.0, 1.02), (2.0, 1.0), (4.0, 1.0), (8.0, 0.99)];
        for family in Family::ALL {
            let fit = fit_family(family, &points).unwrap();
            assert_eq!(fit.a0, 1.0, "{fit:?}");
            assert!((0.0..=1.0).contains(&fit.f), "{fit:?}");
            for p in [1.0, 2.0, 3.0, 100.0, 1e6] {
                assert!((0.0..=1.0).contains(&fit.at(p)), "{p}: {fit:?}");
            }
        }
        let fit = fit(&points).unwrap();
        assert!(fit.at(1.0) <= 1.0, "{fit:?}");
    }

    #[test]
    fn a_pipeline_never_exceeds_one_even_when_the_data_rise_past_it() {
        // Rising data heading above 1: a0 ≤ 2f caps the asymptote a0/(2f) at 1.
        let points = exact(|p| pipeline(0.6, 0.25, p));
        let fit = fit_family(Family::Pipeline, &points).unwrap();
        assert!(fit.f >= fit.a0 / 2.0 - 1e-15, "{fit:?}");
        assert!(fit.at(1e7) <= 1.0, "{fit:?}");
    }

    #[test]
    fn load_balance_of_hand_computed_times() {
        // 10 / (4 · 4)
        assert_eq!(load_balance(&[1.0, 2.0, 3.0, 4.0]), Some(0.625));
        assert_eq!(load_balance(&[3.0; 7]), Some(1.0));
        // One process does all the work: 1/P.
        assert_eq!(load_balance(&[0.0, 0.0, 0.0, 5.0]), Some(0.25));
        assert_eq!(load_balance(&[]), None);
        assert_eq!(load_balance(&[0.0, 0.0]), None);
        assert_eq!(load_balance(&[1.0, -1.0]), None);
        assert_eq!(load_balance(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn load_balance_of_times_near_the_largest_float_does_not_overflow() {
        // Their sum, or P times the maximum, is infinite.
        assert_eq!(load_balance(&[1e308, 1e308]), Some(1.0));
        assert_eq!(load_balance(&[f64::MAX, f64::MAX, f64::MAX]), Some(1.0));
        assert_eq!(load_balance(&[1e308, 1.0]), Some(0.5));
        let lb = load_balance(&[1.7e308, 1e-300]).unwrap();
        assert!((lb - 0.5).abs() < 1e-12, "{lb}");
    }

    #[test]
    fn the_dominant_factor_is_the_smallest_present_and_the_first_of_equals() {
        assert_eq!(dominant(&[Some(0.9), Some(0.8), Some(0.95)]), Some(1));
        assert_eq!(dominant(&[Some(0.8), Some(0.9), Some(0.8)]), Some(0));
        assert_eq!(dominant(&[None, Some(0.9), None]), Some(1));
        assert_eq!(dominant(&[None, None]), None);
        assert_eq!(dominant(&[]), None);
    }

    #[test]
    fn efficiency_is_the_product_of_the_factors_present() {
        let lb = given(Family::Constant, 0.9, 0.0);
        let ser = given(Family::Amdahl, 1.0, 0.5);
        // At P = 3: 0.9 · 1 / (0.5 + 0.5 · 3) = 0.45.
        let eta = efficiency(&factors_at(&[Some(&lb), None, Some(&ser)], 3.0)).unwrap();
        assert!((eta - 0.45).abs() < 1e-15);
        assert_eq!(efficiency(&[None, None]), None);
        assert_eq!(factors_at(&[Some(&lb), None], 2.0), vec![Some(0.9), None]);
    }

    #[test]
    fn a_falling_amdahl_factor_takes_over_at_the_hand_computed_count() {
        // 1 / (0.999 + 0.001·P) < 0.9  ⟺  P > (1/0.9 − 0.999) / 0.001 = 112.1…
        let constant = given(Family::Constant, 0.9, 0.0);
        let falling = given(Family::Amdahl, 1.0, 0.999);
        assert!(falling.at(112.0) > 0.9 && falling.at(113.0) < 0.9);
        let changes = change_points(&[Some(&constant), Some(&falling)], 1, 10_000_000);
        assert_eq!(
            changes,
            [ChangePoint {
                processes: 113,
                from: 0,
                to: 1
            }]
        );
    }

    #[test]
    fn a_change_far_out_is_found_by_bisection_between_grid_points() {
        // 1 / (0.999999 + 1e-6·P) < 0.9  ⟺  P > (1/0.9 − 0.999999) / 1e-6 = 111112.1…
        let constant = given(Family::Constant, 0.9, 0.0);
        let falling = given(Family::Amdahl, 1.0, 0.999_999);
        assert!(falling.at(111_112.0) > 0.9 && falling.at(111_113.0) < 0.9);
        let changes = change_points(&[Some(&falling), Some(&constant)], 1, 10_000_000);
        assert_eq!(
            changes,
            [ChangePoint {
                processes: 111_113,
                from: 1,
                to: 0
            }]
        );
    }

    #[test]
    fn successive_changes_are_reported_in_order() {
        // P/(P + 1) (pipeline a0 = 0.5, f = 0.25) rises past 0.85 at P = 6
        // (5/6 < 0.85 < 6/7); 1/(0.999 + 0.001·P) falls below 0.85 at
        // P > (1/0.85 − 0.999)/0.001 = 177.5, so at 178.
        let rising = given(Family::Pipeline, 0.5, 0.25);
        let constant = given(Family::Constant, 0.85, 0.0);
        let falling = given(Family::Amdahl, 1.0, 0.999);
        let changes = change_points(
            &[Some(&rising), Some(&constant), Some(&falling)],
            1,
            1_000_000,
        );
        let expected = [
            ChangePoint {
                processes: 6,
                from: 0,
                to: 1,
            },
            ChangePoint {
                processes: 178,
                from: 1,
                to: 2,
            },
        ];
        assert_eq!(changes, expected);
    }

    #[test]
    fn one_factor_dominating_throughout_gives_no_change_point() {
        let low = given(Family::Amdahl, 0.5, 0.9);
        let high = given(Family::Constant, 0.6, 0.0);
        assert!(change_points(&[Some(&high), Some(&low)], 1, 10_000_000).is_empty());
        // Nor does an empty or reversed range, or no factor at all.
        let falling = given(Family::Amdahl, 1.0, 0.999);
        assert!(change_points(&[Some(&high), Some(&falling)], 500, 500).is_empty());
        assert!(change_points(&[Some(&high), Some(&falling)], 500, 2).is_empty());
        assert!(change_points(&[None, None], 1, 1000).is_empty());
    }

    #[test]
    fn a_missing_factor_is_ignored() {
        let constant = given(Family::Constant, 0.9, 0.0);
        let falling = given(Family::Amdahl, 1.0, 0.999);
        let changes = change_points(&[None, Some(&constant), None, Some(&falling)], 1, 1000);
        assert_eq!(
            changes,
            [ChangePoint {
                processes: 113,
                from: 1,
                to: 3
            }]
        );
        // Only one factor known: it dominates throughout.
        assert!(change_points(&[Some(&falling), None], 1, 1000).is_empty());
    }

    #[test]
    fn the_scan_starts_at_its_lower_end() {
        // From 200 on the falling factor (below 0.9 from 113) dominates already.
        let constant = given(Family::Constant, 0.9, 0.0);
        let falling = given(Family::Amdahl, 1.0, 0.999);
        assert!(change_points(&[Some(&constant), Some(&falling)], 200, 100_000).is_empty());
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// 1 to 8 distinct process counts with values in [0, 1].
    fn measurements() -> impl Strategy<Value = Vec<(f64, f64)>> {
        prop::collection::btree_map(1u32..=256, 0.0f64..=1.0, 1..8)
            .prop_map(|points| points.into_iter().map(|(p, y)| (f64::from(p), y)).collect())
    }

    proptest! {
        // Failing seeds are kept beside this file
        // (efficiency.proptest-regressions), not at the top of the project.
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        })]

        /// Whatever the data, every family's fit stays in [0, 1] at any P ≥ 1,
        /// within its parameter bounds.
        #[test]
        fn fitted_factors_stay_between_zero_and_one(
            points in measurements(),
            queries in prop::collection::vec(1u32..=1_000_000, 1..16),
        ) {
            let chosen = fit(&points).unwrap();
            for family in Family::ALL {
                let fit = fit_family(family, &points).unwrap();
                prop_assert!((0.0..=1.0).contains(&fit.a0), "{fit:?}");
                prop_assert!((0.0..=1.0).contains(&fit.f), "{fit:?}");
                if family == Family::Pipeline {
                    prop_assert!(fit.f >= fit.a0 / 2.0, "{fit:?}");
                }
                for p in queries.iter().copied().chain([1, 2, 1_000_000]) {
                    let value = fit.at(f64::from(p));
                    prop_assert!((0.0..=1.0).contains(&value), "{p}: {value} {fit:?}");
                }
            }
            prop_assert!((0.0..=1.0).contains(&chosen.at(1e6)), "{chosen:?}");
        }

        /// The chosen family's selection error is within the tie tolerance of
        /// every family's.
        #[test]
        fn the_chosen_family_has_a_near_smallest_error(points in measurements()) {
            let chosen = fit(&points).unwrap();
            for family in Family::ALL {
                let other = fit_family(family, &points).unwrap();
                let tolerance = (RELATIVE_TIE * other.selection_error()).max(ABSOLUTE_TIE);
                prop_assert!(
                    chosen.selection_error() <= other.selection_error() + tolerance,
                    "{chosen:?} vs {other:?}"
                );
            }
        }
    }
}

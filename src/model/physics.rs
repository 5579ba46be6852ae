//! Physics-based model families (docs/model.md §4): the parallel fraction p of
//! strong scaling, the scaled parallel fraction p* of weak scaling and the
//! idle fraction k, fitted to an application's history.
//!
//! Where the empirical predictor of fit.rs follows whatever shape the history
//! has, these fits have two parameters with a physical meaning and hard
//! bounds: they extrapolate the way theory says scaling behaves, and they give
//! the plausibility checks of §4 numbers to work with.
//!
//! Input is one point per measured node count, `(nodes, value, weight)`, the
//! weight being the summed quality of the runs there (fit.rs's `NodePoint`).
//! Points that are not finite and positive are ignored. Measurement noise is
//! relative, so every fit minimises the weighted *relative* squared error
//! (weights weight / value²), as fit.rs does; the reported %RMSE is docs/model.md
//! §2's formula, unweighted, over the points used, as fit.rs reports it.

use super::theory::{Amdahl, Gustafson};
use super::{Metric, ScalingMode, lsq};

/// Strong scaling: T(n) = T1·[(1 − p) + p/n].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmdahlFit {
    /// Parallel fraction, in [0, 1].
    pub p: f64,
    /// Time on one node, seconds.
    pub t1_s: f64,
    pub rmse_pct: f64,
    /// Number of history points the fit used.
    pub points: usize,
}

impl AmdahlFit {
    /// The fitted time on `n` nodes, seconds.
    pub fn time_s(&self, n: f64) -> f64 {
        self.t1_s * ((1.0 - self.p) + self.p / n)
    }
}

/// Weak scaling, fixed work per node: T(n) = T1·n / (1 + (n − 1)·p*).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GustafsonFit {
    /// Scaled parallel fraction, in [0, 1].
    pub p_star: f64,
    /// Time on one node (with one node's share of the work), seconds.
    pub t1_s: f64,
    pub rmse_pct: f64,
    /// Number of history points the fit used.
    pub points: usize,
}

impl GustafsonFit {
    /// The fitted time on `n` nodes, seconds.
    pub fn time_s(&self, n: f64) -> f64 {
        self.t1_s * n / (1.0 + (n - 1.0) * self.p_star)
    }
}

/// The idle fraction k of docs/model.md §4, with the power of one busy node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleFit {
    /// Fraction of a node's full power drawn when idle, in [0, 1].
    pub k: f64,
    /// Power of one busy node, watts.
    pub p1_w: f64,
    pub rmse_pct: f64,
    /// Whether the history can tell k at all. Idle nodes only draw power
    /// while others run the serial part, so k weighs with (1 − p) (strong) or
    /// (1 − p*) (weak): when taking k from 0 to 1 moves no measured point by
    /// [`IDLE_INFLUENCE_MIN`] or more, every k fits about as well as any
    /// other, and the reported one (the best fit, 0 when k has no influence
    /// at all) must not be used to extrapolate.
    pub identifiable: bool,
}

/// The smallest relative change of some measured point's power, as k goes
/// from 0 to 1, for k to count as identifiable. 1 % is below the scatter of
/// power measurements (docs/model.md §2's default allowed %RMSE is 2 %), so a
/// smaller influence leaves k to the noise.
pub const IDLE_INFLUENCE_MIN: f64 = 0.01;

/// Grid of the bounded search for p*: its minimum brackets the golden-section
/// refinement, and its resolution (1/200) keeps the search from settling in a
/// local minimum far from the global one.
const P_STAR_GRID: usize = 200;

/// A usable history point, in units where the values average 1 (every fit
/// here is scale-equivariant, and O(1) numbers keep the normal equations
/// well away from overflow whether values are seconds or megajoules).
#[derive(Debug, Clone, Copy)]
struct Point {
    n: f64,
    y: f64,
    /// Relative-error weight: quality / y².
    w: f64,
}

/// The usable points and the scale they were divided by; `None` unless they
/// span at least two distinct node counts (one node count cannot separate
/// a curve's two parameters).
fn prepare(raw: &[(f64, f64, f64)]) -> Option<(Vec<Point>, f64)> {
    let valid: Vec<(f64, f64, f64)> = raw
        .iter()
        .copied()
        .filter(|&(n, y, w)| {
            n.is_finite() && n > 0.0 && y.is_finite() && y > 0.0 && w.is_finite() && w > 0.0
        })
        .collect();
    let first = valid.first()?.0;
    if valid.iter().all(|&(n, _, _)| n == first) {
        return None;
    }
    let scale = valid
        .iter()
        .map(|&(_, y, _)| y / valid.len() as f64)
        .sum::<f64>();
    let max_w = valid.iter().fold(0.0f64, |m, &(_, _, w)| m.max(w));
    let points: Vec<Point> = valid
        .iter()
        .map(|&(n, y, w)| {
            let y = y / scale;
            Point {
                n,
                y,
                w: (w / max_w) / (y * y),
            }
        })
        .collect();
    // Values so far apart (hundreds of orders of magnitude) that one of them
    // rounds to zero against their mean are no history to fit.
    points
        .iter()
        .all(|p| p.y > 0.0 && p.w.is_finite())
        .then_some((points, scale))
}

/// The %RMSE formula of docs/model.md §2 (as fit.rs computes it), given the
/// model's value at each point.
fn rmse_pct(points: &[Point], model: impl Fn(f64) -> f64) -> f64 {
    let m = points.len() as f64;
    let mean_y = points.iter().map(|p| p.y).sum::<f64>() / m;
    let mse = points
        .iter()
        .map(|p| (p.y - model(p.n)).powi(2))
        .sum::<f64>()
        / m;
    100.0 * mse.sqrt() / mean_y
}

/// Weighted squared error of `model` over the points.
fn sse(points: &[Point], model: impl Fn(f64) -> f64) -> f64 {
    points
        .iter()
        .map(|p| p.w * (p.y - model(p.n)).powi(2))
        .sum()
}

/// The best c in y ≈ c·h(n): Σ w·y·h / Σ w·h². `None` when h vanishes at
/// every point.
fn scale_of(points: &[Point], h: impl Fn(f64) -> f64) -> Option<f64> {
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), p| {
        let h = h(p.n);
        (num + p.w * p.y * h, den + p.w * h * h)
    });
    (den > 0.0).then(|| num / den).filter(|c| c.is_finite())
}

/// Fit Amdahl's law to TtS history.
///
/// T = a + b/n is linear in (a, b) = (T1·(1 − p), T1·p), and p ∈ [0, 1]
/// is a, b ≥ 0. The weighted least-squares problem is convex, so when its
/// unconstrained minimum breaks a bound the constrained one lies on that
/// boundary: the better of T = a (nothing scales, p = 0: e.g. time growing
/// with n) and T = b/n (ideal, p = 1: e.g. super-linear speed-up). The same
/// boundary answer is given when the node counts are too close together for
/// the two-parameter system to be solved.
pub fn fit_amdahl(time: &[(f64, f64, f64)]) -> Option<AmdahlFit> {
    let (points, scale) = prepare(time)?;
    // Columns 1 and n_min/n, both in (0, 1], keep the system well scaled.
    let n_min = points.iter().fold(f64::INFINITY, |m, p| m.min(p.n));
    let rows: Vec<f64> = points.iter().flat_map(|p| [1.0, n_min / p.n]).collect();
    let y: Vec<f64> = points.iter().map(|p| p.y).collect();
    let w: Vec<f64> = points.iter().map(|p| p.w).collect();
    let interior = lsq::fit(&rows, 2, &y, &w)
        .map(|fit| (fit.beta[0], fit.beta[1] * n_min))
        .filter(|&(a, b)| a >= 0.0 && b >= 0.0);
    let (a, b) = match interior {
        Some(ab) => ab,
        None => {
            let a = scale_of(&points, |_| 1.0)?;
            let b = scale_of(&points, |n| 1.0 / n)?;
            let serial = sse(&points, |_| a);
            let ideal = sse(&points, |n| b / n);
            if ideal < serial { (0.0, b) } else { (a, 0.0) }
        }
    };
    let t1 = a + b;
    let fit = AmdahlFit {
        p: (b / t1).clamp(0.0, 1.0),
        t1_s: t1 * scale,
        rmse_pct: rmse_pct(&points, |n| a + b / n),
        points: points.len(),
    };
    [fit.p, fit.t1_s, fit.rmse_pct]
        .iter()
        .all(|v| v.is_finite())
        .then_some(fit)
        .filter(|f| f.t1_s > 0.0)
}

/// Fit Gustafson's law (weak scaling) to TtS history.
///
/// For a fixed p* the model is T1·g(n) with g known, so the best T1 is a
/// weighted mean in closed form; what remains is a one-dimensional,
/// bounded search for p*. The weighted error is scanned on a grid of
/// [`P_STAR_GRID`] + 1 points of [0, 1] (the bounds included, where the
/// boundary answers live), then refined by golden-section search between the
/// grid neighbours of the best grid point.
pub fn fit_gustafson(time: &[(f64, f64, f64)]) -> Option<GustafsonFit> {
    let (points, scale) = prepare(time)?;
    let shape = |p_star: f64| move |n: f64| n / (1.0 + (n - 1.0) * p_star);
    // For 0 < n and p* in [0, 1] the denominator is at least min(n, 1) > 0.
    let error = |p_star: f64| -> f64 {
        match scale_of(&points, shape(p_star)) {
            Some(t1) => sse(&points, |n| t1 * shape(p_star)(n)),
            None => f64::INFINITY,
        }
    };
    let step = 1.0 / P_STAR_GRID as f64;
    let (best_i, best_err) = (0..=P_STAR_GRID).map(|i| (i, error(i as f64 * step))).fold(
        (0, f64::INFINITY),
        |best, (i, e)| {
            if e < best.1 { (i, e) } else { best }
        },
    );
    if !best_err.is_finite() {
        return None;
    }
    let lo = best_i.saturating_sub(1) as f64 * step;
    let hi = ((best_i + 1).min(P_STAR_GRID)) as f64 * step;
    let (refined, refined_err) = golden_section(&error, lo, hi);
    let p_star = if refined_err < best_err {
        refined
    } else {
        best_i as f64 * step
    };
    let t1 = scale_of(&points, shape(p_star))?;
    let fit = GustafsonFit {
        p_star,
        t1_s: t1 * scale,
        rmse_pct: rmse_pct(&points, |n| t1 * shape(p_star)(n)),
        points: points.len(),
    };
    [fit.p_star, fit.t1_s, fit.rmse_pct]
        .iter()
        .all(|v| v.is_finite())
        .then_some(fit)
        .filter(|f| f.t1_s > 0.0)
}

/// The minimum of a unimodal `f` on [lo, hi], and f there.
fn golden_section(f: &impl Fn(f64) -> f64, mut lo: f64, mut hi: f64) -> (f64, f64) {
    let ratio = (5.0f64.sqrt() - 1.0) / 2.0;
    let mut x1 = hi - ratio * (hi - lo);
    let mut x2 = lo + ratio * (hi - lo);
    let (mut f1, mut f2) = (f(x1), f(x2));
    // 80 steps shrink the bracket by 0.618⁸⁰ ≈ 2e-17: to rounding.
    for _ in 0..80 {
        if f1 <= f2 {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - ratio * (hi - lo);
            f1 = f(x1);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + ratio * (hi - lo);
            f2 = f(x2);
        }
    }
    if f1 <= f2 { (x1, f1) } else { (x2, f2) }
}

/// Fit the idle fraction k (and one busy node's power P1) to APC history,
/// given the parallel fraction of the scaling mode: p for strong scaling,
/// p* for weak. `None` for an unknown mode or a fraction outside [0, 1].
///
/// Both laws of §4 (power in watts, P1 the busy-node power) are linear in
/// x = n − 1 after a transform:
/// - strong: P·τ(n) = P1 + P1·k·(1 − p)·x, with τ(n) = (1 − p) + p/n the
///   known relative time (relative errors of P·τ are those of P);
/// - weak: P = P1 + P1·(p* + (1 − p*)·k)·x.
///
/// The intercept gives P1 and the slope k. k ∈ [0, 1] (with P1 > 0) is a
/// convex cone in (intercept, slope), so when the unconstrained k falls
/// outside it the constrained fit is the better of k = 0 and k = 1, each
/// with P1 refitted: P1 and the %RMSE always describe the k reported.
pub fn fit_idle_fraction(
    power: &[(f64, f64, f64)],
    mode: ScalingMode,
    parallel_fraction: f64,
) -> Option<IdleFit> {
    let p = parallel_fraction;
    if !(0.0..=1.0).contains(&p) {
        return None;
    }
    // The law as P(n) = P1·(1 + (α + k·γ)·x) / τ(n).
    let (alpha, gamma) = match mode {
        ScalingMode::Strong => (0.0, 1.0 - p),
        ScalingMode::Weak => (p, 1.0 - p),
        ScalingMode::Unknown => return None,
    };
    let tau = |n: f64| match mode {
        ScalingMode::Strong => (1.0 - p) + p / n,
        _ => 1.0,
    };
    let shape = |k: f64| move |n: f64| (1.0 + (alpha + k * gamma) * (n - 1.0)) / tau(n);

    let (points, scale) = prepare(power)?;
    // Transformed points: y·τ, same relative weight.
    let transformed: Vec<Point> = points
        .iter()
        .map(|pt| Point {
            y: pt.y * tau(pt.n),
            w: pt.w / (tau(pt.n) * tau(pt.n)),
            ..*pt
        })
        .collect();
    let x_scale = points
        .iter()
        .fold(0.0f64, |m, pt| m.max((pt.n - 1.0).abs()));
    let rows: Vec<f64> = transformed
        .iter()
        .flat_map(|pt| [1.0, (pt.n - 1.0) / x_scale])
        .collect();
    let y: Vec<f64> = transformed.iter().map(|pt| pt.y).collect();
    let w: Vec<f64> = transformed.iter().map(|pt| pt.w).collect();
    let interior = lsq::fit(&rows, 2, &y, &w)
        .map(|fit| (fit.beta[0], fit.beta[1] / x_scale))
        .filter(|&(p1, _)| p1 > 0.0 && gamma > 0.0)
        .map(|(p1, slope)| (p1, (slope / p1 - alpha) / gamma))
        .filter(|&(_, k)| (0.0..=1.0).contains(&k));
    let (p1, k) = match interior {
        Some(fit) => fit,
        None => {
            let boundary = |k: f64| {
                scale_of(&points, shape(k)).map(|p1| (p1, k, sse(&points, |n| p1 * shape(k)(n))))
            };
            // On a tie (k without influence) k = 0 is reported.
            match (boundary(0.0), boundary(1.0)) {
                (Some(zero), Some(one)) if one.2 < zero.2 => (one.0, one.1),
                (Some(zero), _) => (zero.0, zero.1),
                (None, Some(one)) => (one.0, one.1),
                (None, None) => return None,
            }
        }
    };
    // k's influence on the curve at the measured points: P(k = 1)/P(k = 0).
    let influence = points.iter().fold(0.0f64, |m, pt| {
        let x = pt.n - 1.0;
        m.max(((1.0 + (alpha + gamma) * x) / (1.0 + alpha * x) - 1.0).abs())
    });
    let fit = IdleFit {
        k,
        p1_w: p1 * scale,
        rmse_pct: rmse_pct(&points, |n| p1 * shape(k)(n)),
        identifiable: influence >= IDLE_INFLUENCE_MIN,
    };
    [fit.k, fit.p1_w, fit.rmse_pct]
        .iter()
        .all(|v| v.is_finite())
        .then_some(fit)
        .filter(|f| f.p1_w > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::theory::{Amdahl, Gustafson};

    const NODES: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

    fn relative(a: f64, b: f64) -> f64 {
        (a - b).abs() / b.abs().max(1e-300)
    }

    fn sample(mut f: impl FnMut(f64) -> f64) -> Vec<(f64, f64, f64)> {
        NODES.iter().map(|&n| (n, f(n), 1.0)).collect()
    }

    /// A deterministic noise source: a 64-bit LCG (Knuth's MMIX constants)
    /// mapped to a relative factor in [1 − amplitude, 1 + amplitude].
    struct Noise(u64);

    impl Noise {
        fn factor(&mut self, amplitude: f64) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
            1.0 + amplitude * (2.0 * unit - 1.0)
        }
    }

    #[test]
    fn exact_amdahl_data_gives_back_p_and_t1() {
        for p in [0.0, 0.3, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let t1 = 3600.0;
            let law = Amdahl { p, k: 0.0 };
            let fit = fit_amdahl(&sample(|n| t1 * law.time(n))).unwrap();
            if p == 0.0 {
                assert!(fit.p.abs() < 1e-9, "p = 0 gave {}", fit.p);
            } else {
                assert!(relative(fit.p, p) < 1e-6, "p = {p} gave {}", fit.p);
            }
            assert!(relative(fit.t1_s, t1) < 1e-6, "p = {p}: T1 {}", fit.t1_s);
            assert!(fit.rmse_pct < 1e-6);
            assert_eq!(fit.points, NODES.len());
            assert!(relative(fit.time_s(20.0), t1 * law.time(20.0)) < 1e-6);
        }
    }

    #[test]
    fn p_stays_in_bounds_when_data_scales_beyond_the_law() {
        // Time growing with n: no parallel part at all.
        let anti = fit_amdahl(&sample(|n| 100.0 * (1.0 + 0.05 * n))).unwrap();
        assert_eq!(anti.p, 0.0);
        assert!(anti.t1_s > 100.0 && anti.rmse_pct.is_finite());
        // Time falling faster than 1/n (super-linear speed-up): ideal.
        let superlinear = fit_amdahl(&sample(|n| 100.0 / n.powf(1.3))).unwrap();
        assert_eq!(superlinear.p, 1.0);
        assert!(superlinear.t1_s > 0.0 && superlinear.rmse_pct.is_finite());
    }

    #[test]
    fn noisy_amdahl_data_gives_p_within_two_hundredths() {
        let mut noise = Noise(42);
        for p in [0.0, 0.5, 0.8, 0.95, 0.999] {
            for amplitude in [0.01, 0.02] {
                let law = Amdahl { p, k: 0.0 };
                let data = sample(|n| 500.0 * law.time(n) * noise.factor(amplitude));
                let fit = fit_amdahl(&data).unwrap();
                assert!(
                    (fit.p - p).abs() <= 0.02 && (0.0..=1.0).contains(&fit.p),
                    "p = {p}, ±{amplitude}: {}",
                    fit.p
                );
            }
        }
    }

    #[test]
    fn weights_pull_the_fit_towards_trusted_points() {
        // One point off the law: the fit follows the others more closely the
        // less that point is trusted.
        let law = Amdahl { p: 0.9, k: 0.0 };
        let mut data = sample(|n| 100.0 * law.time(n));
        data[6].1 *= 1.3;
        let trusted = fit_amdahl(&data).unwrap();
        data[6].2 = 1e-3;
        let doubted = fit_amdahl(&data).unwrap();
        assert!((doubted.p - 0.9).abs() < (trusted.p - 0.9).abs());
    }

    #[test]
    fn fewer_than_two_node_counts_fit_nothing() {
        assert!(fit_amdahl(&[]).is_none());
        assert!(fit_amdahl(&[(4.0, 10.0, 1.0)]).is_none());
        assert!(fit_amdahl(&[(4.0, 10.0, 1.0), (4.0, 11.0, 1.0)]).is_none());
        assert!(fit_gustafson(&[(4.0, 10.0, 1.0)]).is_none());
        assert!(fit_idle_fraction(&[(4.0, 10.0, 1.0)], ScalingMode::Strong, 0.5).is_none());
        // Unusable points do not count towards the two.
        let bad = [(4.0, 10.0, 1.0), (8.0, f64::NAN, 1.0), (16.0, 5.0, 0.0)];
        assert!(fit_amdahl(&bad).is_none());
        assert!(fit_amdahl(&[(4.0, 10.0, 1.0), (8.0, -1.0, 1.0)]).is_none());
    }

    #[test]
    fn two_node_counts_are_enough() {
        let law = Amdahl { p: 0.75, k: 0.0 };
        let fit = fit_amdahl(&[
            (2.0, 40.0 * law.time(2.0), 1.0),
            (8.0, 40.0 * law.time(8.0), 1.0),
        ])
        .unwrap();
        assert!(relative(fit.p, 0.75) < 1e-9 && relative(fit.t1_s, 40.0) < 1e-9);
    }

    #[test]
    fn exact_gustafson_data_gives_back_p_star_and_t1() {
        for p_star in [0.0, 0.25, 0.5, 0.77, 0.9, 0.999, 1.0] {
            let law = Gustafson { p: p_star, k: 0.0 };
            let fit = fit_gustafson(&sample(|n| 120.0 * law.time(n))).unwrap();
            assert!(
                (fit.p_star - p_star).abs() <= 1e-6 * p_star.max(1e-3),
                "p* = {p_star} gave {}",
                fit.p_star
            );
            assert!(relative(fit.t1_s, 120.0) < 1e-6);
            assert!(fit.rmse_pct < 1e-6);
            assert!(relative(fit.time_s(100.0), 120.0 * law.time(100.0)) < 1e-6);
        }
    }

    #[test]
    fn gustafson_p_star_stays_in_bounds() {
        // Time growing faster than linearly: worse than nothing scaling.
        let worse = fit_gustafson(&sample(|n| 10.0 * n.powf(1.2))).unwrap();
        assert_eq!(worse.p_star, 0.0);
        // Time falling with n: better than ideal weak scaling.
        let better = fit_gustafson(&sample(|n| 10.0 / n.powf(0.1))).unwrap();
        assert_eq!(better.p_star, 1.0);
    }

    #[test]
    fn noisy_gustafson_data_gives_p_star_within_two_hundredths() {
        let mut noise = Noise(7);
        for p_star in [0.0, 0.3, 0.6] {
            for amplitude in [0.01, 0.02] {
                let law = Gustafson { p: p_star, k: 0.0 };
                let data = sample(|n| 50.0 * law.time(n) * noise.factor(amplitude));
                let fit = fit_gustafson(&data).unwrap();
                assert!(
                    (fit.p_star - p_star).abs() <= 0.02,
                    "p* = {p_star}, ±{amplitude}: {}",
                    fit.p_star
                );
            }
        }
    }

    #[test]
    fn exact_power_gives_back_k_and_p1() {
        let p1 = 350.0;
        for (p, k) in [
            (0.0, 0.3),
            (0.5, 0.0),
            (0.5, 0.4),
            (0.9, 0.25),
            (0.95, 0.6),
            (0.9, 1.0),
        ] {
            let strong = Amdahl { p, k };
            let fit = fit_idle_fraction(&sample(|n| p1 * strong.power(n)), ScalingMode::Strong, p)
                .unwrap();
            assert!(
                (fit.k - k).abs() < 1e-6,
                "strong p = {p}, k = {k}: {}",
                fit.k
            );
            assert!(relative(fit.p1_w, p1) < 1e-6 && fit.rmse_pct < 1e-6);
            assert!(fit.identifiable);

            let weak = Gustafson { p, k };
            let fit =
                fit_idle_fraction(&sample(|n| p1 * weak.power(n)), ScalingMode::Weak, p).unwrap();
            assert!(
                (fit.k - k).abs() < 1e-6,
                "weak p* = {p}, k = {k}: {}",
                fit.k
            );
            assert!(relative(fit.p1_w, p1) < 1e-6 && fit.rmse_pct < 1e-6);
            assert!(fit.identifiable);
        }
    }

    #[test]
    fn noisy_power_gives_k_near_the_truth() {
        let mut noise = Noise(2024);
        let law = Amdahl { p: 0.8, k: 0.4 };
        let data = sample(|n| 300.0 * law.power(n) * noise.factor(0.02));
        let fit = fit_idle_fraction(&data, ScalingMode::Strong, 0.8).unwrap();
        assert!((fit.k - 0.4).abs() < 0.05, "k = {}", fit.k);
        assert!(fit.identifiable && fit.rmse_pct < 2.0);
    }

    #[test]
    fn k_outside_its_bounds_is_clamped_and_p1_refitted() {
        // Power growing faster than even k = 1 allows: k = 1, and P1 is the
        // best fit for k = 1, not the unconstrained intercept.
        let law = Gustafson { p: 0.5, k: 1.0 };
        let data = sample(|n| 200.0 * law.power(n) * (1.0 + 0.01 * n));
        let fit = fit_idle_fraction(&data, ScalingMode::Weak, 0.5).unwrap();
        assert_eq!(fit.k, 1.0);
        let rmse_for = |p1: f64| {
            let values: Vec<f64> = NODES.iter().map(|&n| p1 * law.power(n)).collect();
            let m = values.len() as f64;
            let mean = data.iter().map(|d| d.1).sum::<f64>() / m;
            let mse = data
                .iter()
                .zip(&values)
                .map(|(d, v)| (d.1 - v).powi(2))
                .sum::<f64>()
                / m;
            100.0 * mse.sqrt() / mean
        };
        assert!(relative(fit.rmse_pct, rmse_for(fit.p1_w)) < 1e-9);
        // Power flatter than even k = 0 allows.
        let law = Amdahl { p: 0.5, k: 0.0 };
        let data = sample(|n| 200.0 * law.power(n) * n.powf(-0.2));
        let fit = fit_idle_fraction(&data, ScalingMode::Strong, 0.5).unwrap();
        assert_eq!(fit.k, 0.0);
    }

    #[test]
    fn k_is_not_identifiable_when_every_node_is_busy_all_the_time() {
        for (mode, p) in [(ScalingMode::Strong, 1.0), (ScalingMode::Weak, 1.0)] {
            let data = sample(|n| 250.0 * n);
            let fit = fit_idle_fraction(&data, mode, p).unwrap();
            assert!(!fit.identifiable, "{mode:?}");
            assert_eq!(fit.k, 0.0);
            assert!(relative(fit.p1_w, 250.0) < 1e-9 && fit.rmse_pct < 1e-9);
        }
        // Nearly ideal: k from 0 to 1 moves P(64) by 63·(1 − p) = 0.63 %.
        let law = Amdahl { p: 0.9999, k: 0.5 };
        let fit = fit_idle_fraction(
            &sample(|n| 250.0 * law.power(n)),
            ScalingMode::Strong,
            0.9999,
        )
        .unwrap();
        assert!(!fit.identifiable);
        assert!((0.0..=1.0).contains(&fit.k));
        // The same p over a wider range of node counts does tell k.
        let wide: Vec<(f64, f64, f64)> = [1.0, 64.0, 512.0]
            .iter()
            .map(|&n| (n, 250.0 * law.power(n), 1.0))
            .collect();
        let fit = fit_idle_fraction(&wide, ScalingMode::Strong, 0.9999).unwrap();
        assert!(fit.identifiable && (fit.k - 0.5).abs() < 1e-6);
    }

    #[test]
    fn unknown_mode_or_bad_fraction_fits_nothing() {
        let data = sample(|n| 100.0 * n);
        assert!(fit_idle_fraction(&data, ScalingMode::Unknown, 0.5).is_none());
        for p in [-0.1, 1.1, f64::NAN, f64::INFINITY] {
            assert!(fit_idle_fraction(&data, ScalingMode::Strong, p).is_none());
        }
    }

    #[test]
    fn extreme_but_finite_inputs_give_finite_answers_or_none() {
        let cases: [&[(f64, f64, f64)]; 4] = [
            &[(1.0, 1e-300, 1.0), (2.0, 1e300, 1.0)],
            &[(1e-300, 1.0, 1e-300), (1e300, 2.0, 1e300)],
            &[(1000.0, 5.0, 1.0), (1001.0, 5.0, 1.0)],
            &[
                (1.0, f64::MAX, 1.0),
                (2.0, f64::MAX, 1.0),
                (3.0, f64::MIN_POSITIVE, 1.0),
            ],
        ];
        for data in cases {
            if let Some(f) = fit_amdahl(data) {
                assert!(f.p.is_finite() && f.t1_s.is_finite() && f.rmse_pct.is_finite());
                assert!((0.0..=1.0).contains(&f.p));
            }
            if let Some(f) = fit_gustafson(data) {
                assert!(f.p_star.is_finite() && f.t1_s.is_finite() && f.rmse_pct.is_finite());
            }
            for mode in [ScalingMode::Strong, ScalingMode::Weak] {
                if let Some(f) = fit_idle_fraction(data, mode, 0.5) {
                    assert!(f.k.is_finite() && f.p1_w.is_finite() && f.rmse_pct.is_finite());
                    assert!((0.0..=1.0).contains(&f.k));
                }
            }
        }
    }
}

/// An application's physics model (docs/model.md §4): its time law from TtS
/// history, and its power law where the idle fraction could be fitted from
/// APC history. It gives plausibility checks for the empirical predictor.
#[derive(Debug, Clone, PartialEq)]
pub struct Physics {
    pub mode: ScalingMode,
    /// Amdahl's p (strong) or Gustafson's p* (weak).
    pub parallel_fraction: f64,
    pub t1_s: f64,
    pub time_rmse_pct: f64,
    pub idle: Option<IdleFit>,
}

/// The least relative departure from the physics model that counts as
/// implausible, however well the model fits: the laws are idealisations
/// (no communication growth, no memory effects).
pub const DEPARTURE_MIN: f64 = 0.10;

impl Physics {
    /// Fit the laws of `mode` to per-node-count time and power points
    /// `(nodes, value, weight)`; `None` for an unknown mode or too little
    /// time history.
    pub fn fit(
        mode: ScalingMode,
        time: &[(f64, f64, f64)],
        power: &[(f64, f64, f64)],
    ) -> Option<Physics> {
        let (parallel_fraction, t1_s, time_rmse_pct) = match mode {
            ScalingMode::Unknown => return None,
            ScalingMode::Strong => fit_amdahl(time).map(|f| (f.p, f.t1_s, f.rmse_pct))?,
            ScalingMode::Weak => fit_gustafson(time).map(|f| (f.p_star, f.t1_s, f.rmse_pct))?,
        };
        Some(Physics {
            mode,
            parallel_fraction,
            t1_s,
            time_rmse_pct,
            idle: fit_idle_fraction(power, mode, parallel_fraction),
        })
    }

    /// The law's value of `metric` on `n` nodes; power and energy only where
    /// the idle fraction was fitted.
    pub fn value(&self, metric: Metric, n: f64) -> Option<f64> {
        let p = self.parallel_fraction;
        let time = match self.mode {
            ScalingMode::Strong => self.t1_s * Amdahl { p, k: 0.0 }.time(n),
            ScalingMode::Weak => self.t1_s * Gustafson { p, k: 0.0 }.time(n),
            ScalingMode::Unknown => return None,
        };
        if metric == Metric::Tts {
            return Some(time);
        }
        let idle = self.idle.as_ref()?;
        let power = idle.p1_w
            * match self.mode {
                ScalingMode::Strong => Amdahl { p, k: idle.k }.power(n),
                _ => Gustafson { p, k: idle.k }.power(n),
            };
        Some(match metric {
            Metric::Apc => power,
            _ => power * time,
        })
    }

    /// How well the law of `metric` fits the history, %RMSE.
    pub fn rmse_pct(&self, metric: Metric) -> Option<f64> {
        let power = self.idle.as_ref().map(|i| i.rmse_pct);
        match metric {
            Metric::Tts => Some(self.time_rmse_pct),
            Metric::Apc => power,
            Metric::Ets => power.map(|p| p + self.time_rmse_pct),
        }
    }

    /// Whether `predicted` departs from the law of `metric` at `n` by more
    /// than the law's own misfit explains: by more than three times its
    /// %RMSE, and at least [`DEPARTURE_MIN`].
    pub fn departs(&self, metric: Metric, n: f64, predicted: f64) -> bool {
        let (Some(law), Some(rmse)) = (self.value(metric, n), self.rmse_pct(metric)) else {
            return false;
        };
        let tolerance = DEPARTURE_MIN.max(3.0 * rmse / 100.0);
        law > 0.0 && ((predicted - law) / law).abs() > tolerance
    }
}

#[cfg(test)]
mod physics_tests {
    use super::*;

    #[test]
    fn the_physics_model_reproduces_its_laws_and_flags_departures() {
        let law = Amdahl { p: 0.95, k: 0.4 };
        let (t1, p1) = (3600.0, 300.0);
        let counts = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
        let time: Vec<_> = counts.iter().map(|&n| (n, t1 * law.time(n), 1.0)).collect();
        let power: Vec<_> = counts
            .iter()
            .map(|&n| (n, p1 * law.power(n), 1.0))
            .collect();
        let physics = Physics::fit(ScalingMode::Strong, &time, &power).unwrap();
        assert!((physics.parallel_fraction - 0.95).abs() < 1e-6);
        let idle = physics.idle.as_ref().unwrap();
        assert!((idle.k - 0.4).abs() < 1e-6 && idle.identifiable);
        for n in [3.0, 64.0, 128.0] {
            let energy = t1 * p1 * law.energy(n);
            let got = physics.value(Metric::Ets, n).unwrap();
            assert!((got / energy - 1.0).abs() < 1e-6, "{n}: {got} vs {energy}");
            // 5 % off is within the tolerance, 20 % is not.
            assert!(!physics.departs(Metric::Ets, n, 1.05 * energy));
            assert!(physics.departs(Metric::Ets, n, 1.2 * energy));
        }
        assert!(Physics::fit(ScalingMode::Unknown, &time, &power).is_none());
        // Without power history: time only.
        let physics = Physics::fit(ScalingMode::Strong, &time, &[]).unwrap();
        assert!(physics.value(Metric::Tts, 64.0).is_some());
        assert!(physics.value(Metric::Apc, 64.0).is_none());
        assert!(!physics.departs(Metric::Apc, 64.0, 1e9));
    }
}

//! The A2EP2 segmentations of docs/model.md §2 as a model family: every case I
//! to V, with break points at measured node counts and non-linear segments
//! of degree 1 to 3, fitted jointly by weighted least squares in a basis that
//! makes the segments meet at their break points.
//!
//! The same segmentations are fitted in one of two spaces (docs/model.md §2.1):
//! - (n, y): weights are the runs' summed quality over the value squared,
//!   since measurement noise is relative; a candidate that is not strictly
//!   positive over the measured range is rejected;
//! - (ln n, ln y): every segment is then a power law or a smooth bend
//!   between power laws, the natural form of strong-scaling time; the
//!   weights are the summed quality (a relative error is an absolute one in
//!   ln y), and any value is positive.
//!
//! A linear segment spans at least three node counts, a non-linear one of
//! degree d at least d + 2, and the last segment (which extrapolation
//! follows) at least a third of them. Among candidates within the allowed
//! %RMSE the one with the fewest parameters wins (so the smoothest non-linear
//! segment), ties going to the lower leave-one-out error; when none
//! qualifies, the lowest leave-one-out error wins.

use super::fit::History;
use super::lsq;
use super::predictor::{Case, Predictor, Segment, SegmentKind, Shape};

/// At most this many break positions are tried per segmentation (evenly
/// spread over the measured node counts), which bounds a fit's cost.
const MAX_BREAK_POSITIONS: usize = 9;
/// The highest degree of a non-linear segment.
const MAX_DEGREE: usize = 3;
/// The most parameters of a segmentation: case V of the highest degree.
const MAX_PARAMS: usize = MAX_DEGREE + 3;
/// A linear segment spans at least this many measured node counts: with two,
/// its slope would be the difference of two noisy points, which is what an
/// extrapolation then follows.
const MIN_LINEAR_POINTS: usize = 3;
/// The last segment, which extrapolation follows, spans at least 1/this of
/// the measured node counts.
const TAIL_SHARE: usize = 3;
/// A non-linear segment of degree d spans at least d + this many node counts,
/// so that it is fitted, not interpolated.
const MIN_EXTRA_POINTS: usize = 2;

/// Where the segments are fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// Node count and value as they are.
    Linear,
    /// Natural logarithms of both.
    Log,
}

/// How the points of a fit in (n, y) are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Weights {
    /// By quality over the value squared: relative errors, the segmentations'
    /// measure, since measurement noise is relative.
    Relative,
    /// By quality alone: absolute errors, as a least-squares line through the
    /// points (docs/model.md §2.1, the line family).
    Absolute,
}

/// The chosen segmentation.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// Over n (Linear) or ln n (Log), giving y or ln y.
    pub predictor: Predictor,
    pub params: usize,
    /// %RMSE (docs/model.md §2) of the fit against the history, in y.
    pub rmse_pct: f64,
}

/// One structure's least-squares fit, before its segments are built.
struct Candidate {
    structure: Structure,
    lsq: lsq::Lsq,
    /// %RMSE (docs/model.md §2) against the history, in y.
    rmse_pct: f64,
}

/// Fit every admissible segmentation to `history` in `space` and choose by
/// the §2 rule with `allowed` %RMSE. `None` with fewer than two node counts,
/// or when every candidate failed.
pub fn fit(history: &History, space: Space, allowed: f64) -> Option<Fitted> {
    if history.points.len() < 2 {
        return None;
    }
    let fits = Fits::new(history, space, Weights::Relative);
    let candidates = fits.candidates(structures(history.points.len()));
    let allowed = allowed + 1e-9;
    // The §2 rule: among the candidates within the allowed %RMSE, the fewest
    // parameters, then the lower leave-one-out %RMSE, then the lower %RMSE;
    // if none is within it, the lower leave-one-out %RMSE, then %RMSE. Only
    // a candidate whose segments are positive over the range (in (n, y))
    // counts. The leave-one-out %RMSE and the segments are computed only for
    // the candidates that ranking reaches: most never are.
    let mut within: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.rmse_pct <= allowed)
        .collect();
    within.sort_by_key(|c| c.structure.params());
    for group in within.chunk_by(|a, b| a.structure.params() == b.structure.params()) {
        if let Some(found) = fits.first_admissible(group) {
            return Some(found);
        }
    }
    let all: Vec<&Candidate> = candidates.iter().collect();
    fits.first_admissible(&all)
}

/// The least-squares line (case I alone) through `history` in (n, y), its
/// points weighted by quality alone; `None` when it is not positive over the
/// measured range.
///
/// Absolute errors, unlike the other families' relative ones: a line is the
/// floor family, asked mostly beyond the range, where a quantity that grows
/// with n (power, energy, a collective's latency) is largest. Weighted by the
/// value squared, its slope follows the smallest counts; unweighted, the
/// largest ones. On the real OSU latencies the largest count predicted from
/// the others went from 8.4 % to 6.6 % median error, and synthetic APC at 2×
/// from 1.71 % to 1.53 % (docs/accuracy.md).
pub fn line(history: &History) -> Option<Fitted> {
    if history.points.len() < 2 {
        return None;
    }
    let case_i = Structure {
        case: Case::I,
        breaks: [0, 0],
        degree: 1,
    };
    let fits = Fits::new(history, Space::Linear, Weights::Absolute);
    let candidate = fits.candidates(vec![case_i]).pop()?;
    fits.fitted(&candidate)
}

/// The %RMSE formula of docs/model.md §2 for residuals against `history`.
pub fn pct(residuals: impl Iterator<Item = f64>, history: &History) -> f64 {
    let m = history.points.len() as f64;
    let mean_y: f64 = history.points.iter().map(|p| p.mean / m).sum();
    // Relative to the mean before squaring: the same value, and no overflow
    // for values near f64's limits.
    let mse: f64 = residuals.map(|r| (r / mean_y).powi(2)).sum::<f64>() / m;
    100.0 * mse.sqrt()
}

/// A segmentation to fit: the case, its break points (indices into the
/// history's points) and the degree of its non-linear segment.
#[derive(Debug, Clone, Copy)]
struct Structure {
    case: Case,
    breaks: [usize; 2],
    degree: usize,
}

impl Structure {
    fn params(&self) -> usize {
        match self.case {
            Case::I => 2,
            Case::II => self.degree + 1,
            Case::III | Case::IV => self.degree + 2,
            Case::V => self.degree + 3,
        }
    }

    /// The segments as (first point, last point, kind, degree).
    fn segments(&self, m: usize) -> Vec<(usize, usize, SegmentKind, usize)> {
        let [a, b] = self.breaks;
        let (l, n) = (SegmentKind::Linear, SegmentKind::NonLinear);
        match self.case {
            Case::I => vec![(0, m - 1, l, 1)],
            Case::II => vec![(0, m - 1, n, self.degree)],
            Case::III => vec![(0, a, l, 1), (a, m - 1, n, self.degree)],
            Case::IV => vec![(0, a, n, self.degree), (a, m - 1, l, 1)],
            Case::V => vec![(0, a, l, 1), (a, b, n, self.degree), (b, m - 1, l, 1)],
        }
    }

    /// The basis functions at scaled position t, given the scaled break
    /// positions, into `out` (`params()` of them); continuity at the breaks
    /// holds by construction.
    fn basis(&self, t: f64, ta: f64, tb: f64, out: &mut [f64]) {
        // u, u², u³ of the non-linear segment (as `powi` gives them).
        let powers = |u: f64, out: &mut [f64]| {
            let mut power = u;
            for (k, slot) in out.iter_mut().enumerate().take(self.degree) {
                if k > 0 {
                    power *= u;
                }
                *slot = power;
            }
        };
        out[0] = 1.0;
        let d = self.degree;
        match self.case {
            Case::I => out[1] = t,
            Case::II => powers(t, &mut out[1..]),
            Case::III => {
                out[1] = t.min(ta);
                powers((t - ta).max(0.0), &mut out[2..]);
            }
            Case::IV => {
                powers((t - ta).min(0.0), &mut out[1..]);
                out[d + 1] = (t - ta).max(0.0);
            }
            Case::V => {
                out[1] = (t - ta).min(0.0);
                powers(t.clamp(ta, tb) - ta, &mut out[2..]);
                out[d + 2] = (t - tb).max(0.0);
            }
        }
    }
}

/// Every admissible structure for `m` points.
fn structures(m: usize) -> Vec<Structure> {
    let mut out = vec![Structure {
        case: Case::I,
        breaks: [0, 0],
        degree: 1,
    }];
    // Positions worth breaking at, spread evenly over the interior points.
    let interior: Vec<usize> = if m > 2 {
        let all: Vec<usize> = (1..m - 1).collect();
        if all.len() <= MAX_BREAK_POSITIONS {
            all
        } else {
            (0..MAX_BREAK_POSITIONS)
                .map(|i| all[i * (all.len() - 1) / (MAX_BREAK_POSITIONS - 1)])
                .collect()
        }
    } else {
        Vec::new()
    };
    for degree in 1..=MAX_DEGREE {
        if degree >= 2 {
            out.push(Structure {
                case: Case::II,
                breaks: [0, 0],
                degree,
            });
        }
        // Points in a segment (the break points count for both sides).
        let linear_ok = |points: usize| points >= MIN_LINEAR_POINTS;
        let non_linear_ok = |points: usize| points >= degree + MIN_EXTRA_POINTS;
        // The last segment is what extrapolation follows: it spans at least
        // a third of the measured node counts.
        let last_ok = |points: usize| points >= m.div_ceil(TAIL_SHARE);
        for &a in &interior {
            if linear_ok(a + 1) && non_linear_ok(m - a) && last_ok(m - a) {
                out.push(Structure {
                    case: Case::III,
                    breaks: [a, 0],
                    degree,
                });
            }
            if non_linear_ok(a + 1) && linear_ok(m - a) && last_ok(m - a) {
                out.push(Structure {
                    case: Case::IV,
                    breaks: [a, 0],
                    degree,
                });
            }
            for &b in interior.iter().filter(|&&b| b > a) {
                if linear_ok(a + 1)
                    && non_linear_ok(b - a + 1)
                    && linear_ok(m - b)
                    && last_ok(m - b)
                {
                    out.push(Structure {
                        case: Case::V,
                        breaks: [a, b],
                        degree,
                    });
                }
            }
        }
    }
    // At least one residual degree of freedom, except the line through two points.
    out.retain(|s| s.params() < m || (s.case == Case::I && m == 2));
    out
}

/// A history prepared for the segmentations of one space: positions scaled
/// to [0, 1], values and weights.
struct Fits<'a> {
    history: &'a History,
    space: Space,
    /// Positions in the fit's space (n or ln n), and scaled to [0, 1].
    x: Vec<f64>,
    t: Vec<f64>,
    y: Vec<f64>,
    w: Vec<f64>,
}

impl<'a> Fits<'a> {
    fn new(history: &'a History, space: Space, weights: Weights) -> Fits<'a> {
        let points = &history.points;
        let m = points.len();
        let x: Vec<f64> = points
            .iter()
            .map(|p| match space {
                Space::Linear => f64::from(p.nodes),
                Space::Log => f64::from(p.nodes).ln(),
            })
            .collect();
        let (x0, x1) = (x[0], x[m - 1]);
        let scale = x1 - x0;
        let t: Vec<f64> = x.iter().map(|x| (x - x0) / scale).collect();
        let (y, w): (Vec<f64>, Vec<f64>) = points
            .iter()
            .map(|p| match space {
                // Measurement noise is relative (a few per cent of the value),
                // so a point's variance grows with its value squared.
                Space::Linear if weights == Weights::Relative => {
                    (p.mean, p.weight / (p.mean * p.mean))
                }
                Space::Linear => (p.mean, p.weight),
                Space::Log => (p.mean.ln(), p.weight),
            })
            .unzip();
        Fits {
            history,
            space,
            x,
            t,
            y,
            w,
        }
    }

    /// Back to y from the fit's space.
    fn to_y(&self, v: f64) -> f64 {
        match self.space {
            Space::Linear => v,
            Space::Log => v.exp(),
        }
    }

    /// The design matrix of `structure`, row-major, into `rows`.
    fn rows(&self, structure: &Structure, rows: &mut Vec<f64>) {
        let (ta, tb) = (self.t[structure.breaks[0]], self.t[structure.breaks[1]]);
        let p = structure.params();
        rows.clear();
        rows.resize(self.t.len() * p, 0.0);
        for (&ti, row) in self.t.iter().zip(rows.chunks_exact_mut(p)) {
            structure.basis(ti, ta, tb, row);
        }
    }

    /// Every structure fitted, with a finite %RMSE.
    fn candidates(&self, structures: Vec<Structure>) -> Vec<Candidate> {
        let mut rows = Vec::new();
        structures
            .into_iter()
            .filter_map(|structure| {
                self.rows(&structure, &mut rows);
                let lsq = lsq::fit(&rows, structure.params(), &self.y, &self.w)?;
                let rmse_pct = pct(
                    self.history
                        .points
                        .iter()
                        .zip(&lsq.fitted)
                        .map(|(p, f)| p.mean - self.to_y(*f)),
                    self.history,
                );
                rmse_pct.is_finite().then_some(Candidate {
                    structure,
                    lsq,
                    rmse_pct,
                })
            })
            .collect()
    }

    /// The leave-one-out %RMSE of `candidate` in y; infinite when some point
    /// determines its fit alone.
    fn loo_rmse_pct(&self, candidate: &Candidate) -> f64 {
        let mut rows = Vec::new();
        self.rows(&candidate.structure, &mut rows);
        let points = &self.history.points;
        // The residual in y for a residual `e` in the fit's space.
        let residual = |i: usize, e: f64| match self.space {
            Space::Linear => e,
            Space::Log => points[i].mean * (1.0 - (-e).exp()),
        };
        candidate
            .lsq
            .loo(&rows, &self.y, &self.w)
            .map_or(f64::INFINITY, |loo| {
                pct(
                    loo.iter().enumerate().map(|(i, e)| residual(i, *e)),
                    self.history,
                )
            })
    }

    /// Among `candidates`, by leave-one-out %RMSE then %RMSE (the first of
    /// equals), the first whose segments can be built and, in (n, y), are
    /// positive over the measured range.
    ///
    /// A leave-one-out residual is the residual divided by one minus the
    /// point's leverage, so a candidate's leave-one-out %RMSE is at least its
    /// %RMSE. Taken in order of %RMSE, the candidates whose %RMSE exceeds the
    /// best leave-one-out %RMSE seen so far rank after it, and their
    /// leave-one-out residuals are computed only if it, and every candidate
    /// as good, turns out not to be admissible. On the 24 points of a large
    /// history that leaves one candidate in seven to compute.
    fn first_admissible(&self, candidates: &[&Candidate]) -> Option<Fitted> {
        let key = |i: usize| (self.loo_rmse_pct(candidates[i]), candidates[i].rmse_pct, i);
        let rank = |a: &(f64, f64, usize), b: &(f64, f64, usize)| {
            a.0.total_cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.cmp(&b.2))
        };
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by(|&a, &b| candidates[a].rmse_pct.total_cmp(&candidates[b].rmse_pct));
        let mut ranked = Vec::with_capacity(order.len());
        let mut best = f64::INFINITY;
        for &i in &order {
            // A margin for rounding: never leave out a possible tie.
            if candidates[i].rmse_pct > best * (1.0 + 1e-9) {
                break;
            }
            let k = key(i);
            best = best.min(k.0);
            ranked.push(k);
        }
        let left_out = &order[ranked.len()..];
        ranked.sort_by(rank);
        // The best precede every candidate left out.
        let found = ranked
            .iter()
            .take_while(|k| k.0 <= best)
            .find_map(|k| self.fitted(candidates[k.2]));
        if found.is_some() {
            return found;
        }
        let mut rest: Vec<(f64, f64, usize)> = ranked
            .into_iter()
            .filter(|k| k.0 > best)
            .chain(left_out.iter().map(|&i| key(i)))
            .collect();
        rest.sort_by(rank);
        rest.iter().find_map(|k| self.fitted(candidates[k.2]))
    }

    /// `candidate` as a predictor: its segments, each the polynomial its fit
    /// is on that piece; `None` when one cannot be built or, in (n, y), one
    /// is not positive over the measured range.
    fn fitted(&self, candidate: &Candidate) -> Option<Fitted> {
        let structure = &candidate.structure;
        let m = self.x.len();
        let (x0, scale) = (self.x[0], self.x[m - 1] - self.x[0]);
        let (ta, tb) = (self.t[structure.breaks[0]], self.t[structure.breaks[1]]);
        let value = |v: f64| {
            let mut basis = [0.0; MAX_PARAMS];
            let basis = &mut basis[..structure.params()];
            structure.basis((v - x0) / scale, ta, tb, basis);
            basis
                .iter()
                .zip(&candidate.lsq.beta)
                .map(|(b, c)| b * c)
                .sum::<f64>()
        };
        let segments: Vec<Segment> = structure
            .segments(m)
            .into_iter()
            .map(|(i, j, kind, degree)| local_segment(self.x[i], self.x[j], kind, degree, &value))
            .collect::<Option<_>>()?;
        if self.space == Space::Linear && !segments.iter().all(|s| s.minimum() > 0.0) {
            return None;
        }
        Some(Fitted {
            predictor: Predictor {
                shape: Shape::Segmented {
                    case: structure.case,
                    segments,
                },
            },
            params: structure.params(),
            rmse_pct: candidate.rmse_pct,
        })
    }
}

/// The polynomial of `degree` that `value` is on [lo, hi], as coefficients of
/// powers of (x − lo): solved from degree + 1 samples across the segment.
fn local_segment(
    lo: f64,
    hi: f64,
    kind: SegmentKind,
    degree: usize,
    value: &impl Fn(f64) -> f64,
) -> Option<Segment> {
    let width = hi - lo;
    let k = degree + 1;
    let v: Vec<f64> = (0..k).map(|i| i as f64 / degree as f64).collect();
    let vandermonde = nalgebra::DMatrix::from_fn(k, k, |r, c| v[r].powi(c as i32));
    let samples = nalgebra::DVector::from_iterator(k, v.iter().map(|v| value(lo + v * width)));
    let solved = vandermonde.lu().solve(&samples)?;
    let mut coeffs = [0.0; 4];
    for (power, (coefficient, solved)) in coeffs.iter_mut().zip(solved.iter()).enumerate() {
        *coefficient = solved / width.powi(power as i32);
    }
    coeffs.iter().all(|c| c.is_finite()).then_some(Segment {
        lo,
        hi,
        kind,
        degree,
        coeffs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(points: &[(u32, f64)]) -> History {
        History::new(&crate::model::runs(points))
    }

    fn case(fitted: &Fitted) -> Case {
        match &fitted.predictor.shape {
            Shape::Segmented { case, .. } => *case,
            Shape::Scaled { .. } => panic!("not segmented"),
        }
    }

    #[test]
    fn exact_linear_data_give_case_i_with_zero_rmse() {
        let h = history(&[(1, 110.0), (2, 120.0), (4, 140.0), (8, 180.0), (16, 260.0)]);
        let fitted = fit(&h, Space::Linear, 2.0).unwrap();
        assert_eq!(case(&fitted), Case::I);
        assert!(fitted.rmse_pct < 1e-9);
        assert!((fitted.predictor.value(10.0) - 200.0).abs() < 1e-6);
        assert!((fitted.predictor.value(32.0) - 420.0).abs() < 1e-6);
        assert_eq!(line(&h).unwrap().predictor, fitted.predictor);
    }

    #[test]
    fn an_exact_power_law_is_case_i_in_the_logs() {
        let data: Vec<(u32, f64)> = [1, 2, 4, 8, 16]
            .iter()
            .map(|&n| (n, 1000.0 * 0.52f64.powf(f64::from(n).log2())))
            .collect();
        let h = history(&data);
        let fitted = fit(&h, Space::Log, 2.0).unwrap();
        assert_eq!(case(&fitted), Case::I);
        assert!(fitted.rmse_pct < 1e-6, "{}", fitted.rmse_pct);
        // y = 1000·n^log2(0.52): the slope in the logs.
        let Shape::Segmented { segments, .. } = &fitted.predictor.shape else {
            unreachable!()
        };
        assert!((segments[0].coeffs[1] - 0.52f64.log2()).abs() < 1e-9);
    }

    #[test]
    fn a_quadratic_needs_the_smallest_nonlinear_degree() {
        let data: Vec<(u32, f64)> = (1..=12)
            .map(|n| (n, 50.0 + 2.0 * f64::from(n * n)))
            .collect();
        let fitted = fit(&history(&data), Space::Linear, 0.5).unwrap();
        // A quadratic fits exactly with three parameters: nothing simpler does.
        assert_eq!(fitted.params, 3);
        assert!(fitted.rmse_pct < 1e-6);
        assert!((fitted.predictor.value(7.0) - 148.0).abs() < 1e-6);
    }

    #[test]
    fn a_saturating_history_is_split_into_segments() {
        // Linear up to 16 nodes, then flat: case III or IV with a linear end,
        // which extrapolates flat.
        let data: Vec<(u32, f64)> = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64]
            .iter()
            .map(|&n| (n, if n <= 16 { 10.0 * f64::from(n) } else { 160.0 }))
            .collect();
        let fitted = fit(&history(&data), Space::Linear, 1.0).unwrap();
        assert!(fitted.rmse_pct <= 1.0, "rmse {}", fitted.rmse_pct);
        let v = fitted.predictor.value(128.0);
        assert!((v - 160.0).abs() / 160.0 < 0.05, "{v}");
    }

    /// The basis written in place, its powers multiplied out, is the basis
    /// as `powi` gave it, to the bit, for every case and degree.
    #[test]
    fn the_basis_is_the_same_bits_as_with_powi() {
        let reference = |s: &Structure, t: f64, ta: f64, tb: f64| -> Vec<f64> {
            let powers = |u: f64| (1..=s.degree).map(move |k| u.powi(k as i32));
            let mut out = vec![1.0];
            match s.case {
                Case::I => out.push(t),
                Case::II => out.extend(powers(t)),
                Case::III => {
                    out.push(t.min(ta));
                    out.extend(powers((t - ta).max(0.0)));
                }
                Case::IV => {
                    out.extend(powers((t - ta).min(0.0)));
                    out.push((t - ta).max(0.0));
                }
                Case::V => {
                    out.push((t - ta).min(0.0));
                    out.extend(powers(t.clamp(ta, tb) - ta));
                    out.push((t - tb).max(0.0));
                }
            }
            out
        };
        for case in [Case::I, Case::II, Case::III, Case::IV, Case::V] {
            for degree in 1..=MAX_DEGREE {
                let s = Structure {
                    case,
                    breaks: [0, 0],
                    degree,
                };
                for t in [-0.0, 0.0, 0.3, 0.7, 1.0, -0.25, 1.0 / 3.0] {
                    let (ta, tb) = (0.2, 0.65);
                    let mut out = [f64::NAN; MAX_PARAMS];
                    s.basis(t, ta, tb, &mut out[..s.params()]);
                    let expected = reference(&s, t, ta, tb);
                    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&out[..s.params()]),
                        bits(&expected),
                        "{case:?} degree {degree} at {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_cubic_is_extrapolated_freely() {
        let data: Vec<(u32, f64)> = (1..=10)
            .map(|n| {
                let x = f64::from(n);
                (n, 1000.0 + 30.0 * x - 6.0 * x * x + 0.4 * x * x * x)
            })
            .collect();
        let fitted = fit(&history(&data), Space::Linear, 0.1).unwrap();
        // Beyond 10 nodes the predictor is a straight line, whatever the fit
        // inside: equal steps give equal increments.
        let p = &fitted.predictor;
        let (a, b, c) = (p.value(20.0), p.value(30.0), p.value(40.0));
        assert!(((c - b) - (b - a)).abs() < 1e-6, "{a} {b} {c}");
        // A free cubic would give 1000 + 1200 − 9600 + 25600 = 18200 at 40.
        assert!(c < 10_000.0, "{c}");
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 64,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]

            /// Data on a line give case I with (numerically) zero %RMSE.
            #[test]
            fn exact_lines_are_case_i(
                intercept in 1.0f64..1e4,
                slope in 0.0f64..1e3,
                nodes in prop::collection::btree_set(1u32..2048, 3..20),
            ) {
                let data: Vec<(u32, f64)> = nodes
                    .iter()
                    .map(|&n| (n, intercept + slope * f64::from(n)))
                    .collect();
                let fitted = fit(&history(&data), Space::Linear, 2.0).unwrap();
                prop_assert_eq!(case(&fitted), Case::I);
                prop_assert!(fitted.rmse_pct < 1e-6, "{}", fitted.rmse_pct);
            }

            /// The ranking that skips candidates by their %RMSE picks what
            /// ranking every candidate by its leave-one-out %RMSE picks.
            #[test]
            fn skipping_candidates_changes_no_choice(
                values in prop::collection::vec(0.5f64..2.0, 4..24),
                log in any::<bool>(),
            ) {
                // A noisy falling curve over 1, 3, 7, 13, 21, … nodes.
                let data: Vec<(u32, f64)> = values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let n = 1 + i as u32 * (i as u32 + 1);
                        (n, 1e4 / f64::from(n) * (1.0 + 0.05 * (v - 1.0)))
                    })
                    .collect();
                let h = history(&data);
                let space = if log { Space::Log } else { Space::Linear };
                let fits = Fits::new(&h, space, Weights::Relative);
                let candidates = fits.candidates(structures(h.points.len()));
                let all: Vec<&Candidate> = candidates.iter().collect();
                let mut every: Vec<(f64, f64, usize)> = all
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (fits.loo_rmse_pct(c), c.rmse_pct, i))
                    .collect();
                every.sort_by(|a, b| {
                    a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2))
                });
                let exhaustive = every.iter().find_map(|k| fits.fitted(all[k.2]));
                prop_assert_eq!(fits.first_admissible(&all), exhaustive);
            }
        }
    }
}

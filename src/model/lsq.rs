//! Weighted linear least squares with leave-one-out residuals.

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};

/// A fit of y ≈ X·β minimising Σ wᵢ (yᵢ − xᵢᵀβ)².
#[derive(Debug, Clone)]
pub struct Lsq {
    pub beta: Vec<f64>,
    pub fitted: Vec<f64>,
    /// The factor of XᵀWX, kept for the leave-one-out residuals (`loo`),
    /// which most of the segmentations' fits never need.
    cholesky: Cholesky<f64, Dyn>,
}

/// Fit `rows` (m rows of p values, row-major) to `y` with weights `w`.
/// `None` when the system is singular.
pub fn fit(rows: &[f64], p: usize, y: &[f64], w: &[f64]) -> Option<Lsq> {
    let m = y.len();
    debug_assert_eq!(rows.len(), m * p);
    if p == 0 {
        return None;
    }
    let (ata, atb) = match p {
        1 => normal_equations::<1>(rows, y, w),
        2 => normal_equations::<2>(rows, y, w),
        3 => normal_equations::<3>(rows, y, w),
        4 => normal_equations::<4>(rows, y, w),
        5 => normal_equations::<5>(rows, y, w),
        6 => normal_equations::<6>(rows, y, w),
        _ => normal_equations_any(rows, p, y, w),
    };
    let atb = DVector::from_vec(atb);
    let cholesky = DMatrix::from_vec(p, p, ata).cholesky()?;
    // A (near) rank-deficient system: the factor's diagonal spans more than
    // seven orders of magnitude (a condition number beyond ~1e14).
    let diagonal = cholesky.l_dirty().diagonal();
    let (small, large) = diagonal.iter().fold((f64::INFINITY, 0.0f64), |(s, l), d| {
        (s.min(d.abs()), l.max(d.abs()))
    });
    if small.is_nan() || small <= large * 1e-7 {
        return None;
    }
    let beta = cholesky.solve(&atb);
    if beta.iter().any(|b| !b.is_finite()) {
        return None;
    }
    let fitted: Vec<f64> = (0..m)
        .map(|i| {
            rows[i * p..(i + 1) * p]
                .iter()
                .zip(beta.iter())
                .map(|(x, b)| x * b)
                .sum()
        })
        .collect();
    Some(Lsq {
        beta: beta.iter().copied().collect(),
        fitted,
        cholesky,
    })
}

/// XᵀWX (column-major: entry (a, b) at a + b·p) and XᵀWy, for `P` columns
/// known at compile time: the sums stay in registers rather than in a slice
/// written back on every row, the slowest part of a segmentation's fit. The
/// same additions in the same order as `normal_equations_any`, so the same
/// bits.
fn normal_equations<const P: usize>(rows: &[f64], y: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut ata = [[0.0f64; P]; P];
    let mut atb = [0.0f64; P];
    for ((row, &yi), &wi) in rows.chunks_exact(P).zip(y).zip(w) {
        for a in 0..P {
            let wa = wi * row[a];
            atb[a] += wa * yi;
            for b in a..P {
                ata[b][a] += wa * row[b];
            }
        }
    }
    let mut out = vec![0.0f64; P * P];
    for a in 0..P {
        for b in a..P {
            out[a + b * P] = ata[b][a];
            out[b + a * P] = ata[b][a];
        }
    }
    (out, atb.to_vec())
}

/// `normal_equations` for any number of columns.
fn normal_equations_any(rows: &[f64], p: usize, y: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    // In plain slices: a matrix's checked indexing in this loop cost more
    // than the factorisation.
    let mut ata = vec![0.0f64; p * p];
    let mut atb = vec![0.0f64; p];
    for ((row, &yi), &wi) in rows.chunks_exact(p).zip(y).zip(w) {
        for a in 0..p {
            let wa = wi * row[a];
            atb[a] += wa * yi;
            for b in a..p {
                ata[a + b * p] += wa * row[b];
            }
        }
    }
    for a in 0..p {
        for b in 0..a {
            ata[a + b * p] = ata[b + a * p];
        }
    }
    (ata, atb)
}

impl Lsq {
    /// Leave-one-out residuals yᵢ − ŷ₋ᵢ, from the hat matrix (PRESS):
    /// eᵢ / (1 − hᵢᵢ), for the `rows`, `y` and `w` the fit was made from.
    /// `None` when some point determines the fit alone.
    pub fn loo(&self, rows: &[f64], y: &[f64], w: &[f64]) -> Option<Vec<f64>> {
        let (m, p) = (y.len(), self.beta.len());
        if m <= p {
            return None;
        }
        let inverse = self.cholesky.inverse();
        let inverse = inverse.as_slice();
        (0..m)
            .map(|i| {
                // Leverage hᵢᵢ = wᵢ·xᵢᵀ(XᵀWX)⁻¹xᵢ, without allocating.
                let row = &rows[i * p..(i + 1) * p];
                let quadratic: f64 = (0..p)
                    .map(|a| row[a] * (0..p).map(|b| inverse[a + b * p] * row[b]).sum::<f64>())
                    .sum();
                let leverage_left = 1.0 - w[i] * quadratic;
                (leverage_left > 1e-9).then(|| (y[i] - self.fitted[i]) / leverage_left)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_line_is_recovered_with_zero_residuals() {
        let xs = [1.0, 2.0, 4.0, 8.0];
        let rows: Vec<f64> = xs.iter().flat_map(|x| [1.0, *x]).collect();
        let y: Vec<f64> = xs.iter().map(|x| 3.0 + 2.0 * x).collect();
        let fit = fit(&rows, 2, &y, &[1.0; 4]).unwrap();
        assert!((fit.beta[0] - 3.0).abs() < 1e-9 && (fit.beta[1] - 2.0).abs() < 1e-9);
        assert!(
            fit.loo(&rows, &y, &[1.0; 4])
                .unwrap()
                .iter()
                .all(|e| e.abs() < 1e-9)
        );
    }

    /// Leave-one-out residuals from the hat matrix equal those of refitting
    /// without the point (computed here by brute force).
    #[test]
    fn press_residuals_match_refits_without_each_point() {
        let xs = [1.0, 2.0, 3.0, 5.0, 8.0, 9.0];
        let y = [2.0, 2.9, 4.2, 5.8, 9.1, 9.7];
        let w = [1.0, 0.5, 1.0, 0.8, 1.0, 0.3];
        let rows: Vec<f64> = xs.iter().flat_map(|x| [1.0, *x, x * x]).collect();
        let full = fit(&rows, 3, &y, &w).unwrap();
        let loo = full.loo(&rows, &y, &w).unwrap();
        for i in 0..xs.len() {
            let keep: Vec<usize> = (0..xs.len()).filter(|&j| j != i).collect();
            let rows_i: Vec<f64> = keep
                .iter()
                .flat_map(|&j| rows[j * 3..j * 3 + 3].to_vec())
                .collect();
            let y_i: Vec<f64> = keep.iter().map(|&j| y[j]).collect();
            let w_i: Vec<f64> = keep.iter().map(|&j| w[j]).collect();
            let refit = fit(&rows_i, 3, &y_i, &w_i).unwrap();
            let predicted: f64 = rows[i * 3..i * 3 + 3]
                .iter()
                .zip(&refit.beta)
                .map(|(x, b)| x * b)
                .sum();
            assert!((y[i] - predicted - loo[i]).abs() < 1e-9, "point {i}");
        }
    }

    /// The normal equations summed for a known number of columns are those
    /// of any number, to the bit: a fit does not depend on which path it took.
    #[test]
    fn normal_equations_are_the_same_bits_on_both_paths() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        for p in 1..=6 {
            let m = 17;
            let rows: Vec<f64> = (0..m * p).map(|_| next() * 1e3).collect();
            let y: Vec<f64> = (0..m).map(|_| next()).collect();
            let w: Vec<f64> = (0..m).map(|_| next().abs()).collect();
            let known = match p {
                1 => normal_equations::<1>(&rows, &y, &w),
                2 => normal_equations::<2>(&rows, &y, &w),
                3 => normal_equations::<3>(&rows, &y, &w),
                4 => normal_equations::<4>(&rows, &y, &w),
                5 => normal_equations::<5>(&rows, &y, &w),
                _ => normal_equations::<6>(&rows, &y, &w),
            };
            let any = normal_equations_any(&rows, p, &y, &w);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&known.0), bits(&any.0), "XᵀWX, {p} columns");
            assert_eq!(bits(&known.1), bits(&any.1), "XᵀWy, {p} columns");
        }
        assert!(fit(&[], 0, &[1.0], &[1.0]).is_none());
    }

    #[test]
    fn singular_systems_are_refused() {
        let rows = [1.0, 1.0, 1.0, 1.0];
        assert!(fit(&rows, 2, &[1.0, 2.0], &[1.0, 1.0]).is_none());
    }
}

//! The accuracy suites: the predictor against the truth beside simple
//! baselines, on synthetic histories whose true curves are known
//! (`synthetic`) and on real ARCHER2 measurements (`real`).
//! `joulecast accuracy [--real [PATH]...]` prints the reports kept in docs/accuracy.md.

pub mod real;
pub mod synthetic;

pub use synthetic::{Runs, run};

use crate::model::Observation;

/// y = a + b·x by ordinary least squares over (x, y); `None` without two
/// distinct x.
fn least_squares(points: impl Iterator<Item = (f64, f64)> + Clone) -> Option<(f64, f64)> {
    let m = points.clone().count() as f64;
    let mean_x = points.clone().map(|(x, _)| x).sum::<f64>() / m;
    let mean_y = points.clone().map(|(_, y)| y).sum::<f64>() / m;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mean_x) * (y - mean_y);
        sxx += (x - mean_x) * (x - mean_x);
    }
    (sxx > 0.0).then(|| (mean_y - sxy / sxx * mean_x, sxy / sxx))
}

/// A simple predictor that a spreadsheet would give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Baseline {
    /// y = a + b·n through all runs.
    Line(f64, f64),
    /// y = e^a·n^b through all runs (least squares in the logs).
    PowerLaw(f64, f64),
}

impl Baseline {
    pub fn line(runs: &[Observation]) -> Option<Baseline> {
        least_squares(runs.iter().map(|o| (f64::from(o.nodes), o.value)))
            .map(|(a, b)| Baseline::Line(a, b))
    }

    pub fn power_law(runs: &[Observation]) -> Option<Baseline> {
        least_squares(runs.iter().map(|o| (f64::from(o.nodes).ln(), o.value.ln())))
            .map(|(a, b)| Baseline::PowerLaw(a, b))
    }

    pub fn at(self, n: f64) -> f64 {
        match self {
            Baseline::Line(a, b) => a + b * n,
            Baseline::PowerLaw(a, b) => (a + b * n.ln()).exp(),
        }
    }

    /// The line or the power law, whichever predicts each run left out of
    /// its fit better (mean absolute relative error).
    pub fn picked_by_leave_one_out(runs: &[Observation]) -> Option<Baseline> {
        let loo_error = |fit: fn(&[Observation]) -> Option<Baseline>| {
            let mut total = 0.0;
            for i in 0..runs.len() {
                let mut rest = runs.to_vec();
                let left = rest.remove(i);
                let baseline = fit(&rest)?;
                total += (baseline.at(f64::from(left.nodes)) / left.value - 1.0).abs();
            }
            Some(total)
        };
        let line = loo_error(Baseline::line).unwrap_or(f64::INFINITY);
        let power = loo_error(Baseline::power_law).unwrap_or(f64::INFINITY);
        if power < line {
            Baseline::power_law(runs)
        } else {
            Baseline::line(runs)
        }
    }
}

/// Log-log interpolation between the measured node counts next to `n`
/// (per-count means of `runs`); beyond them, the power law through the two
/// nearest. `None` with fewer than two node counts.
pub fn loglog_neighbours(runs: &[Observation], n: u32) -> Option<f64> {
    let history = crate::model::History::new(runs);
    let points = &history.points;
    let m = points.len();
    if m < 2 {
        return None;
    }
    let k = points.partition_point(|p| p.nodes < n).clamp(1, m - 1);
    let (a, b) = (&points[k - 1], &points[k]);
    let (xa, xb) = (f64::from(a.nodes).ln(), f64::from(b.nodes).ln());
    let slope = (b.mean.ln() - a.mean.ln()) / (xb - xa);
    Some((a.mean.ln() + slope * (f64::from(n).ln() - xa)).exp())
}

/// The `q` quantile of sorted values, interpolated; NaN for none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
}

/// The median of unsorted values.
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile(&sorted, 0.5)
}

/// Absolute error of `predicted` in per cent of `truth`.
pub fn error_pct(predicted: f64, truth: f64) -> f64 {
    100.0 * ((predicted - truth) / truth).abs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::runs;

    #[test]
    fn the_least_squares_line_is_exact_on_a_line() {
        let line = Baseline::line(&runs(&[(1, 7.0), (2, 10.0), (5, 19.0), (9, 31.0)])).unwrap();
        assert_eq!(line, Baseline::Line(4.0, 3.0));
    }

    #[test]
    fn the_power_law_is_exact_on_a_power_law_and_picked_over_the_line() {
        let data = runs(&[(1, 800.0), (2, 400.0), (4, 200.0), (8, 100.0), (16, 50.0)]);
        let Some(Baseline::PowerLaw(a, b)) = Baseline::picked_by_leave_one_out(&data) else {
            panic!("the power law fits exactly");
        };
        assert!((a - 800f64.ln()).abs() < 1e-9 && (b + 1.0).abs() < 1e-9);
    }

    #[test]
    fn neighbours_interpolate_in_the_logs_and_extend_the_nearest_power_law() {
        let data = runs(&[(4, 444.0), (16, 116.0), (64, 40.0)]);
        // Halfway between 4 and 16 in log n is 8: the geometric mean.
        let at8 = loglog_neighbours(&data, 8).unwrap();
        assert!((at8 - (444.0f64 * 116.0).sqrt()).abs() < 1e-9);
        // Beyond 64: the power law through 16 and 64.
        let at256 = loglog_neighbours(&data, 256).unwrap();
        assert!((at256 - 40.0 * 40.0 / 116.0).abs() < 1e-9);
    }

    #[test]
    fn percentiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert!((percentile(&v, 0.9) - 4.6).abs() < 1e-12);
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}

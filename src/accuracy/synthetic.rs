//! The predictor against the truth on synthetic histories (docs/model.md §4
//! theory, src/model/synth.rs), beside three baselines.

use std::fmt::Write;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Baseline, error_pct, percentile};
use crate::model::synth::{self, SyntheticApp, Truth};
use crate::model::{self, Aggregate, FitOptions, Metric, Observation, consistency};

/// Where predictions are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// Unmeasured node counts inside the measured range.
    Interpolation,
    /// 1.5 × the largest measured node count.
    Extrapolation1_5,
    /// 2 × the largest measured node count.
    Extrapolation2,
}

impl Regime {
    const ALL: [Regime; 3] = [
        Regime::Interpolation,
        Regime::Extrapolation1_5,
        Regime::Extrapolation2,
    ];

    fn label(self) -> &'static str {
        match self {
            Regime::Interpolation => "interpolation",
            Regime::Extrapolation1_5 => "extrapolation to 1.5×",
            Regime::Extrapolation2 => "extrapolation to 2×",
        }
    }
}

/// Who predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The predictor chosen by back-test.
    Joulecast,
    /// One least-squares line through all runs.
    Line,
    /// A least-squares line or power law through all runs, whichever
    /// predicts runs left out better.
    Picked,
    /// The largest run's value per node × n.
    PerNode,
}

impl Method {
    const ALL: [Method; 4] = [
        Method::Joulecast,
        Method::Line,
        Method::Picked,
        Method::PerNode,
    ];
}

/// How many runs a history keeps per node count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Runs {
    /// As drawn: node counts that users ask for often (powers of two) are
    /// measured repeatedly.
    #[default]
    AsDrawn,
    /// The first run at each node count only, as in a history measured
    /// once per count: its noise must be told from its shape without
    /// repeated runs.
    OnePerCount,
}

/// Absolute percentage errors, per metric, regime and method.
#[derive(Debug, Default)]
pub struct Report {
    pub apps: usize,
    pub seed: u64,
    pub runs: Runs,
    errors: Vec<(Metric, Regime, Method, f64)>,
}

/// A row of the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub metric: Metric,
    pub regime: Regime,
    pub median: [f64; 4],
    pub p90: [f64; 4],
    pub count: usize,
}

/// Run the suite over `apps` synthetic applications drawn with `seed`.
pub fn run(apps: usize, seed: u64, runs: Runs) -> Report {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut report = Report {
        apps,
        seed,
        runs,
        errors: Vec::new(),
    };
    for _ in 0..apps {
        let max_nodes = [16, 32, 64, 128, 256][rng.random_range(0..5)];
        let app = SyntheticApp::random(&mut rng, max_nodes);
        let drawn = rng.random_range(12..=40);
        let counts = synth::node_counts(&mut rng, max_nodes, drawn);
        let mut measured: Vec<(u32, Truth)> = counts
            .iter()
            .map(|&n| (n, app.measure(f64::from(n), &mut rng)))
            .collect();
        if runs == Runs::OnePerCount {
            let mut seen = std::collections::HashSet::new();
            measured.retain(|(n, _)| seen.insert(*n));
        }
        let (lo, hi) = (
            *counts.iter().min().unwrap_or(&1),
            *counts.iter().max().unwrap_or(&1),
        );
        let unmeasured: Vec<u32> = (lo..=hi).filter(|n| !counts.contains(n)).collect();
        let mut targets: Vec<(Regime, u32)> = (0..5.min(unmeasured.len()))
            .map(|_| {
                (
                    Regime::Interpolation,
                    unmeasured[rng.random_range(0..unmeasured.len())],
                )
            })
            .collect();
        targets.push((
            Regime::Extrapolation1_5,
            (f64::from(hi) * 1.5).round() as u32,
        ));
        targets.push((Regime::Extrapolation2, hi * 2));

        let value = |metric: Metric, t: &Truth| match metric {
            Metric::Ets => t.energy_j,
            Metric::Apc => t.power_w,
            Metric::Tts => t.time_s,
        };
        let observations = |metric: Metric| -> Vec<Observation> {
            measured
                .iter()
                .map(|(n, t)| Observation {
                    nodes: *n,
                    value: value(metric, t),
                    weight: 1.0,
                })
                .collect()
        };
        let models = Metric::ALL.map(|metric| {
            let options = FitOptions {
                metric,
                mode: app.mode,
                allowed_rmse_pct: model::DEFAULT_ALLOWED_RMSE_PCT,
            };
            model::fit(&observations(metric), options)
        });
        let [Some(ets), Some(apc), Some(tts)] = &models else {
            continue;
        };
        // What the service answers: the three predictions, reconciled.
        let answers: Vec<[f64; 3]> = targets
            .iter()
            .map(|&(_, n)| {
                consistency::predict([ets, apc, tts], n, Aggregate::Mean).map(|p| p.value)
            })
            .collect();
        for (k, metric) in Metric::ALL.into_iter().enumerate() {
            let observations = observations(metric);
            let line = Baseline::line(&observations);
            let picked = Baseline::picked_by_leave_one_out(&observations);
            let largest = observations
                .iter()
                .filter(|o| o.nodes == hi)
                .map(|o| o.value / f64::from(o.nodes))
                .next()
                .unwrap_or(0.0);
            for (&(regime, n), answer) in targets.iter().zip(&answers) {
                let truth = value(metric, &app.truth(f64::from(n)));
                let x = f64::from(n);
                let predictions = [
                    Some(answer[k]),
                    line.map(|b| b.at(x)),
                    picked.map(|b| b.at(x)),
                    Some(largest * x),
                ];
                for (method, predicted) in Method::ALL.into_iter().zip(predictions) {
                    let error = predicted.map_or(f64::INFINITY, |p| error_pct(p, truth));
                    report.errors.push((metric, regime, method, error));
                }
            }
        }
    }
    report
}

impl Report {
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        for metric in Metric::ALL {
            for regime in Regime::ALL {
                let mut median = [0.0; 4];
                let mut p90 = [0.0; 4];
                let mut count = 0;
                for (i, method) in Method::ALL.into_iter().enumerate() {
                    let mut errors: Vec<f64> = self
                        .errors
                        .iter()
                        .filter(|e| e.0 == metric && e.1 == regime && e.2 == method)
                        .map(|e| e.3)
                        .collect();
                    errors.sort_by(f64::total_cmp);
                    median[i] = percentile(&errors, 0.5);
                    p90[i] = percentile(&errors, 0.9);
                    count = errors.len();
                }
                rows.push(Row {
                    metric,
                    regime,
                    median,
                    p90,
                    count,
                });
            }
        }
        rows
    }

    /// The markdown table of docs/accuracy.md.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Synthetic applications: {}, seed {}{}.\n\n\
             Absolute % error against the true curve: median / 90th percentile.\n\n\
             | metric | where | predictions | Joulecast | least-squares line | line or power law, picked by leave-one-out | largest run per node × n |\n\
             |---|---|---:|---:|---:|---:|---:|",
            self.apps,
            self.seed,
            match self.runs {
                Runs::AsDrawn => "",
                Runs::OnePerCount => ", one run per node count",
            }
        );
        for row in self.rows() {
            let cell = |i: usize| format!("{:.2} / {:.2}", row.median[i], row.p90[i]);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                row.metric.as_str().to_uppercase(),
                row.regime.label(),
                row.count,
                cell(0),
                cell(1),
                cell(2),
                cell(3)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_every_row() {
        let report = run(5, 1, Runs::AsDrawn);
        let rows = report.rows();
        assert_eq!(rows.len(), 9);
        assert!(
            rows.iter()
                .all(|r| r.count > 0 && r.median.iter().all(|m| m.is_finite()))
        );
    }
}

/// The targets of the accuracy suite, checked on the report's own settings
/// (400 applications, seed 1), with the runs as drawn and with one run per
/// node count: every row's median at or below the line or
/// power law picked by leave-one-out and below the per-node rule, and its
/// 90th percentile below every baseline's; EtS and APC within 2 % inside
/// the measured range and 5 % at 2×; TtS within 1 % inside, 3 % at 1.5× and
/// 5 % at 2×. (The plain line's median is lower than Joulecast's for EtS
/// beyond the range: docs/accuracy.md.)
#[cfg(test)]
mod targets {
    use super::*;

    #[test]
    fn the_predictor_meets_its_accuracy_targets() {
        meets_targets(Runs::AsDrawn);
    }

    #[test]
    fn the_predictor_meets_its_accuracy_targets_with_one_run_per_count() {
        meets_targets(Runs::OnePerCount);
    }

    fn meets_targets(runs: Runs) {
        let report = run(400, 1, runs);
        let table = report.to_markdown();
        for row in report.rows() {
            let [ours, _, picked, _] = row.median;
            let limit = match (row.metric, row.regime) {
                (Metric::Tts, Regime::Interpolation) => 1.0,
                (Metric::Tts, Regime::Extrapolation1_5) => 3.0,
                (_, Regime::Interpolation) => 2.0,
                _ => 5.0,
            };
            assert!(ours <= limit, "{row:?}\n{table}");
            assert!(ours <= picked, "median {row:?}\n{table}");
            assert!(ours < row.median[3], "median {row:?}\n{table}");
            // The tail: below every baseline's, the plain line's included.
            let [p90, line, picked, per_node] = row.p90;
            assert!(
                p90 < line && p90 < picked && p90 < per_node,
                "p90 {row:?}\n{table}"
            );
        }
    }
}

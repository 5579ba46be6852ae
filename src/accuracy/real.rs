//! The predictor on real measurements: ARCHER2 strong-scaling times
//! (tests/fixtures/archer2/, with their sources and licences in its README).
//!
//! For every configuration of every data set with at least three node
//! counts, time-to-solution is predicted as a user would meet it:
//! - **leave one count out**: each interior node count predicted from the
//!   runs at all the others;
//! - **largest count**: the largest node count predicted from the runs
//!   below it.
//!
//! The truth is the mean of the runs at the count predicted. Beside
//! Joulecast, the baselines: log-log interpolation between the neighbouring
//! measured counts (beyond them, the power law through the last two), and a
//! least-squares line and power law through all runs.

use std::fmt::Write;
use std::path::Path;

use super::{Baseline, error_pct, loglog_neighbours, median};
use crate::model::{
    self, Aggregate, FitOptions, History, Metric, Observation, Prediction, ScalingMode, consistency,
};

/// The data sets the suite reads, each `<name>.csv` with the columns
/// `app,config,nodes,repetition,time_s[,…]`.
pub const DATASETS: [&str; 7] = [
    "ofiucx_castep",
    "ofiucx_cp2k",
    "ofiucx_nemo",
    "ofiucx_opensbli",
    "ofiucx_vasp",
    "freq_opensbli",
    "ofiucx_osu",
];

/// A data set with more configurations than this is reported as a whole
/// only (OSU's 200 message sizes).
const MAX_CONFIGURATIONS_SHOWN: usize = 12;

/// The methods compared, in report order. "Joulecast" is its TtS model
/// alone; "as served" is what the service answers (`GET
/// /v1/apps/{app}/predictions`): the TtS model's prediction reconciled with
/// the EtS and APC models' (`model::consistency`), these fitted on the same
/// runs with each node drawing the same power (`NODE_POWER_W`).
pub const METHODS: [&str; 5] = [
    "Joulecast",
    "Joulecast as served",
    "log-log neighbours",
    "least-squares line",
    "least-squares power law",
];

/// The power of one node assumed for the EtS and APC histories behind the
/// served answer: the data sets give times only. With every node drawing
/// the same power, APC is proportional to the node count and every run's
/// energy is that power times its time (the constant itself cancels out
/// of the relative errors).
pub const NODE_POWER_W: f64 = 350.0;

/// One configuration's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub dataset: String,
    pub config: String,
    pub runs: Vec<Observation>,
}

/// Read the data sets from `dir`; an error names the file and line.
pub fn load(dir: &Path, datasets: &[&str]) -> Result<Vec<Series>, String> {
    let mut out: Vec<Series> = Vec::new();
    for &dataset in datasets {
        let path = dir.join(format!("{dataset}.csv"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (i, line) in text.lines().enumerate().skip(1) {
            let fields: Vec<&str> = line.split(',').collect();
            let parsed = match fields.as_slice() {
                [_, config, nodes, _, time, ..] => nodes
                    .parse::<u32>()
                    .ok()
                    .zip(time.parse::<f64>().ok().filter(|t| *t > 0.0))
                    .map(|(nodes, value)| (*config, nodes, value)),
                _ => None,
            };
            let Some((config, nodes, value)) = parsed else {
                return Err(format!(
                    "{}:{}: not app,config,nodes,repetition,time_s",
                    path.display(),
                    i + 1
                ));
            };
            let run = Observation {
                nodes,
                value,
                weight: 1.0,
            };
            match out
                .iter_mut()
                .find(|s| s.dataset == dataset && s.config == config)
            {
                Some(series) => series.runs.push(run),
                None => out.push(Series {
                    dataset: dataset.to_owned(),
                    config: config.to_owned(),
                    runs: vec![run],
                }),
            }
        }
    }
    Ok(out)
}

/// What is predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An interior node count from all the others.
    LeaveOneOut,
    /// The largest node count from those below it.
    Largest,
}

/// One prediction by every method.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub dataset: String,
    pub config: String,
    pub kind: Kind,
    pub nodes: u32,
    pub truth: f64,
    /// % errors, in the order of `METHODS`.
    pub errors: [f64; 5],
    /// The family Joulecast answered with.
    pub family: &'static str,
}

/// One back-test question: `nodes` predicted from `training`.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub kind: Kind,
    pub nodes: u32,
    pub training: Vec<Observation>,
    /// The mean of the runs at `nodes`.
    pub truth: f64,
}

/// The questions of one series, if it has at least three node counts: each
/// interior count from all the others, the largest from those below it.
pub fn questions(series: &Series) -> Vec<Question> {
    let counts: Vec<u32> = History::new(&series.runs)
        .points
        .iter()
        .map(|p| p.nodes)
        .collect();
    let m = counts.len();
    if m < 3 {
        return Vec::new();
    }
    let targets = (1..m - 1)
        .map(|i| (Kind::LeaveOneOut, counts[i]))
        .chain([(Kind::Largest, counts[m - 1])]);
    targets
        .map(|(kind, nodes)| {
            let (training, held): (Vec<Observation>, Vec<Observation>) =
                series.runs.iter().partition(|o| match kind {
                    Kind::LeaveOneOut => o.nodes != nodes,
                    Kind::Largest => o.nodes < nodes,
                });
            let truth = held.iter().map(|o| o.value).sum::<f64>() / held.len() as f64;
            Question {
                kind,
                nodes,
                training,
                truth,
            }
        })
        .collect()
}

/// Joulecast's TtS at `nodes` from the timed runs `training`, as an
/// application with default settings: the TtS model's own prediction, and
/// the answer served (reconciled with EtS and APC, fitted on the same runs
/// with each node drawing `NODE_POWER_W`).
pub fn joulecast(training: &[Observation], nodes: u32) -> Option<(Prediction, Prediction)> {
    let models = Metric::ALL.map(|metric| {
        let options = FitOptions {
            metric,
            mode: ScalingMode::Unknown,
            allowed_rmse_pct: model::DEFAULT_ALLOWED_RMSE_PCT,
        };
        model::fit(&with_power(training, metric), options)
    });
    let [Some(ets), Some(apc), Some(tts)] = &models else {
        return None;
    };
    let [_, _, served] = consistency::predict([ets, apc, tts], nodes, Aggregate::Mean);
    Some((tts.predict(nodes, Aggregate::Mean), served))
}

/// Every case of every series with at least three node counts.
pub fn run(series: &[Series]) -> Vec<Case> {
    let mut cases = Vec::new();
    for s in series {
        for q in questions(s) {
            let Some((prediction, served)) = joulecast(&q.training, q.nodes) else {
                continue;
            };
            let n = f64::from(q.nodes);
            let predictions = [
                Some(prediction.value),
                Some(served.value),
                loglog_neighbours(&q.training, q.nodes),
                Baseline::line(&q.training).map(|b| b.at(n)),
                Baseline::power_law(&q.training).map(|b| b.at(n)),
            ];
            cases.push(Case {
                dataset: s.dataset.clone(),
                config: s.config.clone(),
                kind: q.kind,
                nodes: q.nodes,
                truth: q.truth,
                errors: predictions.map(|p| p.map_or(f64::INFINITY, |p| error_pct(p, q.truth))),
                family: prediction.family.map_or("history", model::Family::as_str),
            });
        }
    }
    cases
}

/// The observations of `metric` of the timed runs `runs`, each node drawing
/// `NODE_POWER_W`: what a user would store as runs (`NODE_POWER_W` × nodes
/// as `avg_power_w`, the time as `duration_s`).
fn with_power(runs: &[Observation], metric: Metric) -> Vec<Observation> {
    runs.iter()
        .map(|run| {
            let power = NODE_POWER_W * f64::from(run.nodes);
            let value = match metric {
                Metric::Ets => power * run.value,
                Metric::Apc => power,
                Metric::Tts => run.value,
            };
            Observation { value, ..*run }
        })
        .collect()
}

/// Median % error per method over `cases` of `kind` that `keep` selects.
pub fn medians(cases: &[Case], kind: Kind, keep: impl Fn(&Case) -> bool) -> Option<[f64; 5]> {
    let chosen: Vec<&Case> = cases.iter().filter(|c| c.kind == kind && keep(c)).collect();
    (!chosen.is_empty()).then(|| {
        std::array::from_fn(|k| median(&chosen.iter().map(|c| c.errors[k]).collect::<Vec<_>>()))
    })
}

/// The report of docs/accuracy.md: per data set and configuration, then
/// per data set, then over all.
pub fn to_markdown(cases: &[Case]) -> String {
    let mut out = String::new();
    let header = format!(
        "| data set | configuration | cases | {} |\n|---|---|---:|{}\n",
        METHODS.join(" | "),
        "---:|".repeat(METHODS.len())
    );
    let cells = |m: [f64; 5]| {
        m.iter()
            .map(|e| format!("{e:.2}"))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let mut groups: Vec<(&str, &str)> = cases
        .iter()
        .map(|c| (c.dataset.as_str(), c.config.as_str()))
        .collect();
    groups.dedup();
    for (kind, title) in [
        (
            Kind::LeaveOneOut,
            "Leave one node count out: median % error of TtS",
        ),
        (
            Kind::Largest,
            "Largest node count from the smaller ones: % error of TtS",
        ),
    ] {
        let _ = write!(out, "### {title}\n\n{header}");
        let shown = |dataset: &str| {
            groups.iter().filter(|g| g.0 == dataset).count() <= MAX_CONFIGURATIONS_SHOWN
        };
        for &(dataset, config) in groups.iter().filter(|g| shown(g.0)) {
            let keep = |c: &Case| c.dataset == dataset && c.config == config;
            if let Some(m) = medians(cases, kind, keep) {
                let count = cases.iter().filter(|c| c.kind == kind && keep(c)).count();
                let _ = writeln!(out, "| {dataset} | {config} | {count} | {} |", cells(m));
            }
        }
        let mut datasets: Vec<&str> = groups.iter().map(|g| g.0).collect();
        datasets.dedup();
        for dataset in datasets {
            let keep = |c: &Case| c.dataset == dataset;
            if let Some(m) = medians(cases, kind, keep) {
                let count = cases.iter().filter(|c| c.kind == kind && keep(c)).count();
                let _ = writeln!(out, "| **{dataset}** | all | {count} | {} |", cells(m));
            }
        }
        if let Some(m) = medians(cases, kind, |_| true) {
            let count = cases.iter().filter(|c| c.kind == kind).count();
            let _ = writeln!(out, "| **all** | | {count} | {} |", cells(m));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archer2")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixtures_load_with_every_configuration() {
        let series = load(&fixtures(), &DATASETS).unwrap();
        let vasp: Vec<&Series> = series
            .iter()
            .filter(|s| s.dataset == "ofiucx_vasp")
            .collect();
        assert_eq!(vasp.len(), 2);
        assert_eq!(vasp.iter().map(|s| s.runs.len()).sum::<usize>(), 43);
        assert!(series.iter().all(|s| s.runs.iter().all(|r| r.value > 0.0)));
    }

    #[test]
    fn a_bad_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("x.csv"),
            "app,config,nodes,repetition,time_s\nA,B,four,1,2\n",
        )
        .unwrap();
        let error = load(dir.path(), &["x"]).unwrap_err();
        assert!(
            error.ends_with("x.csv:2: not app,config,nodes,repetition,time_s"),
            "{error}"
        );
    }
}

/// The targets on the committed data (issue 12): on the data sets of smooth
/// strong scaling measured repeatedly (VASP, NEMO, CP2K), TtS leave one
/// count out within 3 % and the largest count within 15 % (medians); on
/// every data set with repeated runs at each node count, no worse than
/// log-log neighbour interpolation; and leaving one count out, no worse on
/// any data set. CASTEP's times double or treble past 64 nodes: its figures
/// are reported in docs/accuracy.md, not held to the absolute targets. The
/// largest count of the single-run data sets (OpenSBLI, OSU) is reported,
/// not checked: Joulecast loses there (docs/accuracy.md).
#[cfg(test)]
mod targets {
    use super::*;

    const SMOOTH: [&str; 3] = ["ofiucx_vasp", "ofiucx_nemo", "ofiucx_cp2k"];

    fn repeated(series: &[Series], dataset: &str) -> bool {
        series
            .iter()
            .filter(|s| s.dataset == dataset)
            .all(|s| History::new(&s.runs).points.iter().all(|p| p.runs > 1))
    }

    #[test]
    fn real_scaling_data_meet_the_targets() {
        let series = load(&fixtures(), &DATASETS).unwrap();
        let cases = run(&series);
        let report = to_markdown(&cases);
        let smooth = |c: &Case| SMOOTH.contains(&c.dataset.as_str());
        let loo = medians(&cases, Kind::LeaveOneOut, smooth).unwrap();
        let largest = medians(&cases, Kind::Largest, smooth).unwrap();
        // The TtS model alone and as served, against log-log neighbours.
        const JOULECAST: [usize; 2] = [0, 1];
        const LOGLOG: usize = 2;
        let mut checked = 0;
        for j in JOULECAST {
            assert!(loo[j] <= 3.0, "leave-one-out {loo:?}\n{report}");
            assert!(largest[j] <= 15.0, "largest {largest:?}\n{report}");
            for dataset in DATASETS {
                let kinds: &[Kind] = if repeated(&series, dataset) {
                    &[Kind::LeaveOneOut, Kind::Largest]
                } else {
                    &[Kind::LeaveOneOut]
                };
                for &kind in kinds {
                    let m = medians(&cases, kind, |c| c.dataset == dataset).unwrap();
                    assert!(
                        m[j] <= m[LOGLOG] + 1e-9,
                        "{dataset} {kind:?}: {m:?}\n{report}"
                    );
                    checked += 1;
                }
            }
            let m = medians(&cases, Kind::LeaveOneOut, |_| true).unwrap();
            assert!(m[j] <= m[LOGLOG], "all: {m:?}\n{report}");
        }
        assert_eq!(checked, 22, "CASTEP, CP2K, NEMO and VASP are repeated");
    }
}

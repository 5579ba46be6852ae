//! The predictor on real measurements: ARCHER2 strong-scaling times
//! (tests/fixtures/archer2/, with their sources and licences in its README).
//!
//! For every configuration of every data set with at least three node
//! counts, time-to-solution is predicted as a user would meet it:
//! - **leave one count out**: each interior node count predicted from the
//!   runs at all the others;
//! - **largest count**: the largest node count predicted from the runs
//!   below it;
//! - **smallest count**: the smallest node count predicted from the runs
//!   above it (a job on fewer nodes than ever measured).
//!
//! The truth is the mean of the runs at the count predicted. Beside
//! Joulecast, the baselines: log-log interpolation between the neighbouring
//! measured counts (beyond them, the power law through the last two), and a
//! least-squares line and power law through all runs.
//!
//! Where a file gives runs' energies too, EtS and APC are graded the same
//! way (`Series::metered`). `load_paths` reads any such CSV files, or
//! directories of them, by their column names (docs/accuracy.md).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::{Baseline, error_pct, loglog_neighbours, median};
use crate::model::{
    self, Aggregate, FitOptions, History, Metric, Observation, Prediction, ScalingMode, consistency,
};
use crate::validate;

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
    /// Each run's `time_s`.
    pub runs: Vec<Observation>,
    /// The runs whose energy was measured (a column `energy_j`), on which
    /// EtS and APC are graded too.
    pub metered: Vec<Metered>,
}

/// A run whose energy was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metered {
    pub nodes: u32,
    pub energy_j: f64,
    /// What the energy was measured over: the column `elapsed_s` where the
    /// file has one (the job's wall time; `time_s` may time only part of
    /// it, such as one iteration), otherwise `time_s`.
    pub duration_s: f64,
}

impl Metered {
    /// This run's value of `metric`: its energy, its average power, or
    /// its duration.
    pub fn value(&self, metric: Metric) -> f64 {
        match metric {
            Metric::Ets => self.energy_j,
            Metric::Apc => self.energy_j / self.duration_s,
            Metric::Tts => self.duration_s,
        }
    }

    fn observation(&self, metric: Metric) -> Observation {
        Observation {
            nodes: self.nodes,
            value: self.value(metric),
            weight: 1.0,
        }
    }
}

/// Read the data sets `datasets` from `dir`, each `<name>.csv`; an error
/// names the file, the line and the field.
pub fn load(dir: &Path, datasets: &[&str]) -> Result<Vec<Series>, String> {
    let mut out = Vec::new();
    for &dataset in datasets {
        out.extend(read_series(&dir.join(format!("{dataset}.csv")))?);
    }
    Ok(out)
}

/// What `load_paths` read.
#[derive(Debug, Default)]
pub struct Loaded {
    pub series: Vec<Series>,
    /// Files of a directory that are not run tables (a provenance list, a
    /// README's table), each with why.
    pub skipped: Vec<String>,
}

/// Read every data set in `paths`: a file is one data set, named after its
/// stem; a directory gives each of its `*.csv` files, by name, skipping
/// (and listing) those without the columns `config`, `nodes` and `time_s`.
/// The optional columns `energy_j` and `elapsed_s` give `Series::metered`;
/// columns may come in any order, and others are ignored. An error names
/// the file, the line and the field.
pub fn load_paths(paths: &[PathBuf]) -> Result<Loaded, String> {
    let mut loaded = Loaded::default();
    for path in paths {
        if !path.is_dir() {
            loaded.series.extend(read_series(path)?);
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "csv"))
            .collect();
        files.sort();
        for file in files {
            match read(&file)? {
                Table::Series(series) => loaded.series.extend(series),
                Table::Other(reason) => {
                    loaded.skipped.push(format!("{}: {reason}", file.display()))
                }
            }
        }
    }
    if loaded.series.is_empty() {
        return Err(
            "no runs: give CSV files, or directories of them, with the columns \
                    config, nodes and time_s"
                .to_owned(),
        );
    }
    Ok(loaded)
}

/// A file's content: its series, or why it holds no runs.
enum Table {
    Series(Vec<Series>),
    Other(String),
}

/// The columns a run table needs.
const COLUMNS: [&str; 3] = ["config", "nodes", "time_s"];
/// The columns a run table may have: a run's energy, and the time it was
/// measured over.
const ENERGY_COLUMNS: [&str; 2] = ["energy_j", "elapsed_s"];

/// One CSV file named on its own, which must be a run table.
fn read_series(path: &Path) -> Result<Vec<Series>, String> {
    match read(path)? {
        Table::Series(series) => Ok(series),
        Table::Other(reason) => Err(format!("{}: {reason}", path.display())),
    }
}

/// One CSV file: the series of its configurations, the data set named after
/// its stem.
fn read(path: &Path) -> Result<Table, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dataset = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let cell = |field: &str| field.trim().trim_matches('"').to_owned();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let header: Vec<String> = match lines.next() {
        Some((_, line)) => line.split(',').map(|f| cell(f).to_lowercase()).collect(),
        None => return Ok(Table::Other("empty".to_owned())),
    };
    let mut at = [0; 3];
    for (k, name) in COLUMNS.iter().enumerate() {
        match header.iter().position(|h| h == name) {
            Some(i) => at[k] = i,
            None => return Ok(Table::Other(format!("no column `{name}`"))),
        }
    }
    let optional = ENERGY_COLUMNS.map(|name| header.iter().position(|h| h == name));
    let mut out: Vec<Series> = Vec::new();
    for (i, line) in lines {
        let fields: Vec<String> = line.split(',').map(cell).collect();
        let bad =
            |name: &str, reason: &str| format!("{}:{}: {name}: {reason}", path.display(), i + 1);
        let field = |k: usize| fields.get(at[k]).ok_or_else(|| bad(COLUMNS[k], "missing"));
        // The service's own bounds: what it would refuse to store is no
        // history to grade it on.
        let config = field(0)?.clone();
        let nodes = field(1)?
            .parse::<i64>()
            .map_err(|_| "must be a whole number".to_owned())
            .and_then(validate::node_count)
            .map_err(|reason| bad("nodes", &reason))?;
        let positive = |cell: &String, name: &str| {
            cell.parse::<f64>()
                .map_err(|_| "must be a number".to_owned())
                .and_then(|v| validate::positive(v).map(|()| v))
                .map_err(|reason| bad(name, &reason))
        };
        let value = positive(field(2)?, COLUMNS[2])?;
        // Energy and its duration, where given: a blank cell is a run
        // whose energy was not measured.
        let [energy_j, elapsed_s] = optional.map(|at| {
            at.and_then(|k| fields.get(k))
                .filter(|cell| !cell.is_empty())
        });
        let metered = match energy_j {
            Some(energy) => Some(Metered {
                nodes,
                energy_j: positive(energy, ENERGY_COLUMNS[0])?,
                duration_s: elapsed_s.map_or(Ok(value), |e| positive(e, ENERGY_COLUMNS[1]))?,
            }),
            None => None,
        };
        let run = Observation {
            nodes,
            value,
            weight: 1.0,
        };
        let series = match out.iter().position(|s| s.config == config) {
            Some(k) => &mut out[k],
            None => {
                out.push(Series {
                    dataset: dataset.clone(),
                    config,
                    runs: Vec::new(),
                    metered: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        series.runs.push(run);
        series.metered.extend(metered);
    }
    Ok(Table::Series(out))
}

/// What is predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An interior node count from all the others.
    LeaveOneOut,
    /// The largest node count from those below it.
    Largest,
    /// The smallest node count from those above it: a job on fewer nodes
    /// than the application ever ran on.
    Smallest,
}

/// One prediction by every method.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub dataset: String,
    pub config: String,
    pub metric: Metric,
    pub kind: Kind,
    pub nodes: u32,
    pub truth: f64,
    /// % errors, in the order of `METHODS`.
    pub errors: [f64; 5],
    /// The family Joulecast answered with.
    pub family: &'static str,
    /// Whether the truth lies in the 95 % interval of Joulecast's model
    /// alone and of the answer served (`METHODS`' first two).
    pub covered: [bool; 2],
}

/// One back-test question: `metric` at `nodes` predicted from `training`.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub metric: Metric,
    pub kind: Kind,
    pub nodes: u32,
    /// The runs predicted from, as values of `metric`.
    pub training: Vec<Observation>,
    /// The same runs with their energies, for EtS and APC (empty for TtS,
    /// which is graded on `time_s` alone).
    pub metered: Vec<Metered>,
    /// The mean of the runs at `nodes`.
    pub truth: f64,
}

/// The questions of one series, for every node count graded: each interior
/// count from all the others, the largest from those below it; TtS from
/// `time_s`, and EtS and APC from the runs with energies, for each that has
/// at least three node counts.
pub fn questions(series: &Series) -> Vec<Question> {
    let mut out = Vec::new();
    for (kind, nodes) in targets(&series.runs) {
        let (training, held) = split(&series.runs, |o| o.nodes, kind, nodes);
        out.push(Question {
            metric: Metric::Tts,
            kind,
            nodes,
            truth: mean(held.iter().map(|o| o.value)),
            training,
            metered: Vec::new(),
        });
    }
    for metric in [Metric::Ets, Metric::Apc] {
        let runs: Vec<Observation> = series
            .metered
            .iter()
            .map(|m| m.observation(metric))
            .collect();
        for (kind, nodes) in targets(&runs) {
            let (metered, held) = split(&series.metered, |m| m.nodes, kind, nodes);
            out.push(Question {
                metric,
                kind,
                nodes,
                truth: mean(held.iter().map(|m| m.value(metric))),
                training: metered.iter().map(|m| m.observation(metric)).collect(),
                metered,
            });
        }
    }
    out
}

/// The node counts predicted in `runs`, if they have at least three: each
/// interior one, then the largest and the smallest.
fn targets(runs: &[Observation]) -> Vec<(Kind, u32)> {
    let counts: Vec<u32> = History::new(runs).points.iter().map(|p| p.nodes).collect();
    let m = counts.len();
    if m < 3 {
        return Vec::new();
    }
    (1..m - 1)
        .map(|i| (Kind::LeaveOneOut, counts[i]))
        .chain([(Kind::Largest, counts[m - 1]), (Kind::Smallest, counts[0])])
        .collect()
}

/// `items` split into what a question of `kind` at `nodes` trains on and
/// what it holds out.
fn split<T: Clone>(
    items: &[T],
    nodes_of: impl Fn(&T) -> u32,
    kind: Kind,
    nodes: u32,
) -> (Vec<T>, Vec<T>) {
    items.iter().cloned().partition(|item| match kind {
        Kind::LeaveOneOut => nodes_of(item) != nodes,
        Kind::Largest => nodes_of(item) < nodes,
        Kind::Smallest => nodes_of(item) > nodes,
    })
}

fn mean(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let count = values.len() as f64;
    values.sum::<f64>() / count
}

/// Joulecast's TtS at `nodes` from the timed runs `training`, as an
/// application with default settings: the TtS model's own prediction, and
/// the answer served (reconciled with EtS and APC, fitted on the same runs
/// with each node drawing `NODE_POWER_W`).
pub fn joulecast(training: &[Observation], nodes: u32) -> Option<(Prediction, Prediction)> {
    let metered: Vec<Metered> = training
        .iter()
        .map(|run| Metered {
            nodes: run.nodes,
            energy_j: NODE_POWER_W * f64::from(run.nodes) * run.value,
            duration_s: run.value,
        })
        .collect();
    joulecast_metered(&metered, Metric::Tts, nodes)
}

/// Joulecast's `metric` at `nodes` from the runs with energies `training`
/// (EtS their energies, APC those over their durations, TtS the
/// durations), as an application with default settings: that metric's
/// model alone, and the answer served (reconciled with the other two,
/// `model::consistency`).
pub fn joulecast_metered(
    training: &[Metered],
    metric: Metric,
    nodes: u32,
) -> Option<(Prediction, Prediction)> {
    let models = Metric::ALL.map(|m| {
        let options = FitOptions {
            metric: m,
            mode: ScalingMode::Unknown,
            allowed_rmse_pct: model::DEFAULT_ALLOWED_RMSE_PCT,
        };
        let history: Vec<Observation> = training.iter().map(|run| run.observation(m)).collect();
        model::fit(&history, options)
    });
    let [Some(ets), Some(apc), Some(tts)] = &models else {
        return None;
    };
    let models = [ets, apc, tts];
    let served = consistency::predict(models, nodes, Aggregate::Mean);
    let k = metric.index();
    Some((models[k].predict(nodes, Aggregate::Mean), served[k].clone()))
}

/// Every case of every series with at least three node counts.
pub fn run(series: &[Series]) -> Vec<Case> {
    let mut cases = Vec::new();
    for s in series {
        for q in questions(s) {
            let answer = match q.metric {
                Metric::Tts => joulecast(&q.training, q.nodes),
                metric => joulecast_metered(&q.metered, metric, q.nodes),
            };
            let Some((prediction, served)) = answer else {
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
                metric: q.metric,
                kind: q.kind,
                nodes: q.nodes,
                truth: q.truth,
                errors: predictions.map(|p| p.map_or(f64::INFINITY, |p| error_pct(p, q.truth))),
                family: prediction.family.map_or("history", model::Family::as_str),
                covered: [&prediction, &served].map(|p| (p.low..=p.high).contains(&q.truth)),
            });
        }
    }
    cases
}

/// Median % error per method over `cases` of `metric` and `kind` that
/// `keep` selects.
pub fn medians(
    cases: &[Case],
    metric: Metric,
    kind: Kind,
    keep: impl Fn(&Case) -> bool,
) -> Option<[f64; 5]> {
    let chosen: Vec<&Case> = cases
        .iter()
        .filter(|c| c.metric == metric && c.kind == kind && keep(c))
        .collect();
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
    let mut datasets: Vec<&str> = groups.iter().map(|g| g.0).collect();
    datasets.dedup();
    let shown = |dataset: &str| {
        groups.iter().filter(|g| g.0 == dataset).count() <= MAX_CONFIGURATIONS_SHOWN
    };
    let metrics = [Metric::Tts, Metric::Ets, Metric::Apc];
    for metric in metrics
        .into_iter()
        .filter(|m| cases.iter().any(|c| c.metric == *m))
    {
        let name = label(metric);
        for (kind, title) in [
            (
                Kind::LeaveOneOut,
                format!("Leave one node count out: median % error of {name}"),
            ),
            (
                Kind::Largest,
                format!("Largest node count from the smaller ones: % error of {name}"),
            ),
            (
                Kind::Smallest,
                format!("Smallest node count from the larger ones: % error of {name}"),
            ),
        ] {
            let _ = write!(out, "### {title}\n\n{header}");
            let mut row = |first: &str, second: &str, keep: &dyn Fn(&Case) -> bool| {
                if let Some(m) = medians(cases, metric, kind, keep) {
                    let count = cases
                        .iter()
                        .filter(|c| c.metric == metric && c.kind == kind && keep(c))
                        .count();
                    let second = if second.is_empty() {
                        " ".to_owned()
                    } else {
                        format!(" {second} ")
                    };
                    let _ = writeln!(out, "| {first} |{second}| {count} | {} |", cells(m));
                }
            };
            for &(dataset, config) in groups.iter().filter(|g| shown(g.0)) {
                row(dataset, config, &|c| {
                    c.dataset == dataset && c.config == config
                });
            }
            for &dataset in &datasets {
                row(&format!("**{dataset}**"), "all", &|c| c.dataset == dataset);
            }
            row("**all**", "", &|_| true);
            out.push('\n');
            if let Some(line) = coverage(cases, metric, kind) {
                let _ = writeln!(out, "{line}\n");
            }
        }
    }
    out
}

/// How often the truth lay in the 95 % intervals of Joulecast's answers
/// of `metric` and `kind`, alone and as served, over all cases and, as
/// served, per data set.
fn coverage(cases: &[Case], metric: Metric, kind: Kind) -> Option<String> {
    let chosen: Vec<&Case> = cases
        .iter()
        .filter(|c| c.metric == metric && c.kind == kind)
        .collect();
    let n = chosen.len();
    if n == 0 {
        return None;
    }
    let inside = |k: usize| chosen.iter().filter(|c| c.covered[k]).count();
    let pct = |x: usize| 100.0 * x as f64 / n as f64;
    let (model, served) = (inside(0), inside(1));
    let mut datasets: Vec<&str> = chosen.iter().map(|c| c.dataset.as_str()).collect();
    datasets.dedup();
    let per_dataset: Vec<String> = datasets
        .iter()
        .map(|&d| {
            let of = chosen.iter().filter(|c| c.dataset == d);
            let held = of.clone().filter(|c| c.covered[1]).count();
            format!("{d} {held}/{}", of.count())
        })
        .collect();
    Some(format!(
        "The 95 % interval held the truth in {model} of {n} cases ({:.0} %) as the model \
         gives it, in {served} ({:.0} %) as served; as served, by data set: {}.",
        pct(model),
        pct(served),
        per_dataset.join(", ")
    ))
}

/// Every case as CSV, one line each, for a closer look than the medians
/// give: `dataset,config,metric,kind,nodes,truth,family`, then the % error
/// of each of `METHODS` (`inf` where a method gave no answer), then
/// whether the truth lay in the 95 % interval of Joulecast's model and of
/// the answer served (`true` / `false`).
pub fn to_csv(cases: &[Case]) -> String {
    let methods: Vec<String> = METHODS
        .iter()
        .map(|m| format!("error_pct_{}", m.to_lowercase().replace([' ', '-'], "_")))
        .collect();
    let mut out = format!(
        "dataset,config,metric,kind,nodes,truth,family,{},in_interval_joulecast,\
         in_interval_joulecast_as_served\n",
        methods.join(",")
    );
    for c in cases {
        let kind = match c.kind {
            Kind::LeaveOneOut => "leave_one_out",
            Kind::Largest => "largest",
            Kind::Smallest => "smallest",
        };
        let errors: Vec<String> = c.errors.iter().map(|e| format!("{e:.4}")).collect();
        let _ = writeln!(
            out,
            "{},{},{},{kind},{},{},{},{},{},{}",
            c.dataset,
            c.config,
            c.metric.as_str(),
            c.nodes,
            c.truth,
            c.family,
            errors.join(","),
            c.covered[0],
            c.covered[1]
        );
    }
    out
}

/// How the report names `metric`.
fn label(metric: Metric) -> &'static str {
    match metric {
        Metric::Ets => "EtS",
        Metric::Apc => "APC",
        Metric::Tts => "TtS",
    }
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
        let write = |text: &str| std::fs::write(dir.path().join("x.csv"), text).unwrap();
        let error = |text: &str| {
            write(text);
            load(dir.path(), &["x"]).unwrap_err()
        };
        let header = "app,config,nodes,repetition,time_s,energy_j\n";
        // The service's bounds (`validate`), with its reasons.
        for (line, expected) in [
            ("A,B,four,1,2,", "x.csv:2: nodes: must be a whole number"),
            (
                "A,B,0,1,2,",
                "x.csv:2: nodes: must be between 1 and 1000000 (got 0)",
            ),
            (
                "A,B,4294967295,1,2,",
                "x.csv:2: nodes: must be between 1 and 1000000",
            ),
            (
                "A,B,4,1,-2,",
                "x.csv:2: time_s: must be greater than 0 (got -2)",
            ),
            ("A,B,4,1,NaN,", "x.csv:2: time_s: must be a finite number"),
            (
                "A,B,4,1,5e-324,",
                "x.csv:2: time_s: must be from 1e-100 to 1e100",
            ),
            (
                "A,B,4,1,1e300,",
                "x.csv:2: time_s: must be from 1e-100 to 1e100",
            ),
            ("A,B,4,1,x,", "x.csv:2: time_s: must be a number"),
            ("A,B,4", "x.csv:2: time_s: missing"),
            (
                "A,B,4,1,2,0",
                "x.csv:2: energy_j: must be greater than 0 (got 0)",
            ),
        ] {
            let got = error(&format!("{header}{line}\n"));
            assert!(got.contains(expected), "{line}: {got}");
        }
        let got = error("app,config,nodes,repetition,seconds\nA,B,4,1,2\n");
        assert!(got.ends_with("x.csv: no column `time_s`"), "{got}");
        // A blank energy is a run whose energy was not measured.
        write(&format!("{header}A,B,4,1,2,\nA,B,8,1,1,30\n"));
        let series = load(dir.path(), &["x"]).unwrap();
        assert_eq!(series[0].runs.len(), 2);
        assert_eq!(series[0].metered.len(), 1);
    }

    #[test]
    fn paths_give_every_run_table_by_its_columns_and_skip_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        // Columns by name, in any order, extra ones ignored; quoted cells
        // and Windows line ends read as the same.
        std::fs::write(
            data.join("b_code.csv"),
            "time_s,\"nodes\",extra,config\r\n10,1,x,\"c1\"\r\n5.5,2,y,c1\r\n3,4,z,c2\r\n\r\n",
        )
        .unwrap();
        std::fs::write(data.join("a_code.csv"), "config,nodes,time_s\nk,8,1\n").unwrap();
        std::fs::write(data.join("provenance.csv"), "file,source\nb_code.csv,x\n").unwrap();
        std::fs::write(data.join("notes.txt"), "not read").unwrap();
        let single = dir.path().join("c.csv");
        std::fs::write(&single, "config,nodes,time_s\nq,16,2\n").unwrap();

        let loaded = load_paths(&[data.clone(), single.clone()]).unwrap();
        let seen: Vec<(&str, &str, usize)> = loaded
            .series
            .iter()
            .map(|s| (s.dataset.as_str(), s.config.as_str(), s.runs.len()))
            .collect();
        assert_eq!(
            seen,
            [
                ("a_code", "k", 1),
                ("b_code", "c1", 2),
                ("b_code", "c2", 1),
                ("c", "q", 1)
            ]
        );
        assert_eq!(loaded.series[1].runs[1].nodes, 2);
        assert_eq!(loaded.series[1].runs[1].value, 5.5);
        assert_eq!(loaded.skipped.len(), 1, "{:?}", loaded.skipped);
        assert!(loaded.skipped[0].ends_with("provenance.csv: no column `config`"));
        // Named on its own, a file that is not a run table is an error.
        let error = load_paths(&[data.join("provenance.csv")]).unwrap_err();
        assert!(
            error.ends_with("provenance.csv: no column `config`"),
            "{error}"
        );
        let error = load_paths(&[dir.path().join("missing.csv")]).unwrap_err();
        assert!(error.contains("missing.csv"), "{error}");
        let empty = tempfile::tempdir().unwrap();
        assert!(
            load_paths(&[empty.path().to_owned()])
                .unwrap_err()
                .starts_with("no runs")
        );
    }

    /// With energies (and the wall time they were measured over), EtS and
    /// APC are graded too: on exact power laws every method through the
    /// neighbours is exact, and Joulecast recovers them.
    #[test]
    fn energies_are_graded_as_ets_and_apc() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("app,config,nodes,repetition,time_s,energy_j,elapsed_s\n");
        for n in [1u32, 2, 4, 8, 16, 32] {
            let n_f = f64::from(n);
            // The timed loop is a tenth of the job, which the energy covers;
            // the job takes 1000·n^-0.8 s at 300 W per node.
            let elapsed = 1000.0 * n_f.powf(-0.8);
            let energy = 300.0 * n_f * elapsed;
            for repetition in 1..=3 {
                let _ = writeln!(
                    text,
                    "A,c,{n},{repetition},{},{energy},{elapsed}",
                    elapsed / 10.0
                );
            }
        }
        std::fs::write(dir.path().join("e.csv"), text).unwrap();
        let series = load(dir.path(), &["e"]).unwrap();
        assert_eq!(series[0].metered.len(), 18);
        let cases = run(&series);
        for metric in [Metric::Tts, Metric::Ets, Metric::Apc] {
            for kind in [Kind::LeaveOneOut, Kind::Largest, Kind::Smallest] {
                let of = |c: &&Case| c.metric == metric && c.kind == kind;
                let expected = if kind == Kind::LeaveOneOut { 4 } else { 1 };
                assert_eq!(
                    cases.iter().filter(of).count(),
                    expected,
                    "{metric:?} {kind:?}"
                );
                let m = medians(&cases, metric, kind, |_| true).unwrap();
                assert!(m[0] < 0.01 && m[1] < 0.01, "{metric:?} {kind:?}: {m:?}");
                assert!(m[2] < 0.01, "log-log neighbours: {m:?}");
            }
        }
        // Truths are of the metric graded: the held-out job's energy and
        // power, not the timed loop's.
        let ets = cases
            .iter()
            .find(|c| c.metric == Metric::Ets && c.kind == Kind::Largest)
            .unwrap();
        let truth = 300.0 * 32.0 * 1000.0 * 32f64.powf(-0.8);
        assert!((ets.truth - truth).abs() < 1e-6 * truth, "{}", ets.truth);
        let apc = cases
            .iter()
            .find(|c| c.metric == Metric::Apc && c.kind == Kind::Largest)
            .unwrap();
        assert!((apc.truth - 300.0 * 32.0).abs() < 1e-6, "{}", apc.truth);
        let csv = to_csv(&cases);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + cases.len());
        assert_eq!(
            lines[0],
            "dataset,config,metric,kind,nodes,truth,family,error_pct_joulecast,\
             error_pct_joulecast_as_served,error_pct_log_log_neighbours,\
             error_pct_least_squares_line,error_pct_least_squares_power_law,\
             in_interval_joulecast,in_interval_joulecast_as_served"
        );
        let row = lines
            .iter()
            .find(|l| l.contains(",ets,largest,"))
            .expect("the EtS largest-count case");
        let cells: Vec<&str> = row.split(',').collect();
        assert_eq!(cells[..5], ["e", "c", "ets", "largest", "32"]);
        assert_eq!(cells[5].parse::<f64>().unwrap(), ets.truth);
        assert_eq!(cells.len(), 14);
        assert!(["true", "false"].contains(&cells[12]), "{row}");
        // Exact, so every 95 % interval holds its truth; the report counts
        // the ones that do not.
        assert!(cases.iter().all(|c| c.covered == [true, true]));
        let report = to_markdown(&cases);
        assert!(
            report.contains("held the truth in 4 of 4 cases (100 %) as the model gives it"),
            "{report}"
        );
        let mut missed = cases.clone();
        let first = missed
            .iter_mut()
            .find(|c| c.metric == Metric::Tts && c.kind == Kind::LeaveOneOut)
            .unwrap();
        first.covered[1] = false;
        let line = coverage(&missed, Metric::Tts, Kind::LeaveOneOut).unwrap();
        assert!(
            line.contains("in 4 of 4 cases (100 %) as the model gives it, in 3 (75 %) as served"),
            "{line}"
        );
        assert!(line.ends_with("by data set: e 3/4."), "{line}");
        for title in [
            "median % error of TtS",
            "median % error of EtS",
            "% error of APC",
        ] {
            assert!(report.contains(title), "{report}");
        }
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
/// not checked: Joulecast loses there (docs/accuracy.md). The smallest
/// count from the larger ones: the TtS model alone and as served no worse
/// than log-log over all cases (docs/accuracy.md, "Below the range").
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
        let loo = medians(&cases, Metric::Tts, Kind::LeaveOneOut, smooth).unwrap();
        let largest = medians(&cases, Metric::Tts, Kind::Largest, smooth).unwrap();
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
                    let m = medians(&cases, Metric::Tts, kind, |c| c.dataset == dataset).unwrap();
                    assert!(
                        m[j] <= m[LOGLOG] + 1e-9,
                        "{dataset} {kind:?}: {m:?}\n{report}"
                    );
                    checked += 1;
                }
            }
            let m = medians(&cases, Metric::Tts, Kind::LeaveOneOut, |_| true).unwrap();
            assert!(m[j] <= m[LOGLOG], "all: {m:?}\n{report}");
        }
        let m = medians(&cases, Metric::Tts, Kind::Smallest, |_| true).unwrap();
        for j in JOULECAST {
            assert!(m[j] <= m[LOGLOG], "smallest, all: {m:?}\n{report}");
        }
        assert_eq!(checked, 22, "CASTEP, CP2K, NEMO and VASP are repeated");
    }
}

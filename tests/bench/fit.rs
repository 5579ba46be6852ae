//! Criterion benchmarks of the model: fitting histories of 10 to 10,000 runs,
//! a prediction from a fitted (warm) model, and the empirical model search of
//! docs/model.md §6.2. `cargo bench --bench fit`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use joulecast::model::synth::{self, SyntheticApp};
use joulecast::model::{self, Aggregate, FitOptions, Metric, Observation, ScalingMode};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// A realistic history: a strong-scaling application with 1-2 % noise, runs
/// on node counts drawn as users request them, up to 256 nodes.
fn history(runs: usize) -> Vec<Observation> {
    let mut rng = StdRng::seed_from_u64(42);
    let app = SyntheticApp {
        mode: ScalingMode::Strong,
        parallel: 0.95,
        idle: 0.4,
        saturates_at: None,
        t1_s: 3600.0,
        busy_node_w: 300.0,
        noise: 0.015,
    };
    synth::node_counts(&mut rng, 256, runs)
        .into_iter()
        .map(|n| Observation {
            nodes: n,
            value: app.measure(f64::from(n), &mut rng).energy_j,
            weight: 1.0,
        })
        .collect()
}

fn options() -> FitOptions {
    FitOptions {
        metric: Metric::Ets,
        mode: ScalingMode::Strong,
        allowed_rmse_pct: model::DEFAULT_ALLOWED_RMSE_PCT,
    }
}

fn fit(c: &mut Criterion) {
    let mut group = c.benchmark_group("fit");
    for runs in [10, 100, 1_000, 10_000] {
        let observations = history(runs);
        group.bench_with_input(
            BenchmarkId::from_parameter(runs),
            &observations,
            |b, obs| b.iter(|| model::fit(std::hint::black_box(obs), options())),
        );
    }
    group.finish();
}

/// Selection over every family (docs/model.md §2.1) as the number of distinct
/// node counts grows: its cost depends on these, not on the runs (a history
/// is one point per node count), and is bounded by the caps on back-test
/// cases and break positions. Time-to-solution, the hardest metric.
fn selection(c: &mut Criterion) {
    let mut group = c.benchmark_group("select");
    group.sample_size(20);
    for distinct in [5usize, 9, 20, 50, 200, 1_000] {
        let mut rng = StdRng::seed_from_u64(5);
        let app = SyntheticApp {
            mode: ScalingMode::Strong,
            parallel: 0.99,
            idle: 0.4,
            saturates_at: None,
            t1_s: 36_000.0,
            busy_node_w: 300.0,
            noise: 0.015,
        };
        // Node counts spread geometrically from 2 to 100,000: from 2, so
        // that the backward test runs (below a range from 1 node nothing
        // is asked, and it is skipped).
        let counts: Vec<u32> = (0..distinct)
            .map(|i| (2.0 * 5e4f64.powf(i as f64 / (distinct - 1) as f64)).round() as u32)
            .collect();
        let history = model::History::new(
            &counts
                .iter()
                .flat_map(|&n| [n, n, n])
                .map(|n| Observation {
                    nodes: n,
                    value: app.measure(f64::from(n), &mut rng).time_s,
                    weight: 1.0,
                })
                .collect::<Vec<_>>(),
        );
        let options = FitOptions {
            metric: Metric::Tts,
            ..options()
        };
        group.bench_with_input(
            BenchmarkId::new("distinct_counts", history.points.len()),
            &history,
            |b, h| b.iter(|| model::fit_history(std::hint::black_box(h.clone()), options)),
        );
    }
    group.finish();
}

fn warm_prediction(c: &mut Criterion) {
    let fitted = model::fit(&history(1_000), options()).expect("a model");
    c.bench_function("predict/warm/model", |b| {
        b.iter(|| fitted.predict(std::hint::black_box(300), Aggregate::Mean))
    });
    // What a prediction answer does: all three metrics, made consistent (the
    // same model three times stands in for EtS, APC and TtS: their values
    // disagree, so the reconciliation runs).
    c.bench_function("predict/warm/three_consistent", |b| {
        b.iter(|| {
            model::consistency::predict(
                [&fitted, &fitted, &fitted],
                std::hint::black_box(300),
                Aggregate::Mean,
            )
        })
    });
    c.bench_function("predict/warm/history", |b| {
        b.iter(|| fitted.predict(std::hint::black_box(64), Aggregate::Mean))
    });
}

/// The model search on the shapes it meets: repeated measurements (where one
/// term settles it), single values (every two-term hypothesis is scored),
/// and an application's stored runs.
fn model_search(c: &mut Criterion) {
    use joulecast::model::search::{Settings, search};
    let mut rng = StdRng::seed_from_u64(7);
    let mut noisy = |f: &dyn Fn(f64) -> f64, p: &[f64], reps: usize| -> Vec<(f64, f64)> {
        p.iter()
            .flat_map(|&x| (0..reps).map(move |_| x))
            .map(|x| {
                (
                    x,
                    f(x) * (1.0 + rand::Rng::random_range(&mut rng, -0.02..=0.02)),
                )
            })
            .collect()
    };
    let five = [4.0, 8.0, 16.0, 32.0, 64.0];
    let nine: Vec<f64> = (1..=9).map(|k| f64::from(1 << k)).collect();
    let cases = [
        (
            "rising, 5 points x 5 repetitions",
            noisy(&|p| 10.0 + 2.5 * p, &five, 5),
        ),
        (
            "falling, 5 points x 5 repetitions",
            noisy(&|p| 20.0 + 980.0 / p, &five, 5),
        ),
        (
            "rising, 5 single values",
            noisy(&|p| 10.0 + 2.5 * p, &five, 1),
        ),
        (
            "falling, 5 single values",
            noisy(&|p| 20.0 + 980.0 / p, &five, 1),
        ),
        (
            "U-shaped, 9 single values",
            noisy(&|p| 200.0 + 4000.0 / p + 2.0 * p, &nine, 1),
        ),
        (
            "1000 runs at 9 node counts",
            noisy(&|p| 20.0 + 980.0 / p, &nine, 111),
        ),
    ];
    let mut group = c.benchmark_group("model_search");
    for (name, observations) in &cases {
        group.bench_with_input(BenchmarkId::from_parameter(name), observations, |b, obs| {
            b.iter(|| search(std::hint::black_box(obs), &Settings::default()))
        });
    }
}

criterion_group!(benches, fit, selection, warm_prediction, model_search);
criterion_main!(benches);

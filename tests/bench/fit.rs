//! Criterion benchmarks of the model: fitting histories of 10 to 10,000 runs,
//! and a prediction from a fitted (warm) model. `cargo bench --bench fit`.

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

fn warm_prediction(c: &mut Criterion) {
    let fitted = model::fit(&history(1_000), options()).expect("a model");
    c.bench_function("predict/warm/model", |b| {
        b.iter(|| fitted.predict(std::hint::black_box(300), Aggregate::Mean))
    });
    c.bench_function("predict/warm/history", |b| {
        b.iter(|| fitted.predict(std::hint::black_box(64), Aggregate::Mean))
    });
}

criterion_group!(benches, fit, warm_prediction);
criterion_main!(benches);

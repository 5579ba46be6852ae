//! HTTP load test on loopback: throughput and latency of
//! `GET /v1/apps/{app}/predictions` against `GET /healthz`, in the same run:
//! 600 distinct questions asked again and again (the service keeps their
//! rendered answers), and the same questions written too many ways for the
//! service to keep their answers (rendered each time; see `with_nodes`).
//!
//! `cargo bench --bench http` starts the release binary on its embedded
//! default in a temporary directory, stores a history, then for each endpoint:
//! 1. closed loop: `CONNECTIONS` keep-alive connections send requests back to
//!    back for `PHASE` seconds, `ROUNDS` times per endpoint, alternating: the
//!    maximum throughput, and the service's CPU time per request (from
//!    /proc), which the load generator sharing the cores does not blur;
//! 2. open loop: requests at half the prediction endpoint's maximum rate, on
//!    a fixed schedule, for `OPEN_PHASE` seconds: p50 and p99.
//!
//! `HTTP_ONLY=healthz|kept|new` runs only the closed loops of one endpoint,
//! after printing the service's pid and waiting 3 s, so that a profiler or
//! `perf stat -p` can attach to the service under that load alone.
//!
//! Everything is bounded in time and talks to 127.0.0.1 only.

mod support;

use support::{
    CONNECTIONS, Launched, Measured, OPEN_LOOP_CONNECTIONS, OPEN_PHASE, PHASE, Target,
    benchmarking, closed_loop, launch, open_loop, store_history, with_nodes,
};

/// Closed-loop phases per endpoint: short phases, alternating, so that the
/// machine's slow drifts hit both endpoints alike.
const ROUNDS: usize = 5;
const HEALTH: &str = "/healthz";
const PREDICTION: &str = "/v1/apps/bench/predictions?nodes={n}&metric=ets";
const PREDICTION_NEW: &str = "/v1/apps/bench/predictions?nodes={u}&metric=ets";

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass nothing
    // and must not start a load test.
    if !benchmarking() {
        return;
    }
    let Launched {
        dir: _dir,
        client,
        server,
        token,
    } = launch();
    let port = server.port;
    // Warm: the one fit happens here.
    client.block_on(store_history(
        port,
        &token,
        "bench",
        &with_nodes(PREDICTION, 0),
    ));

    // Alternate the two endpoints' closed loops so that a noisy moment of
    // this shared machine does not favour either.
    let mut health_runs = Vec::new();
    let mut prediction_runs = Vec::new();
    let mut new_runs = Vec::new();
    let (health, prediction, new) = (
        Target::get(HEALTH),
        Target::get(PREDICTION),
        Target::get(PREDICTION_NEW),
    );
    if let Ok(only) = std::env::var("HTTP_ONLY") {
        eprintln!("service pid {}", server.pid());
        std::thread::sleep(std::time::Duration::from_secs(3));
        let target = match only.as_str() {
            "healthz" => &health,
            "kept" => &prediction,
            "new" => &new,
            other => panic!("HTTP_ONLY={other}: expected healthz, kept or new"),
        };
        for _ in 0..ROUNDS {
            let m = client.block_on(closed_loop(&server, target, &token));
            println!(
                "{only}: {:.0} req/s, {:.1} µs",
                m.throughput(),
                m.cpu_per_request_us()
            );
        }
        return;
    }
    for _ in 0..ROUNDS {
        health_runs.push(client.block_on(closed_loop(&server, &health, &token)));
        prediction_runs.push(client.block_on(closed_loop(&server, &prediction, &token)));
        new_runs.push(client.block_on(closed_loop(&server, &new, &token)));
    }
    let health_max = Measured::merge(health_runs);
    let prediction_max = Measured::merge(prediction_runs);
    let new_max = Measured::merge(new_runs);
    let rate = prediction_max.throughput() / 2.0;
    let health_half = client.block_on(open_loop(port, &health, &token, rate));
    let prediction_half = client.block_on(open_loop(port, &prediction, &token, rate));
    let new_half = client.block_on(open_loop(port, &new, &token, rate));

    println!(
        "Load test on loopback: {CONNECTIONS} keep-alive connections back to back ({ROUNDS} \
         phases of {} s per endpoint, alternating), then {OPEN_LOOP_CONNECTIONS} on a fixed \
         schedule at half the prediction rate for {} s each; two client threads; this machine ({} cores), shared by the load generator, the service \
         and PostgreSQL.\n",
        PHASE.as_secs(),
        OPEN_PHASE.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| endpoint | max throughput (req/s) | service CPU per request (µs) | p50 / p99 at max (ms) | rate of the half-load phase (req/s) | p50 / p99 at that rate (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, max, half) in [
        ("GET /healthz", &health_max, &health_half),
        (
            "GET /v1/apps/{app}/predictions?nodes=1…600&metric=ets",
            &prediction_max,
            &prediction_half,
        ),
        (
            "the same, answers not kept (nodes=0…01…600)",
            &new_max,
            &new_half,
        ),
    ] {
        println!(
            "| {name} | {:.0} | {:.1} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} |",
            max.throughput(),
            max.cpu_per_request_us(),
            max.percentile(0.5) / 1000.0,
            max.percentile(0.99) / 1000.0,
            half.throughput(),
            half.percentile(0.5) / 1000.0,
            half.percentile(0.99) / 1000.0,
        );
    }
    println!(
        "\nPrediction throughput is {:.0} % of /healthz's; per request, the service spends {:.0} % \
         of the CPU time on /healthz as on a prediction.",
        100.0 * prediction_max.throughput() / health_max.throughput(),
        100.0 * health_max.cpu_per_request_us() / prediction_max.cpu_per_request_us()
    );
    println!(
        "Answers not kept: {:.0} % of /healthz's throughput, {:.0} % of its CPU time per request.",
        100.0 * new_max.throughput() / health_max.throughput(),
        100.0 * health_max.cpu_per_request_us() / new_max.cpu_per_request_us()
    );
    drop(server);
}

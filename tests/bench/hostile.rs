//! Warm predictions under hostile or careless load (issue 13, finding 3).
//!
//! `cargo bench --bench hostile` starts the release binary on its embedded
//! default in a temporary directory, stores a history, and measures warm
//! predictions (`GET /v1/apps/{app}/predictions`, node counts 1…600) on a
//! fixed schedule of `RATE` per second, first alone, then while eight
//! clients send, back to back for the same time:
//! - two run batches of 300 runs, each with a 100,000-node hostlist;
//! - two prediction batches of 300 queries with such node lists;
//! - two model searches over 100,000 values with 40 exponents;
//! - two streams of predictions, each with an `allowed_rmse_pct` of its own
//!   (a fit each).
//!
//! It reports the warm predictions' p50 / p99 in both phases, every hostile
//! answer by status with the slowest, and the service's peak resident
//! memory (VmHWM; its PostgreSQL is a separate process). Targets: RSS under
//! 1 GiB, p99 under 50 ms, every heavy request answered (served or refused)
//! within the request time-out, no 5xx. Bounded in time; 127.0.0.1 only.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use hyper::Method;
use tokio::sync::Mutex;

use support::{
    Launched, OPEN_PHASE, Target, benchmarking, connect, launch, open_loop, send, store_history,
};

/// Warm predictions per second.
const RATE: f64 = 500.0;
const PREDICTION: &str = "/v1/apps/bench/predictions?nodes={n}&metric=ets";

/// The service's peak resident set, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn bodies() -> Vec<(&'static str, Method, String, Option<String>)> {
    let run = |i: usize| {
        format!(
            r#"{{"app":"wide","source":"h","job_id":"w{i}","nodes":100000,"node_list":"n[1-100000]","avg_power_w":3.0e7,"duration_s":600}}"#
        )
    };
    let runs = format!(
        r#"{{"runs":[{}]}}"#,
        (0..300).map(run).collect::<Vec<_>>().join(",")
    );
    let query = r#"{"app":"bench","node_list":"n[1-100000]"}"#;
    let queries = format!(r#"{{"queries":[{}]}}"#, vec![query; 300].join(","));
    let points: Vec<String> = (1..=10)
        .map(|p| {
            let values: Vec<String> = (0..10_000)
                .map(|k| format!("{}", 100.0 / f64::from(p) * (1.0 + 1e-6 * f64::from(k))))
                .collect();
            format!(r#"{{"p":{},"values":[{}]}}"#, p * 4, values.join(","))
        })
        .collect();
    let exponents: Vec<String> = (1..=40).map(|k| format!(r#""{k}/8""#)).collect();
    let search = format!(
        r#"{{"points":[{}],"exponents":[{}]}}"#,
        points.join(","),
        exponents.join(",")
    );
    vec![
        (
            "run batch, 300 × 100,000-node hostlists",
            Method::POST,
            "/v1/runs/batch".into(),
            Some(runs.clone()),
        ),
        (
            "run batch, 300 × 100,000-node hostlists",
            Method::POST,
            "/v1/runs/batch".into(),
            Some(runs),
        ),
        (
            "prediction batch, 300 × 100,000-node lists",
            Method::POST,
            "/v1/predictions".into(),
            Some(queries.clone()),
        ),
        (
            "prediction batch, 300 × 100,000-node lists",
            Method::POST,
            "/v1/predictions".into(),
            Some(queries),
        ),
        (
            "model search, 100,000 values × 40 exponents",
            Method::POST,
            "/v1/models/search".into(),
            Some(search.clone()),
        ),
        (
            "model search, 100,000 values × 40 exponents",
            Method::POST,
            "/v1/models/search".into(),
            Some(search),
        ),
        (
            "prediction, an allowed_rmse_pct of its own",
            Method::GET,
            "/v1/apps/bench/predictions?nodes=7&allowed_rmse_pct={pct}".into(),
            None,
        ),
        (
            "prediction, an allowed_rmse_pct of its own",
            Method::GET,
            "/v1/apps/bench/predictions?nodes=9&allowed_rmse_pct={pct}".into(),
            None,
        ),
    ]
}

type Tally = Arc<Mutex<BTreeMap<(&'static str, u16), (usize, f64)>>>;

fn main() {
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
    client.block_on(store_history(
        port,
        &token,
        "bench",
        &PREDICTION.replace("{n}", "5"),
    ));
    let target = Target::get(PREDICTION);
    let quiet = client.block_on(open_loop(port, &target, &token, RATE));

    let tally: Tally = Arc::default();
    let loaded = client.block_on(async {
        let stop = Instant::now() + OPEN_PHASE;
        let mut hostile = Vec::new();
        for (c, (name, method, path, body)) in bodies().into_iter().enumerate() {
            let (token, tally) = (token.clone(), tally.clone());
            hostile.push(tokio::spawn(async move {
                let mut sender = connect(port).await;
                let mut i = 0;
                while Instant::now() < stop {
                    i += 1;
                    let path = path.replace(
                        "{pct}",
                        &format!("{:.4}", 1.0 + (c * 100_000 + i) as f64 * 1e-4),
                    );
                    let sent = Instant::now();
                    let (status, _) =
                        send(&mut sender, method.clone(), &path, &token, body.as_deref()).await;
                    let seconds = sent.elapsed().as_secs_f64();
                    let mut tally = tally.lock().await;
                    let entry = tally.entry((name, status)).or_default();
                    entry.0 += 1;
                    entry.1 = entry.1.max(seconds);
                }
            }));
        }
        let measured = open_loop(port, &target, &token, RATE).await;
        for task in hostile {
            task.await.unwrap();
        }
        measured
    });
    let rss = peak_rss_mib(server.pid());

    println!(
        "Warm predictions at {RATE:.0}/s on a fixed schedule for {} s, alone and under the hostile load; \
         this machine ({} cores), shared by the load generator, the service and PostgreSQL.\n",
        OPEN_PHASE.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| phase | predictions | p50 (ms) | p99 (ms) | max (ms) |");
    println!("|---|---:|---:|---:|---:|");
    for (phase, m) in [("alone", &quiet), ("under hostile load", &loaded)] {
        println!(
            "| {phase} | {} | {:.2} | {:.2} | {:.2} |",
            m.requests,
            m.percentile(0.5) / 1000.0,
            m.percentile(0.99) / 1000.0,
            m.percentile(1.0) / 1000.0
        );
    }
    println!("\n| hostile request | status | answers | slowest (s) |");
    println!("|---|---:|---:|---:|");
    let tally = client.block_on(async { tally.lock().await.clone() });
    let mut server_errors = 0;
    for ((name, status), (count, slowest)) in &tally {
        if *status >= 500 {
            server_errors += count;
        }
        println!("| {name} | {status} | {count} | {slowest:.3} |");
    }
    println!("\nPeak resident memory of the service: {rss:.0} MiB. Answers 5xx: {server_errors}.");
    drop(server);
}

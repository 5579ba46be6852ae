//! The cost of adapting: the first prediction after a write, as the history
//! grows (docs/model.md §2.2). `cargo bench --bench adapt`.
//!
//! Starts the release binary on its embedded default in a temporary
//! directory and stores 2,000 runs of one application and 200,000 of
//! another, on the same 64 node counts. Then, `ROUNDS` times and alternating
//! between the two: store one run (the history version changes), time the
//! first prediction of all three metrics after it (read the statistics, fit
//! and back-test three models, answer), then a second one (warm). Loopback
//! only, bounded in count.

mod support;

use std::time::Instant;

use hyper::Method;

use support::{Launched, benchmarking, connect, launch, send};

const ROUNDS: usize = 25;
const NODE_COUNTS: u32 = 64;
const BATCH: usize = 10_000;

/// `count` runs of `app` from job `first`, round-robin over the node counts,
/// as batch bodies of at most `BATCH` runs.
fn batches(app: &str, first: usize, count: usize) -> Vec<String> {
    let runs: Vec<String> = (first..first + count)
        .map(|i| {
            let n = 1 + (i as u32 * 7) % NODE_COUNTS * 4;
            let wobble = 1.0 + 0.01 * ((i % 7) as f64 - 3.0);
            let time = 3600.0 * (0.05 + 0.95 / f64::from(n)) * wobble;
            let power = 350.0 * f64::from(n);
            format!(
                r#"{{"app":"{app}","source":"adapt","job_id":"{app}-{i}","nodes":{n},"avg_power_w":{power},"duration_s":{time}}}"#
            )
        })
        .collect();
    runs.chunks(BATCH)
        .map(|chunk| format!(r#"{{"runs":[{}]}}"#, chunk.join(",")))
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

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
    client.block_on(async {
        let mut sender = connect(port).await;
        let apps = [("small", 2_000usize), ("large", 200_000)];
        let started = Instant::now();
        for (app, count) in apps {
            for body in batches(app, 0, count) {
                let (status, reply) =
                    send(&mut sender, Method::POST, "/v1/runs/batch", &token, Some(&body)).await;
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
            }
        }
        println!(
            "Stored 2,000 + 200,000 runs on {NODE_COUNTS} node counts in {:.0} s.\n",
            started.elapsed().as_secs_f64()
        );
        let mut first: [Vec<f64>; 2] = Default::default();
        let mut warm: [Vec<f64>; 2] = Default::default();
        for round in 0..ROUNDS {
            for (k, (app, count)) in apps.iter().enumerate() {
                let body = &batches(app, count + round, 1)[0];
                let (status, _) =
                    send(&mut sender, Method::POST, "/v1/runs/batch", &token, Some(body)).await;
                assert_eq!(status, 200);
                let path = format!("/v1/apps/{app}/predictions?nodes=100");
                for times in [&mut first[k], &mut warm[k]] {
                    let t = Instant::now();
                    let (status, reply) = send(&mut sender, Method::GET, &path, &token, None).await;
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
                }
            }
        }
        println!("| history | first prediction after a write, median / max (ms) | warm prediction, median (ms) |");
        println!("|---|---:|---:|");
        for (k, (app, count)) in apps.iter().enumerate() {
            let max = first[k].iter().copied().fold(0.0, f64::max);
            println!(
                "| {app}: {count} runs | {:.2} / {:.2} | {:.3} |",
                median(first[k].clone()),
                max,
                median(warm[k].clone())
            );
        }
        println!(
            "\nFirst prediction at 200,000 runs is {:.2}× the one at 2,000 (target ≤ 2×).",
            median(first[1].clone()) / median(first[0].clone())
        );
    });
    drop(server);
}

//! The cost of adapting: the first prediction after a write, as the history
//! grows (docs/model.md §2.2). `cargo bench --bench adapt`.
//!
//! Starts the release binary on its embedded default in a temporary
//! directory, registers `CLUSTER` nodes, and stores 2,000 runs of one
//! application and 200,000 of another, on the same 64 node counts, each
//! with its node list. Then, `ROUNDS` times and alternating between the
//! two: store one run (the history version changes), time the first
//! prediction of all three metrics after it (read the statistics, fit and
//! back-test three models, answer), then a second one (warm). Then once
//! more after every node has a power sample of the reference workload: APC
//! answers then carry their best- and worst-node bounds, whose model is
//! fitted to every run's APC normalised with its nodes' powers (docs/nodes.md).
//! Loopback only, bounded in count.

mod support;

use std::time::Instant;

use http_body_util::Full;
use hyper::Method;
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;

use support::{Launched, benchmarking, connect, launch, send};

const ROUNDS: usize = 25;
const NODE_COUNTS: u32 = 64;
/// Runs per batch: their node lists stay within the 200,000 names a request may hold.
const BATCH: usize = 1_000;
/// Nodes `cn000`…: enough for the largest node count, 253.
const CLUSTER: u32 = 256;

/// `count` runs of `app` from job `first`, round-robin over the node counts,
/// as batch bodies of at most `BATCH` runs.
fn batches(app: &str, first: usize, count: usize) -> Vec<String> {
    let runs: Vec<String> = (first..first + count)
        .map(|i| {
            let n = 1 + (i as u32 * 7) % NODE_COUNTS * 4;
            let wobble = 1.0 + 0.01 * ((i % 7) as f64 - 3.0);
            let time = 3600.0 * (0.05 + 0.95 / f64::from(n)) * wobble;
            let power = 350.0 * f64::from(n);
            // A block of n nodes, somewhere in the cluster.
            let start = (i as u32 * 13) % (CLUSTER - n + 1);
            let list = format!("cn[{start:03}-{:03}]", start + n - 1);
            format!(
                r#"{{"app":"{app}","source":"adapt","job_id":"{app}-{i}","nodes":{n},"node_list":"{list}","avg_power_w":{power},"duration_s":{time}}}"#
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

/// `ROUNDS` times for each application in turn: store one run, then time
/// the first prediction after it and a warm one; print the table.
async fn rounds(
    sender: &mut SendRequest<Full<Bytes>>,
    token: &str,
    apps: &[(&str, usize); 2],
    stored: &mut [usize; 2],
    bounds: bool,
) {
    let mut first: [Vec<f64>; 2] = Default::default();
    let mut warm: [Vec<f64>; 2] = Default::default();
    for _ in 0..ROUNDS {
        for (k, (app, _)) in apps.iter().enumerate() {
            let body = &batches(app, stored[k], 1)[0];
            stored[k] += 1;
            let (status, _) = send(sender, Method::POST, "/v1/runs/batch", token, Some(body)).await;
            assert_eq!(status, 200);
            let path = format!("/v1/apps/{app}/predictions?nodes=100");
            for times in [&mut first[k], &mut warm[k]] {
                let t = Instant::now();
                let (status, reply) = send(sender, Method::GET, &path, token, None).await;
                times.push(t.elapsed().as_secs_f64() * 1e3);
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
                let has_bounds = String::from_utf8_lossy(&reply).contains("\"apc_bounds\"");
                assert_eq!(has_bounds, bounds, "{}", String::from_utf8_lossy(&reply));
            }
        }
    }
    println!(
        "| history | first prediction after a write, median / max (ms) | warm prediction, median (ms) |"
    );
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
}

/// Times node powers change in the last phase.
const POWER_ROUNDS: u32 = 9;

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
        for k in 0..CLUSTER {
            let (status, reply) = send(
                &mut sender,
                Method::PUT,
                &format!("/v1/nodes/cn{k:03}"),
                &token,
                Some(r#"{"partition":"batch"}"#),
            )
            .await;
            assert!(status == 201 || status == 200, "{}", String::from_utf8_lossy(&reply));
        }
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
            "Stored 2,000 + 200,000 runs on {NODE_COUNTS} node counts, with node lists, in {:.0} s.",
            started.elapsed().as_secs_f64()
        );
        let mut stored = apps.map(|(_, count)| count);
        println!("\nWithout node powers:\n");
        rounds(&mut sender, &token, &apps, &mut stored, false).await;

        // A power for every node under the reference workload, 180–240 W.
        let samples: Vec<String> = (0..CLUSTER)
            .map(|k| {
                let watts = 180.0 + f64::from(k * 37 % 61);
                format!(
                    r#"{{"node":"cn{k:03}","workload":"reference","avg_power_w":{watts},"measured_at":"{}"}}"#,
                    chrono::Utc::now().to_rfc3339()
                )
            })
            .collect();
        let body = format!(r#"{{"samples":[{}]}}"#, samples.join(","));
        let (status, reply) =
            send(&mut sender, Method::POST, "/v1/nodes/samples", &token, Some(&body)).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        // The first prediction with these powers reads every run once.
        for (app, _) in apps {
            let t = Instant::now();
            let path = format!("/v1/apps/{app}/predictions?nodes=100");
            let (status, reply) = send(&mut sender, Method::GET, &path, &token, None).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
            println!(
                "\nFirst prediction of `{app}` with node powers (every run read): {:.0} ms.",
                t.elapsed().as_secs_f64() * 1e3
            );
        }
        println!("\nWith node powers (answers carry `apc_bounds`):\n");
        rounds(&mut sender, &token, &apps, &mut stored, true).await;

        // New powers again: one node measured anew moves its mean. The
        // histories normalise the runs they keep in memory again.
        let mut after_powers: [Vec<f64>; 2] = Default::default();
        for round in 0..POWER_ROUNDS {
            let k = round * 7 % CLUSTER;
            let body = format!(
                r#"{{"samples":[{{"node":"cn{k:03}","workload":"reference","avg_power_w":{},"measured_at":"{}"}}]}}"#,
                250.0 + f64::from(round),
                chrono::Utc::now().to_rfc3339()
            );
            let (status, reply) =
                send(&mut sender, Method::POST, "/v1/nodes/samples", &token, Some(&body)).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
            for (i, (app, _)) in apps.iter().enumerate() {
                let t = Instant::now();
                let path = format!("/v1/apps/{app}/predictions?nodes=100");
                let (status, reply) = send(&mut sender, Method::GET, &path, &token, None).await;
                assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
                after_powers[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        println!("\nFirst prediction after new node powers ({POWER_ROUNDS} rounds, one node re-measured each):\n");
        println!("| history | median / max (ms) |");
        println!("|---|---:|");
        for (i, (app, count)) in apps.iter().enumerate() {
            let max = after_powers[i].iter().copied().fold(0.0, f64::max);
            println!(
                "| {app}: {count} runs | {:.2} / {max:.2} |",
                median(after_powers[i].clone())
            );
        }
        println!(
            "\nFirst prediction after new node powers at 200,000 runs is {:.2}× the one at 2,000 (target ≤ 2×).",
            median(after_powers[1].clone()) / median(after_powers[0].clone())
        );
    });
    drop(server);
}

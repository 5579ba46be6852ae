//! A 40-second PostgreSQL outage under load (issue 13, degraded mode).
//!
//! `cargo bench --bench outage` starts a PostgreSQL cluster of its own in a
//! temporary directory and the release binary on it (`DATABASE_URL`), stores
//! a history and warms its models, then keeps two streams going:
//! - warm predictions (`GET /v1/apps/bench/predictions`, node counts 1…600)
//!   at `RATE` per second;
//! - one run written every `WRITE_EVERY`.
//!
//! After `BEFORE`, PostgreSQL is stopped for `OUTAGE`, then started again,
//! and the streams go on for `AFTER`. Reported, for the outage: predictions
//! served and failed, their p50 / p99 / max latency, and how many carried the
//! `database_unavailable` flag; writes by status with the slowest answer; and,
//! after PostgreSQL is back, how long until `/readyz` says ready and the first
//! write is stored. Targets: every warm prediction served, each under 100 ms;
//! writes fail in under 1 s; the service returns without a restart.
//! Bounded in time (about a minute); 127.0.0.1 only.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use tokio::sync::Mutex;

use support::{Server, benchmarking, connect, send, setup, store_history, with_nodes};

const RATE: f64 = 200.0;
const CONNECTIONS: usize = 8;
const WRITE_EVERY: Duration = Duration::from_millis(250);
const BEFORE: Duration = Duration::from_secs(5);
const OUTAGE: Duration = Duration::from_secs(40);
const AFTER: Duration = Duration::from_secs(10);
const PREDICTION: &str = "/v1/apps/bench/predictions?nodes={n}&metric=ets";

/// One answer: when it was sent (since the start), its status, its latency
/// and whether it carried the outage flag.
#[derive(Clone, Copy)]
struct Answer {
    at: Duration,
    status: u16,
    latency: Duration,
    flagged: bool,
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    if !benchmarking() {
        return;
    }
    let (dir, client) = setup();
    let pg_dir = dir.path().join("pg");
    let mut cluster = support::pg_cluster(&pg_dir);
    let url = format!(
        "postgres://{}@localhost/postgres?host={}&port={}",
        joulecast::embedded::SUPERUSER,
        cluster.layout().socket_dir.display(),
        joulecast::embedded::SOCKET_PORT
    );
    let token = Command::new(env!("CARGO_BIN_EXE_joulecast"))
        .env("DATABASE_URL", &url)
        .env("JOULECAST_LOG", "warn")
        .args(["token", "create", "--scope", "admin", "--name", "bench"])
        .stderr(Stdio::inherit())
        .output()
        .expect("joulecast token create");
    assert!(token.status.success());
    let token = String::from_utf8(token.stdout).unwrap().trim().to_owned();
    // Every 503 would be logged: the figures below say what happened.
    let envs = [("DATABASE_URL", url.as_str()), ("JOULECAST_LOG", "off")];
    let server = Server::spawn(&envs, &dir.path().join("data"));
    client.block_on(support::wait_ready(server.port));
    let port = server.port;
    client.block_on(store_history(
        port,
        &token,
        "bench",
        "/v1/apps/bench/predictions?nodes=3",
    ));
    // Every metric fitted, every node count asked once: the models are warm.
    client.block_on(async {
        let mut sender = connect(port).await;
        for i in 0..600 {
            let path = with_nodes(PREDICTION, i);
            let (status, _) = send(&mut sender, Method::GET, &path, &token, None).await;
            assert_eq!(status, 200);
        }
    });

    let started = Instant::now();
    let total = BEFORE + OUTAGE + AFTER;
    let predictions = Arc::new(Mutex::new(Vec::<Answer>::new()));
    let writes = Arc::new(Mutex::new(Vec::<Answer>::new()));
    let mut tasks = Vec::new();
    let interval = Duration::from_secs_f64(CONNECTIONS as f64 / RATE);
    for c in 0..CONNECTIONS {
        let (token, predictions) = (token.clone(), predictions.clone());
        tasks.push(client.spawn(async move {
            let mut sender = connect(port).await;
            let mut scheduled = started + interval.mul_f64(c as f64 / CONNECTIONS as f64);
            let mut i = c;
            let mut mine = Vec::new();
            while scheduled < started + total {
                tokio::time::sleep_until(scheduled.into()).await;
                i += CONNECTIONS;
                let sent = Instant::now();
                let path = with_nodes(PREDICTION, i);
                let (status, body) = send(&mut sender, Method::GET, &path, &token, None).await;
                mine.push(Answer {
                    at: sent - started,
                    status,
                    latency: sent.elapsed(),
                    flagged: String::from_utf8_lossy(&body).contains("database_unavailable"),
                });
                scheduled += interval;
            }
            predictions.lock().await.extend(mine);
        }));
    }
    {
        let (token, writes) = (token.clone(), writes.clone());
        tasks.push(client.spawn(async move {
            let mut sender = connect(port).await;
            let mut i = 0;
            while started.elapsed() < total {
                i += 1;
                let body = format!(
                    r#"{{"app":"bench","source":"outage","job_id":"w{i}","nodes":4,"energy_j":4.0e6,"duration_s":900}}"#
                );
                let sent = Instant::now();
                let (status, _) =
                    send(&mut sender, Method::POST, "/v1/runs", &token, Some(&body)).await;
                writes.lock().await.push(Answer {
                    at: sent - started,
                    status,
                    latency: sent.elapsed(),
                    flagged: false,
                });
                tokio::time::sleep(WRITE_EVERY).await;
            }
        }));
    }

    std::thread::sleep(BEFORE);
    cluster.stop();
    drop(cluster);
    let stopped_at = started.elapsed();
    std::thread::sleep(OUTAGE);
    let cluster = support::pg_cluster(&pg_dir);
    let back_at = started.elapsed();
    // Until the service says ready again.
    let ready_after = client.block_on(async {
        let mut sender = connect(port).await;
        loop {
            let (status, body) = send(&mut sender, Method::GET, "/readyz", "", None).await;
            if status == 200 && String::from_utf8_lossy(&body).contains("\"ready\"") {
                break started.elapsed() - back_at;
            }
            assert!(
                started.elapsed() < back_at + AFTER,
                "the service never became ready"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    for task in tasks {
        client.block_on(task).unwrap();
    }
    drop(server);
    drop(cluster);

    let predictions = client.block_on(predictions.lock()).clone();
    let writes = client.block_on(writes.lock()).clone();
    let during = |a: &&Answer| a.at >= stopped_at && a.at < back_at;
    let outage: Vec<&Answer> = predictions.iter().filter(during).collect();
    let failed = outage.iter().filter(|a| a.status != 200).count();
    let flagged = outage.iter().filter(|a| a.flagged).count();
    let mut latencies: Vec<Duration> = outage.iter().map(|a| a.latency).collect();
    latencies.sort();
    println!(
        "outage: PostgreSQL stopped at {:.1} s for {:.1} s (asked {} s)",
        stopped_at.as_secs_f64(),
        (back_at - stopped_at).as_secs_f64(),
        OUTAGE.as_secs()
    );
    println!(
        "warm predictions during the outage: {} served, {failed} failed, {flagged} flagged \
         database_unavailable; p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        outage.len() - failed,
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    let mut by_status: BTreeMap<u16, (usize, Duration)> = BTreeMap::new();
    for w in writes.iter().filter(during) {
        let entry = by_status.entry(w.status).or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(w.latency);
    }
    for (status, (count, slowest)) in &by_status {
        println!(
            "writes during the outage: {count} × {status}, slowest {:.0} ms",
            slowest.as_secs_f64() * 1e3
        );
    }
    let first_write = writes
        .iter()
        .find(|w| w.at >= back_at && w.status == 201)
        .map(|w| (w.at - back_at).as_secs_f64());
    let after_failed = predictions
        .iter()
        .filter(|a| a.at >= back_at && a.status != 200)
        .count();
    println!(
        "after PostgreSQL is back: /readyz ready in {:.2} s, first write stored {} s after; \
         {after_failed} predictions failed after it",
        ready_after.as_secs_f64(),
        first_write.map_or("never".to_owned(), |s| format!("{s:.2}")),
    );
}

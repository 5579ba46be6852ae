//! HTTP load test on loopback: throughput and latency of
//! `GET /v1/apps/{app}/predictions` against `GET /healthz`, in the same run.
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
//! Everything is bounded in time and talks to 127.0.0.1 only.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

const CONNECTIONS: usize = 16;
/// The open loop spreads its rate over more connections, so that each one's
/// interval stays well above the timer's millisecond resolution.
const OPEN_LOOP_CONNECTIONS: usize = 64;
/// Closed-loop phases per endpoint, and the length of each: short phases,
/// alternating, so that the machine's slow drifts hit both endpoints alike.
const ROUNDS: usize = 5;
const PHASE: Duration = Duration::from_secs(2);
/// Length of each open-loop phase.
const OPEN_PHASE: Duration = Duration::from_secs(4);
const HEALTH: &str = "/healthz";
const PREDICTION: &str = "/v1/apps/bench/predictions?nodes={n}&metric=ets";

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix_kill(self.child.id());
        let _ = self.child.wait();
    }
}

impl Server {
    /// User and system CPU time of the service's process so far, from
    /// /proc/<pid>/stat (in clock ticks of 1/100 s on Linux).
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // The fields after the parenthesised command name; utime and stime
        // are the 14th and 15th of the whole line.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    }
}

fn nix_kill(pid: u32) -> std::io::Result<()> {
    // SIGTERM: a clean stop of the service and its PostgreSQL.
    let status = Command::new("kill").arg(pid.to_string()).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("kill failed"))
    }
}

fn start(data_dir: &Path) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(env!("CARGO_BIN_EXE_joulecast"))
        .env_remove("DATABASE_URL")
        .env("JOULECAST_DATA_DIR", data_dir)
        .env("JOULECAST_LOG", "warn")
        .envs(std::env::vars().filter(|(k, _)| k.starts_with("V")))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .spawn()
        .expect("start joulecast");
    Server { child, port }
}

async fn connect(port: u16) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    method: Method,
    path: &str,
    token: &str,
    body: Option<&str>,
) -> (u16, Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.unwrap_or_default().to_owned())))
        .unwrap();
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, bytes)
}

struct Measured {
    requests: usize,
    seconds: f64,
    /// CPU time the service (all its threads) spent in the phase.
    server_cpu_s: f64,
    latencies_us: Vec<f64>,
}

impl Measured {
    fn merge(runs: Vec<Measured>) -> Measured {
        let mut merged = Measured {
            requests: 0,
            seconds: 0.0,
            server_cpu_s: 0.0,
            latencies_us: Vec::new(),
        };
        for run in runs {
            merged.requests += run.requests;
            merged.seconds += run.seconds;
            merged.server_cpu_s += run.server_cpu_s;
            merged.latencies_us.extend(run.latencies_us);
        }
        merged
    }

    fn throughput(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// The service's CPU time per request, µs.
    fn cpu_per_request_us(&self) -> f64 {
        1e6 * self.server_cpu_s / self.requests as f64
    }

    fn percentile(&self, q: f64) -> f64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    }
}

/// `path` with `{n}` replaced by the i-th of a sequence of node counts that
/// covers 1 to 600 (measured, between and beyond the history), so that the
/// service computes each answer rather than repeating one.
fn with_nodes(path: &str, i: usize) -> String {
    path.replace("{n}", &(1 + (i * 7919) % 600).to_string())
}

/// Closed loop: every connection sends its next request as soon as the last
/// one is answered.
async fn closed_loop(server: &Server, path: &str, token: &str) -> Measured {
    let port = server.port;
    let cpu_before = server.cpu_seconds();
    let deadline = Instant::now() + PHASE;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (path, token) = (path.to_owned(), token.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(port).await;
            let mut latencies = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                i += 1;
                let path = with_nodes(&path, i);
                let t = Instant::now();
                let (status, _) = send(&mut sender, Method::GET, &path, &token, None).await;
                assert_eq!(status, 200, "{path}");
                latencies.push(t.elapsed().as_secs_f64() * 1e6);
            }
            latencies
        }));
    }
    let mut latencies_us = Vec::new();
    for task in tasks {
        latencies_us.extend(task.await.unwrap());
    }
    Measured {
        requests: latencies_us.len(),
        seconds: started.elapsed().as_secs_f64(),
        server_cpu_s: server.cpu_seconds() - cpu_before,
        latencies_us,
    }
}

/// Open loop at `rate` requests per second, spread over the connections on a
/// fixed schedule.
async fn open_loop(port: u16, path: &str, token: &str, rate: f64) -> Measured {
    let per_connection = rate / OPEN_LOOP_CONNECTIONS as f64;
    let interval = Duration::from_secs_f64(1.0 / per_connection);
    let started = Instant::now();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..OPEN_LOOP_CONNECTIONS {
        let (path, token, latencies) = (path.to_owned(), token.to_owned(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(port).await;
            // Stagger the connections across one interval.
            let mut scheduled = started + interval.mul_f64(c as f64 / OPEN_LOOP_CONNECTIONS as f64);
            let mut mine = Vec::new();
            let mut i = c;
            while scheduled < started + OPEN_PHASE {
                i += 1;
                let path = with_nodes(&path, i);
                tokio::time::sleep_until(scheduled.into()).await;
                // Timed from the send: the timer wakes up to a millisecond
                // late, which is the load generator's, not the service's.
                let sent = Instant::now();
                let (status, _) = send(&mut sender, Method::GET, &path, &token, None).await;
                assert_eq!(status, 200);
                mine.push(sent.elapsed().as_secs_f64() * 1e6);
                scheduled += interval;
                // Behind schedule (the previous answer came late): send at once
                // rather than skip, so slowness shows in the figures.
                if scheduled < Instant::now() {
                    scheduled = Instant::now();
                }
            }
            latencies.lock().await.extend(mine);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let latencies_us = std::mem::take(&mut *latencies.lock().await);
    Measured {
        requests: latencies_us.len(),
        seconds: started.elapsed().as_secs_f64(),
        server_cpu_s: 0.0,
        latencies_us,
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` would pass nothing
    // and must not start a load test.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("joulecast-bench-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let data_dir = dir.path().join("data");
    let server = start(&data_dir);
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = server.port;
    let token = client.block_on(async {
        // Ready?
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)).await {
                drop(stream);
                let mut sender = connect(port).await;
                if send(&mut sender, Method::GET, "/readyz", "", None).await.0 == 200 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "joulecast did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let token = std::fs::read_to_string(data_dir.join("admin-token")).unwrap();
        let token = token.trim().to_owned();

        // A history of 200 runs on node counts 1..=256.
        let runs: Vec<String> = (0..200)
            .map(|i| {
                let n = 1 + (i * 37) % 256;
                let energy = 3.6e6 * (1.0 + 0.02 * n as f64);
                format!(
                    r#"{{"app":"bench","source":"b","job_id":"{i}","nodes":{n},"energy_j":{energy},"duration_s":{}}}"#,
                    3600.0 * (0.05 + 0.95 / n as f64)
                )
            })
            .collect();
        let body = format!(r#"{{"runs":[{}]}}"#, runs.join(","));
        let mut sender = connect(port).await;
        let (status, reply) = send(&mut sender, Method::POST, "/v1/runs/batch", &token, Some(&body)).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));

        // Warm: the one fit happens here.
        let warm = with_nodes(PREDICTION, 0);
        let (status, _) = send(&mut sender, Method::GET, &warm, &token, None).await;
        assert_eq!(status, 200);
        token
    });

    // Alternate the two endpoints' closed loops so that a noisy moment of
    // this shared machine does not favour either.
    let mut health_runs = Vec::new();
    let mut prediction_runs = Vec::new();
    for _ in 0..ROUNDS {
        health_runs.push(client.block_on(closed_loop(&server, HEALTH, &token)));
        prediction_runs.push(client.block_on(closed_loop(&server, PREDICTION, &token)));
    }
    let health_max = Measured::merge(health_runs);
    let prediction_max = Measured::merge(prediction_runs);
    let rate = prediction_max.throughput() / 2.0;
    let health_half = client.block_on(open_loop(port, HEALTH, &token, rate));
    let prediction_half = client.block_on(open_loop(port, PREDICTION, &token, rate));

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
    drop(server);
}

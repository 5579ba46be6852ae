//! What the HTTP benchmarks share: the release binary on its embedded
//! default, keep-alive connections on loopback, and closed- and open-loop
//! load with latency and service-CPU figures.

#![allow(dead_code)]

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

pub const CONNECTIONS: usize = 16;
/// The open loop spreads its rate over more connections, so that each one's
/// interval stays well above the timer's millisecond resolution.
pub const OPEN_LOOP_CONNECTIONS: usize = 64;
/// Length of each closed-loop phase.
pub const PHASE: Duration = Duration::from_secs(2);
/// Length of each open-loop phase.
pub const OPEN_PHASE: Duration = Duration::from_secs(4);

/// One kind of request; `{n}` in the path or body is replaced by the i-th
/// of a sequence of node counts (see `with_nodes`).
#[derive(Clone)]
pub struct Target {
    pub method: Method,
    pub path: String,
    pub body: Option<String>,
}

impl Target {
    pub fn get(path: &str) -> Target {
        Target {
            method: Method::GET,
            path: path.to_owned(),
            body: None,
        }
    }

    pub fn post(path: &str, body: &str) -> Target {
        Target {
            method: Method::POST,
            path: path.to_owned(),
            body: Some(body.to_owned()),
        }
    }

    async fn send_nth(&self, sender: &mut SendRequest<Full<Bytes>>, token: &str, i: usize) {
        let path = with_nodes(&self.path, i);
        let body = self.body.as_deref().map(|b| with_nodes(b, i));
        let (status, reply) =
            send(sender, self.method.clone(), &path, token, body.as_deref()).await;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&reply));
    }
}

pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = nix_kill(self.child.id());
        let _ = self.child.wait();
    }
}

impl Server {
    /// The service's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User and system CPU time of the service's process so far, from
    /// /proc/<pid>/stat (in clock ticks of 1/100 s on Linux).
    pub fn cpu_seconds(&self) -> f64 {
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

/// The release binary (or `JOULECAST_BENCH_BIN`) on its embedded default
/// in `data_dir`.
pub fn start(data_dir: &Path) -> Server {
    Server::spawn(&[], data_dir)
}

impl Server {
    /// The release binary with `envs` (such as `DATABASE_URL`) on a free
    /// loopback port, its embedded data (if any) in `data_dir`.
    pub fn spawn(envs: &[(&str, &str)], data_dir: &Path) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // `JOULECAST_BENCH_BIN` runs another build (to compare two commits
        // on the same machine, one after the other).
        let binary = std::env::var_os("JOULECAST_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_joulecast").into());
        let child = Command::new(binary)
            .env_remove("DATABASE_URL")
            .env("JOULECAST_DATA_DIR", data_dir)
            .env("JOULECAST_LOG", "warn")
            .envs(envs.iter().copied())
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .spawn()
            .expect("start joulecast");
        Server { child, port }
    }
}

pub async fn connect(port: u16) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    sender
}

pub async fn send(
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

pub struct Measured {
    pub requests: usize,
    pub seconds: f64,
    /// CPU time the service (all its threads) spent in the phase.
    pub server_cpu_s: f64,
    pub latencies_us: Vec<f64>,
}

impl Measured {
    pub fn merge(runs: Vec<Measured>) -> Measured {
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

    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    /// The service's CPU time per request, µs.
    pub fn cpu_per_request_us(&self) -> f64 {
        1e6 * self.server_cpu_s / self.requests as f64
    }

    pub fn percentile(&self, q: f64) -> f64 {
        let mut sorted = self.latencies_us.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    }
}

/// `path` with `{n}` replaced by the i-th of a sequence of node counts that
/// covers 1 to 600 (measured, between and beyond the history): 600 distinct
/// questions, asked again and again, as dashboards and schedulers do. `{u}`
/// asks the same node counts, each written 20 ways (0 to 19 leading zeros),
/// in turn across all requests of this process: 12,000 distinct requests,
/// each asked again only after 12,000 others, which is more than the
/// service keeps answers of (4,096), so that it renders every answer.
pub fn with_nodes(path: &str, i: usize) -> String {
    static ASKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let path = path.replace("{n}", &(1 + (i * 7919) % 600).to_string());
    if !path.contains("{u}") {
        return path;
    }
    let asked = ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (n, zeros) = (1 + (asked * 7919) % 600, (asked / 600) % 20);
    path.replace("{u}", &format!("{}{n}", "0".repeat(zeros)))
}

/// Closed loop: every connection sends its next request as soon as the last
/// one is answered.
pub async fn closed_loop(server: &Server, target: &Target, token: &str) -> Measured {
    let port = server.port;
    let cpu_before = server.cpu_seconds();
    let deadline = Instant::now() + PHASE;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONNECTIONS {
        let (target, token) = (target.clone(), token.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(port).await;
            let mut latencies = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                i += 1;
                let t = Instant::now();
                target.send_nth(&mut sender, &token, i).await;
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
pub async fn open_loop(port: u16, target: &Target, token: &str, rate: f64) -> Measured {
    let per_connection = rate / OPEN_LOOP_CONNECTIONS as f64;
    let interval = Duration::from_secs_f64(1.0 / per_connection);
    let started = Instant::now();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in 0..OPEN_LOOP_CONNECTIONS {
        let (target, token, latencies) = (target.clone(), token.to_owned(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(port).await;
            // Stagger the connections across one interval.
            let mut scheduled = started + interval.mul_f64(c as f64 / OPEN_LOOP_CONNECTIONS as f64);
            let mut mine = Vec::new();
            let mut i = c;
            while scheduled < started + OPEN_PHASE {
                i += 1;
                tokio::time::sleep_until(scheduled.into()).await;
                // Timed from the send: the timer wakes up to a millisecond
                // late, which is the load generator's, not the service's.
                let sent = Instant::now();
                target.send_nth(&mut sender, &token, i).await;
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

/// Wait until the service answers /readyz; its admin token.
pub async fn ready(port: u16, data_dir: &Path) -> String {
    wait_ready(port).await;
    let token = std::fs::read_to_string(data_dir.join("admin-token")).unwrap();
    token.trim().to_owned()
}

/// Wait until the service answers /readyz.
pub async fn wait_ready(port: u16) {
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
}

/// Whether this run was started by `cargo bench` (which passes --bench);
/// `cargo test --benches` passes nothing and must not start a load test.
pub fn benchmarking() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A running service and what a benchmark needs to talk to it.
pub struct Launched {
    /// The service's data; removed when dropped (after the server stops).
    pub dir: tempfile::TempDir,
    pub client: tokio::runtime::Runtime,
    pub server: Server,
    pub token: String,
}

/// Start the release binary on its embedded default in a temporary
/// directory and wait until it is ready: the service, the client runtime
/// and the admin token.
pub fn launch() -> Launched {
    let (dir, client) = setup();
    let data_dir = dir.path().join("data");
    let server = start(&data_dir);
    let token = client.block_on(ready(server.port, &data_dir));
    Launched {
        dir,
        client,
        server,
        token,
    }
}

/// Store `history_body(app)` and ask `warm` once, so that the one fit
/// happens before anything is measured.
pub async fn store_history(port: u16, token: &str, app: &str, warm: &str) {
    let mut sender = connect(port).await;
    let body = history_body(app);
    let (status, reply) = send(
        &mut sender,
        Method::POST,
        "/v1/runs/batch",
        token,
        Some(&body),
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    let (status, reply) = send(&mut sender, Method::GET, warm, token, None).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
}

/// A PostgreSQL cluster of the benchmark's own in `dir` (for the benchmarks
/// that stop it, or talk to it in process), with the test suite's settings.
pub fn pg_cluster(dir: &Path) -> joulecast::embedded::Cluster {
    let options = joulecast::embedded::ClusterOptions {
        data_dir: dir.to_path_buf(),
        bin_dir: std::env::var_os("JOULECAST_PG_BIN_DIR").map(Into::into),
        root_user: std::env::var("JOULECAST_PG_USER").unwrap_or_else(|_| "postgres".into()),
        create: true,
    };
    joulecast::embedded::Cluster::start(&options).expect("start PostgreSQL")
}

/// A temporary directory for the service's data, and the client runtime.
pub fn setup() -> (tempfile::TempDir, tokio::runtime::Runtime) {
    let dir = tempfile::Builder::new()
        .prefix("joulecast-bench-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (dir, client)
}

/// A history of 200 runs of `app` on node counts 1..=256.
pub fn history_body(app: &str) -> String {
    let runs: Vec<String> = (0..200)
        .map(|i| {
            let n = 1 + (i * 37) % 256;
            let energy = 3.6e6 * (1.0 + 0.02 * n as f64);
            format!(
                r#"{{"app":"{app}","source":"b","job_id":"{i}","nodes":{n},"energy_j":{energy},"duration_s":{}}}"#,
                3600.0 * (0.05 + 0.95 / n as f64)
            )
        })
        .collect();
    format!(r#"{{"runs":[{}]}}"#, runs.join(","))
}

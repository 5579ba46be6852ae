//! deploy/prometheus and deploy/grafana against a real Prometheus (issue 16):
//! `promtool` checks the configuration and the rules and runs the rules'
//! unit tests; then Debian's `prometheus` scrapes this build of the service,
//! populated and under a little traffic, with the deployed rules loaded.
//! Every Grafana panel's expression must return data, the rules must
//! evaluate without error, and two alerts whose conditions the test creates
//! must be seen.
//!
//! Needs `prometheus` and `promtool` (Debian's `prometheus` package); it is
//! installed when missing (as root, or with passwordless sudo).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::embedded::{Service, admin_token, data_dir, free_port, http};
use crate::support::{ensure_installed, run_ok};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn promtool(args: &[&str]) {
    run_ok(
        Command::new("promtool")
            .args(args)
            .current_dir(deploy().join("prometheus")),
    );
}

/// A Prometheus server, stopped when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Start Prometheus in `dir` on the deployed configuration, its targets
    /// replaced by `target` and its intervals shortened to 1 s.
    fn start(dir: &Path, target: &str) -> Prometheus {
        let deployed = std::fs::read_to_string(deploy().join("prometheus/prometheus.yml")).unwrap();
        let mut config = deployed
            .replace("scrape_interval: 15s", "scrape_interval: 1s")
            .replace("evaluation_interval: 15s", "evaluation_interval: 1s")
            .replace("scrape_timeout: 5s", "scrape_timeout: 1s");
        let targets =
            "          - joulecast-1.example.org:8080\n          - joulecast-2.example.org:8080\n";
        assert!(
            config.contains(targets),
            "the deployed targets moved:\n{deployed}"
        );
        config = config.replace(targets, &format!("          - {target}\n"));
        assert_eq!(config.matches(": 1s").count(), 3, "{config}");
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        std::fs::copy(
            deploy().join("prometheus/joulecast.rules.yml"),
            dir.join("joulecast.rules.yml"),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { child, port };
        prometheus.wait_for("Prometheus to be ready", || {
            get(port, "/-/ready").is_some_and(|(status, _)| status == 200)
        });
        prometheus
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `/api/v1/<path>`'s `data`.
    fn api(&self, path: &str) -> Value {
        let (status, body) =
            get(self.port, &format!("/api/v1/{path}")).expect("Prometheus answers");
        let reply: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{body}"));
        assert_eq!(status, 200, "{reply:#}");
        assert_eq!(reply["status"], "success", "{reply:#}");
        reply["data"].clone()
    }

    /// The instant vector `expr` evaluates to now.
    fn query(&self, expr: &str) -> Vec<Value> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", expr)
            .finish();
        let data = self.api(&format!("query?{query}"));
        assert_eq!(data["resultType"], "vector", "{expr}: {data:#}");
        data["result"].as_array().cloned().unwrap_or_default()
    }
}

/// A GET over HTTP/1.0 (so that the answer is not chunked); `None` when
/// nothing listens yet.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.get(9..12)?.parse().ok()?;
    let (_, body) = response.split_once("\r\n\r\n")?;
    Some((status, body.to_owned()))
}

/// The expressions of every panel of the Grafana dashboard, with Grafana's
/// `$__rate_interval` as it would be at this scrape interval.
fn dashboard_expressions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy().join("grafana/joulecast.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            out.push((
                panel["title"].as_str().unwrap().to_owned(),
                expr.replace("$__rate_interval", "1m"),
            ));
        }
    }
    out
}

#[test]
fn a_real_prometheus_scrapes_the_service_and_every_panel_has_data() {
    ensure_installed("promtool", &["prometheus"]);
    promtool(&["check", "config", "prometheus.yml"]);
    promtool(&["check", "rules", "joulecast.rules.yml"]);
    promtool(&["test", "rules", "joulecast.rules.test.yml"]);
    // Every alert has a unit test.
    let rules = std::fs::read_to_string(deploy().join("prometheus/joulecast.rules.yml")).unwrap();
    let tests =
        std::fs::read_to_string(deploy().join("prometheus/joulecast.rules.test.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 11, "{alerts:?}");
    for alert in alerts {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no promtool unit test"
        );
    }

    let (dir, data, _) = data_dir();
    let service = Service::start(&data);
    let (port, admin) = (service.port, admin_token(&data));
    let call = |method: &str, path: &str, body: Value| {
        let (status, reply) = http(port, method, path, Some(&admin), Some(&body));
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {reply}"
        );
    };
    // Four nodes of partition batch, idle at 100 W; a site cap far away and
    // a batch cap that one 2-node job (2 kW) brings within 5 %.
    for i in 1..=4 {
        let node = json!({"partition": "batch", "idle_power_w": 100.0});
        call("PUT", &format!("/v1/nodes/c{i}"), node);
    }
    call("PUT", "/v1/power-caps/site", json!({"limit_w": 100_000.0}));
    call(
        "PUT",
        "/v1/power-caps/batch",
        json!({"limit_w": 2_300.0, "partition": "batch"}),
    );
    call(
        "PUT",
        "/v1/budgets/climate",
        json!({"limit_j": 6.0e6, "period": "month"}),
    );
    for n in [1, 2, 4] {
        let run = json!({"app": "lin", "source": "clusterA", "job_id": format!("h{n}"),
                         "nodes": n, "account": "climate",
                         "energy_j": 1000.0 * f64::from(n) * 600.0,
                         "avg_power_w": 1000.0 * f64::from(n)});
        call("POST", "/v1/runs", run);
    }
    call(
        "POST",
        "/v1/jobs",
        json!({"source": "clusterA", "job_id": "J1", "app": "lin", "node_list": "c[1-2]",
               "partition": "batch", "account": "climate"}),
    );

    // Dashboards and schedulers at work while Prometheus scrapes.
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (stop, admin) = (stop.clone(), admin.clone());
        std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let nodes = 1 + i % 12;
                for path in [
                    format!("/v1/apps/lin/predictions?nodes={nodes}"),
                    format!("/v1/apps/lin/curve?from=1&to={}", 4 + nodes),
                ] {
                    let (status, body) = http(port, "GET", &path, Some(&admin), None);
                    assert_eq!(status, 200, "{path}: {body}");
                }
                if i.is_multiple_of(10) {
                    // A new run now and then: the models are fitted again.
                    let run = json!({"app": "lin", "source": "clusterA",
                                     "job_id": format!("t{i}"), "nodes": 2,
                                     "energy_j": 1.2e6 + f64::from(i), "avg_power_w": 2000.0});
                    let (status, body) = http(port, "POST", "/v1/runs", Some(&admin), Some(&run));
                    assert_eq!(status, 201, "{body}");
                }
                let question = json!({"app": "lin", "nodes": nodes, "partition": "batch",
                                      "account": "climate"});
                let (status, body) =
                    http(port, "POST", "/v1/admission", Some(&admin), Some(&question));
                assert_eq!(status, 200, "{body}");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    let prometheus = Prometheus::start(dir.path(), &format!("127.0.0.1:{port}"));
    prometheus.wait_for("ten scrapes of the service", || {
        prometheus
            .query(r#"count_over_time(up{job="joulecast"}[1m]) >= 10"#)
            .len()
            == 1
    });
    // A job the scheduler ran while the service was unreachable, reported
    // once Prometheus has seen the counter at 0.
    call(
        "POST",
        "/v1/jobs/unreserved",
        json!({"source": "clusterA",
               "jobs": [{"job_id": "U1", "started_at": "2026-01-01T00:00:00Z"}]}),
    );
    let targets = prometheus.api("targets");
    let active = targets["activeTargets"].as_array().unwrap();
    assert_eq!(active.len(), 1, "{targets:#}");
    assert_eq!(active[0]["health"], "up", "{targets:#}");

    let mut empty = Vec::new();
    let expressions = dashboard_expressions();
    assert!(expressions.len() >= 20, "{expressions:#?}");
    for (panel, expr) in &expressions {
        let result = prometheus.query(expr);
        let finite = result.iter().any(|sample| {
            sample["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(f64::is_finite)
        });
        if !finite {
            empty.push(format!("{panel}: {expr} → {result:?}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    traffic
        .join()
        .expect("the traffic thread's requests succeed");
    // Every metric is described and named as Prometheus would have it
    // (`promtool check metrics` lints HELP lines, units and suffixes).
    let (status, exposition) = http(port, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{exposition}");
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let linted = check.wait_with_output().unwrap();
    assert!(
        linted.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );
    assert!(
        empty.is_empty(),
        "panels without data:\n{}",
        empty.join("\n")
    );

    // The batch partition is at 100 W of 2,300 W headroom: the headroom
    // ratio is exactly what the API says.
    let ratio = prometheus.query(r#"joulecast:power_headroom:ratio{partition="batch"}"#);
    let (_, headroom) = http(
        port,
        "GET",
        "/v1/power/headroom?partition=batch",
        Some(&admin),
        None,
    );
    let headroom: Value = serde_json::from_str(&headroom).unwrap();
    let expected = headroom["headroom_w"].as_f64().unwrap() / 2_300.0;
    let seen: f64 = ratio[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!((seen - expected).abs() < 1e-9, "{seen} against {expected}");
    assert!(seen < 0.05, "{seen}");

    // Every rule evaluates; the alerts the test brought about are seen.
    let rules = prometheus.api("rules");
    let mut names = Vec::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule:#}");
            names.push(rule["name"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(names.len(), 13, "{names:?}");
    prometheus.wait_for("the alerts", || {
        let alerts = prometheus.api("alerts");
        let state = |name: &str| {
            alerts["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["labels"]["alertname"] == name)
                .map(|a| a["state"].as_str().unwrap().to_owned())
        };
        state("JoulecastJobsRanUnreserved").as_deref() == Some("firing")
            && state("JoulecastPowerHeadroomLow").as_deref() == Some("pending")
            && state("JoulecastDown").is_none()
            && state("JoulecastDatabaseUnreachable").is_none()
    });
    drop(prometheus);
    assert!(service.stop().success());
}

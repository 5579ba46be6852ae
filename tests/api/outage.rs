//! A database outage while serving (issue 13, finding 2): PostgreSQL is
//! stopped under a running service and started again.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use joulecast::embedded::{Cluster, ClusterOptions};
use joulecast::http::{self, Settings};
use serde_json::{Value, json};

use crate::support::{TestApp, run};

fn options(dir: &std::path::Path) -> ClusterOptions {
    ClusterOptions {
        data_dir: dir.to_path_buf(),
        bin_dir: std::env::var_os("JOULECAST_PG_BIN_DIR").map(Into::into),
        root_user: std::env::var("JOULECAST_PG_USER").unwrap_or_else(|_| "postgres".into()),
        create: true,
    }
}

async fn start(dir: &std::path::Path) -> Cluster {
    let options = options(dir);
    tokio::task::spawn_blocking(move || Cluster::start(&options))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e}"))
}

/// The service on `cluster`, migrated, following its notifications and
/// probing it as `joulecast serve` does, once ready.
async fn serve(cluster: &Cluster, settings: Settings) -> (TestApp, tokio::task::JoinHandle<()>) {
    let connect = joulecast::db::embedded_options(cluster.layout()).database("postgres");
    let pool = joulecast::db::pool_options(8)
        .connect_with(connect)
        .await
        .unwrap();
    joulecast::db::migrate(&pool).await.unwrap();
    let state = http::AppState::new(pool.clone(), settings);
    let listener = tokio::spawn(joulecast::cache::listen(pool.clone(), state.caches.clone()));
    let app = TestApp::with_router(pool, http::router_from(state)).await;
    until(&app, "ready", Duration::from_secs(10)).await;
    (app, listener)
}

async fn readiness(app: &TestApp) -> String {
    let reply = app.call(Method::GET, "/readyz", None, None).await;
    reply.body["status"]
        .as_str()
        .unwrap_or("not ready")
        .to_owned()
}

async fn until(app: &TestApp, status: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while readiness(app).await != status {
        assert!(Instant::now() < deadline, "readiness never became {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Until a warm prediction at `ask` is flagged `database_unavailable` (the
/// service takes the database for unreachable: its notification
/// connection or its probe; `/readyz` may say `degraded` a moment sooner,
/// from its own check).
async fn until_flagged(app: &TestApp, ask: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let reply = app.get(ask, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        if flags(&reply.body).contains(&"database_unavailable".to_owned()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "warm predictions never flagged: {:#}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn flags(reply: &Value) -> Vec<String> {
    reply["predictions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["flags"].as_array().unwrap().clone())
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

/// Warm predictions are served from memory through the outage, flagged,
/// each well within 100 ms, after the caches' time-to-live too, and after a
/// job start just before it (which drops the running jobs, not the node
/// registry); writes fail within a second with 503 and Retry-After;
/// /readyz says degraded; and the service recovers by itself once
/// PostgreSQL is back.
#[tokio::test]
async fn predictions_outlive_a_database_outage_and_the_service_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = start(dir.path()).await;
    let settings = Settings {
        cache_ttl: Duration::from_millis(500),
        ..Default::default()
    };
    let (app, listener) = serve(&cluster, settings).await;
    for n in [1, 2, 4, 8] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    // Two classified nodes, for a prediction on a node list, idling above
    // `lin`'s 1000 W a node, so that max-nodes holds their idle power to
    // the limit.
    let hot = json!({"partition": "hot", "idle_power_w": 3000.0});
    for (node, watts) in [("cn01", 180.0), ("cn02", 200.0)] {
        let reply = app
            .put(&format!("/v1/nodes/{node}"), &app.admin, &hot)
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        let sample = json!({"samples": [{"node": node, "workload": "stress",
            "avg_power_w": watts, "measured_at": chrono::Utc::now().to_rfc3339()}]});
        let reply = app.post("/v1/nodes/samples", &app.ingest, &sample).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    }
    let asks = [
        "/v1/apps/lin/predictions?nodes=3",
        "/v1/apps/lin/predictions?nodes=16&metric=tts",
        "/v1/apps/lin/predictions?node_list=cn[01-02]&workload=stress",
    ];
    for ask in asks {
        let reply = app.get(ask, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert!(!flags(&reply.body).contains(&"database_unavailable".to_owned()));
    }
    // 3 nodes idle at 9000 W, under 10 kW; the APC alone would allow 10.
    let max_nodes = "/v1/apps/lin/max-nodes?power_limit_w=10000&partition=hot";
    let held_to_idle = |reply: &crate::support::Reply| {
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["nodes"], 3, "{:#}", reply.body);
        assert_eq!(reply.body["reserved_w"], 9000.0, "{:#}", reply.body);
    };
    held_to_idle(&app.get(max_nodes, &app.read).await);
    // A job starts: the running jobs are read again, the registry is not.
    let job = json!({"source": "s", "job_id": "j1", "app": "lin", "nodes": 1});
    let reply = app.post("/v1/jobs", &app.schedule, &job).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);

    tokio::task::spawn_blocking(move || {
        cluster.stop();
        cluster
    })
    .await
    .unwrap();
    until(&app, "degraded", Duration::from_secs(5)).await;
    until_flagged(&app, asks[0], Duration::from_secs(3)).await;

    // Longer than the caches' time-to-live: what is in memory answers.
    let outage = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut served = 0;
    while outage.elapsed() < Duration::from_secs(3) {
        for ask in asks {
            let asked = Instant::now();
            let reply = app.get(ask, &app.read).await;
            slowest = slowest.max(asked.elapsed());
            assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
            assert!(
                flags(&reply.body).contains(&"database_unavailable".to_owned()),
                "{:#}",
                reply.body
            );
            served += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served > 20, "{served}");
    assert!(slowest < Duration::from_millis(100), "{slowest:?}");

    // A revocation that cannot be stored changes nothing: the tokens
    // verified before the outage still answer (it used to forget them all,
    // and every client of the replica got 503 until the database was back).
    app.call(Method::DELETE, "/v1/tokens/999999", Some(&app.admin), None)
        .await
        .assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    for ask in asks {
        let reply = app.get(ask, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{ask}: {:#}", reply.body);
    }

    // A token not of the generated form is refused without the database; a
    // well-formed one never seen cannot be checked.
    app.call(Method::GET, asks[0], Some("jc_not-a-token"), None)
        .await
        .assert_problem(StatusCode::UNAUTHORIZED);
    let unknown = format!("jc_{}", "A".repeat(43));
    app.call(Method::GET, asks[0], Some(&unknown), None)
        .await
        .assert_problem(StatusCode::SERVICE_UNAVAILABLE);

    // The capacity answers read the same models and the node registry as
    // last read: served too, max-nodes still holding the idle power.
    held_to_idle(&app.get(max_nodes, &app.read).await);
    for ask in [
        "/v1/apps/lin/max-nodes?power_limit_w=5000",
        "/v1/apps/lin/optimal-nodes?objective=energy",
        "/v1/apps/lin/pareto",
    ] {
        let asked = Instant::now();
        let reply = app.get(ask, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{ask}: {:#}", reply.body);
        assert!(
            asked.elapsed() < Duration::from_millis(100),
            "{ask}: {:?}",
            asked.elapsed()
        );
    }

    // Writes fail fast, and say when to come back.
    let asked = Instant::now();
    let reply = app
        .post("/v1/runs", &app.ingest, &run("lin", "during", 2))
        .await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.headers["retry-after"], "1");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );

    // PostgreSQL back: no restart of the service.
    let cluster = start(dir.path()).await;
    until(&app, "ready", Duration::from_secs(15)).await;
    let reply = app
        .post("/v1/runs", &app.ingest, &run("lin", "after", 16))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let reply = app.get(asks[0], &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert!(!flags(&reply.body).contains(&"database_unavailable".to_owned()));
    listener.abort();
    drop(cluster);
}

/// The processes of the cluster whose postmaster is `postmaster`: it and
/// its children (the backends and background workers).
fn cluster_processes(postmaster: i32) -> Vec<i32> {
    let mut pids = vec![postmaster];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so after the last ')'.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if parent == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

fn signal_all(pids: &[i32], signal: nix::sys::signal::Signal) {
    for &pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// Processes stopped with SIGSTOP, resumed when this is dropped: a failed
/// assertion must not leave a frozen PostgreSQL behind (its cluster's
/// shutdown would hang).
struct Frozen(Vec<i32>);

impl Frozen {
    fn stop(pids: Vec<i32>) -> Frozen {
        signal_all(&pids, nix::sys::signal::Signal::SIGSTOP);
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal_all(&self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// A database that hangs instead of refusing (every PostgreSQL process
/// stopped with SIGSTOP, as a frozen server or a network dropping packets
/// gives): the notification connection stays open and silent. The service
/// still notices within a few seconds: /readyz says `degraded` (it used to
/// time out and answer 503, taking every replica out of service), warm
/// predictions are flagged, and once the database answers again all is
/// back within about a second (not after the 5 s a failed read holds).
#[tokio::test]
async fn a_database_that_hangs_is_an_outage_too() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = start(dir.path()).await;
    let (app, listener) = serve(&cluster, Settings::default()).await;
    for n in [1, 2, 4, 8] {
        app.ingest(&run("hang", &format!("h{n}"), n)).await;
    }
    // Queried after the writes' notifications have come back (each drops
    // the application from memory), so that its model is in memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ask = "/v1/apps/hang/predictions?nodes=3";
    let reply = app.get(ask, &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert!(!flags(&reply.body).contains(&"database_unavailable".to_owned()));

    let frozen = cluster_processes(crate::support::postmaster_pid(cluster.layout()));
    assert!(frozen.len() > 1, "{frozen:?}");
    let frozen = Frozen::stop(frozen);
    let hung = Instant::now();
    // Probes as a load balancer sends them, each answered, and soon
    // `degraded`, never a 503.
    loop {
        let asked = Instant::now();
        let reply = app.call(Method::GET, "/readyz", None, None).await;
        assert!(
            asked.elapsed() < Duration::from_secs(3),
            "{:?}",
            asked.elapsed()
        );
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "during the hang: {:#}",
            reply.body
        );
        if reply.body["status"] == "degraded" {
            break;
        }
        assert!(hung.elapsed() < Duration::from_secs(5), "never degraded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The probe takes the database for unreachable: warm predictions are
    // answered, and flagged.
    until_flagged(&app, ask, Duration::from_secs(5)).await;
    drop(frozen);

    let resumed = Instant::now();
    until(&app, "ready", Duration::from_secs(3)).await;
    let back = resumed.elapsed();
    let reply = app.get(ask, &app.read).await;
    assert!(!flags(&reply.body).contains(&"database_unavailable".to_owned()));
    assert!(
        back < Duration::from_millis(2500),
        "ready again after {back:?}"
    );
    listener.abort();
    drop(cluster);
}

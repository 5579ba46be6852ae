//! Test support: one real PostgreSQL server per test process, a fresh database
//! per test (cloned from a migrated template), and a client for the real router.
//!
//! With `DATABASE_URL` set, tests use that server (they create databases named
//! `jct_*` on it). Otherwise they start a throwaway cluster with Joulecast's own
//! embedded-cluster code in a temporary directory; it stops when the test
//! process exits.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use joulecast::embedded::{Cluster, ClusterOptions};
use joulecast::http::{self, Settings};
use joulecast::tokens::Scope;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;
use tower::ServiceExt;

struct Server {
    options: PgConnectOptions,
    /// How a separate process reaches the server, with `{db}` for the database.
    url_template: String,
    template: String,
    _cluster: Option<Cluster>,
}

static SERVER: OnceCell<Server> = OnceCell::const_new();

/// The metrics recorder is one per process, shared by every test here. A
/// test that makes the service count a value the database refused
/// (`db_values_refused_total`) and the test that checks the fuzzer makes
/// it count none take turns under this lock: run side by side, the first
/// failed the second now and then.
pub static REFUSED_VALUES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static NEXT_DB: AtomicUsize = AtomicUsize::new(0);

async fn server() -> &'static Server {
    SERVER
        .get_or_init(|| async {
            let (options, url_template, cluster) = match std::env::var("DATABASE_URL") {
                Ok(url) => {
                    let options = url.parse::<PgConnectOptions>().expect("DATABASE_URL");
                    let (base, query) = url.split_once('?').unwrap_or((&url, ""));
                    let (server, _) = base
                        .rsplit_once('/')
                        .expect("DATABASE_URL names a database");
                    let query = if query.is_empty() {
                        String::new()
                    } else {
                        format!("?{query}")
                    };
                    (options, format!("{server}/{{db}}{query}"), None)
                }
                Err(_) => {
                    let cluster = tokio::task::spawn_blocking(start_throwaway_cluster)
                        .await
                        .unwrap();
                    let options =
                        joulecast::db::embedded_options(cluster.layout()).database("postgres");
                    let url = format!(
                        "postgres://{}@localhost/{{db}}?host={}",
                        joulecast::embedded::SUPERUSER,
                        cluster.layout().socket_dir.display()
                    );
                    (options, url, Some(cluster))
                }
            };
            let template = format!("jct_template_{}", std::process::id());
            let mut admin = PgConnection::connect_with(&options).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {template}")))
                .execute(&mut admin)
                .await
                .unwrap();
            admin.close().await.unwrap();
            // Migrate the template once; every test database is a copy of it.
            let mut conn = PgConnection::connect_with(&options.clone().database(&template))
                .await
                .unwrap();
            joulecast::db::MIGRATOR.run(&mut conn).await.unwrap();
            conn.close().await.unwrap();
            Server {
                options,
                url_template,
                template,
                _cluster: cluster,
            }
        })
        .await
}

fn start_throwaway_cluster() -> Cluster {
    let root = std::env::temp_dir();
    // Clear what earlier test processes left behind.
    if let Ok(entries) = std::fs::read_dir(&root) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("joulecast-test-")
                && pid
                    .parse::<u32>()
                    .is_ok_and(|p| !PathBuf::from(format!("/proc/{p}")).exists())
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let data_dir = root.join(format!("joulecast-test-{}", std::process::id()));
    Cluster::start(&ClusterOptions {
        data_dir,
        bin_dir: std::env::var_os("JOULECAST_PG_BIN_DIR").map(PathBuf::from),
        root_user: std::env::var("JOULECAST_PG_USER").unwrap_or_else(|_| "postgres".into()),
        create: true,
    })
    .unwrap_or_else(|e| panic!("cannot start a PostgreSQL for the tests: {e}"))
}

/// A fresh, migrated database of its own.
pub async fn fresh_pool() -> PgPool {
    let name = fresh_database(true).await;
    connect(&name).await
}

/// A fresh database without migrations.
pub async fn empty_pool() -> PgPool {
    let name = fresh_database(false).await;
    connect(&name).await
}

/// A `DATABASE_URL` for a fresh, empty database, for another process.
pub async fn fresh_database_url() -> String {
    let name = fresh_database(false).await;
    server().await.url_template.replace("{db}", &name)
}

async fn fresh_database(migrated: bool) -> String {
    let server = server().await;
    let name = format!(
        "jct_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    let template = if migrated {
        server.template.as_str()
    } else {
        "template0"
    };
    let mut admin = PgConnection::connect_with(&server.options).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name} TEMPLATE {template}"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    admin.close().await.unwrap();
    name
}

async fn connect(name: &str) -> PgPool {
    let options = server().await.options.clone().database(name);
    PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap()
}

/// The real router on a fresh database, with a token for each scope.
#[derive(Clone)]
pub struct TestApp {
    pub pool: PgPool,
    pub router: Router,
    pub read: String,
    pub ingest: String,
    pub schedule: String,
    pub admin: String,
}

/// A response, its body parsed as JSON (or `Value::String` when it is not JSON).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Fields named by a problem document's `errors`.
    pub fn error_fields(&self) -> Vec<String> {
        self.body["errors"]
            .as_array()
            .map(|errors| {
                errors
                    .iter()
                    .map(|e| e["field"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// Assert this is a problem document with `status`.
    #[track_caller]
    pub fn assert_problem(&self, status: StatusCode) {
        assert_eq!(self.status, status, "{:#}", self.body);
        assert_eq!(
            self.content_type(),
            "application/problem+json",
            "{:#}",
            self.body
        );
        assert_eq!(self.body["status"], status.as_u16(), "{:#}", self.body);
        assert!(self.body["type"].is_string() && self.body["title"].is_string());
        assert!(self.body["detail"].is_string());
    }

    /// Assert a problem with `status` whose `errors` name `field`.
    #[track_caller]
    pub fn assert_field_error(&self, status: StatusCode, field: &str) {
        self.assert_problem(status);
        assert!(
            self.error_fields().iter().any(|f| f == field),
            "expected an error on {field}: {:#}",
            self.body
        );
    }
}

impl TestApp {
    pub async fn new() -> TestApp {
        TestApp::with_settings(Settings::default()).await
    }

    /// A service whose reservations end at their time limit exactly (no
    /// grace), so that tests can watch one end.
    pub async fn without_grace() -> TestApp {
        TestApp::with_settings(Settings {
            expiry: joulecast::config::Expiry {
                grace_s: 0.0,
                ..Default::default()
            },
            ..Default::default()
        })
        .await
    }

    pub async fn with_settings(settings: Settings) -> TestApp {
        let pool = fresh_pool().await;
        let router = http::router(pool.clone(), settings);
        TestApp::with_router(pool, router).await
    }

    /// The given router on `pool`, with a token for each scope.
    pub async fn with_router(pool: PgPool, router: Router) -> TestApp {
        let token = |scope: Scope| {
            let pool = pool.clone();
            async move {
                joulecast::service::tokens::create(&pool, scope.as_str(), &[scope], None)
                    .await
                    .unwrap()
                    .token
            }
        };
        TestApp {
            read: token(Scope::Read).await,
            ingest: token(Scope::Ingest).await,
            schedule: token(Scope::Schedule).await,
            admin: token(Scope::Admin).await,
            router,
            pool,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(body).unwrap())),
            None => request.body(Body::empty()),
        };
        self.send(request.unwrap()).await
    }

    pub async fn get(&self, path: &str, token: &str) -> Reply {
        self.call(Method::GET, path, Some(token), None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: &Value) -> Reply {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Reply {
        self.call(Method::DELETE, path, Some(token), None).await
    }

    /// `DELETE path` removes what it names for an admin only: a read token
    /// is refused (403), an admin's removes it (204), and again it is gone
    /// (404).
    pub async fn assert_only_admin_removes(&self, path: &str) {
        self.delete(path, &self.read)
            .await
            .assert_problem(StatusCode::FORBIDDEN);
        let removed = self.delete(path, &self.admin).await;
        assert_eq!(removed.status, StatusCode::NO_CONTENT, "{:#}", removed.body);
        self.delete(path, &self.admin)
            .await
            .assert_problem(StatusCode::NOT_FOUND);
    }

    pub async fn put(&self, path: &str, token: &str, body: &Value) -> Reply {
        self.call(Method::PUT, path, Some(token), Some(body)).await
    }

    /// Store a run and assert it was created.
    pub async fn ingest(&self, run: &Value) -> i64 {
        let reply = self.post("/v1/runs", &self.ingest, run).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        reply.body["run"]["id"].as_i64().unwrap()
    }

    /// Store one run of `app` per (nodes, average power W, duration s), in
    /// one batch (source `s`, job ids `{app}-{nodes}`), and assert that
    /// every one was created.
    pub async fn store_power_time(&self, app: &str, runs: &[(i64, f64, f64)]) {
        let runs: Vec<Value> = runs
            .iter()
            .map(|&(nodes, power, time)| {
                serde_json::json!({"app": app, "source": "s", "job_id": format!("{app}-{nodes}"),
                                   "nodes": nodes, "avg_power_w": power, "duration_s": time})
            })
            .collect();
        let reply = self
            .post(
                "/v1/runs/batch",
                &self.ingest,
                &serde_json::json!({"runs": runs}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["created"], runs.len(), "{:#}", reply.body);
    }

    /// Register node `name` with `metadata` and assert it was created.
    pub async fn register_node(&self, name: &str, metadata: &Value) {
        let reply = self
            .put(&format!("/v1/nodes/{name}"), &self.admin, metadata)
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }

    /// Send node power samples and assert they were taken (200); the
    /// answer's counts.
    pub async fn post_samples(&self, samples: Vec<Value>) -> Value {
        let reply = self
            .post(
                "/v1/nodes/samples",
                &self.ingest,
                &serde_json::json!({ "samples": samples }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        reply.body
    }

    pub async fn run_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM runs")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

/// A valid run; tests change what they need.
/// The pid of the PostgreSQL postmaster serving `layout`'s cluster (the
/// first line of its `postmaster.pid`).
pub fn postmaster_pid(layout: &joulecast::embedded::Layout) -> i32 {
    let text = std::fs::read_to_string(layout.pg_dir.join("postmaster.pid")).unwrap();
    text.lines().next().unwrap().trim().parse().unwrap()
}

pub fn run(app: &str, job_id: &str, nodes: i64) -> Value {
    serde_json::json!({
        "app": app,
        "source": "clusterA",
        "job_id": job_id,
        "nodes": nodes,
        "energy_j": 1000.0 * nodes as f64 * 600.0,
        "avg_power_w": 1000.0 * nodes as f64,
    })
}

impl TestApp {
    /// Serve the router on a loopback port, for clients in other processes,
    /// through the service's own serving loop (with its default header
    /// time-out and connection limit); the server stops with the test's
    /// runtime. Returns its base URL.
    pub async fn serve(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(joulecast::server::serve(
            listener,
            self.router.clone(),
            std::future::pending(),
            joulecast::server::Limits::default(),
        ));
        url
    }
}

/// Every file with one of `extensions` at or under `path` (a file or a
/// directory), leaving out `fixtures` directories: the project's own text.
pub fn files_under(path: &std::path::Path, extensions: &[&str]) -> Vec<std::path::PathBuf> {
    let wanted = |p: &std::path::Path| {
        p.extension()
            .is_some_and(|e| extensions.iter().any(|x| e == *x))
    };
    if !path.is_dir() {
        return if wanted(path) {
            vec![path.to_owned()]
        } else {
            Vec::new()
        };
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("fixtures") {
                files.extend(files_under(&path, extensions));
            }
        } else if wanted(&path) {
            files.push(path);
        }
    }
    files
}

/// Run `command` and return its standard output; fail with both outputs
/// when it cannot run or does not succeed.
pub fn run_ok(command: &mut std::process::Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Install Debian's `packages` when `command` is missing (as root, or with
/// passwordless sudo); fail saying how to install them otherwise.
pub fn ensure_installed(command: &str, packages: &[&str]) {
    use std::process::Command;
    let have = || {
        Command::new(command)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if have() {
        return;
    }
    let root = nix::unistd::Uid::effective().is_root();
    let apt = |args: &[&str]| {
        let mut apt = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        apt.args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    let installed =
        apt(&["update", "-qq"]) && apt(&[&["install", "-y", "-qq"][..], packages].concat());
    assert!(
        installed && have(),
        "{command} is missing and could not be installed: run `apt-get install {}` as root",
        packages.join(" ")
    );
}

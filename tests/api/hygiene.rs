//! Health, readiness, problem documents for everything, docs, metrics, OpenAPI.

use axum::http::{Method, StatusCode};
use joulecast::http::{self, Settings};
use serde_json::Value;

use crate::support::{TestApp, empty_pool, run};

#[tokio::test]
async fn health_and_readiness() {
    let app = TestApp::new().await;
    let reply = app.call(Method::GET, "/healthz", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["status"], "ok");
    let reply = app.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["status"], "ready");
}

#[tokio::test]
async fn readiness_fails_without_migrations_and_once_stopping() {
    let pool = empty_pool().await;
    let app = TestApp {
        router: http::router(pool.clone(), Settings::default()),
        pool: pool.clone(),
        read: String::new(),
        ingest: String::new(),
        schedule: String::new(),
        admin: String::new(),
    };
    let reply = app.call(Method::GET, "/readyz", None, None).await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body["detail"]
            .as_str()
            .unwrap()
            .contains("migrations")
    );
    assert_eq!(
        app.call(Method::GET, "/healthz", None, None).await.status,
        StatusCode::OK
    );
    // Served with --no-migrate before `joulecast migrate`: the API answers 503
    // like /readyz, never a 500 for the missing tables.
    let anything = format!("jc_{}", "a".repeat(43));
    let reply = app
        .call(Method::GET, "/v1/apps", Some(&anything), None)
        .await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body["detail"]
            .as_str()
            .unwrap()
            .contains("migrations"),
        "{:#}",
        reply.body
    );

    // A closed pool: the service is stopping, and a load balancer should
    // stop sending it requests. (A database that cannot be reached is
    // `degraded`, 200: tests/api/outage.rs.)
    pool.close().await;
    let reply = app.call(Method::GET, "/readyz", None, None).await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reply.body["detail"].as_str().unwrap().contains("stopping"),
        "{:#}",
        reply.body
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problem_documents() {
    let app = TestApp::new().await;
    let route = app
        .call(Method::GET, "/v1/nothing-here", Some(&app.read), None)
        .await;
    route.assert_problem(StatusCode::NOT_FOUND);
    // One problem type, one title, whether the router or a handler found
    // nothing (RFC 9457).
    let unknown_app = app
        .call(Method::GET, "/v1/apps/nothing-here", Some(&app.read), None)
        .await;
    unknown_app.assert_problem(StatusCode::NOT_FOUND);
    assert_eq!(route.body["type"], unknown_app.body["type"]);
    assert_eq!(route.body["title"], unknown_app.body["title"]);
    let reply = app
        .call(Method::DELETE, "/v1/runs", Some(&app.admin), None)
        .await;
    reply.assert_problem(StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.headers["allow"], "POST");
}

#[tokio::test]
async fn a_closed_pool_is_503_not_500() {
    let app = TestApp::new().await;
    let token = app.ingest.clone();
    app.pool.close().await;
    let reply = app.post("/v1/runs", &token, &run("lammps", "1", 2)).await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    // A client knows when to come back.
    assert_eq!(reply.headers["retry-after"], "1");
}

#[tokio::test]
async fn a_query_cut_by_the_server_is_503_not_500() {
    let app = TestApp::new().await;
    app.ingest(&run("lammps", "1", 2)).await;
    // Make the listing wait on a lock, then have the server end that session,
    // as a shutdown or an administrator does (SQLSTATE 57P01).
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let app = app.clone();
        async move { app.get("/v1/apps/lammps/runs", &app.read).await }
    });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let terminated = loop {
        // Polled outside the blocker's transaction: inside one, PostgreSQL
        // answers pg_stat_activity from the snapshot of its first read, which
        // may predate the listing's wait (this made the test flaky).
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_all(&app.pool)
        .await
        .unwrap();
        if !ended.is_empty() {
            break ended;
        }
        assert!(
            !waiting.is_finished(),
            "the listing finished without waiting on the lock: {:#?}",
            waiting.await.unwrap()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listing never waited on the lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert_eq!(terminated, [true]);
    let reply = waiting.await.unwrap();
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    blocker.rollback().await.unwrap();
}

#[tokio::test]
async fn responses_carry_a_request_id() {
    let app = TestApp::new().await;
    let reply = app.call(Method::GET, "/healthz", None, None).await;
    let id = reply.headers["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let request = axum::http::Request::builder()
        .uri("/healthz")
        .header("x-request-id", "scheduler-abc-1")
        .body(axum::body::Body::empty())
        .unwrap();
    let reply = app.send(request).await;
    assert_eq!(reply.headers["x-request-id"], "scheduler-abc-1");
    // Echoed and logged with every line: one too long, not plain text, or
    // given twice is replaced by a generated one.
    let long = "x".repeat(129);
    let ids: [&[&[u8]]; 4] = [
        &[long.as_bytes()],
        &[b"with space"],
        &[b"caf\xc3\xa9"],
        &[b"one", b"two"],
    ];
    for given in ids {
        let mut request = axum::http::Request::builder().uri("/healthz");
        for id in given {
            request = request.header(
                "x-request-id",
                axum::http::HeaderValue::from_bytes(id).unwrap(),
            );
        }
        let reply = app
            .send(request.body(axum::body::Body::empty()).unwrap())
            .await;
        let echoed = reply
            .headers
            .get_all("x-request-id")
            .iter()
            .collect::<Vec<_>>();
        assert_eq!(echoed.len(), 1, "{given:?}");
        assert_eq!(echoed[0].len(), 36, "a UUID for {given:?}: {:?}", echoed[0]);
    }
    let longest = "y".repeat(128);
    let request = axum::http::Request::builder()
        .uri("/healthz")
        .header("x-request-id", &longest)
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        app.send(request).await.headers["x-request-id"],
        longest.as_str()
    );
}

#[tokio::test]
async fn openapi_and_swagger_ui_are_served() {
    let app = TestApp::new().await;
    let reply = app.call(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, serde_json::to_value(http::openapi()).unwrap());
    let reply = app.call(Method::GET, "/docs/", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let Value::String(html) = reply.body else {
        panic!("HTML expected")
    };
    assert!(html.contains("swagger-ui"), "{html}");
    // The UI's assets are built in: no request leaves the machine.
    let reply = app
        .call(Method::GET, "/docs/swagger-ui-bundle.js", None, None)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn metrics_count_requests_by_route() {
    let app = TestApp::new().await;
    joulecast::telemetry::init_metrics();
    let metrics = || async {
        let reply = app.call(Method::GET, "/metrics", None, None).await;
        assert_eq!(reply.status, StatusCode::OK);
        let Value::String(text) = reply.body else {
            panic!("text expected")
        };
        text
    };
    // The value of one series, 0 while it does not exist yet.
    let value = |text: &str, series: &str| -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    };
    const HEALTH: &str = "{method=\"GET\",route=\"/healthz\",status=\"200\"}";
    const UNMATCHED: &str = "{method=\"GET\",route=\"unmatched\",status=\"404\"}";
    let before = metrics().await;
    for _ in 0..5 {
        app.call(Method::GET, "/healthz", None, None).await;
    }
    app.call(Method::GET, "/no/such/route", None, None).await;
    let after = metrics().await;
    // Other tests of this binary may ask too: at least ours were counted.
    for (name, series, asked) in [
        ("http_requests_total", HEALTH, 5.0),
        ("http_request_duration_seconds_count", HEALTH, 5.0),
        ("http_requests_total", UNMATCHED, 1.0),
        ("http_request_duration_seconds_count", UNMATCHED, 1.0),
    ] {
        let series = format!("{name}{series}");
        let grown = value(&after, &series) - value(&before, &series);
        assert!(grown >= asked, "{series} grew by {grown}:\n{after}");
    }
}

#[test]
fn the_committed_openapi_document_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = http::openapi().to_pretty_json().unwrap();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "openapi/openapi.json is out of date; regenerate it with\n    \
         cargo run -- openapi > openapi/openapi.json"
    );
}

/// A prediction's `model` is documented as the predictor chosen by
/// back-test, not as the model search's answer (two Rust types once shared
/// the name `ModelInfo`, and one schema hid the other).
#[test]
fn a_predictions_model_has_its_own_schema() {
    let spec = serde_json::to_value(http::openapi()).unwrap();
    let schemas = &spec["components"]["schemas"];
    let model = &schemas["MetricPrediction"]["properties"]["model"];
    let name = model["$ref"]
        .as_str()
        .or_else(|| model["allOf"][0]["$ref"].as_str())
        .unwrap_or_else(|| panic!("{model:#}"))
        .rsplit('/')
        .next()
        .unwrap();
    let properties = &schemas[name]["properties"];
    for field in [
        "family",
        "family_beyond",
        "family_below",
        "inside",
        "beyond",
        "below",
    ] {
        assert!(
            properties.get(field).is_some(),
            "{name} lacks {field}: {properties:#}"
        );
    }
    assert!(
        schemas["ModelInfo"]["properties"]
            .get("hypotheses")
            .is_some()
    );
}

#[test]
fn every_operation_is_documented_and_secured_or_public_by_design() {
    let spec = serde_json::to_value(http::openapi()).unwrap();
    let public = ["/healthz", "/readyz", "/metrics"];
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            assert!(
                operation["summary"].is_string() || operation["description"].is_string(),
                "{method} {path} has no description"
            );
            assert!(
                public.contains(&path.as_str()) || operation["security"].is_array(),
                "{method} {path} declares no security"
            );
        }
    }
}

#[tokio::test]
async fn a_request_over_the_time_limit_is_a_503_problem() {
    let app = TestApp::new().await;
    let hurried = TestApp {
        router: http::router(
            app.pool.clone(),
            Settings {
                request_timeout: std::time::Duration::from_millis(200),
                ..Settings::default()
            },
        ),
        ..app.clone()
    };
    // Hold a lock that the readiness check's query must wait for.
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE _sqlx_migrations IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let reply = hurried.call(Method::GET, "/readyz", None, None).await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.body["type"], "urn:joulecast:problem:timeout");
    assert_eq!(
        reply.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "a time-out is worth retrying, as docs/deployment.md says"
    );
    blocker.rollback().await.unwrap();
    let reply = hurried.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "ready again once the lock is gone"
    );
}

/// Every type documented in the OpenAPI spec has its own schema name:
/// utoipa keys schemas by the type's bare name, so two types of the same
/// name (in different modules) silently share one schema, and one of them
/// is documented wrongly (issue 13: two `ModelInfo`s).
#[test]
fn no_two_documented_types_share_a_schema_name() {
    let files = crate::support::files_under(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &["rs"],
    );
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    let mut duplicates = Vec::new();
    let mut documented = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut derives_schema = false;
        let mut renamed: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[derive(") && line.contains("ToSchema") {
                derives_schema = true;
            } else if let Some(rest) = line.strip_prefix("#[schema(as = ") {
                renamed = rest.split([')', ',']).next().map(|s| s.trim().to_owned());
            } else if derives_schema && !line.starts_with("#[") && !line.starts_with("//") {
                let item = line
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub(super) ")
                    .trim_start_matches("pub ");
                if let Some(rest) = item
                    .strip_prefix("struct ")
                    .or_else(|| item.strip_prefix("enum "))
                {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let name = renamed.take().unwrap_or(name);
                    let here = file.display().to_string();
                    documented += 1;
                    if let Some(first) = seen.insert(name.clone(), here.clone()) {
                        duplicates.push(format!("{name}: {first} and {here}"));
                    }
                }
                derives_schema = false;
                renamed = None;
            }
        }
    }
    assert!(documented > 50, "found only {documented} documented types");
    assert!(duplicates.is_empty(), "{duplicates:#?}");
}

/// Every pooled connection taken (a burst of slow listings, say): the 503
/// says that none came free in time, not that the database is down.
#[tokio::test]
async fn a_full_pool_is_answered_503_naming_it() {
    // The service's own pool settings (its acquire time-out), two connections.
    let migrated = crate::support::fresh_pool().await;
    let options = (*migrated.connect_options()).clone();
    let pool = joulecast::db::pool_options(2)
        .connect_with(options)
        .await
        .unwrap();
    let router = joulecast::http::router(pool.clone(), Default::default());
    let app = TestApp::with_router(pool, router).await;
    let mut held = Vec::new();
    for _ in 0..app.pool.options().get_max_connections() {
        held.push(app.pool.acquire().await.unwrap());
    }
    let reply = app.get("/v1/apps/anything", &app.read).await;
    reply.assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    let detail = reply.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("no database connection came free"),
        "{detail}"
    );
    assert!(reply.headers.contains_key("retry-after"));
    drop(held);
}

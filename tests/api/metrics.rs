//! The domain metrics on `/metrics` (issue 16): admission decisions,
//! predictions by source and flag, fits, cache lookups, the database pool.
//! The recorder is the process's, shared by the tests running beside this
//! one, so counters are checked by how much they grew at least.

use std::collections::HashMap;

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{TestApp, run};

/// Every sample of a scrape, by series (name and labels, as written).
async fn scrape(app: &TestApp) -> HashMap<String, f64> {
    let reply = app.call(Method::GET, "/metrics", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let serde_json::Value::String(text) = reply.body else {
        panic!("text expected")
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| (series.to_owned(), value.parse().unwrap()))
        .collect()
}

fn grew(before: &HashMap<String, f64>, after: &HashMap<String, f64>, series: &str) -> f64 {
    let Some(now) = after.get(series) else {
        panic!("no {series} in {after:#?}")
    };
    now - before.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_count_decisions_predictions_fits_and_lookups() {
    let app = TestApp::new().await;
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    let reply = app
        .put(
            "/v1/power-caps/site",
            &app.admin,
            &json!({"limit_w": 5_000.0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let before = scrape(&app).await;

    // One answer from history, and one model answer beyond the range asked
    // three times: rendered, rendered and noted, then kept.
    let ask = |nodes: u32| {
        let app = app.clone();
        async move {
            let path = format!("/v1/apps/lin/predictions?nodes={nodes}&metric=ets");
            let reply = app.get(&path, &app.read).await;
            assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
            reply.body
        }
    };
    assert_eq!(ask(2).await["predictions"][0]["source"], "history");
    for _ in 0..3 {
        let answer = ask(16).await;
        let p = &answer["predictions"][0];
        assert_eq!(p["source"], "model");
        assert!(
            p["flags"]
                .as_array()
                .unwrap()
                .contains(&json!("extrapolation"))
        );
    }
    // 1000 W per node: 2 nodes fit under 5 kW, 8 do not.
    let question = |nodes: u32| json!({"app": "lin", "nodes": nodes});
    let fits = app.post("/v1/admission", &app.schedule, &question(2)).await;
    assert_eq!(fits.body["admit"], true, "{:#}", fits.body);
    let too_big = app.post("/v1/admission", &app.schedule, &question(8)).await;
    assert_eq!(too_big.body["admit"], false, "{:#}", too_big.body);
    let start = json!({"source": "s", "job_id": "J1", "app": "lin", "nodes": 8});
    let refused = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{:#}", refused.body);
    let mut forced = start.clone();
    forced["force"] = json!(true);
    for _ in 0..2 {
        // Reported twice: counted once.
        let reply = app.post("/v1/jobs", &app.schedule, &forced).await;
        assert!(reply.status.is_success(), "{:#}", reply.body);
    }

    let after = scrape(&app).await;
    let at_least = |series: &str, n: f64| {
        let grown = grew(&before, &after, series);
        assert!(
            grown >= n,
            "{series} grew by {grown}, expected at least {n}"
        );
    };
    at_least(r#"predictions_total{metric="ets",source="history"}"#, 1.0);
    at_least(r#"predictions_total{metric="ets",source="model"}"#, 3.0);
    at_least(
        r#"prediction_flags_total{metric="ets",flag="extrapolation"}"#,
        3.0,
    );
    at_least(r#"cache_lookups_total{cache="answer",result="hit"}"#, 1.0);
    at_least(r#"cache_lookups_total{cache="answer",result="miss"}"#, 3.0);
    at_least(r#"cache_lookups_total{cache="model",result="miss"}"#, 3.0);
    at_least(r#"model_fits_total"#, 3.0);
    at_least(r#"model_fit_duration_seconds_count{metric="tts"}"#, 1.0);
    at_least(
        r#"admission_decisions_total{request="question",decision="admit",reason="fits"}"#,
        1.0,
    );
    at_least(
        r#"admission_decisions_total{request="question",decision="refuse",reason="power_cap"}"#,
        1.0,
    );
    at_least(
        r#"admission_decisions_total{request="job_start",decision="refuse",reason="power_cap"}"#,
        1.0,
    );
    at_least(
        r#"admission_decisions_total{request="job_start",decision="forced",reason="power_cap"}"#,
        1.0,
    );
    // This service's own: exact.
    assert_eq!(after["database_degraded"], 0.0);
    assert_eq!(after["gauges_up"], 1.0);
    let pool = |state: &str| after[&format!(r#"db_pool_connections{{state="{state}"}}"#)];
    assert!(pool("in_use") + pool("idle") >= 1.0);
    assert!(pool("in_use") + pool("idle") <= after["db_pool_max_connections"]);
}

/// The client connections served over HTTP are counted, beside their limit
/// (`--max-connections`). The recorder is the process's, so other tests'
/// servers may add to the count: it is checked to be at least ours.
#[tokio::test]
async fn open_connections_are_counted_beside_their_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    let app = TestApp::new().await;
    let url = app.serve().await;
    let address = url.trim_start_matches("http://");
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(address).await.unwrap());
    }
    // Accepted in the order they were opened: the three idle ones before it.
    let mut scrape = TcpStream::connect(address).await.unwrap();
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    scrape.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert!(value("http_connections_open") >= 4.0, "{text}");
    assert_eq!(
        value("http_connections_max"),
        joulecast::server::DEFAULT_MAX_CONNECTIONS as f64
    );
    drop(idle);
}

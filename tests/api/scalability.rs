//! Scalability over HTTP (docs/model.md §6): the stateless model search, scaling
//! models of stored runs, rules across metrics, efficiency factors; and the
//! `joulecast model` command.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Reply, TestApp};

const AMDAHL: &str = include_str!("../fixtures/extrap/amdahl-noisy.txt");

async fn search(app: &TestApp, body: Value) -> Reply {
    app.post("/v1/models/search", &app.read, &body).await
}

fn close(a: &Value, b: f64, tolerance: f64) -> bool {
    a.as_f64()
        .is_some_and(|a| (a - b).abs() <= tolerance * b.abs().max(1.0))
}

#[tokio::test]
async fn points_with_repetitions_give_the_model_its_fit_and_predictions() {
    let app = TestApp::new().await;
    // 10 + 2.5·p with ±1 % around it, three repetitions.
    let points: Vec<Value> = [4.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .map(|&p: &f64| {
            let y = 10.0 + 2.5 * p;
            json!({"p": p, "values": [y * 0.99, y, y * 1.01]})
        })
        .collect();
    let reply = search(
        &app,
        json!({"points": points, "targets": [128, 1024, 2, 16], "expectation": "O(p log p)"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let answer = &reply.body["models"][0];
    assert_eq!(answer["points"], 5);
    assert_eq!(answer["observations"], 15);
    let model = &answer["model"];
    assert_eq!(model["terms"].as_array().unwrap().len(), 1, "{model:#}");
    assert_eq!(model["terms"][0]["exponent"], "1");
    assert_eq!(model["terms"][0]["log_power"], 0);
    assert_eq!(model["big_o"], "O(p)");
    assert!(
        close(&model["terms"][0]["coefficient"], 2.5, 1e-6),
        "{model:#}"
    );
    assert!(close(&model["constant"], 10.0, 1e-6), "{model:#}");
    assert!(model["formula"].as_str().unwrap().ends_with("* p"));
    assert!(close(&model["adjusted_r2"], 1.0, 1e-9));
    assert!(model["rss"].as_f64().unwrap() < 1e-9);
    assert!(model["cv_smape_pct"].as_f64().unwrap() < 1e-6);
    assert!(close(&answer["predictions"][0]["value"], 330.0, 1e-6));
    assert!(close(&answer["predictions"][1]["value"], 2570.0, 1e-6));
    assert_eq!(answer["predictions"][1]["extrapolated"], true);
    // Below the smallest measured p (4) too; 16 was measured.
    assert_eq!(answer["predictions"][2]["extrapolated"], true);
    assert_eq!(answer["predictions"][3]["extrapolated"], false);
    // O(p) against O(p log p): slower than expected is a match.
    let expectation = &answer["expectation"];
    assert_eq!(expectation["outcome"], "match", "{expectation:#}");
    assert_eq!(expectation["divergence"], "log2(p)^(-1)");
    assert_eq!(expectation["deviation_limit"], "O(log2(p))");

    // The same data against O(sqrt p) is no match, against O(p / log p)...
    let reply = search(&app, json!({"points": points, "expectation": "O(sqrt(p))"})).await;
    assert_eq!(
        reply.body["models"][0]["expectation"]["outcome"],
        "no_match"
    );
    // ... approximate within a log factor.
    let reply = search(
        &app,
        json!({"points": points, "expectation": "O(p / log p)"}),
    )
    .await;
    assert_eq!(
        reply.body["models"][0]["expectation"]["outcome"],
        "approximate"
    );
}

#[tokio::test]
async fn an_extrap_file_is_modelled_with_negative_exponents_and_positive_predictions() {
    let app = TestApp::new().await;
    let reply = search(
        &app,
        json!({"extrap": AMDAHL, "targets": [64, 512], "expectation": "O(1)"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let answer = &reply.body["models"][0];
    assert_eq!(answer["region"], "main");
    assert_eq!(answer["metric"], "time");
    assert_eq!(answer["model"]["negative_exponents"], true);
    assert_eq!(answer["model"]["terms"][0]["exponent"], "-1");
    // The fixture's truth: 1000·(0.02 + 0.98/p).
    for prediction in answer["predictions"].as_array().unwrap() {
        let p = prediction["p"].as_f64().unwrap();
        assert!(
            close(&prediction["value"], 1000.0 * (0.02 + 0.98 / p), 0.05),
            "{prediction}"
        );
    }
    assert_eq!(answer["expectation"]["outcome"], "match");

    // Positive exponents only (as Extra-P's defaults): still positive over
    // 16× the largest point.
    let reply = search(
        &app,
        json!({"extrap": AMDAHL, "targets": [512], "negative": "never"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let answer = &reply.body["models"][0];
    assert_eq!(answer["model"]["negative_exponents"], false);
    assert!(answer["predictions"][0]["value"].as_f64().unwrap() > 0.0);

    // Custom settings restrict the hypotheses.
    let reply = search(
        &app,
        json!({"extrap": AMDAHL, "exponents": ["1/2"], "log_powers": [0],
               "negative": "always", "max_terms": 1}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["models"][0]["model"]["hypotheses"], 3);
}

#[tokio::test]
async fn bad_searches_name_the_field_and_the_reason() {
    let app = TestApp::new().await;
    let three = json!([{"p": 1, "values": [1]}, {"p": 2, "values": [2]}, {"p": 4, "values": [3]}]);
    let cases = [
        (json!({}), "points", "give the measurements"),
        (
            json!({"points": three, "extrap": AMDAHL}),
            "extrap",
            "not both",
        ),
        (
            json!({"points": [{"p": 1, "values": [1]}, {"p": 1, "values": [2]}]}),
            "points",
            "at least 3 distinct p values (got 1)",
        ),
        (
            json!({"points": [{"p": -2, "values": [1]}]}),
            "points[0].p",
            "must be from 1e-9 to 1e15 (got -2)",
        ),
        // Magnitudes whose powers or squares overflow (found by fuzzing:
        // the answer carried rss and smape_pct as null).
        (
            json!({"points": [{"p": 1.6e308, "values": [1]}, {"p": 2, "values": [2]},
                              {"p": 4, "values": [3]}]}),
            "points[0].p",
            "must be from 1e-9 to 1e15",
        ),
        (
            json!({"points": [{"p": 1, "values": [1]}, {"p": 2, "values": [2, 3.5e307]},
                              {"p": 4, "values": [3]}]}),
            "points[1].values[1]",
            "at most 1e100 in magnitude",
        ),
        (
            json!({"points": [{"p": 2, "values": []}]}),
            "points[0].values",
            "at least one value",
        ),
        (
            json!({"points": three, "expectation": "O(p"}),
            "expectation",
            "expected `)` but found the end at character 4",
        ),
        (
            json!({"points": three, "deviation_limit": "O(1)"}),
            "deviation_limit",
            "must grow with p",
        ),
        (
            json!({"points": three, "exponents": ["1/0"]}),
            "exponents[0]",
            "divides by zero",
        ),
        (
            json!({"points": three, "log_powers": [5]}),
            "log_powers[0]",
            "0 to 2",
        ),
        (
            json!({"points": three, "max_terms": 0}),
            "max_terms",
            "1 or 2",
        ),
        (
            json!({"points": three, "targets": [0]}),
            "targets[0]",
            "must be from 1e-9 to 1e15",
        ),
        (
            json!({"points": three, "targets": [2e15]}),
            "targets[0]",
            "must be from 1e-9 to 1e15, as a measured p (got 2e15)",
        ),
        (
            json!({"extrap": "PARAMETER p\nPOINTS 1 2 3\nDATA 1\nDATA x"}),
            "extrap",
            "line 4: DATA: `x` is not a finite number",
        ),
        (
            json!({"extrap": "PARAMETER p\nPOINTS 1 2\nDATA 1\nDATA 2"}),
            "extrap",
            "at least 3 distinct p values (got 2)",
        ),
        (
            json!({"points": three, "colour": 1}),
            "colour",
            "unknown field",
        ),
        (
            json!({"points": three, "negative": "sometimes"}),
            "negative",
            "unknown variant",
        ),
    ];
    for (body, field, reason) in cases {
        let reply = search(&app, body.clone()).await;
        reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
        let text = reply.body["errors"].to_string();
        assert!(text.contains(reason), "{body}: {:#}", reply.body);
    }
    let reply = app
        .call(
            axum::http::Method::POST,
            "/v1/models/search",
            None,
            Some(&json!({"points": three})),
        )
        .await;
    reply.assert_problem(StatusCode::UNAUTHORIZED);
}

/// Store one run per node count with the given time, 300 W per node.
async fn store_runs(app: &TestApp, tag: &str, nodes: &[i64], time: impl Fn(f64) -> f64) {
    for &n in nodes {
        let t = time(n as f64);
        let power = 300.0 * n as f64;
        app.ingest(&json!({
            "app": tag, "source": "test", "job_id": format!("{tag}-{n}"), "nodes": n,
            "energy_j": power * t, "avg_power_w": power,
        }))
        .await;
    }
}

const NODES: [i64; 6] = [1, 2, 4, 8, 16, 32];

#[tokio::test]
async fn the_scaling_model_of_stored_runs_follows_strong_scaling() {
    let app = TestApp::new().await;
    store_runs(&app, "cfd", &NODES, |n| 100.0 * (0.05 + 0.95 / n)).await;
    let reply = app
        .get(
            "/v1/apps/cfd/scaling-model?metric=tts&targets=64,512&expectation=O(1)",
            &app.read,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let body = &reply.body;
    assert_eq!(
        (body["app"].as_str(), body["unit"].as_str()),
        (Some("cfd"), Some("s"))
    );
    assert_eq!(body["runs"], 6);
    // Once, and the application's (issue 13: the search's `metric`, null,
    // was written after it in the same object).
    assert_eq!(body["metric"], "tts", "{body:#}");
    assert_eq!(body["model"]["terms"][0]["exponent"], "-1", "{body:#}");
    assert!(close(&body["model"]["constant"], 5.0, 1e-6), "{body:#}");
    assert!(close(
        &body["predictions"][1]["value"],
        100.0 * (0.05 + 0.95 / 512.0),
        1e-6
    ));
    assert_eq!(body["expectation"]["outcome"], "match");
    // APC = 300 W · n: linear.
    let reply = app
        .get("/v1/apps/cfd/scaling-model?metric=apc", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["model"]["big_o"], "O(p)");

    let reply = app.get("/v1/apps/nope/scaling-model", &app.read).await;
    reply.assert_problem(StatusCode::NOT_FOUND);
    store_runs(&app, "short", &[1, 2], |n| 10.0 / n).await;
    let reply = app.get("/v1/apps/short/scaling-model", &app.read).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs");
    for (query, field) in [
        ("metric=joules", "metric"),
        ("targets=64,x", "targets"),
        ("targets=", "targets"),
        ("expectation=O(q)", "expectation"),
        ("colour=red", "colour"),
    ] {
        let reply = app
            .get(&format!("/v1/apps/cfd/scaling-model?{query}"), &app.read)
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {:#}",
            reply.body
        );
        reply.assert_problem(StatusCode::BAD_REQUEST);
        let text = reply.body.to_string();
        assert!(text.contains(field), "{query}: {text}");
    }
}

#[tokio::test]
async fn rules_across_metrics_compare_leading_terms() {
    let app = TestApp::new().await;
    store_runs(&app, "reduce", &NODES, |n| 1.0 + 0.5 * n.log2()).await;
    store_runs(&app, "bcast", &NODES, |n| 2.0 + 0.3 * n.log2()).await;
    store_runs(&app, "allreduce", &NODES, |n| 1.0 + 0.8 * n.log2()).await;
    store_runs(&app, "alltoall", &NODES, |n| 1.0 + 0.1 * n).await;
    let operand = |app: &str| json!({"app": app, "metric": "tts"});
    let reply = app
        .post(
            "/v1/scaling-rules",
            &app.read,
            &json!({"rules": [
                {"name": "allreduce", "left": operand("allreduce"), "relation": "<=",
                 "right": [operand("reduce"), operand("bcast")]},
                {"left": operand("alltoall"), "relation": "<=",
                 "right": [operand("reduce"), operand("bcast")]},
                {"left": operand("alltoall"), "relation": ">=", "right": [operand("reduce")]},
                {"left": operand("reduce"), "relation": "=", "right": [operand("bcast")]},
            ]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let rules = reply.body["rules"].as_array().unwrap();
    let holds: Vec<bool> = rules
        .iter()
        .map(|r| r["holds"].as_bool().unwrap())
        .collect();
    assert_eq!(holds, [true, false, true, true], "{:#}", reply.body);
    assert_eq!(reply.body["all_hold"], false);
    assert_eq!(rules[0]["name"], "allreduce");
    assert_eq!(rules[0]["left"]["big_o"], "O(log2(p))");
    assert_eq!(rules[1]["left"]["big_o"], "O(p)");
    assert_eq!(rules[1]["right_big_o"], "O(log2(p))");
    assert!(
        rules[1]["statement"]
            .as_str()
            .unwrap()
            .ends_with("violated"),
        "{:#}",
        rules[1]
    );

    let reply = app
        .post(
            "/v1/scaling-rules",
            &app.read,
            &json!({"rules": [{"left": operand("reduce"), "relation": "<=",
                               "right": [operand("ghost")]}]}),
        )
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "rules[0].right[0].app");
    let reply = app
        .post("/v1/scaling-rules", &app.read, &json!({"rules": []}))
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "rules");
    let reply = app
        .post(
            "/v1/scaling-rules",
            &app.read,
            &json!({"rules": [{"left": operand("reduce"), "relation": "<",
                               "right": [operand("bcast")]}]}),
        )
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "rules[0].relation");
}

/// Load balance 1/(0.99 + 0.01·P) (Amdahl-like, a0 = 1, f = 0.99);
/// serialization 0.9 and transfer 0.97 throughout.
fn lb(p: f64) -> f64 {
    1.0 / (0.99 + 0.01 * p)
}

#[tokio::test]
async fn efficiency_factors_are_stored_idempotently_and_extrapolated() {
    let app = TestApp::new().await;
    let measurement = |p: i64| {
        json!({"region": "solver", "processes": p, "load_balance": lb(p as f64),
               "serialization": 0.9, "transfer": 0.97})
    };
    // P = 2 by its compute times: (t1 + t2) / (2·max) = LB(2).
    let t1 = 2.0 * lb(2.0) - 1.0;
    let body = json!({"measurements": [
        measurement(1),
        {"region": "solver", "processes": 2, "compute_times": [t1, 1.0],
         "serialization": 0.9, "transfer": 0.97},
        measurement(4),
        measurement(8),
    ]});
    let reply = app
        .post("/v1/apps/lulesh/efficiency", &app.ingest, &body)
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(
        (
            reply.body["created"].as_u64(),
            reply.body["replaced"].as_u64()
        ),
        (Some(4), Some(0))
    );
    let stored = reply.body["measurements"].as_array().unwrap();
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[1]["from_compute_times"], true);
    assert!(close(&stored[1]["load_balance"], lb(2.0), 1e-9));
    assert!(close(&stored[0]["efficiency"], 0.9 * 0.97, 1e-9));
    // A retry replaces, never adds.
    let reply = app
        .post("/v1/apps/lulesh/efficiency", &app.ingest, &body)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(
        (
            reply.body["created"].as_u64(),
            reply.body["replaced"].as_u64()
        ),
        (Some(0), Some(4))
    );
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM efficiency")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 4);
    let reply = app
        .get("/v1/apps/lulesh/efficiency?region=solver", &app.read)
        .await;
    assert_eq!(reply.body["measurements"].as_array().unwrap().len(), 4);

    let reply = app
        .get("/v1/apps/lulesh/scalability?targets=8,16,64", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let region = &reply.body["regions"][0];
    assert_eq!(region["region"], "solver");
    assert_eq!(region["measured"], json!([1, 2, 4, 8]));
    let factors = &region["factors"];
    assert_eq!(factors["load_balance"]["family"], "amdahl", "{factors:#}");
    assert!(close(&factors["load_balance"]["a0"], 1.0, 1e-6));
    assert!(close(&factors["load_balance"]["f"], 0.99, 1e-6));
    assert_eq!(factors["serialization"]["family"], "constant");
    assert_eq!(factors["transfer"]["family"], "constant");
    let targets = region["targets"].as_array().unwrap();
    // At 8 processes LB = 0.9346 > 0.9: serialization dominates; at 16 and 64
    // load balance does.
    assert_eq!(targets[0]["dominant"], "serialization");
    assert_eq!(targets[0]["extrapolated"], false);
    assert_eq!(targets[1]["dominant"], "load_balance");
    assert!(close(&targets[2]["load_balance"], lb(64.0), 1e-6));
    assert_eq!(targets[2]["extrapolated"], true);
    assert!(close(
        &targets[2]["efficiency"],
        lb(64.0) * 0.9 * 0.97,
        1e-6
    ));
    // LB < 0.9 from 0.99 + 0.01·P > 1/0.9, i.e. P > 12.1: first at 13.
    assert_eq!(
        region["dominant_changes"],
        json!([{"processes": 13, "from": "serialization", "to": "load_balance"}])
    );
    // Default targets: 2× and 16× the largest measured.
    let reply = app.get("/v1/apps/lulesh/scalability", &app.read).await;
    let processes: Vec<u64> = reply.body["regions"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["processes"].as_u64().unwrap())
        .collect();
    assert_eq!(processes, [16, 128]);
}

#[tokio::test]
async fn bad_efficiency_input_is_refused_whole_and_named() {
    let app = TestApp::new().await;
    let good = json!({"processes": 4, "load_balance": 0.9, "serialization": 0.9, "transfer": 0.9});
    let cases = [
        (json!({"measurements": []}), "measurements"),
        (
            json!({"measurements": [good, {"processes": 0, "load_balance": 0.9, "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[1].processes",
        ),
        (
            json!({"measurements": [{"processes": 4, "load_balance": 0.0, "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].load_balance",
        ),
        (
            json!({"measurements": [{"processes": 4, "load_balance": 0.9, "serialization": 1.5, "transfer": 0.9}]}),
            "measurements[0].serialization",
        ),
        (
            json!({"measurements": [{"processes": 4, "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].load_balance",
        ),
        (
            json!({"measurements": [{"processes": 2, "load_balance": 0.9, "compute_times": [1, 1], "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].compute_times",
        ),
        (
            json!({"measurements": [{"processes": 3, "compute_times": [1, 1], "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].compute_times",
        ),
        (
            json!({"measurements": [{"processes": 2, "compute_times": [1, -1], "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].compute_times[1]",
        ),
        (
            json!({"measurements": [good, good]}),
            "measurements[1].processes",
        ),
        (
            json!({"measurements": [{"region": "bad region", "processes": 4, "load_balance": 0.9, "serialization": 0.9, "transfer": 0.9}]}),
            "measurements[0].region",
        ),
        (
            json!({"measurements": [{"processes": 4}]}),
            "measurements[0].serialization",
        ),
    ];
    for (body, field) in cases {
        let reply = app
            .post("/v1/apps/bad/efficiency", &app.ingest, &body)
            .await;
        reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM efficiency")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing of a refused request is stored");
    let reply = app
        .post(
            "/v1/apps/bad/efficiency",
            &app.read,
            &json!({"measurements": [good]}),
        )
        .await;
    reply.assert_problem(StatusCode::FORBIDDEN);

    // Questions about what is not there.
    let reply = app.get("/v1/apps/bad/scalability", &app.read).await;
    reply.assert_problem(StatusCode::NOT_FOUND);
    let reply = app.get("/v1/apps/bad/efficiency", &app.read).await;
    reply.assert_problem(StatusCode::NOT_FOUND);
    app.post(
        "/v1/apps/bad/efficiency",
        &app.ingest,
        &json!({"measurements": [good]}),
    )
    .await;
    let reply = app
        .get("/v1/apps/bad/scalability?region=io", &app.read)
        .await;
    reply.assert_problem(StatusCode::NOT_FOUND);
    for targets in ["0", "", "%20,"] {
        let reply = app
            .get(
                &format!("/v1/apps/bad/scalability?targets={targets}"),
                &app.read,
            )
            .await;
        reply.assert_field_error(StatusCode::BAD_REQUEST, "targets");
    }
    let reply = app
        .get("/v1/apps/bad/scalability?region=a%20b", &app.read)
        .await;
    reply.assert_field_error(StatusCode::BAD_REQUEST, "region");
    // One measurement: every factor constant, nothing changes.
    let reply = app
        .get("/v1/apps/bad/scalability?targets=64,1,4", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["regions"][0]["region"], "all");
    assert_eq!(
        reply.body["regions"][0]["factors"]["load_balance"]["family"],
        "constant"
    );
    // Measured at 4 processes only: 1 is as much an extrapolation as 64.
    let extrapolated: Vec<bool> = reply.body["regions"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["extrapolated"].as_bool().unwrap())
        .collect();
    assert_eq!(extrapolated, [true, true, false]);
}

#[tokio::test]
async fn an_application_with_runs_but_no_measurements_is_told_so() {
    let app = TestApp::new().await;
    store_runs(&app, "plain", &[1, 2], |n| 10.0 / n).await;
    let reply = app.get("/v1/apps/plain/scalability", &app.read).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "measurements");
}

mod command {
    use std::process::Command;

    use serde_json::Value;

    const BIN: &str = env!("CARGO_BIN_EXE_joulecast");
    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/extrap");

    #[test]
    fn the_model_command_reads_extrap_files_and_prints_json_or_text() {
        let output = Command::new(BIN)
            .args(["model", &format!("{FIXTURES}/pow15-noisy.txt"), "--json"])
            .args(["--targets", "128,1024", "--repeat", "3"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let body: Value = serde_json::from_slice(&output.stdout).unwrap();
        let model = &body["models"][0];
        assert_eq!(model["region"], "main");
        assert_eq!(model["model"]["terms"][0]["exponent"], "3/2", "{model:#}");
        assert!(model["seconds_per_model"].as_f64().unwrap() > 0.0);
        // Truth 2 + 0.1·p^1.5 at 1024: 3278.8; ±2 % noise.
        let at_1024 = model["predictions"][1]["value"].as_f64().unwrap();
        assert!((at_1024 / 3278.8 - 1.0).abs() < 0.05, "{at_1024}");

        let output = Command::new(BIN)
            .args([
                "model",
                &format!("{FIXTURES}/log.txt"),
                "--expectation",
                "O(log p)",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(output.status.success());
        assert!(
            text.contains("5 + 3 * log2(p)") && text.contains("Match"),
            "{text}"
        );
    }

    #[test]
    fn bad_files_and_options_exit_2_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, "PARAMETER p\nPOINTS 1 2 3\nDATA 1\nDATA 2 oops\n").unwrap();
        let output = Command::new(BIN).arg("model").arg(&bad).output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("line 4: DATA: `oops` is not a finite number"),
            "{stderr}"
        );

        let output = Command::new(BIN)
            .args([
                "model",
                &format!("{FIXTURES}/log.txt"),
                "--expectation",
                "O(p",
            ])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--expectation: expected `)`"), "{stderr}");
    }
}

/// Heavy computations run under a fixed number of permits: with every one
/// taken, a model search is refused at once with 429 and Retry-After rather
/// than queued (issue 13, finding 3), and is served again once one is free.
#[tokio::test]
async fn heavy_requests_beyond_the_permits_are_refused_with_retry_after() {
    let pool = crate::support::fresh_pool().await;
    let settings = joulecast::http::Settings {
        heavy_permits: 2,
        ..Default::default()
    };
    let state = joulecast::http::AppState::new(pool.clone(), settings);
    let app = TestApp::with_router(pool, joulecast::http::router_from(state.clone())).await;
    let points = [4.0, 8.0, 16.0, 32.0].map(|p: f64| json!({"p": p, "values": [10.0 + 2.5 * p]}));
    let body = json!({ "points": points });
    let held = state.heavy.clone().try_acquire_many_owned(2).unwrap();
    let reply = search(&app, body.clone()).await;
    reply.assert_problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.headers["retry-after"], "1");
    drop(held);
    let reply = search(&app, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
}

/// Compute times near the largest float: their sum overflows, their load
/// balance does not (it was a 500, or a false "are all zero").
#[tokio::test]
async fn compute_times_near_the_largest_float_give_their_load_balance() {
    let app = TestApp::new().await;
    for (times, expected) in [([1e308, 1e308], 1.0), ([1.7e308, 1e-300], 0.5)] {
        let body = json!({"measurements": [{"processes": 2, "compute_times": times,
                                            "serialization": 1, "transfer": 1}]});
        let reply = app
            .post("/v1/apps/huge/efficiency", &app.ingest, &body)
            .await;
        assert!(reply.status.is_success(), "{:#}", reply.body);
        let stored = &reply.body["measurements"][0];
        assert!(
            close(&stored["load_balance"], expected, 1e-9),
            "{:#}",
            reply.body
        );
    }
}

/// A target where the model has no finite value (1/p at p = 1e-300) is
/// refused naming it: JSON has no number for infinity, and the answer's
/// `value` was `null`, against the schema (probe of 2026-11-27). Targets
/// now share the range of a measured p (1e-9 to 1e15), which refuses it
/// before the model is asked (400, as a bad query parameter).
#[tokio::test]
async fn a_target_where_the_model_overflows_is_refused_naming_it() {
    let app = TestApp::new().await;
    store_runs(&app, "inv", &NODES, |n| 3e8 / n).await;
    let reply = app
        .get(
            "/v1/apps/inv/scaling-model?metric=tts&targets=64,1e-300",
            &app.read,
        )
        .await;
    reply.assert_field_error(StatusCode::BAD_REQUEST, "targets[1]");
    let fine = app
        .get(
            "/v1/apps/inv/scaling-model?metric=tts&targets=64,1e-3",
            &app.read,
        )
        .await;
    assert_eq!(fine.status, StatusCode::OK, "{:#}", fine.body);
    assert!(
        close(&fine.body["predictions"][1]["value"], 3e11, 1e-6),
        "{:#}",
        fine.body
    );

    let points: Vec<Value> = NODES
        .iter()
        .map(|&p| json!({"p": p, "values": [3e8 / p as f64]}))
        .collect();
    let reply = search(&app, json!({"points": points, "targets": [1e-300]})).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "targets[0]");
}

//! `POST /v1/runs` and `GET /v1/runs/{id}`.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use joulecast::http::Settings;
use serde_json::{Value, json};

use crate::support::{TestApp, run};

#[tokio::test]
async fn a_run_is_stored_and_answered_after_commit() {
    let app = TestApp::new().await;
    let reply = app
        .post("/v1/runs", &app.ingest, &run("lammps", "1", 4))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["status"], "created");
    let stored = &reply.body["run"];
    let id = stored["id"].as_i64().unwrap();
    assert_eq!(
        reply.headers["location"].to_str().unwrap(),
        format!("/v1/runs/{id}")
    );
    assert_eq!(stored["nodes"], 4);
    assert_eq!(stored["duration_s"], 600.0);
    assert_eq!(stored["derived"], "duration_s");
    assert_eq!(stored["quality"], 1.0);

    // Committed: visible to another connection, and through the read API.
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE id = $1")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 1);
    let fetched = app.get(&format!("/v1/runs/{id}"), &app.read).await;
    assert_eq!(fetched.status, StatusCode::OK);
    assert_eq!(&fetched.body, stored);
}

#[tokio::test]
async fn each_missing_quantity_is_derived_from_the_other_two() {
    let app = TestApp::new().await;
    let cases = [
        (
            json!({"avg_power_w": 2000.0, "duration_s": 30.0}),
            "energy_j",
            60_000.0,
        ),
        (
            json!({"energy_j": 60_000.0, "duration_s": 30.0}),
            "avg_power_w",
            2000.0,
        ),
        (
            json!({"energy_j": 60_000.0, "avg_power_w": 2000.0}),
            "duration_s",
            30.0,
        ),
    ];
    for (i, (quantities, derived, expected)) in cases.into_iter().enumerate() {
        let mut body = json!({"app": "a", "source": "s", "job_id": i.to_string(), "nodes": 2});
        body.as_object_mut()
            .unwrap()
            .extend(quantities.as_object().unwrap().clone());
        let reply = app.post("/v1/runs", &app.ingest, &body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        assert_eq!(reply.body["run"]["derived"], derived);
        assert_eq!(reply.body["run"][derived], expected);
    }
    // All three, consistent within 5 %: stored as given, nothing derived.
    let body = json!({"app": "a", "source": "s", "job_id": "x", "nodes": 2,
                      "energy_j": 62_000.0, "avg_power_w": 2000.0, "duration_s": 30.0});
    let reply = app.post("/v1/runs", &app.ingest, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["run"]["derived"], Value::Null);
    assert_eq!(reply.body["run"]["energy_j"], 62_000.0);
}

#[tokio::test]
async fn resending_the_same_run_is_a_duplicate_and_different_values_a_conflict() {
    let app = TestApp::new().await;
    let first = app.ingest(&run("lammps", "77", 8)).await;

    let again = app
        .post("/v1/runs", &app.ingest, &run("lammps", "77", 8))
        .await;
    assert_eq!(again.status, StatusCode::OK, "{:#}", again.body);
    assert_eq!(again.body["status"], "duplicate");
    assert_eq!(again.body["run"]["id"], first);

    // The same run with the derived value spelled out is still the same run.
    let mut explicit = run("lammps", "77", 8);
    explicit["duration_s"] = json!(600.0);
    let reply = app.post("/v1/runs", &app.ingest, &explicit).await;
    assert_eq!(reply.body["status"], "duplicate", "{:#}", reply.body);

    let mut changed = run("lammps", "77", 8);
    changed["energy_j"] = json!(5_000_000.0);
    let conflict = app.post("/v1/runs", &app.ingest, &changed).await;
    conflict.assert_field_error(StatusCode::CONFLICT, "energy_j");

    let mut other_app = run("gromacs", "77", 8);
    other_app["energy_j"] = json!(4_800_000.0);
    let conflict = app.post("/v1/runs", &app.ingest, &other_app).await;
    conflict.assert_field_error(StatusCode::CONFLICT, "app");
    // Values are shown as JSON, as the client wrote them.
    assert_eq!(
        conflict.body["errors"][0]["reason"],
        r#"stored value is "lammps", this one is "gromacs""#
    );
    app.get("/v1/apps/gromacs", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);

    // A node list is a set: the same nodes in another order are the same
    // run; other nodes are not.
    let mut listed = run("lammps", "78", 2);
    listed["node_list"] = json!(["b1", "a1"]);
    app.ingest(&listed).await;
    listed["node_list"] = json!(["a1", "b1"]);
    let reply = app.post("/v1/runs", &app.ingest, &listed).await;
    assert_eq!(reply.body["status"], "duplicate", "{:#}", reply.body);
    listed["node_list"] = json!("a[1-2]");
    let conflict = app.post("/v1/runs", &app.ingest, &listed).await;
    conflict.assert_field_error(StatusCode::CONFLICT, "node_list");
    assert_eq!(
        conflict.body["errors"][0]["reason"],
        r#"stored value is ["b1","a1"], this one is ["a1","a2"]"#
    );

    assert_eq!(app.run_count().await, 2, "never double-counted");
    let apps = app.get("/v1/apps/lammps", &app.read).await;
    assert_eq!(apps.body["run_count"], 2);
    assert_eq!(
        apps.body["history_version"], 2,
        "a duplicate changes no history"
    );
}

#[tokio::test]
async fn the_same_job_id_from_another_source_is_another_run() {
    let app = TestApp::new().await;
    app.ingest(&run("lammps", "5", 2)).await;
    let mut other = run("lammps", "5", 2);
    other["source"] = json!("clusterB");
    app.ingest(&other).await;
    assert_eq!(app.run_count().await, 2);
}

#[tokio::test]
async fn an_unknown_application_is_created_on_its_first_run() {
    let app = TestApp::new().await;
    assert_eq!(
        app.get("/v1/apps/newapp", &app.read).await.status,
        StatusCode::NOT_FOUND
    );
    app.ingest(&run("newapp", "1", 3)).await;
    let reply = app.get("/v1/apps/newapp", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["scaling_mode"], "unknown");
    assert_eq!(reply.body["run_count"], 1);
    assert_eq!(reply.body["nodes_min"], 3);
    assert_eq!(reply.body["nodes_max"], 3);
}

/// Every validation rule, over HTTP: a 422 problem naming the field, and nothing stored.
#[tokio::test]
async fn every_validation_rule_answers_422_naming_the_field() {
    let app = TestApp::new().await;
    let with = |changes: Value| {
        let mut body = run("lammps", "1", 4);
        for (key, value) in changes.as_object().unwrap() {
            if value.is_null() {
                body.as_object_mut().unwrap().remove(key);
            } else {
                body[key] = value.clone();
            }
        }
        body
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!({"nodes": 0}), "nodes"),
        (json!({"nodes": -3}), "nodes"),
        (json!({"nodes": 2.5}), "nodes"),
        (json!({"nodes": "four"}), "nodes"),
        (json!({"nodes": null}), "nodes"),
        (json!({"energy_j": 0.0}), "energy_j"),
        (json!({"energy_j": -10.0}), "energy_j"),
        (json!({"avg_power_w": -1.0}), "avg_power_w"),
        // Squares that would underflow or overflow in the statistics
        // PostgreSQL keeps (found by fuzzing: answered 400 naming `body`).
        (
            json!({"energy_j": null, "avg_power_w": 1e-200, "duration_s": 600.0}),
            "avg_power_w",
        ),
        (
            json!({"energy_j": null, "avg_power_w": 1e200, "duration_s": 600.0}),
            "avg_power_w",
        ),
        (
            json!({"energy_j": null, "avg_power_w": 1e-5, "duration_s": 1e-99}),
            "energy_j",
        ),
        (json!({"avg_power_w": "much"}), "avg_power_w"),
        (json!({"energy_j": null, "duration_s": 0.0}), "duration_s"),
        (json!({"avg_power_w": null}), "avg_power_w"),
        (json!({"duration_s": 10.0}), "duration_s"),
        (json!({"quality": 0.0}), "quality"),
        (json!({"quality": 1.01}), "quality"),
        (json!({"quality": -0.5}), "quality"),
        // Its product with a tiny energy's square underflowed in the
        // history's sums (400 naming `body`).
        (
            json!({"energy_j": 1e-100, "avg_power_w": null, "duration_s": 1.0,
                   "quality": 1e-200}),
            "quality",
        ),
        (json!({"node_list": ["n1", "n2"]}), "node_list"),
        (
            json!({"node_list": ["n1", "n2", "n3", "n3"]}),
            "node_list[3]",
        ),
        (
            json!({"node_list": ["n1", "n2", "n3", "bad name"]}),
            "node_list[3]",
        ),
        (
            json!({"started_at": "2026-01-01T10:00:00Z", "ended_at": "2026-01-01T09:00:00Z"}),
            "ended_at",
        ),
        (json!({"ended_at": "not a time"}), "ended_at"),
        (json!({"ended_at": "2999-01-01T00:00:00Z"}), "ended_at"),
        (
            json!({"started_at": "2026-01-01T10:00:00Z", "ended_at": "2026-01-01T11:00:00Z"}),
            "duration_s",
        ),
        (json!({"app": ""}), "app"),
        (json!({"app": "x".repeat(129)}), "app"),
        (json!({"app": "has space"}), "app"),
        (json!({"app": "a/b"}), "app"),
        (json!({"app": null}), "app"),
        (json!({"source": "-x"}), "source"),
        (json!({"job_id": "1 2"}), "job_id"),
        (json!({"account": "proj x"}), "account"),
        (json!({"colour": "blue"}), "colour"),
        (
            json!({"avg_power_w": 1.0e12, "energy_j": 6.0e14}),
            "avg_power_w",
        ),
    ];
    for (changes, field) in cases {
        let body = with(changes.clone());
        let reply = app.post("/v1/runs", &app.ingest, &body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{changes}: {:#}",
            reply.body
        );
        reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    assert_eq!(app.run_count().await, 0, "no invalid run was stored");
}

#[tokio::test]
async fn disagreeing_quantities_name_all_three_fields() {
    let app = TestApp::new().await;
    let mut body = run("lammps", "1", 4);
    body["duration_s"] = json!(700.0); // 600 s expected: 16 % apart
    let reply = app.post("/v1/runs", &app.ingest, &body).await;
    reply.assert_problem(StatusCode::UNPROCESSABLE_ENTITY);
    let mut fields = reply.error_fields();
    fields.sort();
    assert_eq!(fields, ["avg_power_w", "duration_s", "energy_j"]);
}

#[tokio::test]
async fn malformed_json_is_400_and_other_media_types_415() {
    let app = TestApp::new().await;
    let request = |content_type: &str, body: String| {
        Request::builder()
            .method(Method::POST)
            .uri("/v1/runs")
            .header("authorization", format!("Bearer {}", app.ingest))
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap()
    };
    let reply = app
        .send(request("application/json", "{\"app\": ".into()))
        .await;
    reply.assert_problem(StatusCode::BAD_REQUEST);
    let reply = app.send(request("application/json", "[1, 2]".into())).await;
    reply.assert_problem(StatusCode::UNPROCESSABLE_ENTITY);
    let trailing = format!("{} {{}}", run("lammps", "1", 4));
    let reply = app.send(request("application/json", trailing)).await;
    reply.assert_problem(StatusCode::BAD_REQUEST);
    let reply = app
        .send(request("text/plain", run("lammps", "1", 4).to_string()))
        .await;
    reply.assert_problem(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let reply = app
        .send(request("application/json", "{\"nodes\": 1e999}".into()))
        .await;
    // serde_json reads an out-of-range number as a syntax error.
    reply.assert_problem(StatusCode::BAD_REQUEST);
    assert_eq!(app.run_count().await, 0);
}

/// serde reads a struct from an array, its fields by position: a run sent
/// as `["arrapp", "c1", "arr1", 2, ...]` was stored (201), past the field
/// names the schema and `deny_unknown_fields` check. Arrays are refused
/// where an object is read, naming the body or the item.
#[tokio::test]
async fn arrays_are_not_read_as_objects() {
    let app = TestApp::new().await;
    let positional = json!(["arrapp", "c1", "arr1", 2, null, 2000, null, 10]);
    app.post("/v1/runs", &app.ingest, &positional)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "body");
    let batch = json!([[run("arrapp", "b1", 2)], false]);
    app.post("/v1/runs/batch", &app.ingest, &batch)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "body");
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": [positional, run("arrapp", "b2", 2)]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(
        reply.body["items"][0]["status"], "rejected",
        "{:#}",
        reply.body
    );
    assert_eq!(reply.body["items"][0]["errors"][0]["field"], "runs[0]");
    assert_eq!(reply.body["items"][1]["status"], "created");
    assert_eq!(app.run_count().await, 1);
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let app = TestApp::with_settings(Settings {
        max_body_bytes: 1024,
        ..Settings::default()
    })
    .await;
    let mut body = run("lammps", "1", 4);
    body["account"] = json!("a".repeat(2000));
    let reply = app.post("/v1/runs", &app.ingest, &body).await;
    reply.assert_problem(StatusCode::PAYLOAD_TOO_LARGE);
    assert!(reply.body["detail"].as_str().unwrap().contains("1024"));

    // Declared too large, and never sent: refused at once, not after the
    // request time-out spent waiting for a body it would refuse.
    let never_sent = futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/runs")
        .header("authorization", format!("Bearer {}", app.ingest))
        .header("content-type", "application/json")
        .header("content-length", "100000")
        .body(Body::from_stream(never_sent))
        .unwrap();
    let reply = tokio::time::timeout(std::time::Duration::from_secs(5), app.send(request))
        .await
        .expect("a body declared too large waited to be read");
    reply.assert_problem(StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(app.run_count().await, 0);
}

#[tokio::test]
async fn get_run_answers_404_and_400() {
    let app = TestApp::new().await;
    app.get("/v1/runs/999", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    // The path parameter is named, with the reason.
    let reply = app.get("/v1/runs/abc", &app.read).await;
    reply.assert_field_error(StatusCode::BAD_REQUEST, "id");
    assert_eq!(
        reply.body["errors"][0]["reason"], "must be a whole number (got \"abc\")",
        "{:#}",
        reply.body
    );
    app.call(
        axum::http::Method::DELETE,
        "/v1/tokens/1x",
        Some(&app.admin),
        None,
    )
    .await
    .assert_field_error(StatusCode::BAD_REQUEST, "id");
}

#[tokio::test]
async fn node_lists_and_times_are_kept() {
    let app = TestApp::new().await;
    let mut body = run("lammps", "1", 2);
    body["node_list"] = json!(["cn001", "cn002"]);
    body["started_at"] = json!("2026-03-01T10:00:00Z");
    body["ended_at"] = json!("2026-03-01T10:10:00.5Z");
    body["account"] = json!("proj42");
    body["quality"] = json!(0.8);
    let id = app.ingest(&body).await;
    let stored = app.get(&format!("/v1/runs/{id}"), &app.read).await.body;
    assert_eq!(stored["node_list"], json!(["cn001", "cn002"]));
    assert_eq!(stored["started_at"], "2026-03-01T10:00:00Z");
    assert_eq!(stored["ended_at"], "2026-03-01T10:10:00.500Z");
    assert_eq!(stored["account"], "proj42");
    assert_eq!(stored["quality"], 0.8);
    // And a resend of exactly the same is a duplicate.
    let again = app.post("/v1/runs", &app.ingest, &body).await;
    assert_eq!(again.body["status"], "duplicate", "{:#}", again.body);
}

/// Every required field a run lacks is named at once, alone and in a batch.
#[tokio::test]
async fn every_missing_required_field_is_named() {
    let app = TestApp::new().await;
    let reply = app
        .post(
            "/v1/runs",
            &app.ingest,
            &json!({"app": "x", "nodes": 0, "duration_s": 10}),
        )
        .await;
    reply.assert_problem(StatusCode::UNPROCESSABLE_ENTITY);
    let mut fields = reply.error_fields();
    fields.sort();
    assert_eq!(fields, ["job_id", "source"], "{:#}", reply.body);

    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": [run("x", "1", 2), {"duration_s": 10}], "atomic": true}),
        )
        .await;
    reply.assert_problem(StatusCode::UNPROCESSABLE_ENTITY);
    let mut fields = reply.error_fields();
    fields.sort();
    assert_eq!(
        fields,
        [
            "runs[1].app",
            "runs[1].job_id",
            "runs[1].nodes",
            "runs[1].source"
        ],
        "{:#}",
        reply.body
    );
    // Present but unreadable: the first such field, as before.
    app.post(
        "/v1/runs",
        &app.ingest,
        &json!({"app": "x", "source": "s", "job_id": "1", "nodes": "two"}),
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "nodes");
    assert_eq!(app.run_count().await, 0);
}

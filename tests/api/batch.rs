//! `POST /v1/runs/batch`: per-item answers, atomic mode, limits, concurrency.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, run};

fn statuses(reply: &Value) -> Vec<String> {
    reply["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["status"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_mixed_batch_is_answered_item_by_item_and_only_good_runs_are_stored() {
    let app = TestApp::new().await;
    let stored = app.ingest(&run("lammps", "stored", 4)).await;
    let mut conflicting = run("lammps", "stored", 4);
    conflicting["nodes"] = json!(8);
    conflicting["energy_j"] = json!(8.0 * 1000.0 * 600.0);
    conflicting["avg_power_w"] = json!(8000.0);
    let mut bad = run("lammps", "bad", 4);
    bad["nodes"] = json!(0);
    let mut wrong_type = run("lammps", "wrong-type", 4);
    wrong_type["energy_j"] = json!("lots");
    let mut repeat_changed = run("gromacs", "g1", 2);
    repeat_changed["quality"] = json!(0.5);

    let batch = json!({"runs": [
        run("lammps", "new-1", 2),      // 0 created
        bad,                            // 1 rejected: invalid
        run("lammps", "stored", 4),     // 2 duplicate of a stored run
        conflicting,                    // 3 rejected: conflict with a stored run
        run("gromacs", "g1", 2),        // 4 created (new application)
        run("gromacs", "g1", 2),        // 5 duplicate of item 4
        repeat_changed,                 // 6 rejected: conflicts with item 4
        wrong_type,                     // 7 rejected: invalid type
        run("lammps", "new-2", 16),     // 8 created
    ]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let body = &reply.body;
    assert_eq!(
        statuses(body),
        [
            "created",
            "rejected",
            "duplicate",
            "rejected",
            "created",
            "duplicate",
            "rejected",
            "rejected",
            "created"
        ]
    );
    assert_eq!(
        (
            body["created"].as_u64(),
            body["duplicate"].as_u64(),
            body["rejected"].as_u64()
        ),
        (Some(3), Some(2), Some(4))
    );
    let items = body["items"].as_array().unwrap();
    assert_eq!(items[1]["rejection"], "invalid");
    assert_eq!(items[1]["errors"][0]["field"], "runs[1].nodes");
    assert_eq!(items[2]["run_id"], stored);
    assert_eq!(items[3]["rejection"], "conflict");
    assert_eq!(items[3]["run_id"], stored);
    assert!(
        items[3]["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["field"] == "runs[3].nodes"),
        "{:#}",
        items[3]
    );
    assert_eq!(items[5]["run_id"], items[4]["run_id"]);
    assert_eq!(items[6]["rejection"], "conflict");
    assert_eq!(items[6]["errors"][0]["field"], "runs[6].quality");
    assert_eq!(items[7]["errors"][0]["field"], "runs[7].energy_j");

    // Stored: the one from before plus the three created, nothing else.
    assert_eq!(app.run_count().await, 4);
    for i in [0, 4, 8] {
        let id = items[i]["run_id"].as_i64().unwrap();
        let fetched = app.get(&format!("/v1/runs/{id}"), &app.read).await;
        assert_eq!(fetched.status, StatusCode::OK);
    }
    let lammps = app.get("/v1/apps/lammps", &app.read).await.body;
    assert_eq!(lammps["run_count"], 3);
    assert_eq!(lammps["nodes_min"], 2);
    assert_eq!(lammps["nodes_max"], 16);
    let gromacs = app.get("/v1/apps/gromacs", &app.read).await.body;
    assert_eq!(gromacs["run_count"], 1);
}

#[tokio::test]
async fn each_repeat_of_a_stored_key_is_compared_with_the_stored_run() {
    let app = TestApp::new().await;
    let stored = app.ingest(&run("lammps", "7", 4)).await;
    let mut changed = run("lammps", "7", 4);
    changed["quality"] = json!(0.9);
    let batch = json!({"runs": [changed, run("lammps", "7", 4), run("lammps", "7", 4)]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(
        statuses(&reply.body),
        ["rejected", "duplicate", "duplicate"]
    );
    for item in reply.body["items"].as_array().unwrap() {
        assert_eq!(item["run_id"], stored);
    }
    assert_eq!(app.run_count().await, 1);
}

#[tokio::test]
async fn an_atomic_batch_with_a_bad_run_stores_nothing() {
    let app = TestApp::new().await;
    let mut bad = run("lammps", "2", 4);
    bad["quality"] = json!(2.0);
    let batch =
        json!({"atomic": true, "runs": [run("lammps", "1", 2), bad, run("lammps", "3", 8)]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs[1].quality");
    assert_eq!(app.run_count().await, 0);
    assert_eq!(
        app.get("/v1/apps/lammps", &app.read).await.status,
        StatusCode::NOT_FOUND,
        "not even the application was created"
    );

    // So does a repeat of an earlier item with other values.
    let mut clash = run("lammps", "1", 2);
    clash["quality"] = json!(0.7);
    let batch = json!({"atomic": true, "runs": [run("lammps", "1", 2), clash]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs[1].quality");
    // The reason names the item it clashes with, which is not stored.
    assert_eq!(
        reply.body["errors"][0]["reason"], "item 0 of this batch has 1.0, this one is 0.7",
        "{:#}",
        reply.body
    );
    assert_eq!(app.run_count().await, 0);

    // A conflict with a stored run also refuses the whole atomic batch.
    app.ingest(&run("lammps", "9", 2)).await;
    let mut conflicting = run("lammps", "9", 2);
    conflicting["quality"] = json!(0.3);
    let batch = json!({"atomic": true, "runs": [run("lammps", "10", 2), conflicting]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs[1].quality");
    assert_eq!(
        reply.body["errors"][0]["reason"], "stored value is 1.0, this one is 0.3",
        "{:#}",
        reply.body
    );
    assert_eq!(app.run_count().await, 1);

    let batch = json!({"atomic": true, "runs": [run("lammps", "1", 2), run("lammps", "3", 8)]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(statuses(&reply.body), ["created", "created"]);
    assert_eq!(app.run_count().await, 3);
}

#[tokio::test]
async fn batch_size_limits() {
    let app = TestApp::new().await;
    let reply = app
        .post("/v1/runs/batch", &app.ingest, &json!({"runs": []}))
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs");
    let too_many: Vec<Value> = (0..10_001).map(|i| run("a", &i.to_string(), 1)).collect();
    let reply = app
        .post("/v1/runs/batch", &app.ingest, &json!({"runs": too_many}))
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs");
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": [], "mode": 1}),
        )
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "mode");
    assert_eq!(app.run_count().await, 0);
}

#[tokio::test]
async fn a_full_batch_of_ten_thousand_runs_is_stored() {
    let app = TestApp::new().await;
    let runs: Vec<Value> = (0..10_000)
        .map(|i| run(&format!("app{}", i % 7), &i.to_string(), 1 + i % 64))
        .collect();
    let reply = app
        .post("/v1/runs/batch", &app.ingest, &json!({"runs": runs}))
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["created"], 10_000);
    assert_eq!(app.run_count().await, 10_000);
    let total: i64 = sqlx::query_scalar("SELECT sum(run_count)::bigint FROM applications")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(total, 10_000, "application statistics match the runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_overlapping_batches_never_double_count() {
    let app = TestApp::new().await;
    // Four clients send overlapping batches (same keys, other orders) at once.
    let batch = |offset: usize| {
        let runs: Vec<Value> = (0..200)
            .map(|i| (i * 7 + offset * 31) % 200)
            .map(|i| {
                let tag = if i % 2 == 0 { "even" } else { "odd" };
                run(tag, &i.to_string(), 1 + (i % 9) as i64)
            })
            .collect();
        json!({"runs": runs})
    };
    let mut clients = tokio::task::JoinSet::new();
    for k in 0..4 {
        let app = app.clone();
        let body = batch(k);
        clients.spawn(async move { app.post("/v1/runs/batch", &app.ingest, &body).await });
    }
    let mut created = 0;
    while let Some(reply) = clients.join_next().await {
        let reply = reply.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["rejected"], 0);
        created += reply.body["created"].as_u64().unwrap();
    }
    assert_eq!(
        created, 200,
        "each run created exactly once across the batches"
    );
    assert_eq!(app.run_count().await, 200);
    let stats: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT a.tag, a.run_count, (SELECT count(*) FROM runs r WHERE r.app_id = a.id)
         FROM applications a ORDER BY a.tag",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(stats.len(), 2);
    for (tag, counted, actual) in stats {
        assert_eq!(counted, actual, "run_count of {tag}");
        assert_eq!(actual, 100);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_of_different_apps_claiming_the_same_jobs_store_each_once() {
    let app = TestApp::new().await;
    // Each client claims the same 300 job ids for its own application, so the
    // batches hold different application locks and race on the run keys.
    let mut clients = tokio::task::JoinSet::new();
    for k in 0..4 {
        let app = app.clone();
        let runs: Vec<Value> = (0..300)
            .map(|i| (i * 7 + k * 53) % 300)
            .map(|i| run(&format!("app{k}"), &i.to_string(), 1 + (i % 5) as i64))
            .collect();
        clients.spawn(async move {
            let reply = app
                .post("/v1/runs/batch", &app.ingest, &json!({"runs": runs}))
                .await;
            (k, reply)
        });
    }
    let mut created = 0;
    while let Some(joined) = clients.join_next().await {
        let (k, reply) = joined.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "client {k}: {:#}", reply.body);
        let body = &reply.body;
        let c = body["created"].as_u64().unwrap();
        let rejected = body["rejected"].as_u64().unwrap();
        assert_eq!(
            c + rejected,
            300,
            "client {k}: each run created or a conflict"
        );
        for item in body["items"].as_array().unwrap() {
            if item["status"] == "rejected" {
                assert_eq!(item["rejection"], "conflict", "{item:#}");
                assert!(item["run_id"].is_i64(), "names the stored run: {item:#}");
            }
        }
        created += c;
    }
    assert_eq!(created, 300, "each job stored once, by one of the clients");
    assert_eq!(app.run_count().await, 300);
    let mismatched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM applications a
         WHERE a.run_count <> (SELECT count(*) FROM runs r WHERE r.app_id = a.id)
            OR a.run_count = 0",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        mismatched, 0,
        "statistics match, and no empty application is left"
    );
}

/// Hostlists compress: `n[1-100000]` is 11 bytes. Batches whose node lists
/// name more than 200,000 nodes in all are refused before any list is
/// expanded (issue 13, finding 3: 300 such runs took 2.8 GiB), naming the
/// field; within the budget the same lists are accepted.
#[tokio::test]
async fn batches_naming_too_many_nodes_in_all_are_refused_before_expansion() {
    let app = TestApp::new().await;
    let big = |i: usize| {
        let mut r = run("wide", &format!("w{i}"), 100_000);
        r["node_list"] = json!("n[1-100000]");
        r
    };
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": (0..300).map(big).collect::<Vec<_>>()}),
        )
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs");
    assert!(
        reply.body.to_string().contains("30000000 nodes"),
        "{:#}",
        reply.body
    );
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    // Two such runs are within the budget.
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": [big(0), big(1)]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["created"], 2, "{:#}", reply.body);

    let query = json!({"app": "wide", "node_list": "n[1-100000]"});
    let reply = app
        .post(
            "/v1/predictions",
            &app.read,
            &json!({"queries": vec![query.clone(); 300]}),
        )
        .await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "queries");
    let reply = app
        .post(
            "/v1/predictions",
            &app.read,
            &json!({"queries": vec![query; 2]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
}

/// POST `body` as it is written, key order and repeats included.
async fn post_text(app: &TestApp, path: &str, token: &str, body: &str) -> crate::support::Reply {
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(path)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    app.send(request).await
}

/// A field given twice in a run, a batch item, a prediction query or a node
/// sample is refused naming it, as whole bodies were: items were read as
/// JSON values, which keep the last of two keys, so `"nodes":1,"nodes":1000`
/// stored 1000 nodes (probe of 2026-11-27).
#[tokio::test]
async fn a_field_given_twice_in_an_item_is_refused_naming_it() {
    let app = TestApp::new().await;
    let run =
        r#"{"app":"dup","source":"s","job_id":"JOB","nodes":1,"avg_power_w":10,"duration_s":10}"#;
    let twice = run.replace(r#""nodes":1"#, r#""nodes":1,"nodes":1000"#);

    let reply = post_text(&app, "/v1/runs", &app.ingest, &twice.replace("JOB", "a")).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "nodes");

    let batch = format!(
        r#"{{"runs":[{},{}]}}"#,
        run.replace("JOB", "b"),
        twice.replace("JOB", "c")
    );
    let reply = post_text(&app, "/v1/runs/batch", &app.ingest, &batch).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(statuses(&reply.body), ["created", "rejected"]);
    assert_eq!(
        reply.body["items"][1]["errors"][0]["field"],
        "runs[1].nodes"
    );
    assert_eq!(
        app.run_count().await,
        1,
        "only the run without a repeat is stored"
    );

    let queries = r#"{"queries":[{"app":"dup","nodes":1},{"app":"dup","app":"other","nodes":1}]}"#;
    let reply = post_text(&app, "/v1/predictions", &app.read, queries).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["answers"][0]["status"], "ok", "{:#}", reply.body);
    assert_eq!(reply.body["answers"][1]["status"], "error");
    assert_eq!(
        reply.body["answers"][1]["error"]["errors"][0]["field"],
        "queries[1].app"
    );

    let samples = r#"{"samples":[{"node":"cn1","node":"cn2","workload":"reference",
        "avg_power_w":200,"measured_at":"2026-11-01T00:00:00Z"}]}"#;
    let reply = post_text(&app, "/v1/nodes/samples", &app.ingest, samples).await;
    assert_eq!(
        reply.body["items"][0]["errors"][0]["field"], "samples[0].node",
        "{:#}",
        reply.body
    );
}

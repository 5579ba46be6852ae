//! Capacity questions over HTTP: max-nodes, optimal-nodes, pareto.

use axum::http::StatusCode;
use chrono::Utc;
use serde_json::{Value, json};

use crate::support::{TestApp, run};

/// Runs of `lin` whose APC is exactly 100 + 200·n W, on 1–16 nodes.
async fn with_linear_power(app: &TestApp) {
    for n in [1, 2, 4, 8, 16] {
        let apc = 100.0 + 200.0 * n as f64;
        let mut r = run("lin", &format!("lin-{n}"), n);
        r["avg_power_w"] = json!(apc);
        r["energy_j"] = json!(apc * 600.0);
        app.ingest(&r).await;
    }
}

/// Runs of `amd` whose time follows Amdahl (p = 0.9, one hour on one node)
/// and whose energy grows by a tenth per extra node.
async fn with_time_energy_tradeoff(app: &TestApp) {
    for n in [1, 2, 4, 8, 16] {
        let x = n as f64;
        let mut r = run("amd", &format!("amd-{n}"), n);
        r["duration_s"] = json!(3600.0 * (0.1 + 0.9 / x));
        r["energy_j"] = json!(1e6 * (1.0 + 0.1 * (x - 1.0)));
        r.as_object_mut().unwrap().remove("avg_power_w");
        app.ingest(&r).await;
    }
}

#[tokio::test]
async fn max_nodes_on_a_linear_apc_is_the_floor_of_the_budget_over_the_slope() {
    let app = TestApp::new().await;
    with_linear_power(&app).await;
    for (limit, expected) in [(1000.0, 4), (1100.0, 5), (3300.0, 16), (5000.0, 24)] {
        let reply = app
            .get(
                &format!("/v1/apps/lin/max-nodes?power_limit_w={limit}"),
                &app.read,
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        // floor((W − 100) / 200)
        assert_eq!(reply.body["nodes"], expected, "{limit}: {:#}", reply.body);
        let apc = reply.body["apc_w"].as_f64().unwrap();
        assert!((apc - (100.0 + 200.0 * f64::from(expected))).abs() < 1e-6);
        assert!(reply.body["next_apc_w"].as_f64().unwrap() > limit);
        assert_eq!(reply.body["models"]["apc"], "line");
    }
    // The range's top when everything fits; none when nothing does.
    let reply = app
        .get(
            "/v1/apps/lin/max-nodes?power_limit_w=1e6&max_nodes=10",
            &app.read,
        )
        .await;
    assert_eq!(reply.body["nodes"], 10);
    assert!(reply.body.get("next_apc_w").unwrap().is_null());
    let reply = app
        .get("/v1/apps/lin/max-nodes?power_limit_w=250", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body["nodes"].is_null());
    assert!(
        reply.body["reason"]
            .as_str()
            .unwrap()
            .contains("above the limit")
    );

    // The worst allocation needs a classification; a workload asked for by
    // name that nothing has samples of is named.
    app.get(
        "/v1/apps/lin/max-nodes?power_limit_w=1000&bound=worst",
        &app.read,
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "bound");
    app.get(
        "/v1/apps/lin/max-nodes?power_limit_w=1000&bound=worst&workload=stress",
        &app.read,
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "workload");
    // Nodes at 180, 200, 220 and 240 W: the runs (no node lists) are taken
    // at the mean, 30 W per node above the best; the worst is 30 W per node
    // above the mean. Worst APC = 100 + 230·n, so 1000 W allows 3 nodes.
    let mut samples = Vec::new();
    for (i, watts) in [180.0, 200.0, 220.0, 240.0].into_iter().enumerate() {
        let name = format!("n{i}");
        let reply = app
            .put(&format!("/v1/nodes/{name}"), &app.admin, &json!({}))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED);
        samples.push(
            json!({"node": name, "workload": "stress", "avg_power_w": watts,
                            "measured_at": Utc::now().to_rfc3339()}),
        );
    }
    assert_eq!(app.post_samples(samples).await["created"], 4);
    let reply = app
        .get(
            "/v1/apps/lin/max-nodes?power_limit_w=1000&bound=worst&workload=stress",
            &app.read,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["nodes"], 3);
    assert!((reply.body["apc_w"].as_f64().unwrap() - 790.0).abs() < 1e-6);

    // There are no worst 5 nodes among 4: the range stops at the nodes
    // registered in the scope, whatever limit or range was asked.
    let reply = app
        .get(
            "/v1/apps/lin/max-nodes?power_limit_w=1e6&bound=worst&workload=stress&max_nodes=100",
            &app.read,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["range"]["max_nodes"], 4, "{:#}", reply.body);
    assert_eq!(reply.body["nodes"], 4);
    let reply = app
        .get(
            "/v1/apps/lin/max-nodes?power_limit_w=1e6&bound=worst&workload=stress&min_nodes=6",
            &app.read,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert!(reply.body["nodes"].is_null());
    let reason = reply.body["reason"].as_str().unwrap();
    assert!(reason.contains("only 4 nodes registered"), "{reason}");
    // The expected APC has no such bound: the registry need not be whole.
    let reply = app
        .get(
            "/v1/apps/lin/max-nodes?power_limit_w=1e6&max_nodes=100",
            &app.read,
        )
        .await;
    assert_eq!(reply.body["nodes"], 100, "{:#}", reply.body);
    // A partition no registered node is in names nothing, with either bound.
    for bound in ["worst", "expected"] {
        app.get(
            &format!("/v1/apps/lin/max-nodes?power_limit_w=1e6&bound={bound}&partition=nosuch"),
            &app.read,
        )
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "partition");
    }
}

/// A power limit is a question of what a count draws, as admission asks it:
/// at a measured count, what its runs drew (here well above the curve that
/// the other counts draw), not the fitted curve. Every answer agrees with
/// `/predictions` at its count and at every larger count of the range.
#[tokio::test]
async fn max_nodes_reads_a_measured_count_from_its_runs() {
    let app = TestApp::new().await;
    for (n, apc, id) in [
        (1, 300.0, "a"),
        (2, 500.0, "a"),
        (4, 900.0, "a"),
        (8, 2400.0, "a"),
        (8, 2600.0, "b"),
        (16, 3300.0, "a"),
    ] {
        let mut r = run("hot8", &format!("hot8-{n}-{id}"), n);
        r["avg_power_w"] = json!(apc);
        r["energy_j"] = json!(apc * 600.0);
        app.ingest(&r).await;
    }
    let predicted = |n: u64, aggregate: &'static str| {
        let app = &app;
        async move {
            let reply = app
                .get(
                    &format!(
                        "/v1/apps/hot8/predictions?nodes={n}&metric=apc&aggregate={aggregate}"
                    ),
                    &app.read,
                )
                .await;
            let p = &reply.body["predictions"][0];
            (p["value"].as_f64().unwrap(), p["flags"].clone())
        }
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    for (limit, aggregate) in [
        (1900.0, "mean"),
        (2450.0, "mean"),
        (2550.0, "mean"),
        (2550.0, "max"),
        (2700.0, "mean"),
    ] {
        let reply = app
            .get(
                &format!(
                    "/v1/apps/hot8/max-nodes?power_limit_w={limit}&max_nodes=12&aggregate={aggregate}"
                ),
                &app.read,
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["aggregate"], aggregate);
        let n = reply.body["nodes"].as_u64().unwrap();
        let (apc, flags) = predicted(n, aggregate).await;
        assert!(
            close(reply.body["apc_w"].as_f64().unwrap(), apc),
            "{limit} {aggregate}: {:#} against {apc}",
            reply.body
        );
        assert!(apc <= limit);
        assert_eq!(reply.body["flags"], flags, "{limit}: {:#}", reply.body);
        for m in n + 1..=12 {
            let (above, _) = predicted(m, aggregate).await;
            assert!(
                above > limit,
                "{limit} {aggregate}: {m} draws {above}, n = {n}"
            );
            if m == n + 1 {
                assert!(close(reply.body["next_apc_w"].as_f64().unwrap(), above));
            }
        }
    }
    // Between the runs' mean at 8 nodes (2500 W) and their most (2600 W),
    // the aggregate decides whether 8 nodes fit.
    for (aggregate, fits) in [("mean", true), ("max", false)] {
        let reply = app
            .get(
                &format!(
                    "/v1/apps/hot8/max-nodes?power_limit_w=2550&max_nodes=8&aggregate={aggregate}"
                ),
                &app.read,
            )
            .await;
        let n = reply.body["nodes"].as_u64().unwrap();
        assert_eq!(n == 8, fits, "{aggregate}: {:#}", reply.body);
    }
    // The runs at 8 nodes drew more than the limit of 2450 W: 8 nodes do
    // not fit, whatever the curve through all counts says there.
    let reply = app
        .get(
            "/v1/apps/hot8/max-nodes?power_limit_w=2450&max_nodes=8",
            &app.read,
        )
        .await;
    assert!(
        reply.body["nodes"].as_u64().unwrap() < 8,
        "{:#}",
        reply.body
    );
    // Beyond the measured range the answer says it extrapolates.
    let reply = app
        .get(
            "/v1/apps/hot8/max-nodes?power_limit_w=1e6&max_nodes=20",
            &app.read,
        )
        .await;
    assert_eq!(reply.body["nodes"], 20);
    assert!(
        reply.body["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("extrapolation")),
        "{:#}",
        reply.body
    );
}

#[tokio::test]
async fn optimal_node_counts_respect_deadlines_and_budgets() {
    let app = TestApp::new().await;
    with_time_energy_tradeoff(&app).await;
    // The fitted curves at n, as the capacity answers read them (the curve
    // endpoint gives the model's values, also at measured counts).
    let predicted = |n: u64| {
        let app = &app;
        async move {
            let value =
                |reply: crate::support::Reply| reply.body["curve"][0]["value"].as_f64().unwrap();
            let curve = |metric: &str| {
                format!(
                    "/v1/apps/amd/curve?metric={metric}&from={n}&to={}&points=2",
                    n + 1
                )
            };
            (
                value(app.get(&curve("ets"), &app.read).await),
                value(app.get(&curve("tts"), &app.read).await),
            )
        }
    };

    // Energy grows with n, so without a deadline one node is best.
    let reply = app
        .get("/v1/apps/amd/optimal-nodes?objective=energy", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["choice"]["nodes"], 1);
    assert_eq!(
        reply.body["fastest"]["nodes"],
        reply.body["range"]["max_nodes"]
    );
    // Each count says what its predictions say: the fastest, at twice the
    // largest measured count, is an extrapolation; one node is measured.
    assert_eq!(reply.body["choice"]["flags"], json!([]), "{:#}", reply.body);
    assert_eq!(
        reply.body["fastest"]["flags"],
        json!(["extrapolation"]),
        "{:#}",
        reply.body
    );

    // Within a deadline of 1000 s: the fewest nodes that make it.
    let reply = app
        .get(
            "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s=1000",
            &app.read,
        )
        .await;
    let choice = &reply.body["choice"];
    let n = choice["nodes"].as_u64().unwrap();
    assert!(choice["tts_s"].as_f64().unwrap() <= 1000.0);
    assert!(predicted(n - 1).await.1 > 1000.0, "{n}");
    assert_eq!(predicted(n).await.0, choice["ets_j"].as_f64().unwrap());

    // The fastest within 1.5 MJ: the most nodes the budget allows.
    let reply = app
        .get(
            "/v1/apps/amd/optimal-nodes?objective=time&energy_budget_j=1.5e6",
            &app.read,
        )
        .await;
    let n = reply.body["choice"]["nodes"].as_u64().unwrap();
    assert!(reply.body["choice"]["ets_j"].as_f64().unwrap() <= 1.5e6);
    assert!(predicted(n + 1).await.0 > 1.5e6, "{n}");

    // Nothing makes a 1 s deadline: a clear answer, not an error.
    let reply = app
        .get(
            "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s=1",
            &app.read,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.body["choice"].is_null());
    assert!(
        reply.body["reason"].as_str().unwrap().contains("deadline"),
        "{:#}",
        reply.body
    );
    // Missed by less than a second: the two times read apart.
    let fastest = reply.body["fastest"]["tts_s"].as_f64().unwrap();
    let reply = app
        .get(
            &format!(
                "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s={}",
                fastest - 0.3
            ),
            &app.read,
        )
        .await;
    assert!(reply.body["choice"].is_null(), "{:#}", reply.body);
    let reason = reply.body["reason"].as_str().unwrap();
    let numbers: Vec<&str> = reason
        .split(' ')
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(numbers.len(), 2, "{reason}");
    assert_ne!(numbers[0], numbers[1], "{reason}");

    app.get("/v1/apps/amd/optimal-nodes", &app.read)
        .await
        .assert_field_error(StatusCode::BAD_REQUEST, "objective");
    app.get(
        "/v1/apps/amd/optimal-nodes?objective=energy&deadline_s=-5",
        &app.read,
    )
    .await
    .assert_field_error(StatusCode::BAD_REQUEST, "deadline_s");
}

#[tokio::test]
async fn the_pareto_front_trades_time_for_energy() {
    let app = TestApp::new().await;
    with_time_energy_tradeoff(&app).await;
    let reply = app
        .get("/v1/apps/amd/pareto?min_nodes=1&max_nodes=16", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let front: &Vec<Value> = reply.body["front"].as_array().unwrap();
    // Time falls and energy rises all the way: every count is on the front,
    // each faster and hungrier than the one before.
    assert_eq!(front.len(), 16);
    for pair in front.windows(2) {
        assert!(pair[0]["nodes"].as_u64() < pair[1]["nodes"].as_u64());
        assert!(pair[0]["tts_s"].as_f64() > pair[1]["tts_s"].as_f64());
        assert!(pair[0]["ets_j"].as_f64() < pair[1]["ets_j"].as_f64());
    }
    // Beyond the measured 16 nodes, each point is flagged an extrapolation.
    let reply = app
        .get("/v1/apps/amd/pareto?min_nodes=12&max_nodes=20", &app.read)
        .await;
    for point in reply.body["front"].as_array().unwrap() {
        let beyond = point["nodes"].as_u64().unwrap() > 16;
        let flagged = point["flags"]
            .as_array()
            .unwrap()
            .contains(&json!("extrapolation"));
        assert_eq!(beyond, flagged, "{point}");
    }
}

/// One measured node count says nothing of the others: the model predicts
/// the same energy everywhere, and the answer says its history is thin
/// rather than presenting one node as a finding.
#[tokio::test]
async fn capacity_answers_from_one_measured_count_say_so() {
    let app = TestApp::new().await;
    for i in 0..3 {
        app.ingest(&run("one", &format!("one-{i}"), 16)).await;
    }
    let reply = app
        .get("/v1/apps/one/optimal-nodes?objective=energy", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let flags = reply.body["choice"]["flags"].as_array().unwrap();
    assert!(flags.contains(&json!("thin_history")), "{:#}", reply.body);
    assert!(flags.contains(&json!("extrapolation")), "{:#}", reply.body);
    let reply = app
        .get("/v1/apps/one/max-nodes?power_limit_w=1e9", &app.read)
        .await;
    let flags = reply.body["flags"].as_array().unwrap();
    assert!(flags.contains(&json!("thin_history")), "{:#}", reply.body);
}

#[tokio::test]
async fn capacity_questions_check_their_parameters() {
    let app = TestApp::new().await;
    with_linear_power(&app).await;
    for (path, status, field) in [
        (
            "/v1/apps/lin/max-nodes?power_limit_w=0",
            StatusCode::BAD_REQUEST,
            "power_limit_w",
        ),
        (
            "/v1/apps/lin/max-nodes",
            StatusCode::BAD_REQUEST,
            "power_limit_w",
        ),
        (
            "/v1/apps/lin/max-nodes?power_limit_w=10&min_nodes=8&max_nodes=4",
            StatusCode::BAD_REQUEST,
            "min_nodes",
        ),
        (
            "/v1/apps/lin/pareto?max_nodes=1000000",
            StatusCode::BAD_REQUEST,
            "max_nodes",
        ),
        (
            "/v1/apps/lin/pareto?min_nodes=0",
            StatusCode::BAD_REQUEST,
            "min_nodes",
        ),
        (
            "/v1/apps/lin/max-nodes?power_limit_w=10&bound=best",
            StatusCode::BAD_REQUEST,
            "bound",
        ),
    ] {
        app.get(path, &app.read)
            .await
            .assert_field_error(status, field);
    }
    app.get("/v1/apps/nope/pareto", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    app.get("/v1/apps/lin/pareto", "not-a-token")
        .await
        .assert_problem(StatusCode::UNAUTHORIZED);
}

/// An application measured on tens of thousands of nodes: the default range
/// (twice the largest count) would span more than the 100,000 counts a
/// question may search; the default is kept within it rather than refused,
/// and within the largest node count there is.
#[tokio::test]
async fn the_default_range_of_a_very_large_application_is_searchable() {
    let app = TestApp::new().await;
    for n in [1000, 5000, 20000, 60000, 600_000] {
        let app_name = if n == 600_000 { "huge" } else { "big" };
        app.ingest(&run(app_name, &format!("{app_name}-{n}"), n))
            .await;
    }
    for path in [
        "/v1/apps/big/optimal-nodes?objective=energy",
        "/v1/apps/big/max-nodes?power_limit_w=1e7",
        "/v1/apps/big/pareto",
        "/v1/apps/big/pareto?min_nodes=50000",
        "/v1/apps/huge/optimal-nodes?objective=time",
    ] {
        let reply = app.get(path, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {:#}", reply.body);
        let range = &reply.body["range"];
        let (lo, hi) = (
            range["min_nodes"].as_u64().unwrap(),
            range["max_nodes"].as_u64().unwrap(),
        );
        assert!(hi - lo < 100_000 && hi <= 1_000_000, "{path}: {range}");
        assert_eq!(
            hi,
            (lo + 99_999).min(120_000).min(1_000_000),
            "{path}: {range}"
        );
    }
    // The curve's default end is twice the largest count, within the limit.
    let curve = app.get("/v1/apps/huge/curve?points=3", &app.read).await;
    assert_eq!(curve.status, StatusCode::OK, "{:#}", curve.body);
    let last = curve.body["curve"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["nodes"], 1_000_000, "{:#}", curve.body);
    // The dashboard's page of the application reads the same default range.
    let page = app.get("/ui/apps/big", &app.read).await;
    assert_eq!(page.status, StatusCode::OK);
}

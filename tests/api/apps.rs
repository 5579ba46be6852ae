//! `/v1/apps`: metadata, listing with pagination, runs with filters.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{TestApp, run};

#[tokio::test]
async fn put_creates_then_replaces_metadata() {
    let app = TestApp::new().await;
    let body = json!({"scaling_mode": "strong", "description": "LJ melt, 32k atoms",
                      "allowed_rmse_pct": 3.5});
    let reply = app.put("/v1/apps/lammps-lj", &app.admin, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["scaling_mode"], "strong");
    assert_eq!(reply.body["allowed_rmse_pct"], 3.5);
    assert_eq!(reply.body["run_count"], 0);

    // PUT replaces everything: omitted fields take their defaults.
    let reply = app
        .put(
            "/v1/apps/lammps-lj",
            &app.admin,
            &json!({"scaling_mode": "weak"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["scaling_mode"], "weak");
    assert_eq!(reply.body["description"], "");
    assert_eq!(reply.body["allowed_rmse_pct"], Value::Null);

    let fetched = app.get("/v1/apps/lammps-lj", &app.read).await;
    assert_eq!(fetched.body, reply.body);
}

/// The scaling mode is a PostgreSQL enumerated type: what the API writes
/// is stored under its name, and the database itself refuses any other.
#[tokio::test]
async fn the_scaling_mode_is_an_enumerated_type_in_the_database() {
    let app = TestApp::new().await;
    let reply = app
        .put("/v1/apps/cfd", &app.admin, &json!({"scaling_mode": "weak"}))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let (stored, kind): (String, String) = sqlx::query_as(
        "SELECT scaling_mode::text, pg_typeof(scaling_mode)::text FROM applications
         WHERE tag = 'cfd'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((stored.as_str(), kind.as_str()), ("weak", "scaling_mode"));
    let refused =
        sqlx::query("UPDATE applications SET scaling_mode = 'sideways' WHERE tag = 'cfd'")
            .execute(&app.pool)
            .await
            .unwrap_err();
    assert!(
        refused.to_string().contains("invalid input value for enum"),
        "{refused}"
    );
    // An application created by its first run gets the default.
    app.ingest(&run("lammps", "1", 4)).await;
    let fetched = app.get("/v1/apps/lammps", &app.read).await;
    assert_eq!(
        fetched.body["scaling_mode"], "unknown",
        "{:#}",
        fetched.body
    );
}

#[tokio::test]
async fn metadata_of_an_application_with_runs_keeps_its_history() {
    let app = TestApp::new().await;
    app.ingest(&run("lammps", "1", 4)).await;
    let reply = app
        .put(
            "/v1/apps/lammps",
            &app.admin,
            &json!({"scaling_mode": "strong"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["run_count"], 1);
    assert_eq!(reply.body["nodes_max"], 4);
}

#[tokio::test]
async fn invalid_metadata_is_refused_naming_the_field() {
    let app = TestApp::new().await;
    let cases = [
        (json!({"scaling_mode": "sideways"}), "scaling_mode"),
        // Well-formed JSON of the wrong type where a name belongs (serde_json
        // calls it a syntax error) is named too.
        (json!({"scaling_mode": null}), "scaling_mode"),
        (json!({"scaling_mode": 5}), "scaling_mode"),
        (json!({"allowed_rmse_pct": 0}), "allowed_rmse_pct"),
        (json!({"allowed_rmse_pct": 150}), "allowed_rmse_pct"),
        (json!({"description": "x".repeat(5000)}), "description"),
        (json!({"description": "nul\u{0}inside"}), "description"),
        (json!({"colour": 1}), "colour"),
    ];
    for (body, field) in cases {
        let reply = app.put("/v1/apps/lammps", &app.admin, &body).await;
        reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    let reply = app.put("/v1/apps/bad%20tag", &app.admin, &json!({})).await;
    reply.assert_field_error(StatusCode::BAD_REQUEST, "app");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM applications")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn get_app_summarises_its_runs() {
    let app = TestApp::new().await;
    let mut early = run("lammps", "1", 2);
    early["ended_at"] = json!("2026-01-01T00:00:00Z");
    let mut late = run("lammps", "2", 32);
    late["ended_at"] = json!("2026-02-01T00:00:00Z");
    app.ingest(&late).await;
    app.ingest(&early).await;
    app.ingest(&run("other", "3", 64)).await;
    let reply = app.get("/v1/apps/lammps", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["run_count"], 2);
    assert_eq!(reply.body["nodes_min"], 2);
    assert_eq!(reply.body["nodes_max"], 32);
    assert_eq!(reply.body["last_run_at"], "2026-02-01T00:00:00Z");
    assert_eq!(reply.body["history_version"], 2);

    app.get("/v1/apps/missing", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_app_listing_pages_through_every_app_once_in_order() {
    let app = TestApp::new().await;
    let tags = ["e", "a", "d", "c", "b"];
    for (i, tag) in tags.iter().enumerate() {
        app.ingest(&run(tag, &i.to_string(), 1)).await;
    }
    let mut seen = Vec::new();
    let mut path = "/v1/apps?limit=2".to_owned();
    loop {
        let reply = app.get(&path, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        let items = reply.body["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        seen.extend(items.iter().map(|a| a["tag"].as_str().unwrap().to_owned()));
        match reply.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/apps?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);

    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "cursor=zzz",
        "cursor=YXBwczoA",
        "page=2",
    ] {
        let reply = app.get(&format!("/v1/apps?{bad}"), &app.read).await;
        let field = bad.split('=').next().unwrap();
        reply.assert_field_error(StatusCode::BAD_REQUEST, field);
    }
}

#[tokio::test]
async fn runs_are_listed_with_filters_and_cursor_pagination() {
    let app = TestApp::new().await;
    let mut ids = Vec::new();
    for (i, nodes) in [1, 2, 4, 8, 16, 4, 4].into_iter().enumerate() {
        let mut body = run("lammps", &i.to_string(), nodes);
        body["ended_at"] = json!(format!("2026-01-0{}T00:00:00Z", i + 1));
        ids.push(app.ingest(&body).await);
    }
    app.ingest(&run("other", "x", 4)).await;

    let list = |query: String| {
        let app = app.clone();
        async move {
            let reply = app
                .get(&format!("/v1/apps/lammps/runs?{query}"), &app.read)
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{query}: {:#}", reply.body);
            let ids: Vec<i64> = reply.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap())
                .collect();
            (ids, reply.body["next_cursor"].as_str().map(str::to_owned))
        }
    };

    assert_eq!(list(String::new()).await.0, ids);
    assert_eq!(list("nodes=4".into()).await.0, [ids[2], ids[5], ids[6]]);
    assert_eq!(
        list("min_nodes=4&max_nodes=8".into()).await.0,
        [ids[2], ids[3], ids[5], ids[6]]
    );
    assert_eq!(
        list("from=2026-01-02T00:00:00Z&to=2026-01-04T00:00:00Z".into())
            .await
            .0,
        [ids[1], ids[2]]
    );

    // Pages of 3 cover all seven runs exactly once.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=3&cursor={c}"),
            None => "limit=3".to_owned(),
        };
        let (page, next) = list(query).await;
        paged.extend(page);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, ids);

    for (query, field) in [
        ("nodes=0", "nodes"),
        ("nodes=1000001", "nodes"),
        ("max_nodes=1000001", "max_nodes"),
        ("min_nodes=9&max_nodes=3", "min_nodes"),
        ("from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z", "from"),
        ("from=yesterday", "from"),
        ("from=-5000-01-01T00:00:00Z", "from"),
        ("to=%2B20000-01-01T00:00:00Z", "to"),
        ("limit=5000", "limit"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor"),
    ] {
        let reply = app
            .get(&format!("/v1/apps/lammps/runs?{query}"), &app.read)
            .await;
        reply.assert_field_error(StatusCode::BAD_REQUEST, field);
    }
    app.get("/v1/apps/missing/runs", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_page_of_runs_holds_at_most_two_hundred_thousand_node_names() {
    let app = TestApp::new().await;
    // Node names listed by each run, in the order they are stored.
    let lists = [90_000, 90_000, 20_000, 100_000, 0];
    let mut ids = Vec::new();
    for (i, names) in lists.into_iter().enumerate() {
        let nodes = if names == 0 { 4 } else { names };
        let mut body = run("wide", &i.to_string(), nodes);
        if names > 0 {
            body["node_list"] = json!(format!("w{i}n[1-{names}]"));
        }
        ids.push(app.ingest(&body).await);
    }
    let page = |cursor: Option<String>| {
        let app = app.clone();
        async move {
            let path = match cursor {
                Some(c) => format!("/v1/apps/wide/runs?limit=10&cursor={c}"),
                None => "/v1/apps/wide/runs?limit=10".to_owned(),
            };
            let reply = app.get(&path, &app.read).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}");
            let runs = reply.body["items"].as_array().unwrap();
            let names: usize = runs
                .iter()
                .map(|r| r["node_list"].as_array().map_or(0, Vec::len))
                .sum();
            let ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
            (
                ids,
                names,
                reply.body["next_cursor"].as_str().map(str::to_owned),
            )
        }
    };
    // 90,000 + 90,000 + 20,000 fill a page exactly; the fourth run would
    // take it to 300,000.
    let (first, names, cursor) = page(None).await;
    assert_eq!(first, ids[..3]);
    assert_eq!(names, 200_000);
    let (second, names, cursor) = page(Some(cursor.expect("a cursor after a full page"))).await;
    assert_eq!(second, ids[3..]);
    assert_eq!(names, 100_000);
    assert_eq!(cursor, None);

    // A run stored before lists were held to 100,000 names makes a page of
    // its own, and the listing goes on after it.
    sqlx::query(
        "UPDATE runs SET nodes = 250000,
                         node_list = ARRAY(SELECT 'x' || g FROM generate_series(1, 250000) g)
         WHERE id = $1",
    )
    .bind(ids[0])
    .execute(&app.pool)
    .await
    .unwrap();
    let mut pages = Vec::new();
    let mut cursor = None;
    loop {
        let (ids, _, next) = page(cursor).await;
        pages.push(ids);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(
        pages,
        [vec![ids[0]], vec![ids[1], ids[2]], vec![ids[3], ids[4]]]
    );
}

/// Every `/v1/apps/{app}/…` route checks the tag where it enters (the
/// `AppPath` extractor): a bad one is a 400 naming `app` and nothing else,
/// before the query or the body is looked at, so a bad tag wins over a bad
/// parameter too.
#[tokio::test]
async fn every_application_route_refuses_a_bad_tag_naming_app() {
    let app = TestApp::new().await;
    let only_app = |reply: &crate::support::Reply, what: &str| {
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{what}: {:#}",
            reply.body
        );
        assert_eq!(reply.error_fields(), ["app"], "{what}: {:#}", reply.body);
    };
    for path in [
        "/v1/apps/-lead",
        "/v1/apps/-lead/runs",
        "/v1/apps/-lead/predictions?nodes=4",
        "/v1/apps/-lead/curve",
        "/v1/apps/-lead/model",
        "/v1/apps/-lead/scaling-model",
        "/v1/apps/-lead/max-nodes?power_limit_w=1000",
        "/v1/apps/-lead/optimal-nodes?objective=energy",
        "/v1/apps/-lead/pareto",
        "/v1/apps/-lead/efficiency",
        "/v1/apps/-lead/scalability",
        // A bad parameter as well: the tag is named, not the parameter.
        "/v1/apps/-lead/predictions?nodes=0",
        "/v1/apps/-lead/max-nodes",
    ] {
        only_app(&app.get(path, &app.read).await, path);
    }
    let put = app.put("/v1/apps/-lead", &app.admin, &json!({})).await;
    only_app(&put, "PUT /v1/apps/-lead");
    let measurement = json!({"measurements": [{"processes": 4, "load_balance": 0.9,
                                               "serialization": 0.9, "transfer": 0.9}]});
    let post = app
        .post("/v1/apps/-lead/efficiency", &app.ingest, &measurement)
        .await;
    only_app(&post, "POST /v1/apps/-lead/efficiency");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM applications")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing was created for a bad tag");
}

/// A tag read and found to name no application is answered from memory
/// for a moment: a batch naming a thousand unknown applications read each
/// from the database, every time (a probe). Shown with the database gone;
/// an application created meanwhile is found at once.
#[tokio::test]
async fn an_unknown_application_is_remembered_briefly() {
    let app = TestApp::new().await;
    let ask = |tag: &str| format!("/v1/apps/{tag}/predictions?nodes=4");
    app.get(&ask("nowhere"), &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    // Created since it was read as absent: found at once.
    app.get(&ask("lammps"), &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    app.ingest(&run("lammps", "j1", 4)).await;
    let found = app.get(&ask("lammps"), &app.read).await;
    assert_eq!(found.status, StatusCode::OK, "{:#}", found.body);

    app.pool.close().await;
    app.get(&ask("nowhere"), &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    app.get(&ask("elsewhere"), &app.read)
        .await
        .assert_problem(StatusCode::SERVICE_UNAVAILABLE);
    // Not for long: after a second the tag is read again.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    app.get(&ask("nowhere"), &app.read)
        .await
        .assert_problem(StatusCode::SERVICE_UNAVAILABLE);
}

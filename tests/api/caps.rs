//! Power caps over HTTP: time windows, partitions, the cap in force.

use axum::http::{Method, StatusCode};
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::support::TestApp;

async fn put(app: &TestApp, name: &str, body: Value) -> crate::support::Reply {
    app.put(&format!("/v1/power-caps/{name}"), &app.admin, &body)
        .await
}

#[tokio::test]
async fn the_cap_in_force_is_the_tightest_active_one_of_its_scope() {
    let app = TestApp::new().await;
    // A limit is kept to the last bit as sent (a limit set to what
    // max-nodes answered, one ulp lower, refused that count's job).
    let exact = 12816.392333452557;
    let reply = put(&app, "exact", json!({"limit_w": exact})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(
        reply.body["limit_w"].as_f64(),
        Some(exact),
        "{:#}",
        reply.body
    );
    let reply = app.get("/v1/power-caps/exact", &app.read).await;
    assert_eq!(
        reply.body["limit_w"].as_f64(),
        Some(exact),
        "{:#}",
        reply.body
    );
    let reply = app
        .call(
            Method::DELETE,
            "/v1/power-caps/exact",
            Some(&app.admin),
            None,
        )
        .await;
    assert!(reply.status.is_success(), "{:#}", reply.body);
    let now = Utc::now();
    let hours = |h: i64| (now + Duration::hours(h)).to_rfc3339();
    let reply = put(&app, "site", json!({"limit_w": 2.0e6})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["active"], true);
    // Cooling maintenance tomorrow: 1.2 MW for four hours.
    let reply = put(
        &app,
        "cooling",
        json!({"limit_w": 1.2e6, "starts_at": hours(24), "ends_at": hours(28),
               "description": "chiller 2 maintenance"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["active"], false);
    // A partition's own cap does not limit the whole system.
    put(&app, "gpu", json!({"limit_w": 5.0e5, "partition": "gpu"})).await;

    let in_force = |query: String| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/v1/power-caps?{query}"), &app.read).await;
            assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
            reply.body
        }
    };
    let body = in_force(String::new()).await;
    assert_eq!(body["items"].as_array().unwrap().len(), 3);
    assert_eq!(body["in_force"]["name"], "site");
    let at = |h: i64| format!("at={}", hours(h).replace('+', "%2B"));
    assert_eq!(in_force(at(25)).await["in_force"]["name"], "cooling");
    assert_eq!(
        in_force(at(28)).await["in_force"]["name"],
        "site",
        "ends_at is exclusive"
    );
    let body = in_force("partition=gpu".into()).await;
    assert_eq!(body["in_force"]["name"], "gpu");
    assert_eq!(body["items"].as_array().unwrap().len(), 1);
    assert!(in_force("partition=cpu".into()).await["in_force"].is_null());

    // Replaced by PUT (200), read, removed.
    let reply = put(&app, "site", json!({"limit_w": 1.0e6})).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        in_force(at(25)).await["in_force"]["name"],
        "site",
        "now the tightest"
    );
    let reply = app.get("/v1/power-caps/site", &app.read).await;
    assert_eq!(reply.body["limit_w"], 1.0e6);
    app.assert_only_admin_removes("/v1/power-caps/site").await;
    app.get("/v1/power-caps/site", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    assert!(in_force(String::new()).await["in_force"].is_null());
}

#[tokio::test]
async fn bad_caps_are_refused_naming_the_field() {
    let app = TestApp::new().await;
    let now = Utc::now();
    put(&app, "x", json!({"limit_w": 0}))
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "limit_w");
    put(
        &app,
        "x",
        json!({"limit_w": 1000, "starts_at": now.to_rfc3339(), "ends_at": now.to_rfc3339()}),
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "ends_at");
    put(&app, "x", json!({"limit_w": 1000, "partition": "a b"}))
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "partition");
    put(&app, "-x", json!({"limit_w": 1000}))
        .await
        .assert_field_error(StatusCode::BAD_REQUEST, "name");
    app.put("/v1/power-caps/x", &app.schedule, &json!({"limit_w": 1000}))
        .await
        .assert_problem(StatusCode::FORBIDDEN);
    app.delete("/v1/power-caps/none", &app.admin)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM power_caps")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing refused was stored");
}

//! Times as PostgreSQL keeps them: to the microsecond, with a leap second
//! read as the next second. An end and its start, or a window's ends, that
//! differ by less than a microsecond are refused naming the field, never
//! stored as a 500 from the database's rule.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use chrono::{Duration, Utc};
use serde_json::json;

use crate::support::{TestApp, run};

const START: &str = "2026-01-01T00:00:00Z";

/// A power cap and a custom budget from `starts_at` to `ends_at` are both
/// refused, naming `ends_at`.
async fn windows_are_refused(app: &TestApp, starts_at: &str, ends_at: &str) {
    let window = json!({"starts_at": starts_at, "ends_at": ends_at});
    let mut cap = window.clone();
    cap["limit_w"] = json!(1e6);
    app.put("/v1/power-caps/c", &app.admin, &cap)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "ends_at");
    let mut budget = window;
    budget["limit_j"] = json!(1e6);
    budget["period"] = json!("custom");
    app.put("/v1/budgets/acct", &app.admin, &budget)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "ends_at");
}

#[tokio::test]
async fn an_end_within_the_microsecond_of_its_start_is_refused_naming_the_field() {
    let app = TestApp::new().await;
    // started_at plus a duration under half a microsecond ends where it began.
    for duration in [1e-100, 4e-7] {
        let mut tiny = run("t", "tiny", 1);
        tiny["energy_j"] = json!(1e-6);
        tiny["avg_power_w"] = json!(1.0);
        tiny["duration_s"] = json!(duration);
        tiny["started_at"] = json!(START);
        app.post("/v1/runs", &app.ingest, &tiny)
            .await
            .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "duration_s");
    }
    // In a batch it fails that item alone; the good one is stored.
    let mut bad = run("t", "bad", 1);
    bad["duration_s"] = json!(1e-9);
    bad["energy_j"] = json!(1e-9);
    bad["avg_power_w"] = json!(1.0);
    bad["started_at"] = json!(START);
    let batch = json!({"runs": [run("t", "good", 2), bad]});
    let reply = app.post("/v1/runs/batch", &app.ingest, &batch).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(
        reply.body["items"][0]["status"], "created",
        "{:#}",
        reply.body
    );
    assert_eq!(
        reply.body["items"][1]["status"], "rejected",
        "{:#}",
        reply.body
    );
    assert_eq!(reply.body["items"][1]["rejection"], "invalid");
    assert_eq!(app.run_count().await, 1);

    // Windows of caps and budgets shorter than a microsecond, also past
    // 2262 and before 1677, where time in nanoseconds no longer fits 64 bits
    // (such a window there passed the check and the database refused it).
    for (starts_at, ends_at) in [
        (
            "2026-01-01T00:00:00.0000001Z",
            "2026-01-01T00:00:00.0000004Z",
        ),
        (
            "3000-01-01T00:00:00.0000001Z",
            "3000-01-01T00:00:00.0000004Z",
        ),
        (
            "1600-01-01T00:00:00.0000001Z",
            "1600-01-01T00:00:00.0000004Z",
        ),
    ] {
        windows_are_refused(&app, starts_at, ends_at).await;
    }

    // A job's end dated by its start and a duration under a microsecond:
    // `duration_s` is named, not an `ended_at` that was not sent.
    let started = (Utc::now() - Duration::minutes(5)).to_rfc3339();
    let start = json!({"source": "s", "job_id": "9", "app": "t", "nodes": 1,
                       "started_at": started});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    app.post(
        "/v1/jobs/s/9/finish",
        &app.schedule,
        &json!({"avg_power_w": 1.0, "duration_s": 1e-7}),
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "duration_s");
}

#[tokio::test]
async fn a_leap_second_is_the_start_of_the_next_second() {
    let app = TestApp::new().await;
    let mut leap = run("l", "leap", 1);
    leap["duration_s"] = json!(600.0);
    leap["started_at"] = json!("2016-12-31T23:59:60Z");
    let reply = app.post("/v1/runs", &app.ingest, &leap).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let started: chrono::DateTime<Utc> =
        serde_json::from_value(reply.body["run"]["started_at"].clone()).unwrap();
    assert_eq!(started.to_rfc3339(), "2017-01-01T00:00:00+00:00");
    // Sent again: the same run.
    let again = app.post("/v1/runs", &app.ingest, &leap).await;
    assert_eq!(again.status, StatusCode::OK, "{:#}", again.body);

    // A window from a leap second to the next second's start is empty.
    windows_are_refused(&app, "2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z").await;

    // An accounting line that starts on a leap second is imported.
    let text = "JobID|JobName|NNodes|State|Start|End|ElapsedRaw|ConsumedEnergyRaw\n\
                1|sacct-leap|1|COMPLETED|2026-01-01T00:00:00|2026-01-01T00:00:10|10|100\n\
                2|sacct-leap|1|COMPLETED|2016-12-31T23:59:60|2017-01-01T00:00:01|1|100\n";
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/import/sacct?source=leap")
        .header(header::AUTHORIZATION, format!("Bearer {}", app.ingest))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(text))
        .unwrap();
    let reply = app.send(request).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["created"], 2, "{:#}", reply.body);
}

#[tokio::test]
async fn an_unreserved_job_cannot_have_started_in_the_future() {
    let app = TestApp::new().await;
    let body = json!({"source": "s", "jobs": [{"job_id": "1",
                                               "started_at": "9999-01-01T00:00:00Z"}]});
    app.post("/v1/jobs/unreserved", &app.schedule, &body)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "jobs[0].started_at");
}

/// The last line of defence: a value that breaks one of the database's
/// rules is the request's fault (400, counted), not the service's (500).
#[tokio::test]
async fn a_check_the_database_makes_is_answered_as_bad_input() {
    let _turn = crate::support::REFUSED_VALUES.lock().await;
    let app = TestApp::new().await;
    let error = sqlx::query("INSERT INTO power_caps (name, limit_w, starts_at, ends_at) VALUES ('x', 1, now(), now() - interval '1 s')")
        .execute(&app.pool)
        .await
        .unwrap_err();
    match joulecast::service::Error::from(error) {
        joulecast::service::Error::BadRequest(errors) => {
            assert_eq!(errors[0].field, "body");
            assert!(errors[0].reason.contains("power_caps_window"), "{errors:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// Leap seconds elsewhere: a token expiring at 9999-12-31T23:59:60 would
/// expire in year 10000 (it was stored and shown as `+10000-01-01`, which is
/// no RFC 3339 time); a time asked about is answered as the next second.
#[tokio::test]
async fn leap_seconds_in_other_times_are_read_as_the_next_second() {
    let app = TestApp::new().await;
    let token = json!({"name": "t", "scopes": ["read"], "expires_at": "9999-12-31T23:59:60Z"});
    app.post("/v1/tokens", &app.admin, &token)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "expires_at");
    let reply = app
        .get("/v1/power/headroom?at=2026-11-27T12:00:60Z", &app.read)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["at"], "2026-11-27T12:01:00Z");
    let reply = app
        .get("/v1/power-caps?at=2026-11-27T12:00:60Z", &app.read)
        .await;
    assert_eq!(reply.body["at"], "2026-11-27T12:01:00Z", "{:#}", reply.body);
}

//! Energy budgets over HTTP: periods, consumption, commitments, burn rate.

use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use crate::support::{TestApp, run};

/// A run of `proj` (application `work`) on 2 nodes with `energy_j`, ending
/// `days_ago`.
async fn spent(app: &TestApp, job: &str, energy_j: f64, days_ago: i64) {
    let end = Utc::now() - Duration::days(days_ago);
    let mut r = run("work", job, 2);
    r["account"] = json!("proj");
    r["energy_j"] = json!(energy_j);
    r.as_object_mut().unwrap().remove("avg_power_w");
    r["duration_s"] = json!(600.0);
    r["started_at"] = json!((end - Duration::seconds(600)).to_rfc3339());
    r["ended_at"] = json!(end.to_rfc3339());
    app.ingest(&r).await;
}

/// A new budget of `limit_j` per `period` for `proj`.
async fn new_budget(app: &TestApp, limit_j: f64, period: &str) {
    let body = json!({"limit_j": limit_j, "period": period});
    let reply = app.put("/v1/budgets/proj", &app.admin, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
}

/// A running job counts with all of its predicted energy, used and to come,
/// until its run's measured energy replaces it. Before, it committed only the
/// share of its predicted time not yet run, so the part already used counted
/// nowhere: a review (2026-11-28) had two 1.24 MJ jobs admitted under a
/// 2 MJ budget, the second when the first was near its end, and the account
/// ended 0.48 MJ over without any forced start.
#[tokio::test]
async fn a_running_job_counts_its_whole_energy_until_it_ends() {
    let app = TestApp::new().await;
    // History for predictions: 2 nodes take 600 s and 1.2 MJ (2,000 W).
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    new_budget(&app, 2.0e6, "month").await;
    let start = |job: &str, ago_s: i64| {
        json!({"source": "s", "job_id": job, "app": "lin", "nodes": 2, "account": "proj",
               "started_at": (Utc::now() - Duration::seconds(ago_s)).to_rfc3339()})
    };
    // Near the end of its predicted 600 s, it still counts its 1.2 MJ.
    let reply = app.post("/v1/jobs", &app.schedule, &start("a", 550)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    let committed = b["committed_j"].as_f64().unwrap();
    assert!((committed - 1.2e6).abs() < 1e4, "{b:#}");
    // So a second such job does not fit in the 0.8 MJ left.
    let ask = json!({"app": "lin", "nodes": 2, "account": "proj"});
    let reply = app.post("/v1/admission", &app.schedule, &ask).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["energy"]["fits"], false, "{:#}", reply.body);
    assert_eq!(reply.body["admit"], false, "{:#}", reply.body);
    let reply = app.post("/v1/jobs", &app.schedule, &start("b", 0)).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{:#}", reply.body);

    // A job running past its predicted time counts its predicted power for
    // as long as it has run: 2,000 W × 1,200 s.
    let mut late = start("c", 1200);
    late["force"] = json!(true);
    let reply = app.post("/v1/jobs", &app.schedule, &late).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    let committed = b["committed_j"].as_f64().unwrap();
    assert!((committed - 3.6e6).abs() < 6e4, "{b:#}");

    // Ended, the first job counts its measured energy instead.
    let reply = app
        .post(
            "/v1/jobs/s/a/finish",
            &app.schedule,
            &json!({"energy_j": 1.3e6}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    assert_eq!(b["consumed_j"], 1.3e6, "{b:#}");
    let committed = b["committed_j"].as_f64().unwrap();
    assert!((committed - 2.4e6).abs() < 6e4, "{b:#}");
}

/// A run sent without an account for a job still running is charged to the
/// job's account, whose budget counted the job: before, the job's energy
/// left the account's budget when its run arrived (the review of 2026-11-28:
/// an sacct export without an `Account` column).
#[tokio::test]
async fn a_run_without_an_account_is_its_running_job_s() {
    let app = TestApp::new().await;
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    new_budget(&app, 1.0e9, "month").await;
    let start = json!({"source": "imp", "job_id": "78", "app": "lin", "nodes": 2,
                       "account": "proj"});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let mut r = run("lin", "78", 2);
    r["source"] = json!("imp");
    let reply = app.post("/v1/runs", &app.ingest, &r).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    assert_eq!(b["runs"], 1, "{b:#}");
    assert_eq!(b["consumed_j"], r["energy_j"], "{b:#}");
    assert_eq!(b["committed_j"], 0.0, "{b:#}");
    let runs = app
        .get("/v1/apps/lin/runs?nodes=2&limit=10", &app.read)
        .await
        .body;
    let stored = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["job_id"] == "78")
        .expect("the run");
    assert_eq!(stored["account"], "proj", "{runs:#}");
    // Sent again as it was: the same run. With another account: a conflict.
    let reply = app.post("/v1/runs", &app.ingest, &r).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    r["account"] = json!("other");
    app.post("/v1/runs", &app.ingest, &r)
        .await
        .assert_field_error(StatusCode::CONFLICT, "account");
    // A run with an account of its own keeps it.
    let start = json!({"source": "imp", "job_id": "79", "app": "lin", "nodes": 2,
                       "account": "proj"});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let mut r = run("lin", "79", 2);
    r["source"] = json!("imp");
    r["account"] = json!("other");
    let reply = app.post("/v1/runs", &app.ingest, &r).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    assert_eq!(b["runs"], 1, "{b:#}");
    assert_eq!(b["committed_j"], 0.0, "{b:#}");
}

#[tokio::test]
async fn a_budget_counts_the_period_s_runs_and_the_running_jobs() {
    let app = TestApp::new().await;
    // History for predictions: 2 nodes take 600 s and 1.2 MJ.
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    spent(&app, "in", 10.0e6, 5).await;
    spent(&app, "before", 99.0e6, 15).await;
    let now = Utc::now();
    let body = json!({"limit_j": 25.0e6, "period": "custom",
                      "starts_at": (now - Duration::days(10)).to_rfc3339(),
                      "ends_at": (now + Duration::days(20)).to_rfc3339()});
    let reply = app.put("/v1/budgets/proj", &app.admin, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    // Only the run inside the period counts.
    assert_eq!(reply.body["consumed_j"], 10.0e6);
    assert_eq!(reply.body["runs"], 1);

    // A job of the account starts: its predicted 1.2 MJ are committed.
    let reply = app
        .post(
            "/v1/jobs",
            &app.schedule,
            &json!({"source": "s", "job_id": "j", "app": "lin", "nodes": 2, "account": "proj"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    let committed = b["committed_j"].as_f64().unwrap();
    assert!((committed - 1.2e6).abs() < 1e4, "{b:#}");
    let remaining = b["remaining_j"].as_f64().unwrap();
    assert!((remaining - (25.0e6 - 10.0e6 - committed)).abs() < 1e-3);
    // 10 MJ in 10 days: 1 MJ a day, so about 13.8 days left, within the period.
    let runs_out: DateTime<Utc> = b["runs_out_at"].as_str().unwrap().parse().unwrap();
    let expected = Utc::now() + Duration::seconds((remaining / 1.0e6 * 86_400.0) as i64);
    assert!((runs_out - expected).num_seconds().abs() < 120, "{b:#}");
    assert_eq!(b["runs_out_within_period"], true);

    // A calendar month: the period starts on the 1st at midnight.
    let reply = app
        .put(
            "/v1/budgets/proj",
            &app.admin,
            &json!({"limit_j": 1.0e9, "period": "month"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let start: DateTime<Utc> = reply.body["period_start"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(start.format("%d %H:%M").to_string(), "01 00:00");
}

/// The period is a PostgreSQL enumerated type, and the table still refuses
/// a custom period without its window.
#[tokio::test]
async fn the_period_is_an_enumerated_type_in_the_database() {
    let app = TestApp::new().await;
    let body = json!({"limit_j": 1e9, "period": "week"});
    let reply = app.put("/v1/budgets/proj", &app.admin, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let kind: String =
        sqlx::query_scalar("SELECT pg_typeof(period)::text FROM budgets WHERE account = 'proj'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(kind, "budget_period");
    for (update, refusal) in [
        (
            "UPDATE budgets SET period = 'yearly'",
            "invalid input value for enum",
        ),
        (
            "UPDATE budgets SET period = 'custom'",
            "budgets_custom_window",
        ),
    ] {
        let error = sqlx::query(update).execute(&app.pool).await.unwrap_err();
        assert!(error.to_string().contains(refusal), "{update}: {error}");
    }
}

#[tokio::test]
async fn bad_budgets_are_refused_naming_the_field() {
    let app = TestApp::new().await;
    let now = Utc::now().to_rfc3339();
    for (body, field) in [
        (json!({"limit_j": 0, "period": "month"}), "limit_j"),
        (json!({"limit_j": 1, "period": "custom"}), "period"),
        (
            json!({"limit_j": 1, "period": "week", "starts_at": now, "ends_at": now}),
            "period",
        ),
        (
            json!({"limit_j": 1, "period": "custom", "starts_at": now, "ends_at": now}),
            "ends_at",
        ),
    ] {
        app.put("/v1/budgets/proj", &app.admin, &body)
            .await
            .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    app.put(
        "/v1/budgets/proj",
        &app.admin,
        &json!({"limit_j": 1, "period": "year"}),
    )
    .await
    .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "period");
    app.get("/v1/budgets/proj", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    app.put(
        "/v1/budgets/proj",
        &app.schedule,
        &json!({"limit_j": 1, "period": "month"}),
    )
    .await
    .assert_problem(StatusCode::FORBIDDEN);
}

/// The first small run of a large budget's period (issue 13, finding 1):
/// at that rate the budget lasts millions of years. Budget, admission and
/// job starts answer, with no run-out date rather than an overflow (500) or
/// a date past the year 9999.
#[tokio::test]
async fn a_first_small_run_of_a_large_budget_answers_without_a_run_out_date() {
    let app = TestApp::new().await;
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    new_budget(&app, 1e12, "month").await;
    spent(&app, "first", 1.0, 0).await;

    let b = app.get("/v1/budgets/proj", &app.read).await;
    assert_eq!(b.status, StatusCode::OK, "{:#}", b.body);
    assert_eq!(b.body["consumed_j"], 1.0);
    assert_eq!(
        b.body["runs_out_at"],
        serde_json::Value::Null,
        "{:#}",
        b.body
    );
    assert_eq!(b.body["runs_out_within_period"], false);

    let admission = app
        .post(
            "/v1/admission",
            &app.schedule,
            &json!({"app": "lin", "nodes": 2, "account": "proj"}),
        )
        .await;
    assert_eq!(admission.status, StatusCode::OK, "{:#}", admission.body);
    let job = app
        .post(
            "/v1/jobs",
            &app.schedule,
            &json!({"source": "s", "job_id": "j", "app": "lin", "nodes": 2, "account": "proj"}),
        )
        .await;
    assert_eq!(job.status, StatusCode::CREATED, "{:#}", job.body);
}

/// Budget reads while the power load is not cached (issue 13, finding 5):
/// each read used to hold a pooled connection while it waited for a second
/// one to read the load, so as many reads as the pool has connections
/// waited on each other until the pool's time-out. With the load read
/// first, 16 at once (twice the test pool) all answer.
#[tokio::test]
async fn concurrent_budget_reads_with_a_cold_load_do_not_exhaust_the_pool() {
    let settings = joulecast::http::Settings {
        // Nothing is cached: every read reads the load.
        cache_ttl: std::time::Duration::ZERO,
        ..Default::default()
    };
    let app = TestApp::with_settings(settings).await;
    new_budget(&app, 1e9, "month").await;
    let reads = (0..16).map(|_| app.get("/v1/budgets/proj", &app.read));
    let replies = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        futures_util::future::join_all(reads),
    )
    .await
    .expect("16 budget reads within 10 s");
    for reply in replies {
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    }
}

/// A custom budget whose period has ended, or not yet begun, does not count
/// today's running jobs and does not refuse today's jobs: the energy used now
/// cannot count against it.
#[tokio::test]
async fn a_budget_outside_its_period_neither_commits_nor_refuses() {
    let app = TestApp::new().await;
    for n in [1, 2, 4] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    let now = Utc::now();
    for (account, from, to) in [
        ("past", now - Duration::days(400), now - Duration::days(370)),
        (
            "future",
            now + Duration::days(370),
            now + Duration::days(400),
        ),
    ] {
        let body = json!({"limit_j": 1.0e6, "period": "custom",
                          "starts_at": from.to_rfc3339(), "ends_at": to.to_rfc3339()});
        let reply = app
            .put(&format!("/v1/budgets/{account}"), &app.admin, &body)
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        // The past one's run: 0.6 MJ of the 1 MJ consumed in its period.
        if account == "past" {
            let mut r = run("lin", "in-past", 1);
            r["account"] = json!(account);
            r["started_at"] = json!((from + Duration::days(1)).to_rfc3339());
            let reply = app.post("/v1/runs", &app.ingest, &r).await;
            assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        }
        // A job far beyond the 1 MJ limit runs now (forced in).
        let start = json!({"source": "s", "job_id": format!("big-{account}"), "app": "fresh",
                           "nodes": 4, "account": account, "time_limit_s": 86_400,
                           "force": true});
        let reply = app.post("/v1/jobs", &app.schedule, &start).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        let b = app
            .get(&format!("/v1/budgets/{account}"), &app.read)
            .await
            .body;
        assert_eq!(b["committed_j"], 0.0, "{b:#}");
        let consumed = if account == "past" { 6.0e5 } else { 0.0 };
        assert_eq!(b["consumed_j"], consumed, "{b:#}");
        assert_eq!(b["remaining_j"], 1.0e6 - consumed, "{b:#}");
        // Nothing burns in it any more (or yet): no date to run out.
        assert!(b["runs_out_at"].is_null(), "{b:#}");
        assert_eq!(b["runs_out_within_period"], false, "{b:#}");
        // Today's 1.2 MJ job is neither refused nor counted against it.
        let ask = json!({"app": "lin", "nodes": 2, "account": account});
        let reply = app.post("/v1/admission", &app.schedule, &ask).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["admit"], true, "{:#}", reply.body);
        let start = json!({"source": "s", "job_id": format!("ok-{account}"), "app": "lin",
                           "nodes": 2, "account": account});
        let reply = app.post("/v1/jobs", &app.schedule, &start).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }
}

/// A job dated to start later (up to a day ahead is accepted) commits at
/// most its own energy bound, reserved power × time limit: before, the time
/// until its start was counted as well (probe of 2026-11-27: 41.9 MJ
/// committed for a job bounded at 0.5 MJ, and the account refused).
#[tokio::test]
async fn a_job_starting_later_commits_no_more_than_its_time_limit() {
    let app = TestApp::new().await;
    new_budget(&app, 1e9, "month").await;
    let start = json!({"source": "s", "job_id": "later", "app": "fresh", "nodes": 1,
                       "account": "proj", "time_limit_s": 1000.0,
                       "started_at": (Utc::now() + Duration::hours(20)).to_rfc3339()});
    let job = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(job.status, StatusCode::CREATED, "{:#}", job.body);
    let bound = job.body["reserved_w"].as_f64().unwrap() * 1000.0;
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    let committed = b["committed_j"].as_f64().unwrap();
    assert!(
        (committed - bound).abs() <= 1e-9 * bound,
        "{committed} J against {bound}: {b:#}"
    );
}

/// A run given its start and duration but no end ended at start + duration:
/// it counts in that period, not in the one it was sent in.
#[tokio::test]
async fn a_run_without_its_end_counts_when_start_plus_duration_falls() {
    let app = TestApp::new().await;
    new_budget(&app, 1e9, "week").await;
    let started = Utc::now() - Duration::days(20);
    let mut r = run("work", "old", 2);
    r["account"] = json!("proj");
    r.as_object_mut().unwrap().remove("energy_j");
    r["duration_s"] = json!(100.5);
    r["started_at"] = json!(started.to_rfc3339());
    let reply = app.post("/v1/runs", &app.ingest, &r).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let stored = &reply.body["run"];
    let time = |field: &str| -> DateTime<Utc> { stored[field].as_str().unwrap().parse().unwrap() };
    assert_eq!(
        time("ended_at") - time("started_at"),
        Duration::milliseconds(100_500),
        "{stored:#}"
    );
    let b = app.get("/v1/budgets/proj", &app.read).await.body;
    assert_eq!(b["runs"], 0, "{b:#}");
    assert_eq!(b["consumed_j"], 0.0, "{b:#}");
    // Sent again as it was: the same run, not a conflict.
    let again = app.post("/v1/runs", &app.ingest, &r).await;
    assert_eq!(again.status, StatusCode::OK, "{:#}", again.body);

    // One whose start plus duration lies in the future has not ended.
    let mut r = run("work", "future", 2);
    r.as_object_mut().unwrap().remove("energy_j");
    r["duration_s"] = json!(3.0 * 86_400.0);
    r["started_at"] = json!(Utc::now().to_rfc3339());
    app.post("/v1/runs", &app.ingest, &r)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "duration_s");
}

/// The migration that gives stored runs their end computes it as ingestion
/// does: a run stored before it, sent again, is the same run.
#[tokio::test]
async fn the_migration_dates_stored_runs_as_ingestion_does() {
    let app = TestApp::new().await;
    let started = Utc::now() - Duration::days(3);
    let durations = [100.5, 0.0000025, 1234.5678915, 86_399.9999995, 7.0e-7];
    let mut sent = Vec::new();
    for (i, duration) in durations.iter().enumerate() {
        let mut r = run("work", &format!("m{i}"), 2);
        r.as_object_mut().unwrap().remove("energy_j");
        r["duration_s"] = json!(duration);
        r["started_at"] = json!(started.to_rfc3339());
        app.ingest(&r).await;
        sent.push(r);
    }
    let ends = || async {
        sqlx::query_scalar::<_, DateTime<Utc>>("SELECT ended_at FROM runs ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
    };
    let at_ingestion = ends().await;
    // As stored before the migration: no end.
    sqlx::query("UPDATE runs SET ended_at = NULL")
        .execute(&app.pool)
        .await
        .unwrap();
    let migration = include_str!("../../migrations/20261127000002_run_end_from_start.sql");
    sqlx::raw_sql(migration).execute(&app.pool).await.unwrap();
    assert_eq!(ends().await, at_ingestion);
    for r in &sent {
        let again = app.post("/v1/runs", &app.ingest, r).await;
        assert_eq!(again.status, StatusCode::OK, "{:#}", again.body);
    }
}

/// Budgets are listed, and one can be removed (admin): the account's runs
/// stay, and admission then checks no budget for it.
#[tokio::test]
async fn budgets_are_listed_and_removed() {
    let app = TestApp::new().await;
    spent(&app, "1", 1000.0, 0).await;
    new_budget(&app, 1e6, "month").await;
    let other = json!({"limit_j": 5e5, "period": "week"});
    let reply = app.put("/v1/budgets/another", &app.admin, &other).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);

    let list = app.get("/v1/budgets", &app.read).await;
    assert_eq!(list.status, StatusCode::OK, "{:#}", list.body);
    let accounts: Vec<&str> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["account"].as_str().unwrap())
        .collect();
    assert_eq!(accounts, ["another", "proj"]);

    app.assert_only_admin_removes("/v1/budgets/proj").await;
    app.get("/v1/budgets/proj", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    assert_eq!(app.run_count().await, 1, "the account's runs stay");
    let admission = json!({"app": "work", "nodes": 2, "account": "proj"});
    let reply = app.post("/v1/admission", &app.schedule, &admission).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["energy"]["budget"], false, "{:#}", reply.body);
    let list = app.get("/v1/budgets", &app.read).await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 1);
}

/// The listing takes no parameters: one sent is refused and named, not
/// silently ignored (`limit` looked like a page size and was not one).
#[tokio::test]
async fn the_budget_listing_refuses_parameters_it_does_not_take() {
    let app = TestApp::new().await;
    new_budget(&app, 1e9, "month").await;
    app.get("/v1/budgets?limit=5", &app.read)
        .await
        .assert_field_error(StatusCode::BAD_REQUEST, "limit");
    app.get("/v1/budgets/proj?x=1", &app.read)
        .await
        .assert_field_error(StatusCode::BAD_REQUEST, "x");
    let reply = app.get("/v1/budgets?", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
}

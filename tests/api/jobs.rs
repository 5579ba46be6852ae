//! Jobs in flight over HTTP: start, list, finish into history, cancel.

use axum::http::{Method, StatusCode};
use chrono::{Duration, Utc};
use serde_json::json;

use crate::support::{TestApp, run};

/// `lin` on 1–16 nodes: APC 1000·n W, ten minutes.
async fn with_history(app: &TestApp) {
    for n in [1, 2, 4, 8, 16] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
}

#[tokio::test]
async fn a_job_lives_from_start_to_history() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let before = app
        .get("/v1/apps/lin/predictions?nodes=3&metric=apc", &app.read)
        .await;
    assert_eq!(before.body["predictions"][0]["source"], "model");

    let start = json!({"source": "slurm", "job_id": "77", "app": "lin", "nodes": 3,
                       "account": "proj1"});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert!((reply.body["predicted_apc_w"].as_f64().unwrap() - 3000.0).abs() < 1.0);
    assert!((reply.body["predicted_tts_s"].as_f64().unwrap() - 600.0).abs() < 1.0);
    assert_eq!(reply.body["reserved_basis"], "expected");
    assert_eq!(reply.body["stale"], false);
    // Reported twice: the same job.
    let again = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(again.status, StatusCode::OK);

    let jobs = app.get("/v1/jobs?account=proj1", &app.read).await;
    assert_eq!(jobs.body["items"].as_array().unwrap().len(), 1);
    assert!((jobs.body["reserved_w"].as_f64().unwrap() - 3000.0).abs() < 1.0);
    // Looked up alone: the job as listed.
    let one = app.get("/v1/jobs/slurm/77", &app.read).await;
    assert_eq!(one.status, StatusCode::OK, "{:#}", one.body);
    assert_eq!(one.body, jobs.body["items"][0]);
    app.get("/v1/jobs/slurm/78", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    app.get("/v1/jobs/slurm/%20bad", &app.read)
        .await
        .assert_field_error(StatusCode::BAD_REQUEST, "job_id");

    // It ends: a run at 3 nodes, measured 3300 W for 600 s.
    let reply = app
        .post(
            "/v1/jobs/slurm/77/finish",
            &app.schedule,
            &json!({"avg_power_w": 3300.0, "duration_s": 600.0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["status"], "finished");
    assert_eq!(reply.body["run"]["nodes"], 3);
    assert_eq!(reply.body["run"]["account"], "proj1");
    let jobs = app.get("/v1/jobs", &app.read).await;
    assert!(jobs.body["items"].as_array().unwrap().is_empty());
    // No job: +0 W, not the -0 an empty float sum gives.
    let reserved = jobs.body["reserved_w"].as_f64().unwrap();
    assert!(reserved == 0.0 && reserved.is_sign_positive(), "{reserved}");
    // The predictor learnt from it: 3 nodes is now measured history.
    let after = app
        .get("/v1/apps/lin/predictions?nodes=3&metric=apc", &app.read)
        .await;
    assert_eq!(after.body["predictions"][0]["source"], "history");
    assert_eq!(after.body["predictions"][0]["value"], 3300.0);
    assert_ne!(after.body["model_version"], before.body["model_version"]);

    // Reported again: nothing changes, nothing is counted twice.
    let reply = app
        .post(
            "/v1/jobs/slurm/77/finish",
            &app.schedule,
            &json!({"avg_power_w": 3300.0, "duration_s": 600.0}),
        )
        .await;
    assert_eq!(reply.body["status"], "already_finished");
    assert_eq!(app.run_count().await, 6);
    // Looked up now: not running, and the answer names the run it became.
    let gone = app.get("/v1/jobs/slurm/77", &app.read).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    let run_id = reply.body["run"]["id"].as_i64().unwrap();
    let detail = gone.body["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("run {run_id} ")), "{detail}");
    // A finished job cannot start again.
    app.post("/v1/jobs", &app.schedule, &start)
        .await
        .assert_field_error(StatusCode::CONFLICT, "job_id");
}

#[tokio::test]
async fn the_reserved_basis_is_an_enumerated_type_in_the_database() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let start = json!({"source": "slurm", "job_id": "e1", "app": "lin", "nodes": 2});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let (kind, stored): (String, String) = sqlx::query_as(
        "SELECT pg_typeof(reserved_basis)::text, reserved_basis::text FROM jobs \
         WHERE job_id = 'e1'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (kind.as_str(), stored.as_str()),
        ("reserved_basis", "expected")
    );
    assert_eq!(reply.body["reserved_basis"], stored);
    let error = sqlx::query("UPDATE jobs SET reserved_basis = 'guessed'")
        .execute(&app.pool)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("invalid input value for enum"),
        "{error}"
    );
}

#[tokio::test]
async fn cancelled_jobs_leave_no_history_and_unknown_apps_reserve_conservatively() {
    let app = TestApp::new().await;
    let reply = app
        .post(
            "/v1/jobs",
            &app.schedule,
            &json!({"source": "slurm", "job_id": "9", "app": "brand-new", "nodes": 4}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["reserved_basis"], "no_history");
    assert_eq!(reply.body["reserved_w"], 4000.0);
    assert!(reply.body["predicted_apc_w"].is_null());
    let reply = app
        .call(
            Method::DELETE,
            "/v1/jobs/slurm/9",
            Some(&app.schedule),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    app.call(
        Method::DELETE,
        "/v1/jobs/slurm/9",
        Some(&app.schedule),
        None,
    )
    .await
    .assert_problem(StatusCode::NOT_FOUND);
    assert_eq!(app.run_count().await, 0);
    app.post("/v1/jobs/slurm/9/finish", &app.schedule, &json!({}))
        .await
        .assert_problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn jobs_far_past_their_predicted_time_are_stale_and_bad_input_is_named() {
    let app = TestApp::new().await;
    with_history(&app).await;
    // Predicted to take 600 s; started two hours ago.
    let started = (Utc::now() - Duration::hours(2)).to_rfc3339();
    let reply = app
        .post(
            "/v1/jobs",
            &app.schedule,
            &json!({"source": "slurm", "job_id": "1", "app": "lin", "nodes": 2,
                    "started_at": started}),
        )
        .await;
    assert_eq!(reply.body["stale"], true, "{:#}", reply.body);
    assert_eq!(app.get("/v1/jobs", &app.read).await.body["stale"], 1);

    for (body, field) in [
        (json!({"source": "s", "job_id": "2", "app": "lin"}), "nodes"),
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "nodes": 0}),
            "nodes",
        ),
        (
            json!({"source": "s", "job_id": "2", "app": "bad app", "nodes": 1}),
            "app",
        ),
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "node_list": "n[2-1]"}),
            "node_list",
        ),
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "node_list": ["n1", "n 2"]}),
            "node_list[1]",
        ),
        // Its run could never be stored (and its reservation would end past
        // year 9999, which RFC 3339 cannot write).
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "nodes": 1,
                   "started_at": "9999-12-31T00:00:00Z"}),
            "started_at",
        ),
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "nodes": 1,
                   "started_at": (Utc::now() + Duration::days(2)).to_rfc3339()}),
            "started_at",
        ),
        (
            json!({"source": "s", "job_id": "2", "app": "lin", "nodes": 1,
                   "started_at": "1969-12-31T23:59:59Z"}),
            "started_at",
        ),
    ] {
        app.post("/v1/jobs", &app.schedule, &body)
            .await
            .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    app.post("/v1/jobs", &app.read, &json!({}))
        .await
        .assert_problem(StatusCode::FORBIDDEN);
    // A finish with impossible measurements is refused; the job keeps
    // running. Values too small to square in the history's sums (once a
    // 400 naming no field) are named like negative ones.
    for (body, fields) in [
        (json!({"energy_j": -5.0}), vec!["energy_j"]),
        (
            json!({"avg_power_w": 1e-308, "energy_j": 8.8e-307}),
            vec!["energy_j", "avg_power_w"],
        ),
        (
            json!({"avg_power_w": 1.0, "duration_s": 7200.0, "quality": 1e-300}),
            vec!["quality"],
        ),
    ] {
        let reply = app
            .post("/v1/jobs/slurm/1/finish", &app.schedule, &body)
            .await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{:#}",
            reply.body
        );
        assert_eq!(reply.error_fields(), fields, "{:#}", reply.body);
    }
    assert_eq!(
        app.get("/v1/jobs", &app.read).await.body["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A path that names no possible job is a 400 naming the parameter, for
    // a finish and a removal alike (a 3,000-character id was a 500, and
    // other bad keys were remembered as ended jobs for a week).
    let long = "a".repeat(3000);
    for (path, fields) in [
        (format!("slurm/{long}"), vec!["job_id"]),
        ("slurm/1%00".to_owned(), vec!["job_id"]),
        ("a%20b/1".to_owned(), vec!["source"]),
        ("..%2F/%20".to_owned(), vec!["source", "job_id"]),
    ] {
        let finish = app
            .post(
                &format!("/v1/jobs/{path}/finish"),
                &app.schedule,
                &json!({"energy_j": 1000.0, "duration_s": 10.0}),
            )
            .await;
        let cancel = app
            .call(
                Method::DELETE,
                &format!("/v1/jobs/{path}"),
                Some(&app.schedule),
                None,
            )
            .await;
        for reply in [finish, cancel] {
            reply.assert_problem(StatusCode::BAD_REQUEST);
            assert_eq!(reply.error_fields(), fields, "{path}: {:#}", reply.body);
        }
    }
    let remembered: i64 = sqlx::query_scalar("SELECT count(*) FROM job_ends")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(remembered, 0);
}

/// NaN passed the jobs' `> 0` checks, since PostgreSQL orders NaN above
/// every number (issue 13); neither it nor Infinity is stored now.
#[tokio::test]
async fn the_jobs_table_refuses_nan_and_infinity() {
    let app = TestApp::new().await;
    let app_id: i64 =
        sqlx::query_scalar("INSERT INTO applications (tag) VALUES ('x') RETURNING id")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let insert = |column: &'static str, value: f64| {
        let pool = app.pool.clone();
        async move {
            let mut values = [
                ("predicted_apc_w", 1.0),
                ("predicted_ets_j", 1.0),
                ("predicted_tts_s", 1.0),
                ("reserved_w", 1.0),
                ("time_limit_s", 1.0),
            ];
            for v in values.iter_mut().filter(|v| v.0 == column) {
                v.1 = value;
            }
            sqlx::query(
                "INSERT INTO jobs (source, job_id, app_id, nodes, started_at, reserved_basis,
                                   predicted_apc_w, predicted_ets_j, predicted_tts_s, reserved_w, time_limit_s)
                 VALUES ('s', $1, $2, 1, now(), 'expected', $3, $4, $5, $6, $7)",
            )
            .bind(format!("{column}-{value}"))
            .bind(app_id)
            .bind(values[0].1)
            .bind(values[1].1)
            .bind(values[2].1)
            .bind(values[3].1)
            .bind(values[4].1)
            .execute(&pool)
            .await
        }
    };
    insert("reserved_w", 1.0)
        .await
        .expect("a finite job is stored");
    for column in [
        "predicted_apc_w",
        "predicted_ets_j",
        "predicted_tts_s",
        "reserved_w",
        "time_limit_s",
    ] {
        for value in [f64::NAN, f64::INFINITY] {
            assert!(
                insert(column, value).await.is_err(),
                "{column} = {value} was stored"
            );
        }
    }
}

/// A later attempt of a running job (a requeue whose first attempt's end
/// never arrived) replaces it and is decided and reserved anew; it was
/// answered 200 with the old, expired reservation, counting nowhere. A
/// retry of either start changes nothing. After a cancellation of the
/// running job, a start of that attempt arriving late is refused (it
/// reserved power again), and a later attempt is stored.
#[tokio::test]
async fn a_requeued_start_replaces_its_earlier_attempt() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let at = |minutes_ago: i64| (Utc::now() - Duration::minutes(minutes_ago)).to_rfc3339();
    let start = |started_at: &str| {
        json!({"source": "slurm", "job_id": "q1", "app": "lin", "nodes": 2,
               "time_limit_s": 3600.0, "started_at": started_at})
    };
    let (first, second) = (at(180), at(5));
    let reply = app.post("/v1/jobs", &app.schedule, &start(&first)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["expired"], true, "{:#}", reply.body);

    let reply = app.post("/v1/jobs", &app.schedule, &start(&second)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["expired"], false, "{:#}", reply.body);
    assert!(reply.body["admission"].is_object(), "{:#}", reply.body);
    let stored = reply.body["started_at"].clone();
    for retry in [&second, &first] {
        let reply = app.post("/v1/jobs", &app.schedule, &start(retry)).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["started_at"], stored, "{:#}", reply.body);
    }
    let jobs = app.get("/v1/jobs", &app.read).await.body;
    assert_eq!(jobs["items"].as_array().unwrap().len(), 1, "{jobs:#}");
    assert_eq!(jobs["expired"], 0, "{jobs:#}");
    assert!(jobs["reserved_w"].as_f64().unwrap() > 0.0, "{jobs:#}");

    let reply = app
        .call(
            Method::DELETE,
            "/v1/jobs/slurm/q1",
            Some(&app.schedule),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    app.post("/v1/jobs", &app.schedule, &start(&second))
        .await
        .assert_field_error(StatusCode::CONFLICT, "job_id");
    let later = (Utc::now() + Duration::seconds(1)).to_rfc3339();
    let reply = app.post("/v1/jobs", &app.schedule, &start(&later)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
}

/// A run that ended before the attempt of its job running now began is an
/// earlier attempt's (a requeue): it is not stored, and it neither ends the
/// running attempt nor takes the key its run is stored under (black-box
/// test of 2026-11-29: it ended the attempt, whose own end was then refused
/// 409 and its energy never recorded).
#[tokio::test]
async fn a_run_of_an_earlier_attempt_leaves_the_running_one() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let at = |minutes_ago: i64| (Utc::now() - Duration::minutes(minutes_ago)).to_rfc3339();
    let start = json!({"source": "slurm", "job_id": "rq", "app": "lin", "nodes": 2,
                       "time_limit_s": 3600.0, "started_at": at(5)});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let runs_before = app.run_count().await;
    // The first attempt: from an hour ago, for half an hour.
    let mut first = run("lin", "rq", 2);
    first["source"] = json!("slurm");
    first["started_at"] = json!(at(60));
    first["duration_s"] = json!(1800.0);
    first.as_object_mut().unwrap().remove("energy_j");
    let reply = app.post("/v1/runs", &app.ingest, &first).await;
    reply.assert_field_error(StatusCode::CONFLICT, "ended_at");
    let reply = app
        .post("/v1/runs/batch", &app.ingest, &json!({"runs": [first]}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let item = &reply.body["items"][0];
    assert_eq!(item["status"], "rejected", "{item:#}");
    assert_eq!(item["rejection"], "conflict", "{item:#}");
    assert_eq!(item["errors"][0]["field"], "runs[0].ended_at", "{item:#}");
    let atomic = json!({"atomic": true, "runs": [first, run("lin", "other", 4)]});
    app.post("/v1/runs/batch", &app.ingest, &atomic)
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "runs[0].ended_at");
    assert_eq!(app.run_count().await, runs_before);
    // The running attempt still holds its reservation, and its own end is
    // its job's run.
    let running = app.get("/v1/jobs/slurm/rq", &app.read).await;
    assert_eq!(running.status, StatusCode::OK, "{:#}", running.body);
    let reply = app
        .post(
            "/v1/jobs/slurm/rq/finish",
            &app.schedule,
            &json!({"avg_power_w": 2100.0, "duration_s": 240.0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["status"], "finished", "{:#}", reply.body);
    assert_eq!(reply.body["run"]["avg_power_w"], 2100.0);
    assert_eq!(app.run_count().await, runs_before + 1);
    // Both attempts' runs in one batch, the earlier listed first: the
    // running attempt's is stored and ends it; the earlier one is refused.
    let mut second = start.clone();
    second["job_id"] = json!("rq2");
    let reply = app.post("/v1/jobs", &app.schedule, &second).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let mut earlier = first.clone();
    earlier["job_id"] = json!("rq2");
    let mut own = earlier.clone();
    own["started_at"] = json!(at(5));
    own["duration_s"] = json!(240.0);
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": [earlier, own]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let items = &reply.body["items"];
    assert_eq!(items[0]["status"], "rejected", "{items:#}");
    assert_eq!(
        items[0]["errors"][0]["field"], "runs[0].ended_at",
        "{items:#}"
    );
    assert_eq!(items[1]["status"], "created", "{items:#}");
    app.get("/v1/jobs/slurm/rq2", &app.read)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    assert_eq!(app.run_count().await, runs_before + 2);
    // Sent again now, the earlier attempt's run is a conflict with the
    // job's run, as any run of that key with other values is.
    app.post("/v1/runs", &app.ingest, &first)
        .await
        .assert_problem(StatusCode::CONFLICT);
    assert_eq!(app.run_count().await, runs_before + 2);
}

/// A finish with energy and power dates the end by their quotient: it ended
/// the job "now", so one reported late was refused as inconsistent (422),
/// every time. Identical finishes sent at once (a retry while the first is
/// being stored) all answer 200: they differed in what each filled in from
/// its own "now" and were refused 409 as other values.
#[tokio::test]
async fn late_and_repeated_finishes_are_taken() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let started = Utc::now() - Duration::hours(2);
    for job in ["late", "twice", "exact"] {
        let body = json!({"source": "slurm", "job_id": job, "app": "lin", "nodes": 2,
                          "started_at": started.to_rfc3339()});
        let reply = app.post("/v1/jobs", &app.schedule, &body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }

    let reply = app
        .post(
            "/v1/jobs/slurm/late/finish",
            &app.schedule,
            &json!({"energy_j": 1_200_000.0, "avg_power_w": 2000.0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let run = &reply.body["run"];
    assert_eq!(run["duration_s"], 600.0, "{run:#}");
    let ended: chrono::DateTime<Utc> = run["ended_at"].as_str().unwrap().parse().unwrap();
    let expected = joulecast::validate::as_stored(started) + Duration::seconds(600);
    assert_eq!(ended, expected, "{run:#}");

    // One report filled in from "now", and one given whole (the same run
    // exactly, whichever is stored first).
    let whole = (started + Duration::seconds(900)).to_rfc3339();
    for (job, body) in [
        ("twice", json!({"energy_j": 5_000_000.0})),
        (
            "exact",
            json!({"energy_j": 1_800_000.0, "avg_power_w": 2000.0, "ended_at": whole}),
        ),
    ] {
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (app, body) = (app.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let path = format!("/v1/jobs/slurm/{job}/finish");
                app.post(&path, &app.schedule, &body).await
            }));
        }
        let mut statuses = Vec::new();
        for task in tasks {
            let reply = task.await.unwrap();
            assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
            statuses.push(reply.body["status"].as_str().unwrap().to_owned());
        }
        assert_eq!(
            statuses.iter().filter(|s| *s == "finished").count(),
            1,
            "{job}: {statuses:?}"
        );
    }
    assert_eq!(app.run_count().await, 5 + 3);
}

/// A requeue reported under another application's name replaces the
/// earlier attempt, and the application created for that attempt alone goes
/// with it (it was left without runs or jobs, never removed).
#[tokio::test]
async fn a_requeue_under_another_name_removes_the_first_names_application() {
    let app = TestApp::new().await;
    let start = |name: &str, minutes_ago: i64| {
        json!({"source": "slurm", "job_id": "r1", "app": name, "nodes": 1,
               "started_at": (Utc::now() - Duration::minutes(minutes_ago)).to_rfc3339()})
    };
    let reply = app
        .post("/v1/jobs", &app.schedule, &start("draft-name", 30))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let reply = app.get("/v1/apps/draft-name", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let reply = app
        .post("/v1/jobs", &app.schedule, &start("final-name", 5))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(reply.body["app"], "final-name", "{:#}", reply.body);
    let reply = app.get("/v1/apps/draft-name", &app.read).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{:#}", reply.body);
    let reply = app.get("/v1/apps/final-name", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
}

/// A job whose end is never reported stops counting at its time limit plus
/// the grace period, or without one after the maximum (issue 13): it is
/// still listed, as expired, and headroom no longer counts it.
#[tokio::test]
async fn reservations_expire_at_the_time_limit_plus_grace_or_the_maximum() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let start = |job: &str, hours_ago: i64, limit: Option<f64>| {
        let mut body = json!({"source": "slurm", "job_id": job, "app": "lin", "nodes": 2,
            "partition": "batch",
            "started_at": (Utc::now() - Duration::hours(hours_ago)).to_rfc3339()});
        if let Some(limit) = limit {
            body["time_limit_s"] = json!(limit);
        }
        let app = app.clone();
        async move {
            let reply = app.post("/v1/jobs", &app.schedule, &body).await;
            assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
            reply.body
        }
    };
    // One hour limit, started two hours ago: past limit + 10 min grace.
    let over = start("over", 2, Some(3600.0)).await;
    assert_eq!(over["expired"], true, "{over:#}");
    // No limit, started three days ago: past the 48 h maximum.
    assert_eq!(start("forgotten", 72, None).await["expired"], true);
    // Four hour limit, started two hours ago; no limit, one hour ago: live.
    let live = start("live", 2, Some(4.0 * 3600.0)).await;
    assert_eq!(live["expired"], false, "{live:#}");
    assert_eq!(start("recent", 1, None).await["expired"], false);

    let list = app.get("/v1/jobs", &app.read).await.body;
    assert_eq!(list["items"].as_array().unwrap().len(), 4);
    assert_eq!(list["expired"], 2, "{list:#}");
    // Expired comes after stale: an expired job is not also stale, on the
    // job as in the totals.
    let items = list["items"].as_array().unwrap();
    assert!(
        items
            .iter()
            .all(|j| !(j["expired"] == true && j["stale"] == true)),
        "{list:#}"
    );
    let stale = items.iter().filter(|j| j["stale"] == true).count();
    assert_eq!(list["stale"], stale, "{list:#}");
    let reserved = |job: &str| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_id"] == job)
            .unwrap()["reserved_w"]
            .as_f64()
            .unwrap()
    };
    let live_w = reserved("live") + reserved("recent");
    assert!(
        (list["reserved_w"].as_f64().unwrap() - live_w).abs() < 1e-6,
        "{list:#}"
    );
    let headroom = app.get("/v1/power/headroom", &app.read).await.body;
    let counted: Vec<&str> = headroom["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(counted, ["live", "recent"], "{headroom:#}");
}

/// A time limit beyond ten years is refused by name (it once gave a
/// reservation ending in the year 262142 and made every later start and
/// admission fail on the database's date range); a row stored before that
/// check does not stop later starts, admissions or listings.
#[tokio::test]
async fn absurd_time_limits_are_refused_and_old_ones_do_not_break_later_jobs() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let job = |id: &str, limit: f64| json!({"source": "slurm", "job_id": id, "app": "lin", "nodes": 2, "time_limit_s": limit});
    for limit in [2.43e16, 315_576_000.0 * 1.01] {
        app.post("/v1/jobs", &app.schedule, &job("far", limit))
            .await
            .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "time_limit_s");
        app.post(
            "/v1/admission",
            &app.schedule,
            &json!({"app": "lin", "nodes": 2, "time_limit_s": limit}),
        )
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "time_limit_s");
    }
    let ten_years = app
        .post("/v1/jobs", &app.schedule, &job("decade", 315_576_000.0))
        .await;
    assert_eq!(
        ten_years.status,
        StatusCode::CREATED,
        "{:#}",
        ten_years.body
    );

    // As a release without the check stored it.
    let app_id: i64 = sqlx::query_scalar("SELECT id FROM applications WHERE tag = 'lin'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO jobs (source, job_id, app_id, nodes, started_at, reserved_basis,
                           predicted_apc_w, reserved_w, time_limit_s)
         VALUES ('slurm', 'stored-far', $1, 1, now(), 'expected', 1000, 1000, 2.43e16)",
    )
    .bind(app_id)
    .execute(&app.pool)
    .await
    .unwrap();
    let later = app
        .post("/v1/jobs", &app.schedule, &job("later", 3600.0))
        .await;
    assert_eq!(later.status, StatusCode::CREATED, "{:#}", later.body);
    let asked = app
        .post(
            "/v1/admission",
            &app.schedule,
            &json!({"app": "lin", "nodes": 2, "time_limit_s": 3600.0}),
        )
        .await;
    assert_eq!(asked.status, StatusCode::OK, "{:#}", asked.body);
    let list = app.get("/v1/jobs", &app.read).await;
    assert_eq!(list.status, StatusCode::OK, "{:#}", list.body);
    let far = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == "stored-far")
        .unwrap();
    let ends = far["reservation_ends_at"].as_str().unwrap();
    let ends: chrono::DateTime<Utc> = ends.parse().expect("an RFC 3339 date-time");
    assert!(ends > Utc::now() + Duration::days(365 * 300), "{ends}");
    let headroom = app.get("/v1/power/headroom", &app.read).await;
    assert_eq!(headroom.status, StatusCode::OK, "{:#}", headroom.body);
    assert!(
        headroom.body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["job_id"] == "stored-far"),
        "{:#}",
        headroom.body
    );
}

/// A run stored for a running job, by any path, ends the job in the same
/// transaction; an end reported before the start arrived refuses that start
/// but not a later attempt (issue 13: start and epilog race-free).
#[tokio::test]
async fn a_job_never_stays_running_after_its_end() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let start = |job: &str| json!({"source": "clusterA", "job_id": job, "app": "lin", "nodes": 2});
    let running = |app: &TestApp| {
        let app = app.clone();
        async move {
            let jobs = app.get("/v1/jobs", &app.read).await;
            jobs.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["job_id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };

    // The run arrives through /v1/runs (an import) while the job runs.
    let reply = app.post("/v1/jobs", &app.schedule, &start("a")).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    app.ingest(&run("lin", "a", 2)).await;
    assert!(running(&app).await.is_empty());
    // Finishing it now finds the run: nothing more is stored.
    let reply = app
        .post("/v1/jobs/clusterA/a/finish", &app.schedule, &json!({}))
        .await;
    assert_eq!(reply.body["status"], "already_finished", "{:#}", reply.body);

    // An import stores the run with other values than the finish reports:
    // the job ended with the import, and the finish changes nothing. It is
    // refused naming what differs (as a run sent again with other values
    // is); what agrees, or was not sent, is `already_finished`.
    let reply = app.post("/v1/jobs", &app.schedule, &start("b")).await;
    assert_eq!(reply.status, StatusCode::CREATED);
    let mut other = run("lin", "b", 2);
    other["energy_j"] = json!(5.0e6);
    let stored = app.post("/v1/runs", &app.ingest, &other).await;
    assert_eq!(stored.status, StatusCode::CREATED, "{:#}", stored.body);
    let finish = async |body: serde_json::Value| {
        app.post("/v1/jobs/clusterA/b/finish", &app.schedule, &body)
            .await
    };
    let reply = finish(json!({"energy_j": 1.0e6})).await;
    reply.assert_field_error(StatusCode::CONFLICT, "energy_j");
    assert!(
        reply.body["errors"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("5000000"),
        "{:#}",
        reply.body
    );
    for agreeing in [json!({}), json!({"energy_j": 5.0e6}), other.clone()] {
        let mut agreeing = agreeing;
        if let Some(fields) = agreeing.as_object_mut() {
            for key in [
                "app",
                "source",
                "job_id",
                "nodes",
                "node_list",
                "account",
                "started_at",
            ] {
                fields.remove(key);
            }
        }
        let reply = finish(agreeing).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert_eq!(reply.body["status"], "already_finished");
        assert_eq!(reply.body["run"]["energy_j"], 5.0e6);
    }
    assert!(running(&app).await.is_empty());

    // The epilog overtakes a start (the prolog gave up waiting): the end is
    // remembered, and the late start, dated before it, is refused.
    let started_at = (Utc::now() - Duration::seconds(30)).to_rfc3339();
    app.call(
        Method::DELETE,
        "/v1/jobs/clusterA/c",
        Some(&app.schedule),
        None,
    )
    .await
    .assert_problem(StatusCode::NOT_FOUND);
    let mut late = start("c");
    late["started_at"] = json!(started_at);
    app.post("/v1/jobs", &app.schedule, &late)
        .await
        .assert_field_error(StatusCode::CONFLICT, "job_id");
    assert!(running(&app).await.is_empty());
    // A finish of an unknown job is remembered the same way.
    app.post("/v1/jobs/clusterA/d/finish", &app.schedule, &json!({}))
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    let mut late = start("d");
    late["started_at"] = json!(started_at);
    app.post("/v1/jobs", &app.schedule, &late)
        .await
        .assert_field_error(StatusCode::CONFLICT, "job_id");
    // A later attempt of the same job (requeued) starts after that end.
    let reply = app.post("/v1/jobs", &app.schedule, &start("c")).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    assert_eq!(running(&app).await, ["c"]);
    // The end a finish reports is the one remembered, not when it arrived:
    // an attempt dated after it starts, one dated before it is refused.
    let ended = Utc::now() - Duration::seconds(60);
    let finish = json!({"energy_j": 1.0e6, "duration_s": 100.0, "ended_at": ended.to_rfc3339()});
    app.post("/v1/jobs/clusterA/e/finish", &app.schedule, &finish)
        .await
        .assert_problem(StatusCode::NOT_FOUND);
    let mut before = start("e");
    before["started_at"] = json!((ended - Duration::seconds(1)).to_rfc3339());
    app.post("/v1/jobs", &app.schedule, &before)
        .await
        .assert_field_error(StatusCode::CONFLICT, "job_id");
    let mut after = start("e");
    after["started_at"] = json!((ended + Duration::microseconds(1)).to_rfc3339());
    let reply = app.post("/v1/jobs", &app.schedule, &after).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
}

/// Starts racing the runs of the same jobs: whichever commits first, no job
/// is left running once its run is stored.
#[tokio::test]
async fn starts_racing_their_runs_leave_no_job_running() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let mut tasks = Vec::new();
    for i in 0..24 {
        let job = format!("r{i}");
        let (a, b) = (app.clone(), app.clone());
        let body = json!({"source": "clusterA", "job_id": job, "app": "lin", "nodes": 2});
        tasks.push(tokio::spawn(async move {
            a.post("/v1/jobs", &a.schedule, &body).await
        }));
        tasks.push(tokio::spawn(async move {
            b.post("/v1/runs", &b.ingest, &run("lin", &job, 2)).await
        }));
    }
    for task in tasks {
        let reply = task.await.unwrap();
        assert!(
            [StatusCode::CREATED, StatusCode::OK, StatusCode::CONFLICT].contains(&reply.status),
            "{} {:#}",
            reply.status,
            reply.body
        );
    }
    let jobs = app.get("/v1/jobs", &app.read).await;
    assert_eq!(jobs.body["items"], json!([]), "{:#}", jobs.body);
    assert_eq!(app.run_count().await, 5 + 24);
}

/// Job names are free text: a start creates its application, but one that
/// never gets a run (and was not set up by an administrator) goes when its
/// last job does, and a
/// refused start creates none (issue 13, finding 5).
#[tokio::test]
async fn job_names_that_never_give_a_run_leave_no_application() {
    let app = TestApp::new().await;
    let start =
        |job: &str, name: &str| json!({"source": "s", "job_id": job, "app": name, "nodes": 2});
    let exists = |name: &str| {
        let app = app.clone();
        let path = format!("/v1/apps/{name}");
        async move { app.get(&path, &app.read).await.status == StatusCode::OK }
    };

    // Started, then cancelled: gone with its job.
    for job in ["1", "2"] {
        let reply = app
            .post("/v1/jobs", &app.schedule, &start(job, "interactive-bash"))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }
    assert!(exists("interactive-bash").await);
    app.call(Method::DELETE, "/v1/jobs/s/1", Some(&app.schedule), None)
        .await;
    assert!(
        exists("interactive-bash").await,
        "another job still runs under it"
    );
    app.call(Method::DELETE, "/v1/jobs/s/2", Some(&app.schedule), None)
        .await;
    assert!(!exists("interactive-bash").await);

    // Its run stored under another name (an import naming it otherwise).
    app.post("/v1/jobs", &app.schedule, &start("3", "script-17.sh"))
        .await;
    let mut renamed = run("lammps", "3", 2);
    renamed["source"] = json!("s");
    app.ingest(&renamed).await;
    assert!(!exists("script-17.sh").await);
    assert!(exists("lammps").await);

    // Finished: a run, so an application for good.
    app.post("/v1/jobs", &app.schedule, &start("4", "cp2k"))
        .await;
    let reply = app
        .post(
            "/v1/jobs/s/4/finish",
            &app.schedule,
            &json!({"avg_power_w": 2000.0, "duration_s": 60.0}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert!(exists("cp2k").await);

    // Configured by an administrator: kept without runs.
    let reply = app
        .put(
            "/v1/apps/vasp",
            &app.admin,
            &json!({"scaling_mode": "strong"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    app.post("/v1/jobs", &app.schedule, &start("5", "vasp"))
        .await;
    app.call(Method::DELETE, "/v1/jobs/s/5", Some(&app.schedule), None)
        .await;
    assert!(exists("vasp").await);
    // Even with every setting at its default (it was removed: "default
    // settings" was read as "never set up").
    let reply = app.put("/v1/apps/gromacs", &app.admin, &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    app.post("/v1/jobs", &app.schedule, &start("7", "gromacs"))
        .await;
    app.call(Method::DELETE, "/v1/jobs/s/7", Some(&app.schedule), None)
        .await;
    assert!(exists("gromacs").await);

    // Refused under a cap: nothing created.
    let reply = app
        .put("/v1/power-caps/site", &app.admin, &json!({"limit_w": 10.0}))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    app.post("/v1/jobs", &app.schedule, &start("6", "refused-name"))
        .await
        .assert_problem(StatusCode::CONFLICT);
    assert!(!exists("refused-name").await);
}

/// Jobs that ran unreserved while the service was unreachable are counted
/// once each; bad reports are refused naming the field.
#[tokio::test]
async fn unreserved_jobs_are_counted_once_and_bad_reports_named() {
    let app = TestApp::new().await;
    let at = (Utc::now() - Duration::minutes(3)).to_rfc3339();
    let body = json!({"source": "s", "jobs": [{"job_id": "1", "started_at": at},
                                              {"job_id": "2", "started_at": at},
                                              {"job_id": "1", "started_at": at}]});
    let reply = app.post("/v1/jobs/unreserved", &app.schedule, &body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["counted"], 2);
    assert_eq!(reply.body["already_counted"], 1);
    let again = app.post("/v1/jobs/unreserved", &app.schedule, &body).await;
    assert_eq!(again.body["counted"], 0);
    for (body, field) in [
        (json!({"source": "s", "jobs": []}), "jobs"),
        (
            json!({"source": "bad source", "jobs": [{"job_id": "1", "started_at": at}]}),
            "source",
        ),
        (
            json!({"source": "s", "jobs": [{"job_id": "", "started_at": at}]}),
            "jobs[0].job_id",
        ),
    ] {
        app.post("/v1/jobs/unreserved", &app.schedule, &body)
            .await
            .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, field);
    }
    app.post("/v1/jobs/unreserved", &app.read, &body)
        .await
        .assert_problem(StatusCode::FORBIDDEN);
}

/// A run stored while the job start that created its application is being
/// cancelled (which removes an application left without runs or jobs): the
/// run is stored under a live application, never lost, never a 500.
#[tokio::test]
async fn a_run_racing_the_cancellation_that_removes_its_new_application_is_stored() {
    let app = TestApp::new().await;
    let rounds = 40;
    for i in 0..rounds {
        let name = format!("gc-{i}");
        let start = json!({"source": "gc", "job_id": name, "app": name, "nodes": 1,
                           "force": true});
        let reply = app.post("/v1/jobs", &app.schedule, &start).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        let path = format!("/v1/jobs/gc/{name}");
        let cancel = app.call(Method::DELETE, &path, Some(&app.schedule), None);
        let mut body = run(&name, &name, 1);
        body["source"] = json!("gcr");
        // Half of the rounds through the batch endpoint, which shares the path.
        let store = async {
            if i % 2 == 0 {
                app.post("/v1/runs", &app.ingest, &body).await
            } else {
                app.post("/v1/runs/batch", &app.ingest, &json!({"runs": [body]}))
                    .await
            }
        };
        let (cancelled, stored) = tokio::join!(cancel, store);
        assert!(cancelled.status.is_success(), "{:#}", cancelled.body);
        assert!(
            [StatusCode::CREATED, StatusCode::OK].contains(&stored.status),
            "{} {:#}",
            stored.status,
            stored.body
        );
        let listed = app.get(&format!("/v1/apps/{name}"), &app.read).await;
        assert_eq!(listed.status, StatusCode::OK, "{:#}", listed.body);
        assert_eq!(listed.body["run_count"], 1, "{:#}", listed.body);
    }
    assert_eq!(app.run_count().await, rounds);
}

/// An application that a job start created is removed when the job is
/// cancelled without a run, but not when it holds efficiency measurements
/// by then: those were acknowledged, and must stay.
#[tokio::test]
async fn cancelling_a_job_keeps_the_efficiency_measurements_of_its_new_application() {
    let app = TestApp::new().await;
    let reply = app
        .post(
            "/v1/jobs",
            &app.schedule,
            &json!({"source": "s", "job_id": "j1", "app": "eff-new", "nodes": 2}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let body = json!({"measurements": [
        {"region": "solver", "processes": 2, "load_balance": 0.9,
         "serialization": 0.9, "transfer": 0.95},
    ]});
    let reply = app
        .post("/v1/apps/eff-new/efficiency", &app.ingest, &body)
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let reply = app
        .call(Method::DELETE, "/v1/jobs/s/j1", Some(&app.schedule), None)
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let reply = app.get("/v1/apps/eff-new/efficiency", &app.read).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["measurements"].as_array().unwrap().len(), 1);
}

/// Job starts and run batches arriving together for an application nobody
/// has seen: the batch inserts the application and later takes the
/// admission lock; a start must not hold that lock while it waits for the
/// batch's insertion (a deadlock, answered 503 after PostgreSQL's detector
/// broke it). Every start and every batch succeeds, with the runs counted
/// once.
#[tokio::test]
async fn job_starts_and_batches_for_a_new_application_do_not_deadlock() {
    let app = &TestApp::new().await;
    for round in 0..12 {
        let tag = format!("dl-{round}");
        let tag = &tag;
        let starts = (0..4).map(|k| {
            let body = json!({"source": "dl", "job_id": format!("{round}-j{k}"),
                              "app": tag, "nodes": 2, "force": true});
            async move { app.post("/v1/jobs", &app.schedule, &body).await }
        });
        let batches = (0..4).map(|k| {
            let runs: Vec<_> = (0..5)
                .map(|i| run(tag, &format!("{round}-b{k}-{i}"), 1 + i % 4))
                .collect();
            let body = json!({ "runs": runs });
            async move { app.post("/v1/runs/batch", &app.ingest, &body).await }
        });
        let (starts, batches) = tokio::join!(
            futures_util::future::join_all(starts),
            futures_util::future::join_all(batches)
        );
        for reply in &starts {
            assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        }
        for reply in &batches {
            assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        }
        let listed = app.get(&format!("/v1/apps/{tag}"), &app.read).await;
        assert_eq!(listed.body["run_count"], 20, "{:#}", listed.body);
    }
}

/// A job's node list, like a run's, is an array of names or a host list.
#[tokio::test]
async fn a_job_start_takes_its_node_list_as_names_or_as_a_host_list() {
    let app = TestApp::new().await;
    for i in 1..=4 {
        let reply = app
            .put(&format!("/v1/nodes/n{i}"), &app.admin, &json!({}))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }
    for (job_id, list) in [("arr", json!(["n1", "n2"])), ("host", json!("n[3-4]"))] {
        let body = json!({"source": "s", "job_id": job_id, "app": "nl", "node_list": list,
                          "force": true});
        let reply = app.post("/v1/jobs", &app.schedule, &body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        assert_eq!(reply.body["nodes"], 2, "{:#}", reply.body);
    }
    let jobs = app.get("/v1/jobs", &app.read).await.body;
    let lists: Vec<&serde_json::Value> = jobs["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["node_list"])
        .collect();
    assert_eq!(lists, [&json!(["n1", "n2"]), &json!(["n3", "n4"])]);

    // Neither form: named, in words.
    let body = json!({"source": "s", "job_id": "bad", "app": "nl", "node_list": [1, 2]});
    let reply = app.post("/v1/jobs", &app.schedule, &body).await;
    reply.assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "node_list");
    assert!(
        reply.body["errors"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("an array of node names, or one string in Slurm hostlist syntax"),
        "{:#}",
        reply.body
    );
}

#[tokio::test]
async fn running_jobs_are_listed_in_pages_with_totals_over_all_of_them() {
    let app = TestApp::new().await;
    with_history(&app).await;
    // Seven jobs on two systems; two of them started at the same instant,
    // which the cursor must still tell apart.
    let at = Utc::now() - Duration::minutes(5);
    for (i, source) in ["a", "b", "a", "a", "b", "a", "a"].iter().enumerate() {
        let started = if i == 3 {
            at
        } else {
            at + Duration::seconds(i as i64)
        };
        let start = json!({"source": source, "job_id": format!("j{i}"), "app": "lin",
                           "nodes": 1 + i, "started_at": started});
        let reply = app.post("/v1/jobs", &app.schedule, &start).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    }
    let all = app.get("/v1/jobs", &app.read).await.body;
    assert_eq!(all["items"].as_array().unwrap().len(), 7);
    assert!(all.get("next_cursor").is_none(), "{all:#}");
    let ids = |page: &serde_json::Value| -> Vec<String> {
        let items = page["items"].as_array().unwrap();
        items
            .iter()
            .map(|j| j["job_id"].as_str().unwrap().to_owned())
            .collect()
    };

    let mut paged = Vec::new();
    let mut path = "/v1/jobs?limit=3".to_owned();
    loop {
        let reply = app.get(&path, &app.read).await;
        assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
        assert!(ids(&reply.body).len() <= 3);
        // The totals are those of every job, on every page.
        assert_eq!(reply.body["reserved_w"], all["reserved_w"]);
        paged.extend(ids(&reply.body));
        match reply.body["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/jobs?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(paged, ids(&all), "pages, in order, are the whole list");

    let mut of_a = Vec::new();
    let mut path = "/v1/jobs?source=a&limit=2".to_owned();
    while let Some(cursor) = {
        let reply = app.get(&path, &app.read).await;
        of_a.extend(ids(&reply.body));
        reply.body["next_cursor"].as_str().map(str::to_owned)
    } {
        path = format!("/v1/jobs?source=a&limit=2&cursor={cursor}");
    }
    let expected: Vec<String> = ids(&all)
        .into_iter()
        .filter(|id| ["j0", "j2", "j3", "j5", "j6"].contains(&id.as_str()))
        .collect();
    assert_eq!(of_a, expected);

    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("cursor=bm90LWEtY3Vyc29y", "cursor"),
        ("cursor=am9iczp4OnNz", "cursor"),
        ("source=bad%20source", "source"),
    ] {
        let reply = app.get(&format!("/v1/jobs?{query}"), &app.read).await;
        reply.assert_field_error(StatusCode::BAD_REQUEST, field);
    }
}

/// A job's end and its cancellation sent at the same moment: exactly one of
/// them wins. Either the job became a run (and the cancellation finds no
/// running job) or it was cancelled and left no history (and its end finds
/// no job). Before, both succeeded and a cancelled job was stored as a run.
#[tokio::test]
async fn a_job_end_racing_its_cancellation_is_one_or_the_other() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let before = app.run_count().await;
    let rounds = 60;
    let (mut finished, mut cancelled) = (0, 0);
    for i in 0..rounds {
        let job = format!("race-{i}");
        let start = json!({"source": "slurm", "job_id": job, "app": "lin", "nodes": 2,
                           "force": true});
        let reply = app.post("/v1/jobs", &app.schedule, &start).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
        let path = format!("/v1/jobs/slurm/{job}");
        let finish_path = format!("{path}/finish");
        let end = json!({"avg_power_w": 2000.0, "duration_s": 60.0});
        let finish = app.post(&finish_path, &app.schedule, &end);
        let cancel = app.call(Method::DELETE, &path, Some(&app.schedule), None);
        // Alternate which request leaves first.
        let (finish, cancel) = if i % 2 == 0 {
            tokio::join!(finish, cancel)
        } else {
            let (c, f) = tokio::join!(cancel, finish);
            (f, c)
        };
        let runs: i64 =
            sqlx::query_scalar("SELECT count(*) FROM runs WHERE source = 'slurm' AND job_id = $1")
                .bind(&job)
                .fetch_one(&app.pool)
                .await
                .unwrap();
        let has_run = runs == 1;
        match (finish.status, cancel.status) {
            (StatusCode::OK, StatusCode::NOT_FOUND) => {
                assert_eq!(finish.body["status"], "finished", "{:#}", finish.body);
                assert!(has_run, "round {i}: finished, but no run");
                finished += 1;
            }
            (StatusCode::NOT_FOUND, StatusCode::NO_CONTENT) => {
                finish.assert_problem(StatusCode::NOT_FOUND);
                assert!(!has_run, "round {i}: cancelled, but its run was stored");
                cancelled += 1;
            }
            (f, c) => panic!(
                "round {i}: finish {f} {:#}, cancel {c} {:#}",
                finish.body, cancel.body
            ),
        }
        let jobs = app.get("/v1/jobs", &app.read).await;
        assert!(
            jobs.body["items"].as_array().unwrap().is_empty(),
            "{:#}",
            jobs.body
        );
    }
    assert_eq!(finished + cancelled, rounds);
    assert_eq!(app.run_count().await, before + finished);
    eprintln!("finished {finished}, cancelled {cancelled} of {rounds}");
}

/// A job dated to start later (up to a day ahead is accepted: a scheduler's
/// clock ahead of the service's) cannot end now. Finished with its energy
/// alone, the answer names `ended_at`, which was missing, and says what to
/// send; before, it rejected `ended_at` and `duration_s`, neither of which
/// the client had sent (the review of 2026-11-28).
#[tokio::test]
async fn a_job_dated_later_is_finished_with_its_end() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let started = Utc::now() + Duration::hours(2);
    let start = json!({"source": "f", "job_id": "1", "app": "lin", "nodes": 1,
                       "started_at": started.to_rfc3339()});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let reply = app
        .post(
            "/v1/jobs/f/1/finish",
            &app.schedule,
            &json!({"energy_j": 1.0e5}),
        )
        .await;
    reply.assert_problem(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reply.error_fields(), ["ended_at"], "{:#}", reply.body);
    let reason = reply.body["errors"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("duration_s"), "{reason}");
    assert!(reason.contains("the job's start ("), "{reason}");
    // Still running; with its duration it ends.
    let reply = app.get("/v1/jobs?source=f", &app.read).await;
    assert_eq!(reply.body["items"].as_array().unwrap().len(), 1);
    let finish = json!({"energy_j": 1.0e5, "duration_s": 100.0});
    let reply = app
        .post("/v1/jobs/f/1/finish", &app.schedule, &finish)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let reply = app.get("/v1/jobs?source=f", &app.read).await;
    assert_eq!(reply.body["items"].as_array().unwrap().len(), 0);
}

/// The same start sent again is a retry only with the same values: with
/// others it is refused naming each, as a run sent again is (the review of
/// 2026-11-28 found it answered 200 with the old job, the new values lost
/// without a word). Values not sent are not compared.
#[tokio::test]
async fn the_same_start_with_other_values_is_a_conflict() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let at = (Utc::now() - Duration::minutes(5)).to_rfc3339();
    let start = json!({"source": "r", "job_id": "1", "app": "lin", "nodes": 2,
                       "account": "proj", "time_limit_s": 3600.0, "started_at": at});
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:#}", reply.body);
    let reply = app.post("/v1/jobs", &app.schedule, &start).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    // Without the account and the time limit: the same start.
    let bare = json!({"source": "r", "job_id": "1", "app": "lin", "nodes": 2, "started_at": at});
    let reply = app.post("/v1/jobs", &app.schedule, &bare).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let mut other = start.clone();
    other["nodes"] = json!(4);
    other["account"] = json!("other");
    other["time_limit_s"] = json!(7200.0);
    let reply = app.post("/v1/jobs", &app.schedule, &other).await;
    reply.assert_problem(StatusCode::CONFLICT);
    let mut fields = reply.error_fields();
    fields.sort();
    assert_eq!(
        fields,
        ["account", "nodes", "time_limit_s"],
        "{:#}",
        reply.body
    );
    // Unchanged.
    let jobs = app.get("/v1/jobs?source=r", &app.read).await.body;
    assert_eq!(jobs["items"][0]["nodes"], 2, "{jobs:#}");
    assert_eq!(jobs["items"][0]["account"], "proj", "{jobs:#}");
}

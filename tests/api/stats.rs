//! History as sufficient statistics (docs/model.md §2.2): `run_stats` kept by
//! every write equals what the migration's backfill computes from the runs,
//! duplicates count once, and the predictor reads it.

use serde_json::{Value, json};

use crate::support::{TestApp, run};

/// The backfill statement of the migration that created `run_stats`.
fn backfill() -> &'static str {
    let migration = include_str!("../../migrations/20261123000001_run_stats.sql");
    let start = migration
        .find("INSERT INTO run_stats")
        .expect("the migration backfills");
    &migration[start..]
}

type Row = (i32, i64, Vec<f64>);

async fn stats(app: &TestApp) -> Vec<(String, Row)> {
    let rows: Vec<(String, i32, i64, Vec<f64>)> = sqlx::query_as(
        "SELECT a.tag, s.nodes, s.runs,
                ARRAY[s.weight, s.energy_sum, s.energy_sumsq, s.energy_min, s.energy_max,
                      s.power_sum, s.power_sumsq, s.power_min, s.power_max,
                      s.time_sum, s.time_sumsq, s.time_min, s.time_max]
         FROM run_stats s JOIN applications a ON a.id = s.app_id
         ORDER BY a.tag, s.nodes",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(tag, nodes, runs, values)| (tag, (nodes, runs, values)))
        .collect()
}

/// Runs of two applications at a few node counts, with varied quality and
/// values, ingested one by one and in batches, with duplicates.
async fn with_history(app: &TestApp) {
    let mut batch: Vec<Value> = Vec::new();
    for i in 0..60u32 {
        let tag = if i % 3 == 0 { "beta" } else { "alpha" };
        let nodes = [1, 2, 4, 8, 16][(i % 5) as usize];
        let mut r = run(tag, &format!("job-{i}"), nodes);
        let wobble = 1.0 + f64::from(i % 7) * 0.01;
        r["avg_power_w"] = json!(300.0 * nodes as f64 * wobble);
        r["energy_j"] = json!(300.0 * nodes as f64 * wobble * 600.0 / wobble.sqrt());
        r["quality"] = json!(0.25 + f64::from(i % 4) * 0.25);
        if i < 10 {
            app.ingest(&r).await;
        } else {
            batch.push(r);
        }
    }
    for chunk in batch.chunks(17) {
        let reply = app
            .post("/v1/runs/batch", &app.ingest, &json!({"runs": chunk}))
            .await;
        assert!(reply.status.is_success(), "{:#}", reply.body);
    }
    // Sent again: stored once, counted once.
    let reply = app
        .post(
            "/v1/runs/batch",
            &app.ingest,
            &json!({"runs": &batch[..20]}),
        )
        .await;
    assert_eq!(reply.body["duplicate"], 20, "{:#}", reply.body);
}

#[tokio::test]
async fn statistics_kept_by_writes_equal_the_migrations_backfill() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let kept = stats(&app).await;
    assert_eq!(kept.len(), 10, "two applications at five node counts");
    let runs: i64 = kept.iter().map(|(_, (_, runs, _))| runs).sum();
    assert_eq!(runs, app.run_count().await);

    sqlx::query("DELETE FROM run_stats")
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(backfill()))
        .execute(&app.pool)
        .await
        .unwrap();
    let rebuilt = stats(&app).await;
    assert_eq!(rebuilt.len(), kept.len());
    for ((tag, (nodes, runs, values)), (tag2, (nodes2, runs2, values2))) in
        kept.iter().zip(&rebuilt)
    {
        assert_eq!((tag, nodes, runs), (tag2, nodes2, runs2));
        for (a, b) in values.iter().zip(values2) {
            // Sums in another order: equal to rounding.
            assert!(
                (a - b).abs() <= 1e-12 * a.abs(),
                "{tag} {nodes}: {a} vs {b}"
            );
        }
    }
}

#[tokio::test]
async fn the_predictor_reads_the_statistics() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let reply = app.get("/v1/apps/alpha/model?metric=apc", &app.read).await;
    assert_eq!(reply.status, 200, "{:#}", reply.body);
    assert_eq!(reply.body["history"]["runs"], 40);
    assert_eq!(reply.body["history"]["node_counts"], 5);
    // The mean at each node count is the quality-weighted mean of its runs.
    let (sum, weight): (f64, f64) = sqlx::query_as(
        "SELECT sum(quality * avg_power_w), sum(quality) FROM runs r
         JOIN applications a ON a.id = r.app_id WHERE a.tag = 'alpha' AND nodes = 4",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let point = reply.body["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["nodes"] == 4)
        .unwrap();
    let mean = point["mean"].as_f64().unwrap();
    assert!(
        (mean - sum / weight).abs() <= 1e-9 * mean,
        "{mean} vs {}",
        sum / weight
    );
    assert_eq!(point["runs"], 8);
}

/// Runs stored without their statistics (by a replica that predates them,
/// during an upgrade) are noticed at the next fit and counted.
#[tokio::test]
async fn statistics_that_fell_behind_the_runs_are_rebuilt() {
    let app = TestApp::new().await;
    with_history(&app).await;
    let kept = stats(&app).await;
    // What an older replica would leave: runs and counts, no statistics.
    sqlx::query(
        "DELETE FROM run_stats WHERE app_id = (SELECT id FROM applications WHERE tag = 'alpha')
           AND nodes IN (4, 8)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let reply = app.get("/v1/apps/alpha/model?metric=tts", &app.read).await;
    assert_eq!(reply.status, 200, "{:#}", reply.body);
    assert_eq!(reply.body["history"]["runs"], 40);
    assert_eq!(reply.body["history"]["node_counts"], 5);
    let rebuilt = stats(&app).await;
    assert_eq!(rebuilt.len(), kept.len());
    for ((tag, (nodes, runs, values)), (_, (nodes2, runs2, values2))) in kept.iter().zip(&rebuilt) {
        assert_eq!((nodes, runs), (nodes2, runs2), "{tag}");
        for (a, b) in values.iter().zip(values2) {
            assert!(
                (a - b).abs() <= 1e-12 * a.abs(),
                "{tag} {nodes}: {a} vs {b}"
            );
        }
    }
}

//! The real ARCHER2 measurements through the API: every back-test question
//! of the real-data accuracy suite (docs/accuracy.md), its training runs
//! stored as an application of their own and asked over `GET
//! /v1/apps/{app}/predictions`, answers as the suite's "as served" column
//! computes them. The suite's figures are therefore what a client gets.

use std::path::Path;

use axum::http::StatusCode;
use serde_json::{Value, json};

use joulecast::accuracy::real::{self, DATASETS, Kind};

use crate::support::TestApp;

#[tokio::test]
async fn the_real_data_suite_grades_what_the_service_serves() {
    let app = TestApp::new().await;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/archer2");
    // OSU's 1,485 questions would take the test past a minute; the others
    // cover every family that answers there.
    let datasets: Vec<&str> = DATASETS
        .into_iter()
        .filter(|d| *d != "ofiucx_osu")
        .collect();
    let series = real::load(&fixtures, &datasets).unwrap();
    let mut asked = 0;
    for s in &series {
        // The fixtures give times only: TtS questions.
        for q in real::questions(s) {
            assert_eq!(q.metric, joulecast::domain::Metric::Tts);
            let Some((_, served)) = real::joulecast(&q.training, q.nodes) else {
                continue;
            };
            let kind = match q.kind {
                Kind::LeaveOneOut => "loo",
                Kind::Largest => "largest",
                Kind::Smallest => "smallest",
            };
            let tag = format!("{}-{}-{kind}-{}", s.dataset, s.config, q.nodes).replace('_', "-");
            let runs: Vec<Value> = q
                .training
                .iter()
                .enumerate()
                .map(|(i, run)| {
                    json!({
                        "app": tag,
                        "source": "archer2",
                        "job_id": format!("{tag}-{i}"),
                        "nodes": run.nodes,
                        "duration_s": run.value,
                        "avg_power_w": real::NODE_POWER_W * f64::from(run.nodes),
                    })
                })
                .collect();
            let reply = app
                .post("/v1/runs/batch", &app.ingest, &json!({ "runs": runs }))
                .await;
            assert_eq!(
                reply.body["created"],
                q.training.len(),
                "{tag}: {:#}",
                reply.body
            );
            let path = format!("/v1/apps/{tag}/predictions?nodes={}&metric=tts", q.nodes);
            let reply = app.get(&path, &app.read).await;
            assert_eq!(reply.status, StatusCode::OK, "{tag}: {:#}", reply.body);
            let answer = &reply.body["predictions"][0];
            let value = answer["value"].as_f64().unwrap();
            assert!(
                (value - served.value).abs() <= 1e-9 * served.value,
                "{tag}: served {value} over HTTP, {} by the suite (truth {})",
                served.value,
                q.truth
            );
            assert_eq!(
                answer["family"].as_str(),
                served.family.map(|f| f.as_str()),
                "{tag}"
            );
            asked += 1;
        }
    }
    // CASTEP 33, CP2K 6, NEMO 12, OpenSBLI 16, VASP 14, OpenSBLI by
    // frequency 6 (docs/accuracy.md): each configuration's interior counts,
    // its largest and its smallest.
    assert_eq!(asked, 87);
}

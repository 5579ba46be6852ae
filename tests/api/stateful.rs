//! A stateful property test (issue 13): random sequences of budget, cap,
//! job-start, finish, cancel, run, sacct-import and admission calls against
//! the real service, each followed by checks of what is stored against a
//! model of what should be:
//! - no answer is a 5xx, and each status is one the model allows;
//! - no run is lost or counted twice (the runs table against the model);
//! - the running jobs are exactly those started and not ended, in `/v1/jobs`
//!   and in the headroom;
//! - each budget's consumed energy is the sum of its account's runs, and its
//!   remaining energy is the limit less consumed and committed;
//! - a cap's headroom is its limit less the draw.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::{Method, StatusCode};
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{Reply, TestApp, run};

const JOBS: usize = 8;
const ACCOUNTS: [&str; 2] = ["acct-a", "acct-b"];
const SOURCE: &str = "clusterA";
/// Runs of `lin` stored before each sequence (keys h1 to h16, no account).
const HISTORY: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Budget {
        account: usize,
        limit_mj: u32,
    },
    Cap {
        limit_kw: Option<u32>,
    },
    Start {
        job: usize,
        account: usize,
        nodes: i64,
        force: bool,
        late: bool,
    },
    Finish {
        job: usize,
        apc_w: u32,
        secs: u32,
    },
    Cancel {
        job: usize,
    },
    Run {
        job: usize,
        account: usize,
        nodes: i64,
        energy_mj: u32,
    },
    Import {
        lines: Vec<(usize, usize, i64, u32)>,
        /// Lines that ended two hours ago, before any start sent here:
        /// of a running job, an earlier attempt's, which leaves it running.
        old: bool,
    },
    Admission {
        account: usize,
        nodes: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let job = 0..JOBS;
    let account = 0..ACCOUNTS.len();
    prop_oneof![
        1 => (account.clone(), prop::sample::select(vec![2u32, 5, 50]))
            .prop_map(|(account, limit_mj)| Op::Budget { account, limit_mj }),
        1 => prop::option::of(prop::sample::select(vec![3u32, 8, 100]))
            .prop_map(|limit_kw| Op::Cap { limit_kw }),
        4 => (job.clone(), account.clone(), 1..5i64, any::<bool>(), prop::bool::weighted(0.2)).prop_map(
            |(job, account, nodes, force, late)| Op::Start { job, account, nodes, force, late }
        ),
        3 => (job.clone(), 500..3000u32, 1..600u32)
            .prop_map(|(job, apc_w, secs)| Op::Finish { job, apc_w, secs }),
        1 => (job.clone()).prop_map(|job| Op::Cancel { job }),
        2 => (job.clone(), account.clone(), 1..5i64, 1..4u32).prop_map(
            |(job, account, nodes, energy_mj)| Op::Run { job, account, nodes, energy_mj }
        ),
        1 => (prop::collection::vec((job, account.clone(), 1..5i64, 1..4u32), 1..4), any::<bool>())
            .prop_map(|(lines, old)| Op::Import { lines, old }),
        1 => (account, 1..5i64).prop_map(|(account, nodes)| Op::Admission { account, nodes }),
    ]
}

/// What the service should hold.
#[derive(Debug, Default)]
struct Model {
    /// Runs of the jobs' keys: job → (account, energy in J).
    runs: BTreeMap<usize, (String, f64)>,
    /// Their power in W and duration in s, as stored.
    measured: BTreeMap<usize, (f64, f64)>,
    /// Running jobs: job → (account, the start sent, when one was).
    running: BTreeMap<usize, (String, Option<DateTime<Utc>>)>,
    /// Jobs whose end was reported while they were not running, or that
    /// were removed while running.
    ended: BTreeSet<usize>,
    budgets: BTreeMap<String, f64>,
    cap_w: Option<f64>,
}

fn job_id(job: usize) -> String {
    format!("{}", 100 + job)
}

fn allowed(reply: &Reply, statuses: &[StatusCode], op: &Op) {
    assert!(
        reply.status.as_u16() < 500,
        "{op:?}: {} {:#}",
        reply.status,
        reply.body
    );
    assert!(
        statuses.contains(&reply.status),
        "{op:?}: {} not in {statuses:?}: {:#}",
        reply.status,
        reply.body
    );
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

async fn apply(app: &TestApp, model: &mut Model, op: &Op) {
    match op {
        Op::Budget { account, limit_mj } => {
            let now = Utc::now();
            let limit_j = f64::from(*limit_mj) * 1e6;
            let body = json!({"limit_j": limit_j, "period": "custom",
                              "starts_at": (now - Duration::days(10)).to_rfc3339(),
                              "ends_at": (now + Duration::days(10)).to_rfc3339()});
            let reply = app
                .put(
                    &format!("/v1/budgets/{}", ACCOUNTS[*account]),
                    &app.admin,
                    &body,
                )
                .await;
            allowed(&reply, &[StatusCode::OK, StatusCode::CREATED], op);
            model.budgets.insert(ACCOUNTS[*account].to_owned(), limit_j);
        }
        Op::Cap { limit_kw: Some(kw) } => {
            let limit_w = f64::from(*kw) * 1e3;
            let reply = app
                .put(
                    "/v1/power-caps/site",
                    &app.admin,
                    &json!({"limit_w": limit_w}),
                )
                .await;
            allowed(&reply, &[StatusCode::OK, StatusCode::CREATED], op);
            model.cap_w = Some(limit_w);
        }
        Op::Cap { limit_kw: None } => {
            let reply = app
                .call(
                    Method::DELETE,
                    "/v1/power-caps/site",
                    Some(&app.admin),
                    None,
                )
                .await;
            let expected = if model.cap_w.is_some() {
                StatusCode::NO_CONTENT
            } else {
                StatusCode::NOT_FOUND
            };
            allowed(&reply, &[expected], op);
            model.cap_w = None;
        }
        Op::Start {
            job,
            account,
            nodes,
            force,
            late,
        } => {
            let mut body = json!({"source": SOURCE, "job_id": job_id(*job), "app": "lin",
                                  "nodes": nodes, "account": ACCOUNTS[*account], "force": force});
            // A start that was sent an hour ago and arrives only now.
            let sent = late.then(|| Utc::now() - Duration::hours(1));
            if let Some(started_at) = sent {
                body["started_at"] = json!(started_at.to_rfc3339());
            }
            let reply = app.post("/v1/jobs", &app.schedule, &body).await;
            // A start dated after the running attempt's sent start is a
            // requeue: decided anew, and the earlier attempt kept if refused.
            // Without a start sent, the running one began later than this
            // (an hour ago) one.
            let requeue = model.running.get(job).is_some_and(|(_, before)| {
                sent.is_some_and(|now| before.is_some_and(|before| now > before))
            });
            if model.runs.contains_key(job) {
                allowed(&reply, &[StatusCode::CONFLICT], op);
                assert!(
                    reply.error_fields().contains(&"job_id".to_owned()),
                    "{op:?}"
                );
            } else if model.running.contains_key(job) && !requeue {
                allowed(&reply, &[StatusCode::OK], op);
            } else if *late && model.ended.contains(job) {
                allowed(&reply, &[StatusCode::CONFLICT], op);
                assert!(
                    reply.error_fields().contains(&"job_id".to_owned()),
                    "{op:?}"
                );
            } else {
                // Nothing can refuse a job forced, or one under no cap and no budget.
                let free = *force
                    || (model.cap_w.is_none() && !model.budgets.contains_key(ACCOUNTS[*account]));
                if free {
                    allowed(&reply, &[StatusCode::CREATED], op);
                } else {
                    allowed(&reply, &[StatusCode::CREATED, StatusCode::CONFLICT], op);
                }
                if reply.status == StatusCode::CREATED {
                    model
                        .running
                        .insert(*job, (ACCOUNTS[*account].to_owned(), sent));
                } else {
                    assert_eq!(reply.body["admission"]["admit"], false, "{op:?}");
                }
            }
        }
        Op::Finish { job, apc_w, secs } => {
            let body = json!({"avg_power_w": apc_w, "duration_s": secs});
            let path = format!("/v1/jobs/{SOURCE}/{}/finish", job_id(*job));
            let reply = app.post(&path, &app.schedule, &body).await;
            if let Some((account, _)) = model.running.remove(job) {
                allowed(&reply, &[StatusCode::OK], op);
                assert_eq!(reply.body["status"], "finished", "{op:?}");
                let energy = f64::from(*apc_w) * f64::from(*secs);
                model.runs.insert(*job, (account, energy));
                model
                    .measured
                    .insert(*job, (f64::from(*apc_w), f64::from(*secs)));
            } else if let Some(&(power, duration)) = model.measured.get(job) {
                // What differs from the stored run is a conflict naming it.
                let differ =
                    |sent: u32, stored: f64| (f64::from(sent) - stored).abs() > 1e-9 * stored;
                let differing: Vec<&str> = [
                    ("avg_power_w", differ(*apc_w, power)),
                    ("duration_s", differ(*secs, duration)),
                ]
                .into_iter()
                .filter_map(|(field, differs)| differs.then_some(field))
                .collect();
                if differing.is_empty() {
                    allowed(&reply, &[StatusCode::OK], op);
                    assert_eq!(reply.body["status"], "already_finished", "{op:?}");
                } else {
                    allowed(&reply, &[StatusCode::CONFLICT], op);
                    assert_eq!(reply.error_fields(), differing, "{op:?}: {:#}", reply.body);
                }
            } else {
                allowed(&reply, &[StatusCode::NOT_FOUND], op);
                model.ended.insert(*job);
            }
        }
        Op::Cancel { job } => {
            let path = format!("/v1/jobs/{SOURCE}/{}", job_id(*job));
            let reply = app
                .call(Method::DELETE, &path, Some(&app.schedule), None)
                .await;
            // Either way its end is remembered.
            if model.running.remove(job).is_some() {
                allowed(&reply, &[StatusCode::NO_CONTENT], op);
            } else {
                allowed(&reply, &[StatusCode::NOT_FOUND], op);
            }
            model.ended.insert(*job);
        }
        Op::Run {
            job,
            account,
            nodes,
            energy_mj,
        } => {
            let mut body = run("lin", &job_id(*job), *nodes);
            body["source"] = json!(SOURCE);
            body["account"] = json!(ACCOUNTS[*account]);
            let energy = f64::from(*energy_mj) * 1e6;
            body["energy_j"] = json!(energy);
            body["avg_power_w"] = json!(energy / 600.0);
            let reply = app.post("/v1/runs", &app.ingest, &body).await;
            if model.runs.contains_key(job) {
                // The same values again, or other values: nothing stored.
                allowed(&reply, &[StatusCode::OK, StatusCode::CONFLICT], op);
            } else {
                allowed(&reply, &[StatusCode::CREATED], op);
                model
                    .runs
                    .insert(*job, (ACCOUNTS[*account].to_owned(), energy));
                model.measured.insert(*job, (energy / 600.0, 600.0));
                model.running.remove(job);
            }
        }
        Op::Import { lines, old } => {
            // Ending a minute from now, after any start sent here (now, or
            // an hour ago), they end the running attempts; ending two hours
            // ago, before any, they are earlier attempts' runs.
            let start = if *old {
                Utc::now() - Duration::hours(2)
            } else {
                Utc::now() - Duration::seconds(540)
            };
            let time = |t: chrono::DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
            let mut text = "JobID|JobName|Account|Partition|NNodes|NodeList|State|Start|End|\
                            ElapsedRaw|ConsumedEnergyRaw|Cluster\n"
                .to_owned();
            for (job, account, nodes, energy_mj) in lines {
                text += &format!(
                    "{}|lin|{}|batch|{nodes}|cn[001-{:03}]|COMPLETED|{}|{}|600|{}|{SOURCE}\n",
                    job_id(*job),
                    ACCOUNTS[*account],
                    nodes,
                    time(start),
                    time(start + Duration::seconds(600)),
                    u64::from(*energy_mj) * 1_000_000,
                );
            }
            let request = axum::http::Request::post(format!("/v1/import/sacct?source={SOURCE}"))
                .header("authorization", format!("Bearer {}", app.ingest))
                .header("content-type", "text/plain")
                .body(axum::body::Body::from(text))
                .unwrap();
            let reply = app.send(request).await;
            allowed(&reply, &[StatusCode::OK], op);
            // The first line of each job not yet a run creates it, unless
            // it is an earlier attempt's of a job running.
            let mut created = 0;
            for (job, account, _, energy_mj) in lines {
                let earlier = *old && model.running.contains_key(job);
                if !(model.runs.contains_key(job) || earlier) {
                    let energy = f64::from(*energy_mj) * 1e6;
                    model
                        .runs
                        .insert(*job, (ACCOUNTS[*account].to_owned(), energy));
                    model.measured.insert(*job, (energy / 600.0, 600.0));
                    model.running.remove(job);
                    created += 1;
                }
            }
            assert_eq!(reply.body["created"], created, "{op:?}: {:#}", reply.body);
        }
        Op::Admission { account, nodes } => {
            let body = json!({"app": "lin", "nodes": nodes, "account": ACCOUNTS[*account]});
            let reply = app.post("/v1/admission", &app.schedule, &body).await;
            allowed(&reply, &[StatusCode::OK], op);
            if model.cap_w.is_none() && !model.budgets.contains_key(ACCOUNTS[*account]) {
                assert_eq!(reply.body["admit"], true, "{op:?}: {:#}", reply.body);
            }
        }
    }
}

fn ids(items: &Value, key: &str) -> BTreeSet<String> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j[key].as_str().unwrap().to_owned())
        .collect()
}

async fn check(app: &TestApp, model: &Model, after: &Op) {
    assert_eq!(
        app.run_count().await,
        (HISTORY + model.runs.len()) as i64,
        "runs after {after:?}"
    );
    let running: BTreeSet<String> = model.running.keys().map(|j| job_id(*j)).collect();
    let jobs = app.get("/v1/jobs", &app.read).await;
    assert_eq!(jobs.status, StatusCode::OK);
    assert_eq!(
        ids(&jobs.body["items"], "job_id"),
        running,
        "jobs after {after:?}"
    );

    let headroom = app.get("/v1/power/headroom", &app.read).await;
    assert_eq!(headroom.status, StatusCode::OK, "{:#}", headroom.body);
    assert_eq!(
        ids(&headroom.body["jobs"], "job_id"),
        running,
        "headroom after {after:?}"
    );
    let draw = headroom.body["draw_w"].as_f64().unwrap();
    match model.cap_w {
        Some(limit) => {
            let room = headroom.body["headroom_w"].as_f64().unwrap();
            assert!(close(room, limit - draw), "{after:?}: {:#}", headroom.body);
        }
        None => assert!(headroom.body["headroom_w"].is_null()),
    }

    for (account, limit) in &model.budgets {
        let budget = app.get(&format!("/v1/budgets/{account}"), &app.read).await;
        assert_eq!(budget.status, StatusCode::OK, "{:#}", budget.body);
        let b = &budget.body;
        let consumed: f64 = model
            .runs
            .values()
            .filter(|(a, _)| a == account)
            .map(|(_, e)| e)
            .sum();
        let number = |key: &str| b[key].as_f64().unwrap();
        assert!(
            close(number("consumed_j"), consumed),
            "{account} after {after:?}: {b:#}"
        );
        let committed = number("committed_j");
        let jobs = app
            .get(&format!("/v1/jobs?account={account}"), &app.read)
            .await;
        // Each job commits its whole predicted EtS, more if it has run past
        // its predicted TtS (at its predicted power): at most what the time
        // run until now gives, read after the budget.
        let now = chrono::Utc::now();
        let (mut least, mut most) = (0.0, 0.0);
        for j in jobs.body["items"].as_array().unwrap() {
            let ets = j["predicted_ets_j"].as_f64().unwrap();
            let tts = j["predicted_tts_s"].as_f64().unwrap();
            let started: chrono::DateTime<chrono::Utc> =
                j["started_at"].as_str().unwrap().parse().unwrap();
            let run_s = (now - started).as_seconds_f64();
            least += ets;
            most += ets * (run_s / tts).max(1.0);
        }
        assert!(
            committed >= least * (1.0 - 1e-9) && committed <= most * (1.0 + 1e-9),
            "{least} to {most}: {b:#}"
        );
        assert!(
            close(
                number("remaining_j"),
                limit - number("consumed_j") - committed
            ),
            "{b:#}"
        );
    }
}

async fn sequence(ops: Vec<Op>) {
    let app = TestApp::new().await;
    for n in [1, 2, 4, 8, 16] {
        app.ingest(&run("lin", &format!("h{n}"), n)).await;
    }
    let mut model = Model::default();
    for op in &ops {
        apply(&app, &mut model, op).await;
        check(&app, &model, op).await;
    }
}

#[test]
fn long_sequences_of_writes_keep_the_books() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = ProptestConfig {
        cases: 12,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(op(), 20..60))| {
        runtime.block_on(sequence(ops));
    });
}

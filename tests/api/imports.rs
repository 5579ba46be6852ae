//! Slurm accounting import over HTTP and from the command line, on the
//! committed fixtures (tests/fixtures/sacct, whose README lists every line).

use std::process::{Command, Stdio};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;

use crate::support::{Reply, TestApp, fresh_database_url};

const CLUSTER: &str = include_str!("../fixtures/sacct/cluster.txt");
const REORDERED: &str = include_str!("../fixtures/sacct/reordered.txt");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sacct/cluster.txt"
);

async fn import(app: &TestApp, query: &str, token: &str, text: &str) -> Reply {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/v1/import/sacct{query}"))
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(text.to_owned()))
        .unwrap();
    app.send(request).await
}

fn skipped_lines(summary: &Value) -> Vec<u64> {
    summary["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["line"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_cluster_s_accounting_becomes_history_once() {
    let app = TestApp::new().await;
    let reply = import(&app, "", &app.ingest, CLUSTER).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    let s = &reply.body;
    assert_eq!(s["lines"], 44, "{s:#}");
    assert_eq!(s["created"], 11);
    assert_eq!(s["duplicate"], 0);
    assert_eq!(s["steps"], 26);
    assert_eq!(skipped_lines(s), vec![22, 23, 24, 26, 27, 30, 31]);
    let reasons = s["skipped"].to_string();
    for expected in [
        "state FAILED is not imported",
        "state CANCELLED is not imported",
        "NNodes is 0",
        "has 11 fields, the header has 12",
    ] {
        assert!(reasons.contains(expected), "{expected}: {reasons}");
    }
    assert_eq!(app.run_count().await, 11);

    // The runs are the jobs: source from the Cluster field, hostlists
    // expanded, the extern step's energy folded into job 81005.
    let runs = app.get("/v1/apps/lammps/runs", &app.read).await;
    assert_eq!(runs.status, StatusCode::OK, "{:#}", runs.body);
    let items = runs.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 4);
    let job = items.iter().find(|r| r["job_id"] == "81001").unwrap();
    assert_eq!(job["source"], "hawk");
    assert_eq!(job["nodes"], 4);
    assert_eq!(job["node_list"][3], "cn004");
    let gromacs = app.get("/v1/apps/gromacs/runs", &app.read).await;
    let folded = gromacs.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job_id"] == "81005")
        .cloned()
        .unwrap();
    assert_eq!(folded["energy_j"], 3_696_000.0);
    // History enough to predict from.
    let p = app
        .get("/v1/apps/lammps/predictions?nodes=16&metric=ets", &app.read)
        .await;
    assert_eq!(p.status, StatusCode::OK, "{:#}", p.body);

    // Importing again adds nothing.
    let again = import(&app, "", &app.ingest, CLUSTER).await;
    assert_eq!(again.body["created"], 0, "{:#}", again.body);
    assert_eq!(again.body["duplicate"], 11);
    assert_eq!(app.run_count().await, 11);

    // TIMEOUT jobs too, when asked for: one more run (line 27).
    let more = import(&app, "?states=COMPLETED,timeout", &app.ingest, CLUSTER).await;
    assert_eq!(more.body["created"], 1, "{:#}", more.body);
    assert!(!skipped_lines(&more.body).contains(&27));
}

#[tokio::test]
async fn the_application_can_come_from_another_field() {
    let app = TestApp::new().await;
    let by_name = import(&app, "?source=test", &app.ingest, REORDERED).await;
    assert_eq!(by_name.status, StatusCode::OK, "{:#}", by_name.body);
    assert_eq!(by_name.body["created"], 4);
    let app2 = TestApp::new().await;
    let by_comment = import(&app2, "?app_from=comment", &app2.ingest, REORDERED).await;
    assert_eq!(by_comment.body["created"], 3, "{:#}", by_comment.body);
    assert!(
        by_comment.body["skipped"]
            .to_string()
            .contains("Comment is empty")
    );
    assert_ne!(by_name.body["apps"], by_comment.body["apps"]);
}

#[tokio::test]
async fn bad_imports_are_refused_naming_the_parameter() {
    let app = TestApp::new().await;
    for (query, field) in [
        ("?app_from=title", "app_from"),
        ("?utc_offset=CET", "utc_offset"),
        ("?states=COMPLETED,,", "states"),
        // A state sacct never writes (a typo) would skip every job.
        ("?states=FOO", "states"),
        ("?states=COMPLETED,TIMEOUTS", "states"),
        // A job still running has no final time or energy, and a run once
        // stored is not replaced by its real end.
        ("?states=RUNNING,COMPLETED", "states"),
        ("?states=suspended", "states"),
        ("?source=a%20b", "source"),
    ] {
        import(&app, query, &app.ingest, CLUSTER)
            .await
            .assert_field_error(StatusCode::BAD_REQUEST, field);
    }
    // No usable header: nothing is read.
    import(&app, "", &app.ingest, "JobID|JobName|NNodes\n1|a|1\n")
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "body");
    import(&app, "", &app.ingest, "")
        .await
        .assert_field_error(StatusCode::UNPROCESSABLE_ENTITY, "body");
    import(&app, "", &app.read, CLUSTER)
        .await
        .assert_problem(StatusCode::FORBIDDEN);
    assert_eq!(app.run_count().await, 0);
}

/// The node lists of one import name at most 200,000 nodes in all, like a
/// run batch's: a few bytes of hostlist (`n[000000-099999]`) each naming
/// 100,000 took a probe's service to 1 GB. Past the budget it is 413, as
/// for a body too large (the shipped import script then halves it), and
/// nothing is stored; at the budget it is taken.
#[tokio::test]
async fn an_import_naming_too_many_nodes_is_refused_whole() {
    let app = TestApp::new().await;
    let sacct = |lines: &[(u32, &str, u32)]| {
        let mut text =
            String::from("JobID|JobName|NNodes|NodeList|State|ElapsedRaw|ConsumedEnergyRaw\n");
        for (job, list, nodes) in lines {
            text.push_str(&format!(
                "{job}|wide|{nodes}|{list}|COMPLETED|1000|{}\n",
                1_000_000 + job
            ));
        }
        text
    };
    let over = sacct(&[
        (1, "n[000000-099999]", 100_000),
        (2, "m[000000-099999]", 100_000),
        (3, "k1", 1),
    ]);
    let reply = import(&app, "", &app.ingest, &over).await;
    reply.assert_problem(StatusCode::PAYLOAD_TOO_LARGE);
    let detail = reply.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("200001 nodes") && detail.contains("200000"),
        "{detail}"
    );
    assert_eq!(app.run_count().await, 0);

    let within = sacct(&[
        (1, "n[000000-099999]", 100_000),
        (2, "m[000000-099999]", 100_000),
    ]);
    let reply = import(&app, "", &app.ingest, &within).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["created"], 2, "{:#}", reply.body);
    assert_eq!(app.run_count().await, 2);

    // A list longer than any one run may have is that run's fault alone: it
    // is skipped, and the rest is imported.
    let one_bad = sacct(&[(4, "z[0000000-0999999]", 1_000_000), (5, "k2", 1)]);
    let reply = import(&app, "", &app.ingest, &one_bad).await;
    assert_eq!(reply.status, StatusCode::OK, "{:#}", reply.body);
    assert_eq!(reply.body["created"], 1, "{:#}", reply.body);
    assert_eq!(skipped_lines(&reply.body), [2], "{:#}", reply.body);
    assert_eq!(app.run_count().await, 3);
}

#[tokio::test]
async fn the_command_line_imports_a_file_and_standard_input() {
    let url = fresh_database_url().await;
    let bin = env!("CARGO_BIN_EXE_joulecast");
    let output = Command::new(bin)
        .args(["import", "sacct", FIXTURE, "--database-url", &url])
        .env("JOULECAST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("44 lines: 11 runs stored, 0 already stored, 7 skipped, 26 job steps"),
        "{stdout}"
    );
    assert!(stdout.contains("line 24 (81008): state FAILED"), "{stdout}");

    // Again, from standard input: nothing new.
    let mut child = Command::new(bin)
        .args(["import", "sacct", "-", "--database-url", &url])
        .env("JOULECAST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(CLUSTER.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.starts_with("44 lines: 0 runs stored, 11 already stored"),
        "{stdout}"
    );

    // The command line checks states as the endpoint does.
    let output = Command::new(bin)
        .args([
            "import",
            "sacct",
            FIXTURE,
            "--states",
            "COMPLETED,,",
            "--database-url",
            &url,
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--states"));

    // A file without a header is an error, not a silent nothing.
    let output = Command::new(bin)
        .args(["import", "sacct", "/dev/null", "--database-url", &url])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("empty"));
}

/// The command line imports a file a part at a time, cut before job lines:
/// one data line per part stores what the whole file stores (energies taken
/// from steps included), with the same summary and the file's line numbers,
/// also in reasons. A JobID's records on consecutive lines stay in one part
/// (the second is a repeat, as in the whole). Only the first skipped lines
/// are listed, all are counted.
#[tokio::test]
async fn the_command_line_imports_in_parts_as_a_whole() {
    let bin = env!("CARGO_BIN_EXE_joulecast");
    // 81004 again, right after its first record's steps.
    let text = CLUSTER.replacen(
        "4567_1|",
        "81004|cp2k|chem01|compute|1|cn005|COMPLETED|2026-03-02T11:40:00|\
         2026-03-02T11:55:00|900|468000|hawk\n4567_1|",
        1,
    );
    let file = std::env::temp_dir().join(format!("jc-parts-{}.txt", std::process::id()));
    std::fs::write(&file, &text).unwrap();
    let mut stored = Vec::new();
    for (per_part, show) in [("50000", "100"), ("1", "100"), ("1", "2")] {
        let url = fresh_database_url().await;
        let output = Command::new(bin)
            .args(["import", "sacct"])
            .arg(&file)
            .args(["--database-url", &url, "--lines-per-segment", per_part])
            .args(["--show-skipped", show])
            .env("JOULECAST_LOG", "warn")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let runs: Vec<(String, String, i32, f64, f64)> = sqlx::query_as(
            "SELECT source, job_id, nodes, energy_j, avg_power_w FROM runs ORDER BY source, job_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        stored.push((stdout, runs));
    }
    std::fs::remove_file(&file).unwrap();
    let (whole, parts, short) = (&stored[0], &stored[1], &stored[2]);
    assert!(
        whole
            .0
            .starts_with("45 lines: 11 runs stored, 0 already stored, 8 skipped, 26 job steps"),
        "{}",
        whole.0
    );
    assert!(
        whole
            .0
            .contains("line 16 (81004): JobID 81004 appears again (first on line 14)"),
        "{}",
        whole.0
    );
    assert_eq!(parts.0, whole.0);
    assert!(
        parts.0.contains("line 25 (81008): state FAILED"),
        "{}",
        parts.0
    );
    assert_eq!(parts.1.len(), 11);
    assert_eq!(parts.1, whole.1);
    // 81005's energy is its extern step's, on the next line.
    assert!(
        parts.1.iter().any(|r| r.1 == "81005" && r.3 == 3_696_000.0),
        "{:?}",
        parts.1
    );
    // Two listed, eight counted.
    let listed: Vec<&str> = short.0.lines().skip(1).collect();
    assert_eq!(listed.len(), 3, "{}", short.0);
    assert_eq!(
        listed[..2],
        whole.0.lines().skip(1).take(2).collect::<Vec<_>>()[..]
    );
    assert_eq!(listed[2], "  ... and 6 more");
    assert_eq!(short.0.lines().next(), whole.0.lines().next());
}

/// A line that is not UTF-8 stops the command line's import there: what
/// came before it is imported and summed up, whatever the part size, and
/// the error names the line; the exit status is a failure.
#[tokio::test]
async fn the_command_line_stops_at_an_unreadable_line_and_says_which() {
    let bin = env!("CARGO_BIN_EXE_joulecast");
    let good = |job: u32| {
        format!(
            "{job}|lammps|chem01|compute|1|cn001|COMPLETED|2026-03-02T08:00:00|2026-03-02T09:00:00|3600|360000|hawk\n"
        )
    };
    let mut bytes = CLUSTER.lines().next().unwrap().as_bytes().to_vec();
    bytes.push(b'\n');
    bytes.extend(good(100).as_bytes());
    bytes.extend(good(200).as_bytes());
    bytes.extend(good(300).replace("lammps", "lamm\u{1}ps").as_bytes());
    let bad = bytes.iter().rposition(|&b| b == 1).unwrap();
    bytes[bad] = 0xff;
    bytes.extend(good(400).as_bytes());
    let file = std::env::temp_dir().join(format!("jc-unreadable-{}.txt", std::process::id()));
    std::fs::write(&file, &bytes).unwrap();
    for per_part in ["50000", "1"] {
        let url = fresh_database_url().await;
        let output = Command::new(bin)
            .args(["import", "sacct"])
            .arg(&file)
            .args(["--database-url", &url, "--lines-per-segment", per_part])
            .env("JOULECAST_LOG", "warn")
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        assert!(!output.status.success(), "{stdout}{stderr}");
        assert!(
            stdout.starts_with("2 lines: 2 runs stored, 0 already stored, 0 skipped"),
            "{per_part}: {stdout}{stderr}"
        );
        assert!(stderr.contains("line 4 of"), "{stderr}");
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let jobs: Vec<String> = sqlx::query_scalar("SELECT job_id FROM runs ORDER BY job_id")
            .fetch_all(&pool)
            .await
            .unwrap();
        pool.close().await;
        assert_eq!(jobs, ["100", "200"], "{per_part}");
    }
    std::fs::remove_file(&file).unwrap();
}

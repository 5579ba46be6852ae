//! Schemathesis (from PyPI) fuzzes every operation of the served OpenAPI
//! document against a populated service (issue 13): no 5xx, only documented
//! status codes, content types and headers, bodies that match their schemas,
//! and the authentication and method checks; then its stateful phase follows
//! the links between operations. `tests/schemathesis/hooks.py` repairs
//! the bodies of the write endpoints (runs, jobs, unreserved starts) where
//! a schema cannot say their rules, so that writes are accepted and stored
//! too. `tests/schemathesis/run.sh` runs the same against the binary, with
//! more examples.
//!
//! Needs `python3` with `venv`; the first run installs schemathesis into a
//! virtual environment under `target/` (about 10 s).

use std::path::{Path, PathBuf};

use crate::support::TestApp;

const VERSION: &str = "4.32.5";
const HERE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis");

async fn run(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> std::process::Output {
    run_with(program, args, &[]).await
}

async fn run_with(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    envs: &[(&str, &str)],
) -> std::process::Output {
    let output = tokio::process::Command::new(&program)
        .args(args)
        .envs(envs.iter().copied())
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {:?}: {e} (the fuzzing test needs python3 with venv: \
                 apt-get install python3-venv)",
                program.as_ref()
            )
        });
    assert!(
        output.status.success(),
        "{:?} {args:?} failed:\n{}\n{}",
        program.as_ref(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The schemathesis program, installed first if needed.
async fn schemathesis() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("schemathesis-{VERSION}"));
    let program = venv.join("bin/schemathesis");
    if !program.exists() {
        let venv = venv.to_str().unwrap();
        run("python3", &["-m", "venv", venv]).await;
        let pip = format!("{venv}/bin/pip");
        run(
            &pip,
            &["install", "-q", &format!("schemathesis=={VERSION}")],
        )
        .await;
    }
    program
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fuzzer_finds_nothing_wrong_on_a_populated_database() {
    let program = schemathesis().await;
    let _turn = crate::support::REFUSED_VALUES.lock().await;
    let app = TestApp::new().await;
    let before = refused(&app).await;
    let url = app.serve().await;
    run(
        "python3",
        &[&format!("{HERE}/populate.py"), &url, &app.admin],
    )
    .await;
    let auth = format!("Authorization: Bearer {}", app.admin);
    let hooks = format!("{HERE}/hooks.py");
    let output = run_with(
        &program,
        &[
            "--config-file",
            &format!("{HERE}/schemathesis.toml"),
            "run",
            &format!("{url}/openapi.json"),
            "-H",
            &auth,
            "--checks",
            "all",
            // Rules a JSON schema cannot say (node_list length equal to nodes,
            // end after start, opaque cursors) and the batch endpoints'
            // documented per-item answers (200 with rejected items).
            "--exclude-checks",
            "positive_data_acceptance,negative_data_rejection",
            // The fuzzer would revoke its own token.
            "--exclude-method",
            "DELETE",
            "--max-examples",
            "25",
            "--seed",
            "1",
            "--no-color",
        ],
        // Bodies of runs, jobs and unreserved starts brought within the
        // rules a schema cannot say, so that writes are accepted too.
        &[("SCHEMATHESIS_HOOKS", &hooks)],
    )
    .await;
    let report = String::from_utf8_lossy(&output.stdout);
    // It ran every phase and every operation it was given.
    for phase in ["Examples", "Coverage", "Fuzzing", "Stateful"] {
        assert!(report.contains(phase), "{report}");
    }
    assert!(report.contains("Tested: 44"), "{report}");
    assert!(!report.contains('❌'), "{report}");
    // The write paths were fuzzed, not only their refusals: the hooks give
    // every other body a job id of its own (`-fz` and a count).
    let stored: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM runs WHERE job_id LIKE '%-fz%'), \
                (SELECT count(*) FROM jobs WHERE job_id LIKE '%-fz%'), \
                (SELECT count(*) FROM unreserved_jobs WHERE job_id LIKE '%-fz%')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let (runs, jobs, unreserved) = stored;
    assert!(
        runs > 0 && jobs > 0 && unreserved > 0,
        "stored by the fuzzer: {runs} runs, {jobs} running jobs, {unreserved} \
         unreserved starts\n{report}"
    );
    // A value that passed validation but not PostgreSQL is answered with a
    // documented 400, which the fuzzer accepts; the service counts it.
    let after = refused(&app).await;
    assert_eq!(
        after - before,
        0.0,
        "values reached the database unvalidated (db_values_refused_total)"
    );
}

/// `db_values_refused_total` as the process's metrics give it (0 before
/// anything was counted).
async fn refused(app: &TestApp) -> f64 {
    let reply = app
        .call(axum::http::Method::GET, "/metrics", None, None)
        .await;
    let serde_json::Value::String(metrics) = reply.body else {
        panic!("text expected from /metrics")
    };
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("db_values_refused_total "))
        .map(|value| value.trim().parse::<f64>().expect("a counter's value"))
        .sum()
}

//! `deploy/slurm/sacct-import.sh` against the real service, with a stand-in
//! `sacct` that prints a fixture (issue 13, finding 5): a window larger than
//! the service accepts is posted in halves until it passes, rather than
//! retried unchanged for ever, and a service that stays unavailable ends the
//! run after a bounded number of retries, with the window kept for the next.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use joulecast::http::{self, Settings};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::support::{TestApp, fresh_pool};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sacct/cluster.txt"
);
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/slurm/sacct-import.sh");

/// A configured import: its settings file and its state directory.
struct Import {
    dir: tempfile::TempDir,
}

impl Import {
    fn new(url: &str, token: &str, extra: &str) -> Import {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("token"), format!("{token}\n")).unwrap();
        let sacct = path("sacct");
        // The fixture, its fields apart by the delimiter asked for, as
        // sacct --parsable2 --delimiter prints them.
        std::fs::write(
            &sacct,
            format!(
                "#!/bin/sh\nd='|'\nfor a in \"$@\"; do case $a in --delimiter=*) d=${{a#--delimiter=}};; esac; done\n\
                 exec sed \"s/|/$d/g\" '{FIXTURE}'\n"
            ),
        )
        .unwrap();
        set_executable(&sacct);
        std::fs::create_dir(path("state")).unwrap();
        let conf = format!(
            "JOULECAST_URL={url}\nJOULECAST_INGEST_TOKEN_FILE={}\nJOULECAST_SOURCE=hawk\n\
             JOULECAST_SACCT={}\nJOULECAST_STATE_DIR={}\n{extra}\n",
            path("token").display(),
            sacct.display(),
            path("state").display(),
        );
        std::fs::write(path("joulecast-slurm.conf"), conf).unwrap();
        Import { dir }
    }

    /// One run of the script, as the timer would start it.
    async fn run(&self) -> Output {
        self.run_with(&[]).await
    }

    /// One run, with these settings in its environment too.
    async fn run_with(&self, environment: &[(&str, &str)]) -> Output {
        let conf = self.dir.path().join("joulecast-slurm.conf");
        tokio::process::Command::new("bash")
            .arg(SCRIPT)
            .envs(environment.iter().copied())
            .env("JOULECAST_SLURM_CONF", conf)
            // As under systemd: messages on standard error only, not syslog.
            .env("INVOCATION_ID", "test")
            .kill_on_drop(true)
            .output()
            .await
            .unwrap()
    }

    fn state(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join("state/last-end")).ok()
    }
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The runs that the fixture gives when imported in one piece.
async fn runs_in_one_piece() -> i64 {
    let whole = TestApp::new().await;
    let url = whole.serve().await;
    let import = Import::new(&url, &whole.ingest, "");
    let output = import.run().await;
    assert!(output.status.success(), "{}", stderr(&output));
    let runs = whole.run_count().await;
    assert!(runs >= 10, "the fixture gave only {runs} runs");
    runs
}

#[tokio::test]
async fn a_window_too_large_for_the_service_is_posted_in_halves() {
    let expected = runs_in_one_piece().await;
    // The fixture is 4.6 KiB: the service takes at most 1.5 KiB per request.
    let settings = Settings {
        max_body_bytes: 1536,
        ..Default::default()
    };
    let small = TestApp::with_settings(settings).await;
    let too_large = small
        .send(
            axum::http::Request::post("/v1/import/sacct?source=hawk")
                .header("authorization", format!("Bearer {}", small.ingest))
                .header("content-type", "text/plain")
                .body(axum::body::Body::from(std::fs::read(FIXTURE).unwrap()))
                .unwrap(),
        )
        .await;
    assert_eq!(too_large.status, StatusCode::PAYLOAD_TOO_LARGE);
    let url = small.serve().await;
    let import = Import::new(&url, &small.ingest, "");
    let output = import.run().await;
    let log = stderr(&output);
    assert!(output.status.success(), "{log}");
    assert!(
        log.contains("too large for the service (413); halving"),
        "{log}"
    );
    assert_eq!(small.run_count().await, expected, "{log}");
    assert!(import.state().is_some(), "the window was not recorded");
    // The next run overlaps the window: nothing is counted twice.
    let again = import.run().await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(small.run_count().await, expected);
}

#[tokio::test]
async fn an_unavailable_service_ends_the_run_and_keeps_the_window() {
    // A service whose database cannot be reached: every import answers 503.
    let unreachable = PgConnectOptions::new_without_pgpass()
        .socket(PathBuf::from("/nonexistent-joulecast-socket-dir"))
        .username("nobody")
        .database("nothing");
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy_with(unreachable);
    let router = http::router(pool, Settings::default());
    let down = TestApp::with_router(fresh_pool().await, router).await;
    let url = down.serve().await;
    let import = Import::new(
        &url,
        &down.ingest,
        "JOULECAST_RETRIES=2\nJOULECAST_RETRY_MAX_S=1",
    );
    let started = Instant::now();
    let output = import.run().await;
    let log = stderr(&output);
    assert!(!output.status.success(), "{log}");
    assert!(log.contains("HTTP 503) after 2 retries"), "{log}");
    assert_eq!(log.matches("retrying in 1s").count(), 2, "{log}");
    assert!(started.elapsed() < Duration::from_secs(20), "{log}");
    assert_eq!(
        import.state(),
        None,
        "the window advanced without an import"
    );
}

#[tokio::test]
async fn a_job_too_large_even_alone_is_skipped_and_named() {
    // 320 bytes: the header and a one-line job fit, a job with steps does not.
    let settings = Settings {
        max_body_bytes: 320,
        ..Default::default()
    };
    let tiny = TestApp::with_settings(settings).await;
    let url = tiny.serve().await;
    let import = Import::new(&url, &tiny.ingest, "");
    let output = import.run().await;
    let log = stderr(&output);
    assert!(output.status.success(), "{log}");
    assert!(log.contains("job 81001 alone"), "{log}");
    let runs = tiny.run_count().await;
    assert!(runs >= 1, "no one-line job was imported: {log}");
    assert!(import.state().is_some(), "the window was not recorded");
}

/// A setting in the environment wins over the settings file (a run by
/// hand: `JOULECAST_SETTLE_S=0 sacct-import.sh`); the file still gives the
/// rest.
#[tokio::test]
async fn settings_in_the_environment_win_over_the_file() {
    let app = TestApp::new().await;
    let url = app.serve().await;
    let import = Import::new(&url, &app.ingest, "");
    let output = import.run_with(&[("JOULECAST_SOURCE", "from-env")]).await;
    assert!(output.status.success(), "{}", stderr(&output));
    let sources: Vec<String> = sqlx::query_scalar("SELECT DISTINCT source FROM runs")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(sources, ["from-env"], "{}", stderr(&output));
}

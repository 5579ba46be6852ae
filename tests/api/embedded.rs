//! The embedded default, end to end: the real binary starts its own PostgreSQL,
//! accepts a run, stops on SIGTERM, and finds the run again after a restart or
//! a crash.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use joulecast::embedded::{Binaries, Layout};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_joulecast");

pub(crate) fn command(data_dir: &Path) -> Command {
    let mut command = Command::new(BIN);
    // Only the settings chosen here, whatever the environment holds.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("JOULECAST_") {
            command.env_remove(name);
        }
    }
    command
        .env_remove("DATABASE_URL")
        .env("JOULECAST_DATA_DIR", data_dir)
        .env("JOULECAST_LOG", "warn");
    command
}

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 exchange on loopback; returns the status and the body.
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

pub(crate) struct Service {
    child: Child,
    pub(crate) port: u16,
}

impl Service {
    /// Start the binary on the embedded default and wait until it is ready.
    pub(crate) fn start(data_dir: &Path) -> Service {
        let port = free_port();
        let child = command(data_dir)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Service::ready(child, port)
    }

    /// The service `child` started on `port`, once it answers `/readyz`.
    fn ready(child: Child, port: u16) -> Service {
        let mut service = Service { child, port };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = service.child.try_wait().unwrap() {
                panic!("joulecast exited during start-up: {status}");
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok()
                && http(port, "GET", "/readyz", None, None).0 == 200
            {
                return service;
            }
            assert!(Instant::now() < deadline, "joulecast did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// SIGTERM, and the exit status.
    pub(crate) fn stop(self) -> std::process::ExitStatus {
        self.stop_with(Signal::SIGTERM)
    }

    /// Send `signal` (SIGTERM, or SIGINT as Ctrl-C does), and the exit status.
    fn stop_with(mut self, signal: Signal) -> std::process::ExitStatus {
        self.signal(signal);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "joulecast did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn admin_token(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("admin-token"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A PostgreSQL still running on `pg_dir`, other than zombies.
fn server_running(pg_dir: &Path) -> bool {
    let wanted = pg_dir.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'));
        !zombie && cmdline.split(|b| *b == 0).any(|arg| arg == wanted)
    })
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A data directory of its own (removed with the returned guard) and its layout.
pub(crate) fn data_dir() -> (tempfile::TempDir, PathBuf, Layout) {
    // Under /tmp, which the unprivileged cluster user can enter when we are root.
    let dir = tempfile::Builder::new()
        .prefix("joulecast-embedded-")
        .tempdir_in(std::env::temp_dir())
        .unwrap();
    let data_dir = dir.path().join("data");
    let layout = Layout::new(&data_dir).unwrap();
    (dir, data_dir, layout)
}

/// Store a sample run through the service, assert it was created, return its id.
fn store_sample_run(port: u16, token: &str, job_id: &str) -> i64 {
    let (status, body) = http(
        port,
        "POST",
        "/v1/runs",
        Some(token),
        Some(&sample_run(job_id)),
    );
    assert_eq!(status, 201, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["run"]["id"]
        .as_i64()
        .unwrap()
}

fn sample_run(job_id: &str) -> Value {
    json!({"app": "lammps", "source": "clusterA", "job_id": job_id, "nodes": 4,
           "energy_j": 2_400_000.0, "avg_power_w": 4000.0})
}

#[test]
fn the_embedded_default_keeps_its_data_across_a_clean_restart() {
    let (_dir, data_dir, layout) = data_dir();

    let service = Service::start(&data_dir);
    let token = admin_token(&data_dir);
    let mode = std::fs::metadata(&layout.admin_token_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the admin token is readable by its owner only"
    );
    let id = store_sample_run(service.port, &token, "1");

    let status = service.stop();
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(
        !layout.pg_dir.join("postmaster.pid").exists(),
        "PostgreSQL stopped cleanly"
    );
    assert!(!server_running(&layout.pg_dir));

    let service = Service::start(&data_dir);
    assert_eq!(admin_token(&data_dir), token, "no second bootstrap token");
    let (status, body) = http(
        service.port,
        "GET",
        &format!("/v1/runs/{id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["job_id"], "1");
    assert!(service.stop().success());
}

#[test]
fn killing_the_service_leaves_no_server_behind() {
    let (_dir, data_dir, layout) = data_dir();

    let service = Service::start(&data_dir);
    let token = admin_token(&data_dir);
    store_sample_run(service.port, &token, "1");
    service.signal(Signal::SIGKILL);
    drop(service);
    // The server learns of its parent's death and shuts down by itself.
    wait_until("the orphaned server stops", || {
        !server_running(&layout.pg_dir)
    });

    let service = Service::start(&data_dir);
    let (status, body) = http(service.port, "GET", "/v1/apps/lammps", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["run_count"],
        1
    );
    assert!(service.stop().success());
}

#[test]
fn a_server_left_running_on_the_data_directory_is_replaced() {
    let (_dir, data_dir, layout) = data_dir();
    assert!(Service::start(&data_dir).stop().success());

    // A server on our data directory that no Joulecast owns (as after a crash
    // on a system without parent-death signals), holding the lock files.
    let binaries = Binaries::find(None).unwrap();
    let mut orphan = Command::new(&binaries.postgres);
    orphan
        .arg("-D")
        .arg(&layout.pg_dir)
        .arg("-k")
        .arg(&layout.socket_dir)
        .args(["-p", "5432", "-c", "listen_addresses="])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if nix::unistd::Uid::effective().is_root() {
        let user = nix::unistd::User::from_name("postgres").unwrap().unwrap();
        orphan.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
    let mut orphan = orphan.spawn().unwrap();
    wait_until("the stray server has written its pid file", || {
        std::fs::read_to_string(layout.pg_dir.join("postmaster.pid"))
            .is_ok_and(|t| t.lines().nth(7).is_some_and(|s| s.trim() == "ready"))
    });

    let service = Service::start(&data_dir);
    // Ours could not have started beside it: the stray one was stopped first.
    assert!(
        orphan.try_wait().unwrap().is_some(),
        "the stray server was stopped"
    );
    let token = admin_token(&data_dir);
    store_sample_run(service.port, &token, "2");
    assert!(service.stop().success());
}

#[test]
fn a_stale_pid_file_naming_another_process_does_not_block_start_up() {
    let (_dir, data_dir, layout) = data_dir();
    assert!(Service::start(&data_dir).stop().success());
    // After a crash, the pid in the file may belong to an unrelated live process.
    let pid_file = layout.pg_dir.join("postmaster.pid");
    std::fs::write(
        &pid_file,
        format!("{}\n{}\n", std::process::id(), layout.pg_dir.display()),
    )
    .unwrap();
    let service = Service::start(&data_dir);
    assert!(service.stop().success());
}

/// Logs written to a file have no terminal colours, and the probes that
/// supervisors and Prometheus send every few seconds are not logged at INFO
/// beside what clients asked.
#[test]
fn logs_to_a_file_are_plain_and_leave_probes_out_at_info() {
    let (dir, data_dir, _) = data_dir();
    let log_path = dir.path().join("service.log");
    let port = free_port();
    let child = command(&data_dir)
        .env("JOULECAST_LOG", "info")
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let service = Service::ready(child, port);
    for path in ["/healthz", "/metrics"] {
        http(port, "GET", path, None, None);
    }
    assert_eq!(http(port, "GET", "/v1/apps", None, None).0, 401);
    assert!(service.stop().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        !log.contains('\u{1b}'),
        "terminal escapes in a file:\n{log}"
    );
    let answered: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("finished processing request"))
        .collect();
    assert!(
        answered.iter().any(|l| l.contains("route=\"/v1/apps\"")),
        "{log}"
    );
    assert!(
        answered.iter().all(|l| !["/healthz", "/readyz", "/metrics"]
            .iter()
            .any(|p| l.contains(p))),
        "{answered:#?}"
    );
}

/// A one-off command pointed at a directory without a database (a mistyped
/// or forgotten --data-dir) says so, and creates nothing: a token it made
/// there would be refused by the real service, and a service started
/// there later would find a token and write no admin token.
#[test]
fn one_off_commands_do_not_create_a_database() {
    let (_dir, data_dir, layout) = data_dir();
    for args in [
        &["token", "create", "--scope", "read"][..],
        &["migrate"][..],
    ] {
        let output = command(&data_dir).args(args).output().unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("holds no Joulecast database"), "{stderr}");
        assert!(output.stdout.is_empty(), "{args:?} printed a token");
    }
    assert!(!layout.pg_dir.exists(), "no cluster was created");
}

#[test]
fn token_create_uses_the_cluster_of_the_running_service() {
    let (_dir, data_dir, _) = data_dir();
    let service = Service::start(&data_dir);
    let output: Output = command(&data_dir)
        .args(["token", "create", "--scope", "read", "--name", "dashboard"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let token = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("jc_"), "{token}");
    let (status, _) = http(service.port, "GET", "/v1/apps", Some(&token), None);
    assert_eq!(status, 200);
    let (status, _) = http(
        service.port,
        "POST",
        "/v1/runs",
        Some(&token),
        Some(&sample_run("1")),
    );
    assert_eq!(status, 403, "a read token cannot ingest");

    // A second service on the same data directory is refused.
    let second = command(&data_dir)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("another Joulecast"));
    assert!(service.stop().success());
}

#[test]
fn missing_postgres_binaries_are_explained() {
    let (_dir, data_dir, _) = data_dir();
    let output = command(&data_dir)
        .env("JOULECAST_PG_BIN_DIR", "/nonexistent/bin")
        // Any free port: the address is claimed before the database is looked for.
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/bin"), "{stderr}");
}

#[test]
fn help_documents_every_setting_and_its_environment_variable() {
    let output = Command::new(BIN)
        .arg("--help")
        .env("DATABASE_URL", "postgres://joule:s3cret@db/joulecast")
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(
        !help.contains("s3cret"),
        "--help shows no password:\n{help}"
    );
    for variable in [
        "DATABASE_URL",
        "JOULECAST_DATA_DIR",
        "JOULECAST_PG_BIN_DIR",
        "JOULECAST_PG_USER",
        "JOULECAST_LISTEN",
        "JOULECAST_PUBLIC_READ",
        "JOULECAST_REQUEST_TIMEOUT_S",
        "JOULECAST_MAX_BODY_BYTES",
        "JOULECAST_SHUTDOWN_TIMEOUT_S",
        "JOULECAST_HEADER_TIMEOUT_S",
        "JOULECAST_MAX_CONNECTIONS",
        "JOULECAST_DB_MAX_CONNECTIONS",
        "JOULECAST_LOG",
        "JOULECAST_LOG_FORMAT",
    ] {
        assert!(help.contains(variable), "--help lacks {variable}:\n{help}");
    }
    for command in ["serve", "migrate", "openapi", "token"] {
        assert!(help.contains(command), "--help lacks the {command} command");
    }
    let spec = Command::new(BIN).arg("openapi").output().unwrap();
    let spec: Value = serde_json::from_slice(&spec.stdout).unwrap();
    assert!(spec["paths"]["/v1/runs"].is_object());
}

#[test]
fn sigterm_lets_in_flight_requests_finish_before_stopping() {
    let (_dir, data_dir, layout) = data_dir();
    let service = Service::start(&data_dir);
    let port = service.port;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Make the listing of applications wait on a lock held here. (Not
    // /readyz: it waits for the database at most a second.)
    let token = std::fs::read_to_string(&layout.admin_token_file).unwrap();
    let token = token.trim().to_owned();
    let options =
        joulecast::db::embedded_options(&layout).database(joulecast::db::EMBEDDED_DATABASE);
    let mut blocker = runtime.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect_with(&options).await.unwrap();
        sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
        sqlx::query("LOCK TABLE applications IN ACCESS EXCLUSIVE MODE")
            .execute(&mut conn)
            .await
            .unwrap();
        conn
    });
    let in_flight =
        std::thread::spawn(move || http(port, "GET", "/v1/apps", Some(token.as_str()), None));
    wait_until("the request waits on the lock", || {
        runtime.block_on(async {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_locks WHERE NOT granted")
                .fetch_one(&mut blocker)
                .await
                .unwrap()
                > 0
        })
    });

    service.signal(Signal::SIGTERM);
    wait_until("the service stops accepting connections", || {
        TcpStream::connect(("127.0.0.1", port)).is_err()
    });
    // A slow request: longer than the service would wait for idle connections
    // alone, well within its drain time (10 s by default).
    std::thread::sleep(Duration::from_secs(3));
    let mut service = service;
    assert!(
        service.child.try_wait().unwrap().is_none(),
        "the service waits for its in-flight request"
    );
    runtime.block_on(async {
        sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    });
    let (status, body) = in_flight.join().unwrap();
    assert_eq!(status, 200, "the in-flight request was answered: {body}");
    assert!(service.stop().success());
}

#[tokio::test]
async fn with_database_url_the_service_uses_that_server() {
    let url = crate::support::fresh_database_url().await;
    let (_dir, data_dir, layout) = data_dir();
    let token = command(&data_dir)
        .env("DATABASE_URL", &url)
        .args(["token", "create", "--scope", "ingest,read"])
        .output()
        .unwrap();
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout).unwrap().trim().to_owned();

    let port = free_port();
    let child = command(&data_dir)
        .env("DATABASE_URL", &url)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .spawn()
        .unwrap();
    let service = Service::ready(child, port);
    store_sample_run(port, &token, "1");
    assert!(service.stop().success());
    assert!(!layout.pg_dir.exists(), "no embedded cluster was created");
    assert!(
        !layout.admin_token_file.exists(),
        "no bootstrap token for an external server"
    );
}

#[test]
fn committed_runs_survive_a_crash_of_service_and_database() {
    let (_dir, data_dir, layout) = data_dir();
    let service = Service::start(&data_dir);
    let token = admin_token(&data_dir);
    store_sample_run(service.port, &token, "1");

    // A power cut: the server and the service die without any shutdown.
    let pid_file = layout.pg_dir.join("postmaster.pid");
    let postmaster = crate::support::postmaster_pid(&layout);
    kill(Pid::from_raw(postmaster), Signal::SIGKILL).unwrap();
    service.signal(Signal::SIGKILL);
    drop(service);
    wait_until("every server process is gone", || {
        !server_running(&layout.pg_dir)
    });
    assert!(pid_file.exists(), "the crash left its lock file behind");

    // The next start recovers from the journal; the acknowledged run is there.
    let service = Service::start(&data_dir);
    let (status, body) = http(service.port, "GET", "/v1/apps/lammps", Some(&token), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["run_count"],
        1
    );
    let log = std::fs::read_to_string(&layout.log_file).unwrap();
    assert!(
        log.contains("was interrupted"),
        "PostgreSQL ran crash recovery:\n{log}"
    );
    assert!(service.stop().success());
}

#[test]
fn a_socket_directory_that_is_a_symbolic_link_is_refused() {
    let (_dir, data_dir, layout) = data_dir();
    let victim = tempfile::tempdir().unwrap();
    std::fs::set_permissions(victim.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(&data_dir).unwrap();
    std::os::unix::fs::symlink(victim.path(), &layout.socket_dir).unwrap();
    let output = command(&data_dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a symbolic link"), "{stderr}");
    let meta = std::fs::metadata(victim.path()).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        meta.uid(),
        nix::unistd::Uid::effective().as_raw(),
        "owner unchanged"
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o755, "mode unchanged");
}

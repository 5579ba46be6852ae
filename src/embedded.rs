//! The embedded default: a private PostgreSQL cluster that Joulecast creates,
//! starts, watches and stops itself.
//!
//! Layout of the data directory:
//!
//! ```text
//! <data-dir>/
//!   joulecast.lock     flock held by the process that owns the cluster
//!   pg/                the cluster, owned by the cluster user (initdb works in
//!                      pg.init/ and renames it to pg/ once it has succeeded)
//!   run/               the Unix socket (the cluster listens on no TCP port)
//!   postgresql.log     the server's log
//!   admin-token        the first admin token, mode 0600
//! ```
//!
//! The server listens only on a Unix socket in a directory that only the cluster
//! user (and root) can enter, with `trust` authentication: nobody else on the
//! machine can connect. PostgreSQL refuses to run as root, so when Joulecast
//! runs as root the cluster runs as an unprivileged system user (`postgres` by
//! default, created by Debian's `postgresql` package).
//!
//! All functions here block; call them from `spawn_blocking` in async code.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::{Mode, fchmod};
use nix::unistd::{Gid, Pid, Uid, User, fchown};
use tokio::sync::watch;

/// The port number only names the socket file (`.s.PGSQL.5432`); no TCP port is opened.
pub const SOCKET_PORT: u16 = 5432;
pub const SUPERUSER: &str = "postgres";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (initdb, postgres) were found on PATH or in \
         /usr/lib/postgresql/*/bin.\n\
         Install them (Debian/Ubuntu: `apt-get install postgresql`; Fedora: `dnf install \
         postgresql-server`), or name their directory with --pg-bin-dir \
         (JOULECAST_PG_BIN_DIR), or use an existing server with --database-url \
         (DATABASE_URL=postgres://user:password@host/db)"
    )]
    BinariesNotFound,
    #[error("--pg-bin-dir {0}: no initdb and postgres there")]
    BadBinDir(PathBuf),
    #[error(
        "PostgreSQL refuses to run as root, and the cluster user `{0}` does not exist. \
         Create it (`useradd --system --home /var/lib/postgresql postgres`, or install \
         Debian's `postgresql` package which creates it), choose another with --pg-user \
         (JOULECAST_PG_USER), or run Joulecast as an unprivileged user"
    )]
    NoClusterUser(String),
    #[error("the cluster user must not be root; choose another with --pg-user")]
    RootClusterUser,
    #[error(
        "the cluster user `{user}` cannot enter {dir} (it needs the execute bit for others); \
         choose a --data-dir it can reach, e.g. /var/lib/joulecast"
    )]
    Unreachable { user: String, dir: PathBuf },
    #[error("another Joulecast process is running on the data directory {0}")]
    Busy(PathBuf),
    #[error(
        "{0} holds no Joulecast database: give the service's data directory (--data-dir or \
         JOULECAST_DATA_DIR) or --database-url; only `joulecast serve` creates a database"
    )]
    NoCluster(PathBuf),
    #[error("{command} failed ({status}); its output:\n{output}")]
    CommandFailed {
        command: String,
        status: ExitStatus,
        output: String,
    },
    #[error("PostgreSQL did not become ready within {seconds} s; end of {log}:\n{tail}")]
    NotReady {
        seconds: u64,
        log: PathBuf,
        tail: String,
    },
    #[error("PostgreSQL exited during start-up ({status}); end of {log}:\n{tail}")]
    StartFailed {
        status: String,
        log: PathBuf,
        tail: String,
    },
    /// `cause` is shown in the message, not as a source as well: an error
    /// chain printed with its sources said it twice.
    #[error("{context}: {cause}")]
    Io { context: String, cause: io::Error },
}

type Result<T> = std::result::Result<T, ClusterError>;

fn io_context(context: impl Into<String>) -> impl FnOnce(io::Error) -> ClusterError {
    let context = context.into();
    move |cause| ClusterError::Io { context, cause }
}

fn errno_context(context: impl Into<String>) -> impl FnOnce(Errno) -> ClusterError {
    let context = context.into();
    move |errno| ClusterError::Io {
        context,
        cause: io::Error::from(errno),
    }
}

/// Where the embedded cluster lives and who runs it.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub data_dir: PathBuf,
    pub bin_dir: Option<PathBuf>,
    /// System user for the cluster when running as root.
    pub root_user: String,
    /// Create the cluster when the data directory has none (the service);
    /// one-off commands refuse instead, so that a mistyped or missing
    /// --data-dir does not give them a new, empty database of their own.
    pub create: bool,
}

/// The paths of a data directory.
#[derive(Debug, Clone)]
pub struct Layout {
    pub data_dir: PathBuf,
    pub pg_dir: PathBuf,
    pub socket_dir: PathBuf,
    pub log_file: PathBuf,
    pub lock_file: PathBuf,
    pub admin_token_file: PathBuf,
    /// Where initdb works; renamed to `pg_dir` once it has succeeded.
    pg_staging: PathBuf,
}

impl Layout {
    pub fn new(data_dir: &Path) -> Result<Layout> {
        let data_dir = absolute(data_dir)?;
        let socket_dir = socket_dir_for(&data_dir);
        Ok(Layout {
            pg_dir: data_dir.join("pg"),
            log_file: data_dir.join("postgresql.log"),
            lock_file: data_dir.join("joulecast.lock"),
            admin_token_file: data_dir.join("admin-token"),
            pg_staging: data_dir.join("pg.init"),
            socket_dir,
            data_dir,
        })
    }
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(io_context(format!("resolving {}", path.display())))
}

/// Unix socket paths are limited to 107 bytes; a deep data directory gets its
/// socket directory under the system temporary directory instead, named after
/// the data directory so every process finds the same one.
fn socket_dir_for(data_dir: &Path) -> PathBuf {
    let preferred = data_dir.join("run");
    let socket_len = preferred.as_os_str().len() + "/.s.PGSQL.5432.lock".len();
    if socket_len <= 100 {
        return preferred;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    std::env::temp_dir().join(format!("joulecast-{}", hex::encode(&digest[..8])))
}

/// The PostgreSQL binaries to use.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub initdb: PathBuf,
    pub postgres: PathBuf,
}

impl Binaries {
    pub fn find(bin_dir: Option<&Path>) -> Result<Binaries> {
        if let Some(dir) = bin_dir {
            return Binaries::in_dir(dir).ok_or_else(|| ClusterError::BadBinDir(dir.to_owned()));
        }
        let on_path = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default();
        // Debian installs the server outside PATH, one directory per major version.
        let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        debian.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
        on_path
            .iter()
            .chain(debian.iter().map(|(_, dir)| dir))
            .find_map(|dir| Binaries::in_dir(dir))
            .ok_or(ClusterError::BinariesNotFound)
    }

    fn in_dir(dir: &Path) -> Option<Binaries> {
        // Resolve symlinks so that initdb finds the postgres binary beside it.
        let initdb = fs::canonicalize(dir.join("initdb")).ok()?;
        let postgres = fs::canonicalize(dir.join("postgres")).ok()?;
        (is_executable(&initdb) && is_executable(&postgres))
            .then_some(Binaries { initdb, postgres })
    }
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The account the cluster runs as: ourselves, or an unprivileged user when we are root.
#[derive(Debug, Clone)]
struct RunAs {
    name: String,
    uid: Uid,
    gid: Gid,
    switch: bool,
}

impl RunAs {
    fn resolve(root_user: &str) -> Result<RunAs> {
        let euid = Uid::effective();
        if !euid.is_root() {
            let name = User::from_uid(euid)
                .ok()
                .flatten()
                .map_or_else(|| euid.to_string(), |u| u.name);
            return Ok(RunAs {
                name,
                uid: euid,
                gid: Gid::effective(),
                switch: false,
            });
        }
        let user = User::from_name(root_user)
            .map_err(errno_context(format!("looking up user {root_user}")))?
            .ok_or_else(|| ClusterError::NoClusterUser(root_user.to_owned()))?;
        if user.uid.is_root() {
            return Err(ClusterError::RootClusterUser);
        }
        Ok(RunAs {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            switch: true,
        })
    }

    fn command(&self, program: &Path, cwd: &Path) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(cwd)
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST")
            .env("LC_ALL", "C");
        if self.switch {
            command.uid(self.uid.as_raw()).gid(self.gid.as_raw());
        }
        command
    }

    /// Create `dir` (if needed; its parent must exist) owned by the cluster
    /// user with `mode`. An existing `dir` must be a real directory of ours or
    /// of the cluster user: a symbolic link or someone else's directory (say, in
    /// a shared /tmp) is refused, and the owner and mode are changed through an
    /// open handle, so a link swapped in meanwhile is never followed.
    fn own_dir(&self, dir: &Path, mode: u32) -> Result<()> {
        match fs::DirBuilder::new().mode(mode).create(dir) {
            Err(error) if error.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io_context(format!("creating {}", dir.display()))(error));
            }
            _ => {}
        }
        let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
        let handle = OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits())
            .open(dir)
            .map_err(io_context(format!(
                "opening {} (it must be a directory, not a symbolic link)",
                dir.display()
            )))?;
        let owner = handle
            .metadata()
            .map_err(io_context(format!("reading {}", dir.display())))?
            .uid();
        if owner != self.uid.as_raw() && owner != Uid::effective().as_raw() {
            return Err(ClusterError::Io {
                context: format!("using {}", dir.display()),
                cause: io::Error::other(format!("it belongs to another user (uid {owner})")),
            });
        }
        if self.switch {
            fchown(&handle, Some(self.uid), Some(self.gid)).map_err(errno_context(format!(
                "giving {} to {}",
                dir.display(),
                self.name
            )))?;
        }
        fchmod(&handle, Mode::from_bits_truncate(mode)).map_err(errno_context(format!(
            "setting the mode of {}",
            dir.display()
        )))
    }

    /// When we switch users, every existing ancestor of the data directory must
    /// let the cluster user through; say so plainly (before creating anything)
    /// instead of letting initdb fail.
    fn check_reachable(&self, dir: &Path) -> Result<()> {
        if !self.switch {
            return Ok(());
        }
        for ancestor in dir.ancestors() {
            let Ok(meta) = fs::metadata(ancestor) else {
                continue;
            };
            let mode = meta.permissions().mode();
            let through = if meta.uid() == self.uid.as_raw() {
                mode & 0o100 != 0
            } else if meta.gid() == self.gid.as_raw() {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !through {
                return Err(ClusterError::Unreachable {
                    user: self.name.clone(),
                    dir: ancestor.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// Try to take the data directory's lock. `Ok(None)` means another process holds it.
pub fn try_lock(layout: &Layout) -> Result<Option<Flock<File>>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&layout.lock_file)
        .map_err(io_context(format!(
            "opening {}",
            layout.lock_file.display()
        )))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(errno_context(format!(
            "locking {}",
            layout.lock_file.display()
        ))(errno)),
    }
}

/// A running embedded cluster. Dropping it stops the server.
pub struct Cluster {
    layout: Layout,
    pid: Pid,
    exited: watch::Receiver<Option<String>>,
    /// Held for the cluster's lifetime; released after the server has stopped.
    _lock: Flock<File>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("data_dir", &self.layout.data_dir)
            .field("pid", &self.pid)
            .finish()
    }
}

impl Cluster {
    /// Create the cluster on first use, recover from an earlier crash, start the
    /// server and wait until it accepts connections.
    pub fn start(options: &ClusterOptions) -> Result<Cluster> {
        let binaries = Binaries::find(options.bin_dir.as_deref())?;
        let run_as = RunAs::resolve(&options.root_user)?;
        let layout = Layout::new(&options.data_dir)?;

        // Traversable but not listable by the cluster user when it is someone else.
        let data_mode = if run_as.switch { 0o711 } else { 0o700 };
        run_as.check_reachable(&layout.data_dir)?;
        if !options.create && !layout.pg_dir.exists() {
            return Err(ClusterError::NoCluster(layout.data_dir.clone()));
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(data_mode)
            .create(&layout.data_dir)
            .map_err(io_context(format!(
                "creating {}",
                layout.data_dir.display()
            )))?;

        let lock = try_lock(&layout)?.ok_or_else(|| ClusterError::Busy(layout.data_dir.clone()))?;

        // `pg` appears only once initdb has succeeded, and is never removed.
        if !layout.pg_dir.exists() {
            init_cluster(&binaries, &run_as, &layout)?;
        }
        run_as.own_dir(&layout.socket_dir, 0o700)?;
        recover_stale_server(&layout)?;

        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&layout.log_file)
            .map_err(io_context(format!("opening {}", layout.log_file.display())))?;
        let log_start = log
            .metadata()
            .map_err(io_context("reading the log size"))?
            .len();

        let mut command = run_as.command(&binaries.postgres, &layout.data_dir);
        command
            .arg("-D")
            .arg(&layout.pg_dir)
            .arg("-k")
            .arg(&layout.socket_dir)
            .args(["-p", &SOCKET_PORT.to_string()])
            .args(["-c", "listen_addresses="])
            .args(["-c", "unix_socket_permissions=0700"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io_context("duplicating the log"))?)
            .stderr(log)
            // Our own process group: a Ctrl-C in the terminal reaches Joulecast,
            // which then stops the server in order, after draining requests.
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
        unsafe {
            command.pre_exec(|| {
                // If Joulecast dies without stopping the server, the server
                // receives a fast-shutdown request instead of living on as an orphan.
                nix::sys::prctl::set_pdeathsig(Signal::SIGINT).map_err(io::Error::from)
            });
        }
        let (pid, exited) = spawn_watched(command)?;

        let cluster = Cluster {
            layout,
            pid,
            exited,
            _lock: lock,
        };
        cluster.wait_ready(log_start)?;
        tracing::info!(
            pid = pid.as_raw(),
            data_dir = %cluster.layout.data_dir.display(),
            user = %run_as.name,
            "embedded PostgreSQL is ready"
        );
        Ok(cluster)
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// A receiver that turns `Some(reason)` when the server process exits.
    pub fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exited.clone()
    }

    fn wait_ready(&self, log_start: u64) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let pid_file = self.layout.pg_dir.join("postmaster.pid");
        loop {
            if let Some(status) = self.exited.borrow().clone() {
                return Err(ClusterError::StartFailed {
                    status,
                    log: self.layout.log_file.clone(),
                    tail: log_tail(&self.layout.log_file, log_start),
                });
            }
            // The postmaster writes "ready" as the last line of its pid file once it
            // accepts connections; this is what `pg_ctl start -w` waits for.
            if let Ok(text) = fs::read_to_string(&pid_file) {
                let mut lines = text.lines();
                let same_pid =
                    lines.next().and_then(|l| l.trim().parse().ok()) == Some(self.pid.as_raw());
                if same_pid && lines.nth(6).is_some_and(|status| status.trim() == "ready") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(ClusterError::NotReady {
                    seconds: READY_TIMEOUT.as_secs(),
                    log: self.layout.log_file.clone(),
                    tail: log_tail(&self.layout.log_file, log_start),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fast shutdown: roll back open transactions, checkpoint, exit.
    pub fn stop(&mut self) {
        if self.exited.borrow().is_some() {
            return;
        }
        let exited = self.exited.clone();
        if shut_down(self.pid, || exited.borrow().is_some()) {
            tracing::info!(pid = self.pid.as_raw(), "embedded PostgreSQL stopped");
        } else {
            tracing::warn!(pid = self.pid.as_raw(), "PostgreSQL did not stop");
        }
    }
}

/// Ask `pid` to stop, more and more firmly: fast shutdown, then immediate,
/// then kill, each given its time. Whether `gone()` came true.
fn shut_down(pid: Pid, gone: impl Fn() -> bool) -> bool {
    for (signal, patience) in [
        (Signal::SIGINT, STOP_TIMEOUT),
        (Signal::SIGQUIT, Duration::from_secs(5)),
        (Signal::SIGKILL, Duration::from_secs(5)),
    ] {
        if kill(pid, signal).is_err() {
            return gone() || !is_alive(pid);
        }
        let deadline = Instant::now() + patience;
        while !gone() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if gone() {
            return true;
        }
        tracing::warn!(
            pid = pid.as_raw(),
            ?signal,
            "PostgreSQL did not stop in time"
        );
    }
    false
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Spawn `command` from a thread that lives exactly as long as the child: the
/// parent-death signal is tied to the spawning thread, and the same thread
/// reaps the child and reports its exit.
fn spawn_watched(mut command: Command) -> Result<(Pid, watch::Receiver<Option<String>>)> {
    let (exit_tx, exit_rx) = watch::channel(None);
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("postgres-watch".into())
        .spawn(move || {
            let mut child = match command.spawn() {
                Ok(child) => child,
                Err(error) => {
                    let _ = pid_tx.send(Err(error));
                    return;
                }
            };
            let _ = pid_tx.send(Ok(child.id()));
            let status = match child.wait() {
                Ok(status) => status.to_string(),
                Err(error) => format!("could not be waited for: {error}"),
            };
            let _ = exit_tx.send(Some(status));
        })
        .map_err(io_context("starting the watcher thread"))?;
    let pid = pid_rx
        .recv()
        .map_err(|_| ClusterError::Io {
            context: "starting postgres".into(),
            cause: io::Error::other("watcher thread ended"),
        })?
        .map_err(io_context("starting postgres"))?;
    Ok((Pid::from_raw(pid as i32), exit_rx))
}

fn init_cluster(binaries: &Binaries, run_as: &RunAs, layout: &Layout) -> Result<()> {
    let staging = &layout.pg_staging;
    // A staging directory is what an interrupted initdb left: it never held data.
    if staging.exists() {
        fs::remove_dir_all(staging)
            .map_err(io_context(format!("removing {}", staging.display())))?;
    }
    run_as.own_dir(staging, 0o700)?;
    tracing::info!(dir = %layout.pg_dir.display(), "creating the embedded PostgreSQL cluster");
    let output = run_as
        .command(&binaries.initdb, &layout.data_dir)
        .arg("-D")
        .arg(staging)
        .args([
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ])
        .arg("--no-instructions")
        .stdin(Stdio::null())
        .output()
        .map_err(io_context(format!("running {}", binaries.initdb.display())))?;
    if !output.status.success() {
        return Err(ClusterError::CommandFailed {
            command: binaries.initdb.display().to_string(),
            status: output.status,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        });
    }
    fs::rename(staging, &layout.pg_dir)
        .map_err(io_context(format!("renaming {}", staging.display())))?;
    // Make the rename durable before anything is stored in the cluster.
    File::open(&layout.data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io_context(format!("syncing {}", layout.data_dir.display())))
}

/// After a crash: stop a server of ours that outlived its Joulecast, and clear
/// lock files that would stop a new one from starting. Only called while
/// holding the data directory's lock, so no live Joulecast owns that server.
fn recover_stale_server(layout: &Layout) -> Result<()> {
    let pid_file = layout.pg_dir.join("postmaster.pid");
    if let Ok(text) = fs::read_to_string(&pid_file) {
        let pid = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok());
        match pid.map(Pid::from_raw) {
            Some(pid) if is_alive(pid) => match pid_user(pid, &layout.pg_dir) {
                PidUser::ThisCluster => {
                    tracing::warn!(
                        pid = pid.as_raw(),
                        "stopping a PostgreSQL left running by an earlier Joulecast"
                    );
                    stop_foreign(pid)?;
                }
                PidUser::Other => {
                    // The pid was reused by an unrelated process; PostgreSQL
                    // would refuse to start, believing it a running server.
                    tracing::warn!(pid = pid.as_raw(), "removing a stale postmaster.pid");
                    remove_if_exists(&pid_file)?;
                }
                PidUser::Unknown => {
                    return Err(ClusterError::Io {
                        context: format!("starting PostgreSQL on {}", layout.pg_dir.display()),
                        cause: io::Error::other(format!(
                            "process {pid} named in postmaster.pid may be a server of this \
                             cluster and cannot be inspected; stop it, then start again"
                        )),
                    });
                }
            },
            // Its process is gone. PostgreSQL would replace the file itself,
            // except when the process lingers as a zombie nobody reaps (as under
            // a container's minimal init), which it takes for a live server.
            _ => {
                tracing::warn!("removing the postmaster.pid of a server that is gone");
                remove_if_exists(&pid_file)?;
            }
        }
    }
    for name in [
        format!(".s.PGSQL.{SOCKET_PORT}"),
        format!(".s.PGSQL.{SOCKET_PORT}.lock"),
    ] {
        remove_if_exists(&layout.socket_dir.join(name))?;
    }
    Ok(())
}

/// Who a live pid from `postmaster.pid` is.
#[derive(Debug, PartialEq, Eq)]
enum PidUser {
    /// A PostgreSQL process working in this cluster's directory.
    ThisCluster,
    /// Not a PostgreSQL process, or one working on another cluster.
    Other,
    /// Cannot tell (no access to its process information).
    Unknown,
}

/// PostgreSQL processes work in their data directory, so the identity (device
/// and inode) of a process's working directory tells whether it serves this
/// cluster, however the directory's path was spelled when it was started.
fn pid_user(pid: Pid, pg_dir: &Path) -> PidUser {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return PidUser::Unknown;
    };
    let arg0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    // The postmaster keeps its argv; its children rewrite it to "postgres: ...".
    if !(arg0.ends_with(b"postgres") || arg0.starts_with(b"postgres:")) {
        return PidUser::Other;
    }
    match (
        fs::metadata(format!("/proc/{pid}/cwd")),
        fs::metadata(pg_dir),
    ) {
        (Ok(cwd), Ok(dir)) if cwd.dev() == dir.dev() && cwd.ino() == dir.ino() => {
            PidUser::ThisCluster
        }
        (Ok(_), Ok(_)) => PidUser::Other,
        _ => PidUser::Unknown,
    }
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(io_context(format!("removing {}", path.display()))(error))
        }
        _ => Ok(()),
    }
}

fn is_alive(pid: Pid) -> bool {
    match kill(pid, None) {
        Ok(()) | Err(Errno::EPERM) => {
            // A zombie answers signals but is gone.
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| {
                    stat.rsplit_once(") ")
                        .is_some_and(|(_, rest)| !rest.starts_with('Z'))
                })
                .unwrap_or(true)
        }
        Err(_) => false,
    }
}

fn stop_foreign(pid: Pid) -> Result<()> {
    if shut_down(pid, || !is_alive(pid)) {
        return Ok(());
    }
    Err(ClusterError::Io {
        context: format!("stopping the stale PostgreSQL {pid}"),
        cause: io::Error::other("it is still running"),
    })
}

/// The log written since `start`, at most its last 30 lines.
fn log_tail(path: &Path, start: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.seek(SeekFrom::Start(start));
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_data_dirs_get_a_short_socket_dir() {
        let short = socket_dir_for(Path::new("/var/lib/joulecast"));
        assert_eq!(short, Path::new("/var/lib/joulecast/run"));
        let deep = PathBuf::from(format!("/srv/{}", "d/".repeat(60)));
        let socket = socket_dir_for(&deep);
        assert!(socket.as_os_str().len() + 20 <= 107, "{}", socket.display());
        assert_eq!(socket, socket_dir_for(&deep), "must be stable");
    }

    #[test]
    fn bin_dir_without_binaries_is_refused_by_name() {
        let error = Binaries::find(Some(Path::new("/nonexistent"))).unwrap_err();
        assert!(error.to_string().contains("/nonexistent"), "{error}");
    }

    #[test]
    fn missing_binaries_message_says_how_to_install_or_point_elsewhere() {
        let message = ClusterError::BinariesNotFound.to_string();
        assert!(message.contains("apt-get install postgresql"));
        assert!(message.contains("DATABASE_URL"));
    }

    #[test]
    fn the_current_process_is_alive_and_not_a_postmaster() {
        let me = Pid::this();
        assert!(is_alive(me));
        assert_eq!(pid_user(me, Path::new("/tmp")), PidUser::Other);
    }
}

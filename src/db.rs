//! Connecting to PostgreSQL: a server named by `DATABASE_URL`, or the embedded
//! cluster in the data directory.

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::GlobalArgs;
use crate::embedded::{self, Cluster, ClusterError, ClusterOptions, Layout};

pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Name of the database inside the embedded cluster.
pub const EMBEDDED_DATABASE: &str = "joulecast";

/// An open pool, and the embedded cluster behind it when this process owns one.
/// Drop the pool before the cluster (the cluster stops its server on drop).
pub struct Database {
    pub pool: PgPool,
    pub cluster: Option<Cluster>,
}

impl Database {
    /// Close the pool, then stop the embedded server, if any. Connections still
    /// held by requests that outlived the drain are not waited for long: the
    /// server's shutdown ends them.
    pub async fn close(self) {
        if tokio::time::timeout(Duration::from_secs(2), self.pool.close())
            .await
            .is_err()
        {
            tracing::warn!("database connections still busy at shutdown; closing them");
        }
        if let Some(mut cluster) = self.cluster {
            let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
        }
    }
}

/// How to treat an embedded cluster that another Joulecast process is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// The service owns its cluster: refuse to share.
    Exclusive,
    /// A one-off command (migrate, token create) may use a running service's cluster.
    AttachIfRunning,
}

/// How long a request waits for a pooled connection: when the database is
/// down, a write fails this fast (503, Retry-After) rather than hanging.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(750);

/// The pool's options: `max` connections, `ACQUIRE_TIMEOUT`.
pub fn pool_options(max: u32) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

pub async fn open(global: &GlobalArgs, sharing: Sharing) -> anyhow::Result<Database> {
    let pool_options = pool_options(global.db_max_connections);

    if let Some(url) = &global.database_url {
        let pool = pool_options
            .connect(url.expose())
            .await
            .with_context(|| format!("connecting to {url:?}"))?;
        return Ok(Database {
            pool,
            cluster: None,
        });
    }

    let options = ClusterOptions {
        data_dir: global.data_dir.clone(),
        bin_dir: global.pg_bin_dir.clone(),
        root_user: global.pg_user.clone(),
        create: sharing == Sharing::Exclusive,
    };
    let started = tokio::task::spawn_blocking(move || Cluster::start(&options))
        .await
        .context("the cluster start-up task failed")?;
    match started {
        Ok(cluster) => {
            create_database_if_missing(cluster.layout()).await?;
            let pool = pool_options
                .connect_with(embedded_options(cluster.layout()).database(EMBEDDED_DATABASE))
                .await
                .context("connecting to the embedded PostgreSQL")?;
            Ok(Database {
                pool,
                cluster: Some(cluster),
            })
        }
        Err(ClusterError::Busy(_)) if sharing == Sharing::AttachIfRunning => {
            tracing::info!("using the embedded PostgreSQL of the running Joulecast");
            let layout = Layout::new(&global.data_dir)?;
            let options = embedded_options(&layout).database(EMBEDDED_DATABASE);
            // The owner may still be starting its server or creating the database.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            let pool = loop {
                match pool_options.clone().connect_with(options.clone()).await {
                    Ok(pool) => break pool,
                    Err(error) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(%error, "waiting for the running Joulecast's database");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => {
                        return Err(anyhow::Error::new(error)
                            .context("connecting to the running Joulecast's PostgreSQL"));
                    }
                }
            };
            Ok(Database {
                pool,
                cluster: None,
            })
        }
        Err(error) => Err(error.into()),
    }
}

/// How to reach an embedded cluster as its superuser: over its socket, no
/// password (tests and benchmarks that start their own cluster use it too).
pub fn embedded_options(layout: &Layout) -> PgConnectOptions {
    PgConnectOptions::new_without_pgpass()
        .socket(&layout.socket_dir)
        .port(embedded::SOCKET_PORT)
        .username(embedded::SUPERUSER)
}

async fn create_database_if_missing(layout: &Layout) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect_with(&embedded_options(layout).database("postgres"))
        .await
        .context("connecting to the embedded PostgreSQL")?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(EMBEDDED_DATABASE)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        sqlx::query("CREATE DATABASE joulecast")
            .execute(&mut conn)
            .await
            .context("creating the joulecast database")?;
    }
    conn.close().await?;
    Ok(())
}

pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    MIGRATOR
        .run(pool)
        .await
        .context("applying database migrations")
}

/// `readiness`'s answer when the migrations are not all applied.
pub const NOT_MIGRATED: &str = "database migrations are not applied";
/// `readiness`'s answer once the pool is closed: the service is stopping.
pub const STOPPING: &str = "the service is stopping";

/// Why the database is not ready to serve, if it is not. The reason is fit to
/// show to clients; the underlying error is logged.
pub async fn readiness(pool: &PgPool) -> Result<(), &'static str> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await;
    match applied {
        Ok(Some(version)) if version >= latest => Ok(()),
        Ok(_) => Err(NOT_MIGRATED),
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("42P01") => {
            Err(NOT_MIGRATED)
        }
        Err(sqlx::Error::PoolClosed) => Err(STOPPING),
        Err(error) => {
            tracing::warn!(%error, "readiness check: database unreachable");
            Err("database unreachable")
        }
    }
}

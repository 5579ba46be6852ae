//! The service's settings, and the database and logging arguments every
//! command shares. Depends on nothing else in the crate; the commands and
//! their flags are in `cli::args`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};

/// Settings shared by every command: where the database is.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// PostgreSQL server to use. Without it, Joulecast runs its own private
    /// PostgreSQL cluster in --data-dir (the embedded default).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<DatabaseUrl>,

    /// Directory of the embedded PostgreSQL cluster and of the first admin token.
    #[arg(
        long,
        env = "JOULECAST_DATA_DIR",
        default_value = "joulecast-data",
        global = true
    )]
    pub data_dir: PathBuf,

    /// Directory holding the PostgreSQL server binaries (initdb, postgres).
    /// Searched on PATH and in /usr/lib/postgresql/*/bin when not given.
    #[arg(long, env = "JOULECAST_PG_BIN_DIR", global = true)]
    pub pg_bin_dir: Option<PathBuf>,

    /// System user that runs the embedded cluster when Joulecast runs as root
    /// (PostgreSQL refuses to run as root).
    #[arg(
        long,
        env = "JOULECAST_PG_USER",
        default_value = "postgres",
        global = true
    )]
    pub pg_user: String,

    /// Maximum number of database connections in the pool.
    #[arg(
        long,
        env = "JOULECAST_DB_MAX_CONNECTIONS",
        default_value_t = 16,
        global = true
    )]
    pub db_max_connections: u32,

    /// Log filter, in `tracing` EnvFilter syntax (e.g. `info,joulecast=debug`).
    #[arg(
        long,
        env = "JOULECAST_LOG",
        default_value = "info,sqlx=warn",
        global = true
    )]
    pub log: String,

    /// Log format.
    #[arg(
        long,
        env = "JOULECAST_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text,
        global = true
    )]
    pub log_format: LogFormat,
}

/// HTTP settings fixed at start-up.
#[derive(Debug, Clone)]
pub struct Settings {
    pub public_read: bool,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    /// How long tokens and application rows stay in memory at most.
    pub cache_ttl: Duration,
    /// A node's power is the mean of its samples within this time before its
    /// latest one.
    pub node_window: Duration,
    /// The workload whose classification gives predictions their APC bounds.
    pub reference_workload: String,
    /// Heavy computations that may run at once (`AppState::offload`).
    pub heavy_permits: usize,
    /// When the reservation of a job whose end is never reported ends.
    pub expiry: Expiry,
}

impl Settings {
    pub const DEFAULT_REQUEST_TIMEOUT_S: u64 = 30;
    pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
    pub const DEFAULT_CACHE_TTL_S: u64 = 30;
    pub const DEFAULT_NODE_WINDOW_DAYS: u32 = 30;
    pub const DEFAULT_REFERENCE_WORKLOAD: &'static str = "reference";
    pub const DEFAULT_HEAVY_PERMITS: u16 = 4;
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            public_read: false,
            request_timeout: Duration::from_secs(Self::DEFAULT_REQUEST_TIMEOUT_S),
            max_body_bytes: Self::DEFAULT_MAX_BODY_BYTES,
            cache_ttl: Duration::from_secs(Self::DEFAULT_CACHE_TTL_S),
            node_window: Duration::from_secs(u64::from(Self::DEFAULT_NODE_WINDOW_DAYS) * 86_400),
            reference_workload: Self::DEFAULT_REFERENCE_WORKLOAD.to_owned(),
            heavy_permits: usize::from(Self::DEFAULT_HEAVY_PERMITS),
            expiry: Expiry::default(),
        }
    }
}

/// When a job's reservation ends if its end is never reported: at its
/// time limit plus `grace_s`, or without one `max_s` after its start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Expiry {
    pub grace_s: f64,
    pub max_s: f64,
}

impl Expiry {
    pub const DEFAULT_GRACE_S: u64 = 600;
    pub const DEFAULT_MAX_S: u64 = 48 * 3600;
    /// The largest grace or maximum reservation the settings accept: one year.
    pub const MAX_SETTING_S: u64 = 366 * 86_400;
    /// No reservation lasts longer than this, s (about 317 years), whatever
    /// was stored: its end stays a date PostgreSQL and RFC 3339 can hold.
    /// Time limits are held to ten years when a job is stored; this guards
    /// rows stored before that check.
    pub const LONGEST_S: f64 = 1e10;

    /// When the reservation of a job started at `started_at` ends.
    pub fn ends_at(&self, started_at: DateTime<Utc>, time_limit_s: Option<f64>) -> DateTime<Utc> {
        let seconds = time_limit_s
            .map_or(self.max_s, |limit| limit + self.grace_s)
            .min(Self::LONGEST_S);
        started_at
            .checked_add_signed(chrono::Duration::milliseconds((seconds * 1000.0) as i64))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

impl Default for Expiry {
    fn default() -> Self {
        Expiry {
            grace_s: Self::DEFAULT_GRACE_S as f64,
            max_s: Self::DEFAULT_MAX_S as f64,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// A database URL whose password never appears in `Debug` output or logs.
#[derive(Clone)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for DatabaseUrl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            Ok(Self(s.to_owned()))
        } else {
            Err("must start with postgres:// or postgresql://".into())
        }
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keep host, port and database; drop credentials and parameters
        // (which may carry a password too).
        let without_query = self.0.split('?').next().unwrap_or_default();
        let shown = match without_query.rsplit_once('@') {
            Some((_, host)) => format!("postgres://***@{host}"),
            None => without_query.to_owned(),
        };
        f.write_str(&shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_ends_at_a_date_rfc_3339_can_write_whatever_was_stored() {
        let start = "2026-01-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let expiry = Expiry::default();
        assert_eq!(
            expiry.ends_at(start, Some(3600.0)),
            start + chrono::Duration::seconds(3600 + Expiry::DEFAULT_GRACE_S as i64)
        );
        for limit in [2.43e16, f64::MAX] {
            let ends = expiry.ends_at(start, Some(limit));
            assert!(ends > start, "{ends}");
            assert!(ends.format("%Y").to_string().len() == 4, "{ends}");
        }
    }

    #[test]
    fn database_url_debug_hides_the_password() {
        let url: DatabaseUrl = "postgres://joule:s3cret@db:5432/joulecast".parse().unwrap();
        let shown = format!("{url:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db:5432/joulecast"), "{shown}");
        let url: DatabaseUrl = "postgres://db/joulecast?password=s3cret".parse().unwrap();
        let shown = format!("{url:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

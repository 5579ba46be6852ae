//! The commands and their flags. Every setting is a flag with an environment
//! variable; `joulecast --help` and `joulecast <command> --help` document
//! them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand};

use crate::config::{Expiry, GlobalArgs, Settings};
use crate::tokens::Scope;

#[derive(Debug, Parser)]
#[command(
    name = "joulecast",
    version,
    about = "Energy, power and time predictions for HPC applications",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    /// Settings of `serve`, the default command.
    #[command(flatten)]
    pub serve: ServeArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service (the default).
    Serve(ServeArgs),
    /// Apply the database migrations and exit.
    Migrate,
    /// Print the OpenAPI document (JSON) to standard output.
    Openapi,
    /// Manage API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Import scheduler accounting records as runs.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Run the accuracy suite on synthetic histories and print its report
    /// (markdown, as kept in docs/accuracy.md). Needs no database.
    Accuracy(AccuracyArgs),
    /// Search the empirical scaling model of each series of an Extra-P
    /// single-parameter text file (PARAMETER / POINTS / DATA, optional
    /// REGION and METRIC) and print it. Needs no database.
    Model(ModelArgs),
}

#[derive(Debug, Args)]
pub struct ModelArgs {
    /// The Extra-P text file, or `-` for standard input.
    pub file: PathBuf,
    /// Values of p to predict at, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<f64>,
    /// Expected growth in big-O, e.g. 'O(p log p)'.
    #[arg(long)]
    pub expectation: Option<String>,
    /// How much faster than expected is still approximate (default 'O(log p)').
    #[arg(long)]
    pub deviation_limit: Option<String>,
    /// Exponent set, comma-separated fractions (default: docs/model.md §6.2's 19
    /// from 0 to 3).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub exponents: Option<Vec<String>>,
    /// Powers of log2 p, comma-separated, each 0 to 2 (default 0,1,2).
    #[arg(long, value_delimiter = ',')]
    pub log_powers: Option<Vec<i64>>,
    /// Whether negative exponents are hypotheses (default auto: when the data
    /// fall with p).
    #[arg(long, value_enum)]
    pub negative: Option<crate::service::scaling::NegativeName>,
    /// Terms besides the constant: 1 or 2 (default 2).
    #[arg(long)]
    pub max_terms: Option<i64>,
    /// Print JSON (the `models` of `POST /v1/models/search`, each with
    /// `seconds_per_model`) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Search each series this many times and report the mean time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub repeat: u32,
}

#[derive(Debug, Args)]
pub struct AccuracyArgs {
    /// Number of synthetic applications.
    #[arg(long, default_value_t = 400)]
    pub apps: usize,
    /// Seed of the random generator (the same seed gives the same report).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Keep only the first run at each node count of a synthetic history
    /// (histories measured once per count).
    #[arg(long)]
    pub one_run_per_count: bool,
    /// Grade time-to-solution on real measurements instead of synthetic
    /// histories: CSV files with the columns `config`, `nodes` and `time_s`
    /// (one run per line; other columns are ignored), or directories of
    /// them; without a path, the ARCHER2 data in tests/fixtures/archer2.
    #[arg(
        long,
        value_name = "PATH",
        num_args = 0..,
        default_missing_value = "tests/fixtures/archer2",
        conflicts_with_all = ["apps", "seed", "one_run_per_count"]
    )]
    pub real: Option<Vec<PathBuf>>,
    /// With --real: also write every case (data set, configuration, metric,
    /// node count, truth, the family that answered, each method's % error,
    /// whether the truth lay in the 95 % interval of the model and as
    /// served) to this CSV file.
    #[arg(long, value_name = "FILE", requires = "real")]
    pub cases: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Import Slurm's `sacct --parsable2` output (with its header line):
    /// COMPLETED jobs become runs, steps are folded, every other line is
    /// reported with its number and reason. Importing again adds nothing.
    Sacct(SacctArgs),
}

#[derive(Debug, Args)]
pub struct SacctArgs {
    /// The sacct output; `-` reads standard input.
    pub file: PathBuf,
    /// The field the application tag comes from.
    #[arg(long, value_enum, default_value = "jobname")]
    pub app_from: crate::sacct::AppFrom,
    /// The system's name; default the Cluster field, else `slurm`.
    #[arg(long)]
    pub source: Option<String>,
    /// Job states imported, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "COMPLETED")]
    pub states: Vec<String>,
    /// Offset of sacct's local Start/End times from UTC (run sacct with
    /// TZ=UTC to keep the default).
    #[arg(long, default_value = "+00:00", allow_hyphen_values = true)]
    pub utc_offset: chrono::FixedOffset,
    /// Skipped lines listed at most (all are counted).
    #[arg(long, default_value_t = 50)]
    pub show_skipped: usize,
    /// Data lines read and imported at a time (cut before a job's line, so
    /// each job keeps its steps, and not between consecutive records of one
    /// JobID): memory grows with this, not the file. A JobID repeated further
    /// on, in another part, is imported on its own (see the operations
    /// guide).
    #[arg(long, default_value = "50000")]
    pub lines_per_segment: std::num::NonZeroUsize,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create an API token and print it (it is shown only once).
    Create(TokenCreateArgs),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// Scopes of the token, comma-separated or repeated: read, ingest, schedule, admin.
    #[arg(long = "scope", value_delimiter = ',', required = true)]
    pub scopes: Vec<Scope>,
    /// A name to recognise the token by.
    #[arg(long, default_value = "cli")]
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "JOULECAST_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Let anyone read (applications, runs, predictions) without a token, for
    /// dashboards. Writes still need a token.
    #[arg(long, env = "JOULECAST_PUBLIC_READ", value_parser = BoolishValueParser::new())]
    pub public_read: bool,

    /// Time limit for one request, in seconds.
    #[arg(
        long,
        env = "JOULECAST_REQUEST_TIMEOUT_S",
        default_value_t = Settings::DEFAULT_REQUEST_TIMEOUT_S
    )]
    pub request_timeout_s: u64,

    /// Largest accepted request body, in bytes (a batch of 10,000 runs is about
    /// 3 MB).
    #[arg(
        long,
        env = "JOULECAST_MAX_BODY_BYTES",
        default_value_t = Settings::DEFAULT_MAX_BODY_BYTES
    )]
    pub max_body_bytes: usize,

    /// How long in-flight requests may take to finish after a shutdown signal,
    /// in seconds.
    #[arg(long, env = "JOULECAST_SHUTDOWN_TIMEOUT_S", default_value_t = 10)]
    pub shutdown_timeout_s: u64,

    /// How long a connection may take to send a request's headers, counted
    /// from its opening or its previous answer, in seconds (1 to 86,400); then
    /// it is closed. This bounds idle keep-alive connections too, and how
    /// long an answer may wait for its client to read any of it.
    #[arg(
        long,
        env = "JOULECAST_HEADER_TIMEOUT_S",
        default_value_t = crate::server::DEFAULT_HEADER_TIMEOUT_S,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub header_timeout_s: u64,

    /// The most client connections open at once (1 to 1,000,000). At the
    /// limit a new connection takes the place of the one idle longest, which
    /// is closed (one opened within the last second that has not sent a
    /// request yet is spared); it waits only while every connection has a
    /// request in flight or is that new. Each costs some 10 to 20 KiB of
    /// memory.
    #[arg(
        long,
        env = "JOULECAST_MAX_CONNECTIONS",
        default_value_t = crate::server::DEFAULT_MAX_CONNECTIONS,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
    )]
    pub max_connections: usize,

    /// How long a request's body may take to arrive after its headers, in
    /// seconds (1 to 3,600); then the request is answered 408.
    #[arg(
        long,
        env = "JOULECAST_BODY_TIMEOUT_S",
        default_value_t = crate::server::DEFAULT_BODY_TIMEOUT_S,
        value_parser = clap::value_parser!(u64).range(1..=3_600)
    )]
    pub body_timeout_s: u64,

    /// The most request-body bytes held while bodies arrive, over all
    /// requests at once (at least --max-body-bytes); a body that would pass
    /// it is answered 503 with Retry-After. Bounds the memory of many
    /// clients sending large bodies slowly.
    #[arg(
        long,
        env = "JOULECAST_MAX_RECEIVING_BYTES",
        default_value_t = crate::server::DEFAULT_RECEIVING_BYTES
    )]
    pub max_receiving_bytes: usize,

    /// How long API tokens and application rows are kept in memory, in
    /// seconds (0: not at all). Changes reach every replica at once through
    /// PostgreSQL notifications; this bounds the delay if one is lost.
    #[arg(
        long,
        env = "JOULECAST_CACHE_TTL_S",
        default_value_t = Settings::DEFAULT_CACHE_TTL_S
    )]
    pub cache_ttl_s: u64,

    /// Node classification: a node's power P_u is the mean of its samples
    /// measured within this many days before its latest sample under the
    /// workload.
    #[arg(
        long,
        env = "JOULECAST_NODE_WINDOW_DAYS",
        default_value_t = Settings::DEFAULT_NODE_WINDOW_DAYS,
        value_parser = clap::value_parser!(u32).range(1..=3650)
    )]
    pub node_window_days: u32,

    /// The reference workload whose node classification gives the APC bounds
    /// of predictions, unless a request names another.
    #[arg(
        long,
        env = "JOULECAST_REFERENCE_WORKLOAD",
        default_value = Settings::DEFAULT_REFERENCE_WORKLOAD,
        value_parser = workload_name
    )]
    pub reference_workload: String,

    /// Heavy computations (model searches, scaling rules, efficiency
    /// scalability, run-batch validation) that may run at once; more are
    /// refused with 429 and Retry-After.
    #[arg(
        long,
        env = "JOULECAST_HEAVY_PERMITS",
        default_value_t = Settings::DEFAULT_HEAVY_PERMITS,
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    pub heavy_permits: u16,

    /// A job whose end is never reported stops counting (headroom,
    /// admission, budgets) this many seconds after its time limit…
    #[arg(
        long,
        env = "JOULECAST_RESERVATION_GRACE_S",
        default_value_t = Expiry::DEFAULT_GRACE_S,
        value_parser = clap::value_parser!(u64).range(0..=Expiry::MAX_SETTING_S)
    )]
    pub reservation_grace_s: u64,

    /// …or, without a time limit, this many seconds after its start.
    #[arg(
        long,
        env = "JOULECAST_MAX_RESERVATION_S",
        default_value_t = Expiry::DEFAULT_MAX_S,
        value_parser = clap::value_parser!(u64).range(60..=Expiry::MAX_SETTING_S)
    )]
    pub max_reservation_s: u64,

    /// Do not apply migrations at start-up (apply them with `joulecast migrate`).
    #[arg(long, env = "JOULECAST_NO_MIGRATE", value_parser = BoolishValueParser::new())]
    pub no_migrate: bool,
}

impl ServeArgs {
    /// The service's settings from these arguments: the one place they are
    /// built (tests start from `Settings::default()`).
    pub fn settings(&self) -> Settings {
        Settings {
            public_read: self.public_read,
            request_timeout: Duration::from_secs(self.request_timeout_s),
            max_body_bytes: self.max_body_bytes,
            cache_ttl: Duration::from_secs(self.cache_ttl_s),
            node_window: Duration::from_secs(u64::from(self.node_window_days) * 86_400),
            reference_workload: self.reference_workload.clone(),
            heavy_permits: usize::from(self.heavy_permits),
            expiry: Expiry {
                grace_s: self.reservation_grace_s as f64,
                max_s: self.max_reservation_s as f64,
            },
        }
    }
}

/// A workload name, checked once at start-up: requests that rely on the
/// default never check it again.
fn workload_name(value: &str) -> Result<String, String> {
    crate::validate::identifier(value, crate::validate::TAG_MAX).map(|()| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_is_the_default_command() {
        let cli = Cli::try_parse_from(["joulecast", "--listen", "127.0.0.1:9000"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.serve.listen.port(), 9000);
    }

    #[test]
    fn a_bad_reference_workload_is_refused_at_start_up() {
        let parse = |w: &str| Cli::try_parse_from(["joulecast", "--reference-workload", w]);
        assert!(parse("a b").is_err());
        assert_eq!(
            parse("hpl-stress").unwrap().serve.reference_workload,
            "hpl-stress"
        );
    }

    #[test]
    fn token_create_takes_comma_separated_scopes() {
        let cli = Cli::try_parse_from(["joulecast", "token", "create", "--scope", "read,ingest"])
            .unwrap();
        let Some(Command::Token(TokenCommand::Create(args))) = cli.command else {
            panic!("expected token create");
        };
        assert_eq!(args.scopes, vec![Scope::Read, Scope::Ingest]);
    }

    #[test]
    fn accuracy_real_takes_paths_and_defaults_to_the_fixtures() {
        let real = |rest: &[&str]| {
            let argv = ["joulecast", "accuracy"].iter().chain(rest);
            Cli::try_parse_from(argv).map(|cli| match cli.command {
                Some(Command::Accuracy(args)) => args.real,
                _ => panic!("expected accuracy"),
            })
        };
        assert_eq!(real(&[]).unwrap(), None);
        assert_eq!(
            real(&["--real"]).unwrap(),
            Some(vec![PathBuf::from("tests/fixtures/archer2")])
        );
        assert_eq!(
            real(&["--real", "a.csv", "dir"]).unwrap(),
            Some(vec![PathBuf::from("a.csv"), PathBuf::from("dir")])
        );
        // The synthetic suite's settings mean nothing to real data.
        for other in [["--seed", "2"], ["--apps", "10"]] {
            assert!(real(&[&["--real"][..], &other[..]].concat()).is_err());
        }
        assert!(real(&["--real", "--one-run-per-count"]).is_err());
        assert!(
            real(&["--cases", "out.csv"]).is_err(),
            "--cases needs --real"
        );
        assert!(real(&["--real", "--cases", "out.csv"]).is_ok());
    }
}

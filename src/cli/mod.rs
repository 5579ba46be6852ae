//! The commands: serve, migrate, openapi, token create.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

mod args;

use crate::config::GlobalArgs;
use crate::db::{self, Sharing};
use crate::tokens::{self, Scope};
use crate::{http, server, service, store, telemetry};
pub use args::{
    AccuracyArgs, Cli, Command, ImportCommand, ModelArgs, SacctArgs, ServeArgs, TokenCommand,
    TokenCreateArgs,
};

pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        None => serve(&cli.global, &cli.serve).await,
        Some(Command::Serve(args)) => serve(&cli.global, &args).await,
        Some(Command::Migrate) => {
            let db = db::open(&cli.global, Sharing::AttachIfRunning).await?;
            let result = db::migrate(&db.pool).await;
            db.close().await;
            result?;
            tracing::info!("migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Accuracy(args)) => {
            if let Some(paths) = &args.real {
                let loaded =
                    crate::accuracy::real::load_paths(paths).map_err(anyhow::Error::msg)?;
                for skipped in &loaded.skipped {
                    eprintln!("skipped {skipped}");
                }
                let cases = crate::accuracy::real::run(&loaded.series);
                if cases.is_empty() {
                    anyhow::bail!(
                        "nothing to grade: no configuration has runs at three or more node counts"
                    );
                }
                if let Some(file) = &args.cases {
                    std::fs::write(file, crate::accuracy::real::to_csv(&cases))
                        .with_context(|| format!("writing {}", file.display()))?;
                }
                print!("{}", crate::accuracy::real::to_markdown(&cases));
            } else {
                let runs = if args.one_run_per_count {
                    crate::accuracy::Runs::OnePerCount
                } else {
                    crate::accuracy::Runs::AsDrawn
                };
                let report = crate::accuracy::run(args.apps, args.seed, runs);
                print!("{}", report.to_markdown());
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Model(args)) => model(&args),
        Some(Command::Openapi) => {
            let spec = http::openapi().to_pretty_json()?;
            println!("{spec}");
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Import(ImportCommand::Sacct(args))) => import_sacct(&cli.global, &args).await,
        Some(Command::Token(TokenCommand::Create(args))) => {
            let db = db::open(&cli.global, Sharing::AttachIfRunning).await?;
            let created = async {
                db::migrate(&db.pool).await?;
                Ok::<_, anyhow::Error>(
                    service::tokens::create(&db.pool, &args.name, &args.scopes, None).await?,
                )
            }
            .await;
            db.close().await;
            let created = created?;
            tracing::info!(id = created.info.id, scopes = ?created.info.scopes, "token created");
            // Only the secret on standard output, for `TOKEN=$(joulecast token create ...)`.
            println!("{}", created.token);
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(global: &GlobalArgs, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    telemetry::init_metrics();
    server::raise_open_file_limit();
    // Claim the address first: a port in use fails at once, before any database work.
    let listener =
        server::listen(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let db = db::open(global, Sharing::Exclusive).await?;
    if !args.no_migrate {
        db::migrate(&db.pool).await?;
    } else if let Err(reason) = db::readiness(&db.pool).await {
        tracing::warn!(
            reason,
            "started with --no-migrate: /readyz answers 503, and requests that need what the \
             missing migrations add answer 503, until `joulecast migrate` has run"
        );
    }
    if let Some(cluster) = &db.cluster {
        bootstrap_admin_token(&db.pool, &cluster.layout().admin_token_file).await?;
    }
    // Catch SIGTERM and Ctrl-C from before the first request is answered.
    // Until here they keep their default and end a start-up at once.
    let terminated = server::termination_signal().context("listening for SIGTERM and Ctrl-C")?;
    tracing::info!(address = %listener.local_addr()?, "Joulecast is listening");

    let state = http::AppState::new(db.pool.clone(), args.settings());
    let notifications = tokio::spawn(crate::cache::listen(db.pool.clone(), state.caches.clone()));
    let router = http::router_from(state);
    // Stop on a signal, or when the embedded server dies under us.
    let database_died = Arc::new(AtomicBool::new(false));
    let mut exit_watch = db.cluster.as_ref().map(|c| c.exit_watch());
    let shutdown = {
        let database_died = database_died.clone();
        async move {
            let died = async {
                match exit_watch.as_mut() {
                    Some(watch) => {
                        let _ = watch.wait_for(Option::is_some).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = terminated => {}
                () = died => {
                    tracing::error!("the embedded PostgreSQL exited unexpectedly; stopping");
                    database_died.store(true, Ordering::SeqCst);
                }
            }
        }
    };
    server::serve(
        listener,
        router,
        shutdown,
        server::Limits {
            drain: Duration::from_secs(args.shutdown_timeout_s),
            header_timeout: Duration::from_secs(args.header_timeout_s),
            max_connections: args.max_connections,
            body_timeout: Duration::from_secs(args.body_timeout_s),
            // A body as large as allowed must fit.
            receiving_bytes: args.max_receiving_bytes.max(args.max_body_bytes),
        },
    )
    .await;
    notifications.abort();
    db.close().await;
    tracing::info!("stopped");
    Ok(if database_died.load(Ordering::SeqCst) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// What the parts of a long sacct input did, together.
#[derive(Default)]
struct Total {
    /// The sums; of the skipped lines, the first few only (and no `apps`:
    /// not shown).
    summary: crate::import::Summary,
    /// Every skipped line, counted.
    skipped: usize,
    parts: usize,
}

/// Where the parts of a long sacct input go, and how.
struct Destination<'a> {
    pool: &'a PgPool,
    options: &'a crate::sacct::Options,
    /// Skipped lines kept to be listed.
    keep: usize,
    bar: &'a indicatif::ProgressBar,
}

/// Part of a long sacct input: the header, then data lines from `first`.
struct Part {
    text: String,
    /// The input's line number of the part's first data line.
    first: usize,
    lines: usize,
}

impl Part {
    fn new(header: &str) -> Self {
        Part {
            text: format!("{header}\n"),
            first: 0,
            lines: 0,
        }
    }

    fn push(&mut self, number: usize, line: &str) {
        if self.lines == 0 {
            self.first = number;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.lines += 1;
    }

    /// Import the part and add what it did to `total`, keeping the first
    /// `to.keep` skipped lines; the bar reaches `read` bytes when it is
    /// stored.
    async fn import(
        self,
        to: &Destination<'_>,
        total: &mut Total,
        read: u64,
    ) -> anyhow::Result<()> {
        let Destination {
            pool,
            options,
            keep,
            bar,
        } = *to;
        // The header stands for the line before the part: every line number
        // reported, in reasons too, is the input's.
        let options = crate::sacct::Options {
            first_line: self.first.max(2) - 1,
            ..options.clone()
        };
        let before = bar.position();
        let part = crate::import::sacct(pool, &self.text, &options, None, |done, all| {
            let share = if all == 0 {
                1.0
            } else {
                done as f64 / all as f64
            };
            bar.set_position(before + (share * (read - before) as f64) as u64);
        })
        .await?;
        let summary = &mut total.summary;
        summary.lines += part.lines;
        summary.steps += part.steps;
        summary.created += part.created;
        summary.duplicate += part.duplicate;
        total.skipped += part.skipped.len();
        let room = keep.saturating_sub(summary.skipped.len());
        summary.skipped.extend(part.skipped.into_iter().take(room));
        total.parts += 1;
        bar.set_position(read);
        Ok(())
    }
}

/// `joulecast import sacct`: read the file, import it into the database
/// (attaching to a running service's embedded cluster), print a summary.
///
/// The file is read and imported a part at a time (`--lines-per-segment`
/// data lines, cut before a job's line so that each job keeps its steps,
/// and not between consecutive records of one JobID; past four parts'
/// worth, anywhere): memory follows the part, not the file (before, a file
/// took 16-19 times its size). Line numbers are the file's; the skipped
/// lines listed are the first `--show-skipped`. A line that cannot be read
/// ends the import after the lines before it, with an error naming it.
async fn import_sacct(global: &GlobalArgs, args: &SacctArgs) -> anyhow::Result<ExitCode> {
    use std::io::BufRead;

    let (input, size): (Box<dyn BufRead>, u64) = if args.file.as_os_str() == "-" {
        (Box::new(std::io::BufReader::new(std::io::stdin())), 0)
    } else {
        let file = std::fs::File::open(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(std::io::BufReader::new(file)), size)
    };
    let what = if args.file.as_os_str() == "-" {
        "standard input".to_owned()
    } else {
        args.file.display().to_string()
    };
    let mut lines = input.lines().enumerate().map(|(i, line)| (i + 1, line));
    let options = crate::sacct::Options::checked(
        args.app_from,
        args.states.iter().map(String::as_str),
        args.source.clone(),
        args.utc_offset,
    )
    .map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(|e| format!("--{e}")).collect();
        anyhow::anyhow!(errors.join("; "))
    })?;
    let db = db::open(global, Sharing::AttachIfRunning).await?;
    let bar = if size > 0 {
        indicatif::ProgressBar::new(size).with_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {percent}% of the input ({eta} left)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    let result = async {
        db::migrate(&db.pool).await?;
        // The header: the first line that is not blank.
        let mut header = None;
        for (number, line) in lines.by_ref() {
            let line = line.with_context(|| format!("reading line {number} of {what}"))?;
            if !crate::sacct::blank(&line) {
                header = Some((number, line));
                break;
            }
        }
        let Some((header_line, header)) = header else {
            // As the endpoint answers an empty body.
            return Err(crate::import::ImportError::from(crate::sacct::HeaderError::Empty).into());
        };
        let starts = crate::sacct::JobStarts::new(header_line, &header, options.app_from)
            .map_err(crate::import::ImportError::from)?;
        let to = Destination {
            pool: &db.pool,
            options: &options,
            keep: args.show_skipped,
            bar: &bar,
        };
        let mut total = Total::default();
        let mut part = Part::new(&header);
        let mut read = header.len() as u64 + 1;
        let mut last_job = String::new();
        let per_part = args.lines_per_segment.get();
        let mut unreadable = None;
        for (number, line) in lines {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    unreadable = Some(anyhow::anyhow!(
                        "line {number} of {what} cannot be read ({e}); the lines before it \
                         were imported (above): correct it and import again, what is \
                         stored already is not stored twice"
                    ));
                    break;
                }
            };
            let job = starts.job(&line);
            // Before a new job's line; or anywhere, past four parts' worth
            // without one (an input of steps, or of one JobID, only).
            let cut = part.lines >= per_part.saturating_mul(4)
                || (part.lines >= per_part && job.is_some_and(|job| job != last_job));
            if let Some(job) = job {
                job.clone_into(&mut last_job);
            }
            if cut {
                part.import(&to, &mut total, read).await?;
                part = Part::new(&header);
            }
            read += line.len() as u64 + 1;
            part.push(number, &line);
        }
        if part.lines > 0 || total.parts == 0 {
            part.import(&to, &mut total, read).await?;
        }
        Ok::<_, anyhow::Error>((total, unreadable))
    }
    .await;
    bar.finish_and_clear();
    db.close().await;
    let (
        Total {
            summary, skipped, ..
        },
        unreadable,
    ) = result?;
    println!(
        "{} lines: {} runs stored, {} already stored, {} skipped, {} job steps",
        summary.lines, summary.created, summary.duplicate, skipped, summary.steps
    );
    for line in summary.skipped.iter().take(args.show_skipped) {
        println!(
            "  line {} ({}): {}",
            line.line,
            line.job_id.as_deref().unwrap_or("-"),
            line.reason
        );
    }
    if skipped > args.show_skipped {
        println!("  ... and {} more", skipped - args.show_skipped);
    }
    if let Some(error) = unreadable {
        return Err(error);
    }
    Ok(ExitCode::SUCCESS)
}

/// On the embedded default's first start (no token exists yet), create an
/// admin token and write it to a file only its owner can read. The file is
/// written (durably) before the token is stored: a crash in between leaves no
/// token, and the next start makes a new one.
async fn bootstrap_admin_token(pool: &PgPool, file: &Path) -> anyhow::Result<()> {
    if store::tokens::count(pool).await? > 0 {
        return Ok(());
    }
    let token = tokens::generate();
    let temporary = file.with_extension("tmp");
    let _ = std::fs::remove_file(&temporary);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("creating {}", temporary.display()))?;
    writeln!(out, "{}", token.secret)?;
    out.sync_all()?;
    std::fs::rename(&temporary, file).with_context(|| format!("writing {}", file.display()))?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    store::tokens::insert(
        pool,
        "bootstrap-admin",
        &token.hash,
        &[Scope::Admin.as_str()],
        None,
    )
    .await?;
    tracing::info!(
        file = %file.display(),
        "created the first admin token; read it from this file (mode 0600)"
    );
    Ok(())
}

/// `joulecast model FILE`: the scaling model of each series of an Extra-P
/// file. Bad input is reported with its line or option, exit code 2.
fn model(args: &ModelArgs) -> anyhow::Result<ExitCode> {
    use crate::service::scaling::{self as models, AskInput, ScalingModel};

    let name = args.file.display().to_string();
    let text = if name == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {name}"))?
    };
    let experiment = match crate::extrap::parse(&text) {
        Ok(experiment) => experiment,
        Err(e) => {
            eprintln!("joulecast: {name}: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let ask = AskInput {
        targets: args.targets.clone(),
        expectation: args.expectation.clone(),
        deviation_limit: args.deviation_limit.clone(),
        exponents: args.exponents.clone(),
        log_powers: args.log_powers.clone(),
        negative: args.negative,
        max_terms: args.max_terms,
    }
    .check();
    let ask = match ask {
        Ok(ask) => ask,
        Err(errors) => {
            for e in errors {
                eprintln!("joulecast: --{}: {}", e.field.replace('_', "-"), e.reason);
            }
            return Ok(ExitCode::from(2));
        }
    };

    #[derive(serde::Serialize)]
    struct Timed {
        #[serde(flatten)]
        model: ScalingModel,
        seconds_per_model: f64,
    }
    let mut answers = Vec::with_capacity(experiment.series.len());
    for series in experiment.series {
        let observations = series.observations();
        let started = std::time::Instant::now();
        let mut answer = None;
        for _ in 0..args.repeat {
            answer = Some(models::answer(
                &observations,
                &ask,
                series.region.clone(),
                series.metric.clone(),
            ));
        }
        let seconds_per_model = started.elapsed().as_secs_f64() / f64::from(args.repeat);
        let answer = answer
            .expect("repeat is at least 1")
            .map_err(|e| e.to_string())
            .and_then(|m| {
                m.check_finite()
                    .map_err(|e| format!("{}: {}", e.field, e.reason))
            });
        match answer {
            Ok(model) => answers.push(Timed {
                model,
                seconds_per_model,
            }),
            Err(e) => {
                let label = series_label(&series.region, &series.metric);
                let label = if label.is_empty() {
                    label
                } else {
                    format!("{label}: ")
                };
                eprintln!("joulecast: {name}: {label}{e}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "models": answers }))?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    for Timed {
        model: answer,
        seconds_per_model,
    } in &answers
    {
        let label = series_label(&answer.region, &answer.metric);
        let m = &answer.model;
        if !label.is_empty() {
            writeln!(out, "{label}")?;
        }
        writeln!(out, "  model        {}    {}", m.formula, m.big_o)?;
        writeln!(
            out,
            "  data         {} values at {} points, p {} to {}",
            answer.observations, answer.points, answer.p_min, answer.p_max
        )?;
        let optional = |v: Option<f64>| v.map_or("-".to_owned(), crate::model::pmnf::number);
        writeln!(
            out,
            "  fit          RSS {}, adjusted R² {}, SMAPE {} %, cross-validated {} %",
            crate::model::pmnf::number(m.rss),
            optional(m.adjusted_r2),
            crate::model::pmnf::number(m.smape_pct),
            optional(m.cv_smape_pct)
        )?;
        for p in &answer.predictions {
            writeln!(
                out,
                "  p = {:<8} {}{}",
                p.p,
                crate::model::pmnf::number(p.value),
                if p.extrapolated {
                    " (extrapolated)"
                } else {
                    ""
                }
            )?;
        }
        if let Some(e) = &answer.expectation {
            writeln!(
                out,
                "  expectation  {}: {:?}, δ(p) = {}",
                e.expected, e.outcome, e.divergence
            )?;
        }
        writeln!(
            out,
            "  search       {} hypotheses in {:.3} ms",
            m.hypotheses,
            seconds_per_model * 1e3
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "region / metric", either alone, or nothing.
fn series_label(region: &Option<String>, metric: &Option<String>) -> String {
    [region.as_deref(), metric.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" / ")
}

//! The `runs` table.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

use super::notify;
use super::stats::{run_stats_aggregates, run_stats_columns};
use super::{apps, jobs};

/// Which of energy, power and duration was computed from the other two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derived {
    EnergyJ,
    AvgPowerW,
    DurationS,
}

impl Derived {
    pub fn as_str(self) -> &'static str {
        match self {
            Derived::EnergyJ => "energy_j",
            Derived::AvgPowerW => "avg_power_w",
            Derived::DurationS => "duration_s",
        }
    }

    fn parse(s: &str) -> Option<Derived> {
        [Derived::EnergyJ, Derived::AvgPowerW, Derived::DurationS]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// A validated run, ready to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    pub app: String,
    pub source: String,
    pub job_id: String,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub duration_s: f64,
    pub derived: Option<Derived>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub quality: f64,
    pub account: Option<String>,
}

impl NewRun {
    /// Its (source, job_id): the key that names a run.
    pub fn key(&self) -> (String, String) {
        (self.source.clone(), self.job_id.clone())
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub id: i64,
    pub app: String,
    pub source: String,
    pub job_id: String,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub duration_s: f64,
    pub derived: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub quality: f64,
    pub account: Option<String>,
    pub ingested_at: DateTime<Utc>,
}

impl RunRow {
    pub fn derived(&self) -> Option<Derived> {
        self.derived.as_deref().and_then(Derived::parse)
    }
}

/// The stored run's values, to compare with a resent one.
impl From<&RunRow> for NewRun {
    fn from(r: &RunRow) -> Self {
        NewRun {
            app: r.app.clone(),
            source: r.source.clone(),
            job_id: r.job_id.clone(),
            nodes: r.nodes,
            node_list: r.node_list.clone(),
            energy_j: r.energy_j,
            avg_power_w: r.avg_power_w,
            duration_s: r.duration_s,
            derived: r.derived(),
            started_at: r.started_at,
            ended_at: r.ended_at,
            quality: r.quality,
            account: r.account.clone(),
        }
    }
}

/// What happened to one run of a batch.
#[derive(Debug)]
pub enum Inserted {
    Created(i64),
    /// A run with the same (source, job_id) was already stored.
    Existing(Box<RunRow>),
    /// Not stored: it ended at or before the start of the attempt of its
    /// job running now (started then), so it is an earlier attempt's (a
    /// requeue). The running attempt's end is the job's run.
    EarlierAttempt(DateTime<Utc>),
}

const SELECT_RUN: &str = "SELECT r.id, a.tag AS app, r.source, r.job_id, r.nodes, r.node_list, \
     r.energy_j, r.avg_power_w, r.duration_s, r.derived, r.started_at, r.ended_at, r.quality, \
     r.account, r.ingested_at FROM runs r JOIN applications a ON a.id = r.app_id";

/// What `insert_batch` did.
#[derive(Debug, Default)]
pub struct Batch {
    /// For each run, in order.
    pub inserted: Vec<Inserted>,
    /// Applications removed because the jobs these runs ended left them
    /// unused (`apps::remove_if_unused`).
    pub removed_apps: Vec<String>,
    /// The (source, job_id) keys of the running jobs these runs ended.
    pub released: HashSet<(String, String)>,
    /// A later attempt of a job of these runs started while they were
    /// inserted: nothing is answered, and the transaction must be rolled
    /// back and the batch tried again.
    pub raced: bool,
}

/// When the running attempt of each job that `runs` name started; nothing
/// is read when no run has an end (a run without one is never an earlier
/// attempt's, `earlier_attempt`).
pub async fn running_starts(
    executor: impl PgExecutor<'_>,
    runs: &[&NewRun],
) -> sqlx::Result<HashMap<(String, String), DateTime<Utc>>> {
    if runs.iter().all(|r| r.ended_at.is_none()) {
        return Ok(HashMap::new());
    }
    Ok(sqlx::query_as::<_, (String, String, DateTime<Utc>)>(
        "SELECT source, job_id, started_at FROM jobs WHERE (source, job_id) IN
             (SELECT * FROM unnest($1::text[], $2::text[]))",
    )
    .bind(runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>())
    .bind(runs.iter().map(|r| r.job_id.as_str()).collect::<Vec<_>>())
    .fetch_all(executor)
    .await?
    .into_iter()
    .map(|(source, job_id, started_at)| ((source, job_id), started_at))
    .collect())
}

/// The start of the running attempt of `run`'s job, when `run` ended at or
/// before it (an earlier attempt's run).
pub fn earlier_attempt(
    running: &HashMap<(String, String), DateTime<Utc>>,
    run: &NewRun,
) -> Option<DateTime<Utc>> {
    let started = *running.get(&run.key())?;
    run.ended_at.filter(|&end| end <= started).map(|_| started)
}

/// Insert `runs` (whose (source, job_id) keys must be distinct), creating
/// unknown applications and keeping each application's statistics, its
/// per-node-count sufficient statistics (`run_stats`) and history version up
/// to date. Runs whose key is already stored are left alone and
/// returned as `Existing`. Running jobs with these keys are removed, unless
/// they started at or after the run ended (`EarlierAttempt`: not stored).
/// With `lock_first`, the caller took the admission lock before it read
/// `running`; without, a start committed since makes the batch `raced`.
/// Call inside a transaction: nothing is visible to others until it
/// commits.
pub async fn insert_batch(
    conn: &mut PgConnection,
    runs: &[&NewRun],
    running: &HashMap<(String, String), DateTime<Utc>>,
    lock_first: bool,
) -> sqlx::Result<Batch> {
    if runs.is_empty() {
        return Ok(Batch::default());
    }
    let mut tags: Vec<&str> = runs.iter().map(|r| r.app.as_str()).collect();
    tags.sort_unstable();
    tags.dedup();
    let apps = apps::ensure_and_lock(&mut *conn, &tags).await?;

    // A run that ended at or before the start of the attempt of its job
    // running now (`running`, read by the caller in this transaction) is an
    // earlier attempt's: it neither ends that attempt nor takes the key its
    // run will be stored under. Without `lock_first`, `running` was read
    // without the admission lock, which job starts wait for (an import's
    // part holds it only from the release of the jobs its runs end): a
    // start that commits in between is seen there (`Batch::raced`).
    let earlier = |run: &NewRun| earlier_attempt(running, run);
    let all = runs;
    let runs: Vec<&NewRun> = all
        .iter()
        .copied()
        .filter(|r| earlier(r).is_none())
        .collect();
    let runs = runs.as_slice();

    // Insert in key order so that concurrent batches take index locks in the
    // same order and cannot deadlock on each other.
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| {
        (&runs[a].source, &runs[a].job_id).cmp(&(&runs[b].source, &runs[b].job_id))
    });
    let sorted: Vec<&NewRun> = order.iter().map(|&i| runs[i]).collect();
    let app_ids = sorted
        .iter()
        .map(|r| apps.ids.get(r.app.as_str()).copied())
        .collect::<Option<Vec<i64>>>()
        .ok_or(sqlx::Error::RowNotFound)?;

    let created: Vec<(i64, String, String)> = sqlx::query_as(concat!(
        "WITH input AS (
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[],
                                  $6::float8[], $7::float8[], $8::float8[], $9::text[],
                                  $10::timestamptz[], $11::timestamptz[], $12::float8[], $13::text[])
                 WITH ORDINALITY AS t(app_id, source, job_id, nodes, node_list, energy_j,
                                      avg_power_w, duration_s, derived, started_at, ended_at,
                                      quality, account, ord)
         ),
         inserted AS (
             INSERT INTO runs (app_id, source, job_id, nodes, node_list, energy_j, avg_power_w,
                               duration_s, derived, started_at, ended_at, quality, account)
             SELECT app_id, source, job_id, nodes, string_to_array(node_list, ','), energy_j,
                    avg_power_w, duration_s, derived, started_at, ended_at, quality,
                    -- Without its own, a run ending a running job is the
                    -- job's account's (its budget counted the job).
                    COALESCE(account, (SELECT j.account FROM jobs j
                                       WHERE j.source = input.source
                                         AND j.job_id = input.job_id))
             FROM input ORDER BY ord
             ON CONFLICT (source, job_id) DO NOTHING
             RETURNING id, app_id, source, job_id, nodes, energy_j, avg_power_w, duration_s,
                       quality, COALESCE(ended_at, ingested_at) AS finished_at
         ),
         node_stats AS (
             INSERT INTO run_stats AS s (app_id, nodes, ",
        run_stats_columns!(),
        ")
             SELECT app_id, nodes, ",
        run_stats_aggregates!(),
        "
             FROM inserted GROUP BY app_id, nodes
             ON CONFLICT (app_id, nodes) DO UPDATE SET
                 runs = s.runs + EXCLUDED.runs,
                 weight = s.weight + EXCLUDED.weight,
                 energy_sum = s.energy_sum + EXCLUDED.energy_sum,
                 energy_sumsq = s.energy_sumsq + EXCLUDED.energy_sumsq,
                 energy_min = LEAST(s.energy_min, EXCLUDED.energy_min),
                 energy_max = GREATEST(s.energy_max, EXCLUDED.energy_max),
                 power_sum = s.power_sum + EXCLUDED.power_sum,
                 power_sumsq = s.power_sumsq + EXCLUDED.power_sumsq,
                 power_min = LEAST(s.power_min, EXCLUDED.power_min),
                 power_max = GREATEST(s.power_max, EXCLUDED.power_max),
                 time_sum = s.time_sum + EXCLUDED.time_sum,
                 time_sumsq = s.time_sumsq + EXCLUDED.time_sumsq,
                 time_min = LEAST(s.time_min, EXCLUDED.time_min),
                 time_max = GREATEST(s.time_max, EXCLUDED.time_max)
         ),
         stats AS (
             UPDATE applications a
             SET run_count = a.run_count + s.n,
                 nodes_min = LEAST(a.nodes_min, s.nodes_min),
                 nodes_max = GREATEST(a.nodes_max, s.nodes_max),
                 last_run_at = GREATEST(a.last_run_at, s.last_run_at),
                 history_version = a.history_version + 1
             FROM (SELECT app_id, count(*) AS n, min(nodes) AS nodes_min, max(nodes) AS nodes_max,
                          max(finished_at) AS last_run_at
                   FROM inserted GROUP BY app_id) s
             WHERE a.id = s.app_id
         )
         SELECT id, source, job_id FROM inserted"
    ))
    .bind(app_ids)
    .bind(sorted.iter().map(|r| r.source.as_str()).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.job_id.as_str()).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.nodes).collect::<Vec<_>>())
    // Node names cannot contain commas (validated), so a joined list round-trips.
    .bind(
        sorted
            .iter()
            .map(|r| r.node_list.as_ref().map(|l| l.join(",")))
            .collect::<Vec<_>>(),
    )
    .bind(sorted.iter().map(|r| r.energy_j).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.avg_power_w).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.duration_s).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.derived.map(Derived::as_str)).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.started_at).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.ended_at).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.quality).collect::<Vec<_>>())
    .bind(sorted.iter().map(|r| r.account.as_deref()).collect::<Vec<_>>())
    .fetch_all(&mut *conn)
    .await?;

    apps::remove_unused(&mut *conn, &apps.created).await?;
    if !created.is_empty() {
        // Tell every replica's cache (delivered when the transaction commits).
        let query = format!(
            "SELECT {notify} FROM unnest($1::text[]) AS t(tag)",
            notify = notify::sql_app("tag"),
        );
        sqlx::query(sqlx::AssertSqlSafe(query))
            .bind(&tags)
            .execute(&mut *conn)
            .await?;
    }

    let mut created: HashMap<(String, String), i64> = created
        .into_iter()
        .map(|(id, source, job_id)| ((source, job_id), id))
        .collect();
    let missing: Vec<&NewRun> = runs
        .iter()
        .copied()
        .filter(|r| !created.contains_key(&r.key()))
        .collect();
    let mut existing: HashMap<(String, String), RunRow> = if missing.is_empty() {
        HashMap::new()
    } else {
        let query = format!(
            "{SELECT_RUN} WHERE (r.source, r.job_id) IN \
             (SELECT * FROM unnest($1::text[], $2::text[]))"
        );
        sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(query))
            .bind(
                missing
                    .iter()
                    .map(|r| r.source.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                missing
                    .iter()
                    .map(|r| r.job_id.as_str())
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|row| ((row.source.clone(), row.job_id.clone()), row))
            .collect()
    };

    // Every key is a run now, whether created here or before: its job ends,
    // unless an attempt started since the read above (`raced`).
    let _lock = super::power::lock_admission(&mut *conn).await?;
    if !lock_first {
        let now_running = running_starts(&mut *conn, runs).await?;
        if runs
            .iter()
            .any(|r| earlier_attempt(&now_running, r).is_some())
        {
            return Ok(Batch {
                raced: true,
                ..Batch::default()
            });
        }
    }
    let (released, removed_apps) = jobs::release_finished(
        &mut *conn,
        &runs.iter().map(|r| r.source.as_str()).collect::<Vec<_>>(),
        &runs.iter().map(|r| r.job_id.as_str()).collect::<Vec<_>>(),
    )
    .await?;

    let inserted = all
        .iter()
        .map(|r| {
            let key = r.key();
            if let Some(started) = earlier(r) {
                Ok(Inserted::EarlierAttempt(started))
            } else if let Some(id) = created.remove(&key) {
                Ok(Inserted::Created(id))
            } else if let Some(row) = existing.remove(&key) {
                Ok(Inserted::Existing(Box::new(row)))
            } else {
                // Neither inserted nor found: only possible if the batch's keys
                // were not distinct, which the caller guarantees.
                Err(sqlx::Error::Protocol(format!(
                    "run {}/{} was neither inserted nor found",
                    r.source, r.job_id
                )))
            }
        })
        .collect::<sqlx::Result<Vec<Inserted>>>()?;
    Ok(Batch {
        inserted,
        removed_apps,
        released,
        raced: false,
    })
}

pub async fn get(executor: impl PgExecutor<'_>, id: i64) -> sqlx::Result<Option<RunRow>> {
    let query = format!("{SELECT_RUN} WHERE r.id = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(id)
        .fetch_optional(executor)
        .await
}

/// Filters of the runs listing; time bounds apply to when a run finished (its
/// end time, or its ingestion time when it reported none).
#[derive(Debug, Default, Clone)]
pub struct RunFilter {
    pub nodes: Option<i32>,
    pub min_nodes: Option<i32>,
    pub max_nodes: Option<i32>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// One page of an application's runs in id order, after `after_id`: at
/// most `limit`, and of those only the runs that begin within `names` node
/// names (so the one that crosses `names` is included), and the first two
/// whatever they list (a first run alone past `names`, stored before lists
/// were held to fewer, still shows that more follow); [`within_names`]
/// trims it.
pub async fn list_for_app(
    executor: impl PgExecutor<'_>,
    app_id: i64,
    filter: &RunFilter,
    after_id: i64,
    limit: i64,
    names: i64,
) -> sqlx::Result<Vec<RunRow>> {
    // The page's ids first, with how many node names each run lists; then
    // only the runs that begin within `names` names are read in full, so
    // that a page of runs with long node lists stays bounded in memory.
    let query = format!(
        "WITH page AS (
             SELECT r.id, COALESCE(cardinality(r.node_list), 0) AS names
             FROM runs r
             WHERE r.app_id = $1
               AND ($2::int IS NULL OR r.nodes = $2)
               AND ($3::int IS NULL OR r.nodes >= $3)
               AND ($4::int IS NULL OR r.nodes <= $4)
               AND ($5::timestamptz IS NULL OR COALESCE(r.ended_at, r.ingested_at) >= $5)
               AND ($6::timestamptz IS NULL OR COALESCE(r.ended_at, r.ingested_at) < $6)
               AND r.id > $7
             ORDER BY r.id
             LIMIT $8
         ),
         counted AS (
             SELECT id, sum(names) OVER (ORDER BY id) - names AS before,
                    row_number() OVER (ORDER BY id) AS k
             FROM page
         )
         {SELECT_RUN}
         WHERE r.id IN (SELECT id FROM counted WHERE before <= $9 OR k <= 2)
         ORDER BY r.id"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(app_id)
        .bind(filter.nodes)
        .bind(filter.min_nodes)
        .bind(filter.max_nodes)
        .bind(filter.from)
        .bind(filter.to)
        .bind(after_id)
        .bind(limit)
        .bind(names)
        .fetch_all(executor)
        .await
}

/// How many of `rows` (a page read by [`list_for_app`]) to answer: at most
/// `limit`, and no more than list `names` node names in all, but at least
/// one.
pub fn within_names(rows: &[RunRow], limit: usize, names: u64) -> usize {
    let mut listed = 0u64;
    rows.iter()
        .take(limit)
        .enumerate()
        .take_while(|(i, run)| {
            listed += run.node_list.as_ref().map_or(0, |l| l.len() as u64);
            *i == 0 || listed <= names
        })
        .count()
}

/// One run's node count, quantities and quality: what the predictor needs.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct RunQuantities {
    pub nodes: i32,
    pub energy_j: f64,
    pub avg_power_w: f64,
    pub duration_s: f64,
    pub quality: f64,
}

/// All runs of an application, reduced to what the predictor needs (an
/// index-only scan of runs_app_nodes_idx).
pub async fn quantities(
    executor: impl PgExecutor<'_>,
    app_id: i64,
) -> sqlx::Result<Vec<RunQuantities>> {
    sqlx::query_as(
        "SELECT nodes, energy_j, avg_power_w, duration_s, quality
         FROM runs WHERE app_id = $1 ORDER BY nodes",
    )
    .bind(app_id)
    .fetch_all(executor)
    .await
}

/// A run's power and node list, for normalising history to the best node.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunPower {
    pub id: i64,
    pub nodes: i32,
    pub avg_power_w: f64,
    pub quality: f64,
    pub node_list: Option<Vec<String>>,
}

/// The runs of an application after run `after`, with their node lists, in
/// id order, each passed to `each` as it arrives: what is kept of them is
/// the caller's choice, so that a history of millions of node names is
/// never held at once.
pub async fn for_each_power_after(
    executor: impl PgExecutor<'_>,
    app_id: i64,
    after: i64,
    mut each: impl FnMut(RunPower),
) -> sqlx::Result<()> {
    use futures_util::TryStreamExt;
    let mut rows = sqlx::query_as::<_, RunPower>(
        "SELECT id, nodes, avg_power_w, quality, node_list
         FROM runs WHERE app_id = $1 AND id > $2 ORDER BY id",
    )
    .bind(app_id)
    .bind(after)
    .fetch(executor);
    while let Some(run) = rows.try_next().await? {
        each(run);
    }
    Ok(())
}

/// The run stored under a (source, job_id), if any.
pub async fn id_by_key(
    executor: impl PgExecutor<'_>,
    source: &str,
    job_id: &str,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar("SELECT id FROM runs WHERE source = $1 AND job_id = $2")
        .bind(source)
        .bind(job_id)
        .fetch_optional(executor)
        .await
}

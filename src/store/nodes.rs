//! The `nodes` and `node_samples` tables.
//!
//! Every write notifies `nodes` on the cache channel (see `cache`), so that
//! every replica drops the node powers it keeps for APC bounds.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use std::collections::HashMap;

use super::notify::{self, Change};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    pub id: i64,
    pub name: String,
    pub partition: Option<String>,
    pub hardware_model: String,
    pub idle_power_w: Option<f64>,
    pub peak_power_w: Option<f64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const COLUMNS: &str =
    "id, name, partition, hardware_model, idle_power_w, peak_power_w, created_at, updated_at";

/// What administrators say about a node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeMetadata {
    pub partition: Option<String>,
    pub hardware_model: String,
    pub idle_power_w: Option<f64>,
    pub peak_power_w: Option<f64>,
}

/// Create a node or replace its metadata. Returns the row and whether it was
/// created.
pub async fn upsert(
    executor: impl PgExecutor<'_>,
    name: &str,
    metadata: &NodeMetadata,
) -> sqlx::Result<(NodeRow, bool)> {
    let query = format!(
        "INSERT INTO nodes (name, partition, hardware_model, idle_power_w, peak_power_w)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (name) DO UPDATE
         SET partition = EXCLUDED.partition,
             hardware_model = EXCLUDED.hardware_model,
             idle_power_w = EXCLUDED.idle_power_w,
             peak_power_w = EXCLUDED.peak_power_w,
             updated_at = now()
         RETURNING {COLUMNS}, (xmax = 0) AS created,
                   {notify} IS NULL AS _notified",
        notify = notify::sql(&Change::Nodes),
    );
    #[derive(sqlx::FromRow)]
    struct Upserted {
        #[sqlx(flatten)]
        node: NodeRow,
        created: bool,
    }
    let row: Upserted = sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(name)
        .bind(&metadata.partition)
        .bind(&metadata.hardware_model)
        .bind(metadata.idle_power_w)
        .bind(metadata.peak_power_w)
        .fetch_one(executor)
        .await?;
    Ok((row.node, row.created))
}

/// Remove node `name` and its power samples (a decommissioned node); whether
/// it was registered. Every replica is told (the node powers change).
pub async fn delete(pool: &sqlx::PgPool, name: &str) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let id: Option<i64> = sqlx::query_scalar("SELECT id FROM nodes WHERE name = $1 FOR UPDATE")
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(id) = id else {
        return Ok(false);
    };
    sqlx::query("DELETE FROM node_samples WHERE node_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let query = format!(
        "DELETE FROM nodes WHERE id = $1 RETURNING {notify} IS NULL",
        notify = notify::sql(&Change::Nodes),
    );
    sqlx::query(sqlx::AssertSqlSafe(query))
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

pub async fn get(executor: impl PgExecutor<'_>, name: &str) -> sqlx::Result<Option<NodeRow>> {
    let query = format!("SELECT {COLUMNS} FROM nodes WHERE name = $1");
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(name)
        .fetch_optional(executor)
        .await
}

/// One page of nodes in name order after `after_name`, of one partition when
/// `partition` is given.
pub async fn list(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
    after_name: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<NodeRow>> {
    let query = format!(
        "SELECT {COLUMNS} FROM nodes
         WHERE ($1::text IS NULL OR partition = $1)
           AND ($2::text IS NULL OR name > $2)
         ORDER BY name
         LIMIT $3"
    );
    sqlx::query_as(sqlx::AssertSqlSafe(query))
        .bind(partition)
        .bind(after_name)
        .bind(limit)
        .fetch_all(executor)
        .await
}

/// A validated power sample.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSample {
    pub node: String,
    pub workload: String,
    pub avg_power_w: f64,
    pub measured_at: DateTime<Utc>,
}

/// What became of one sample of a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleOutcome {
    Created(i64),
    /// Already stored with the same power.
    Duplicate(i64),
    /// Already stored with another power: the stored sample and its power.
    Conflict {
        sample_id: i64,
        stored_w: f64,
    },
    /// The node is not in the registry.
    UnknownNode,
    /// The power is above `PEAK_FACTOR` times the node's registered peak.
    AbovePeak {
        peak_w: f64,
    },
}

/// How far above its node's registered vendor peak a sample's power may
/// be: a peak is the most a node draws, so a sample at 1.5 times it is a
/// unit or a node mixed up (21.3 kW sent for a 350 W node), which would
/// set the worst-node bound of every job in its partition.
pub const PEAK_FACTOR: f64 = 1.5;

/// Store samples in one transaction, item by item: a sample of an unknown
/// node, one far above its node's peak (`PEAK_FACTOR`) or one that clashes
/// with a stored sample is not stored; the others
/// are, and are committed before this returns.
pub async fn insert_samples(
    pool: &PgPool,
    samples: &[NewSample],
) -> sqlx::Result<Vec<SampleOutcome>> {
    let mut tx = pool.begin().await?;
    let names: Vec<&str> = samples.iter().map(|s| s.node.as_str()).collect();
    // The batch's nodes, held against removal until it commits (a removal
    // takes a node's row FOR UPDATE): a node removed meanwhile is unknown
    // here, rather than failing the insert's reference to it (409 for the
    // whole batch) or taking away a stored sample compared below (500).
    let known: Vec<(String, i64, Option<f64>)> = sqlx::query_as(
        "SELECT name, id, peak_power_w FROM nodes WHERE name = ANY($1) ORDER BY id FOR KEY SHARE",
    )
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?;
    let peaks: HashMap<&str, f64> = known
        .iter()
        .filter_map(|(name, _, peak)| Some((name.as_str(), (*peak)?)))
        .collect();
    // Each item's node's peak where its power is above PEAK_FACTOR times it.
    let above_peak: Vec<Option<f64>> = samples
        .iter()
        .map(|s| {
            let peak = *peaks.get(s.node.as_str())?;
            (s.avg_power_w > PEAK_FACTOR * peak).then_some(peak)
        })
        .collect();
    let refused: Vec<bool> = above_peak.iter().map(Option::is_some).collect();
    let (known_names, known_ids): (Vec<String>, Vec<i64>) =
        known.into_iter().map(|(name, id, _)| (name, id)).unzip();
    let workloads: Vec<&str> = samples.iter().map(|s| s.workload.as_str()).collect();
    let powers: Vec<f64> = samples.iter().map(|s| s.avg_power_w).collect();
    let times: Vec<DateTime<Utc>> = samples.iter().map(|s| s.measured_at).collect();
    // Each item's node id (NULL: unknown), the stored sample under its key
    // before this batch, and whether this statement stored it. Items are
    // numbered so that the first of several with one key is the one stored.
    #[derive(sqlx::FromRow)]
    struct Row {
        item: i64,
        node_id: Option<i64>,
        inserted_id: Option<i64>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "WITH items AS (
             SELECT i.item, n.id AS node_id, i.workload, i.power, i.measured_at, i.refused
             FROM unnest($1::text[], $2::text[], $3::float8[], $4::timestamptz[], $7::bool[])
                  WITH ORDINALITY AS i(name, workload, power, measured_at, refused, item)
             LEFT JOIN unnest($5::text[], $6::int8[]) AS n(name, id) ON n.name = i.name
         ),
         firsts AS (
             SELECT DISTINCT ON (node_id, workload, measured_at) *
             FROM items WHERE node_id IS NOT NULL AND NOT refused
             ORDER BY node_id, workload, measured_at, item
         ),
         inserted AS (
             INSERT INTO node_samples (node_id, workload, avg_power_w, measured_at)
             SELECT node_id, workload, power, measured_at FROM firsts ORDER BY item
             ON CONFLICT ON CONSTRAINT node_samples_key DO NOTHING
             RETURNING id, node_id, workload, measured_at
         )
         SELECT items.item, items.node_id, ins.id AS inserted_id
         FROM items
         LEFT JOIN firsts f ON f.item = items.item
         LEFT JOIN inserted ins ON (ins.node_id, ins.workload, ins.measured_at)
                                 = (f.node_id, f.workload, f.measured_at)
         ORDER BY items.item",
    )
    .bind(&names)
    .bind(&workloads)
    .bind(&powers)
    .bind(&times)
    .bind(&known_names)
    .bind(&known_ids)
    .bind(&refused)
    .fetch_all(&mut *tx)
    .await?;
    let mut outcomes = vec![SampleOutcome::UnknownNode; samples.len()];
    let mut compare = Vec::new();
    for row in rows {
        let index = usize::try_from(row.item - 1).unwrap_or(usize::MAX);
        let Some(outcome) = outcomes.get_mut(index) else {
            continue;
        };
        if let Some(peak_w) = above_peak[index] {
            *outcome = SampleOutcome::AbovePeak { peak_w };
            continue;
        }
        match (row.node_id, row.inserted_id) {
            (None, _) => {}
            (Some(_), Some(id)) => *outcome = SampleOutcome::Created(id),
            (Some(node_id), None) => compare.push((index, node_id)),
        }
    }
    // The rest clash with a stored sample (possibly one stored just now by an
    // earlier item): the same power is a duplicate, another a conflict. One
    // query for all of them (one each took 1.2 s for 10,000 duplicates).
    let (indices, node_ids): (Vec<i64>, Vec<i64>) = compare
        .iter()
        .map(|&(index, node_id)| (index as i64, node_id))
        .unzip();
    let clash_workloads: Vec<&str> = compare
        .iter()
        .map(|&(index, _)| samples[index].workload.as_str())
        .collect();
    let clash_times: Vec<DateTime<Utc>> = compare
        .iter()
        .map(|&(index, _)| samples[index].measured_at)
        .collect();
    let stored: Vec<(i64, i64, f64)> = sqlx::query_as(
        "SELECT c.index, s.id, s.avg_power_w
         FROM unnest($1::int8[], $2::int8[], $3::text[], $4::timestamptz[])
              AS c(index, node_id, workload, measured_at)
         JOIN node_samples s ON (s.node_id, s.workload, s.measured_at)
                              = (c.node_id, c.workload, c.measured_at)",
    )
    .bind(&indices)
    .bind(&node_ids)
    .bind(&clash_workloads)
    .bind(&clash_times)
    .fetch_all(&mut *tx)
    .await?;
    // The batch holds its nodes, so their samples stay; a clash not found
    // again is left unknown rather than guessed.
    for (index, id, stored_w) in stored {
        let Some(index) = usize::try_from(index).ok().filter(|&i| i < samples.len()) else {
            continue;
        };
        outcomes[index] = if crate::domain::same_quantity(samples[index].avg_power_w, stored_w) {
            SampleOutcome::Duplicate(id)
        } else {
            SampleOutcome::Conflict {
                sample_id: id,
                stored_w,
            }
        };
    }
    if outcomes
        .iter()
        .any(|o| matches!(o, SampleOutcome::Created(_)))
    {
        notify::send(&mut *tx, &Change::Nodes).await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// One node's power under a workload: the mean of its samples within the
/// window before its latest one.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct NodePowerRow {
    pub name: String,
    pub power_w: f64,
    pub samples: i64,
    pub last_measured_at: DateTime<Utc>,
}

/// Each node's power under `workload` (of `partition` only, when given): the
/// mean of its samples measured within `window_s` seconds before its latest
/// sample, so that a node's figure reflects its recent state whenever its
/// last campaign was. Summed in the order the samples were measured (one
/// per node, workload and time), so that every plan and every replica gets
/// the same bits: models are keyed by them.
pub async fn powers(
    executor: impl PgExecutor<'_>,
    workload: &str,
    partition: Option<&str>,
    window_s: f64,
) -> sqlx::Result<Vec<NodePowerRow>> {
    sqlx::query_as(
        "WITH latest AS (
             SELECT node_id, max(measured_at) AS last
             FROM node_samples WHERE workload = $1 GROUP BY node_id
         )
         SELECT n.name, avg(s.avg_power_w ORDER BY s.measured_at) AS power_w,
                count(*) AS samples,
                l.last AS last_measured_at
         FROM node_samples s
         JOIN latest l ON l.node_id = s.node_id
         JOIN nodes n ON n.id = s.node_id
         WHERE s.workload = $1
           AND s.measured_at > l.last - make_interval(secs => $3)
           AND ($2::text IS NULL OR n.partition = $2)
         GROUP BY n.name, l.last
         ORDER BY n.name",
    )
    .bind(workload)
    .bind(partition)
    .bind(window_s)
    .fetch_all(executor)
    .await
}

/// The vendor peak powers the registry knows (of one partition, when given).
pub async fn peaks(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
) -> sqlx::Result<Vec<(String, f64)>> {
    sqlx::query_as(
        "SELECT name, peak_power_w FROM nodes
         WHERE peak_power_w IS NOT NULL AND ($1::text IS NULL OR partition = $1)",
    )
    .bind(partition)
    .fetch_all(executor)
    .await
}

/// The largest vendor peak power of a partition's nodes (all when `None`).
pub async fn max_peak(
    executor: impl PgExecutor<'_>,
    partition: Option<&str>,
) -> sqlx::Result<Option<f64>> {
    sqlx::query_scalar(
        "SELECT max(peak_power_w) FROM nodes WHERE $1::text IS NULL OR partition = $1",
    )
    .bind(partition)
    .fetch_one(executor)
    .await
}

//! The power a scope (one partition, or the whole system) draws: its running
//! jobs' reservations and its free nodes' idle power.

pub use crate::config::Expiry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};

/// A scope's power totals at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draw {
    /// Σ of the scope's running jobs' reserved power.
    pub reserved_w: f64,
    /// Nodes held by jobs reported without a node list.
    pub anonymous_nodes: i64,
    /// Registered nodes of the scope that no job names.
    pub free: Nodes,
    /// Of those, the ones in `taken` (a job about to start).
    pub taken: Nodes,
}

/// A set of registered nodes' idle powers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Nodes {
    pub count: i64,
    /// Σ of the recorded idle powers.
    pub known_w: f64,
    /// How many have no recorded idle power.
    pub unknown: i64,
}

impl Nodes {
    fn add(&mut self, idle_power_w: Option<f64>) {
        self.count += 1;
        match idle_power_w {
            Some(w) => self.known_w += w,
            None => self.unknown += 1,
        }
    }

    pub fn without(self, other: Nodes) -> Nodes {
        Nodes {
            count: self.count - other.count,
            known_w: self.known_w - other.known_w,
            unknown: self.unknown - other.unknown,
        }
    }
}

/// A running job's share of the load.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobLoad {
    pub partition: Option<String>,
    pub reserved_w: f64,
    pub nodes: i32,
    pub node_list: Option<Vec<String>>,
    pub account: Option<String>,
    pub started_at: DateTime<Utc>,
    pub predicted_ets_j: Option<f64>,
    pub predicted_tts_s: Option<f64>,
    pub time_limit_s: Option<f64>,
    /// When its reservation ends (`Expiry::ends_at`).
    #[sqlx(skip)]
    pub expires_at: DateTime<Utc>,
}

/// A registered node's idle power.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeIdle {
    pub name: String,
    pub partition: Option<String>,
    pub idle_power_w: Option<f64>,
}

/// Every running job whose reservation has not ended at `now` (`expiry`),
/// and every registered node, as the power totals need them (read in that
/// order, in the caller's transaction).
pub async fn load(
    conn: &mut PgConnection,
    expiry: Expiry,
    now: DateTime<Utc>,
) -> sqlx::Result<Load> {
    let registry = Arc::new(registry(&mut *conn).await?);
    load_jobs(conn, expiry, now, registry).await
}

/// The node registry: every registered node's partition and idle power.
pub async fn registry(conn: &mut PgConnection) -> sqlx::Result<Registry> {
    let nodes: Vec<NodeIdle> = sqlx::query_as("SELECT name, partition, idle_power_w FROM nodes")
        .fetch_all(conn)
        .await?;
    Ok(Registry::new(nodes))
}

/// Every running job whose reservation has not ended at `now` (`expiry`),
/// over `registry`. The end is `Expiry::ends_at`, as a job's `expired` flag
/// and the headroom's breakdown read it, and against the caller's `now`,
/// not the database's: the totals and the breakdown of one answer agree at
/// the edge.
pub async fn load_jobs(
    conn: &mut PgConnection,
    expiry: Expiry,
    now: DateTime<Utc>,
    registry: Arc<Registry>,
) -> sqlx::Result<Load> {
    // The database leaves out what ended well before (a minute's margin for
    // the two clocks and roundings); the rest is decided below.
    let mut jobs: Vec<JobLoad> = sqlx::query_as(
        "SELECT partition, reserved_w, nodes, node_list, account, started_at,
                predicted_ets_j, predicted_tts_s, time_limit_s
         FROM jobs
         WHERE started_at + make_interval(secs => LEAST(COALESCE(time_limit_s + $1, $2), $3))
               > $4 - interval '1 minute'",
    )
    .bind(expiry.grace_s)
    .bind(expiry.max_s)
    .bind(Expiry::LONGEST_S)
    .bind(now)
    .fetch_all(conn)
    .await?;
    for job in &mut jobs {
        job.expires_at = expiry.ends_at(job.started_at, job.time_limit_s);
    }
    jobs.retain(|job| job.expires_at > now);
    Ok(Load::new(jobs, registry))
}

/// The idle powers of a set of registered nodes.
#[derive(Debug, Clone, Copy, Default)]
struct IdleSum {
    count: usize,
    known_w: f64,
    unknown: usize,
}

/// The registered nodes: their partitions and idle powers. It changes only
/// with the registry, not with every job, so it is kept in memory apart
/// from the running jobs (`cache`).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    nodes: Vec<NodeIdle>,
    /// Every registered node's name, with its partition and idle power.
    registered: HashMap<String, (Option<String>, Option<f64>)>,
    /// Per partition that registered nodes are in, their idle powers: how
    /// many, the sum of those recorded, how many without one.
    idle: HashMap<String, IdleSum>,
    /// The same of the registered nodes in no partition.
    unpartitioned: IdleSum,
}

/// The running jobs and registered nodes at one moment.
#[derive(Debug, Clone, Default)]
pub struct Load {
    jobs: Vec<JobLoad>,
    registry: Arc<Registry>,
    /// Nodes some job names.
    held: HashSet<String>,
    /// The earliest end of the jobs' reservations.
    first_expiry: Option<DateTime<Utc>>,
}

impl Load {
    pub fn new(jobs: Vec<JobLoad>, registry: Arc<Registry>) -> Load {
        let held = jobs
            .iter()
            .filter_map(|j| j.node_list.as_ref())
            .flatten()
            .cloned()
            .collect();
        let first_expiry = jobs.iter().map(|j| j.expires_at).min();
        Load {
            jobs,
            registry,
            held,
            first_expiry,
        }
    }

    /// The registered nodes the load counts.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Whether every reservation read is still in force at `now`: a load
    /// kept in memory past the first one's end would count that job on (in
    /// admission and budgets, while headroom, read afresh, no longer did).
    pub fn current_at(&self, now: DateTime<Utc>) -> bool {
        self.first_expiry.is_none_or(|end| now < end)
    }

    /// The load at a later time `at`, as far as it is known now: without the
    /// jobs whose reservations end by then (their nodes idle again).
    pub fn at(&self, at: DateTime<Utc>) -> Load {
        let jobs = self
            .jobs
            .iter()
            .filter(|j| j.expires_at > at)
            .cloned()
            .collect();
        Load::new(jobs, self.registry.clone())
    }

    /// The names of `list` that a running job names too, in `list`'s order.
    pub fn held_of<'a>(&self, list: &'a [String]) -> Vec<&'a str> {
        list.iter()
            .filter(|name| self.held.contains(name.as_str()))
            .map(String::as_str)
            .collect()
    }
}

impl Registry {
    pub fn new(nodes: Vec<NodeIdle>) -> Registry {
        let registered = nodes
            .iter()
            .map(|n| (n.name.clone(), (n.partition.clone(), n.idle_power_w)))
            .collect();
        let mut idle: HashMap<String, IdleSum> = HashMap::new();
        let mut unpartitioned = IdleSum::default();
        for node in &nodes {
            let sum = match &node.partition {
                Some(p) => idle.entry(p.clone()).or_default(),
                None => &mut unpartitioned,
            };
            sum.count += 1;
            match node.idle_power_w {
                Some(w) => sum.known_w += w,
                None => sum.unknown += 1,
            }
        }
        Registry {
            nodes,
            registered,
            idle,
            unpartitioned,
        }
    }

    /// The idle power a job's nodes draw at least, and which the load
    /// counts for them while they idle: with a node list, its registered
    /// nodes' idle powers; without one, `nodes` × the mean idle power of
    /// the partition's registered nodes (all, without a partition). A node
    /// without a recorded idle power counts at `default_w`.
    pub fn idle_floor(
        &self,
        partition: Option<&str>,
        list: Option<&[String]>,
        nodes: u32,
        default_w: f64,
    ) -> f64 {
        if let Some(list) = list {
            return list
                .iter()
                .filter_map(|name| self.registered.get(name))
                .map(|(_, idle)| idle.unwrap_or(default_w))
                .sum();
        }
        let sum = match partition {
            Some(p) => self.idle.get(p).copied().unwrap_or_default(),
            None => self.idle.values().fold(self.unpartitioned, |a, b| IdleSum {
                count: a.count + b.count,
                known_w: a.known_w + b.known_w,
                unknown: a.unknown + b.unknown,
            }),
        };
        if sum.count == 0 {
            return 0.0;
        }
        let total = sum.known_w + sum.unknown as f64 * default_w;
        total / sum.count as f64 * f64::from(nodes)
    }

    /// Whether a registered node is in `partition`.
    pub fn has_partition(&self, partition: &str) -> bool {
        self.idle.contains_key(partition)
    }

    /// How many registered nodes are in `partition` (all of them for `None`).
    pub fn nodes_in(&self, partition: Option<&str>) -> usize {
        match partition {
            None => self.nodes.len(),
            Some(p) => self.idle.get(p).map_or(0, |sum| sum.count),
        }
    }

    /// Whether `name` is in the node registry.
    pub fn is_registered(&self, name: &str) -> bool {
        self.registered.contains_key(name)
    }

    /// The partition the registry has every registered node of `list` in,
    /// when that is one partition (`None` when they are in several, in
    /// none, or no node of the list is registered).
    pub fn partition_of_all(&self, list: &[String]) -> Option<&str> {
        let mut partitions = list
            .iter()
            .filter_map(|n| self.registered.get(n).map(|(p, _)| p));
        let first = partitions.next()?.as_deref()?;
        partitions
            .all(|p| p.as_deref() == Some(first))
            .then_some(first)
    }
}

impl Load {
    /// The running jobs of an account.
    pub fn of_account<'a>(&'a self, account: &'a str) -> impl Iterator<Item = &'a JobLoad> {
        self.jobs
            .iter()
            .filter(move |j| j.account.as_deref() == Some(account))
    }

    /// The totals of `partition` (`None`: the whole system). A node some job
    /// names is not free, whatever the job's partition. `taken` names nodes
    /// a job would take; those of them that are free are totalled apart.
    pub fn draw(&self, partition: Option<&str>, taken: &[String]) -> Draw {
        self.draw_where(|p| partition.is_none() || p.as_deref() == partition, taken)
    }

    /// The totals of each partition named by a node or a running job, and
    /// (under `None`) of the nodes and jobs that name none: the whole
    /// system's draw, split so that the nodes a job holds without a node
    /// list come out of its own partition's idle nodes.
    /// `also` names one more (a job about to start there).
    pub fn draws_by_partition(
        &self,
        taken: &[String],
        also: Option<&str>,
    ) -> Vec<(Option<String>, Draw)> {
        // One pass over the jobs and nodes for all partitions (a pass per
        // partition cost an admission about 150 µs with 1,000 jobs); a
        // cluster has few partitions, so each is found by a linear search.
        let mut parts: Vec<(Option<&str>, Draw)> = Vec::new();
        fn part<'a, 'v>(
            parts: &'v mut Vec<(Option<&'a str>, Draw)>,
            p: Option<&'a str>,
        ) -> &'v mut Draw {
            let i = match parts.iter().position(|(q, _)| *q == p) {
                Some(i) => i,
                None => {
                    parts.push((p, Draw::default()));
                    parts.len() - 1
                }
            };
            &mut parts[i].1
        }
        part(&mut parts, also);
        for job in &self.jobs {
            job.add_to(part(&mut parts, job.partition.as_deref()));
        }
        let taken: HashSet<&str> = taken.iter().map(String::as_str).collect();
        for node in self
            .registry
            .nodes
            .iter()
            .filter(|n| !self.held.contains(&n.name))
        {
            node.add_to(part(&mut parts, node.partition.as_deref()), &taken);
        }
        let mut parts: Vec<(Option<String>, Draw)> = parts
            .into_iter()
            .map(|(p, draw)| (p.map(str::to_owned), draw))
            .collect();
        parts.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        parts
    }

    fn draw_where(&self, in_scope: impl Fn(&Option<String>) -> bool, taken: &[String]) -> Draw {
        let mut draw = Draw::default();
        for job in self.jobs.iter().filter(|j| in_scope(&j.partition)) {
            job.add_to(&mut draw);
        }
        let taken: HashSet<&str> = taken.iter().map(String::as_str).collect();
        for node in self
            .registry
            .nodes
            .iter()
            .filter(|n| in_scope(&n.partition) && !self.held.contains(&n.name))
        {
            node.add_to(&mut draw, &taken);
        }
        draw
    }
}

impl JobLoad {
    /// Count this job in `draw`: its reservation, and the nodes it holds
    /// without naming them.
    fn add_to(&self, draw: &mut Draw) {
        draw.reserved_w += self.reserved_w;
        if self.node_list.is_none() {
            draw.anonymous_nodes += i64::from(self.nodes);
        }
    }
}

impl NodeIdle {
    /// Count this free node in `draw`, and among its `taken` ones if named.
    fn add_to(&self, draw: &mut Draw, taken: &HashSet<&str>) {
        draw.free.add(self.idle_power_w);
        if taken.contains(self.name.as_str()) {
            draw.taken.add(self.idle_power_w);
        }
    }
}

/// Serialises the decisions that reserve power or energy (job starts): two
/// starts cannot both pass a cap only one of them fits under. Taken with
/// `pg_advisory_xact_lock`, released at the end of the transaction.
pub const ADMISSION_LOCK: i64 = 0x4a6f_756c_6563_6173; // "Joulecas"

/// Proof that a transaction holds the admission lock. Only
/// `lock_admission` makes one, and every write that reserves or releases
/// power or energy asks for it, so a reservation made without the lock does
/// not compile. (It does not name the transaction: pass the one you locked.)
#[derive(Debug)]
#[must_use = "the lock proves nothing unless the writes that need it get it"]
pub struct AdmissionLock(());

/// Take the admission lock for the rest of the transaction.
pub async fn lock_admission(executor: impl PgExecutor<'_>) -> sqlx::Result<AdmissionLock> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(ADMISSION_LOCK)
        .execute(executor)
        .await?;
    Ok(AdmissionLock(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_idle_floor_is_the_idle_power_the_load_counts_for_the_nodes() {
        let node = |name: &str, partition: &str, idle: Option<f64>| NodeIdle {
            name: name.into(),
            partition: Some(partition.into()),
            idle_power_w: idle,
        };
        let load = Registry::new(vec![
            node("m1", "cpu", Some(90.0)),
            node("m2", "cpu", Some(110.0)),
            node("g1", "gpu", Some(400.0)),
            node("g2", "gpu", None),
        ]);
        // Without a node list: as many nodes at the scope's mean idle power.
        assert_eq!(load.idle_floor(Some("cpu"), None, 4, 100.0), 400.0);
        assert_eq!(load.idle_floor(Some("gpu"), None, 2, 100.0), 500.0);
        assert_eq!(load.idle_floor(None, None, 4, 100.0), 700.0);
        // A node list: its registered nodes' own idle powers.
        let list = ["g1".to_owned(), "m1".to_owned(), "nowhere".to_owned()];
        assert_eq!(load.idle_floor(None, Some(&list), 3, 100.0), 490.0);
        // No registered node in the scope: no floor.
        assert_eq!(load.idle_floor(Some("elsewhere"), None, 4, 100.0), 0.0);
    }

    #[test]
    fn a_node_list_s_partition_is_the_one_all_its_registered_nodes_share() {
        let node = |name: &str, partition: Option<&str>| NodeIdle {
            name: name.into(),
            partition: partition.map(String::from),
            idle_power_w: None,
        };
        let load = Registry::new(vec![
            node("g1", Some("gpu")),
            node("g2", Some("gpu")),
            node("c1", Some("cpu")),
            node("x1", None),
        ]);
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(load.partition_of_all(&list(&["g1", "g2"])), Some("gpu"));
        // Unregistered names do not count either way.
        assert_eq!(load.partition_of_all(&list(&["g2", "zz"])), Some("gpu"));
        assert_eq!(load.partition_of_all(&list(&["g1", "c1"])), None);
        assert_eq!(load.partition_of_all(&list(&["x1"])), None);
        assert_eq!(load.partition_of_all(&list(&["g1", "x1"])), None);
        assert_eq!(load.partition_of_all(&list(&["x1", "g1"])), None);
        assert_eq!(load.partition_of_all(&list(&["zz"])), None);
        assert_eq!(load.partition_of_all(&[]), None);
        assert!(load.has_partition("gpu") && load.has_partition("cpu"));
        assert!(!load.has_partition("x1") && !load.has_partition("GPU"));
    }

    #[test]
    fn the_load_later_leaves_out_the_jobs_ended_by_then_and_frees_their_nodes() {
        let t0: DateTime<Utc> = "2026-11-28T00:00:00Z".parse().unwrap();
        let hour = chrono::Duration::hours(1);
        let job = |hours: i32, node: &str| JobLoad {
            partition: Some("p".into()),
            reserved_w: 1000.0,
            nodes: 1,
            node_list: Some(vec![node.into()]),
            account: None,
            started_at: t0,
            predicted_ets_j: None,
            predicted_tts_s: None,
            time_limit_s: None,
            expires_at: t0 + hour * hours,
        };
        let nodes = ["a", "b", "c"]
            .map(|name| NodeIdle {
                name: name.into(),
                partition: Some("p".into()),
                idle_power_w: Some(100.0),
            })
            .to_vec();
        let load = Load::new(
            vec![job(1, "a"), job(3, "b")],
            Arc::new(Registry::new(nodes)),
        );
        let list = ["c", "b", "a"].map(String::from);
        assert_eq!(load.held_of(&list), ["b", "a"]);
        let now = load.draw(Some("p"), &[]);
        assert_eq!((now.reserved_w, now.free.count), (2000.0, 1));
        // At 1 h the first reservation has ended: its node is idle again.
        let later = load.at(t0 + hour);
        let draw = later.draw(Some("p"), &[]);
        assert_eq!((draw.reserved_w, draw.free.count), (1000.0, 2));
        assert_eq!(draw.free.known_w, 200.0);
        assert_eq!(later.held_of(&list), ["b"]);
        assert_eq!(load.at(t0 + hour * 3).draw(None, &[]).reserved_w, 0.0);
    }
}

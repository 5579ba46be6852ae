//! The power cap in force against the estimated draw of running jobs and
//! idle nodes (docs/model.md §5).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::caps::PowerCap;
use super::{Result, Service};
use crate::domain::ReservedBasis;
use crate::store::{self, power::Draw, power::Load, power::Nodes, power::Registry};

/// Idle draw of a registered node whose idle power is not recorded, W.
pub const DEFAULT_IDLE_POWER_W: f64 = 100.0;

/// The idle power `nodes` nodes of `partition` (or the nodes of `list`)
/// draw at least, those without a recorded idle power at
/// `DEFAULT_IDLE_POWER_W` (`Registry::idle_floor`): what admission reserves
/// for a job at the least, and max-nodes holds to the limit.
pub fn idle_floor(
    registry: &Registry,
    partition: Option<&str>,
    list: Option<&[String]>,
    nodes: u32,
) -> f64 {
    registry.idle_floor(partition, list, nodes, DEFAULT_IDLE_POWER_W)
}

/// A running job's share of the draw.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobDraw {
    pub source: String,
    pub job_id: String,
    pub app: String,
    pub nodes: i32,
    pub reserved_w: f64,
    /// How the reservation was made (see `Job.reserved_basis`).
    pub basis: ReservedBasis,
}

/// The idle nodes' share of the draw.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct IdleDraw {
    /// Registered nodes of the scope that no running job holds.
    pub nodes: usize,
    pub power_w: f64,
    /// How many of them have no recorded idle power and count at 100 W.
    pub nodes_at_default: usize,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Headroom {
    pub partition: Option<String>,
    pub at: DateTime<Utc>,
    /// The cap in force at `at` for the scope; `null` when none is.
    pub cap: Option<PowerCap>,
    /// Σ of the running jobs' reserved power and the idle nodes' power, W.
    pub draw_w: f64,
    /// cap − draw, W; `null` without a cap. Negative: over the cap.
    pub headroom_w: Option<f64>,
    pub jobs: Vec<JobDraw>,
    pub idle: IdleDraw,
}

/// Cap, draw and headroom of every scope operators watch: the whole system,
/// then each partition that has a cap, by name.
pub async fn capped_scopes(service: &Service, now: DateTime<Utc>) -> Result<Vec<Headroom>> {
    let mut partitions: Vec<String> = super::caps::list(service)
        .await?
        .into_iter()
        .filter_map(|cap| cap.partition)
        .collect();
    partitions.sort();
    partitions.dedup();
    let mut scopes = Vec::with_capacity(partitions.len() + 1);
    for partition in std::iter::once(None).chain(partitions.iter().map(String::as_str).map(Some)) {
        scopes.push(headroom(service, partition, now, now).await?);
    }
    Ok(scopes)
}

/// Cap, draw and headroom of a scope, with the per-job breakdown; read in
/// one snapshot so that the breakdown adds up to the totals.
pub async fn headroom(
    service: &Service,
    partition: Option<&str>,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Headroom> {
    // As PostgreSQL reads it (a leap second is the next second's start).
    let at = crate::validate::as_stored(at);
    let mut tx = service.pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let cap = store::caps::in_force_for(&mut *tx, partition, at).await?;
    // At a later time, the jobs running now whose reservations end by then
    // no longer draw, and their nodes idle again (as admission weighs a cap
    // beginning during a job's run). Jobs not started yet are not known.
    let when = at.max(now);
    let load = store::power::load(&mut tx, service.settings.expiry, when).await?;
    let jobs = store::jobs::list(&mut *tx, None, partition, None).await?;
    tx.commit().await?;
    let draws = ScopeDraws::of(&load, partition, &[], None);
    let idle = draws.idle(|_, d| (d.free, d.anonymous_nodes));
    let expiry = service.settings.expiry;
    let jobs: Vec<JobDraw> = jobs
        .into_iter()
        // Expired reservations count nowhere (the load leaves them out too).
        .filter(|j| expiry.ends_at(j.started_at, j.time_limit_s) > when)
        .map(|j| JobDraw {
            source: j.source,
            job_id: j.job_id,
            app: j.app,
            nodes: j.nodes,
            reserved_w: j.reserved_w,
            basis: j.reserved_basis,
        })
        .collect();
    let draw_w = draws.reserved_w() + idle.power_w;
    let cap = cap.map(|c| PowerCap::from_row(c, now));
    Ok(Headroom {
        partition: partition.map(str::to_owned),
        at,
        headroom_w: cap.as_ref().map(|c| c.limit_w - draw_w),
        cap,
        draw_w,
        jobs,
        idle,
    })
}

/// The running jobs and node idle powers: from memory while they have not
/// changed (see `cache`). During an outage, an error: admission must not
/// decide from a stale view of the running jobs (docs/operations.md).
pub async fn current_load(service: &Service) -> Result<Arc<Load>> {
    if let Some(load) = service.caches.load(Utc::now()) {
        return Ok(load);
    }
    let read_at = service.caches.generation();
    // The registry changes with the nodes, not with every job.
    let known = service.caches.registry();
    let read_afresh = known.is_none();
    // Boxed: the cached path's future need not hold the read's.
    let read = Box::pin(async {
        let mut conn = service.pool.acquire().await?;
        let registry = match known {
            Some(registry) => registry,
            None => Arc::new(store::power::registry(&mut conn).await?),
        };
        store::power::load_jobs(&mut conn, service.settings.expiry, Utc::now(), registry).await
    })
    .await;
    let load = match read {
        Ok(load) => Arc::new(load),
        Err(e) => return service.stale_or(e, None),
    };
    if read_afresh {
        // Kept for its time-to-live from now; one taken from memory is not
        // put back, or every job change would renew it for ever.
        service
            .caches
            .put_registry(load.registry().clone(), read_at);
    }
    service.caches.put_load(load.clone(), read_at);
    Ok(load)
}

/// The node registry (a prediction's partition and node list, max-nodes'
/// idle floor): from memory until the nodes change, whatever the jobs do;
/// during an outage, as last read, like the node powers the prediction
/// uses.
pub async fn registry(service: &Service) -> Result<Arc<Registry>> {
    if let Some(registry) = service.caches.registry() {
        return Ok(registry);
    }
    let stale = || service.caches.stale_registry();
    if service.caches.degraded()
        && let Some(registry) = stale()
    {
        return Ok(registry);
    }
    let read_at = service.caches.generation();
    let read = Box::pin(async {
        let mut conn = service.pool.acquire().await?;
        store::power::registry(&mut conn).await
    })
    .await;
    let registry = match read {
        Ok(registry) => Arc::new(registry),
        Err(e) => return service.stale_or(e, stale()),
    };
    service.caches.put_registry(registry.clone(), read_at);
    Ok(registry)
}

/// What a scope's power is counted from, read from the load once: the
/// partition's totals, or for the whole system each partition's
/// (`Load::draws_by_partition`), so that its idle nodes are counted by
/// partition as `IdleDraw::of_system` does (`taken` and `also` as there).
pub enum ScopeDraws {
    Partition(Draw),
    System(Vec<(Option<String>, Draw)>),
}

impl ScopeDraws {
    pub fn of(load: &Load, partition: Option<&str>, taken: &[String], also: Option<&str>) -> Self {
        match partition {
            Some(_) => ScopeDraws::Partition(load.draw(partition, taken)),
            None => ScopeDraws::System(load.draws_by_partition(taken, also)),
        }
    }

    /// Σ of the scope's running jobs' reserved power.
    pub fn reserved_w(&self) -> f64 {
        match self {
            ScopeDraws::Partition(draw) => draw.reserved_w,
            ScopeDraws::System(parts) => parts.iter().map(|(_, d)| d.reserved_w).sum(),
        }
    }

    /// The scope's idle draw, with the free nodes and the nodes held
    /// without a node list of each part given by `part` from the part's
    /// partition (`None` for a partition's scope: it is one part) and draw.
    pub fn idle(&self, part: impl Fn(Option<&str>, &Draw) -> (Nodes, i64)) -> IdleDraw {
        match self {
            ScopeDraws::Partition(draw) => {
                let (free, held) = part(None, draw);
                IdleDraw::of(free, held)
            }
            ScopeDraws::System(parts) => IdleDraw::of_system(parts.iter().map(|(p, draw)| {
                let (free, held) = part(p.as_deref(), draw);
                (p.clone(), free, held)
            })),
        }
    }
}

impl IdleDraw {
    /// The idle draw of the whole system from its partitions' draws
    /// (`Load::draws_by_partition`): each partition's free nodes less those
    /// its jobs without a node list hold, at that partition's own mean idle
    /// power; then the nodes held by jobs that name no partition, or more
    /// than their partition has free, out of what is left, at its mean.
    /// (All of them came out at the whole system's mean before, so in a
    /// cluster whose partitions idle at different powers the system's draw
    /// was not the sum of its partitions'.)
    pub fn of_system(parts: impl IntoIterator<Item = (Option<String>, Nodes, i64)>) -> IdleDraw {
        let mut total = IdleDraw {
            nodes: 0,
            power_w: 0.0,
            nodes_at_default: 0,
        };
        let mut unplaced = 0;
        for (partition, free, held) in parts {
            let placed = if partition.is_some() { held } else { 0 };
            unplaced += held - placed + (placed - free.count).max(0);
            let part = IdleDraw::of(free, placed);
            total.nodes += part.nodes;
            total.power_w += part.power_w;
            total.nodes_at_default += part.nodes_at_default;
        }
        if unplaced > 0 && total.nodes > 0 {
            let idle = total.nodes as i64;
            let left = (idle - unplaced).max(0);
            let keep = left as f64 / idle as f64;
            let at_default = total.nodes_at_default as i64;
            total = IdleDraw {
                nodes: usize::try_from(left).unwrap_or(0),
                power_w: total.power_w * keep,
                nodes_at_default: usize::try_from((at_default * left + idle - 1) / idle)
                    .unwrap_or(0),
            };
        }
        total
    }

    /// The idle draw of the `free` nodes (those no job names), of which
    /// `held` are taken by jobs reported without a node list: the rest draw
    /// the free nodes' mean idle power (registry, else 100 W each).
    pub fn of(free: Nodes, held: i64) -> IdleDraw {
        let idle_nodes = (free.count - held).max(0);
        if free.count <= 0 {
            return IdleDraw {
                nodes: 0,
                power_w: 0.0,
                nodes_at_default: 0,
            };
        }
        let mean = (free.known_w + free.unknown as f64 * DEFAULT_IDLE_POWER_W) / free.count as f64;
        // Of the idle nodes, those without a recorded idle power, in
        // proportion when some free nodes are held by jobs without a list.
        let at_default = (free.unknown * idle_nodes + free.count - 1) / free.count;
        IdleDraw {
            nodes: usize::try_from(idle_nodes).unwrap_or(0),
            power_w: mean * idle_nodes as f64,
            nodes_at_default: usize::try_from(at_default).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_nodes_draw_the_free_nodes_mean() {
        // Four nodes at 80 W, two unknown (100 W each); one held anonymously.
        let free = Nodes {
            count: 6,
            known_w: 320.0,
            unknown: 2,
        };
        let idle = IdleDraw::of(free, 1);
        assert_eq!(idle.nodes, 5);
        assert!((idle.power_w - 5.0 * 520.0 / 6.0).abs() < 1e-9);
        assert_eq!(idle.nodes_at_default, 2);
        assert_eq!(IdleDraw::of(free, 0).power_w, 520.0);
        // More held than free: nothing idle, never negative.
        assert_eq!(IdleDraw::of(free, 9).power_w, 0.0);
        assert_eq!(IdleDraw::of(Nodes::default(), 0).nodes, 0);
    }

    #[test]
    fn the_system_counts_each_partition_at_its_own_idle_power() {
        let nodes = |count: i64, watts: f64| Nodes {
            count,
            known_w: count as f64 * watts,
            unknown: 0,
        };
        let part = |name: &str, free, held| (Some(name.to_owned()), free, held);
        // Two of four 200 W gpu nodes held, none of eight 120 W ones.
        let idle = IdleDraw::of_system([
            part("gpu", nodes(4, 200.0), 2),
            part("std", nodes(8, 120.0), 0),
        ]);
        assert_eq!(idle.nodes, 10);
        assert!((idle.power_w - (400.0 + 960.0)).abs() < 1e-9);
        // Held beyond a partition's free nodes, or by jobs naming none:
        // out of what is left, at its mean (5 of 8 idle nodes are left).
        let idle = IdleDraw::of_system([
            part("gpu", nodes(1, 200.0), 3),
            part("std", nodes(8, 120.0), 0),
            (None, Nodes::default(), 1),
        ]);
        assert_eq!(idle.nodes, 5);
        assert!((idle.power_w - 960.0 * 5.0 / 8.0).abs() < 1e-9, "{idle:?}");
        // Everything held: nothing idle, never negative.
        let idle = IdleDraw::of_system([(None, nodes(2, 100.0), 5)]);
        assert_eq!((idle.nodes, idle.power_w), (0, 0.0));
    }
}

//! Serving predictions: fitted models kept per application and history
//! version.
//!
//! A query reads the application's row (its `history_version` and metadata,
//! one indexed lookup). If a model was fitted for that version, it answers
//! from it: no refit, no reading of history. Otherwise the history is read
//! once for that version, as sufficient statistics (one row per node count,
//! docs/model.md §2.2, however many runs), and the model is fitted on a blocking
//! thread, once, however many queries wait for it. Every committed run bumps
//! the version in the database, so writes through any replica are noticed by
//! the next query.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::cache::FastMap;
use crate::model::bounds::{self, Excess, Scale};
use crate::model::physics::Physics;
use crate::model::{
    self, FitOptions, Flag, Metric, Model, NodeStats, Observation, Prediction, ScalingMode, Source,
};
use crate::store::{self, apps::AppRow, runs::RunPower, runs::RunQuantities, stats::StatsRow};
use crate::telemetry::{self, Lookup, count_lookup};

/// Fits kept per application version beside those with the application's
/// own allowed %RMSE (always kept), for each kind: the metrics' (a client
/// varying allowed_rmse_pct) and the best-node APC's (one per workload and
/// partition asked). Fits beyond are answered without being kept, one at a
/// time, so a client cannot grow memory.
const MAX_FITS_PER_VERSION: usize = 32;
/// Applications whose models are kept in memory at most; beyond, the half
/// used least recently is dropped (and refitted if asked again).
const MAX_APPS_IN_MEMORY: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error("the application has no runs")]
    NoRuns,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("the fit failed: {0}")]
    Fit(String),
    /// A fit not kept (beyond `MAX_FITS_PER_VERSION` with an allowed %RMSE
    /// other than the application's) while another is under way.
    #[error("too many fits with distinct allowed %RMSE values under way")]
    Busy,
}

/// What a model depends on besides the runs: changes to either make a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    history: i64,
    settings: DateTime<Utc>,
}

/// What a model is fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FitKind {
    /// One metric of the runs as measured.
    Metric(Metric),
    /// APC normalised to the best node (docs/model.md §3) with one set of node
    /// powers: `scope` names the workload and partition, `id` the powers read.
    BestNodeApc { scope: u64, id: u64 },
}

type FitKey = (FitKind, u64);

/// A fitted model, and the JSON the API renders from it once: its model,
/// history and back-test descriptions, the same for every query of this
/// version.
pub struct Fitted {
    pub model: Model,
    pub rendered: OnceLock<[Box<serde_json::value::RawValue>; 3]>,
}

struct AppModels {
    version: Version,
    /// The `Models::uses` tick of the last use.
    used_at: AtomicU64,
    stats: OnceCell<Arc<Vec<StatsRow>>>,
    physics: OnceCell<Option<Arc<Physics>>>,
    fits: Mutex<FastMap<FitKey, Arc<OnceCell<Arc<Fitted>>>>>,
    /// The best-node histories by scope (workload and partition), shared
    /// with the entries of later versions: a new version reads only the runs
    /// it adds.
    best_node: BestNodeHistories,
}

type BestNodeHistories = Arc<Mutex<FastMap<u64, Arc<tokio::sync::Mutex<Option<BestNodeHistory>>>>>>;

/// An application's APC normalised to the best nodes with one set of node
/// powers (docs/nodes.md), as sufficient statistics per node count, and how
/// far through the runs they go.
///
/// The normalisation depends on each run's node list and on the powers, so
/// stored statistics cannot give it; but runs are never changed or removed,
/// and those of one application are committed in id order (a batch locks
/// its applications' rows before inserting, `store::apps::ensure_and_lock`,
/// and takes its ids under that lock). While the powers stay the same, the
/// runs after `last_run_id` are all that is new.
#[derive(Debug)]
struct BestNodeHistory {
    powers_id: u64,
    /// The largest run id folded in.
    last_run_id: i64,
    /// How many runs are folded in.
    runs: i64,
    by_nodes: std::collections::BTreeMap<u32, NodeStats>,
    /// Every run folded in, kept compactly while the memory allowed
    /// (`KeptRuns`): new node powers then normalise them again in memory.
    kept: Option<KeptRuns>,
}

impl BestNodeHistory {
    /// No run folded in yet.
    fn new(powers_id: u64, budget: &Arc<AtomicUsize>) -> BestNodeHistory {
        BestNodeHistory {
            powers_id,
            last_run_id: i64::MIN,
            runs: 0,
            by_nodes: Default::default(),
            kept: Some(KeptRuns::new(budget.clone())),
        }
    }

    /// With new node powers: the statistics again from the kept runs, and
    /// `true`; `false` (nothing changed) when the runs were not kept.
    fn renormalise(&mut self, powers: &NodePowers) -> bool {
        let Some(kept) = &self.kept else {
            return false;
        };
        // By the runs' places in `counts` rather than a map lookup (22 ns a
        // run in the B-tree: 4.5 ms at 200,000 runs). Each count's runs
        // still merge in the order kept.
        let mut by_slot: Vec<Option<NodeStats>> = vec![None; kept.counts.len()];
        kept.each(powers, |slot, o| {
            let Some(stats) = o.stats() else { return };
            match &mut by_slot[slot] {
                Some(merged) => merged.merge(&stats),
                empty => *empty = Some(stats),
            }
        });
        self.by_nodes = by_slot
            .into_iter()
            .flatten()
            .map(|s| (s.nodes, s))
            .collect();
        self.powers_id = powers.id;
        true
    }

    /// Fold in the runs of application `app_id` stored after the last one
    /// folded, counting them in `read`. A read that fails part way keeps
    /// the runs it folded, in id order: the next one goes on from there.
    async fn catch_up(
        &mut self,
        pool: &PgPool,
        app_id: i64,
        powers: &NodePowers,
        read: &AtomicU64,
    ) -> sqlx::Result<()> {
        store::runs::for_each_power_after(pool, app_id, self.last_run_id, |run| {
            read.fetch_add(1, Ordering::Relaxed);
            self.fold(&run, powers);
        })
        .await
    }

    fn fold(&mut self, run: &RunPower, powers: &NodePowers) {
        self.last_run_id = self.last_run_id.max(run.id);
        self.runs += 1;
        if self.kept.as_mut().is_some_and(|kept| !kept.push(run)) {
            // Over the memory allowed: new powers will read the runs again.
            self.kept = None;
        }
        add_observation(&mut self.by_nodes, best_node_observation(run, powers));
    }
}

/// Fold one normalised run into per-count statistics (unless unusable).
fn add_observation(by_nodes: &mut std::collections::BTreeMap<u32, NodeStats>, o: Observation) {
    let Some(stats) = o.stats() else { return };
    by_nodes
        .entry(o.nodes)
        .and_modify(|s| s.merge(&stats))
        .or_insert(stats);
}

/// The most memory all best-node histories may keep their runs in: about
/// 32 bytes a run plus 8 a block of consecutive nodes, so some 3 million
/// runs on 4 blocks each.
const MAX_KEPT_BYTES: usize = 128 << 20;

/// The runs of a best-node history, in the order they were folded in, as
/// what normalising them needs: node count, APC, quality and the nodes
/// (interned, in blocks of consecutive ids: allocations are mostly ranges
/// of nodes, which get consecutive ids as they are first seen). New node
/// powers (a new sample, a node registered) then cost a pass over memory,
/// not a read of every run with its node list (1.8 s at 200,000 runs).
/// Memory is charged to a budget shared by all histories; past it a history
/// stops keeping its runs.
#[derive(Debug)]
struct KeptRuns {
    /// Each run's node count, as its place in `counts`: new powers then
    /// merge a run's statistics without looking its count up.
    slots: Vec<u32>,
    /// The node counts of the runs, in the order first seen.
    counts: Vec<u32>,
    slot_of: FastMap<u32, u32>,
    apc: Vec<f64>,
    quality: Vec<f64>,
    /// Each run's blocks of node ids: `blocks[start..end]`; `None` without a
    /// node list.
    spans: Vec<Option<(u32, u32)>>,
    /// Node ids `first..first + count`, in the order of the run's list.
    blocks: Vec<(u32, u32)>,
    names: Vec<String>,
    index: FastMap<String, u32>,
    /// Bytes charged to `budget`.
    bytes: usize,
    budget: Arc<AtomicUsize>,
}

impl KeptRuns {
    fn new(budget: Arc<AtomicUsize>) -> KeptRuns {
        KeptRuns {
            slots: Vec::new(),
            counts: Vec::new(),
            slot_of: FastMap::default(),
            apc: Vec::new(),
            quality: Vec::new(),
            spans: Vec::new(),
            blocks: Vec::new(),
            names: Vec::new(),
            index: FastMap::default(),
            bytes: 0,
            budget,
        }
    }

    /// Keep `run`; `false` when the budget has no room for it.
    fn push(&mut self, run: &RunPower) -> bool {
        let list = run.node_list.as_deref().unwrap_or_default();
        let new_names: usize = list
            .iter()
            .filter(|n| !self.index.contains_key(n.as_str()))
            .map(|n| 2 * n.len() + 64)
            .sum();
        // At most one block a node: charged for the worst, given back after.
        let bytes = 32 + 8 * list.len() + new_names;
        let charged = self
            .budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|&total| total <= MAX_KEPT_BYTES)
            })
            .is_ok();
        if !charged {
            return false;
        }
        let nodes = u32::try_from(run.nodes).unwrap_or(0);
        let slot = *self.slot_of.entry(nodes).or_insert_with(|| {
            self.counts.push(nodes);
            self.counts.len() as u32 - 1
        });
        self.slots.push(slot);
        self.apc.push(run.avg_power_w);
        self.quality.push(run.quality);
        let start = self.blocks.len();
        self.spans.push(run.node_list.as_ref().map(|list| {
            for name in list {
                let id = match self.index.get(name.as_str()) {
                    Some(&id) => id,
                    None => {
                        let id = self.names.len() as u32;
                        self.names.push(name.clone());
                        self.index.insert(name.clone(), id);
                        id
                    }
                };
                // A block of this run's own that `id` continues.
                let own = self.blocks.len() > start;
                match self.blocks.last_mut() {
                    Some((first, count)) if own && *first + *count == id => *count += 1,
                    _ => self.blocks.push((id, 1)),
                }
            }
            (start as u32, self.blocks.len() as u32)
        }));
        let unused = 8 * (list.len() - (self.blocks.len() - start));
        self.budget.fetch_sub(unused, Ordering::AcqRel);
        self.bytes += bytes - unused;
        true
    }

    /// Each kept run normalised with `powers`, in the order kept, exactly as
    /// `best_node_observation` normalises it read from the database: the
    /// excess of a block of nodes is a difference of exact prefix sums
    /// (`bounds::Excess`), so a pass costs a visit per block, not per node.
    /// `observe` is given the place of the run's count in `counts` too.
    fn each(&self, powers: &NodePowers, mut observe: impl FnMut(usize, Observation)) {
        let scale = &powers.scale;
        let mut below = Vec::with_capacity(self.names.len() + 1);
        let mut sum = Excess::default();
        below.push(sum);
        for name in &self.names {
            sum = sum + Excess::of(powers.power_w.get(name).copied(), scale);
            below.push(sum);
        }
        for i in 0..self.slots.len() {
            let slot = self.slots[i] as usize;
            let nodes = self.counts[slot];
            let excess = self.spans[i]
                .filter(|(start, end)| end > start)
                .map(|(start, end)| {
                    self.blocks[start as usize..end as usize]
                        .iter()
                        .map(|&(first, count)| {
                            below[(first + count) as usize] - below[first as usize]
                        })
                        .sum()
                });
            let best = bounds::normalise_excess(self.apc[i], nodes, excess, scale);
            observe(slot, observation(nodes, self.apc[i], self.quality[i], best));
        }
    }
}

impl Drop for KeptRuns {
    fn drop(&mut self) {
        self.budget.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The models of all applications, shared by all requests.
pub struct Models {
    apps: Mutex<FastMap<i64, Arc<AppModels>>>,
    fits: AtomicU64,
    run_loads: AtomicU64,
    /// Runs read (with their node lists) for best-node histories.
    best_node_runs_read: AtomicU64,
    /// Bytes the best-node histories keep their runs in (`KeptRuns`).
    kept_bytes: Arc<AtomicUsize>,
    /// Counts uses of entries: a clock for least-recent eviction that costs
    /// no system clock read.
    uses: AtomicU64,
    /// One permit: fits that are not cached run one at a time.
    uncached: tokio::sync::Semaphore,
}

impl Default for Models {
    fn default() -> Self {
        Models {
            apps: Mutex::default(),
            fits: AtomicU64::default(),
            run_loads: AtomicU64::default(),
            best_node_runs_read: AtomicU64::default(),
            kept_bytes: Arc::default(),
            uses: AtomicU64::default(),
            uncached: tokio::sync::Semaphore::new(1),
        }
    }
}

/// Drop the half of `apps` used least recently.
fn evict_least_recent(apps: &mut FastMap<i64, Arc<AppModels>>) {
    let mut used: Vec<u64> = apps
        .values()
        .map(|e| e.used_at.load(Ordering::Relaxed))
        .collect();
    let middle = used.len() / 2;
    let (_, &mut cut, _) = used.select_nth_unstable(middle);
    apps.retain(|_, e| e.used_at.load(Ordering::Relaxed) > cut);
    metrics::counter!("model_cache_evictions_total").increment(1);
}

/// The allowed %RMSE: the request's, else the application's, else 2 %.
pub fn allowed_rmse(app: &AppRow, requested: Option<f64>) -> f64 {
    requested
        .or(app.allowed_rmse_pct)
        .unwrap_or(model::DEFAULT_ALLOWED_RMSE_PCT)
}

/// A version string for clients: it changes whenever the history or the
/// application's settings change.
pub fn model_version(app: &AppRow) -> String {
    ModelVersion(app).to_string()
}

/// An application's model version, written (or serialized) without an
/// intermediate string.
#[derive(Debug, Clone, Copy)]
pub struct ModelVersion<'a>(pub &'a AppRow);

impl std::fmt::Display for ModelVersion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}",
            self.0.history_version,
            self.0.updated_at.timestamp_micros()
        )
    }
}

impl serde::Serialize for ModelVersion<'_> {
    // Every prediction answer carries it: two integers written on the
    // stack, rather than through the formatting machinery.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (mut history, mut settings) = (itoa::Buffer::new(), itoa::Buffer::new());
        let history = history.format(self.0.history_version).as_bytes();
        let settings = settings
            .format(self.0.updated_at.timestamp_micros())
            .as_bytes();
        // Two i64 of at most 20 characters each, and the dot.
        let mut version = [0u8; 41];
        version[..history.len()].copy_from_slice(history);
        version[history.len()] = b'.';
        let len = history.len() + 1 + settings.len();
        version[history.len() + 1..len].copy_from_slice(settings);
        let version = std::str::from_utf8(&version[..len]).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(version)
    }
}

impl Models {
    /// How many models were fitted, and how many times history was read, since
    /// start: queries between two changes of an application do neither.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.fits.load(Ordering::Relaxed),
            self.run_loads.load(Ordering::Relaxed),
        )
    }

    /// How many runs best-node histories have read since start: each run
    /// once per set of node powers.
    pub fn best_node_runs_read(&self) -> u64 {
        self.best_node_runs_read.load(Ordering::Relaxed)
    }

    /// This version's entry of `app`, made afresh when the version changed.
    fn entry(&self, app: &AppRow) -> Arc<AppModels> {
        let version = Version {
            history: app.history_version,
            settings: app.updated_at,
        };
        let now = self.uses.fetch_add(1, Ordering::Relaxed);
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        let previous = match apps.get(&app.id) {
            Some(entry) if entry.version == version => {
                entry.used_at.store(now, Ordering::Relaxed);
                return entry.clone();
            }
            previous => previous.map(|e| e.best_node.clone()),
        };
        if apps.len() >= MAX_APPS_IN_MEMORY {
            evict_least_recent(&mut apps);
        }
        let entry = Arc::new(AppModels {
            version,
            used_at: AtomicU64::new(now),
            stats: OnceCell::new(),
            physics: OnceCell::new(),
            fits: Mutex::default(),
            best_node: previous.unwrap_or_default(),
        });
        apps.insert(app.id, entry.clone());
        entry
    }

    /// The history of this version of `app`, read once: its sufficient
    /// statistics per node count.
    async fn stats(
        &self,
        pool: &PgPool,
        app: &AppRow,
        entry: &AppModels,
    ) -> Result<Arc<Vec<StatsRow>>, PredictError> {
        Ok(entry
            .stats
            // Boxed, as every cold path here: a warm prediction's future
            // then holds a pointer, not the database read's kilobytes.
            .get_or_try_init(|| {
                Box::pin(async {
                    self.run_loads.fetch_add(1, Ordering::Relaxed);
                    let rows = store::stats::for_app(pool, app.id).await?;
                    // Statistics and runs are written together, so the rows
                    // never hold fewer runs than the application row says (more
                    // only if a write landed since it was read), unless a replica
                    // that predates them stored runs: then rebuild them.
                    let counted: i64 = rows.iter().map(|r| r.runs).sum();
                    if counted < app.run_count {
                        tracing::warn!(
                            app = %app.tag,
                            counted,
                            runs = app.run_count,
                            "run statistics behind the runs; rebuilding them"
                        );
                        return store::stats::rebuild(pool, app.id).await.map(Arc::new);
                    }
                    Ok(Arc::new(rows))
                })
            })
            .await?
            .clone())
    }

    /// `app`'s APC normalised to the best nodes with `powers`, per node
    /// count: the statistics kept from the last read with the same powers and
    /// the runs stored since, or, for new powers, every run read afresh
    /// (streamed, one run in memory at a time).
    async fn best_node_history(
        &self,
        pool: &PgPool,
        app: &AppRow,
        entry: &AppModels,
        powers: &NodePowers,
    ) -> Result<Vec<NodeStats>, PredictError> {
        let history = entry
            .best_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(powers.scope)
            .or_default()
            .clone();
        // One reader per application and scope: the others wait for it and
        // then find the runs folded in.
        let mut slot = history.lock().await;
        // New powers: the kept runs normalised again, else every run read.
        if slot
            .as_mut()
            .is_some_and(|h| h.powers_id != powers.id && !h.renormalise(powers))
        {
            *slot = None;
        }
        let budget = &self.kept_bytes;
        let history = slot.get_or_insert_with(|| {
            self.run_loads.fetch_add(1, Ordering::Relaxed);
            BestNodeHistory::new(powers.id, budget)
        });
        let read = &self.best_node_runs_read;
        history.catch_up(pool, app.id, powers, read).await?;
        // The application row was read before the runs: they hold at least
        // its count, unless some run was missed (a sequence handing out ids
        // out of commit order). Then read them all again.
        if history.runs < app.run_count {
            tracing::warn!(
                app = %app.tag,
                folded = history.runs,
                runs = app.run_count,
                "best-node history behind the runs; reading them all again"
            );
            *history = BestNodeHistory::new(powers.id, budget);
            history.catch_up(pool, app.id, powers, read).await?;
        }
        Ok(history.by_nodes.values().copied().collect())
    }

    /// The physics model of `app` (docs/model.md §4) for its declared scaling
    /// mode, fitted once per version; `None` for an unknown mode or too
    /// little history.
    pub async fn physics(
        &self,
        pool: &PgPool,
        app: &AppRow,
    ) -> Result<Option<Arc<Physics>>, PredictError> {
        let mode = app.scaling_mode;
        if mode == ScalingMode::Unknown {
            return Ok(None);
        }
        let entry = self.entry(app);
        entry
            .physics
            .get_or_try_init(|| {
                Box::pin(async {
                    let stats = self.stats(pool, app, &entry).await?;
                    let points = |metric| {
                        model::History::from_stats(stats.iter().map(|r| r.of(metric)))
                            .points
                            .iter()
                            .map(|p| (f64::from(p.nodes), p.mean, p.weight))
                            .collect::<Vec<_>>()
                    };
                    Ok(
                        Physics::fit(mode, &points(Metric::Tts), &points(Metric::Apc))
                            .map(Arc::new),
                    )
                })
            })
            .await
            .cloned()
    }

    /// The models of all three metrics of `app` when all are fitted already,
    /// found under one lock of each map: the path of a warm prediction.
    pub fn warm(&self, app: &AppRow, allowed_rmse_pct: f64) -> Option<[Arc<Fitted>; 3]> {
        let entry = self.entry(app);
        let fits = entry.fits.lock().unwrap_or_else(|e| e.into_inner());
        let fitted = |metric| {
            let key = (FitKind::Metric(metric), allowed_rmse_pct.to_bits());
            fits.get(&key)?.get().cloned()
        };
        let warm = [
            fitted(Metric::ALL[0])?,
            fitted(Metric::ALL[1])?,
            fitted(Metric::ALL[2])?,
        ];
        for _ in &warm {
            count_lookup(Lookup::Model, true);
        }
        Some(warm)
    }

    /// The model of `metric` for `app` as it is now.
    pub async fn model(
        self: &Arc<Self>,
        pool: &PgPool,
        app: &AppRow,
        metric: Metric,
        allowed_rmse_pct: f64,
    ) -> Result<Arc<Fitted>, PredictError> {
        self.fitted(pool, app, FitKind::Metric(metric), allowed_rmse_pct, None)
            .await
    }

    /// The model of `app`'s APC normalised to the best node with `powers`.
    pub async fn best_node_apc(
        self: &Arc<Self>,
        pool: &PgPool,
        app: &AppRow,
        powers: &Arc<NodePowers>,
        allowed_rmse_pct: f64,
    ) -> Result<Arc<Fitted>, PredictError> {
        let kind = FitKind::BestNodeApc {
            scope: powers.scope,
            id: powers.id,
        };
        self.fitted(pool, app, kind, allowed_rmse_pct, Some(powers))
            .await
    }

    async fn fitted(
        self: &Arc<Self>,
        pool: &PgPool,
        app: &AppRow,
        kind: FitKind,
        allowed_rmse_pct: f64,
        powers: Option<&Arc<NodePowers>>,
    ) -> Result<Arc<Fitted>, PredictError> {
        let entry = self.entry(app);
        let key = (kind, allowed_rmse_pct.to_bits());
        let cell = {
            let mut fits = entry.fits.lock().unwrap_or_else(|e| e.into_inner());
            if let FitKind::BestNodeApc { scope, id } = kind {
                // Models normalised with older powers of the same scope are stale.
                fits.retain(|(k, _), _| {
                    !matches!(k, FitKind::BestNodeApc { scope: s, id: i } if *s == scope && *i != id)
                });
            }
            let is_best_node = |k: &FitKind| matches!(k, FitKind::BestNodeApc { .. });
            let room = || {
                allowed_rmse_pct == allowed_rmse(app, None)
                    || fits
                        .keys()
                        .filter(|(k, _)| is_best_node(k) == is_best_node(&kind))
                        .count()
                        < MAX_FITS_PER_VERSION
            };
            match fits.get(&key) {
                Some(cell) => (cell.clone(), true),
                None if room() => (fits.entry(key).or_default().clone(), true),
                None => (Arc::new(OnceCell::new()), false),
            }
        };
        let (cell, cached) = cell;
        count_lookup(Lookup::Model, cell.initialized());
        // Fits that are not kept (a client varying allowed_rmse_pct) run one
        // at a time: they cannot crowd out the rest.
        let _permit = if cached {
            None
        } else {
            Some(
                self.uncached
                    .try_acquire()
                    .map_err(|_| PredictError::Busy)?,
            )
        };
        let metric = match kind {
            FitKind::Metric(metric) => metric,
            FitKind::BestNodeApc { .. } => Metric::Apc,
        };
        let options = FitOptions {
            metric,
            mode: app.scaling_mode,
            allowed_rmse_pct,
        };
        if let Some(fitted) = cell.get() {
            return Ok(fitted.clone());
        }
        let init = {
            let (models, pool, app) = (self.clone(), pool.clone(), app.clone());
            let (powers, cell) = (powers.cloned(), cell.clone());
            async move {
                cell.get_or_try_init(|| {
                    Box::pin(async {
                        let observations = match powers {
                            None => Observations::Stats(models.stats(&pool, &app, &entry).await?),
                            Some(powers) => Observations::BestNode(
                                models
                                    .best_node_history(&pool, &app, &entry, &powers)
                                    .await?,
                            ),
                        };
                        models.fits.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("model_fits_total").increment(1);
                        fit(observations, options).await
                    })
                })
                .await
                .cloned()
            }
        };
        if !cached {
            // Not kept: nobody else could use it, so it ends with its request.
            return init.await;
        }
        // A fit that is kept runs on a task of its own, so that it completes
        // and is kept even when the request that started it times out or
        // goes away; otherwise a fit slower than the request time-out would
        // start afresh with every request and never finish. Requests asking
        // meanwhile wait for the same fit.
        tokio::spawn(init)
            .await
            .map_err(|e| PredictError::Fit(e.to_string()))?
    }
}

/// What a fit reads.
enum Observations {
    Stats(Arc<Vec<StatsRow>>),
    /// The runs' APC as if on the best nodes, per node count.
    BestNode(Vec<NodeStats>),
}

impl Observations {
    fn is_empty(&self) -> bool {
        match self {
            Observations::Stats(rows) => rows.is_empty(),
            Observations::BestNode(stats) => stats.is_empty(),
        }
    }

    fn history(&self, metric: Metric) -> model::History {
        match self {
            Observations::Stats(rows) => {
                model::History::from_stats(rows.iter().map(|r| r.of(metric)))
            }
            Observations::BestNode(stats) => model::History::from_stats(stats.iter().copied()),
        }
    }
}

/// Fit on a blocking thread: a large history must not hold up other requests.
async fn fit(history: Observations, options: FitOptions) -> Result<Arc<Fitted>, PredictError> {
    if history.is_empty() {
        return Err(PredictError::NoRuns);
    }
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let model = model::fit_history(history.history(options.metric), options);
        fit_duration(options.metric).record(started.elapsed());
        model
    })
    .await
    .map_err(|e| PredictError::Fit(e.to_string()))?
    .map(|model| {
        Arc::new(Fitted {
            model,
            rendered: OnceLock::new(),
        })
    })
    .ok_or(PredictError::NoRuns)
}

/// `model_fit_duration_seconds{metric}`: how long fits take, by metric.
fn fit_duration(metric: Metric) -> &'static metrics::Histogram {
    static HISTOGRAMS: OnceLock<[metrics::Histogram; 3]> = OnceLock::new();
    &HISTOGRAMS.get_or_init(|| {
        Metric::ALL
            .map(|m| telemetry::histogram("model_fit_duration_seconds", &[("metric", m.as_str())]))
    })[metric.index()]
}

/// The runs' values of one metric.
pub fn observations(runs: &[RunQuantities], metric: Metric) -> Vec<Observation> {
    runs.iter()
        .map(|r| Observation {
            nodes: u32::try_from(r.nodes).unwrap_or(0),
            value: match metric {
                Metric::Ets => r.energy_j,
                Metric::Apc => r.avg_power_w,
                Metric::Tts => r.duration_s,
            },
            weight: r.quality,
        })
        .collect()
}

/// Every classified node's power under one workload (of one partition or
/// all), and the registry's peak powers: what APC bounds need.
#[derive(Debug, Clone)]
pub struct NodePowers {
    /// Which workload and partition these are (a hash of both).
    pub scope: u64,
    /// A hash of the powers and peaks: models normalised with them are
    /// keyed by it, so reading the same powers again (every cache refresh)
    /// finds the models fitted with them rather than fitting anew.
    pub id: u64,
    /// P_u by node name.
    pub power_w: HashMap<String, f64>,
    /// The vendor peak by node name, where the registry knows it.
    pub peak_w: HashMap<String, f64>,
    pub scale: Scale,
}

impl NodePowers {
    /// The powers of `rows` (one per classified node) and the peaks of
    /// `peaks`; `None` without any classified node.
    pub fn new(
        workload: &str,
        partition: Option<&str>,
        rows: &[(String, f64)],
        peaks: Vec<(String, f64)>,
    ) -> Option<NodePowers> {
        if rows.is_empty() {
            return None;
        }
        let values = rows.iter().map(|(_, p)| *p);
        let scale = Scale {
            p_min: values.clone().fold(f64::INFINITY, f64::min),
            p_max: values.clone().fold(f64::NEG_INFINITY, f64::max),
            mean: values.sum::<f64>() / rows.len() as f64,
        };
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(workload, partition), &mut hasher);
        let scope = std::hash::Hasher::finish(&hasher);
        fn content(values: &[(String, f64)]) -> Vec<(&str, u64)> {
            let mut sorted: Vec<(&str, u64)> = values
                .iter()
                .map(|(n, p)| (n.as_str(), p.to_bits()))
                .collect();
            sorted.sort_unstable();
            sorted
        }
        std::hash::Hash::hash(&(content(rows), content(&peaks)), &mut hasher);
        Some(NodePowers {
            scope,
            id: std::hash::Hasher::finish(&hasher),
            power_w: rows.iter().cloned().collect(),
            peak_w: peaks.into_iter().collect(),
            scale,
        })
    }

    /// The powers of `nodes` (`None` for a node without samples).
    pub fn of(&self, nodes: &[String]) -> Vec<Option<f64>> {
        nodes.iter().map(|n| self.power_w.get(n).copied()).collect()
    }
}

/// A run's APC as if it had run on the best nodes (docs/model.md §3).
pub fn best_node_observation(run: &RunPower, powers: &NodePowers) -> Observation {
    let node_powers = run
        .node_list
        .as_deref()
        .map(|l| powers.of(l))
        .unwrap_or_default();
    normalised(
        u32::try_from(run.nodes).unwrap_or(0),
        run.avg_power_w,
        run.quality,
        &node_powers,
        powers,
    )
}

/// A run of `nodes` nodes that drew `apc` W on nodes of the given powers,
/// normalised to the best nodes.
fn normalised(
    nodes: u32,
    apc: f64,
    quality: f64,
    node_powers: &[Option<f64>],
    powers: &NodePowers,
) -> Observation {
    let best = bounds::normalise(apc, nodes, node_powers, &powers.scale);
    observation(nodes, apc, quality, best)
}

/// A run of `nodes` nodes that drew `apc` W, `best` W on the best nodes.
fn observation(nodes: u32, apc: f64, quality: f64, best: f64) -> Observation {
    Observation {
        nodes,
        // Inconsistent samples could make the normalised power
        // vanish; the predictor needs positive values.
        value: best.max(1e-3 * apc),
        weight: quality,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_power(id: i64, nodes: i32, apc: f64, list: Option<&[&str]>) -> RunPower {
        RunPower {
            id,
            nodes,
            avg_power_w: apc,
            quality: 0.5 + 0.1 * id as f64,
            node_list: list.map(|l| l.iter().map(|n| n.to_string()).collect()),
        }
    }

    /// The kept runs normalised with `powers`, and `runs` normalised as read.
    fn kept_and_read(
        kept: &KeptRuns,
        runs: &[RunPower],
        powers: &NodePowers,
    ) -> (Vec<Observation>, Vec<Observation>) {
        let mut from_kept = Vec::new();
        kept.each(powers, |_, o| from_kept.push(o));
        let read = runs
            .iter()
            .map(|r| best_node_observation(r, powers))
            .collect();
        (from_kept, read)
    }

    /// Kept runs normalised with any powers give exactly what normalising the
    /// runs as read gives, node lists or not, known nodes or not.
    #[test]
    fn kept_runs_normalise_as_runs_read_do() {
        let budget = Arc::new(AtomicUsize::new(0));
        let runs = [
            run_power(1, 2, 500.0, Some(&["a", "b"])),
            run_power(2, 3, 700.0, None),
            run_power(3, 2, 480.0, Some(&["b", "zz"])),
            run_power(4, 1, 260.0, Some(&["c"])),
            run_power(5, 2, 470.0, Some(&["b", "a"])),
            run_power(6, 4, 990.0, Some(&["a", "b", "zz", "c"])),
        ];
        let mut kept = KeptRuns::new(budget.clone());
        for run in &runs {
            assert!(kept.push(run));
        }
        assert!(budget.load(Ordering::Relaxed) > 0);
        // Ids a 0, b 1, zz 2, c 3; consecutive ids of one run share a block:
        // [a b] | none | [b zz] | [c] | [b] [a] | [a b zz c].
        assert_eq!(
            kept.blocks,
            [(0, 2), (1, 2), (3, 1), (1, 1), (0, 1), (0, 4)]
        );
        for rows in [
            vec![
                ("a".to_string(), 180.0),
                ("b".into(), 200.0),
                ("c".into(), 230.0),
            ],
            vec![("a".to_string(), 210.0), ("c".into(), 190.5)],
        ] {
            let powers = NodePowers::new("w", None, &rows, vec![]).unwrap();
            let (from_kept, read) = kept_and_read(&kept, &runs, &powers);
            assert_eq!(from_kept, read);
        }
        drop(kept);
        assert_eq!(budget.load(Ordering::Relaxed), 0, "given back");
    }

    /// The same with powers whose sums round differently in every order, and
    /// node lists of long blocks, partly unknown nodes: the pass over kept
    /// runs sums blocks, the read sums nodes, and they agree to the bit.
    #[test]
    fn kept_runs_sum_blocks_to_the_bit_of_runs_read() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let names: Vec<String> = (0..200).map(|k| format!("cn{k:03}")).collect();
        let runs: Vec<RunPower> = (1..=400)
            .map(|id| {
                let n = 1 + next(120) as usize;
                let start = next((names.len() - n + 1) as u64) as usize;
                let mut list: Vec<&str> =
                    names[start..start + n].iter().map(|s| s.as_str()).collect();
                if id % 5 == 0 {
                    list.reverse();
                }
                let apc = 350.0 * n as f64 + 0.1 * id as f64;
                run_power(id, n as i32, apc, (id % 11 != 0).then_some(&list[..]))
            })
            .collect();
        let mut kept = KeptRuns::new(Arc::new(AtomicUsize::new(0)));
        for run in &runs {
            assert!(kept.push(run));
        }
        // Every third node unknown; the rest 180 W plus thirds and tenths.
        let rows: Vec<(String, f64)> = names
            .iter()
            .enumerate()
            .filter(|(k, _)| k % 3 != 0)
            .map(|(k, name)| (name.clone(), 180.0 + k as f64 / 3.0 + 0.1 * (k % 7) as f64))
            .collect();
        let powers = NodePowers::new("w", None, &rows, vec![]).unwrap();
        let (from_kept, read) = kept_and_read(&kept, &runs, &powers);
        assert_eq!(from_kept.len(), read.len());
        for (k, (a, b)) in from_kept.iter().zip(&read).enumerate() {
            assert_eq!(a.value.to_bits(), b.value.to_bits(), "run {k}: {a:?} {b:?}");
            assert_eq!((a.nodes, a.weight.to_bits()), (b.nodes, b.weight.to_bits()));
        }
        let visits: usize = runs
            .iter()
            .filter_map(|r| r.node_list.as_ref())
            .map(Vec::len)
            .sum();
        assert!(
            kept.blocks.len() * 2 < visits,
            "{} blocks for {visits} nodes",
            kept.blocks.len()
        );
    }

    /// Past the budget a history stops keeping its runs (and new powers then
    /// read them again).
    #[test]
    fn kept_runs_stop_at_the_budget() {
        let budget = Arc::new(AtomicUsize::new(MAX_KEPT_BYTES - 40));
        let mut history = BestNodeHistory::new(1, &budget);
        let powers = NodePowers::new("w", None, &[("a".into(), 200.0)], vec![]).unwrap();
        history.fold(&run_power(1, 1, 250.0, None), &powers);
        assert!(history.kept.is_some(), "32 bytes fit");
        history.fold(&run_power(2, 1, 250.0, Some(&["a"])), &powers);
        assert!(history.kept.is_none(), "no more room: nothing kept");
        assert_eq!(history.runs, 2, "both folded all the same");
        assert_eq!(budget.load(Ordering::Relaxed), MAX_KEPT_BYTES - 40);
        let other = NodePowers::new("w", None, &[("a".into(), 190.0)], vec![]).unwrap();
        assert!(!history.renormalise(&other), "must read the runs again");
    }

    fn app(id: i64) -> AppRow {
        AppRow::sample(id, &format!("a{id}"))
    }

    #[test]
    fn a_model_version_serializes_as_it_displays() {
        let mut row = app(1);
        for (history, micros) in [
            (0, 0),
            (7, 1_764_032_400_123_456),
            (i64::MAX, i64::MAX),
            (i64::MIN, i64::MIN),
            (-1, -1),
        ] {
            row.history_version = history;
            row.updated_at = chrono::DateTime::from_timestamp_micros(micros)
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
            let version = ModelVersion(&row);
            let json = serde_json::to_string(&version).unwrap();
            assert_eq!(json, format!("\"{version}\""));
            assert!(json.starts_with(&format!("\"{history}.")), "{json}");
        }
    }

    #[test]
    fn the_same_powers_read_again_keep_their_id() {
        let rows = |cn02: f64| vec![("cn01".to_owned(), 200.0), ("cn02".to_owned(), cn02)];
        let peaks = || vec![("cn01".to_owned(), 400.0)];
        let read = |rows: Vec<(String, f64)>| NodePowers::new("w", None, &rows, peaks()).unwrap();
        let first = read(rows(210.0));
        let mut reversed = rows(210.0);
        reversed.reverse();
        assert_eq!(
            read(reversed).id,
            first.id,
            "the order of the rows is not content"
        );
        assert_ne!(read(rows(211.0)).id, first.id);
        let elsewhere = NodePowers::new("w", Some("gpu"), &rows(210.0), peaks()).unwrap();
        assert_ne!(elsewhere.scope, first.scope);
        assert_ne!(elsewhere.id, first.id);
    }

    /// Every new application (every job name, under a careless scheduler)
    /// used to stay in memory for good (issue 13).
    #[test]
    fn the_models_of_applications_used_least_recently_are_dropped() {
        let models = Models::default();
        for id in 0..MAX_APPS_IN_MEMORY as i64 {
            models.entry(&app(id));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        let kept = models.entry(&app(0));
        models.entry(&app(MAX_APPS_IN_MEMORY as i64));
        let apps = models.apps.lock().unwrap();
        assert!(apps.len() <= MAX_APPS_IN_MEMORY / 2 + 1, "{}", apps.len());
        assert!(Arc::ptr_eq(&apps[&0], &kept), "the one used last stays");
        assert!(apps.contains_key(&(MAX_APPS_IN_MEMORY as i64)));
    }
}

/// What one answer predicted, for `/metrics`: for each metric answered, its
/// source and flags (`predictions_total{metric, source}`,
/// `prediction_flags_total{metric, flag}`). Kept with a kept answer, so
/// that its requests count as the first did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally([Option<(Source, u8)>; 3]);

impl Tally {
    pub fn of(models: &[Arc<Fitted>], predictions: &[Prediction]) -> Tally {
        let mut tally = Tally::default();
        for (m, p) in models.iter().zip(predictions) {
            let flags = p.flags.bits();
            tally.0[m.model.options.metric.index()] = Some((p.source, flags));
        }
        tally
    }

    pub fn count(self) {
        let counters = prediction_counters();
        for (metric, entry) in self.0.iter().enumerate() {
            let Some((source, flags)) = *entry else {
                continue;
            };
            counters.predictions[metric][usize::from(source == Source::Model)].increment(1);
            for (i, counter) in counters.flags[metric].iter().enumerate() {
                if flags & (1 << i) != 0 {
                    counter.increment(1);
                }
            }
        }
    }
}

struct PredictionCounters {
    /// By metric, then history / model.
    predictions: [[metrics::Counter; 2]; 3],
    /// By metric, then `Flag::ALL`.
    flags: [[metrics::Counter; Flag::ALL.len()]; 3],
}

/// Register the prediction counters, so that `/metrics` shows them from 0
/// before the first prediction (else `rate()` misses that one).
pub fn init_counters() {
    prediction_counters();
}

fn prediction_counters() -> &'static PredictionCounters {
    static COUNTERS: OnceLock<PredictionCounters> = OnceLock::new();
    COUNTERS.get_or_init(|| PredictionCounters {
        predictions: Metric::ALL.map(|m| {
            ["history", "model"].map(|source| {
                telemetry::counter(
                    "predictions_total",
                    &[("metric", m.as_str()), ("source", source)],
                )
            })
        }),
        flags: Metric::ALL.map(|m| {
            Flag::ALL.map(|f| {
                telemetry::counter(
                    "prediction_flags_total",
                    &[("metric", m.as_str()), ("flag", f.as_str())],
                )
            })
        }),
    })
}

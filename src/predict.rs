//! Serving predictions: fitted models kept per application and history
//! version.
//!
//! A query reads the application's row (its `history_version` and metadata,
//! one indexed lookup). If a model was fitted for that version, it answers
//! from it: no refit, no reading of runs. Otherwise the runs are read once for
//! that version and the model is fitted on a blocking thread, once, however
//! many queries wait for it. Every committed run bumps the version in the
//! database, so writes through any replica are noticed by the next query.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::model::{self, FitOptions, Metric, Model, Observation, ScalingMode};
use crate::store::{self, apps::AppRow, runs::RunQuantities};

/// Distinct allowed %RMSE values cached per application version; requests
/// for more are answered without caching, so a client cannot grow memory.
const MAX_FITS_PER_VERSION: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    #[error("the application has no runs")]
    NoRuns,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    #[error("the fit failed: {0}")]
    Fit(String),
}

/// What a model depends on besides the runs: changes to either make a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Version {
    history: i64,
    settings: DateTime<Utc>,
}

type FitKey = (Metric, u64);

/// A fitted model, and the JSON the API renders from it once: its model,
/// history and back-test descriptions, the same for every query of this
/// version.
pub struct Fitted {
    pub model: Model,
    pub rendered: OnceLock<[Box<serde_json::value::RawValue>; 3]>,
}

struct AppModels {
    version: Version,
    runs: OnceCell<Arc<Vec<RunQuantities>>>,
    fits: Mutex<HashMap<FitKey, Arc<OnceCell<Arc<Fitted>>>>>,
}

/// The models of all applications, shared by all requests.
#[derive(Default)]
pub struct Models {
    apps: Mutex<HashMap<i64, Arc<AppModels>>>,
    fits: AtomicU64,
    run_loads: AtomicU64,
}

/// The scaling mode stored for an application.
pub fn scaling_mode(app: &AppRow) -> ScalingMode {
    match app.scaling_mode.as_str() {
        "strong" => ScalingMode::Strong,
        "weak" => ScalingMode::Weak,
        _ => ScalingMode::Unknown,
    }
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
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Models {
    /// How many models were fitted, and how many times runs were read, since
    /// start: queries between two changes of an application do neither.
    pub fn counters(&self) -> (u64, u64) {
        (
            self.fits.load(Ordering::Relaxed),
            self.run_loads.load(Ordering::Relaxed),
        )
    }

    /// The model of `metric` for `app` as it is now.
    pub async fn model(
        &self,
        pool: &PgPool,
        app: &AppRow,
        metric: Metric,
        allowed_rmse_pct: f64,
    ) -> Result<Arc<Fitted>, PredictError> {
        let version = Version {
            history: app.history_version,
            settings: app.updated_at,
        };
        let entry = {
            let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
            match apps.get(&app.id) {
                Some(entry) if entry.version == version => entry.clone(),
                _ => {
                    let entry = Arc::new(AppModels {
                        version,
                        runs: OnceCell::new(),
                        fits: Mutex::new(HashMap::new()),
                    });
                    apps.insert(app.id, entry.clone());
                    entry
                }
            }
        };
        let key = (metric, allowed_rmse_pct.to_bits());
        let cell = {
            let mut fits = entry.fits.lock().unwrap_or_else(|e| e.into_inner());
            match fits.get(&key) {
                Some(cell) => cell.clone(),
                None if fits.len() < MAX_FITS_PER_VERSION => fits.entry(key).or_default().clone(),
                None => Arc::new(OnceCell::new()),
            }
        };
        let options = FitOptions {
            metric,
            mode: scaling_mode(app),
            allowed_rmse_pct,
        };
        cell.get_or_try_init(|| async {
            let runs = entry
                .runs
                .get_or_try_init(|| async {
                    self.run_loads.fetch_add(1, Ordering::Relaxed);
                    store::runs::quantities(pool, app.id).await.map(Arc::new)
                })
                .await?
                .clone();
            self.fits.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("model_fits_total").increment(1);
            fit(runs, options).await
        })
        .await
        .cloned()
    }
}

/// Fit on a blocking thread: a large history must not hold up other requests.
async fn fit(
    runs: Arc<Vec<RunQuantities>>,
    options: FitOptions,
) -> Result<Arc<Fitted>, PredictError> {
    if runs.is_empty() {
        return Err(PredictError::NoRuns);
    }
    tokio::task::spawn_blocking(move || {
        let observations = observations(&runs, options.metric);
        model::fit(&observations, options)
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

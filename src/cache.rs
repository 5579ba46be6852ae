//! In-memory copies of API tokens, application rows, node powers and the
//! running jobs' load, so that a prediction or admission request needs few
//! database round trips, or none.
//!
//! Every write that changes them (runs committed, application metadata, token
//! revocation) sends a PostgreSQL notification on the `joulecast` channel in
//! its transaction; every replica listens (`listen`) and drops the entries
//! concerned as soon as the write commits. The writing replica also drops them
//! itself right after its commit. Entries expire after a short time as well,
//! and everything is dropped whenever the notification connection was lost,
//! so a missed notification costs at most that time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::predict::NodePowers;
use crate::store::apps::AppRow;
use crate::store::power::Load;
use crate::tokens::Scope;

/// The notification channel.
pub const CHANNEL: &str = "joulecast";
/// Payload prefix of an application change: `app:<tag>`.
pub const APP_PREFIX: &str = "app:";
/// Payload of a token revocation.
pub const TOKENS: &str = "tokens";
/// Payload of a change to the node registry or its power samples.
pub const NODES: &str = "nodes";
/// Payload of a change to the running jobs.
pub const LOAD: &str = "load";
/// Entries kept at most; beyond, the cache starts afresh.
const MAX_ENTRIES: usize = 100_000;

/// A live token's id and scopes (those this version knows; parsed once).
#[derive(Debug, Clone)]
pub struct CachedToken {
    pub id: i64,
    pub scopes: Vec<Scope>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Cached values with the time they were stored.
type Entries<K, V> = Mutex<HashMap<K, (V, Instant)>>;

/// SHA-256 of a token's secret.
type TokenHash = [u8; 32];

pub struct Caches {
    ttl: Duration,
    /// Bumped by every invalidation: a row read before one is not cached.
    generation: AtomicU64,
    tokens: Entries<TokenHash, Arc<CachedToken>>,
    apps: Entries<String, Arc<AppRow>>,
    /// Node powers per (workload, partition), for APC bounds; `None` where
    /// no node has samples, so that predictions do not ask again.
    node_powers: Entries<PowersKey, Option<Arc<NodePowers>>>,
    /// Running jobs and node idle powers, for admission.
    load: Mutex<Option<(Arc<Load>, Instant)>>,
    /// The notification connection is down: the database is taken for
    /// unreachable, and expired entries answer instead (see `stale_*`).
    degraded: std::sync::atomic::AtomicBool,
}

/// A workload and a partition (`None`: all nodes).
pub type PowersKey = (String, Option<String>);

impl Caches {
    /// Caches whose entries live `ttl` (zero: no caching).
    pub fn new(ttl: Duration) -> Caches {
        Caches {
            ttl,
            generation: AtomicU64::new(0),
            tokens: Mutex::new(HashMap::new()),
            apps: Mutex::new(HashMap::new()),
            node_powers: Mutex::new(HashMap::new()),
            load: Mutex::new(None),
            degraded: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the database is taken for unreachable: the notification
    /// connection is lost and not yet back.
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::SeqCst)
    }

    pub fn set_degraded(&self, degraded: bool) {
        if self.degraded.swap(degraded, Ordering::SeqCst) != degraded {
            metrics::gauge!("database_degraded").set(if degraded { 1.0 } else { 0.0 });
            if degraded {
                tracing::warn!("database unreachable: serving what is in memory");
            } else {
                tracing::info!("database reachable again");
            }
        }
    }

    /// A token as last verified, however long ago (its own expiry still
    /// holds): for a database outage only. A revocation made meanwhile cannot
    /// be seen until the database is back.
    pub fn stale_token(&self, hash: &TokenHash) -> Option<Arc<CachedToken>> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let (token, _) = tokens.get(hash)?;
        token
            .expires_at
            .is_none_or(|t| t > Utc::now())
            .then(|| token.clone())
    }

    /// An application row as last read, however long ago: outages only.
    pub fn stale_app(&self, tag: &str) -> Option<Arc<AppRow>> {
        let apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        apps.get(tag).map(|(row, _)| row.clone())
    }

    /// Node powers as last read, however long ago: outages only.
    pub fn stale_node_powers(&self, key: &PowersKey) -> Option<Option<Arc<NodePowers>>> {
        let powers = self.node_powers.lock().unwrap_or_else(|e| e.into_inner());
        powers.get(key).map(|(entry, _)| entry.clone())
    }

    pub fn load(&self) -> Option<Arc<Load>> {
        let load = self.load.lock().unwrap_or_else(|e| e.into_inner());
        let (entry, at) = load.as_ref()?;
        (at.elapsed() < self.ttl).then(|| entry.clone())
    }

    /// Cache the load read after `generation()` returned `read_at`, unless
    /// something was invalidated meanwhile.
    pub fn put_load(&self, entry: Arc<Load>, read_at: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut load = self.load.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() == read_at {
            *load = Some((entry, Instant::now()));
        }
    }

    pub fn forget_load(&self) {
        let mut load = self.load.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        *load = None;
    }

    /// `Some(None)`: known to have no classified node.
    pub fn node_powers(&self, key: &PowersKey) -> Option<Option<Arc<NodePowers>>> {
        let powers = self.node_powers.lock().unwrap_or_else(|e| e.into_inner());
        let (entry, at) = powers.get(key)?;
        (at.elapsed() < self.ttl).then(|| entry.clone())
    }

    /// Cache node powers read after `generation()` returned `read_at`, unless
    /// something was invalidated meanwhile.
    pub fn put_node_powers(&self, key: PowersKey, entry: Option<Arc<NodePowers>>, read_at: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut powers = self.node_powers.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != read_at {
            return;
        }
        if powers.len() >= MAX_ENTRIES {
            powers.clear();
        }
        powers.insert(key, (entry, Instant::now()));
    }

    /// Node changes drop the node powers and the load (idle powers).
    pub fn forget_nodes(&self) {
        let mut powers = self.node_powers.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        powers.clear();
        drop(powers);
        self.forget_load();
    }

    pub fn token(&self, hash: &TokenHash) -> Option<Arc<CachedToken>> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let (token, at) = tokens.get(hash)?;
        let live = token.expires_at.is_none_or(|t| t > Utc::now());
        (at.elapsed() < self.ttl && live).then(|| token.clone())
    }

    /// Cache `token`, read after `generation()` returned `read_at`, unless
    /// something was invalidated meanwhile: a token read just before its
    /// revocation must not be cached after the revocation dropped it.
    pub fn put_token(&self, hash: TokenHash, token: Arc<CachedToken>, read_at: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != read_at {
            return;
        }
        if tokens.len() >= MAX_ENTRIES {
            tokens.clear();
        }
        tokens.insert(hash, (token, Instant::now()));
    }

    pub fn app(&self, tag: &str) -> Option<Arc<AppRow>> {
        let apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        let (row, at) = apps.get(tag)?;
        (at.elapsed() < self.ttl).then(|| row.clone())
    }

    /// The current generation: take it before reading what to cache.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Cache `row`, read after `generation()` returned `read_at`, unless
    /// something was invalidated meanwhile (the row might predate that write).
    pub fn put_app(&self, row: Arc<AppRow>, read_at: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation() != read_at {
            return;
        }
        if apps.len() >= MAX_ENTRIES {
            apps.clear();
        }
        apps.insert(row.tag.clone(), (row, Instant::now()));
    }

    pub fn forget_app(&self, tag: &str) {
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        apps.remove(tag);
    }

    pub fn forget_tokens(&self) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        tokens.clear();
    }

    pub fn clear(&self) {
        self.forget_tokens();
        self.forget_nodes();
        let mut apps = self.apps.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        apps.clear();
    }

    /// Apply one notification payload.
    pub fn apply(&self, payload: &str) {
        if let Some(tag) = payload.strip_prefix(APP_PREFIX) {
            self.forget_app(tag);
        } else if payload == TOKENS {
            self.forget_tokens();
        } else if payload == NODES {
            self.forget_nodes();
        } else if payload == LOAD {
            self.forget_load();
        } else {
            self.clear();
        }
    }
}

/// Follow the notifications of other writers (and our own) for as long as the
/// process runs.
///
/// While the connection is down the database is taken for unreachable
/// (`Caches::degraded`) and what is in memory stays, to answer from during
/// the outage; once it is back, everything is dropped, since notifications
/// may have been missed meanwhile.
pub async fn listen(pool: PgPool, caches: Arc<Caches>) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::debug!(%error, "cache notifications: cannot connect; retrying");
                caches.set_degraded(true);
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if let Err(error) = listener.listen(CHANNEL).await {
            tracing::debug!(%error, "cache notifications: cannot listen; retrying");
            caches.set_degraded(true);
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        // Anything cached before listening may have missed a notification.
        caches.clear();
        caches.set_degraded(false);
        loop {
            match listener.try_recv().await {
                Ok(Some(notification)) => caches.apply(notification.payload()),
                // The connection was lost: reconnect from the top, which
                // drops everything once it has succeeded.
                Ok(None) => {
                    tracing::warn!("cache notifications: connection lost");
                    caches.set_degraded(true);
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, "cache notifications: connection lost");
                    caches.set_degraded(true);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(tag: &str) -> AppRow {
        AppRow::sample(1, tag)
    }

    #[test]
    fn notifications_drop_what_they_name() {
        let caches = Caches::new(Duration::from_secs(60));
        caches.put_app(Arc::new(app("a")), caches.generation());
        caches.put_app(Arc::new(app("b")), caches.generation());
        let token = CachedToken {
            id: 1,
            scopes: vec![Scope::Read],
            expires_at: None,
        };
        caches.put_token([7; 32], Arc::new(token), caches.generation());
        caches.apply("app:a");
        assert!(caches.app("a").is_none() && caches.app("b").is_some());
        assert!(caches.token(&[7; 32]).is_some());
        caches.apply("tokens");
        assert!(caches.token(&[7; 32]).is_none());
        assert!(caches.app("b").is_some());
        caches.apply("something new");
        assert!(caches.app("b").is_none());
    }

    #[test]
    fn a_row_read_before_an_invalidation_is_not_cached() {
        let caches = Caches::new(Duration::from_secs(60));
        let read_at = caches.generation();
        caches.forget_app("a");
        caches.put_app(Arc::new(app("a")), read_at);
        assert!(caches.app("a").is_none());
        // A token read just before its revocation (issue 13).
        let read_at = caches.generation();
        caches.apply(TOKENS);
        let token = CachedToken {
            id: 1,
            scopes: vec![Scope::Read],
            expires_at: None,
        };
        caches.put_token([3; 32], Arc::new(token), read_at);
        assert!(caches.token(&[3; 32]).is_none());
        assert!(caches.stale_token(&[3; 32]).is_none());
    }

    #[test]
    fn entries_expire_and_expired_tokens_are_not_served() {
        let caches = Caches::new(Duration::ZERO);
        caches.put_app(Arc::new(app("a")), caches.generation());
        assert!(caches.app("a").is_none(), "a zero lifetime caches nothing");
        let caches = Caches::new(Duration::from_secs(60));
        let token = CachedToken {
            id: 1,
            scopes: vec![],
            expires_at: Some(Utc::now() - chrono::Duration::seconds(1)),
        };
        caches.put_token([1; 32], Arc::new(token), caches.generation());
        assert!(caches.token(&[1; 32]).is_none());
    }
}

//! In-memory copies of API tokens, application rows, node powers, the
//! running jobs' load and rendered prediction answers, so that a prediction
//! or admission request needs few database round trips, or none.
//!
//! Every write that changes them (runs committed, application metadata, token
//! revocation) sends a PostgreSQL notification (`store::notify`) in its
//! transaction; every replica listens (`listen`) and drops the entries
//! concerned as soon as the write commits. The writing replica also drops them
//! itself right after its commit. Entries expire after a short time as well,
//! and everything is dropped whenever the notification connection was lost,
//! so a missed notification costs at most that time.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::predict::{NodePowers, Tally};
use crate::store::apps::AppRow;
use crate::store::notify::{self, Change};
use crate::store::power::{Load, Registry};
use crate::telemetry::{Lookup, count_lookup};
use crate::tokens::Scope;

/// `found`, its lookup of `cache` counted.
fn counted<T>(cache: Lookup, found: Option<T>) -> Option<T> {
    count_lookup(cache, found.is_some());
    found
}

/// Entries kept at most; beyond, the cache starts afresh.
const MAX_ENTRIES: usize = 100_000;

/// Rendered answers kept at most, the largest one kept and the longest
/// request target (path and query) kept (bytes): at most 68 MiB, whatever
/// the queries. Requests whose answer was rendered are
/// remembered (as hashes) in as many, so that an answer is kept only when
/// its request comes again: one-off questions cost no copy.
const MAX_ANSWERS: usize = 4096;
const MAX_ANSWER_BYTES: usize = 16 * 1024;
const MAX_TARGET_BYTES: usize = 1024;

/// A live token's id and scopes (those this version knows; parsed once).
#[derive(Debug, Clone)]
pub struct CachedToken {
    pub id: i64,
    pub scopes: Vec<Scope>,
    pub expires_at: Option<DateTime<Utc>>,
}

impl CachedToken {
    fn live(&self) -> bool {
        self.expires_at.is_none_or(|t| t > Utc::now())
    }
}

/// A map hashed with foldhash (seeded at random per process) rather than
/// std's SipHash: every request looks up several maps, and SipHash was a
/// measurable part of a prediction's cost. Keys that clients choose (request
/// targets, tags) are bounded in number and length here, so a flood of
/// colliding keys costs no more than the bound.
pub type FastMap<K, V> = HashMap<K, V, foldhash::quality::RandomState>;

/// SHA-256 of a token's secret.
type TokenHash = [u8; 32];

/// A counter bumped by every invalidation, shared by all the maps: a value
/// read before an invalidation is not cached after it.
type Generation = Arc<AtomicU64>;

/// A map whose entries live `ttl` (zero: nothing is kept), holding at most
/// `max_entries` (beyond, it starts afresh), and refusing a value read
/// before the latest invalidation.
struct TtlMap<K, V> {
    ttl: Duration,
    max_entries: usize,
    generation: Generation,
    entries: Mutex<FastMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash, V: Clone> TtlMap<K, V> {
    fn new(ttl: Duration, generation: &Generation) -> Self {
        Self::bounded(ttl, generation, MAX_ENTRIES)
    }

    fn bounded(ttl: Duration, generation: &Generation, max_entries: usize) -> Self {
        TtlMap {
            ttl,
            max_entries,
            generation: generation.clone(),
            entries: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FastMap<K, (V, Instant)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value stored under `key` less than `ttl` ago.
    fn fresh<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        // The clock is read before the lock, not while holding it.
        let now = Instant::now();
        let entries = self.lock();
        let (value, at) = entries.get(key)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| value.clone())
    }

    /// The value stored under `key`, however long ago.
    fn stale<Q: Eq + Hash + ?Sized>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.lock().get(key).map(|(value, _)| value.clone())
    }

    /// Keep `value`, read after the generation was `read_at`, unless
    /// something was invalidated meanwhile (the value might predate that
    /// write). The check happens under the map's lock, which invalidations
    /// take before bumping the generation.
    fn put(&self, key: K, value: V, read_at: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.lock();
        if self.generation.load(Ordering::SeqCst) != read_at {
            return;
        }
        if entries.len() >= self.max_entries {
            entries.clear();
        }
        entries.insert(key, (value, Instant::now()));
    }

    fn remove<Q: Eq + Hash + ?Sized>(&self, key: &Q)
    where
        K: Borrow<Q>,
    {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.remove(key);
    }

    fn clear(&self) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.clear();
    }

    fn retain(&self, keep: impl FnMut(&K, &mut (V, Instant)) -> bool) {
        let mut entries = self.lock();
        self.generation.fetch_add(1, Ordering::SeqCst);
        entries.retain(keep);
    }
}

pub struct Caches {
    generation: Generation,
    tokens: TtlMap<TokenHash, Arc<CachedToken>>,
    /// Secrets that matched no live token, so that a client repeating a bad
    /// one costs no database read each time (a probe: 66,590 reads for
    /// 67,625 requests). A secret never seen before cannot become a token
    /// (new tokens are random), and a revoked or expired one stays so.
    bad_tokens: TtlMap<TokenHash, ()>,
    apps: TtlMap<String, Arc<AppRow>>,
    /// Tags read and found to name no application, for `ABSENT_TTL`: a
    /// batch of predictions naming a thousand unknown applications read
    /// each from the database, every time.
    absent_apps: TtlMap<String, ()>,
    /// Queries that read application rows (`service::apps`): what the two
    /// maps above save.
    app_reads: AtomicU64,
    /// Node powers per (workload, partition), for APC bounds; `None` where
    /// no node has samples, so that predictions do not ask again.
    node_powers: TtlMap<PowersKey, Option<Arc<NodePowers>>>,
    /// Running jobs and node idle powers, for admission.
    load: TtlMap<(), Arc<Load>>,
    /// The node registry alone (partitions, idle powers), which node
    /// changes drop but job changes do not: predictions and max-nodes
    /// read it, and need not wait for the running jobs after every start.
    registry: TtlMap<(), Arc<Registry>>,
    /// Rendered prediction answers by request target (path and query),
    /// with whether they were made during an outage. Their own generation:
    /// the load changes with every job, and answers do not depend on it.
    answers: TtlMap<String, (Bytes, Tally, bool)>,
    /// Hashes of the requests whose answers were rendered lately.
    rendered: Mutex<HashSet<u64, foldhash::quality::RandomState>>,
    hasher: foldhash::quality::RandomState,
    /// The notification connection is down: the database is taken for
    /// unreachable, and expired entries answer instead (see `stale_*`).
    degraded: std::sync::atomic::AtomicBool,
    /// The database did not answer `probe` (or `/readyz`) in time, and has
    /// not answered since (`set_answering`).
    unanswered: std::sync::atomic::AtomicBool,
    /// When a read last failed for want of the database while the
    /// notification connection held (a pool time-out): ms after `started`,
    /// 0 for never. The database counts as unreachable for
    /// `read_failure_hold` after it, then is tried again.
    read_failed_at: AtomicU64,
    read_failure_hold: Duration,
    started: Instant,
}

/// How long an application read as absent is taken for absent, unless its
/// creation is notified sooner (every insertion notifies): short, so that
/// a notification lost or late costs a second at most.
const ABSENT_TTL: Duration = Duration::from_secs(1);
/// The most bad secrets and absent tags remembered (then all are dropped).
const MAX_MISSES: usize = 10_000;

/// How long a failed read makes the database count as unreachable.
const READ_FAILURE_HOLD: Duration = Duration::from_secs(5);

/// A workload and a partition (`None`: all nodes).
pub type PowersKey = (String, Option<String>);

impl Caches {
    /// Caches whose entries live `ttl` (zero: no caching).
    pub fn new(ttl: Duration) -> Caches {
        let generation = Generation::default();
        Caches {
            tokens: TtlMap::new(ttl, &generation),
            bad_tokens: TtlMap::bounded(ttl, &generation, MAX_MISSES),
            apps: TtlMap::new(ttl, &generation),
            absent_apps: TtlMap::bounded(ttl.min(ABSENT_TTL), &generation, MAX_MISSES),
            app_reads: AtomicU64::new(0),
            node_powers: TtlMap::new(ttl, &generation),
            load: TtlMap::new(ttl, &generation),
            registry: TtlMap::new(ttl, &generation),
            answers: TtlMap::bounded(ttl, &Generation::default(), MAX_ANSWERS),
            rendered: Mutex::default(),
            hasher: foldhash::quality::RandomState::default(),
            generation,
            degraded: std::sync::atomic::AtomicBool::new(false),
            unanswered: std::sync::atomic::AtomicBool::new(false),
            read_failed_at: AtomicU64::new(0),
            read_failure_hold: READ_FAILURE_HOLD,
            started: Instant::now(),
        }
    }

    /// Whether the database is taken for unreachable: the notification
    /// connection is lost and not yet back, or a read failed for want of
    /// the database less than `READ_FAILURE_HOLD` ago.
    pub fn degraded(&self) -> bool {
        self.degraded.load(Ordering::SeqCst)
            || self.unanswered.load(Ordering::SeqCst)
            || self.read_failing()
    }

    fn read_failing(&self) -> bool {
        let at = self.read_failed_at.load(Ordering::SeqCst);
        at != 0
            && self.since_start_ms() < at.saturating_add(self.read_failure_hold.as_millis() as u64)
    }

    fn since_start_ms(&self) -> u64 {
        (self.started.elapsed().as_millis() as u64).max(1)
    }

    /// A read failed for want of the database (what was last read answers
    /// instead) although the notification connection holds: the database
    /// counts as unreachable for a while, then is tried again. The
    /// notification connection alone would never clear it.
    pub fn read_failed(&self) {
        if !self.read_failing() {
            tracing::warn!(
                hold_s = self.read_failure_hold.as_secs_f64(),
                "database read failed: serving what is in memory for a while"
            );
        }
        self.read_failed_at
            .store(self.since_start_ms(), Ordering::SeqCst);
    }

    /// Whether the database answers on a connection of its own (`probe`,
    /// and `/readyz`): not answering is an outage until it answers again,
    /// however the pool fares.
    pub fn set_answering(&self, answering: bool) {
        if self.unanswered.swap(!answering, Ordering::SeqCst) == answering {
            if answering {
                tracing::info!("database answering again");
            } else {
                tracing::warn!("database not answering: serving what is in memory");
            }
        }
    }

    pub fn set_degraded(&self, degraded: bool) {
        if self.degraded.swap(degraded, Ordering::SeqCst) != degraded {
            if degraded {
                tracing::warn!("database unreachable: serving what is in memory");
            } else {
                tracing::info!("database reachable again");
            }
        }
    }

    /// The current generation: take it before reading what to cache, and
    /// pass it to the `put_*` that caches what was read.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A live token, verified less than the lifetime ago.
    pub fn token(&self, hash: &TokenHash) -> Option<Arc<CachedToken>> {
        counted(Lookup::Token, self.tokens.fresh(hash).filter(|t| t.live()))
    }

    /// A token as last verified, however long ago (its own expiry still
    /// holds): for a database outage only. A revocation made meanwhile cannot
    /// be seen until the database is back.
    pub fn stale_token(&self, hash: &TokenHash) -> Option<Arc<CachedToken>> {
        self.tokens.stale(hash).filter(|t| t.live())
    }

    /// Cache `token`, read at generation `read_at`: a token read just before
    /// its revocation is not cached after the revocation dropped it.
    pub fn put_token(&self, hash: TokenHash, token: Arc<CachedToken>, read_at: u64) {
        self.tokens.put(hash, token, read_at);
    }

    /// Forget token `id` alone: the others stay, as they were verified, for
    /// an outage.
    pub fn forget_token(&self, id: i64) {
        self.tokens.retain(|_, (token, _)| token.id != id);
    }

    pub fn forget_tokens(&self) {
        self.tokens.clear();
        self.bad_tokens.clear();
    }

    /// Whether `hash` was found to match no live token lately.
    pub fn bad_token(&self, hash: &TokenHash) -> bool {
        self.bad_tokens.fresh(hash).is_some()
    }

    /// Remember that `hash`, read at generation `read_at`, matched no live
    /// token.
    pub fn put_bad_token(&self, hash: TokenHash, read_at: u64) {
        self.bad_tokens.put(hash, (), read_at);
    }

    /// Whether `tag` was read lately and named no application.
    pub fn app_absent(&self, tag: &str) -> bool {
        self.absent_apps.fresh(tag).is_some()
    }

    /// Remember that `tag`, read at generation `read_at`, named no
    /// application.
    pub fn put_absent_app(&self, tag: &str, read_at: u64) {
        self.absent_apps.put(tag.to_owned(), (), read_at);
    }

    /// A query reading application rows is about to be made.
    pub fn count_app_read(&self) {
        self.app_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Queries made to read application rows.
    pub fn app_reads(&self) -> u64 {
        self.app_reads.load(Ordering::Relaxed)
    }

    pub fn app(&self, tag: &str) -> Option<Arc<AppRow>> {
        counted(Lookup::Application, self.apps.fresh(tag))
    }

    /// An application row as last read, however long ago: outages only.
    pub fn stale_app(&self, tag: &str) -> Option<Arc<AppRow>> {
        self.apps.stale(tag)
    }

    /// Cache `row`, read at generation `read_at`.
    pub fn put_app(&self, row: Arc<AppRow>, read_at: u64) {
        self.apps.put(row.tag.clone(), row, read_at);
    }

    /// An application changed: its row goes, and every rendered answer
    /// (they are kept by request, not by application).
    pub fn forget_app(&self, tag: &str) {
        self.apps.remove(tag);
        self.absent_apps.remove(tag);
        self.answers.clear();
    }

    /// `Some(None)`: known to have no classified node.
    pub fn node_powers(&self, key: &PowersKey) -> Option<Option<Arc<NodePowers>>> {
        counted(Lookup::NodePowers, self.node_powers.fresh(key))
    }

    /// Node powers as last read, however long ago: outages only.
    pub fn stale_node_powers(&self, key: &PowersKey) -> Option<Option<Arc<NodePowers>>> {
        self.node_powers.stale(key)
    }

    /// Cache node powers read at generation `read_at`.
    pub fn put_node_powers(&self, key: PowersKey, entry: Option<Arc<NodePowers>>, read_at: u64) {
        self.node_powers.put(key, entry, read_at);
    }

    /// Node changes drop the node powers, the registry, the load (idle
    /// powers) and the rendered answers (APC bounds, node sets).
    pub fn forget_nodes(&self) {
        self.node_powers.clear();
        self.answers.clear();
        self.registry.clear();
        self.forget_load();
    }

    /// The load, if one is cached and every reservation in it is still in
    /// force at `now` (`Load::current_at`); else a miss.
    pub fn load(&self, now: DateTime<Utc>) -> Option<Arc<Load>> {
        let fresh = self.load.fresh(&()).filter(|load| load.current_at(now));
        counted(Lookup::Load, fresh)
    }

    /// Cache the load read at generation `read_at`.
    pub fn put_load(&self, entry: Arc<Load>, read_at: u64) {
        self.load.put((), entry, read_at);
    }

    pub fn forget_load(&self) {
        self.load.clear();
    }

    /// The node registry, if one is cached.
    pub fn registry(&self) -> Option<Arc<Registry>> {
        counted(Lookup::Registry, self.registry.fresh(&()))
    }

    /// The node registry as last read, however long ago: outages only.
    pub fn stale_registry(&self) -> Option<Arc<Registry>> {
        self.registry.stale(&())
    }

    /// Cache the node registry read at generation `read_at`.
    pub fn put_registry(&self, entry: Arc<Registry>, read_at: u64) {
        self.registry.put((), entry, read_at);
    }

    /// The answers' generation: take it before computing an answer, and
    /// pass it to `put_answer`.
    pub fn answers_generation(&self) -> u64 {
        self.answers.generation.load(Ordering::SeqCst)
    }

    /// The answer rendered for `target` less than the lifetime ago, when
    /// nothing it was made from changed since and the database is as
    /// reachable as it was then.
    pub fn answer(&self, target: &str) -> Option<(Bytes, Tally)> {
        let kept = self.answers.fresh(target);
        counted(
            Lookup::Answer,
            kept.and_then(|(body, tally, degraded)| {
                (degraded == self.degraded()).then_some((body, tally))
            }),
        )
    }

    /// Keep the answer rendered for `target`, computed from what was read
    /// after the answers' generation was `read_at`, with the database
    /// `degraded` or not throughout, if `target` was rendered before.
    /// Large answers, and those of long targets, are not kept.
    pub fn put_answer(
        &self,
        target: &str,
        body: Bytes,
        tally: Tally,
        degraded: bool,
        read_at: u64,
    ) {
        if body.len() <= MAX_ANSWER_BYTES
            && target.len() <= MAX_TARGET_BYTES
            && degraded == self.degraded()
            && self.rendered_before(target)
        {
            self.answers
                .put(target.to_owned(), (body, tally, degraded), read_at);
        }
    }

    /// Whether `target`'s answer was rendered lately; it is remembered now.
    fn rendered_before(&self, target: &str) -> bool {
        let hash = self.hasher.hash_one(target);
        let mut rendered = self.rendered.lock().unwrap_or_else(|e| e.into_inner());
        if rendered.contains(&hash) {
            return true;
        }
        if rendered.len() >= MAX_ANSWERS {
            rendered.clear();
        }
        rendered.insert(hash);
        false
    }

    pub fn clear(&self) {
        self.forget_tokens();
        self.forget_nodes();
        self.apps.clear();
        self.absent_apps.clear();
    }

    /// Apply one notification payload.
    pub fn apply(&self, payload: &str) {
        match Change::parse(payload) {
            Some(Change::App(tag)) => self.forget_app(&tag),
            Some(Change::Tokens) => self.forget_tokens(),
            Some(Change::Nodes) => self.forget_nodes(),
            Some(Change::Load) => self.forget_load(),
            None => self.clear(),
        }
    }
}

/// Follow the notifications of other writers (and our own) for as long as the
/// process runs, and probe the database (`probe`).
///
/// While the connection is down the database is taken for unreachable
/// (`Caches::degraded`) and what is in memory stays, to answer from during
/// the outage; once it is back, everything is dropped, since notifications
/// may have been missed meanwhile.
pub async fn listen(pool: PgPool, caches: Arc<Caches>) {
    tokio::join!(
        follow(pool.clone(), caches.clone()),
        probe(pool, caches, PROBE_EVERY)
    );
}

/// How often `probe` asks the database, how long it waits for an answer,
/// and for a new connection (TLS and authentication take round trips).
const PROBE_EVERY: Duration = Duration::from_millis(500);
const PROBE_TIME_OUT: Duration = Duration::from_secs(1);
const PROBE_CONNECT_TIME_OUT: Duration = Duration::from_secs(5);

/// Ask the database `SELECT 1` every `every`, on a connection of its own
/// (so that a pool taken up by load is not mistaken for an outage). A
/// database that hangs rather than refuses (a frozen server, a network
/// that drops packets without resetting) leaves the notification
/// connection open and silent, and warm predictions read nothing: without
/// the probe the service would not know, and `/readyz` would time out
/// instead of saying `degraded`. An answer missing for `PROBE_TIME_OUT`
/// (a new connection for `PROBE_CONNECT_TIME_OUT`) is an outage until the next answer (`Caches::set_answering`), which
/// ends it at once. (A read that fails in the pool holds the service
/// degraded for its own while, `Caches::read_failed`: under overload the
/// database answers the probe, and what is in memory should still answer.)
async fn probe(pool: PgPool, caches: Arc<Caches>, every: Duration) {
    use sqlx::Connection;
    let options = pool.connect_options();
    let mut connection: Option<sqlx::PgConnection> = None;
    loop {
        tokio::time::sleep(every).await;
        let asked = async {
            let mut c = match connection.take() {
                Some(c) => c,
                None => tokio::time::timeout(
                    PROBE_CONNECT_TIME_OUT,
                    sqlx::PgConnection::connect_with(&options),
                )
                .await
                .map_err(|_| timed_out())??,
            };
            tokio::time::timeout(PROBE_TIME_OUT, sqlx::query("SELECT 1").execute(&mut c))
                .await
                .map_err(|_| timed_out())??;
            Ok::<_, sqlx::Error>(c)
        }
        .await;
        match asked {
            Ok(c) => {
                connection = Some(c);
                caches.set_answering(true);
            }
            // The server answered, with an error (too many clients, say):
            // it is not hung, and the pool's reads speak for themselves.
            Err(sqlx::Error::Database(error)) => {
                tracing::debug!(%error, "database probe refused");
                caches.set_answering(true);
            }
            Err(error) => {
                tracing::debug!(%error, "database probe: no answer");
                caches.set_answering(false);
            }
        }
    }
}

/// The probe's time-out, as the I/O error it is.
fn timed_out() -> sqlx::Error {
    sqlx::Error::Io(std::io::ErrorKind::TimedOut.into())
}

/// `listen`'s notifications.
async fn follow(pool: PgPool, caches: Arc<Caches>) {
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
        if let Err(error) = listener.listen(notify::CHANNEL).await {
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
        caches.apply(&Change::Tokens.payload());
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
    fn every_map_refuses_what_was_read_before_an_invalidation() {
        let caches = Caches::new(Duration::from_secs(60));
        let load = || Arc::new(Load::default());
        let read_at = caches.generation();
        caches.apply(&Change::Nodes.payload());
        caches.put_load(load(), read_at);
        caches.put_node_powers(("w".into(), None), None, read_at);
        assert!(caches.load(Utc::now()).is_none());
        assert!(caches.node_powers(&("w".into(), None)).is_none());
        // Any invalidation counts, whichever map it names.
        let read_at = caches.generation();
        caches.apply("app:other");
        caches.put_load(load(), read_at);
        assert!(caches.load(Utc::now()).is_none());
        caches.put_load(load(), caches.generation());
        assert!(caches.load(Utc::now()).is_some());
        caches.apply(&Change::Load.payload());
        assert!(caches.load(Utc::now()).is_none());
    }

    #[test]
    fn job_changes_keep_the_node_registry_and_node_changes_drop_it() {
        let caches = Caches::new(Duration::from_secs(60));
        let registry = Arc::new(Registry::default());
        caches.put_registry(registry.clone(), caches.generation());
        caches.put_load(Arc::new(Load::default()), caches.generation());
        caches.apply(&Change::Load.payload());
        assert!(caches.load(Utc::now()).is_none());
        assert!(caches.registry().is_some());
        caches.apply(&Change::Nodes.payload());
        assert!(caches.registry().is_none());
        assert!(caches.stale_registry().is_none());
        // One read before a node change is not kept after it.
        let read_at = caches.generation();
        caches.forget_nodes();
        caches.put_registry(registry, read_at);
        assert!(caches.registry().is_none());
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

    const TARGET: &str = "/v1/apps/a/predictions?nodes=4";

    /// `put_answer` of `body` rendered for `target`, counting nothing.
    fn rendered(caches: &Caches, target: &str, body: Bytes, degraded: bool, read_at: u64) {
        caches.put_answer(target, body, Tally::default(), degraded, read_at);
    }

    /// Keep `{}` for `target`, rendered twice (the first is only noted).
    fn keep(caches: &Caches, target: &str, read_at: u64) {
        for _ in 0..2 {
            rendered(
                caches,
                target,
                Bytes::from_static(b"{}"),
                caches.degraded(),
                read_at,
            );
        }
    }

    #[test]
    fn an_answer_is_kept_when_its_request_comes_again() {
        let caches = Caches::new(Duration::from_secs(60));
        let put = |target: &str| {
            let body = Bytes::from_static(b"{}");
            rendered(&caches, target, body, false, caches.answers_generation());
        };
        put(TARGET);
        assert!(caches.answer(TARGET).is_none(), "asked once: not kept");
        put(TARGET);
        assert!(caches.answer(TARGET).is_some(), "asked again: kept");
        // One-off requests, more than are remembered, are never kept.
        for round in 0..2 {
            for n in 0..2 * MAX_ANSWERS {
                put(&format!("/v1/apps/a/predictions?nodes={n}&round={round}"));
            }
        }
        assert_eq!(caches.answers.lock().len(), 1);
    }

    #[test]
    fn answers_go_with_applications_and_nodes_not_with_the_load() {
        let caches = Caches::new(Duration::from_secs(60));
        keep(&caches, TARGET, caches.answers_generation());
        assert_eq!(
            caches.answer(TARGET).map(|(b, _)| b).as_deref(),
            Some(&b"{}"[..])
        );
        assert!(caches.answer("/v1/apps/a/predictions?nodes=5").is_none());
        // Jobs start and end all the time: that leaves answers alone.
        caches.apply(&Change::Load.payload());
        caches.apply(&Change::Tokens.payload());
        assert!(caches.answer(TARGET).is_some());
        // Any application's change drops every answer (they are kept by
        // request), and so do node changes (APC bounds, node sets).
        caches.apply("app:b");
        assert!(caches.answer(TARGET).is_none());
        keep(&caches, TARGET, caches.answers_generation());
        caches.apply(&Change::Nodes.payload());
        assert!(caches.answer(TARGET).is_none());
        keep(&caches, TARGET, caches.answers_generation());
        caches.apply("something new");
        assert!(caches.answer(TARGET).is_none());
    }

    #[test]
    fn an_answer_made_from_what_was_read_before_a_change_is_not_kept() {
        let caches = Caches::new(Duration::from_secs(60));
        let read_at = caches.answers_generation();
        caches.forget_app("a");
        keep(&caches, TARGET, read_at);
        assert!(caches.answer(TARGET).is_none());
        // The load is no change for answers.
        let read_at = caches.answers_generation();
        caches.forget_load();
        keep(&caches, TARGET, read_at);
        assert!(caches.answer(TARGET).is_some());
    }

    #[test]
    fn answers_of_one_side_of_an_outage_are_not_served_on_the_other() {
        let caches = Caches::new(Duration::from_secs(60));
        keep(&caches, TARGET, caches.answers_generation());
        caches.set_degraded(true);
        assert!(caches.answer(TARGET).is_none(), "flagged answers are due");
        // Made before the outage began: not kept as an outage answer.
        let read_at = caches.answers_generation();
        rendered(&caches, TARGET, Bytes::from_static(b"[]"), false, read_at);
        assert!(caches.answer(TARGET).is_none());
        for _ in 0..2 {
            rendered(&caches, TARGET, Bytes::from_static(b"[]"), true, read_at);
        }
        assert_eq!(
            caches.answer(TARGET).map(|(b, _)| b).as_deref(),
            Some(&b"[]"[..])
        );
        caches.set_degraded(false);
        assert!(caches.answer(TARGET).is_none());
    }

    #[test]
    fn answers_are_bounded_in_number_and_size() {
        let caches = Caches::new(Duration::from_secs(60));
        let large = Bytes::from(vec![b' '; MAX_ANSWER_BYTES + 1]);
        for _ in 0..2 {
            let large = large.clone();
            rendered(&caches, TARGET, large, false, caches.answers_generation());
        }
        assert!(caches.answer(TARGET).is_none());
        let long = format!("{TARGET}&node_list={}", "n".repeat(MAX_TARGET_BYTES));
        keep(&caches, &long, caches.answers_generation());
        assert!(caches.answer(&long).is_none());
        for n in 0..=MAX_ANSWERS {
            keep(
                &caches,
                &format!("{TARGET}{n}"),
                caches.answers_generation(),
            );
        }
        assert!(caches.answers.lock().len() <= MAX_ANSWERS);
        let caches = Caches::new(Duration::ZERO);
        keep(&caches, TARGET, caches.answers_generation());
        assert!(
            caches.answer(TARGET).is_none(),
            "a zero lifetime keeps nothing"
        );
    }

    #[test]
    fn a_failed_read_degrades_for_a_while_only() {
        let mut caches = Caches::new(Duration::from_secs(60));
        caches.read_failure_hold = Duration::from_millis(100);
        assert!(!caches.degraded());
        caches.read_failed();
        assert!(caches.degraded(), "what is in memory answers, flagged");
        std::thread::sleep(Duration::from_millis(150));
        assert!(!caches.degraded(), "then the database is tried again");
        // The notification connection's state holds until it changes.
        caches.set_degraded(true);
        std::thread::sleep(Duration::from_millis(150));
        assert!(caches.degraded());
        caches.set_degraded(false);
        assert!(!caches.degraded());
        // A database that does not answer the probe: degraded until it does.
        caches.set_answering(false);
        std::thread::sleep(Duration::from_millis(150));
        assert!(caches.degraded());
        caches.set_answering(true);
        assert!(!caches.degraded());
        // The probe's answer does not end a failed pool read's hold: under
        // overload the database answers, and memory should still serve.
        caches.read_failure_hold = Duration::from_secs(60);
        caches.read_failed();
        caches.set_answering(true);
        assert!(caches.degraded());
    }
}

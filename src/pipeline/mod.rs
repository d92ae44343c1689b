//! The pipeline: the decision flow of docs/spec.md "What it is", steps 1–4, and the one owner of the
//! state that flow needs — the maps, the blob store, the origin fetcher, the caches (hot
//! variants, origin failures), the single-flight maps and admission control. Like
//! mini-redis's `Db`, [`Pipeline`] is a cheap handle around a private `Shared`: callers (the
//! HTTP handlers, ingest, the commands) go through its methods, never around it.
//!
//! By role, each a folder (or a file) that owns its state in a handle of `Shared` whose fields
//! only it sees, so that no role reaches into another's:
//! - `urls/`: URL → hash (URL map, conditional fetch, origin failures held per URL, politeness
//!   per origin, a download's bytes taken in);
//! - `originals/`: bytes in → an indexed original (uploads), an original's bytes read once per
//!   hash, its facts (placeholders, frames) computed once and kept;
//! - `variant/`: hash + spec → variant (lookup, then one shared, admitted processing run, from
//!   the original or from its mezzanine), and the request cache;
//! - `moderation/`: the one gate of takedowns and the blocklist, removals, the validation hook;
//! - `near.rs`: perceptual fingerprints and near-duplicate lookups;
//! - `walks/`: the long walks over the store (backfills, `stats`, `verify`, `gc`, the online
//!   check, `maps copy`) and bounded growth;
//! - `migrate/`: the maps and the blob store moved while the node serves.
//!
//! Common to them, here: the maps, the blob store, admission, the counters, the decode cache
//! shared by every run (`decoded.rs`), claims across nodes (`claims.rs`), every run's time
//! bound (`deadline.rs`) and tenant budgets (`budgets.rs`).
//!
//! Writes keep one order: blob first, then the map entry that points at it. Work that many
//! requests may want at once runs once, through the single-flight maps.

use std::sync::Arc;
use std::time::Duration;

use imgcas_processors::Limits;

use crate::admission::{Admission, Tier};
use crate::blob::BlobStore;
use crate::config::{Config, MapsBackend, Structured};
use crate::error::Error;
use crate::fetch::Fetcher;
use crate::hash::ContentHash;
use crate::maps::MapStore;
use crate::metrics::{Metrics, Readings};
use crate::stats::{Stats, StatsSnapshot};

mod budgets;
mod claims;
mod deadline;
mod decoded;
mod migrate;
mod moderation;
mod near;
mod originals;
mod urls;
mod variant;
mod walks;

pub use migrate::{MigrationRecord, MigrationState, Phase};
pub use moderation::{taken_down, Lifted, Listed, TakenDown};
pub use near::Similar;
pub use originals::{FocusSet, Uploaded};
pub use urls::{OriginTally, Resolved, UrlState};
pub use variant::{Provenance, Recalled, Served, Source, Target};
pub use walks::{
    copy_maps, CheckReport, CheckState, CopyReport, GcReport, Progress, RangeSums, StatsReport,
    VerifyReport, Walk, CHECK_RANGES,
};

/// The decision flow and everything it owns. Clones share one state.
#[derive(Clone)]
pub struct Pipeline {
    shared: Arc<Shared>,
}

/// The state behind a [`Pipeline`]; private, so nothing reaches around the flow. The
/// common ground every role reads comes first; then each role's own state, a handle whose
/// fields only that role's module sees.
struct Shared {
    /// The settings the flow reads (limits, revalidation, source size).
    config: Config,
    /// The structured settings, typed once at open (presets, watermarks, fallback image,
    /// imgproxy's keys).
    structured: Structured,
    /// URL map, originals index and variants.
    maps: Arc<dyn MapStore>,
    /// Original bytes by hash.
    blobs: Arc<dyn BlobStore>,
    /// Processing admission: at most `limits.process_concurrency` runs (facts and
    /// fingerprints among them) use the CPU at once, on the blocking pool, and work that
    /// would wait past `limits.queue_target` is refused.
    admission: Admission,
    /// Work counters.
    stats: Stats,
    /// Where latency histograms and refusals are recorded.
    metrics: Metrics,
    /// This node's name in claims (`cluster.node_id`).
    node_id: String,
    /// Work a request left running after its answer (fingerprints of new downloads), waited
    /// for by [`Pipeline::settle`] so that nothing writes to the maps after shutdown.
    background: std::sync::Mutex<tokio::task::JoinSet<()>>,
    /// Decoded sources shared by every kind of run for seconds (`decoded.rs`).
    decodes: decoded::DecodeCache,
    /// Raised at shutdown: every run stops at its next check (`deadline.rs`).
    shutdown: Arc<std::sync::atomic::AtomicBool>,
    /// URLs and downloads (`urls/`).
    urls: urls::Urls,
    /// Originals and uploads (`originals/`).
    originals: originals::Originals,
    /// Variants and their runs (`variant/`).
    variants: variant::Variants,
    /// Takedowns, the blocklist and the validation hook (`moderation/`).
    moderation: moderation::Moderation,
    /// Fingerprints and near-duplicate lookups (`near.rs`).
    near: near::Near,
    /// The long walks over the store and bounded growth (`walks/`).
    walks: walks::Walks,
    /// The maps' migration, when one is under way: who leads, and the record (`migrate/`).
    migration: migrate::Migration,
}

/// Why the pipeline could not open.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OpenError(pub String);

/// A failed request, with what is known of it for the response headers.
#[derive(Debug, Clone)]
pub struct Failure {
    pub error: Error,
    pub source_hash: Option<ContentHash>,
    /// Answered from a cache of errors (variants map or origin failures).
    pub cached: bool,
    /// How long the error is held for this URL: a client or cache should not ask again
    /// sooner, since the service would answer the same until then.
    pub held_for: Option<Duration>,
}

impl Failure {
    /// The same failure, about the original `hash` (for the response headers).
    pub fn with_hash(self, hash: ContentHash) -> Failure {
        Failure {
            source_hash: Some(hash),
            ..self
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            source_hash: None,
            cached: false,
            held_for: None,
        }
    }
}

impl Pipeline {
    /// Opens the maps and the blob store the configuration names (after validating it).
    /// `metrics` receives the flow's histograms and refusals.
    pub async fn open(config: Config, metrics: Metrics) -> Result<Pipeline, OpenError> {
        let structured = config.validate().map_err(|e| OpenError(e.to_string()))?;
        let maps = crate::maps::open(&config).await.map_err(|e| {
            // Validated above, so the backend is known. (The URL may hold a password.)
            OpenError(match config.maps_backend() {
                Ok(backend @ (MapsBackend::Embedded | MapsBackend::EmbeddedAt(_))) => {
                    let dir = backend
                        .embedded_dir(&config.data_dir)
                        .unwrap_or(&config.data_dir);
                    format!("cannot open the maps in {}: {e}", dir.display())
                }
                _ => format!("cannot open the maps on PostgreSQL (maps.url): {e}"),
            })
        })?;
        let blobs = crate::blob::open(&config)
            .await
            .map_err(|e| OpenError(e.to_string()))?;
        // Both behind the migration's switch: the configured ones alone unless the maps'
        // record says a migration is under way.
        let migration = migrate::Migration::open(&config, maps, blobs)
            .await
            .map_err(|e| OpenError(format!("cannot open the migration's target: {e}")))?;
        let maps: Arc<dyn crate::maps::MapStore> = Arc::new(migrate::mirror::MirroredMaps::new(
            migration.sides.clone(),
            migration.counts.clone(),
            migration.follow.clone(),
        ));
        let blobs: Arc<dyn crate::blob::BlobStore> = Arc::new(migrate::blobs::MirroredBlobs::new(
            migration.sides.clone(),
            migration.follow.clone(),
        ));
        let fetcher = Fetcher::new(&config.fetch, &config.storage.s3).map_err(OpenError)?;
        let moderation = moderation::Moderation::load(&config, maps.as_ref())
            .await
            .map_err(OpenError)?;
        let admission = Admission::new(
            config.limits.process_concurrency,
            config.limits.queue_target,
        )
        .with_memory(config.limits.max_memory);
        Ok(Pipeline {
            shared: Arc::new(Shared {
                node_id: config.cluster.node_id(),
                background: Default::default(),
                decodes: decoded::DecodeCache::new(config.limits.decode_cache_bytes),
                shutdown: Default::default(),
                urls: urls::Urls::new(fetcher),
                originals: Default::default(),
                variants: variant::Variants::new(config.limits.hot_cache_bytes),
                moderation,
                near: near::Near::new(config.limits.process_concurrency),
                walks: walks::Walks::new(&config),
                migration,
                config,
                structured,
                maps,
                blobs,
                admission,
                stats: Stats::default(),
                metrics,
            }),
        })
    }

    fn limits(&self) -> Limits {
        self.shared.config.limits.processing()
    }

    /// The structured settings (presets, watermarks, fallback image, imgproxy's keys), typed
    /// when the pipeline opened.
    pub fn structured(&self) -> &Structured {
        &self.shared.structured
    }

    /// What a request that names no `q` gets (`quality.default`).
    pub fn quality_default(&self) -> crate::config::QualityDefault {
        self.shared.config.quality.default
    }

    /// This node's name in claims, logs and metrics.
    pub fn node_id(&self) -> &str {
        &self.shared.node_id
    }

    /// The longest source URL accepted (`limits.max_url_bytes`).
    pub fn max_url_bytes(&self) -> usize {
        self.shared.config.limits.max_url_bytes
    }

    /// The largest source accepted, from an origin or an upload.
    pub fn max_source_bytes(&self) -> u64 {
        self.shared.config.fetch.max_bytes
    }

    /// The work counters now.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Ends an operator's session (`key`: its cookie's signature) for every node sharing the
    /// maps, for `left` (until the cookie expires). Kept as a row of the quotas' pauses: a
    /// text key with an expiry on the store's clock is all a revocation is, and a session's key
    /// (`session:` and hex) can never be an origin's (`scheme://host:port`). A maps outage
    /// leaves it on the node that answered (logged).
    pub async fn revoke_session(&self, key: &str, left: Duration) {
        if let Err(e) = self
            .shared
            .maps
            .pause_origin(&format!("session:{key}"), left)
            .await
        {
            tracing::warn!(error = %e, "session revoked on this node only: the maps did not answer");
        }
    }

    /// Whether a node ended the session `key` (see [`Pipeline::revoke_session`]); a maps
    /// outage answers no (the node's own list still holds what it revoked itself).
    pub async fn session_revoked(&self, key: &str) -> bool {
        match self
            .shared
            .maps
            .origin_pause(&format!("session:{key}"))
            .await
        {
            Ok(left) => left.is_some(),
            Err(e) => {
                tracing::warn!(error = %e, "revoked sessions unread: the maps did not answer");
                false
            }
        }
    }

    /// Counters and gauges for `/metrics`.
    pub fn readings(&self) -> Readings {
        let s = &self.shared;
        let (outstanding_pixels, queue_depth) = s.admission.load();
        let (memory_held, memory_waits) = s.admission.memory_held();
        let (downloads_waiting, downloads) = s.urls.flights();
        let (runs_waiting, runs) = s.variants.flights();
        Readings {
            stats: s.stats.snapshot(),
            coalesced_waiters: downloads_waiting + runs_waiting,
            download_flights: downloads,
            process_flights: runs,
            queue_depth,
            outstanding_pixels,
            memory_held,
            memory_limit: s.admission.memory_limit(),
            memory_waits,
            hot_cache_bytes: s.variants.hot_bytes(),
            variant_bytes: s.walks.variant_bytes(),
            node_id: s.node_id.clone(),
            decoder_panics: imgcas_processors::decoder_panics(),
            map_round_trips: s.maps.round_trips(),
            tiers: Tier::ALL
                .iter()
                .zip(s.admission.by_tier())
                .map(|(tier, (held, waiting))| (tier.name(), held, waiting))
                .collect(),
            tenants: s.admission.tenants(),
            cost_model: Some(s.admission.cost_model()),
            store: self.last_store_reading(),
            takedowns: s.moderation.takedowns(),
            blocklist: s.moderation.blocklist(),
            urls_max_bytes: s.config.limits.urls_max_bytes,
            variants_max_bytes: s.config.limits.variants_max_bytes,
            ready: None,
        }
    }

    /// Readiness: the maps and the blob store both answer.
    pub async fn check(&self) -> Result<(), Error> {
        self.shared.maps.check().await?;
        self.shared.blobs.check().await?;
        Ok(())
    }

    /// The work left running after requests, its finished tasks reaped (so the set stays
    /// as small as the work in flight).
    fn background_tasks(&self) -> std::sync::MutexGuard<'_, tokio::task::JoinSet<()>> {
        let mut tasks = self
            .shared
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while tasks.try_join_next().is_some() {}
        tasks
    }

    /// Runs `work` after the current request, tracked for [`Pipeline::settle`].
    fn in_background(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        self.background_tasks().spawn(work);
    }

    /// [`Pipeline::in_background`] for work that may be left undone (an original's facts
    /// and fingerprint: computed when a request needs them, or by the next start's
    /// backfill): run only while fewer than `limits.background_queue` wait, so that a flood
    /// of new originals holds a bounded number of tasks (audit #3: 100,000 uploads grew a
    /// node by 430 MB, queued background work among it).
    fn in_background_if_room(&self, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.background_tasks();
        if tasks.len() >= self.shared.config.limits.background_queue {
            Stats::bump(&self.shared.stats.background_dropped);
            return;
        }
        tasks.spawn(work);
    }

    /// [`Pipeline::in_background_if_room`] for work on a newly stored original that takes its
    /// small decode (its facts, its fingerprint): the decode is kept for it meanwhile, and a
    /// request that decodes the original larger leaves it its reduction instead. A failure
    /// is logged as `failed` (the backfill retries it).
    fn in_background_with_small_decode<Fut>(
        &self,
        hash: ContentHash,
        failed: &'static str,
        work: impl FnOnce(Pipeline) -> Fut + Send + 'static,
    ) where
        Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
    {
        let this = self.clone();
        let interest = self.shared.decodes.interest_in_small(hash);
        self.in_background_if_room(async move {
            interest.offered().await;
            if let Err(e) = work(this).await {
                tracing::warn!(%hash, error = %e, "{failed}; the backfill retries");
            }
            drop(interest);
        });
    }

    /// Tells every run under way to stop at its next check, and every later one at its
    /// first (at shutdown, once requests in flight had their time).
    pub fn stop_runs(&self) {
        self.shared
            .shutdown
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits for the work requests left running (at shutdown, before the last flush).
    pub async fn settle(&self) {
        let mut tasks = std::mem::take(
            &mut *self
                .shared
                .background
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        while tasks.join_next().await.is_some() {}
        // Facts and fingerprint computations run as flights of their own, which outlive a
        // caller that was stopped (the backfills): they write to the maps when done, and hold
        // the maps open until then (a restart in one process found the embedded file locked).
        while self.shared.originals.facts_under_way() > 0
            || self.shared.near.fingerprints_under_way() > 0
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The follower's writes still queued, if a migration mirrors.
        self.shared.migration.follow.settled().await;
    }

    /// Writes the queued use records and makes every map write so far durable (at
    /// shutdown; while running, [`Pipeline::upkeep`] does this and more every second).
    pub async fn flush(&self) -> Result<(), Error> {
        self.write_use().await?;
        Ok(self.shared.maps.flush().await?)
    }

    /// Every hash the blob store holds, indexed or not.
    pub async fn stored_blobs(&self) -> Result<Vec<ContentHash>, Error> {
        Ok(self.shared.blobs.list().await?)
    }

    /// Every key the variants map holds (for tests and tools that look at a small store).
    pub async fn variant_keys(&self) -> Result<Vec<crate::maps::VariantKey>, Error> {
        self.variant_keys_where(|_| true).await
    }

    /// The variant keys `pick` picks, read a page at a time.
    pub(super) async fn variant_keys_where(
        &self,
        pick: impl Fn(&crate::maps::VariantKey) -> bool,
    ) -> Result<Vec<crate::maps::VariantKey>, Error> {
        let mut picked = Vec::new();
        let mut keys = crate::maps::VariantKeyPages::new(self.shared.maps.as_ref());
        while let Some(page) = keys.next().await? {
            picked.extend(page.into_iter().filter(|k| pick(k)));
        }
        Ok(picked)
    }
}

/// Runs blocking work (hashing, probing) on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await?
}

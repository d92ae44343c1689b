//! The pipeline: the decision flow of docs/spec.md "What it is", steps 1–4, and the one owner of the
//! state that flow needs — the maps, the blob store, the origin fetcher, the caches (hot
//! variants, origin failures), the single-flight maps and admission control. Like
//! mini-redis's `Db`, [`Pipeline`] is a cheap handle around a private `Shared`: callers (the
//! HTTP handlers, ingest, the commands) go through its methods, never around it.
//!
//! One file per flow:
//! - `resolve.rs`: URL → hash (URL map, conditional fetch, origin failures held per URL);
//! - `variant.rs`: hash + spec → variant (lookup, then one shared, admitted processing run,
//!   from the original or from its mezzanine, itself a row made by such a run);
//! - `recall.rs`: the request cache, what a repeated request resolved to;
//! - `decoded.rs`: decoded sources shared by the runs of one original under way together;
//! - `near.rs`: perceptual fingerprints and near-duplicate lookups;
//! - `facts.rs`: placeholders and frames of each original, computed once and kept;
//! - `upload.rs`: bytes in → an indexed original;
//! - `maintenance.rs`: `stats`, `verify` and `gc` over the maps and the blob store;
//! - `copy.rs`: one node's embedded maps and bytes copied into shared ones (`maps copy`);
//! - `claims.rs`: jobs claimed across nodes that share the maps, so that the cluster, not
//!   just each node, downloads and processes once;
//! - `upkeep.rs`: bounded growth — the variants' byte budget, forgetting unused URLs, and
//!   the coarse use records both need;
//! - `removal.rs`: removals an administrator asks for (a URL's entry forgotten, an original
//!   taken down and the takedown lifted), and following those made on other nodes.
//!
//! Writes keep one order: blob first, then the map entry that points at it. Work that many
//! requests may want at once runs once, through the single-flight maps.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use imgcas_processors::Limits;

use crate::admission::{Admission, Tier};
use crate::blob::BlobStore;
use crate::coalesce::SingleFlight;
use crate::config::{Config, MapsBackend, Structured};
use crate::error::Error;
use crate::fetch::Fetcher;
use crate::hash::ContentHash;
use crate::hot::HotVariants;
use crate::maps::{MapStore, OriginalInfo, VariantRow};
use crate::metrics::{Metrics, Readings};
use crate::negative::{OriginFailures, UrlFailure};
use crate::stats::{Stats, StatsSnapshot};

mod blocklist;
mod budgets;
mod check;
mod claims;
mod copy;
mod deadline;
mod decoded;
mod download;
mod facts;
mod gate;
mod maintenance;
mod migrate;
mod near;
mod origins;
mod recall;
mod removal;
mod resolve;
mod upkeep;
mod upload;
mod validation;
mod variant;
mod walks;

pub use blocklist::Listed;
pub use check::{CheckReport, CheckState, RangeSums, CHECK_RANGES};
pub use copy::{copy_maps, CopyReport};
pub use maintenance::{GcReport, Progress, StatsReport, VerifyReport};
pub use migrate::{MigrationRecord, MigrationState, Phase};
pub use near::Similar;
pub use origins::OriginTally;
pub use recall::Recalled;
pub use removal::{taken_down, Lifted, TakenDown};
pub use resolve::{Resolved, UrlState};
pub use upload::Uploaded;
pub use variant::{Provenance, Served, Source, Target};
pub use walks::Walk;

/// The decision flow and everything it owns. Clones share one state.
#[derive(Clone)]
pub struct Pipeline {
    shared: Arc<Shared>,
}

/// The state behind a [`Pipeline`]; private, so nothing reaches around the flow.
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
    /// Recent variants in memory, in front of the variants map.
    hot: HotVariants,
    /// The guarded origin client, with its download slots per origin.
    fetcher: Fetcher,
    /// Origin failures per URL, held for their class's lifetime (with backoff).
    origin_failures: OriginFailures,
    /// Connection failures in a row per origin, and the origins metrics name (`origins.rs`).
    origins: origins::Origins,
    /// One origin request per URL at a time; latecomers share its answer.
    url_flights: SingleFlight<String, Result<Resolved, Failure>>,
    /// One processing run per variant key at a time.
    variant_flights: SingleFlight<Vec<u8>, Result<(VariantRow, bool), Error>>,
    /// One read of a stored variant (its row and its object) per key at a time, for the
    /// requests that miss it together (`variant/stored.rs`).
    variant_reads: SingleFlight<crate::maps::VariantKey, Result<Option<VariantRow>, Error>>,
    /// One read of an original's bytes per hash at a time.
    original_reads: SingleFlight<ContentHash, Result<Bytes, Error>>,
    /// Processing admission: at most `limits.process_concurrency` runs (facts and
    /// fingerprints among them) use the CPU at once, on the blocking pool, and work that
    /// would wait past `limits.queue_target` is refused.
    admission: Admission,
    /// Work counters.
    stats: Stats,
    /// The maps' totals as last read, and when (`maintenance.rs`, `store_totals`), read at
    /// most once per its maximum age.
    totals: tokio::sync::Mutex<Option<(std::time::Instant, crate::maps::StoreReading)>>,
    /// Where latency histograms and refusals are recorded.
    metrics: Metrics,
    /// Use records, the variants' byte count and the sweep schedule.
    upkeep: upkeep::Upkeep,
    /// This node's name in claims (`cluster.node_id`).
    node_id: String,
    /// Work a request left running after its answer (fingerprints of new downloads), waited
    /// for by [`Pipeline::settle`] so that nothing writes to the maps after shutdown.
    background: std::sync::Mutex<tokio::task::JoinSet<()>>,
    /// Decoded sources shared by runs for seconds (`decoded.rs`).
    decodes: decoded::DecodeCache,
    /// What repeated requests resolved to (`recall.rs`).
    requests: recall::RequestCache,
    /// One facts computation per original at a time (`facts.rs`).
    facts_flights: SingleFlight<ContentHash, Result<Option<crate::maps::PictureFacts>, Error>>,
    /// The takedown list as this node holds it (`removal.rs`).
    takedowns: removal::Takedowns,
    /// The moderation blocklist as this node holds it (`blocklist.rs`).
    blocked: blocklist::Blocked,
    /// The validation hook, when one is configured (`validation.rs`).
    validation: Option<validation::Validation>,
    /// One fingerprint computation per original at a time.
    fingerprint_flights:
        SingleFlight<ContentHash, Result<Option<imgcas_processors::Fingerprint>, Error>>,
    /// Raised at shutdown: every run stops at its next check (`deadline.rs`).
    shutdown: Arc<std::sync::atomic::AtomicBool>,
    /// An online check of the store runs from this node (`check.rs`).
    checking: Arc<std::sync::atomic::AtomicBool>,
    /// The maps' migration, when one is under way: who leads, and the record (`migrate/`).
    migration: migrate::Migration,
    /// Background reads of originals ahead of their CPU slot (`near.rs`'s
    /// `read_then_slot`): as many as the slots.
    background_reads: tokio::sync::Semaphore,
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
        ));
        let blobs: Arc<dyn crate::blob::BlobStore> =
            Arc::new(migrate::blobs::MirroredBlobs::new(migration.sides.clone()));
        let fetcher = Fetcher::new(&config.fetch, &config.storage.s3).map_err(OpenError)?;
        let takedowns = removal::Takedowns::load(maps.as_ref())
            .await
            .map_err(|e| OpenError(format!("cannot read the takedown list: {e}")))?;
        let blocked = blocklist::Blocked::load(maps.as_ref())
            .await
            .map_err(|e| OpenError(format!("cannot read the blocklist: {e}")))?;
        let validation = validation::Validation::new(&config.moderation).map_err(OpenError)?;
        let admission = Admission::new(
            config.limits.process_concurrency,
            config.limits.queue_target,
        )
        .with_memory(config.limits.max_memory);
        Ok(Pipeline {
            shared: Arc::new(Shared {
                hot: HotVariants::new(config.limits.hot_cache_bytes),
                upkeep: upkeep::Upkeep::new(&config),
                node_id: config.cluster.node_id(),
                background: Default::default(),
                fingerprint_flights: SingleFlight::default(),
                shutdown: Arc::default(),
                checking: Arc::default(),
                migration,
                background_reads: tokio::sync::Semaphore::new(
                    config.limits.process_concurrency.max(1),
                ),
                facts_flights: SingleFlight::default(),
                takedowns,
                blocked,
                validation,
                requests: Default::default(),
                decodes: decoded::DecodeCache::new(config.limits.decode_cache_bytes),
                config,
                structured,
                maps,
                blobs,
                fetcher,
                origin_failures: OriginFailures::default(),
                origins: Default::default(),
                url_flights: SingleFlight::default(),
                variant_flights: SingleFlight::default(),
                variant_reads: SingleFlight::default(),
                original_reads: SingleFlight::default(),
                admission,
                stats: Stats::default(),
                totals: tokio::sync::Mutex::new(None),
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
        Readings {
            stats: s.stats.snapshot(),
            coalesced_waiters: s.url_flights.waiters() + s.variant_flights.waiters(),
            download_flights: s.url_flights.in_flight(),
            process_flights: s.variant_flights.in_flight(),
            queue_depth,
            outstanding_pixels,
            memory_held,
            memory_limit: s.admission.memory_limit(),
            memory_waits,
            hot_cache_bytes: s.hot.weighted_size(),
            variant_bytes: s.upkeep.variant_bytes(),
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
            takedowns: s.takedowns.len(),
            blocklist: s.blocked.counts(),
            urls_max_bytes: s.config.limits.urls_max_bytes,
            variants_max_bytes: s.config.limits.variants_max_bytes,
            ready: None,
        }
    }

    /// This node's downloads by origin (the named origins and `other`).
    pub fn origin_tallies(&self) -> Vec<(String, OriginTally)> {
        self.shared.origins.tallies()
    }

    /// The failure a URL is held with now, and for how much longer.
    pub fn origin_failure(&self, url: &str) -> Option<(UrlFailure, Duration)> {
        self.shared.origin_failures.active(url)
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
        // Facts computations run as flights of their own, which outlive a caller that was
        // stopped (the backfill): they write to the maps when done.
        while self.shared.facts_flights.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Writes the queued use records and makes every map write so far durable (at
    /// shutdown; while running, [`Pipeline::upkeep`] does this and more every second).
    pub async fn flush(&self) -> Result<(), Error> {
        self.write_use().await?;
        Ok(self.shared.maps.flush().await?)
    }

    /// What the originals index says of a hash.
    pub async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, Error> {
        Ok(self.shared.maps.original(hash).await?)
    }

    /// An indexed original's bytes; their absence is answered by the gate
    /// ([`Pipeline::bytes_missing`]).
    pub async fn original_bytes(&self, hash: &ContentHash) -> Result<Bytes, Error> {
        // Concurrent reads of one original share one GET (bytes by hash never change).
        let this = self.clone();
        let h = *hash;
        self.shared
            .original_reads
            .run(
                *hash,
                async move {
                    Stats::bump(&this.shared.stats.original_reads);
                    match this.shared.blobs.get(&h).await? {
                        Some(bytes) => Ok(bytes),
                        None => Err(this.bytes_missing(&h).await?),
                    }
                },
                |m| Err(Error::Internal(format!("original read failed: {m}"))),
            )
            .await
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

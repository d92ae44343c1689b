//! Counters of the work the service did: the evidence that repeated work disappears. Plain
//! atomics, bumped on the hot path for the price of an add; `metrics.rs` exports them.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Stats {
    /// Full downloads from origins (200 answers with a body).
    pub downloads: AtomicU64,
    /// Bytes of those downloads.
    pub downloaded_bytes: AtomicU64,
    /// Conditional requests the origin answered `304`.
    pub not_modified: AtomicU64,
    /// Times the processors ran (a result or an error each).
    pub processing_runs: AtomicU64,
    /// Originals stored because their hash was new.
    pub originals_stored: AtomicU64,
    /// Bytes not stored again because a download or upload matched a stored original.
    pub dedup_bytes_saved: AtomicU64,
    /// Variants read from the variants map (a hot-cache miss).
    pub variant_map_reads: AtomicU64,
    /// Variants served from the hot cache.
    pub hot_hits: AtomicU64,
    /// Variant objects read from the blob store (maps that keep no variant bytes).
    pub variant_object_reads: AtomicU64,
    /// Originals' bytes read from the blob store (one per flight of concurrent readers).
    pub original_reads: AtomicU64,
    /// Variants kept in memory for a while as hot keys (the top-k of requests, `hot.rs`).
    pub hot_key_pins: AtomicU64,
    /// Requests answered from the negative cache of origin failures (no origin traffic).
    pub origin_failure_hits: AtomicU64,
    /// Stale URL entries served because the maps could not be asked to revalidate them
    /// (a shared store down): the entry held is served, as for an origin failure.
    pub stale_for_maps: AtomicU64,
    /// Processing runs stopped past their deadline (`pipeline/deadline.rs`).
    pub runs_stopped: AtomicU64,
    /// Facts and fingerprints not queued after a request: `limits.background_queue` was
    /// full (computed later, when needed or by the backfill).
    pub background_dropped: AtomicU64,
    /// Variants dropped to keep within `limits.variants_max_bytes`.
    pub variants_evicted: AtomicU64,
    /// URL entries dropped after `fetch.forget_after` without a request.
    pub urls_forgotten: AtomicU64,
    /// URL entries dropped to keep within `limits.urls_max_bytes`.
    pub urls_evicted: AtomicU64,
    /// Polls for a download or processing run another node claimed (shared maps).
    pub claim_waits: AtomicU64,
    /// Originals found, when first fingerprinted, to be near-duplicates of another.
    pub near_duplicates_found: AtomicU64,
    /// Canonical merges the fingerprint proposed and the pixel check refused.
    pub near_merges_refused: AtomicU64,
    /// Fingerprints computed (each original's once, unless its bytes were lost).
    pub fingerprints_computed: AtomicU64,
    /// Originals' facts computed (placeholders, frames: each original's once).
    pub facts_computed: AtomicU64,
    /// Decodes of an original's bytes (at any DCT scale); a decode runs share counts once.
    pub decodes_original: AtomicU64,
    /// Decodes of a mezzanine's bytes.
    pub decodes_mezzanine: AtomicU64,
    /// New originals' small pixels (for facts, fingerprint) taken from a run's decode, itself
    /// or reduced: each a small decode they need not make.
    pub small_decodes_spared: AtomicU64,
    /// Frames of animations decoded (`animated=1` runs decode every frame, one by one).
    pub frames_decoded: AtomicU64,
    /// Mezzanines built (each original's once, unless evicted or lost).
    pub mezzanines_built: AtomicU64,
    /// Runs that waited for a CPU slot (every admitted run), and the microseconds they waited.
    pub queue_waits: AtomicU64,
    pub queue_wait_micros: AtomicU64,
    /// Bytes of downloads not stored because canonical mode served the URL from a
    /// near-duplicate original.
    pub near_bytes_saved: AtomicU64,
    /// Variants' runs planned (`processors::plan`): once per variant located, never again
    /// for its run.
    pub plans_made: AtomicU64,
}

impl Stats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The counters now, as plain numbers.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            downloads: Self::get(&self.downloads),
            downloaded_bytes: Self::get(&self.downloaded_bytes),
            not_modified: Self::get(&self.not_modified),
            processing_runs: Self::get(&self.processing_runs),
            originals_stored: Self::get(&self.originals_stored),
            dedup_bytes_saved: Self::get(&self.dedup_bytes_saved),
            variant_map_reads: Self::get(&self.variant_map_reads),
            hot_hits: Self::get(&self.hot_hits),
            variant_object_reads: Self::get(&self.variant_object_reads),
            original_reads: Self::get(&self.original_reads),
            hot_key_pins: Self::get(&self.hot_key_pins),
            origin_failure_hits: Self::get(&self.origin_failure_hits),
            stale_for_maps: Self::get(&self.stale_for_maps),
            runs_stopped: Self::get(&self.runs_stopped),
            background_dropped: Self::get(&self.background_dropped),
            variants_evicted: Self::get(&self.variants_evicted),
            urls_forgotten: Self::get(&self.urls_forgotten),
            urls_evicted: Self::get(&self.urls_evicted),
            claim_waits: Self::get(&self.claim_waits),
            near_duplicates_found: Self::get(&self.near_duplicates_found),
            near_merges_refused: Self::get(&self.near_merges_refused),
            fingerprints_computed: Self::get(&self.fingerprints_computed),
            facts_computed: Self::get(&self.facts_computed),
            decodes_original: Self::get(&self.decodes_original),
            decodes_mezzanine: Self::get(&self.decodes_mezzanine),
            small_decodes_spared: Self::get(&self.small_decodes_spared),
            frames_decoded: Self::get(&self.frames_decoded),
            mezzanines_built: Self::get(&self.mezzanines_built),
            plans_made: Self::get(&self.plans_made),
            queue_waits: Self::get(&self.queue_waits),
            queue_wait_micros: Self::get(&self.queue_wait_micros),
            near_bytes_saved: Self::get(&self.near_bytes_saved),
        }
    }
}

/// [`Stats`] read at one moment (each field as documented there).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub downloads: u64,
    pub downloaded_bytes: u64,
    pub not_modified: u64,
    pub processing_runs: u64,
    pub originals_stored: u64,
    pub dedup_bytes_saved: u64,
    pub variant_map_reads: u64,
    pub hot_hits: u64,
    pub variant_object_reads: u64,
    pub original_reads: u64,
    pub hot_key_pins: u64,
    pub origin_failure_hits: u64,
    pub stale_for_maps: u64,
    pub runs_stopped: u64,
    pub background_dropped: u64,
    pub variants_evicted: u64,
    pub urls_forgotten: u64,
    pub urls_evicted: u64,
    pub claim_waits: u64,
    pub near_duplicates_found: u64,
    pub near_merges_refused: u64,
    pub fingerprints_computed: u64,
    pub facts_computed: u64,
    pub decodes_original: u64,
    pub decodes_mezzanine: u64,
    pub small_decodes_spared: u64,
    pub frames_decoded: u64,
    pub mezzanines_built: u64,
    pub plans_made: u64,
    pub queue_waits: u64,
    pub queue_wait_micros: u64,
    pub near_bytes_saved: u64,
}

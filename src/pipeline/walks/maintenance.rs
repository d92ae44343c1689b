//! `stats`, `verify` and `gc`: the maps and the blob store counted and checked against each
//! other, on either backend. They belong to the pipeline because they read and repair the
//! state it owns; the commands only print what these return.
//!
//! - `stats`: what is stored — URLs, originals and their bytes, variants and cached errors;
//!   and the store's totals (what the URL map points at against what is stored), which the
//!   operator's page reads too (`store_totals`: the totals the maps keep, read at most once
//!   per its maximum age); `verify --totals` counts them afresh and compares.
//! - `verify`: every originals-index entry has a blob whose SHA-256 is its key, every URL
//!   map entry points at an indexed original (or at taken-down content: such an entry is how
//!   a URL is remembered as taken down), and nothing of taken-down content is stored. With
//!   repair, what dangles is dropped (the index entry and a corrupt blob, the URL entries
//!   pointing at it, its variants), and the takedown of what is still stored is finished:
//!   the next request downloads afresh instead of failing.
//! - `gc`: blobs the index does not know (left by a crash between blob write and index write)
//!   and variants of unindexed originals, and (with shared maps) variant objects no row names —
//!   never bytes younger than `maintenance.gc_grace`, so it may run while nodes write; URL entries unused for `fetch.forget_after`;
//!   variants beyond `limits.variants_max_bytes` (a budget lowered since the server last
//!   ran). Removed only when applied; then the maps' file is compacted, giving the freed
//!   space back to the file system.

use std::collections::HashSet;

use crate::blob::VariantObject;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{
    now_ms, OriginalPages, StoreReading, StoreTotals, UrlPages, VariantKey, VariantKeyPages,
    VariantTotals,
};

use crate::pipeline::Pipeline;

/// Told how far a long walk is: `(done, total)`.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// What `stats` counts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StatsReport {
    pub urls: u64,
    pub originals: u64,
    pub original_bytes: u64,
    pub variants: VariantTotals,
    /// What the variants count for against the budget, and the budget.
    pub variant_bytes: u64,
    pub variants_max_bytes: u64,
    /// Groups of near-duplicate originals (within the report radius of each other), the
    /// originals in them and the bytes those hold.
    pub near_clusters: u64,
    pub near_clustered_originals: u64,
    pub near_clustered_bytes: u64,
}

/// What `verify` found (and, with repair, dropped).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub originals_checked: u64,
    /// Indexed originals whose blob is absent.
    pub missing: Vec<ContentHash>,
    /// Indexed originals whose blob's bytes do not hash to the key.
    pub corrupt: Vec<ContentHash>,
    /// URL map entries pointing at an original the index does not hold.
    pub dangling_urls: Vec<String>,
    /// Taken-down hashes of which something is still stored (the index entry, bytes, or
    /// variants: a takedown a crash interrupted, or a run another node finished during it).
    pub taken_down_stored: Vec<ContentHash>,
    pub repaired: bool,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty()
            && self.corrupt.is_empty()
            && self.dangling_urls.is_empty()
            && self.taken_down_stored.is_empty()
    }
}

/// What `gc` found (and, when applied, removed).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub unreferenced_blobs: Vec<ContentHash>,
    pub bytes: u64,
    /// Unreferenced blobs and variant objects spared for being younger than
    /// `maintenance.gc_grace` (their rows may be on their way).
    pub young: u64,
    pub orphan_variants: u64,
    /// Variant objects in the blob store that no variant row names (shared maps only).
    pub unreferenced_variant_objects: u64,
    /// URL entries unused for `fetch.forget_after`.
    pub unused_urls: u64,
    /// Variants evicted to meet the budget (only when applied).
    pub evicted_variants: u64,
    /// The maps' file was compacted (only when applied).
    pub compacted: bool,
    pub applied: bool,
}

impl Pipeline {
    /// The maps' totals (what the URL map points at against what is stored) and the URL
    /// map's budget measure, read afresh when the last reading is older than `max_age`.
    /// Concurrent callers share one reading.
    pub async fn store_reading(&self, max_age: std::time::Duration) -> Result<StoreReading, Error> {
        let mut held = self.shared.walks.totals.lock().await;
        if let Some((at, reading)) = &*held {
            if at.elapsed() <= max_age {
                return Ok(*reading);
            }
        }
        let maps = &self.shared.maps;
        let reading = StoreReading {
            totals: maps.totals().await?,
            url_bytes: maps.url_bytes().await?,
            read_at_ms: now_ms(),
        };
        *held = Some((std::time::Instant::now(), reading));
        Ok(reading)
    }

    /// The last [`StoreReading`], if one was made and no reading is under way (`/metrics`
    /// never waits for the maps' walk).
    pub fn last_store_reading(&self) -> Option<StoreReading> {
        let held = self.shared.walks.totals.try_lock().ok()?;
        held.as_ref().map(|(_, reading)| *reading)
    }

    /// The totals the maps keep, and the same counted afresh from the entries (`imgcas
    /// verify --totals`). While other nodes write, the two are read a moment apart: a count
    /// that differs is made again (up to three times) before it is reported.
    pub async fn check_totals(&self) -> Result<(StoreTotals, StoreTotals), Error> {
        let maps = &self.shared.maps;
        let mut attempt = 0;
        loop {
            let kept = maps.totals().await?;
            let counted = maps.recount_totals().await?;
            attempt += 1;
            if kept == counted || attempt == 3 {
                return Ok((kept, counted));
            }
        }
    }

    pub async fn stored_stats(&self) -> Result<StatsReport, Error> {
        let maps = &self.shared.maps;
        let counted = maps.totals().await?;
        let mut report = StatsReport {
            urls: counted.urls,
            originals: counted.originals,
            original_bytes: counted.original_bytes,
            variants: maps.variant_totals().await?,
            variant_bytes: maps.variant_bytes().await?,
            variants_max_bytes: self.shared.config.limits.variants_max_bytes,
            ..StatsReport::default()
        };
        if self.near_dedup_on() {
            let (clusters, originals, bytes) = self.near_duplicate_clusters().await?;
            report.near_clusters = clusters;
            report.near_clustered_originals = originals;
            report.near_clustered_bytes = bytes;
        }
        Ok(report)
    }

    pub async fn verify(
        &self,
        repair: bool,
        progress: Progress<'_>,
    ) -> Result<VerifyReport, Error> {
        let (maps, blobs) = (&self.shared.maps, &self.shared.blobs);
        let mut report = VerifyReport {
            repaired: repair,
            ..VerifyReport::default()
        };
        let total = maps.totals().await?.originals;
        let mut originals = OriginalPages::new(maps.as_ref());
        while let Some(page) = originals.next().await? {
            for (hash, _) in &page {
                match blobs.get(hash).await? {
                    None => report.missing.push(*hash),
                    Some(bytes) if ContentHash::of(&bytes) != *hash => report.corrupt.push(*hash),
                    Some(_) => {}
                }
                report.originals_checked += 1;
                progress(
                    report.originals_checked,
                    total.max(report.originals_checked),
                );
            }
        }
        let bad: Vec<ContentHash> = report
            .missing
            .iter()
            .chain(&report.corrupt)
            .copied()
            .collect();
        let listed: HashSet<ContentHash> = maps
            .takedowns()
            .await?
            .into_iter()
            .map(|(h, _)| h)
            .collect();
        for hash in &listed {
            let stored = maps.original(hash).await?.is_some()
                || blobs.size(hash).await?.is_some()
                || !maps.variants_of(hash).await?.is_empty();
            if stored {
                report.taken_down_stored.push(*hash);
            }
        }
        let mut urls = UrlPages::new(maps.as_ref());
        while let Some(page) = urls.next().await? {
            for (url, entry) in page {
                if listed.contains(&entry.hash) || listed.contains(&entry.serving()) {
                    // A URL remembered as taken down.
                    continue;
                }
                // A canonical mapping is served from its canonical original (its own bytes
                // were never stored).
                let serving = entry.serving();
                let indexed = maps.original(&serving).await?.is_some();
                if !indexed || bad.contains(&serving) {
                    report.dangling_urls.push(url);
                }
            }
        }
        if repair {
            for url in &report.dangling_urls {
                maps.remove_url(url).await?;
            }
            for hash in &bad {
                maps.remove_original(hash).await?;
            }
            for hash in &report.corrupt {
                blobs.delete(hash).await?;
            }
            let doomed = self.variants_where(|h| bad.contains(h)).await?;
            maps.remove_variants(&doomed).await?;
            self.drop_variant_bytes(&doomed).await?;
            for hash in &report.taken_down_stored {
                self.take_down(hash).await?;
            }
            maps.flush().await?;
            // Remembered requests may name what was just removed.
            self.forget_requests();
        }
        Ok(report)
    }

    pub async fn gc(&self, apply: bool, progress: Progress<'_>) -> Result<GcReport, Error> {
        let (maps, blobs) = (&self.shared.maps, &self.shared.blobs);
        let indexed = self.indexed_hashes().await?;
        let stored = blobs.list().await?;
        let mut report = GcReport {
            applied: apply,
            ..GcReport::default()
        };
        let written_before = self.gc_written_before();
        let total = stored.len() as u64;
        for (done, hash) in stored.into_iter().enumerate() {
            if indexed.binary_search(&hash).is_err() {
                // Written since the grace began: its index entry may be on its way (a writer
                // stores the blob first), so it is not garbage yet.
                if blobs.modified_ms(&hash).await?.unwrap_or(0) > written_before {
                    report.young += 1;
                    continue;
                }
                report.bytes += blobs.size(&hash).await?.unwrap_or(0);
                if apply {
                    blobs.delete(&hash).await?;
                }
                report.unreferenced_blobs.push(hash);
            }
            progress(done as u64 + 1, total);
        }
        if !maps.holds_variant_bytes() {
            self.variant_objects_gc(apply, written_before, &mut report)
                .await?;
        }
        // Variants of an unindexed original are never served: nothing resolves to its hash.
        // The index is read again after the variants: an original indexed since the first
        // read (an upload while nodes serve) may already have variants, and they are not
        // orphans. (A variant row is written only after its original's index entry.)
        let mut orphans = self
            .variants_where(|h| indexed.binary_search(h).is_err())
            .await?;
        if !orphans.is_empty() {
            let indexed_now = self.indexed_hashes().await?;
            orphans.retain(|k| indexed_now.binary_search(&k.hash).is_err());
        }
        report.orphan_variants = orphans.len() as u64;
        if apply {
            maps.remove_variants(&orphans).await?;
            self.drop_variant_bytes(&orphans).await?;
            report.unused_urls = self.forget_unused_urls().await?;
            report.unused_urls += self.keep_urls_within_budget().await?;
            report.evicted_variants = self.keep_variants_within_budget().await?;
            maps.flush().await?;
            report.compacted = maps.compact().await?;
        } else {
            report.unused_urls = self.unused_urls().await?;
        }
        Ok(report)
    }

    /// Variant objects no row names (a writer died between bytes and row, or a row was
    /// replaced): deleted once older than the grace period.
    async fn variant_objects_gc(
        &self,
        apply: bool,
        written_before: u64,
        report: &mut GcReport,
    ) -> Result<(), Error> {
        let mut named: HashSet<VariantObject> = HashSet::new();
        let mut keys = VariantKeyPages::new(self.shared.maps.as_ref());
        while let Some(page) = keys.next().await? {
            named.extend(page.iter().map(crate::pipeline::variant::variant_object));
        }
        let mut doomed = Vec::new();
        for (object, modified) in self.shared.blobs.list_variants().await? {
            if named.contains(&object) {
                continue;
            }
            if modified > written_before {
                report.young += 1;
            } else {
                doomed.push(object);
            }
        }
        report.unreferenced_variant_objects = doomed.len() as u64;
        if apply {
            self.shared.blobs.delete_variants(&doomed).await?;
        }
        Ok(())
    }

    /// The variant keys whose source hash `doomed` picks.
    async fn variants_where(
        &self,
        doomed: impl Fn(&ContentHash) -> bool,
    ) -> Result<Vec<VariantKey>, Error> {
        self.variant_keys_where(|k| doomed(&k.hash)).await
    }

    /// Every indexed hash, in order (`gc` compares the blob store's listing with it), read
    /// a page at a time.
    async fn indexed_hashes(&self) -> Result<Vec<ContentHash>, Error> {
        let mut hashes: Vec<ContentHash> = Vec::new();
        let mut originals = OriginalPages::new(self.shared.maps.as_ref());
        while let Some(page) = originals.next().await? {
            hashes.extend(page.into_iter().map(|(h, _)| h));
        }
        Ok(hashes)
    }
}

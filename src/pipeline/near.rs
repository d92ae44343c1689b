//! Near-duplicates: the same picture in other bytes. Every original gets one perceptual
//! fingerprint when first stored (uploads synchronously, since their answer names the best
//! match; downloads in the background, unless canonical mode needs it to decide), kept in
//! the maps' fingerprints with their near-neighbour index. Originals stored before
//! fingerprints existed get theirs from [`Pipeline::backfill_fingerprints`] (at start, and
//! `imgcas verify --fingerprint`), and meanwhile on demand.
//!
//! Two radii: `dedup.report_radius` for everything that reports (uploads' and ingest's
//! `near_duplicate_of`, `similar`, `info`, the metric) and the tighter `dedup.radius`, with
//! the stricter guards, for canonical mode's merges (`urls/resolve.rs`).

use bytes::Bytes;

use imgcas_processors::fingerprint::{fingerprint, Fingerprint, Guards};
use imgcas_processors::FINGERPRINT_VERSION;

use super::walks::{Page, Walk};
use super::{blocking, Pipeline};
use crate::admission::{Slot, Tier};
use crate::coalesce::SingleFlight;
use crate::config::NearDedup;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::near::NearIndex;
use crate::maps::{Fingerprinted, NearMatch, OriginalInfo, VersionCursor, NEAR_READ_CAP};
use crate::stats::Stats;

/// Originals fingerprinted per batch of the backfill.
const BACKFILL_BATCH: usize = 500;

/// The near-duplicates' own state, composed into the pipeline.
pub(super) struct Near {
    /// One fingerprint computation per original at a time.
    fingerprint_flights: SingleFlight<ContentHash, Result<Option<Fingerprint>, Error>>,
    /// Background reads of originals ahead of their CPU slot (`read_then_slot`): as many as
    /// the slots.
    background_reads: tokio::sync::Semaphore,
}

impl Near {
    /// `slots`: the CPU slots (`limits.process_concurrency`).
    pub(super) fn new(slots: usize) -> Near {
        Near {
            fingerprint_flights: SingleFlight::default(),
            background_reads: tokio::sync::Semaphore::new(slots.max(1)),
        }
    }

    /// Fingerprint computations under way (at shutdown, waited for: they write when done).
    pub(super) fn fingerprints_under_way(&self) -> usize {
        self.fingerprint_flights.in_flight()
    }
}

/// An original near another, with what the originals index says of it.
#[derive(Debug, Clone)]
pub struct Similar {
    pub found: NearMatch,
    pub info: OriginalInfo,
}

/// Where canonical mode sends a download's new bytes.
pub(super) enum Canonical {
    /// A copy of this taken-down original: refused, and stored nowhere.
    TakenDown(ContentHash),
    /// Served from this original, the same picture everywhere.
    Merge(ContentHash),
    /// Stored and served as themselves.
    Own,
}

/// How many of the closest candidates a near-duplicate report ranks: however many originals
/// look alike (a catalogue of products on white, thousands of placeholders), an upload's
/// report reads this many, not every earlier one (audit #3's 100,000 uploads: the report
/// read them all, and memory and time grew with them).
const BEST_AMONG: usize = 64;

impl Pipeline {
    /// Whether near-duplicates are looked for at all (`dedup.near` is not `off`).
    pub fn near_dedup_on(&self) -> bool {
        self.shared.config.dedup.near != NearDedup::Off
    }

    /// The report radius (`dedup.report_radius`).
    pub fn report_radius(&self) -> u32 {
        self.shared.config.dedup.report_radius
    }

    /// A CPU slot for an original's facts or fingerprint (processing's slots, see
    /// `admission`): taken before the computation's bytes are read, so that waiting work
    /// holds a hash, not an image.
    pub(super) async fn fingerprint_slot(&self, tier: Tier) -> Slot {
        self.shared.admission.side_work(tier).await
    }

    /// An original's bytes, then a background CPU slot for what is computed from them: the
    /// read comes first so that a store that does not answer holds a read, not a core
    /// (audit #3: facts waiting on a silent bucket with their slots held kept a request's
    /// probe waiting 4 s for a slot). Few reads run ahead of their slot at once
    /// (`background_reads`, as many as slots), so waiting work still holds hashes, not
    /// images.
    pub(super) async fn read_then_slot(&self, hash: &ContentHash) -> Result<(Bytes, Slot), Error> {
        let reading = self.shared.near.background_reads.acquire().await;
        let bytes = self.original_bytes(hash).await?;
        let slot = self.fingerprint_slot(Tier::Background).await;
        drop(reading);
        Ok((bytes, slot))
    }

    /// Computes the fingerprint of bytes (a request's on the blocking pool, background work
    /// on the niced threads); `None`: no picture. The caller holds a slot.
    async fn fingerprint_bytes(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
        tier: Tier,
    ) -> Result<Option<Fingerprint>, Error> {
        let limits = self.limits();
        Stats::bump(&self.shared.stats.fingerprints_computed);
        let (this, h) = (self.clone(), *hash);
        self.shared
            .admission
            .run_as(tier, move || {
                // The small decode the facts take too (see `decoded`).
                let decodes = this.shared.decodes.of(h, &this.shared.stats);
                fingerprint(&bytes, &limits, &decodes).ok()
            })
            .await
            .map_err(|m| Error::Internal(format!("fingerprint task failed: {m}")))
    }

    /// [`Pipeline::fingerprint_bytes`] in a slot of its own, for bytes already in hand.
    pub(super) async fn compute_fingerprint(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
    ) -> Result<Option<Fingerprint>, Error> {
        let _slot = self.fingerprint_slot(Tier::Interactive).await;
        self.fingerprint_bytes(hash, bytes, Tier::Interactive).await
    }

    /// Stores a fingerprint computed for a newly stored original, and counts it in the
    /// metric when it has a near-duplicate within the report radius.
    pub(super) async fn keep_fingerprint(
        &self,
        hash: &ContentHash,
        computed: Option<Fingerprint>,
    ) -> Result<(), Error> {
        let stored = computed.map_or(Fingerprinted::NotAPicture, Fingerprinted::Picture);
        let seen = self.shared.maps.put_fingerprint(hash, &stored).await?;
        if self.after_write(hash, seen).await? {
            return Ok(());
        }
        if let Some(fp) = computed {
            if self
                .best_match(hash, &fp, &self.report_guards())
                .await?
                .is_some()
            {
                Stats::bump(&self.shared.stats.near_duplicates_found);
            }
        }
        Ok(())
    }

    /// Fingerprints a newly stored original whose bytes are in hand (an upload), unless
    /// `known` has its fingerprint already (computed by the checks before storing).
    pub(super) async fn fingerprint_new(
        &self,
        hash: &ContentHash,
        bytes: Bytes,
        known: Option<Option<Fingerprint>>,
    ) -> Result<(), Error> {
        if !self.near_dedup_on() {
            return Ok(());
        }
        let computed = match known {
            Some(known) => known,
            None => self.compute_fingerprint(hash, bytes).await?,
        };
        self.keep_fingerprint(hash, computed).await
    }

    /// An indexed original's fingerprint: stored, or computed from its stored bytes and kept
    /// — once, however many callers ask at the same time (a download's background run and an
    /// ingest report, say). `None`: its bytes are no picture.
    pub async fn fingerprint_of(&self, hash: &ContentHash) -> Result<Option<Fingerprint>, Error> {
        if let Some(known) = self.shared.maps.fingerprint(hash).await? {
            return Ok(known.picture().copied());
        }
        let (this, h) = (self.clone(), *hash);
        self.shared
            .near
            .fingerprint_flights
            .run(h, async move { this.fingerprint_stored(&h).await }, |m| {
                Err(Error::Internal(format!("fingerprint task failed: {m}")))
            })
            .await
    }

    /// One flight of [`Pipeline::fingerprint_of`]: a flight that just ended may have stored
    /// it, so the maps are asked again first.
    async fn fingerprint_stored(&self, hash: &ContentHash) -> Result<Option<Fingerprint>, Error> {
        if let Some(known) = self.shared.maps.fingerprint(hash).await? {
            return Ok(known.picture().copied());
        }
        let (bytes, _slot) = self.read_then_slot(hash).await?;
        let computed = self
            .fingerprint_bytes(hash, bytes, Tier::Background)
            .await?;
        self.keep_fingerprint(hash, computed).await?;
        Ok(computed)
    }

    fn report_guards(&self) -> Guards {
        Guards::report(self.report_radius())
    }

    pub(super) fn canonical_guards(&self) -> Guards {
        Guards::canonical(self.shared.config.dedup.radius)
    }

    /// The best other indexed original matching `fp` under `guards`: the largest in pixels,
    /// then the oldest, among the [`BEST_AMONG`] closest.
    pub(super) async fn best_match(
        &self,
        own: &ContentHash,
        fp: &Fingerprint,
        guards: &Guards,
    ) -> Result<Option<ContentHash>, Error> {
        let found = self
            .shared
            .maps
            .near_closest(fp.phash, guards.radius, BEST_AMONG, NEAR_READ_CAP)
            .await?;
        let ranked = self.ranked(own, fp, guards, found.matches, false).await?;
        Ok(ranked.first().copied())
    }

    /// The indexed originals among `found` that `fp` matches under `guards`, best first: the
    /// largest in pixels, then the oldest. With `at_least_as_large`, only those at least as
    /// large as `fp` in both dimensions (canonical mode never serves a smaller picture).
    async fn ranked(
        &self,
        own: &ContentHash,
        fp: &Fingerprint,
        guards: &Guards,
        found: Vec<NearMatch>,
        at_least_as_large: bool,
    ) -> Result<Vec<ContentHash>, Error> {
        let mut ranked = Vec::new();
        for m in self
            .indexed_matches(own, fp, guards, found, usize::MAX)
            .await?
        {
            let other = &m.found.fingerprint;
            if at_least_as_large && (other.width < fp.width || other.height < fp.height) {
                continue;
            }
            let pixels = u64::from(other.width) * u64::from(other.height);
            ranked.push((pixels, u64::MAX - m.info.first_seen_ms, m.found.hash));
        }
        ranked.sort_by_key(|r| std::cmp::Reverse((r.0, r.1)));
        Ok(ranked.into_iter().map(|(_, _, hash)| hash).collect())
    }

    /// Where a download's new bytes go in canonical mode, from one look at the index: refused
    /// when they match a taken-down original within the merge radius (a taken-down original's
    /// fingerprint outlives it for this: a new copy of a taken-down picture is refused as the
    /// picture is, issue 28); merged into the best original at least as large whose pixels are
    /// the same picture everywhere (`likeness`, issue 28: the fingerprint alone merged an
    /// edited copy, a line of text or a box over a few percent of the picture, into the
    /// photo); else their own. The first few candidates are checked, each decode in a CPU slot.
    pub(super) async fn canonical_decision(
        &self,
        own: &ContentHash,
        bytes: &Bytes,
        fp: &Fingerprint,
    ) -> Result<Canonical, Error> {
        const CHECKED: usize = 3;
        let guards = self.canonical_guards();
        // The closest candidates only, read within the cap: the decision's work does not grow
        // with the look-alikes stored.
        let found = self
            .shared
            .maps
            .near_closest(fp.phash, guards.radius, BEST_AMONG, NEAR_READ_CAP)
            .await?
            .matches;
        let gone = found.iter().find(|m| {
            m.hash != *own && self.is_taken_down(&m.hash) && fp.matches(&m.fingerprint, &guards)
        });
        if let Some(gone) = gone {
            return Ok(Canonical::TakenDown(gone.hash));
        }
        let candidates = self.ranked(own, fp, &guards, found, true).await?;
        for candidate in candidates.into_iter().take(CHECKED) {
            let theirs = match self.original_bytes(&candidate).await {
                Ok(theirs) => theirs,
                Err(e) => {
                    tracing::warn!(%candidate, error = %e, "near-duplicate's bytes unreadable; not merged into it");
                    continue;
                }
            };
            let _slot = self.fingerprint_slot(Tier::Interactive).await;
            let (ours, limits) = (bytes.clone(), self.limits());
            let same = blocking(move || {
                Ok(
                    imgcas_processors::likeness::same_picture(&ours, &theirs, &limits)
                        .unwrap_or(false),
                )
            })
            .await?;
            if same {
                return Ok(Canonical::Merge(candidate));
            }
            Stats::bump(&self.shared.stats.near_merges_refused);
            tracing::info!(source = %own, %candidate, "near-duplicate by fingerprint, but not the same picture everywhere: not merged");
        }
        Ok(Canonical::Own)
    }

    /// The other indexed originals matching `fp` under `guards`, closest first, at most
    /// `limit`, among the candidates a search reads within [`NEAR_READ_CAP`]; and whether
    /// the cap cut the search (closer ones may then exist).
    async fn matches(
        &self,
        own: &ContentHash,
        fp: &Fingerprint,
        guards: &Guards,
        limit: usize,
    ) -> Result<(Vec<Similar>, bool), Error> {
        let found = self
            .shared
            .maps
            .near_closest(fp.phash, guards.radius, NEAR_READ_CAP, NEAR_READ_CAP)
            .await?;
        let mut matches = self
            .indexed_matches(own, fp, guards, found.matches, limit)
            .await?;
        matches.truncate(limit);
        Ok((matches, found.partial))
    }

    /// The entries of `found` (an index lookup, closest first) other than `own` that `fp`
    /// matches under `guards` and that are indexed still (a fingerprint can outlive its
    /// original: by a moment, or for good once taken down).
    async fn indexed_matches(
        &self,
        own: &ContentHash,
        fp: &Fingerprint,
        guards: &Guards,
        found: Vec<NearMatch>,
        limit: usize,
    ) -> Result<Vec<Similar>, Error> {
        let mut out = Vec::new();
        for found in found {
            if out.len() >= limit {
                break;
            }
            if found.hash == *own || !fp.matches(&found.fingerprint, guards) {
                continue;
            }
            if let Some(info) = self.shared.maps.original(&found.hash).await? {
                out.push(Similar { found, info });
            }
        }
        Ok(out)
    }

    /// The best existing original within the report radius of an indexed one, if any (what
    /// uploads and ingest report as `near_duplicate_of`).
    pub async fn near_duplicate_of(
        &self,
        hash: &ContentHash,
    ) -> Result<Option<ContentHash>, Error> {
        if !self.near_dedup_on() {
            return Ok(None);
        }
        let Some(fp) = self.fingerprint_of(hash).await? else {
            return Ok(None);
        };
        self.best_match(hash, &fp, &self.report_guards()).await
    }

    /// [`Pipeline::near_duplicate_of`] for a report that must not fail for it (the original
    /// is stored already): an error is logged and reported as no match.
    pub async fn near_duplicate_report(&self, hash: &ContentHash) -> Option<ContentHash> {
        self.near_duplicate_of(hash).await.unwrap_or_else(|e| {
            tracing::warn!(%hash, error = %e, "near-duplicate lookup failed");
            None
        })
    }

    /// The originals within `max_distance` bits of an indexed one (under the report guards),
    /// closest first, at most `limit`, and whether the search was cut short by its cap on
    /// candidates read ([`NEAR_READ_CAP`]); `None`: the original is no picture.
    pub async fn similar(
        &self,
        hash: &ContentHash,
        max_distance: u32,
        limit: usize,
    ) -> Result<Option<(Fingerprint, Vec<Similar>, bool)>, Error> {
        let Some(fp) = self.fingerprint_of(hash).await? else {
            return Ok(None);
        };
        let (found, partial) = self
            .matches(hash, &fp, &Guards::report(max_distance), limit)
            .await?;
        Ok(Some((fp, found, partial)))
    }

    /// Fingerprints every indexed original that has none (or one of an older version);
    /// `progress` is told of each. Returns how many were computed. A walk (`walks/`: one
    /// node of a cluster at a time, resumable, throttled) over only the originals the maps
    /// index as lacking a current fingerprint
    /// ([`crate::maps::Fingerprints::lacking_fingerprints`]): nothing on a store whose
    /// fingerprints are current, and what is still lacking after an interruption.
    pub async fn backfill_fingerprints(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<u64, Error> {
        let done = std::sync::atomic::AtomicU64::new(0);
        self.run_walk(Walk::Fingerprints, |after| {
            self.fingerprints_page(after, &done, progress)
        })
        .await?;
        Ok(done.into_inner())
    }

    /// One page of [`Pipeline::backfill_fingerprints`], after `after`; `done` counts what it
    /// computed.
    async fn fingerprints_page(
        &self,
        after: Option<VersionCursor>,
        done: &std::sync::atomic::AtomicU64,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Page<VersionCursor>, Error> {
        let batch = self
            .shared
            .maps
            .lacking_fingerprints(FINGERPRINT_VERSION, after, BACKFILL_BATCH)
            .await?;
        // Past what this page saw: an original whose bytes are missing stays lacking, and
        // is not asked for twice.
        let Some(last) = batch.last().copied() else {
            return Ok(None);
        };
        let rows = batch.len() as u64;
        for hash in batch.into_iter().map(|c| c.hash) {
            let slot = self.fingerprint_slot(Tier::Background).await;
            // `verify` reports missing bytes; nothing to fingerprint.
            let Some(bytes) = self.shared.blobs.get(&hash).await? else {
                continue;
            };
            let computed = self
                .fingerprint_bytes(&hash, bytes, Tier::Background)
                .await?;
            drop(slot);
            self.keep_fingerprint(&hash, computed).await?;
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(n);
        }
        Ok(Some((last, rows)))
    }

    /// Groups of originals within the report radius of one another (connected, under the
    /// report guards): their count, the originals in them and the bytes those hold
    /// (`imgcas stats`). One read of every fingerprint, then an index in memory: no round
    /// trip to the maps per original.
    pub async fn near_duplicate_clusters(&self) -> Result<(u64, u64, u64), Error> {
        let mut all: Vec<(ContentHash, Fingerprint)> = Vec::new();
        let mut pages = crate::maps::FingerprintPages::new(self.shared.maps.as_ref());
        while let Some(page) = pages.next().await? {
            all.extend(page);
        }
        let guards = self.report_guards();
        let parent = blocking(move || Ok(link(&all, &guards).map(|p| (all, p)))).await?;
        let Some((all, mut parent)) = parent else {
            return Ok((0, 0, 0));
        };
        let mut groups: std::collections::HashMap<usize, Vec<usize>> = Default::default();
        for i in 0..all.len() {
            groups.entry(root(&mut parent, i)).or_default().push(i);
        }
        let (mut clusters, mut members, mut bytes) = (0, 0, 0);
        for group in groups.values().filter(|g| g.len() > 1) {
            clusters += 1;
            for &i in group {
                members += 1;
                if let Some(info) = self.shared.maps.original(&all[i].0).await? {
                    bytes += info.bytes;
                }
            }
        }
        Ok((clusters, members, bytes))
    }
}

/// Union-find parents linking every pair that matches under `guards`; `None` when empty.
fn link(all: &[(ContentHash, Fingerprint)], guards: &Guards) -> Option<Vec<usize>> {
    if all.is_empty() {
        return None;
    }
    let mut index = NearIndex::default();
    for (i, (_, fp)) in all.iter().enumerate() {
        index.insert_new(i as u64, fp.phash);
    }
    let mut parent: Vec<usize> = (0..all.len()).collect();
    for (i, (_, fp)) in all.iter().enumerate() {
        for (j, _) in index.search(fp.phash, guards.radius) {
            let j = j as usize;
            if j != i && fp.matches(&all[j].1, guards) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    Some(parent)
}

fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

//! The migration's backfill (`mod.rs`): the leading store's originals walked by hash range, a
//! page at a time, and for each the follower made to hold what the leader holds of it — its
//! index entry, its bytes (when the blob stores differ), its fingerprint, the URL entries
//! served from it, its variants — and nothing else (what the follower holds of an original
//! the leader no longer has goes). Takedowns and the blocklist, a handful of rows, go first.
//!
//! Validation is by checksum: each original's state is digested on both sides (its use
//! stamps aside) and the digests summed per range (the hashes' first byte, 256 ranges) in
//! any order. An original whose two digests differ is copied again, up to three times (a
//! write racing the copy); a range is **equal** when its two sums are once the copy is done.
//! The run reaching the end with every range equal validates the migration (or, rolling
//! back, ends it); one that does not runs again.
//!
//! It is the walk `migration_backfill` (`walks/`): resumable, throttled, under its lease.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::super::variant::{row_for, with_bytes_in_hand};
use super::super::walks::{Page, Walk};
use super::{Phase, Pipeline};
use crate::blob::BlobStore;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{Focus, MapStore, OriginalInfo, UrlEntry, VariantKey, WalkPosition};

/// Originals per page: each costs a few reads on both sides.
const PAGE: usize = 200;

/// Originals of a page settled at once.
const SETTLING_AT_ONCE: usize = 16;

/// Copies of one original tried before its range counts as differing.
const TRIES: usize = 3;

/// Full runs tried before the backfill waits for the next start (writes racing it without
/// end; each run copies what it finds).
const RUNS: usize = 3;

/// Ranges whose sums differ that the report names.
const DIFFERING_NAMED: usize = 64;

/// Where the backfill stands: the walk's cursor and report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackfillReport {
    pub originals: u64,
    /// Originals found different and copied.
    pub copied: u64,
    /// Originals the follower held that the leader did not: removed there.
    pub removed: u64,
    pub ranges_checked: u32,
    pub ranges_equal: u32,
    /// Ranges whose sums still differed, with both (hex range, leader sum, follower sum).
    pub differing: Vec<(String, u64, u64)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct Cursor {
    /// Takedowns and the blocklist are copied.
    lists_done: bool,
    after: Option<ContentHash>,
    range: u16,
    lead_sum: u64,
    follow_sum: u64,
    done: bool,
    report: BackfillReport,
}

/// The backfill as `GET /admin/migrate` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackfillState {
    pub node: String,
    pub started_ms: u64,
    pub updated_ms: u64,
    pub finished_ms: Option<u64>,
    pub report: BackfillReport,
}

/// A URL entry as the checksum sees it: URL, hash, canonical hash, validators.
type UrlState = (
    String,
    ContentHash,
    Option<ContentHash>,
    Option<String>,
    Option<String>,
);

/// What one side holds of one original, its use stamps aside.
#[derive(Debug, PartialEq)]
struct HashState {
    info: Option<(u64, Option<u32>, Option<Focus>)>,
    blob: Option<u64>,
    fingerprint: Option<String>,
    urls: Vec<UrlState>,
    variants: Vec<VariantKey>,
}

impl HashState {
    fn digest(&self) -> u64 {
        if self.info.is_none() && self.urls.is_empty() && self.variants.is_empty() {
            return 0;
        }
        let out = Sha256::digest(format!("{self:?}").as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        u64::from_le_bytes(first)
    }
}

/// One side of the copy.
struct Side<'a> {
    maps: &'a dyn MapStore,
    blobs: &'a dyn BlobStore,
}

/// What settling one original came to.
struct Settled {
    /// Whether the leader indexes it.
    indexed: bool,
    /// Copied to the follower (`true`) or removed there (`false`), or left as it was.
    copied: Option<bool>,
    /// Both sides' digests once it is settled.
    lead: u64,
    follow: u64,
}

/// Makes the follower hold what the leader holds of `hash`, checked by both sides' digests
/// and copied again while they differ, up to `TRIES` times (a write racing the copy).
async fn settle(
    from: &Side<'_>,
    to: &Side<'_>,
    hash: &ContentHash,
    blobs_too: bool,
) -> Result<Settled, Error> {
    let (mut lead, mut there) = tokio::try_join!(
        state_of(from, hash, blobs_too),
        state_of(to, hash, blobs_too)
    )?;
    let mut copied = None;
    let mut tries = 0;
    while lead != there && tries < TRIES {
        copied.get_or_insert(lead.info.is_some());
        copy_hash(from, to, hash, blobs_too).await?;
        tries += 1;
        (lead, there) = tokio::try_join!(
            state_of(from, hash, blobs_too),
            state_of(to, hash, blobs_too)
        )?;
    }
    Ok(Settled {
        indexed: lead.info.is_some(),
        copied,
        lead: lead.digest(),
        follow: there.digest(),
    })
}

async fn state_of(
    side: &Side<'_>,
    hash: &ContentHash,
    blobs_too: bool,
) -> Result<HashState, Error> {
    let (info, fingerprint, urls, variants) = tokio::try_join!(
        side.maps.original(hash),
        side.maps.fingerprint(hash),
        side.maps.urls_of(hash),
        side.maps.variants_of(hash)
    )?;
    let blob = match (&info, blobs_too) {
        (Some(_), true) => side.blobs.size(hash).await?,
        _ => None,
    };
    let fingerprint = fingerprint.map(|f| format!("{f:?}"));
    let mut urls: Vec<_> = urls
        .into_iter()
        .map(|(url, e)| (url, e.hash, e.canonical, e.etag, e.last_modified))
        .collect();
    urls.sort();
    let mut variants: Vec<VariantKey> = variants.into_iter().map(|(k, _)| k).collect();
    variants.sort_by_key(|k| k.to_bytes());
    Ok(HashState {
        info: info.map(|i| (i.bytes, i.facts.map(|f| f.version), i.focus)),
        blob,
        fingerprint,
        urls,
        variants,
    })
}

/// Makes `to` hold what `from` holds of `hash`.
async fn copy_hash(
    from: &Side<'_>,
    to: &Side<'_>,
    hash: &ContentHash,
    blobs_too: bool,
) -> Result<(), Error> {
    let info: Option<OriginalInfo> = from.maps.original(hash).await?;
    let Some(info) = info else {
        // Gone from the leader: gone from the follower too (its URL entries rewritten as
        // the leader has them, if it has them elsewhere).
        for (url, _) in to.maps.urls_of(hash).await? {
            follow_url(from, to, &url).await?;
        }
        let keys: Vec<VariantKey> = keys_of(to.maps, hash).await?;
        to.maps.remove_variants(&keys).await?;
        to.maps.remove_original(hash).await?;
        if blobs_too {
            to.blobs.delete(hash).await?;
        }
        return Ok(());
    };
    if blobs_too && to.blobs.size(hash).await? != Some(info.bytes) {
        let Some(bytes) = from.blobs.get(hash).await? else {
            return Err(Error::StorageUnavailable(format!(
                "original {hash} is indexed but its bytes are not in the leading blob store"
            )));
        };
        to.blobs.delete(hash).await?;
        to.blobs.put_if_absent(hash, bytes).await?;
    }
    let there = to.maps.original(hash).await?;
    match &there {
        None => {
            to.maps.add_original(hash, &info).await?;
        }
        Some(there) if there.facts != info.facts => {
            if let Some(facts) = &info.facts {
                to.maps.put_facts(hash, facts).await?;
            }
        }
        Some(_) => {}
    }
    // A new index entry may not carry it (PostgreSQL's insert writes no focus).
    if there.map_or(info.focus.is_some(), |t| t.focus != info.focus) {
        to.maps.put_focus(hash, info.focus.as_ref()).await?;
    }
    if let Some(fp) = from.maps.fingerprint(hash).await? {
        if to.maps.fingerprint(hash).await?.as_ref() != Some(&fp) {
            to.maps.put_fingerprint(hash, &fp).await?;
        }
    }
    let lead_urls = from.maps.urls_of(hash).await?;
    for (url, entry) in &lead_urls {
        if to
            .maps
            .url(url)
            .await?
            .as_ref()
            .is_none_or(|e| !same(e, entry))
        {
            if let Some(canonical) = entry.canonical {
                to.maps.put_alias(&entry.hash, &canonical).await?;
            }
            to.maps.put_url(url, entry).await?;
        }
    }
    for (url, _) in to.maps.urls_of(hash).await? {
        if lead_urls.iter().all(|(u, _)| *u != url) {
            follow_url(from, to, &url).await?;
        }
    }
    let lead_keys: Vec<VariantKey> = keys_of(from.maps, hash).await?;
    let follow_keys: Vec<VariantKey> = keys_of(to.maps, hash).await?;
    for key in lead_keys.iter().filter(|k| !follow_keys.contains(k)) {
        let Some(row) = from.maps.variant(key).await? else {
            continue;
        };
        let Some(row) = with_bytes_in_hand(row, key, &[from.blobs]).await? else {
            continue;
        };
        let row = row_for(to.maps, to.blobs, key, row).await?;
        to.maps.put_variant(key, &row).await?;
    }
    let extra: Vec<VariantKey> = follow_keys
        .into_iter()
        .filter(|k| !lead_keys.contains(k))
        .collect();
    to.maps.remove_variants(&extra).await?;
    Ok(())
}

/// The follower's entry for `url` made the leader's (or removed, where the leader has none).
async fn follow_url(from: &Side<'_>, to: &Side<'_>, url: &str) -> Result<(), Error> {
    match from.maps.url(url).await? {
        Some(entry) => to.maps.put_url(url, &entry).await?,
        None => to.maps.remove_url(url).await?,
    }
    Ok(())
}

/// The keys of `hash`'s variants in `maps`.
async fn keys_of(maps: &dyn MapStore, hash: &ContentHash) -> Result<Vec<VariantKey>, Error> {
    Ok(maps
        .variants_of(hash)
        .await?
        .into_iter()
        .map(|(k, _)| k)
        .collect())
}

fn same(a: &UrlEntry, b: &UrlEntry) -> bool {
    a.hash == b.hash
        && a.canonical == b.canonical
        && a.etag == b.etag
        && a.last_modified == b.last_modified
}

impl Cursor {
    fn close_until(&mut self, range: u16) {
        while self.range < range {
            let report = &mut self.report;
            report.ranges_checked += 1;
            if self.lead_sum == self.follow_sum {
                report.ranges_equal += 1;
            } else if report.differing.len() < DIFFERING_NAMED {
                report.differing.push((
                    format!("{:02x}", self.range),
                    self.lead_sum,
                    self.follow_sum,
                ));
            }
            (self.lead_sum, self.follow_sum) = (0, 0);
            self.range += 1;
        }
    }
}

impl Pipeline {
    /// Runs the backfill in the background (see the module's comment), and moves the
    /// migration on when it validates. `taken_up`: a run a stop interrupted is taken up from
    /// its last page, but does not validate: a mirrored write the stop cut off may lie behind
    /// its cursor, so a full run follows it.
    pub(super) fn spawn_backfill(&self, taken_up: bool) {
        let pipeline = self.clone();
        tokio::spawn(async move {
            let mut may_validate = !taken_up;
            for _ in 0..RUNS + usize::from(taken_up) {
                match pipeline.backfill_once(may_validate).await {
                    Ok(true) => return,
                    Ok(false) => may_validate = true,
                    Err(e) => {
                        tracing::warn!(error = %e, "migration backfill stopped; it resumes at the next start");
                        return;
                    }
                }
            }
            tracing::warn!(
                "migration backfill kept finding ranges different; it runs again at the next start"
            );
        });
    }

    /// One run of the backfill to its end; whether it validated (and moved the phase on),
    /// which it may not when `may_validate` is false.
    async fn backfill_once(&self, may_validate: bool) -> Result<bool, Error> {
        self.run_walk(Walk::Migration, |cursor: Option<Cursor>| {
            self.backfill_page(cursor.unwrap_or_default())
        })
        .await?;
        let Some(state) = self.backfill_state().await? else {
            return Ok(false);
        };
        let r = &state.report;
        let Some(record) = self.migration_record().await? else {
            return Ok(true);
        };
        if state.finished_ms.is_none() {
            // Another node holds the walk, or this one lost its lease: not this run's to judge.
            return Ok(true);
        }
        let equal = r.ranges_equal == r.ranges_checked
            && r.ranges_checked >= u32::from(crate::pipeline::CHECK_RANGES);
        if !equal || !may_validate {
            // A new run: its position starts over.
            self.shared
                .maps
                .put_walk_position(Walk::Migration.name(), &WalkPosition::default())
                .await?;
            return Ok(false);
        }
        let _turn = self.migration().turn.lock().await;
        match record.phase {
            Phase::Backfilling => self.migrate_to(record, Phase::Validated).await?,
            Phase::RollingBack => self.migrate_to(record, Phase::RolledBack).await?,
            _ => {}
        }
        Ok(true)
    }

    /// The backfill's position and report, as the leading store keeps them.
    pub(super) async fn backfill_state(&self) -> Result<Option<BackfillState>, Error> {
        let Some(p) = self
            .shared
            .maps
            .walk_position(Walk::Migration.name())
            .await?
        else {
            return Ok(None);
        };
        let report = match p.cursor.as_deref() {
            Some(text) => {
                serde_json::from_str::<Cursor>(text)
                    .map_err(|e| Error::Internal(format!("the backfill's kept cursor: {e}")))?
                    .report
            }
            None => BackfillReport::default(),
        };
        Ok(Some(BackfillState {
            node: p.node,
            started_ms: p.started_ms,
            updated_ms: p.updated_ms,
            finished_ms: p.finished_ms,
            report,
        }))
    }

    async fn backfill_page(&self, mut cursor: Cursor) -> Result<Page<Cursor>, Error> {
        if cursor.done {
            return Ok(None);
        }
        let sides = self.migration().sides.load_full();
        let Some(follow) = &sides.follow else {
            // No migration mirrors any more (rolled back or finished meanwhile).
            return Ok(None);
        };
        let from = Side {
            maps: sides.lead.as_ref(),
            blobs: sides.lead_blobs.as_ref(),
        };
        let to = Side {
            maps: follow.maps.as_ref(),
            blobs: follow.blobs.as_ref(),
        };
        let blobs_too = !follow.same_blobs;
        if !cursor.lists_done {
            copy_lists(&from, &to).await?;
            cursor.lists_done = true;
        }
        let lead_page = from.maps.originals_page(cursor.after, PAGE).await?;
        let follow_page = to.maps.originals_page(cursor.after, PAGE).await?;
        let bound = [
            (lead_page.len() >= PAGE).then(|| lead_page.last().map(|(h, _)| *h)),
            (follow_page.len() >= PAGE).then(|| follow_page.last().map(|(h, _)| *h)),
        ]
        .into_iter()
        .flatten()
        .flatten()
        .min();
        let mut hashes: Vec<ContentHash> = lead_page
            .iter()
            .map(|(h, _)| *h)
            .chain(follow_page.iter().map(|(h, _)| *h))
            .filter(|h| bound.is_none_or(|b| *h <= b))
            .collect();
        hashes.sort();
        hashes.dedup();
        // The originals of a page are settled a few at a time (each is a dozen round trips
        // on either side, and independent of the others); their outcomes are folded in hash
        // order, so the cursor and the ranges' sums are what a one-by-one walk would make.
        // Paced within the page too, at the walks' rate: a page settled at full speed and
        // then its pause would come as a burst that takes the requests' CPU (on two cores it
        // had a request's p99 several times what it was before the migration).
        let rate = self.shared.config.maintenance.walk_rows_per_second;
        let at_once = match rate {
            0 => SETTLING_AT_ONCE,
            rate => (rate as usize / 10).clamp(1, SETTLING_AT_ONCE),
        };
        let mut settled: Vec<Settled> = Vec::with_capacity(hashes.len());
        for some in hashes.chunks(at_once) {
            let began = Instant::now();
            let at_once: Vec<_> = some
                .iter()
                .map(|hash| settle(&from, &to, hash, blobs_too))
                .collect();
            settled.extend(futures_util::future::try_join_all(at_once).await?);
            if rate > 0 {
                let least = Duration::from_secs_f64(some.len() as f64 / rate as f64);
                if let Some(left) = least.checked_sub(began.elapsed()) {
                    tokio::time::sleep(left).await;
                }
            }
        }
        for (hash, s) in hashes.iter().zip(settled) {
            cursor.close_until(u16::from(hash.as_bytes()[0]));
            match s.copied {
                Some(true) => cursor.report.copied += 1,
                Some(false) => cursor.report.removed += 1,
                None => {}
            }
            if s.indexed {
                cursor.report.originals += 1;
            }
            cursor.lead_sum = cursor.lead_sum.wrapping_add(s.lead);
            cursor.follow_sum = cursor.follow_sum.wrapping_add(s.follow);
            cursor.after = Some(*hash);
        }
        if bound.is_none() {
            cursor.close_until(crate::pipeline::CHECK_RANGES);
            cursor.done = true;
        }
        Ok(Some((cursor, hashes.len() as u64)))
    }
}

/// Takedowns and the blocklist, whole (a handful of rows): the follower's made the
/// leader's; and the URL entries that remember taken-down content.
async fn copy_lists(from: &Side<'_>, to: &Side<'_>) -> Result<(), Error> {
    let lead = from.maps.takedowns().await?;
    for (hash, at) in &lead {
        to.maps.take_down(hash, *at).await?;
        for (url, entry) in from.maps.urls_of(hash).await? {
            to.maps.put_url(&url, &entry).await?;
        }
    }
    for (hash, _) in to.maps.takedowns().await? {
        if lead.iter().all(|(h, _)| *h != hash) {
            to.maps.lift_takedown(&hash).await?;
        }
    }
    let listed = from.maps.blocklist().await?;
    let there = to.maps.blocklist().await?;
    for entry in &listed {
        if there.iter().all(|e| e.id != entry.id) {
            to.maps.block(entry).await?;
        }
    }
    for entry in there {
        if listed.iter().all(|e| e.id != entry.id) {
            to.maps.unblock(&entry.id).await?;
        }
    }
    if !lead.is_empty() {
        to.maps.bump_purge_generation().await?;
    }
    Ok(())
}

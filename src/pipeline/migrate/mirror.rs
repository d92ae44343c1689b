//! The maps while a migration moves them (`mod.rs`): one store leads — it answers every read
//! and takes every write first — and, while the migration mirrors, the other follows, each
//! write made on it too once the leading one took it, in the background and in order
//! (`follow.rs`). Roles that coordinate rather than keep content (claims, quotas, the walks'
//! positions) stay with the leading store alone (`lead_only.rs`): they are short-lived, and
//! the follower starts on them afresh when it leads.
//!
//! A follower's failure does not fail the write (the leading store is the truth until the
//! cutover); it is counted, and the backfill's checksums find the page it left different. A
//! variant's row is made for the follower as it keeps them (its bytes in the row, or in its
//! blob store). A sample of reads is also asked of the follower, in the background, and
//! compared (shadow reads). With no migration under way, a read costs one atomic load more,
//! and a write an uncontended read of the gate a change of phase closes (`follow.rs`) too.

use arc_swap::ArcSwap;
use async_trait::async_trait;
use futures_util::future::{BoxFuture, FutureExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::blob::BlobStore;
use crate::hash::ContentHash;
use crate::maps::{
    BlockEntry, Blocklist, Claim, Evicted, Fingerprint, Fingerprinted, Fingerprints, Focus,
    ListedAtWrite, MapError, MapStore, NearFound, NearMatch, OriginalFacts, OriginalInfo,
    Originals, Recorded, StoreTotals, Takedowns, UrlEntry, UrlMap, VariantKey, VariantRow,
    VariantTotals, Variants, VersionCursor,
};

use super::super::variant::{row_for, with_bytes_in_hand};
use super::follow::{FollowQueue, MirrorCounts, Sides};

/// The maps a migration moves: see the module's comment.
pub(in crate::pipeline) struct MirroredMaps {
    sides: Arc<ArcSwap<Sides>>,
    pub counts: Arc<MirrorCounts>,
    follow: Arc<FollowQueue>,
    /// One read in this many is asked of the follower too.
    shadow_every: u64,
}

/// Reads compared with the follower: one in this many.
pub(in crate::pipeline) const SHADOW_EVERY: u64 = 16;

/// Shadow reads waiting on the follower at once; a read's turn past this is skipped (a slow
/// follower must not gather tasks without bound).
const SHADOWS_IN_FLIGHT: u64 = 32;

impl MirroredMaps {
    pub(in crate::pipeline) fn new(
        sides: Arc<ArcSwap<Sides>>,
        counts: Arc<MirrorCounts>,
        follow: Arc<FollowQueue>,
    ) -> Self {
        MirroredMaps {
            sides,
            counts,
            follow,
            shadow_every: SHADOW_EVERY,
        }
    }

    pub(super) fn sides(&self) -> arc_swap::Guard<Arc<Sides>> {
        self.sides.load()
    }

    /// On a read the shadow compares (only then is `ask` run), asks the follower in a task of
    /// its own — the request has the leader's answer and does not wait — and counts how the
    /// answers compare: `Some(true)` the same, `Some(false)` different, `None` absent on one.
    fn shadow<T, F>(&self, sides: &Sides, ask: F, compare: fn(&T) -> Option<bool>)
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn MapStore>) -> BoxFuture<'static, Result<T, MapError>>,
    {
        let Some(follow) = sides.follow.as_ref() else {
            return;
        };
        let counts = &self.counts;
        let n = counts.reads.fetch_add(1, Ordering::Relaxed);
        if !n.is_multiple_of(self.shadow_every)
            || counts.shadows_in_flight.load(Ordering::Relaxed) >= SHADOWS_IN_FLIGHT
        {
            return;
        }
        counts.shadows_in_flight.fetch_add(1, Ordering::Relaxed);
        let asked = ask(follow.maps.clone());
        let counts = self.counts.clone();
        tokio::spawn(async move {
            let counter = match asked.await.map(|answer| compare(&answer)) {
                Ok(Some(true)) => &counts.shadow_same,
                Ok(None) => &counts.shadow_absent,
                // A follower's error counts as different.
                _ => &counts.shadow_different,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            counts.shadows_in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }

    async fn flush_mirrored(&self) -> Result<(), MapError> {
        let sides = self.sides();
        sides.lead.flush().await?;
        if let Some(follow) = &sides.follow {
            self.follow.settled().await;
            let flushed = follow.maps.flush().await.map_err(|e| e.to_string());
            self.counts.follower_wrote("flush", flushed);
        }
        Ok(())
    }

    async fn put_variant_mirrored(
        &self,
        key: &VariantKey,
        row: &VariantRow,
    ) -> Result<(), MapError> {
        let _turn = self.follow.write_turn().await;
        let sides = self.sides();
        sides.lead.put_variant(key, row).await?;
        self.follow_variant(&sides, key, row).await;
        Ok(())
    }

    async fn put_variant_claimed_mirrored(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: &Claim,
    ) -> Result<ListedAtWrite, MapError> {
        let _turn = self.follow.write_turn().await;
        let sides = self.sides();
        let out = sides.lead.put_variant_claimed(key, row, claim).await?;
        self.follow_variant(&sides, key, row).await;
        Ok(out)
    }

    /// A variant row queued for the follower, made as it keeps them (in the original's lane).
    async fn follow_variant(&self, sides: &Arc<Sides>, key: &VariantKey, row: &VariantRow) {
        if sides.follow.is_none() {
            return;
        }
        let (sides, key, row) = (sides.clone(), key.clone(), row.clone());
        let lane = key.hash;
        let write = async move {
            let Some(follow) = &sides.follow else {
                return Ok(());
            };
            let lead_blobs: &dyn BlobStore = sides.lead_blobs.as_ref();
            let row = match with_bytes_in_hand(row, &key, &[lead_blobs]).await {
                Ok(Some(row)) => row,
                // Its bytes are gone already (evicted): nothing to follow.
                Ok(None) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            };
            let row = match (follow.same_blobs, &row) {
                (true, _) if !follow.maps.holds_variant_bytes() => row,
                _ => row_for(follow.maps.as_ref(), follow.blobs.as_ref(), &key, row)
                    .await
                    .map_err(|e| e.to_string())?,
            };
            follow
                .maps
                .put_variant(&key, &row)
                .await
                .map_err(|e| e.to_string())
        };
        self.follow
            .queue(lane, "put_variant", 0, write.boxed())
            .await;
    }

    async fn evict_variants_mirrored(&self, target_bytes: u64) -> Result<Evicted, MapError> {
        both!(self, evict_variants(target_bytes))
    }
}

/// A write made on the leading store, then on the follower once every write queued before
/// it was made (its failure counted, not returned): the leading store's answer. For the
/// writes the queue does not carry (removals, takedowns, evictions: rare, and most not on a
/// request's path).
macro_rules! both {
    ($self:ident, $op:ident($($arg:expr),*)) => {{
        let _turn = $self.follow.write_turn().await;
        let sides = $self.sides();
        let out = sides.lead.$op($($arg),*).await?;
        if let Some(follow) = &sides.follow {
            $self.follow.settled().await;
            let made = follow.maps.$op($($arg),*).await;
            $self.counts.follower_wrote(stringify!($op), made.map(|_| ()).map_err(|e| e.to_string()));
        }
        Ok(out)
    }};
}
use both;

/// A write made on the leading store, then queued for the follower in the lane of what it
/// is `about` (`follow.rs`): the leading store's answer. Each argument is owned by the
/// queued write and lent to the follower's call (`name: owned value => lent`).
macro_rules! queued {
    ($self:ident, $about:expr, $op:ident($($arg:ident: $own:expr => $lend:expr),*)) => {{
        let _turn = $self.follow.write_turn().await;
        let sides = $self.sides();
        let out = sides.lead.$op($($arg),*).await?;
        if let Some(follow) = &sides.follow {
            let about = $about;
            let maps = follow.maps.clone();
            $(let $arg = $own;)*
            let write = async move {
                maps.$op($($lend),*).await.map(|_| ()).map_err(|e| e.to_string())
            };
            $self.follow.queue(about, stringify!($op), 0, write.boxed()).await;
        }
        Ok(out)
    }};
}

/// Whether two URL entries say the same (their use stamps aside), `None` when one is absent.
fn same_entry(a: &Option<UrlEntry>, b: &Option<UrlEntry>) -> Option<bool> {
    match (a, b) {
        (Some(a), Some(b)) => Some(
            a.hash == b.hash
                && a.canonical == b.canonical
                && a.etag == b.etag
                && a.last_modified == b.last_modified,
        ),
        (None, None) => Some(true),
        _ => None,
    }
}

#[async_trait]
impl MapStore for MirroredMaps {
    fn drop_memory(&self) {
        let sides = self.sides();
        sides.lead.drop_memory();
        if let Some(follow) = &sides.follow {
            follow.maps.drop_memory();
        }
    }

    fn round_trips(&self) -> Vec<(&'static str, u64)> {
        self.sides().lead.round_trips()
    }

    async fn flush(&self) -> Result<(), MapError> {
        self.flush_mirrored().await
    }

    async fn compact(&self) -> Result<bool, MapError> {
        self.sides().lead.compact().await
    }

    async fn check(&self) -> Result<(), MapError> {
        self.sides().lead.check().await
    }

    async fn totals(&self) -> Result<StoreTotals, MapError> {
        self.sides().lead.totals().await
    }

    async fn recount_totals(&self) -> Result<StoreTotals, MapError> {
        self.sides().lead.recount_totals().await
    }

    async fn listed_and_original(
        &self,
        hash: &ContentHash,
    ) -> Result<(bool, Option<OriginalInfo>), MapError> {
        self.sides().lead.listed_and_original(hash).await
    }
}

#[async_trait]
impl UrlMap for MirroredMaps {
    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let sides = self.sides();
        let found = sides.lead.url(url).await?;
        self.shadow(
            &sides,
            |maps| {
                let (url, led) = (url.to_string(), found.clone());
                async move { Ok((maps.url(&url).await?, led)) }.boxed()
            },
            |(other, led)| same_entry(other, led),
        );
        Ok(found)
    }

    async fn url_now(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        self.sides().lead.url_now(url).await
    }

    async fn url_with_original(
        &self,
        url: &str,
    ) -> Result<(Option<UrlEntry>, Option<OriginalInfo>), MapError> {
        self.sides().lead.url_with_original(url).await
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        queued!(self, entry.hash, put_url(url: url.to_owned() => &url, entry: entry.clone() => &entry))
    }

    async fn remove_url(&self, url: &str) -> Result<(), MapError> {
        both!(self, remove_url(url))
    }

    async fn urls_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UrlEntry)>, MapError> {
        self.sides().lead.urls_page(after, limit).await
    }

    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError> {
        self.sides().lead.urls_of(hash).await
    }

    async fn mark_urls_requested(&self, requested: &[(String, u64)]) -> Result<(), MapError> {
        both!(self, mark_urls_requested(requested))
    }

    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError> {
        both!(self, forget_urls(unused_since_ms))
    }

    async fn url_bytes(&self) -> Result<u64, MapError> {
        self.sides().lead.url_bytes().await
    }

    async fn evict_urls(&self, target_bytes: u64) -> Result<u64, MapError> {
        both!(self, evict_urls(target_bytes))
    }
}

#[async_trait]
impl Originals for MirroredMaps {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        let sides = self.sides();
        let found = sides.lead.original(hash).await?;
        let (hash, led) = (*hash, found.as_ref().map(|i| i.bytes));
        self.shadow(
            &sides,
            |maps| async move { Ok((maps.original(&hash).await?, led)) }.boxed(),
            |(other, led)| match (other, led) {
                (Some(a), Some(b)) => Some(a.bytes == *b),
                (None, None) => Some(true),
                _ => None,
            },
        );
        Ok(found)
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        queued!(self, *hash, add_original(hash: *hash => &hash, info: info.clone() => &info))
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
        claim: Option<&Claim>,
    ) -> Result<Recorded, MapError> {
        // In the lane of the original it indexes: the facts, fingerprint and focal point
        // written for it later must not reach the follower first (each is nothing there for
        // an original not indexed yet). The claim is the leading store's: the follower
        // records without one.
        queued!(
            self,
            entry.hash,
            record_download(
                url: url.to_owned() => &url,
                entry: entry.clone() => &entry,
                info: info.clone() => &info,
                claim: None::<&Claim> => claim
            )
        )
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        queued!(self, *hash, put_facts(hash: *hash => &hash, facts: facts.clone() => &facts))
    }

    async fn put_focus(&self, hash: &ContentHash, focus: Option<&Focus>) -> Result<bool, MapError> {
        queued!(self, *hash, put_focus(hash: *hash => &hash, focus: focus.copied() => focus.as_ref()))
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        both!(self, remove_original(hash))
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError> {
        self.sides().lead.originals_page(after, limit).await
    }

    async fn lacking_facts(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.sides().lead.lacking_facts(version, after, limit).await
    }
}

#[async_trait]
impl Fingerprints for MirroredMaps {
    async fn fingerprint(&self, hash: &ContentHash) -> Result<Option<Fingerprinted>, MapError> {
        self.sides().lead.fingerprint(hash).await
    }

    async fn put_fingerprint(
        &self,
        hash: &ContentHash,
        fingerprint: &Fingerprinted,
    ) -> Result<ListedAtWrite, MapError> {
        queued!(self, *hash, put_fingerprint(hash: *hash => &hash, fingerprint: *fingerprint => &fingerprint))
    }

    async fn near(&self, phash: u64, radius: u32) -> Result<Vec<NearMatch>, MapError> {
        self.sides().lead.near(phash, radius).await
    }

    async fn near_closest(
        &self,
        phash: u64,
        radius: u32,
        limit: usize,
        read_cap: usize,
    ) -> Result<NearFound, MapError> {
        self.sides()
            .lead
            .near_closest(phash, radius, limit, read_cap)
            .await
    }

    async fn lacking_fingerprints(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.sides()
            .lead
            .lacking_fingerprints(version, after, limit)
            .await
    }

    async fn fingerprints_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
        self.sides().lead.fingerprints_page(after, limit).await
    }

    async fn alias(&self, hash: &ContentHash) -> Result<Option<ContentHash>, MapError> {
        self.sides().lead.alias(hash).await
    }

    async fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> Result<(), MapError> {
        queued!(self, *own, put_alias(own: *own => &own, canonical: *canonical => &canonical))
    }

    async fn remove_aliases(&self, hash: &ContentHash) -> Result<u64, MapError> {
        both!(self, remove_aliases(hash))
    }
}

#[async_trait]
impl Variants for MirroredMaps {
    fn holds_variant_bytes(&self) -> bool {
        self.sides().lead.holds_variant_bytes()
    }

    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
        self.sides().lead.variant(key).await
    }

    async fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> Result<(), MapError> {
        self.put_variant_mirrored(key, row).await
    }

    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError> {
        both!(self, mark_variants_served(served))
    }

    async fn variant_bytes(&self) -> Result<u64, MapError> {
        self.sides().lead.variant_bytes().await
    }

    async fn evict_variants(&self, target_bytes: u64) -> Result<Evicted, MapError> {
        self.evict_variants_mirrored(target_bytes).await
    }

    async fn variant_keys_page(
        &self,
        after: Option<&VariantKey>,
        limit: usize,
    ) -> Result<Vec<VariantKey>, MapError> {
        self.sides().lead.variant_keys_page(after, limit).await
    }

    async fn remove_variants(&self, keys: &[VariantKey]) -> Result<u64, MapError> {
        both!(self, remove_variants(keys))
    }

    async fn variants_of(&self, hash: &ContentHash) -> Result<Vec<(VariantKey, u64)>, MapError> {
        self.sides().lead.variants_of(hash).await
    }

    async fn variant_totals(&self) -> Result<VariantTotals, MapError> {
        self.sides().lead.variant_totals().await
    }

    async fn put_variant_claimed(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: &Claim,
    ) -> Result<ListedAtWrite, MapError> {
        self.put_variant_claimed_mirrored(key, row, claim).await
    }
}

#[async_trait]
impl Takedowns for MirroredMaps {
    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError> {
        both!(self, take_down(hash, at_ms))
    }

    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError> {
        both!(self, lift_takedown(hash))
    }

    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError> {
        self.sides().lead.takedowns().await
    }

    async fn is_taken_down(&self, hash: &ContentHash) -> Result<bool, MapError> {
        self.sides().lead.is_taken_down(hash).await
    }

    async fn purge_generation(&self) -> Result<u64, MapError> {
        self.sides().lead.purge_generation().await
    }

    async fn bump_purge_generation(&self) -> Result<u64, MapError> {
        both!(self, bump_purge_generation())
    }
}

#[async_trait]
impl Blocklist for MirroredMaps {
    async fn block(&self, entry: &BlockEntry) -> Result<bool, MapError> {
        both!(self, block(entry))
    }

    async fn unblock(&self, id: &str) -> Result<bool, MapError> {
        both!(self, unblock(id))
    }

    async fn blocklist(&self) -> Result<Vec<BlockEntry>, MapError> {
        self.sides().lead.blocklist().await
    }
}

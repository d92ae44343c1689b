//! The maps' memory, one wrapper over any backend: [`Cached`] answers the two reads every
//! request by URL makes (its URL entry, its original's index entry) from memory, and passes
//! everything else to the store it wraps. Backends keep no memory of their rows; they only
//! say, by [`Claims::shared`], whether other processes write them too:
//!
//! - **a store of one process's own** (the embedded file) is remembered without a time
//!   limit: every write goes through this wrapper, so memory follows the store exactly
//!   (a hop to redb's blocking pool costs more than the read: a fifth of the hit path's
//!   throughput, measured);
//! - **a shared store** (PostgreSQL) is remembered for [`URL_FRESH_FOR`], since another node
//!   may change an entry; and the last URL entry and originals entry seen are kept apart
//!   (bounded), answered only while the store does not answer, so an outage costs hot hits
//!   nothing, by hash or by URL.
//!
//! Originals entries are remembered in both (content-addressed, they change only when facts
//! are added or a removal drops them); the purge generation drops everything
//! ([`MapStore::drop_memory`]).
//!
//! A write forgets the key it wrote ([`Coherent`]) rather than putting the value in memory:
//! two writes of one key could otherwise land in memory in the other order than in the
//! store, and a read that raced a write could put back what the write replaced. One write
//! refills instead, through the same check a read makes: a request stamp on a store of one
//! process's own, which changes nothing but the stamp of an entry already in memory.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    BlockEntry, Blocklist, Claim, ClaimOutcome, Claims, Evicted, Fingerprint, Fingerprinted,
    Fingerprints, Focus, ListedAtWrite, MapError, MapStore, NearFound, NearMatch, OriginalFacts,
    OriginalInfo, Originals, Recorded, StoreTotals, Takedowns, UrlEntry, UrlMap, VariantKey,
    VariantRow, VariantTotals, Variants, VersionCursor,
};
use super::{Bucket, HeldFailure, OriginSlot, OriginTurn, Quotas, SlotTake, Take};
use super::{WalkLog, WalkPosition};
use crate::hash::ContentHash;

/// Bytes the in-memory copies of entries may hold, per cache, unless
/// `maps.entries_cache_bytes` says otherwise. Every cache here is bounded by what it holds,
/// not by how many entries: URLs may be kilobytes long (issue 28: a cap of 100,000 entries
/// let 60 KB URLs take gigabytes), and a count that suits a node's traffic is no bound on a
/// bulk migration's (audit #3).
pub const DEFAULT_ENTRIES_CACHE_BYTES: usize = 32 << 20;

/// How long a node answers a shared store's URL entry from memory before asking the store
/// again. Another node's revalidation reaches this node at most this late, which
/// `fetch.revalidate_after` (minutes) does not notice; in exchange a hot variant by URL costs
/// no round trip (measured on PostgreSQL: a third of the hit path's throughput).
pub const URL_FRESH_FOR: Duration = Duration::from_secs(1);

/// Stripes of keys that share a write generation: a write makes reads of its stripe that
/// were under way leave nothing in memory; more stripes, fewer such needless misses.
const STRIPES: usize = 64;

/// A memory of a store's entries that a read cannot fill with a value a concurrent write
/// replaced. Writers call [`Coherent::changed`] after writing; a reader takes a [`Ticket`]
/// before it reads the store and hands it to [`Coherent::fill`], which keeps the value only
/// if no write of the key's stripe ended in between (checked after the insert, so a write
/// that ends at any moment either sees the value to forget or is seen by the reader).
struct Coherent<K, V> {
    memory: moka::sync::Cache<K, V>,
    generations: Arc<[AtomicU64]>,
}

impl<K, V> Clone for Coherent<K, V> {
    fn clone(&self) -> Self {
        Coherent {
            memory: self.memory.clone(),
            generations: self.generations.clone(),
        }
    }
}

/// A read's place in its key's stripe of writes ([`Coherent::ticket`]).
#[derive(Clone, Copy)]
struct Ticket {
    stripe: usize,
    generation: u64,
}

impl<K, V> Coherent<K, V>
where
    K: Hash + Eq + Send + Sync + Clone + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn new(memory: moka::sync::Cache<K, V>) -> Self {
        Coherent {
            memory,
            generations: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn stripe<Q: Hash + ?Sized>(key: &Q) -> usize {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        (hasher.finish() % STRIPES as u64) as usize
    }

    fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.memory.get(key)
    }

    fn ticket<Q: Hash + ?Sized>(&self, key: &Q) -> Ticket {
        let stripe = Self::stripe(key);
        Ticket {
            stripe,
            generation: self.generations[stripe].load(Ordering::SeqCst),
        }
    }

    /// Keeps what a read that took `ticket` found, unless a write ended since.
    fn fill(&self, key: K, value: V, ticket: Ticket) {
        self.memory.insert(key.clone(), value);
        if self.generations[ticket.stripe].load(Ordering::SeqCst) != ticket.generation {
            self.memory.invalidate(&key);
        }
    }

    /// After a write of `key` (whether or not it succeeded: a failed commit may still have
    /// landed): forgets it, and any read under way.
    fn changed<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.generations[Self::stripe(key)].fetch_add(1, Ordering::SeqCst);
        self.memory.invalidate(key);
    }

    /// After a write of keys not known here: forgets everything, and any read under way.
    fn clear(&self) {
        for generation in self.generations.iter() {
            generation.fetch_add(1, Ordering::SeqCst);
        }
        self.memory.invalidate_all();
    }
}

/// A cache of URL entries bounded by `bytes`, counting the URL, the entry's strings and a
/// fixed cost for the rest, with an optional time to live.
fn url_entry_cache(
    bytes: u64,
    time_to_live: Option<Duration>,
) -> moka::sync::Cache<String, UrlEntry> {
    let builder = moka::sync::Cache::builder().max_capacity(bytes).weigher(
        |url: &String, entry: &UrlEntry| {
            let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
            let held = 160 + text(&entry.etag) + text(&entry.last_modified);
            u32::try_from(url.len() + held).unwrap_or(u32::MAX)
        },
    );
    match time_to_live {
        Some(ttl) => builder.time_to_live(ttl).build(),
        None => builder.build(),
    }
}

/// What an originals entry holds in memory: the entry, its facts' text, and the cache's
/// own bookkeeping per entry (about 100 bytes in moka, with the key).
fn original_weight(info: &OriginalInfo) -> u32 {
    let facts = info
        .facts
        .as_ref()
        .and_then(|f| f.picture.as_ref())
        .map_or(0, |p| {
            p.blurhash.len() + p.thumbhash.len() + p.dominant_color.len() + 3 * 24
        });
    u32::try_from(std::mem::size_of::<OriginalInfo>() + 140 + facts).unwrap_or(u32::MAX)
}

fn original_entry_cache(bytes: u64) -> moka::sync::Cache<ContentHash, OriginalInfo> {
    moka::sync::Cache::builder()
        .max_capacity(bytes)
        .weigher(|_: &ContentHash, info: &OriginalInfo| original_weight(info))
        .build()
}

/// A map store with its memory: what [`super::open_backend`] hands out for every backend.
pub struct Cached<S> {
    store: S,
    originals: Coherent<ContentHash, OriginalInfo>,
    urls: Coherent<String, UrlEntry>,
    /// Shared stores only: the URL entries last read or written, answered while the store
    /// does not answer.
    last_seen_urls: Option<moka::sync::Cache<String, UrlEntry>>,
    /// Shared stores only: the originals entries last read, answered while the store does
    /// not answer (a write of facts forgets an entry in `originals`, and the next request
    /// of a URL served through an outage needs it: audit #3).
    last_seen_originals: Option<moka::sync::Cache<ContentHash, OriginalInfo>>,
}

impl<S: Clone> Clone for Cached<S> {
    fn clone(&self) -> Self {
        Cached {
            store: self.store.clone(),
            originals: self.originals.clone(),
            urls: self.urls.clone(),
            last_seen_urls: self.last_seen_urls.clone(),
            last_seen_originals: self.last_seen_originals.clone(),
        }
    }
}

impl<S: MapStore> Cached<S> {
    /// `store` with memory as its sharing allows (see the module's doc), each cache of
    /// entries holding at most [`DEFAULT_ENTRIES_CACHE_BYTES`].
    pub fn new(store: S) -> Self {
        Self::sized(store, None)
    }

    /// [`Cached::new`] with caches of at most `entries_bytes` each
    /// (`maps.entries_cache_bytes`; unset: [`DEFAULT_ENTRIES_CACHE_BYTES`]).
    pub fn sized(store: S, entries_bytes: Option<usize>) -> Self {
        let bytes = entries_bytes.unwrap_or(DEFAULT_ENTRIES_CACHE_BYTES) as u64;
        let shared = store.shared();
        Cached {
            originals: Coherent::new(original_entry_cache(bytes)),
            urls: Coherent::new(url_entry_cache(bytes, shared.then_some(URL_FRESH_FOR))),
            last_seen_urls: shared.then(|| url_entry_cache(bytes, None)),
            last_seen_originals: shared.then(|| original_entry_cache(bytes)),
            store,
        }
    }

    /// Reads a URL entry from the store and remembers what it found; while the store does
    /// not answer, a shared store's entry as last seen.
    async fn read_url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let ticket = self.urls.ticket(url);
        let original_ticket = |entry: &UrlEntry| self.originals.ticket(&entry.serving());
        match self.store.url_with_original(url).await {
            Ok((entry, original)) => {
                // The original a URL is served from is read with it (one round trip for
                // both on a shared store): what the request asks next. (Its ticket can only
                // be taken after the read, which names the hash. An originals entry changes
                // only when facts are added — a node holding it without them computes them
                // once more — or when it is removed, which clears all memory through the
                // purge generation.)
                if let (Some(found), Some(info)) = (&entry, original) {
                    self.saw_original(&found.serving(), &info);
                    self.originals
                        .fill(found.serving(), info, original_ticket(found));
                }
                // Only what exists is kept: a URL that is not in the map (one the guard is
                // about to refuse, say) leaves nothing in memory behind it (issue 28).
                match &entry {
                    Some(found) => {
                        self.urls.fill(url.to_string(), found.clone(), ticket);
                        self.saw(url, Some(found));
                    }
                    None => self.saw(url, None),
                }
                Ok(entry)
            }
            Err(e) => match self.last_seen_urls.as_ref().and_then(|seen| seen.get(url)) {
                Some(entry) => {
                    tracing::debug!(%url, error = %e, "maps unavailable; URL entry as last seen");
                    Ok(Some(entry))
                }
                None => Err(e),
            },
        }
    }

    /// Keeps the originals entry a shared store's outage is answered with.
    fn saw_original(&self, hash: &ContentHash, info: &OriginalInfo) {
        if let Some(seen) = &self.last_seen_originals {
            seen.insert(*hash, info.clone());
        }
    }

    /// Keeps (or forgets) the entry a shared store's outage is answered with.
    fn saw(&self, url: &str, entry: Option<&UrlEntry>) {
        if let Some(seen) = &self.last_seen_urls {
            match entry {
                Some(entry) => seen.insert(url.to_string(), entry.clone()),
                None => seen.invalidate(url),
            }
        }
    }

    /// After a write of URL entries not known here.
    fn urls_dropped(&self) {
        self.urls.clear();
        if let Some(seen) = &self.last_seen_urls {
            seen.invalidate_all();
        }
    }
}

#[async_trait]
impl<S: MapStore> UrlMap for Cached<S> {
    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        if let Some(known) = self.urls.get(url) {
            return Ok(Some(known));
        }
        self.read_url(url).await
    }

    async fn url_now(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        if !self.store.shared() {
            // Memory follows the store exactly.
            return self.url(url).await;
        }
        self.read_url(url).await
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        let written = self.store.put_url(url, entry).await;
        self.urls.changed(url);
        self.saw(url, written.is_ok().then_some(entry));
        written
    }

    async fn remove_url(&self, url: &str) -> Result<(), MapError> {
        let removed = self.store.remove_url(url).await;
        self.urls.changed(url);
        self.saw(url, None);
        removed
    }

    async fn urls_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UrlEntry)>, MapError> {
        self.store.urls_page(after, limit).await
    }

    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError> {
        self.store.urls_of(hash).await
    }

    async fn mark_urls_requested(&self, requested: &[(String, u64)]) -> Result<(), MapError> {
        // A store of this process's own keeps hot entries in memory with their new stamps
        // (the stamp is all a mark changes; a write of the entry meanwhile moves the
        // generation, and the fill keeps nothing). A shared store's entries are forgotten:
        // a fill would restart their freshness window.
        let exact = !self.store.shared();
        let known: Vec<_> = requested
            .iter()
            .filter(|_| exact)
            .filter_map(|(url, at)| {
                let ticket = self.urls.ticket(url.as_str());
                let entry = self.urls.get(url.as_str())?;
                Some((url, *at, entry, ticket))
            })
            .collect();
        let written = self.store.mark_urls_requested(requested).await;
        if written.is_err() || !exact {
            for (url, _) in requested {
                self.urls.changed(url.as_str());
            }
            return written;
        }
        for (url, at, mut entry, ticket) in known {
            entry.requested_at_ms = entry.requested_at_ms.max(at);
            self.urls.fill(url.clone(), entry, ticket);
        }
        written
    }

    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError> {
        let forgotten = self.store.forget_urls(unused_since_ms).await;
        if !matches!(forgotten, Ok(0)) {
            self.urls_dropped();
        }
        forgotten
    }

    async fn url_bytes(&self) -> Result<u64, MapError> {
        self.store.url_bytes().await
    }

    async fn evict_urls(&self, target_bytes: u64) -> Result<u64, MapError> {
        let evicted = self.store.evict_urls(target_bytes).await;
        if !matches!(evicted, Ok(0)) {
            self.urls_dropped();
        }
        evicted
    }
}

#[async_trait]
impl<S: MapStore> Originals for Cached<S> {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        if let Some(info) = self.originals.get(hash) {
            return Ok(Some(info));
        }
        let ticket = self.originals.ticket(hash);
        let info = match self.store.original(hash).await {
            Ok(info) => info,
            Err(e) => {
                return match self.last_seen_originals.as_ref().and_then(|s| s.get(hash)) {
                    Some(info) => {
                        tracing::debug!(%hash, error = %e, "maps unavailable; original as last seen");
                        Ok(Some(info))
                    }
                    None => Err(e),
                }
            }
        };
        if let Some(info) = &info {
            self.originals.fill(*hash, info.clone(), ticket);
            self.saw_original(hash, info);
        }
        Ok(info)
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        // The first sighting wins: an entry in memory is the one the store keeps.
        self.store.add_original(hash, info).await
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
        claim: Option<&Claim>,
    ) -> Result<Recorded, MapError> {
        let ticket = self.originals.ticket(&entry.hash);
        let recorded = self.store.record_download(url, entry, info, claim).await;
        if recorded.as_ref().is_ok_and(|r| r.new_original) {
            // The row is the one just inserted: what the request reads next.
            self.saw_original(&entry.hash, info);
            self.originals.fill(entry.hash, info.clone(), ticket);
        }
        self.urls.changed(url);
        self.saw(url, recorded.is_ok().then_some(entry));
        recorded
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        let written = self.store.put_facts(hash, facts).await;
        self.originals.changed(hash);
        written
    }

    async fn put_focus(&self, hash: &ContentHash, focus: Option<&Focus>) -> Result<bool, MapError> {
        let written = self.store.put_focus(hash, focus).await;
        self.originals.changed(hash);
        written
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        let removed = self.store.remove_original(hash).await;
        self.originals.changed(hash);
        if let Some(seen) = &self.last_seen_originals {
            seen.invalidate(hash);
        }
        removed
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError> {
        self.store.originals_page(after, limit).await
    }

    async fn lacking_facts(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.store.lacking_facts(version, after, limit).await
    }
}

/// A role this wrapper keeps no memory for: each listed call is the store's, and the
/// items after `;` are written out (the trait's defaults must not answer for the store's).
macro_rules! store_answers {
    ($role:ident { $(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)* } $($rest:tt)*) => {
        #[async_trait]
        impl<S: MapStore> $role for Cached<S> {
            $(async fn $name(&self $(, $arg: $ty)*) -> Result<$ret, MapError> {
                self.store.$name($($arg),*).await
            })*
            $($rest)*
        }
    };
}

store_answers!(Fingerprints {
    fn fingerprint(&self, hash: &ContentHash) -> Option<Fingerprinted>;
    fn put_fingerprint(&self, hash: &ContentHash, fingerprint: &Fingerprinted) -> ListedAtWrite;
    fn near(&self, phash: u64, radius: u32) -> Vec<NearMatch>;
    fn near_closest(&self, phash: u64, radius: u32, limit: usize, read_cap: usize) -> NearFound;
    fn lacking_fingerprints(&self, version: u32, after: Option<VersionCursor>, limit: usize) -> Vec<VersionCursor>;
    fn fingerprints_page(&self, after: Option<ContentHash>, limit: usize) -> Vec<(ContentHash, Fingerprint)>;
    fn alias(&self, hash: &ContentHash) -> Option<ContentHash>;
    fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> ();
    fn remove_aliases(&self, hash: &ContentHash) -> u64;
});

store_answers!(Variants {
    fn variant(&self, key: &VariantKey) -> Option<VariantRow>;
    fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> ();
    fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> ();
    fn variant_bytes(&self) -> u64;
    fn evict_variants(&self, target_bytes: u64) -> Evicted;
    fn variant_keys_page(&self, after: Option<&VariantKey>, limit: usize) -> Vec<VariantKey>;
    fn remove_variants(&self, keys: &[VariantKey]) -> u64;
    fn variants_of(&self, hash: &ContentHash) -> Vec<(VariantKey, u64)>;
    fn variant_totals(&self) -> VariantTotals;
    fn put_variant_claimed(&self, key: &VariantKey, row: &VariantRow, claim: &Claim) -> ListedAtWrite;
}
    fn holds_variant_bytes(&self) -> bool {
        self.store.holds_variant_bytes()
    }
);

store_answers!(Takedowns {
    fn take_down(&self, hash: &ContentHash, at_ms: u64) -> bool;
    fn lift_takedown(&self, hash: &ContentHash) -> bool;
    fn takedowns(&self) -> Vec<(ContentHash, u64)>;
    fn is_taken_down(&self, hash: &ContentHash) -> bool;
    fn purge_generation(&self) -> u64;
    fn bump_purge_generation(&self) -> u64;
});

store_answers!(Blocklist {
    fn block(&self, entry: &BlockEntry) -> bool;
    fn unblock(&self, id: &str) -> bool;
    fn blocklist(&self) -> Vec<BlockEntry>;
});

store_answers!(Quotas {
    fn take_origin_turn(&self, turn: &OriginTurn<'_>) -> (SlotTake, Option<HeldFailure>);
    fn release_origin_slot(&self, slot: &OriginSlot) -> ();
    fn origin_slots_held(&self, origin: &str) -> u32;
    fn pause_origin(&self, origin: &str, length: Duration) -> ();
    fn origin_pause(&self, origin: &str) -> Option<Duration>;
    fn take_tokens(&self, key: &str, bucket: Bucket, need: f64, cost: f64) -> Take;
    fn held_failure(&self, url: &str) -> Option<HeldFailure>;
    fn hold_failure(&self, url: &str, error: &str, streak: u32, hold: Duration, remember: Duration) -> ();
    fn clear_failure(&self, url: &str) -> ();
});

store_answers!(WalkLog {
    fn walk_position(&self, name: &str) -> Option<WalkPosition>;
    fn put_walk_position(&self, name: &str, position: &WalkPosition) -> ();
    fn walk_positions(&self) -> Vec<(String, WalkPosition)>;
});

store_answers!(Claims {
    fn try_claim(&self, key: &str, owner: &str, token: i64, ttl: Duration) -> ClaimOutcome;
    fn try_claim_past_published(&self, key: &str, owner: &str, token: i64, ttl: Duration) -> ClaimOutcome;
    fn renew_claim(&self, claim: &Claim, new_token: i64, ttl: Duration) -> bool;
    fn release_claim(&self, claim: &Claim) -> ();
}
    fn shared(&self) -> bool {
        self.store.shared()
    }
);

#[async_trait]
impl<S: MapStore> MapStore for Cached<S> {
    fn drop_memory(&self) {
        // Originals are content-addressed, but a takedown removes them, and another node's
        // removal must not be answered from here; URL entries it removed likewise.
        self.originals.clear();
        if let Some(seen) = &self.last_seen_originals {
            seen.invalidate_all();
        }
        self.urls_dropped();
        self.store.drop_memory();
    }

    fn round_trips(&self) -> Vec<(&'static str, u64)> {
        self.store.round_trips()
    }

    async fn listed_and_original(
        &self,
        hash: &ContentHash,
    ) -> Result<(bool, Option<OriginalInfo>), MapError> {
        if let Some(info) = self.originals.get(hash) {
            return Ok((self.store.is_taken_down(hash).await?, Some(info)));
        }
        let ticket = self.originals.ticket(hash);
        let (listed, info) = self.store.listed_and_original(hash).await?;
        if let Some(info) = &info {
            self.saw_original(hash, info);
            self.originals.fill(*hash, info.clone(), ticket);
        }
        Ok((listed, info))
    }

    async fn flush(&self) -> Result<(), MapError> {
        self.store.flush().await
    }

    async fn compact(&self) -> Result<bool, MapError> {
        self.store.compact().await
    }

    async fn totals(&self) -> Result<StoreTotals, MapError> {
        self.store.totals().await
    }

    async fn recount_totals(&self) -> Result<StoreTotals, MapError> {
        self.store.recount_totals().await
    }

    async fn check(&self) -> Result<(), MapError> {
        self.store.check().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> Coherent<String, u32> {
        Coherent::new(moka::sync::Cache::new(16))
    }

    #[test]
    fn a_read_that_raced_a_write_keeps_nothing() {
        let memory = memory();
        let ticket = memory.ticket("k");
        // The read found the old value; the write ended before the read came back.
        memory.changed("k");
        memory.fill("k".to_string(), 1, ticket);
        assert_eq!(memory.get("k"), None);
    }

    #[test]
    fn a_read_with_no_write_in_between_is_kept() {
        let memory = memory();
        let ticket = memory.ticket("k");
        memory.fill("k".to_string(), 1, ticket);
        assert_eq!(memory.get("k"), Some(1));
        memory.changed("k");
        assert_eq!(memory.get("k"), None, "a write forgets the key");
    }

    /// Originals entries, as many as a bulk migration brings: what they hold stays under
    /// the bytes given, however many pass through.
    #[test]
    fn originals_entries_are_bounded_by_bytes() {
        use crate::maps::{OriginalFacts, PictureFacts};
        let bound = 1u64 << 20;
        let cache = original_entry_cache(bound);
        let info = OriginalInfo {
            format: None,
            width: Some(4000),
            height: Some(3000),
            upright: Some((4000, 3000)),
            has_alpha: false,
            bytes: 1 << 20,
            first_seen_ms: 1,
            focus: None,
            facts: Some(OriginalFacts {
                version: 1,
                picture: Some(PictureFacts {
                    blurhash: "x".repeat(28),
                    thumbhash: "y".repeat(32),
                    dominant_color: "#808080".into(),
                    has_alpha: false,
                    frames: 1,
                    duration_ms: 0,
                }),
            }),
        };
        let weight = u64::from(original_weight(&info));
        assert!((250..1000).contains(&weight), "{weight}");
        for i in 0..50_000u32 {
            cache.insert(ContentHash::of(&i.to_le_bytes()), info.clone());
        }
        cache.run_pending_tasks();
        assert!(cache.weighted_size() <= bound, "{}", cache.weighted_size());
        assert!(
            cache.entry_count() <= bound / weight,
            "{}",
            cache.entry_count()
        );
        assert!(
            cache.entry_count() > bound / weight / 2,
            "{}",
            cache.entry_count()
        );
    }

    #[test]
    fn clearing_forgets_every_key_and_every_read_under_way() {
        let memory = memory();
        memory.fill("a".to_string(), 1, memory.ticket("a"));
        let ticket = memory.ticket("b");
        memory.clear();
        memory.fill("b".to_string(), 2, ticket);
        assert_eq!(memory.get("a"), None);
        assert_eq!(memory.get("b"), None);
    }
}

//! The three persistent maps behind one interface, [`MapStore`] (composed of a trait per
//! role): the URL map (source URL →
//! hash and validators), the originals index (hash → what the original is) and the variants
//! (hash + canonical spec + processor version → a processed image's row, or the cached error).
//!
//! The pipeline sees only this trait and the types here; each backend lives in a folder of its
//! own and owns its encoding: `redb/` (one file under the data dir, the embedded default) and
//! `postgres/` (one database shared by many nodes, `maps.url`). Each implements [`MapStore`],
//! passes `tests/it/maps_contract.rs`, and is chosen in [`open`] by `config::MapsBackend`.
//! Backends keep no memory of their rows: [`open_backend`] wraps every one in
//! [`Cached`] (`cache.rs`), the one memory of URL and originals entries.
//!
//! A variant's row is kept apart from where its bytes live ([`VariantBody`]): the embedded
//! backend keeps them in its file (with the row, or in page-sized pieces beside it for large
//! images) and hands them back with the row; the shared backend keeps only their length, and
//! the pipeline writes and reads the bytes in the blob store
//! ([`Variants::holds_variant_bytes`]).
//!
//! Takedowns too: every backend keeps the takedown list, a purge generation that removals
//! move forward (nodes sharing the maps follow it), an index of the URL entries by the hashes
//! they name, and each original's facts (placeholders, frames) with its index entry.
//!
//! Bounded growth is a duty of every backend: each counts the bytes its variants hold and
//! keeps their order of last use, so the pipeline can hold them to a budget by evicting the
//! least recently served; each keeps when a URL entry was last used, so entries nobody asks
//! for are forgotten, and counts what the URL map holds ([`url_row_bytes`]), so it too is held
//! to a budget, least recently used first. Use is recorded coarsely by the caller (batched, at most once per key
//! per interval), never as a write per hit.

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use imgcas_processors::Fingerprint;
use imgcas_processors::{Chosen, OutputFormat, ProcessFailure, SourceFormat};

use crate::hash::ContentHash;

mod blocklist;
pub mod cache;
mod claims;
mod fingerprints;
pub mod format_by_name;
pub mod near;
mod open;
pub mod pages;
pub mod postgres;
pub mod quotas;
pub mod redb;
mod totals;
mod walk_log;

pub use self::blocklist::{BlockEntry, Blocklist};
pub use self::cache::Cached;
pub use self::claims::{Claim, ClaimOutcome, Claims};
pub use self::fingerprints::{Fingerprinted, Fingerprints, NearFound, NearMatch, NEAR_READ_CAP};
pub use self::open::{open, open_backend, OpenOptions};
pub use self::pages::{FingerprintPages, OriginalPages, UrlPages, VariantKeyPages};
pub use self::postgres::{PostgresMaps, PostgresStore};
pub use self::quotas::{
    Bucket, HeldFailure, MemoryQuotas, OriginSlot, OriginTurn, Quotas, SlotTake, Take,
};
pub use self::redb::{RedbMaps, RedbStore};
pub use self::totals::{StoreReading, StoreTotals};
pub use self::walk_log::{WalkLog, WalkPosition};

/// Rows a walk over a map reads per page ([`UrlMap::urls_page`] and its kin): memory and a
/// statement's work bounded, whatever the store holds.
pub const WALK_PAGE: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{0}")]
    Store(String),
    #[error("corrupt entry: {0}")]
    Corrupt(String),
    /// A write under a claim found the claim gone or taken over: nothing was written.
    #[error("claim lost: {0}")]
    ClaimLost(String),
}

/// Milliseconds since the Unix epoch: the time stamps the maps keep.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the URL map holds for one canonical source URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlEntry {
    pub hash: ContentHash,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    /// When the origin last confirmed or served the content, ms since the epoch.
    pub checked_at_ms: u64,
    /// When a request last used the entry, as recorded (coarsely) by the pipeline; 0 in
    /// entries written before the field existed.
    #[serde(default)]
    pub requested_at_ms: u64,
    /// Canonical mode: the original whose pixels serve this URL, when its bytes (`hash`,
    /// kept for revalidation) were a near-duplicate of it and were not stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical: Option<ContentHash>,
}

impl UrlEntry {
    /// The original the URL is served from: its canonical original, or its own bytes.
    pub fn serving(&self) -> ContentHash {
        self.canonical.unwrap_or(self.hash)
    }

    /// The entry's last use: a request, or the check a request caused.
    pub fn last_used_ms(&self) -> u64 {
        self.checked_at_ms.max(self.requested_at_ms)
    }
}

/// What one URL entry counts for in the URL map's byte budget (`limits.urls_max_bytes`): its
/// URL twice (key and index by hash), its validators, and 160 bytes for the hashes, stamps
/// and the store's own overhead. Both backends count the same.
pub fn url_row_bytes(url: &str, entry: &UrlEntry) -> u64 {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    (2 * url.len() + text(&entry.etag) + text(&entry.last_modified) + 160) as u64
}

/// What the originals index holds for one hash (the bytes live in the blob store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalInfo {
    /// The sniffed format; `None` when the bytes are no image imgcas knows. Typed from the
    /// download to the run; stored by its name (`jpeg`, …), as it always was.
    #[serde(with = "format_by_name")]
    pub format: Option<SourceFormat>,
    /// Stored dimensions from the header (before EXIF orientation), when readable.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// Width and height once orientation (EXIF, AVIF's rotation and crop) is applied, from
    /// the header, when readable; `None` in entries written before the index kept it (a
    /// variant's routing then reads the original's header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upright: Option<(u32, u32)>,
    pub has_alpha: bool,
    pub bytes: u64,
    pub first_seen_ms: u64,
    /// What its pixels tell, computed once (in the background after the original is
    /// stored, or by the backfill for originals stored before); `None` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<OriginalFacts>,
    /// The focal point set for it (`PUT /v1/originals/{hash}/focus`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<Focus>,
}

/// Where an original's subject is, as set once for it: the point its `cover` and `crop`
/// windows centre on unless a request says otherwise, and the region it was given as (if
/// it was), in ten-thousandths of the oriented source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Focus {
    pub x: u16,
    pub y: u16,
    /// `[left, top, width, height]`, when set as a region (its middle is the point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<[u16; 4]>,
}

/// Facts computed once from an original's pixels ([`imgcas_processors::facts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalFacts {
    /// The [`imgcas_processors::FACTS_VERSION`] they were computed with: others count as
    /// absent, and are computed again.
    pub version: u32,
    /// `None`: the bytes decode to no picture (nothing to compute, nor to compute again).
    pub picture: Option<PictureFacts>,
}

/// Placeholders and frame facts of a picture, as the API shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PictureFacts {
    /// BlurHash, 4 × 3 components.
    pub blurhash: String,
    /// ThumbHash, base64.
    pub thumbhash: String,
    /// `#rrggbb`.
    pub dominant_color: String,
    pub has_alpha: bool,
    pub frames: u32,
    /// One play of an animation in milliseconds (0 for a still; absent from facts kept before
    /// facts version 4, which are computed again).
    #[serde(default)]
    pub duration_ms: u64,
}

impl OriginalInfo {
    /// Its facts, if computed by this release's [`imgcas_processors::FACTS_VERSION`].
    pub fn current_facts(&self) -> Option<&OriginalFacts> {
        self.facts
            .as_ref()
            .filter(|f| f.version == imgcas_processors::FACTS_VERSION)
    }
}

/// The identity of one variant. Its bytes are the variants key; hashing them gives the ETag.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VariantKey {
    pub hash: ContentHash,
    pub canonical_spec: String,
    pub processor_version: u32,
}

impl VariantKey {
    /// `hash ‖ version (u32 BE) ‖ canonical spec`: the hash first, so one original's variants
    /// sit together.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.canonical_spec.len());
        out.extend_from_slice(self.hash.as_bytes());
        out.extend_from_slice(&self.processor_version.to_be_bytes());
        out.extend_from_slice(self.canonical_spec.as_bytes());
        out
    }

    /// The inverse of [`VariantKey::to_bytes`]; `None` for bytes no key encodes to.
    pub fn from_bytes(raw: &[u8]) -> Option<VariantKey> {
        let hash = ContentHash::from_slice(raw.get(..32)?)?;
        let version: [u8; 4] = raw.get(32..36)?.try_into().ok()?;
        let spec = std::str::from_utf8(raw.get(36..)?).ok()?;
        Some(VariantKey {
            hash,
            canonical_spec: spec.to_string(),
            processor_version: u32::from_be_bytes(version),
        })
    }
}

/// Where a stored image's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantBody {
    /// In the row itself (the embedded backend: one read serves a hit).
    Inline(Bytes),
    /// In the blob store, under the variant's object name, `len` bytes long (the shared
    /// backend: every node reads them from the bucket they all use).
    InBlobStore { len: u64 },
}

/// One variants row: a processed image (its facts, and where its bytes are), or the permanent
/// error processing gave, cached like a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VariantRow {
    Image {
        format: OutputFormat,
        width: u32,
        height: u32,
        /// For `q=auto`: the encoder quality its search chose and the score reached.
        chosen: Option<Chosen>,
        body: VariantBody,
    },
    Failed {
        kind: ProcessFailure,
        message: String,
    },
}

impl VariantRow {
    /// The bytes of its image, or of its error message.
    pub fn body_len(&self) -> usize {
        match self {
            VariantRow::Image {
                body: VariantBody::Inline(bytes),
                ..
            } => bytes.len(),
            VariantRow::Image {
                body: VariantBody::InBlobStore { len },
                ..
            } => usize::try_from(*len).unwrap_or(usize::MAX),
            VariantRow::Failed { message, .. } => message.len(),
        }
    }
}

/// What the variants map holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct VariantTotals {
    pub images: u64,
    /// Encoded size, as stored (a few bytes of header per image included).
    pub image_bytes: u64,
    pub errors: u64,
}

/// What a write saw of the takedown list, for the check the pipeline makes right after it
/// (content written while being taken down is removed again): `Some(listed)` where the
/// store read the list in the write's own statement (a shared store does, sparing the check
/// its round trip), `None` where it did not, and the pipeline asks.
pub type ListedAtWrite = Option<bool>;

/// What [`Originals::record_download`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The original was new to the index.
    pub new_original: bool,
    pub listed: ListedAtWrite,
}

/// What [`Variants::evict_variants`] dropped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The variants dropped, least recently served first.
    pub keys: Vec<VariantKey>,
    /// The bytes the variants hold now, as [`Variants::variant_bytes`] counts them.
    pub remaining_bytes: u64,
}

/// The maps' operations, as the pipeline and the maintenance commands use them: one trait per
/// role ([`UrlMap`], [`Originals`], [`Fingerprints`], [`Variants`], [`Takedowns`],
/// [`Blocklist`], [`Claims`], [`Quotas`], [`WalkLog`]),
/// each implemented by a backend in a file of its own, and this one for the store as a
/// whole (durability, space, readiness). Code holding a `dyn MapStore` calls every role's
/// methods; code holding a backend's own type imports the roles it uses.
///
/// Writes follow the pipeline's order (blob first, then the entry that points at it). Writes
/// need not be durable when they return, except where a method says so: [`MapStore::flush`]
/// is the durability point for the rest (the app calls it every second and at shutdown).
#[async_trait]
pub trait MapStore:
    UrlMap
    + Originals
    + Fingerprints
    + Variants
    + Takedowns
    + Blocklist
    + Claims
    + Quotas
    + WalkLog
    + Send
    + Sync
    + 'static
{
    /// Drops what the store keeps in memory of entries another process may have removed
    /// (called when the purge generation moves).
    fn drop_memory(&self) {}

    /// Round trips to a networked store by map operation, since it opened (none for a
    /// store in this process).
    fn round_trips(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Makes every write so far durable.
    async fn flush(&self) -> Result<(), MapError>;

    /// Hands the space of dropped entries back to the file system, where the backend keeps
    /// any (a redb file reuses it but never shrinks by itself). Needs the store to itself:
    /// `imgcas gc` runs it with the server stopped. Returns whether anything was done.
    async fn compact(&self) -> Result<bool, MapError>;

    /// Readiness: the store answers a read.
    async fn check(&self) -> Result<(), MapError>;

    /// What the URL map points at against what is stored (the operator's savings figures:
    /// `GET /admin`, `imgcas stats`), as every backend keeps it with the writes it counts
    /// (issue 69): a read of a handful of numbers, whatever the store holds.
    async fn totals(&self) -> Result<StoreTotals, MapError>;

    /// [`MapStore::totals`] counted afresh from the entries (`imgcas verify --totals`, which
    /// proves the kept ones exact): by default a walk of every URL entry and original, a
    /// page at a time (`totals.rs`); one statement on PostgreSQL.
    async fn recount_totals(&self) -> Result<StoreTotals, MapError> {
        totals::walk(self).await
    }

    /// Whether `hash` is on the takedown list this instant, and its originals index entry:
    /// what bytes about to be stored are asked (one read where the store can).
    async fn listed_and_original(
        &self,
        hash: &ContentHash,
    ) -> Result<(bool, Option<OriginalInfo>), MapError> {
        Ok((self.is_taken_down(hash).await?, self.original(hash).await?))
    }
}

/// The URL map: canonical URL → the hash of its bytes and the origin's validators, its index
/// by hash, and the use stamps and byte count that hold it to its budget.
#[async_trait]
pub trait UrlMap: Send + Sync {
    /// The URL map entry of a canonical URL.
    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError>;

    /// [`UrlMap::url`] as the store holds it this instant, past any memory a shared
    /// store keeps of it (a node waiting for another's download polls this).
    async fn url_now(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        self.url(url).await
    }

    /// [`UrlMap::url_now`] and, where the store can read both at once, the originals index
    /// entry of the hash the URL is served from (`None` when it has none, or the store
    /// reads only the URL entry here).
    async fn url_with_original(
        &self,
        url: &str,
    ) -> Result<(Option<UrlEntry>, Option<OriginalInfo>), MapError> {
        Ok((self.url_now(url).await?, None))
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError>;

    /// Drops a URL's entry: it is downloaded afresh on its next request.
    async fn remove_url(&self, url: &str) -> Result<(), MapError>;

    /// Up to `limit` URL entries after the URL `after` (from the first when `None`), in the
    /// backend's own key order: one page of a walk (`verify`, the totals, copies). A walk
    /// resumes from the last URL of a page; entries written or removed meanwhile may or may
    /// not be seen, every other entry is seen exactly once.
    async fn urls_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UrlEntry)>, MapError>;

    /// The URL entries whose bytes hash to `hash` or that are served from it (canonical
    /// mode): the hash → URLs index, which every backend keeps with its URL map (and builds
    /// for URLs written before it existed) so that a takedown finds them without a scan.
    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError>;

    /// Records when URLs were last requested (ms since the epoch; the caller batches). A
    /// stamp only moves forward; URLs without an entry are skipped.
    async fn mark_urls_requested(&self, requested: &[(String, u64)]) -> Result<(), MapError>;

    /// Drops the URL entries whose last use ([`UrlEntry::last_used_ms`]) is before
    /// `unused_since_ms`; returns how many.
    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError>;

    /// The bytes the URL map counts: each entry's URL twice (the entry's key and its index
    /// by hash), its validators and a fixed cost for the rest ([`url_row_bytes`]).
    async fn url_bytes(&self) -> Result<u64, MapError>;

    /// Drops the least recently used URL entries ([`UrlEntry::last_used_ms`]) until the URL
    /// map counts at most `target_bytes`; returns how many were dropped.
    async fn evict_urls(&self, target_bytes: u64) -> Result<u64, MapError>;
}

/// The originals index: hash → format, size, dimensions, first sighting and facts.
#[async_trait]
pub trait Originals: Send + Sync {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError>;

    /// Indexes an original unless it is indexed already (the first sighting wins), durably
    /// before returning: an upload is acknowledged right after. Returns whether it inserted.
    async fn add_original(&self, hash: &ContentHash, info: &OriginalInfo)
        -> Result<bool, MapError>;

    /// A download, atomically: the original's index entry (if new) and the URL pointing at
    /// it, giving up the download's `claim` (when one is held) in the same write, so that
    /// no node sees the claim free before the entry is there (a store whose claims are
    /// shared leaves it as a tombstone for a moment). Returns whether the original was new
    /// to the index, and what the write saw of the takedown list.
    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
        claim: Option<&Claim>,
    ) -> Result<Recorded, MapError>;

    /// Stores an indexed original's facts, replacing any (nothing for an unindexed hash).
    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError>;

    /// Sets (or with `None` clears) an indexed original's focal point, durably. Returns
    /// whether the hash is indexed (nothing is written for one that is not).
    async fn put_focus(&self, hash: &ContentHash, focus: Option<&Focus>) -> Result<bool, MapError>;

    /// Drops an original's index entry, durably (`verify --repair`).
    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError>;

    /// Up to `limit` indexed originals with a hash above `after`, in hash order: one page of
    /// a walk (`verify`, `gc`, the totals, copies).
    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError>;

    /// Up to `limit` indexed originals whose facts are not of `version` (none yet, or
    /// another version's), each with the version it has (0: none), in (version, hash) order
    /// after `after`: the facts backfill's cursor. Indexed by facts version on every backend,
    /// so a store whose facts are all current answers at once, whatever its size.
    async fn lacking_facts(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError>;
}

/// Where an original stands in an index by the version of what is computed from it
/// ([`Originals::lacking_facts`], [`Fingerprints::lacking_fingerprints`]): that version (0:
/// none computed) and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VersionCursor {
    pub version: u32,
    pub hash: ContentHash,
}

impl OriginalInfo {
    /// The facts version [`Originals::lacking_facts`] indexes it by (0: none).
    pub fn facts_version(&self) -> u32 {
        self.facts.as_ref().map_or(0, |f| f.version)
    }
}

/// The variants: hash + canonical spec + processor version → the processed bytes or the
/// error, with the use stamps and byte count that hold them to `limits.variants_max_bytes`.
#[async_trait]
pub trait Variants: Send + Sync {
    /// Whether variant rows hold their image bytes ([`VariantBody::Inline`]); if not, the
    /// caller stores them in the blob store first and hands over a row that names them
    /// ([`VariantBody::InBlobStore`]).
    fn holds_variant_bytes(&self) -> bool {
        true
    }

    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError>;

    /// Stores a result (a lost one is recomputed, never wrong), counted in
    /// [`Variants::variant_bytes`] and stamped as served now.
    async fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> Result<(), MapError>;

    /// Records when variants were last served (ms since the epoch; the caller batches).
    /// A stamp only moves forward; keys no longer stored are skipped.
    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError>;

    /// The bytes the variants hold (keys and rows, results and cached errors alike): what
    /// the budget `limits.variants_max_bytes` limits. Variants stored before the store
    /// counted them are counted from its first open.
    async fn variant_bytes(&self) -> Result<u64, MapError>;

    /// Drops the least recently served variants until they hold at most `target_bytes`.
    async fn evict_variants(&self, target_bytes: u64) -> Result<Evicted, MapError>;

    /// Up to `limit` variant keys after `after`, in the backend's key order (one original's
    /// variants together, originals in hash order): one page of a walk.
    async fn variant_keys_page(
        &self,
        after: Option<&VariantKey>,
        limit: usize,
    ) -> Result<Vec<VariantKey>, MapError>;

    /// Drops these variants; returns how many were stored.
    async fn remove_variants(&self, keys: &[VariantKey]) -> Result<u64, MapError>;

    /// Every variant of one original (any processor version, its mezzanine too), each with
    /// the bytes it counts for against the budget ([`Variants::variant_bytes`]).
    async fn variants_of(&self, hash: &ContentHash) -> Result<Vec<(VariantKey, u64)>, MapError>;

    /// Stored images, their bytes, and cached errors (`imgcas stats`).
    async fn variant_totals(&self) -> Result<VariantTotals, MapError>;

    /// [`Variants::put_variant`], written only if `claim` is still held with its token, in
    /// the same write ([`MapError::ClaimLost`] otherwise): an owner that lost its claim
    /// never writes over a newer owner's result. The write gives the claim up (a store whose
    /// claims are shared leaves it as a tombstone for a moment). Returns what the write saw
    /// of the takedown list.
    async fn put_variant_claimed(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        _claim: &Claim,
    ) -> Result<ListedAtWrite, MapError> {
        self.put_variant(key, row).await.map(|()| None)
    }
}

/// Takedowns and the purge generation.
#[async_trait]
pub trait Takedowns: Send + Sync {
    // Takedowns: hashes that must not be served, stored or downloaded into the store, kept
    // durably; and the purge generation, a counter every removal an administrator asks for
    // moves forward, so that nodes sharing the maps drop what they hold in memory.

    /// Puts `hash` on the takedown list (stamped `at_ms`), durably before returning.
    /// Returns whether it was not listed before.
    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError>;

    /// Takes `hash` off the takedown list, durably; returns whether it was listed.
    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError>;

    /// Every listed hash, with when it was taken down.
    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError>;

    /// Whether `hash` is listed, as the store holds it this instant.
    async fn is_taken_down(&self, hash: &ContentHash) -> Result<bool, MapError>;

    /// The purge generation now.
    async fn purge_generation(&self) -> Result<u64, MapError>;

    /// Moves the purge generation forward, durably; returns the new one.
    async fn bump_purge_generation(&self) -> Result<u64, MapError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_keys_round_trip_through_bytes() {
        let key = VariantKey {
            hash: ContentHash::of(b"x"),
            canonical_spec: "format=webp&w=400".into(),
            processor_version: 7,
        };
        assert_eq!(VariantKey::from_bytes(&key.to_bytes()), Some(key));
        assert_eq!(VariantKey::from_bytes(&[0; 20]), None);
    }
}

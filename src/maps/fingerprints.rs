//! The `Fingerprints` role of the maps: one perceptual fingerprint per original, searchable
//! by Hamming radius (`near.rs`'s multi-index hashing), with the aliases canonical mode maps a
//! near-duplicate's hash to; and the types its searches answer with. Each backend implements
//! it in its own `fingerprints.rs`.

use async_trait::async_trait;

use super::{Fingerprint, ListedAtWrite, MapError, VersionCursor};
use crate::hash::ContentHash;

/// What the fingerprints hold for an original (computed with
/// [`imgcas_processors::FINGERPRINT_VERSION`]; older ones count as absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fingerprinted {
    Picture(Fingerprint),
    /// The bytes decode to no picture (not an image, or one imgcas cannot read): nothing to
    /// compare, and nothing to compute again.
    NotAPicture,
}

impl Fingerprinted {
    pub fn picture(&self) -> Option<&Fingerprint> {
        match self {
            Fingerprinted::Picture(fp) => Some(fp),
            Fingerprinted::NotAPicture => None,
        }
    }

    /// The 36-byte (or 4-byte) form both backends store: version ‖ fingerprint.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = imgcas_processors::FINGERPRINT_VERSION
            .to_be_bytes()
            .to_vec();
        if let Fingerprinted::Picture(fp) = self {
            out.extend_from_slice(&fp.to_bytes());
        }
        out
    }

    /// The inverse of [`Fingerprinted::to_bytes`]; `None` for another version's (or for
    /// bytes no fingerprint encodes to).
    pub fn from_bytes(raw: &[u8]) -> Option<Fingerprinted> {
        let version = u32::from_be_bytes(raw.get(..4)?.try_into().ok()?);
        if version != imgcas_processors::FINGERPRINT_VERSION {
            return None;
        }
        match raw.len() {
            4 => Some(Fingerprinted::NotAPicture),
            _ => Fingerprint::from_bytes(&raw[4..]).map(Fingerprinted::Picture),
        }
    }
}

/// An original found near a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearMatch {
    pub hash: ContentHash,
    pub fingerprint: Fingerprint,
    /// Hamming distance of the DCT hashes.
    pub distance: u32,
}

/// What [`Fingerprints::near_closest`] found: the closest originals, and whether the search
/// was cut short by its cap on candidates read (then closer ones may exist).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NearFound {
    pub matches: Vec<NearMatch>,
    pub partial: bool,
}

/// Candidates a near-duplicate search reads at most on a request's path (an upload's report,
/// canonical mode's decision, `similar` and `info`): its work stays flat however many stored
/// originals look alike.
pub const NEAR_READ_CAP: usize = 20_000;

/// Near-duplicates: one fingerprint per original, searchable by Hamming radius (`near.rs`),
/// and the aliases canonical mode maps a near-duplicate's hash to.
#[async_trait]
pub trait Fingerprints: Send + Sync {
    // Near-duplicates: one fingerprint per original, searchable by Hamming radius
    // (`near.rs`), and the aliases canonical mode maps a near-duplicate's hash to.

    /// An original's fingerprint; `None` until computed (or computed by an older version).
    async fn fingerprint(&self, hash: &ContentHash) -> Result<Option<Fingerprinted>, MapError>;

    /// Stores an original's fingerprint, replacing any; searchable when this returns.
    /// Returns what the write saw of the takedown list.
    async fn put_fingerprint(
        &self,
        hash: &ContentHash,
        fingerprint: &Fingerprinted,
    ) -> Result<ListedAtWrite, MapError>;

    /// The originals whose DCT hash is within `radius` bits of `phash`, closest first.
    async fn near(&self, phash: u64, radius: u32) -> Result<Vec<NearMatch>, MapError> {
        // Every candidate: the search without its caps.
        let found = self
            .near_closest(phash, radius, usize::MAX, usize::MAX)
            .await?;
        Ok(found.matches)
    }

    /// [`Fingerprints::near`], the `limit` closest only (by distance, then hash), reading at
    /// most `read_cap` candidates: for a lookup that keeps the best of them, in work bounded
    /// however many originals look alike (100,000 uploads of near-identical pictures made
    /// each upload's report read every earlier one: memory and time grew with the uploads).
    /// [`NearFound::partial`] says when the cap cut the search short; a search that finds
    /// `limit` originals at distance 0 may stop early, exact (none can be closer).
    async fn near_closest(
        &self,
        phash: u64,
        radius: u32,
        limit: usize,
        read_cap: usize,
    ) -> Result<NearFound, MapError>;

    /// Up to `limit` indexed originals whose fingerprint is not of `version` (none yet, or
    /// another version's), each with the version it has (0: none), in (version, hash) order
    /// after `after`: the fingerprint backfill's cursor. Indexed by version like
    /// [`Originals::lacking_facts`]: a store whose fingerprints are current answers at once.
    async fn lacking_fingerprints(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError>;

    /// Up to `limit` current fingerprints of pictures with a hash above `after`, in hash
    /// order (`imgcas stats`' clusters read them page by page).
    async fn fingerprints_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, Fingerprint)>, MapError>;

    /// The canonical original a near-duplicate's own hash stands for (canonical mode).
    async fn alias(&self, hash: &ContentHash) -> Result<Option<ContentHash>, MapError>;

    /// Records that the bytes hashing to `own` are served from `canonical`; replaces any.
    async fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> Result<(), MapError>;

    /// Drops the aliases that name `hash`, as a near-duplicate's own hash or as the canonical
    /// original; returns how many.
    async fn remove_aliases(&self, hash: &ContentHash) -> Result<u64, MapError>;
}

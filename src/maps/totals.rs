//! The store's totals for the operator's savings figures (`GET /admin`, `imgcas stats`): what
//! the URL map points at against what is stored, and what exact and near-duplicate
//! deduplication saved. Every backend keeps them as it writes (`MapStore::totals`); [`walk`]
//! counts them afresh from any backend's entries, a page at a time, for the recount that
//! proves them (`MapStore::recount_totals`, `imgcas verify --totals`; PostgreSQL recounts in
//! one statement of its own, `postgres/mod.rs`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{MapError, MapStore, OriginalPages, UrlPages};
use crate::hash::ContentHash;

/// What the URL map points at against what is stored ([`MapStore::totals`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreTotals {
    /// Originals stored, and their bytes.
    pub originals: u64,
    pub original_bytes: u64,
    /// URL entries.
    pub urls: u64,
    /// The bytes the URL entries point at: each entry counts its served original's bytes.
    pub pointed_bytes: u64,
    /// Bytes not stored because several URLs have the same bytes: each original's bytes
    /// once per URL of its own bytes beyond the first.
    pub exact_saved_bytes: u64,
    /// URL entries served from another original as its near-duplicate (canonical mode),
    /// and the bytes not stored for them, counted at the size of the original serving them
    /// (their own bytes were never kept to be measured).
    pub near_urls: u64,
    pub near_saved_bytes: u64,
}

/// The maps' totals and the URL map's bytes (its budget's measure), read at one time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreReading {
    pub totals: StoreTotals,
    pub url_bytes: u64,
    /// When they were read, ms since the epoch.
    pub read_at_ms: u64,
}

impl StoreTotals {
    /// Counts an original of `bytes` served to `exact` URLs of its own bytes and `near`
    /// URLs of near-duplicate bytes.
    fn add_pointed(&mut self, bytes: u64, exact: u64, near: u64) {
        self.pointed_bytes += bytes.saturating_mul(exact + near);
        self.exact_saved_bytes += bytes.saturating_mul(exact.saturating_sub(1));
        self.near_urls += near;
        self.near_saved_bytes += bytes.saturating_mul(near);
    }
}

/// [`MapStore::totals`] by reading every URL entry and every original, a page at a time.
pub(super) async fn walk<M: MapStore + ?Sized>(maps: &M) -> Result<StoreTotals, MapError> {
    let mut totals = StoreTotals::default();
    // Per original served: the URLs with its own bytes, and those mapped to it as a
    // near-duplicate (canonical mode).
    let mut pointed: HashMap<ContentHash, (u64, u64)> = HashMap::new();
    let mut urls = UrlPages::new(maps);
    while let Some(page) = urls.next().await? {
        for (_, entry) in &page {
            totals.urls += 1;
            let counts = pointed.entry(entry.serving()).or_default();
            match entry.canonical.is_some() {
                true => counts.1 += 1,
                false => counts.0 += 1,
            }
        }
    }
    let mut originals = OriginalPages::new(maps);
    while let Some(page) = originals.next().await? {
        for (hash, info) in page {
            totals.originals += 1;
            totals.original_bytes += info.bytes;
            let (exact, near) = pointed.get(&hash).copied().unwrap_or_default();
            totals.add_pointed(info.bytes, exact, near);
        }
    }
    Ok(totals)
}

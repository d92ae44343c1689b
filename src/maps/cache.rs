//! The maps' memory caches, built here for every backend alike: originals entries by hash
//! (recently read or written, bounded by count), and URL entries (bounded by the bytes they
//! hold, since URLs may be kilobytes long). Each backend decides when to fill and forget
//! them, as its own consistency rules say (redb under its write lock, PostgreSQL on a
//! freshness window); what they hold and how much is decided once, here.

use std::time::Duration;

use crate::hash::ContentHash;

use super::{MapError, OriginalInfo, UrlEntry};

/// Originals entries kept in memory, per backend.
const RECENT_ORIGINALS: u64 = 100_000;

/// A cache of originals entries by hash, bounded by [`RECENT_ORIGINALS`].
pub(crate) fn recent_originals() -> moka::sync::Cache<ContentHash, OriginalInfo> {
    moka::sync::Cache::new(RECENT_ORIGINALS)
}

/// The entry of `hash`: from `cache`, or read by `read` and kept there when found. Every
/// backend's `Originals::original` is this over its own read.
pub(crate) async fn original_through<F>(
    cache: &moka::sync::Cache<ContentHash, OriginalInfo>,
    hash: &ContentHash,
    read: F,
) -> Result<Option<OriginalInfo>, MapError>
where
    F: std::future::Future<Output = Result<Option<OriginalInfo>, MapError>>,
{
    if let Some(info) = cache.get(hash) {
        return Ok(Some(info));
    }
    let info = read.await?;
    if let Some(info) = &info {
        cache.insert(*hash, info.clone());
    }
    Ok(info)
}

/// Bytes the in-memory copies of URL entries may hold, per cache. URLs may be kilobytes
/// long, so these caches are bounded by what they hold, not by how many entries (issue 28:
/// a cap of 100,000 entries let 60 KB URLs take gigabytes).
const URL_CACHE_BYTES: u64 = 32 << 20;

/// A cache of URL entries (or of their absence) bounded by [`URL_CACHE_BYTES`], counting the
/// URL, the entry's strings and a fixed cost for the rest, with an optional time to live.
pub(crate) fn url_entry_cache<V>(time_to_live: Option<Duration>) -> moka::sync::Cache<String, V>
where
    V: UrlCached + Clone + Send + Sync + 'static,
{
    let builder = moka::sync::Cache::builder()
        .max_capacity(URL_CACHE_BYTES)
        .weigher(|url: &String, value: &V| {
            u32::try_from(url.len() + value.held_bytes()).unwrap_or(u32::MAX)
        });
    match time_to_live {
        Some(ttl) => builder.time_to_live(ttl).build(),
        None => builder.build(),
    }
}

/// What a URL cache's value holds in memory, about (its strings, plus a fixed cost for the
/// rest and the cache's own bookkeeping).
pub(crate) trait UrlCached {
    fn held_bytes(&self) -> usize;
}

impl UrlCached for UrlEntry {
    fn held_bytes(&self) -> usize {
        let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        160 + text(&self.etag) + text(&self.last_modified)
    }
}

impl UrlCached for Option<UrlEntry> {
    fn held_bytes(&self) -> usize {
        self.as_ref().map_or(64, UrlCached::held_bytes)
    }
}

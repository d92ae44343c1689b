//! The request cache: what a repeated request resolved to, so that a hit skips the work of
//! finding its variant again (spec parsing, URL canonicalisation, the URL map and the
//! originals index). Keyed by what the HTTP layer says identifies a request (its path, whole
//! query with `sig`, and `Accept` class); the HTTP layer reads it only after the checks a
//! request must pass every time (signature, admin token).
//!
//! An entry lives while its source URL's mapping is fresh (a hash needs no freshness), and
//! every entry ends at once when anything it may point at changes on this node: a URL mapped
//! to other bytes, a URL forgotten, an original deleted. That is one epoch counter bumped by
//! those writes, rather than a search for the entries concerned: they are rare, the cache
//! refills at the speed of the hits themselves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use super::Target;
use super::{Pipeline, UrlState};
use crate::maps::now_ms;

/// Memory for remembered requests: a few hundred bytes each.
const CAPACITY_BYTES: u64 = 32 << 20;

/// An entry unused this long goes, whatever its freshness.
const IDLE: Duration = Duration::from_secs(600);

pub(super) struct RequestCache {
    entries: Cache<Vec<u8>, Arc<Remembered>>,
    /// Bumped by every change that may leave an entry pointing at the wrong variant.
    epoch: AtomicU64,
}

struct Remembered {
    target: Arc<Target>,
    epoch: u64,
    /// Past this, the source URL must be looked up again (its mapping is no longer fresh).
    until_ms: Option<u64>,
}

impl Default for RequestCache {
    fn default() -> Self {
        RequestCache {
            entries: Cache::builder()
                .max_capacity(CAPACITY_BYTES)
                .weigher(|key: &Vec<u8>, value: &Arc<Remembered>| {
                    let t = &value.target;
                    let size = key.len()
                        + t.key.canonical_spec.len()
                        + t.url.as_deref().map_or(0, str::len)
                        + 384;
                    u32::try_from(size).unwrap_or(u32::MAX)
                })
                .time_to_idle(IDLE)
                .build(),
            epoch: AtomicU64::new(0),
        }
    }
}

impl Pipeline {
    /// The variant a request identified by `request` resolved to before, if that still holds.
    pub fn recall(&self, request: &[u8]) -> Option<Arc<Target>> {
        let cache = &self.shared.requests;
        let entry = cache.entries.get(request)?;
        let current = cache.epoch.load(Ordering::Acquire) == entry.epoch;
        if !current || entry.until_ms.is_some_and(|until| now_ms() >= until) {
            cache.entries.invalidate(request);
            return None;
        }
        if let Some(url) = &entry.target.url {
            // The URL is in use: the sweep that forgets unused URLs must see that.
            self.note_url_requested(url);
        }
        Some(entry.target.clone())
    }

    /// Remembers what `request` resolved to, while that holds: a URL's mapping while it is
    /// fresh; a hash always. A mapping used because its origin failed is not remembered.
    pub fn remember(&self, request: &[u8], target: &Target) {
        let until_ms =
            match target.url_state {
                None => None,
                Some(UrlState::Stale) => return,
                Some(_) => match target.checked_at_ms {
                    Some(checked) => Some(checked.saturating_add(
                        self.shared.config.fetch.revalidate_after.as_millis() as u64,
                    )),
                    None => return,
                },
            };
        let cache = &self.shared.requests;
        let remembered = Remembered {
            target: Arc::new(Target {
                // Later requests find the mapping fresh, whatever this one did to it.
                url_state: target.url_state.map(|_| UrlState::Fresh),
                ..target.clone()
            }),
            epoch: target.epoch,
            until_ms,
        };
        cache.entries.insert(request.to_vec(), Arc::new(remembered));
    }

    /// The epoch a target located from now on belongs to.
    pub(super) fn request_epoch(&self) -> u64 {
        self.shared.requests.epoch.load(Ordering::Acquire)
    }

    /// Ends every remembered request: something one of them may point at has changed.
    pub(super) fn forget_requests(&self) {
        self.shared.requests.epoch.fetch_add(1, Ordering::AcqRel);
    }
}

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
//!
//! A hit answered from memory (`http/front.rs`) costs this cache one lookup and nothing
//! else: an entry keeps a weak link to its variant's row in the hot cache (no second lookup;
//! the link holds no bytes and lapses when the hot cache lets the row go; once a second a hit
//! reads through the hot cache anyway, so that its eviction order sees the use), a memo of what the
//! layer above derives from the target once (the HTTP layer's headers), and notes the uses
//! the upkeep must see at most once per `remembered_note_every_ms` instead of per hit.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use imgcas_processors::{Chosen, OutputFormat};
use moka::sync::Cache;

use crate::maps::{now_ms, VariantBody, VariantRow};
use crate::pipeline::Target;
use crate::pipeline::{Pipeline, UrlState};
use crate::stats::Stats;

/// Memory for remembered requests: a few hundred bytes each.
const CAPACITY_BYTES: u64 = 32 << 20;

/// An entry unused this long goes, whatever its freshness.
const IDLE: Duration = Duration::from_secs(600);

pub(in crate::pipeline) struct RequestCache {
    entries: Cache<Vec<u8>, Arc<Remembered>>,
    /// Bumped by every change that may leave an entry pointing at the wrong variant.
    epoch: AtomicU64,
}

struct Remembered {
    target: Arc<Target>,
    epoch: u64,
    /// Past this, the source URL must be looked up again (its mapping is no longer fresh).
    until_ms: Option<u64>,
    /// When this entry last noted the use of its URL and variant (0: never).
    noted_ms: AtomicU64,
    /// The variant's row in the hot cache, once found there.
    hot: OnceLock<Weak<VariantRow>>,
    /// When a hit last read the row through the hot cache (see [`TOUCH_EVERY_MS`]).
    touched_ms: AtomicU64,
    /// What the layer above derives from `target`, made once.
    memo: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Remembered {
    fn new(target: Arc<Target>, epoch: u64, until_ms: Option<u64>) -> Remembered {
        Remembered {
            target,
            epoch,
            until_ms,
            noted_ms: AtomicU64::new(0),
            hot: OnceLock::new(),
            touched_ms: AtomicU64::new(0),
            memo: OnceLock::new(),
        }
    }
}

/// A remembered request, as [`Pipeline::recall_entry`] finds it.
pub struct Recalled {
    entry: Arc<Remembered>,
    /// Whether this hit is the one to note its variant's use (its URL's is noted on recall).
    note: bool,
    /// When it was recalled (ms since the epoch).
    now_ms: u64,
}

/// How often a remembered hit answered through its weak link also reads its row through the
/// hot cache itself: the cache orders eviction by its own reads, and hits that never reach it
/// would make the most-served rows look unused.
const TOUCH_EVERY_MS: u64 = 1000;

impl Recalled {
    /// What `make` derives from the target, made by the first caller and kept with the entry
    /// (`None` if the entry holds a memo of another type).
    pub fn memo<T: Any + Send + Sync>(&self, make: impl FnOnce(&Target) -> T) -> Option<&T> {
        self.entry
            .memo
            .get_or_init(|| Box::new(make(&self.entry.target)))
            .downcast_ref()
    }

    /// The remembered target.
    pub fn target(&self) -> Arc<Target> {
        self.entry.target.clone()
    }
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
        // The routed path notes the variant's use itself, when it serves it.
        Some(self.recall_entry(request)?.entry.target.clone())
    }

    /// [`Pipeline::recall`] for an answer from memory ([`Pipeline::hot_answer`]).
    pub fn recall_entry(&self, request: &[u8]) -> Option<Recalled> {
        let cache = &self.shared.variants.requests;
        let entry = cache.entries.get(request)?;
        let current = cache.epoch.load(Ordering::Acquire) == entry.epoch;
        let now = now_ms();
        if !current || entry.until_ms.is_some_and(|until| now >= until) {
            cache.entries.invalidate(request);
            return None;
        }
        let every = self.remembered_note_every_ms();
        let noted = entry.noted_ms.load(Ordering::Relaxed);
        let note = now.saturating_sub(noted) >= every
            && entry
                .noted_ms
                .compare_exchange(noted, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if note {
            if let Some(url) = &entry.target.url {
                // The URL is in use: the sweep that forgets unused URLs must see that.
                self.note_url_requested(url);
            }
        }
        Some(Recalled {
            entry,
            note,
            now_ms: now,
        })
    }

    /// The image of a remembered request when the hot cache holds it (`None`: anything else,
    /// which [`Pipeline::variant`] then answers), counted and noted as that path counts and
    /// notes a hot hit, with what a `q=auto` search chose. `request` is the key it was
    /// recalled by.
    pub fn hot_answer(
        &self,
        recalled: &Recalled,
        request: &[u8],
    ) -> Option<(Bytes, OutputFormat, Option<Chosen>)> {
        let s = &self.shared;
        let entry = &recalled.entry;
        let touched = entry.touched_ms.load(Ordering::Relaxed);
        let touch = recalled.now_ms.saturating_sub(touched) >= TOUCH_EVERY_MS
            && entry
                .touched_ms
                .compare_exchange(
                    touched,
                    recalled.now_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        let linked = match touch {
            true => None,
            false => entry.hot.get().and_then(Weak::upgrade),
        };
        let row = match linked {
            Some(row) => row,
            None => {
                let row = s.variants.hot.get_shared(&entry.target.key)?;
                let current = entry
                    .hot
                    .get()
                    .is_some_and(|w| w.as_ptr() == Arc::as_ptr(&row));
                if !current && entry.hot.set(Arc::downgrade(&row)).is_err() {
                    // The link lapsed (the hot cache let the row go and took it back): a
                    // fresh entry carries the new one.
                    let relinked =
                        Remembered::new(entry.target.clone(), entry.epoch, entry.until_ms);
                    relinked
                        .noted_ms
                        .store(entry.noted_ms.load(Ordering::Relaxed), Ordering::Relaxed);
                    let _ = relinked.hot.set(Arc::downgrade(&row));
                    s.variants
                        .requests
                        .entries
                        .insert(request.to_vec(), Arc::new(relinked));
                }
                row
            }
        };
        let VariantRow::Image {
            format,
            chosen,
            body: VariantBody::Inline(bytes),
            ..
        } = &*row
        else {
            return None;
        };
        Stats::bump(&s.stats.hot_hits);
        if recalled.note {
            self.note_variant_served(&entry.target.key);
        }
        Some((bytes.clone(), *format, *chosen))
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
        let cache = &self.shared.variants.requests;
        let remembered = Remembered::new(
            Arc::new(Target {
                // Later requests find the mapping fresh, whatever this one did to it.
                url_state: target.url_state.map(|_| UrlState::Fresh),
                fetched_bytes: 0,
                ..target.clone()
            }),
            target.epoch,
            until_ms,
        );
        cache.entries.insert(request.to_vec(), Arc::new(remembered));
    }

    /// The epoch a target located from now on belongs to.
    pub(in crate::pipeline) fn request_epoch(&self) -> u64 {
        self.shared.variants.requests.epoch.load(Ordering::Acquire)
    }

    /// Ends every remembered request: something one of them may point at has changed.
    pub(in crate::pipeline) fn forget_requests(&self) {
        self.shared
            .variants
            .requests
            .epoch
            .fetch_add(1, Ordering::AcqRel);
    }
}

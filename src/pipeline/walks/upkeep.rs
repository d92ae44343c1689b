//! Keeping the maps bounded, so that looping over `w=1..8192` cannot fill the disk:
//!
//! - the variants (results and cached errors) stay within `limits.variants_max_bytes`: past
//!   it, the least recently served are evicted, down to nine tenths of it so one eviction makes
//!   room for many results; an evicted variant is simply made again when asked for;
//! - URL entries no request used for `fetch.forget_after` are forgotten, by a periodic sweep
//!   and by `imgcas gc`; the URL is downloaded afresh if it comes back;
//! - the URL map stays within `limits.urls_max_bytes`: past it, the least recently used
//!   entries are dropped, down to nine tenths of it (after every new entry on the embedded
//!   maps, at each sweep on shared ones).
//!
//! Use is recorded coarsely. The first use of a key within its grain (an hour for variants;
//! for URLs an hour, or an eighth of `forget_after` when that is shorter) is queued in
//! memory, and the queue is written as one batch by the once-a-second upkeep: a hit costs a
//! lookup in memory, never a write. Writes of new results and downloads stamp themselves.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::config::Config;
use crate::error::Error;
use crate::maps::{now_ms, VariantKey, VariantRow};
use crate::pipeline::Pipeline;
use crate::stats::Stats;

/// A variant's use is recorded at most once per this long.
const VARIANT_GRAIN: Duration = Duration::from_secs(3600);
/// Keys remembered as recently recorded, each kind (beyond it, a key may be recorded twice
/// in a grain: harmless).
const NOTED_KEYS: u64 = 1_000_000;
/// Uses queued between two upkeeps, each kind; more are dropped (the next grain records
/// them again).
const QUEUE_LIMIT: usize = 100_000;
/// The URLs' share of the same: URLs may be kilobytes long, so they are bounded in bytes, as
/// are the URLs remembered as recorded (issue 28).
const QUEUE_URL_BYTES: usize = 16 << 20;
const NOTED_URL_BYTES: u64 = 32 << 20;

/// Use records waiting for the next upkeep.
#[derive(Default)]
struct Queued {
    variants: Vec<(VariantKey, u64)>,
    urls: Vec<(String, u64)>,
    /// The bytes of the URLs in `urls`.
    url_bytes: usize,
}

/// The bookkeeping of bounded growth, owned by the pipeline.
pub(in crate::pipeline) struct Upkeep {
    variants_noted: Cache<VariantKey, ()>,
    urls_noted: Cache<String, ()>,
    queued: Mutex<Queued>,
    /// The variants' bytes as last read from the maps, plus what was stored since: whether
    /// a store pushed them over the budget is known without a read.
    variant_bytes: AtomicU64,
    /// One eviction at a time; others find the room made.
    evicting: tokio::sync::Mutex<()>,
    /// A store went over the budget while an eviction ran: the running one goes round again
    /// (it may have read the total before that store, and nothing else would look again).
    eviction_wanted: AtomicBool,
    /// The same, for URL entries.
    evicting_urls: tokio::sync::Mutex<()>,
    variants_max_bytes: u64,
    urls_max_bytes: u64,
    forget_after: Duration,
    sweep_every: Duration,
    next_sweep: Mutex<Instant>,
    /// How often a remembered request notes its uses (`recall.rs`): well within the shorter
    /// grain, so no use is missed, and rarely enough to cost nothing per hit.
    remembered_note_every_ms: u64,
}

impl Upkeep {
    pub(in crate::pipeline) fn new(config: &Config) -> Upkeep {
        let forget_after = config.fetch.forget_after;
        let url_grain = (forget_after / 8).min(VARIANT_GRAIN);
        let sweep_every = url_grain.max(Duration::from_secs(1));
        Upkeep {
            variants_noted: noted(VARIANT_GRAIN),
            urls_noted: Cache::builder()
                .max_capacity(NOTED_URL_BYTES)
                .weigher(|url: &String, _: &()| u32::try_from(url.len() + 64).unwrap_or(u32::MAX))
                .time_to_live(url_grain)
                .build(),
            queued: Mutex::default(),
            variant_bytes: AtomicU64::new(0),
            evicting: tokio::sync::Mutex::new(()),
            eviction_wanted: AtomicBool::new(false),
            evicting_urls: tokio::sync::Mutex::new(()),
            variants_max_bytes: config.limits.variants_max_bytes,
            urls_max_bytes: config.limits.urls_max_bytes,
            forget_after,
            sweep_every,
            next_sweep: Mutex::new(Instant::now() + sweep_every),
            remembered_note_every_ms: (url_grain / 2)
                .min(Duration::from_secs(60))
                .as_millis()
                .max(1) as u64,
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.queued.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes eviction brings the variants down to.
    fn eviction_target(&self) -> u64 {
        self.variants_max_bytes - self.variants_max_bytes / 10
    }

    /// Whether a use of `key` is the first within its grain (`noted` forgets after it), and
    /// so is to be queued. A key already noted costs one lookup: no allocation, no lock.
    fn first_in_grain<K, Q>(noted: &Cache<K, ()>, key: &Q) -> bool
    where
        K: Borrow<Q> + Hash + Eq + Send + Sync + 'static,
        Q: ToOwned<Owned = K> + Hash + Eq + ?Sized,
    {
        if noted.contains_key(key) {
            return false;
        }
        noted.insert(key.to_owned(), ());
        true
    }

    /// URL entries last used before this are forgotten.
    fn forget_cutoff_ms(&self) -> u64 {
        now_ms().saturating_sub(self.forget_after.as_millis() as u64)
    }

    /// See `remembered_note_every_ms`.
    pub(in crate::pipeline) fn remembered_note_every_ms(&self) -> u64 {
        self.remembered_note_every_ms
    }

    /// The variants' bytes, as last known (for `/metrics`).
    pub(in crate::pipeline) fn variant_bytes(&self) -> u64 {
        self.variant_bytes.load(Ordering::Relaxed)
    }
}

/// Keys recorded within the last `grain`.
fn noted<K>(grain: Duration) -> Cache<K, ()>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(NOTED_KEYS)
        .time_to_live(grain)
        .build()
}

/// About what a row counts for in the maps (they count exactly; this only decides whether
/// to ask them).
fn approximate_size(key: &VariantKey, row: &VariantRow) -> u64 {
    (row.body_len() + key.canonical_spec.len() + 48) as u64
}

impl Pipeline {
    /// How often a remembered request notes its use (see `remembered_note_every_ms`).
    pub(in crate::pipeline) fn remembered_note_every_ms(&self) -> u64 {
        self.shared.walks.upkeep.remembered_note_every_ms()
    }

    /// A stored variant was served.
    pub(in crate::pipeline) fn note_variant_served(&self, key: &VariantKey) {
        let u = &self.shared.walks.upkeep;
        if Upkeep::first_in_grain(&u.variants_noted, key) {
            let mut queued = u.queue();
            if queued.variants.len() < QUEUE_LIMIT {
                queued.variants.push((key.clone(), now_ms()));
            }
        }
    }

    /// A URL entry answered a request without being written.
    pub(in crate::pipeline) fn note_url_requested(&self, url: &str) {
        let u = &self.shared.walks.upkeep;
        if Upkeep::first_in_grain(&u.urls_noted, url) {
            let mut queued = u.queue();
            if queued.urls.len() < QUEUE_LIMIT && queued.url_bytes + url.len() <= QUEUE_URL_BYTES {
                queued.url_bytes += url.len();
                queued.urls.push((url.to_string(), now_ms()));
            }
        }
    }

    /// A variant was just stored (stamped as served by the store): evicts at once when that
    /// took the variants over the budget, unless an eviction is already running.
    pub(in crate::pipeline) async fn variant_stored(&self, key: &VariantKey, row: &VariantRow) {
        let u = &self.shared.walks.upkeep;
        u.variants_noted.insert(key.clone(), ());
        let size = approximate_size(key, row);
        if u.variant_bytes.fetch_add(size, Ordering::Relaxed) + size <= u.variants_max_bytes {
            return;
        }
        u.eviction_wanted.store(true, Ordering::SeqCst);
        let Ok(_running) = u.evicting.try_lock() else {
            return;
        };
        while u.eviction_wanted.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.evict_to_target().await {
                tracing::warn!(error = %e, "variant eviction failed");
                return;
            }
        }
    }

    /// Evicts the least recently served variants when the maps count more than the budget.
    /// Returns how many were evicted.
    async fn evict_to_target(&self) -> Result<u64, Error> {
        let (s, u) = (&self.shared, &self.shared.walks.upkeep);
        // What stores add while this round reads and evicts is kept on top of the total it
        // read (counted twice at worst, which only makes the next check read the maps again):
        // overwriting the count lost those stores, and the store then held more than the
        // budget with nothing left to notice.
        let mark = u.variant_bytes.load(Ordering::SeqCst);
        let stored = s.maps.variant_bytes().await?;
        count_from(&u.variant_bytes, mark, stored);
        if stored <= u.variants_max_bytes {
            return Ok(0);
        }
        let mark = u.variant_bytes.load(Ordering::SeqCst);
        let evicted = s.maps.evict_variants(u.eviction_target()).await?;
        self.drop_variant_bytes(&evicted.keys).await?;
        count_from(&u.variant_bytes, mark, evicted.remaining_bytes);
        let count = evicted.keys.len() as u64;
        Stats::add(&s.stats.variants_evicted, count);
        tracing::debug!(
            evicted = count,
            remaining_bytes = evicted.remaining_bytes,
            "variants evicted"
        );
        Ok(count)
    }

    /// Holds the variants to the budget now (the upkeep, `imgcas gc`, and the first upkeep
    /// after a start, which counts variants stored before the budget existed).
    pub async fn keep_variants_within_budget(&self) -> Result<u64, Error> {
        let _running = self.shared.walks.upkeep.evicting.lock().await;
        self.evict_to_target().await
    }

    /// Holds the URL map to `limits.urls_max_bytes` (issue 28: the map grew without a byte
    /// bound, 300 long URLs of one image made a 38 MB data dir): beyond it, the least
    /// recently used entries are dropped down to 90 % of it. Returns how many.
    pub async fn keep_urls_within_budget(&self) -> Result<u64, Error> {
        let _running = self.shared.walks.upkeep.evicting_urls.lock().await;
        self.evict_urls_to_target().await
    }

    /// A URL entry was just written. On the embedded maps, whose byte count is one small
    /// read, the budget is held at once, as a stored variant's is (held once a second, a
    /// burst of long URLs grew the file by all of them first); shared maps sum their rows,
    /// so they are held at the sweeps.
    pub(in crate::pipeline) async fn url_written(&self) {
        if self.shared.maps.shared() {
            return;
        }
        let Ok(_running) = self.shared.walks.upkeep.evicting_urls.try_lock() else {
            return;
        };
        if let Err(e) = self.evict_urls_to_target().await {
            tracing::warn!(error = %e, "URL eviction failed");
        }
    }

    async fn evict_urls_to_target(&self) -> Result<u64, Error> {
        let (s, u) = (&self.shared, &self.shared.walks.upkeep);
        if s.maps.url_bytes().await? <= u.urls_max_bytes {
            return Ok(0);
        }
        let target = u.urls_max_bytes - u.urls_max_bytes / 10;
        let evicted = s.maps.evict_urls(target).await?;
        if evicted > 0 {
            Stats::add(&s.stats.urls_evicted, evicted);
            self.forget_requests();
            tracing::info!(evicted, "URL entries dropped to keep within urls_max_bytes");
        }
        Ok(evicted)
    }

    /// Drops URL entries unused for `fetch.forget_after`; returns how many. (The upkeep
    /// writes the queued use records first, so an entry in use is not dropped for a record
    /// still in memory.)
    pub async fn forget_unused_urls(&self) -> Result<u64, Error> {
        let s = &self.shared;
        let forgotten = s
            .maps
            .forget_urls(s.walks.upkeep.forget_cutoff_ms())
            .await?;
        Stats::add(&s.stats.urls_forgotten, forgotten);
        if forgotten > 0 {
            self.forget_requests();
            tracing::info!(forgotten, "URL entries unused for forget_after dropped");
        }
        Ok(forgotten)
    }

    /// URL entries that [`Pipeline::forget_unused_urls`] would drop now (a dry-run `gc`).
    pub(in crate::pipeline) async fn unused_urls(&self) -> Result<u64, Error> {
        let s = &self.shared;
        let cutoff = s.walks.upkeep.forget_cutoff_ms();
        let mut unused = 0;
        let mut urls = crate::maps::UrlPages::new(s.maps.as_ref());
        while let Some(page) = urls.next().await? {
            unused += page
                .iter()
                .filter(|(_, e)| e.last_used_ms() < cutoff)
                .count() as u64;
        }
        Ok(unused)
    }

    /// Writes the queued use records.
    pub(in crate::pipeline) async fn write_use(&self) -> Result<(), Error> {
        let s = &self.shared;
        let queued = std::mem::take(&mut *s.walks.upkeep.queue());
        s.maps.mark_variants_served(&queued.variants).await?;
        s.maps.mark_urls_requested(&queued.urls).await?;
        Ok(())
    }

    /// The once-a-second duties of a running server: writes the queued use records, holds
    /// the variants to the budget, forgets unused URLs when a sweep is due, and makes every
    /// map write so far durable (so freed space is reusable, and a crash loses at most about
    /// a second of recomputable entries).
    pub async fn upkeep(&self) -> Result<(), Error> {
        let u = &self.shared.walks.upkeep;
        self.write_use().await?;
        self.keep_variants_within_budget().await?;
        let sweep_due = {
            let mut next = u.next_sweep.lock().unwrap_or_else(|p| p.into_inner());
            let due = Instant::now() >= *next;
            if due {
                *next = Instant::now() + u.sweep_every;
            }
            due
        };
        if sweep_due {
            self.forget_unused_urls().await?;
        }
        // Both backends keep the byte count as they write (a read here); shared maps are
        // held to the budget at the sweeps only, so that nodes do not evict in step.
        if sweep_due || !self.shared.maps.shared() {
            self.keep_urls_within_budget().await?;
        }
        Ok(self.shared.maps.flush().await?)
    }
}

/// Sets the variants' count to `total` read from the maps, plus what stores added since the
/// count was `mark`.
fn count_from(count: &AtomicU64, mark: u64, total: u64) {
    let _ = count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
        Some(total.saturating_add(now.saturating_sub(mark)))
    });
}

//! The hot cache: recent variants in memory, in front of the variants map, bounded by bytes.
//! A hot key's bytes then cost a hash lookup and a reference-counted clone: no read from the
//! variants map, no copy. (Locating the variant still reads the small originals-index entry,
//! unless the request cache, `pipeline/variant/recall.rs`, remembers it.) Entries never go stale (a
//! variant key names immutable content), so memory pressure evicts them (TinyLFU admission
//! keeps one-off variants from flushing the hot ones), and only a removal an administrator
//! asks for (`pipeline/moderation/removal.rs`) clears them all.
//!
//! Rows are held behind an `Arc`, so that the request cache can keep a weak link to one: a
//! remembered hit then reaches its bytes without a second lookup, and the link lapses when
//! this cache lets the row go (a weak link holds no bytes).
//!
//! Hot keys (issue 54): the requests' keys are counted by a Space-Saving top-k
//! ([`HotKeys`]); a key requested more than [`HOT_AFTER`] times in a window is *pinned*, kept
//! in a second, smaller memory for [`PIN_FOR`] whatever the main one's admission decides
//! (TinyLFU may turn away a key that was cold until a moment ago: a viral listing, a CDN
//! purge), and pinned again while it stays hot.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::maps::{VariantKey, VariantRow};

/// Keys the top-k counts at once.
pub const TOP_K: usize = 256;
/// Requests in a window (counted as Space-Saving's guaranteed lower bound) that make a key hot.
pub const HOT_AFTER: u64 = 16;
/// Every window, the counts halve: a key is hot for what it is asked now, not once was.
const WINDOW: Duration = Duration::from_secs(10);
/// How long a hot key's row stays pinned after it was last found hot.
pub const PIN_FOR: Duration = Duration::from_secs(10);

/// The Space-Saving algorithm's counters (Metwally et al.): at most [`TOP_K`] keys, each with
/// its count and the most that count may overstate; a new key when all are taken replaces
/// the least counted, inheriting its count as its error. A key's true count in the window
/// is at least `count - error`: what decides hot.
pub struct HotKeys {
    top: Mutex<TopK>,
}

struct TopK {
    counts: HashMap<u64, (u64, u64)>,
    window_began: Instant,
}

impl Default for HotKeys {
    fn default() -> Self {
        HotKeys {
            top: Mutex::new(TopK {
                counts: HashMap::with_capacity(TOP_K),
                window_began: Instant::now(),
            }),
        }
    }
}

impl HotKeys {
    /// Counts one request of `key`; whether it is hot now.
    pub fn note(&self, key: &VariantKey) -> bool {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        self.note_hashed(hasher.finish(), Instant::now())
    }

    fn note_hashed(&self, id: u64, now: Instant) -> bool {
        // A request that finds the counters busy is not counted: the top-k is a sample of
        // the requests, and the hit path never waits for it.
        let mut top = match self.top.try_lock() {
            Ok(top) => top,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        if now.saturating_duration_since(top.window_began) >= WINDOW {
            top.window_began = now;
            top.counts.retain(|_, (count, error)| {
                *count /= 2;
                *error /= 2;
                *count > 0
            });
        }
        let full = top.counts.len() >= TOP_K;
        let (count, error) = match top.counts.get_mut(&id) {
            Some(entry) => {
                entry.0 += 1;
                *entry
            }
            None if !full => {
                top.counts.insert(id, (1, 0));
                (1, 0)
            }
            None => {
                let least = top
                    .counts
                    .iter()
                    .min_by_key(|(_, (count, _))| *count)
                    .map(|(k, (count, _))| (*k, *count));
                let Some((least, floor)) = least else {
                    return false;
                };
                top.counts.remove(&least);
                top.counts.insert(id, (floor + 1, floor));
                (floor + 1, floor)
            }
        };
        count - error >= HOT_AFTER
    }

    /// Keys counted now (at most [`TOP_K`]).
    pub fn tracked(&self) -> usize {
        self.top.lock().map_or(0, |t| t.counts.len())
    }
}

pub struct HotVariants {
    cache: Option<Cache<VariantKey, Arc<VariantRow>>>,
    /// Hot keys' rows, each kept [`PIN_FOR`] from its pinning (a quarter of the budget).
    pinned: Option<Cache<VariantKey, Arc<VariantRow>>>,
    keys: HotKeys,
}

/// Memory an entry holds: its bytes plus the key and bookkeeping.
fn weight(key: &VariantKey, value: &Arc<VariantRow>) -> u32 {
    u32::try_from(value.body_len() + key.canonical_spec.len() + 128).unwrap_or(u32::MAX)
}

impl HotVariants {
    /// A cache of at most `capacity` bytes; 0 turns it off.
    pub fn new(capacity: u64) -> HotVariants {
        let cache = (capacity > 0).then(|| {
            Cache::builder()
                .max_capacity(capacity)
                .weigher(weight)
                .build()
        });
        let pinned = (capacity > 0).then(|| {
            Cache::builder()
                .max_capacity((capacity / 4).max(1))
                .weigher(weight)
                .time_to_live(PIN_FOR)
                .build()
        });
        HotVariants {
            cache,
            pinned,
            keys: HotKeys::default(),
        }
    }

    pub fn get(&self, key: &VariantKey) -> Option<VariantRow> {
        self.get_shared(key).map(|row| VariantRow::clone(&row))
    }

    /// The row itself, as held here.
    pub fn get_shared(&self, key: &VariantKey) -> Option<Arc<VariantRow>> {
        if let Some(row) = self.cache.as_ref()?.get(key) {
            return Some(row);
        }
        self.pinned.as_ref()?.get(key)
    }

    pub fn insert(&self, key: VariantKey, value: VariantRow) {
        if let Some(cache) = &self.cache {
            cache.insert(key, Arc::new(value));
        }
    }

    /// Counts a request of `key` among the hot keys; whether it is hot now.
    pub fn note(&self, key: &VariantKey) -> bool {
        self.cache.is_some() && self.keys.note(key)
    }

    /// Keeps a hot key's row in memory for [`PIN_FOR`] (unless it is pinned already).
    /// Whether it was pinned now.
    pub fn pin(&self, key: &VariantKey, value: &VariantRow) -> bool {
        let Some(pinned) = &self.pinned else {
            return false;
        };
        if pinned.contains_key(key) {
            return false;
        }
        pinned.insert(key.clone(), Arc::new(value.clone()));
        true
    }

    /// Keys the hot-key counter tracks now.
    pub fn tracked_keys(&self) -> usize {
        self.keys.tracked()
    }

    /// Drops every row (a removal may have made some of them wrong to serve).
    pub fn clear(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_all();
        }
        if let Some(pinned) = &self.pinned {
            pinned.invalidate_all();
        }
    }

    /// Bytes held now (approximate: moka applies writes in batches).
    pub fn weighted_size(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| {
            c.run_pending_tasks();
            c.weighted_size()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ContentHash;
    use crate::maps::VariantBody;
    use imgcas_processors::OutputFormat;

    fn key(i: u8) -> VariantKey {
        VariantKey {
            hash: ContentHash::of(&[i]),
            canonical_spec: "w=10".into(),
            processor_version: 1,
        }
    }

    fn image(len: usize) -> VariantRow {
        VariantRow::Image {
            format: OutputFormat::Jpeg,
            width: 1,
            height: 1,
            chosen: None,
            body: VariantBody::Inline(bytes::Bytes::from(vec![0u8; len])),
        }
    }

    #[test]
    fn bounded_by_bytes() {
        let hot = HotVariants::new(100_000);
        for i in 0..50 {
            hot.insert(key(i), image(10_000));
        }
        assert!(hot.weighted_size() <= 100_000);
        let hot_key = key(200);
        hot.insert(hot_key.clone(), image(1000));
        assert_eq!(hot.get(&hot_key), Some(image(1000)));
    }

    #[test]
    fn space_saving_finds_the_hot_key_among_many_cold_ones() {
        let keys = HotKeys::default();
        let now = Instant::now();
        let mut hot_at = None;
        // A stream of 5,000 one-off keys with one key asked every 20th request.
        for i in 0..5_000u64 {
            let id = if i % 20 == 0 { u64::MAX } else { i };
            if keys.note_hashed(id, now) && id == u64::MAX && hot_at.is_none() {
                hot_at = Some(i);
            }
            assert!(
                !(id != u64::MAX && keys.note_hashed(id + 1_000_000, now)),
                "a one-off key is never hot"
            );
        }
        assert!(hot_at.is_some(), "the repeated key became hot");
        assert!(keys.tracked() <= TOP_K);
        // A window later its count has halved; it stays hot only while asked.
        let later = now + WINDOW;
        assert!(keys.note_hashed(u64::MAX, later));
    }

    #[test]
    fn a_pinned_row_outlives_the_main_memory() {
        let hot = HotVariants::new(100_000);
        hot.insert(key(1), image(10));
        assert!(hot.pin(&key(1), &image(10)));
        assert!(!hot.pin(&key(1), &image(10)), "pinned once");
        if let Some(cache) = &hot.cache {
            cache.invalidate_all();
        }
        assert_eq!(hot.get(&key(1)), Some(image(10)), "answered from the pins");
        hot.clear();
        assert_eq!(hot.get(&key(1)), None);
    }

    #[test]
    fn zero_turns_it_off() {
        let hot = HotVariants::new(0);
        hot.insert(key(1), image(10));
        assert_eq!(hot.get(&key(1)), None);
    }
}

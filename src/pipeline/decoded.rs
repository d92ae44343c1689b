//! Decoded sources shared by runs: for a few seconds after a decode, another run that needs
//! the same decode of the same bytes (one original or its mezzanine, at one DCT scale) takes
//! it instead of decoding again, and runs that need it at the same moment wait for one
//! decode. This is what makes a `srcset` burst on a new original cost one decode per scale:
//! its widths and the mezzanine's build pick scales on their own, and those that pick the
//! same share. A new original's facts and fingerprint share their one small decode so.
//!
//! Bounded in bytes (`limits.decode_cache_bytes`), and short-lived: a decode is large (a
//! 12 MP photo is 36 MB of RGB) and useful only to work arriving together. So a decode is
//! kept only while some run of its original is under way (each run holds an [`Interest`]
//! from its start, waiting for a mezzanine included, to its end), and at most 5 s: a cold
//! burst over many distinct originals holds no more decodes than it has runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::sync::Cache;

use imgcas_processors::{pixels_size, DynamicImage, InputKind, Pixels, ProcessError};

use crate::hash::ContentHash;
use crate::stats::Stats;

/// How long a decode is kept after it was made.
const LIFETIME: Duration = Duration::from_secs(5);

type Key = (ContentHash, InputKind, u32);

pub(super) struct DecodeCache {
    /// `None`: sharing is off (every run decodes).
    decodes: Option<Cache<Key, Pixels>>,
    /// Runs under way per original; its decodes go when the count falls to 0.
    interest: Arc<Mutex<HashMap<ContentHash, usize>>>,
}

/// A run's interest in its original's decodes (see [`DecodeCache::interest`]).
pub(super) struct Interest {
    hash: ContentHash,
    interest: Arc<Mutex<HashMap<ContentHash, usize>>>,
    decodes: Option<Cache<Key, Pixels>>,
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut counts = self.interest.lock().unwrap_or_else(|p| p.into_inner());
        let last = match counts.get_mut(&self.hash) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                counts.remove(&self.hash);
                true
            }
        };
        drop(counts);
        if let (true, Some(cache)) = (last, &self.decodes) {
            for from in [InputKind::Original, InputKind::Mezzanine] {
                for denominator in [1, 2, 4, 8] {
                    cache.invalidate(&(self.hash, from, denominator));
                }
            }
        }
    }
}

impl DecodeCache {
    /// A cache of at most `capacity` bytes; 0 turns sharing off.
    pub(super) fn new(capacity: u64) -> DecodeCache {
        let decodes = (capacity > 0).then(|| {
            Cache::builder()
                .max_capacity(capacity)
                .weigher(|_: &Key, pixels: &Pixels| {
                    u32::try_from(pixels_size(pixels)).unwrap_or(u32::MAX)
                })
                .time_to_live(LIFETIME)
                .build()
        });
        DecodeCache {
            decodes,
            interest: Arc::default(),
        }
    }

    /// Drops every decode kept (a removal may have taken their original down).
    pub(super) fn clear(&self) {
        if let Some(cache) = &self.decodes {
            cache.invalidate_all();
        }
    }

    /// Declares a run of original `hash` under way until the returned value is dropped: its
    /// decodes are kept for other runs of that original meanwhile, and dropped after the
    /// last.
    pub(super) fn interest(&self, hash: ContentHash) -> Interest {
        *self
            .interest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(hash)
            .or_default() += 1;
        Interest {
            hash,
            interest: self.interest.clone(),
            decodes: self.decodes.clone(),
        }
    }

    /// The decode hook of one run on the original `hash` (or its mezzanine), or of what is
    /// computed once per original (facts, fingerprint: their small decode is shared alike,
    /// and is a decode of the original like any other).
    pub(super) fn of<'a>(&'a self, hash: ContentHash, stats: &'a Stats) -> RunDecodes<'a> {
        RunDecodes {
            cache: self,
            hash,
            stats,
        }
    }
}

pub(super) struct RunDecodes<'a> {
    cache: &'a DecodeCache,
    hash: ContentHash,
    stats: &'a Stats,
}

impl imgcas_processors::Decodes for RunDecodes<'_> {
    fn decoded(
        &self,
        from: InputKind,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError> {
        let mut counted = || {
            Stats::bump(match from {
                InputKind::Original => &self.stats.decodes_original,
                InputKind::Mezzanine => &self.stats.decodes_mezzanine,
            });
            decode().map(Pixels::new)
        };
        match &self.cache.decodes {
            None => counted(),
            // Concurrent callers of one key wait for one decode (they are on the blocking
            // pool); a failed decode is not kept, and each waiter gets its error.
            Some(cache) => cache
                .try_get_with((self.hash, from, denominator), counted)
                .map_err(|e| (*e).clone()),
        }
    }

    fn frame_decoded(&self) {
        Stats::bump(&self.stats.frames_decoded);
    }
}

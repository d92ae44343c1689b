//! Decoded sources shared by runs: for a few seconds after a decode, another run that needs
//! the same decode of the same bytes (one original or its mezzanine, at one DCT scale) takes
//! it instead of decoding again, and runs that need it at the same moment wait for one
//! decode. This is what makes a `srcset` burst on a new original cost one decode per scale:
//! its widths and the mezzanine's build pick scales on their own, and those that pick the
//! same share.
//!
//! A new original's facts and fingerprint share their one small decode so, and while they
//! are awaited, a run that decodes the original larger leaves them a box reduction of its
//! decode to that small size: for a baseline JPEG, whose entropy decoding is most of any
//! decode, that spares a second pass over the whole file. The small pixels serve them only,
//! never a variant: a variant's bytes depend on its original and spec alone.
//!
//! Bounded in bytes (`limits.decode_cache_bytes`), and short-lived: a decode is large (a
//! 12 MP photo is 36 MB of RGB) and useful only to work arriving together. So a decode is
//! kept only while some run of its original is under way (each run holds an [`Interest`]
//! from its start, waiting for a mezzanine included, to its end), small pixels only while
//! their facts or fingerprint are awaited, and either at most 5 s: a cold burst over many
//! distinct originals holds no more decodes than it has runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moka::sync::Cache;
use tokio::sync::Notify;

use imgcas_processors::{pixels_size, DynamicImage, InputKind, Pixels, ProcessError};

use super::deadline::Stop;
use crate::hash::ContentHash;
use crate::stats::Stats;

/// How long a decode is kept after it was made.
const LIFETIME: Duration = Duration::from_secs(5);

/// What pixels are kept: a decode of an original or a mezzanine for runs, or an original's
/// small pixels for its facts and fingerprint (its small decode, or a run's reduction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Made {
    Decode(InputKind),
    Small,
}

type Key = (ContentHash, Made, u32);

/// How long a new original's facts and fingerprint wait for the request that brought it to
/// decode it (and offer them its small pixels) before they decode it themselves: about as
/// long as `admission` queues them behind that request.
const OFFER_WAIT: Duration = Duration::from_secs(1);

/// What keeps an original's pixels: its runs (their decodes), or its facts and fingerprint
/// awaiting them (its small pixels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    Runs,
    Small,
}

impl Holder {
    /// The pixels it keeps.
    fn keeps(self) -> &'static [Made] {
        match self {
            Holder::Runs => &[
                Made::Decode(InputKind::Original),
                Made::Decode(InputKind::Mezzanine),
            ],
            Holder::Small => &[Made::Small],
        }
    }
}

/// How many of one holder an original has, and what wakes the awaiting ones when a run
/// offers its small pixels.
#[derive(Default)]
struct Held {
    count: usize,
    offered: Arc<Notify>,
}

type Holders = Arc<Mutex<HashMap<(ContentHash, Holder), Held>>>;

pub(super) struct DecodeCache {
    /// `None`: sharing is off (every run decodes).
    decodes: Option<Cache<Key, Pixels>>,
    /// What keeps each original's pixels (they go when its holders' count falls to 0).
    holders: Holders,
}

/// An interest in an original's pixels (see [`DecodeCache::interest`] and
/// [`DecodeCache::interest_in_small`]).
pub(super) struct Interest {
    hash: ContentHash,
    holder: Holder,
    holders: Holders,
    decodes: Option<Cache<Key, Pixels>>,
}

impl Interest {
    /// For facts or a fingerprint ([`DecodeCache::interest_in_small`]): waits, for at most
    /// [`OFFER_WAIT`], until a run offers the original's small pixels (at once if one has,
    /// or if nothing is kept at all).
    pub(super) async fn offered(&self) {
        let Some(cache) = &self.decodes else {
            return;
        };
        let Some(offered) = offered_wake(&self.holders, &self.hash) else {
            return;
        };
        let woken = offered.notified();
        tokio::pin!(woken);
        // Registered before the look, so an offer between the two still wakes it.
        woken.as_mut().enable();
        if [1, 2, 4, 8]
            .iter()
            .any(|d| cache.contains_key(&(self.hash, Made::Small, *d)))
        {
            return;
        }
        let _ = tokio::time::timeout(OFFER_WAIT, woken).await;
    }
}

/// What wakes the facts or fingerprint computations awaiting `hash`'s small pixels, if any
/// awaits them.
fn offered_wake(holders: &Holders, hash: &ContentHash) -> Option<Arc<Notify>> {
    holders
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(*hash, Holder::Small))
        .map(|held| held.offered.clone())
}

impl Drop for Interest {
    fn drop(&mut self) {
        let mut holders = self.holders.lock().unwrap_or_else(|p| p.into_inner());
        let key = (self.hash, self.holder);
        let last = match holders.get_mut(&key) {
            Some(held) if held.count > 1 => {
                held.count -= 1;
                false
            }
            _ => {
                holders.remove(&key);
                true
            }
        };
        drop(holders);
        let Some(cache) = self.decodes.as_ref().filter(|_| last) else {
            return;
        };
        for made in self.holder.keeps() {
            for denominator in [1, 2, 4, 8] {
                cache.invalidate(&(self.hash, *made, denominator));
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
            holders: Arc::default(),
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
        self.interest_of(hash, Holder::Runs)
    }

    /// Declares the original's facts or fingerprint awaited until the returned value is
    /// dropped: its small pixels are kept for them meanwhile, and a run that decodes the
    /// original larger leaves them a reduction of its decode (see the module's doc and
    /// [`Interest::offered`]).
    pub(super) fn interest_in_small(&self, hash: ContentHash) -> Interest {
        self.interest_of(hash, Holder::Small)
    }

    fn interest_of(&self, hash: ContentHash, holder: Holder) -> Interest {
        self.holders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((hash, holder))
            .or_default()
            .count += 1;
        Interest {
            hash,
            holder,
            holders: self.holders.clone(),
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
            stop: None,
        }
    }
}

pub(super) struct RunDecodes<'a> {
    cache: &'a DecodeCache,
    hash: ContentHash,
    stats: &'a Stats,
    /// What tells the run to stop (its deadline, a shutdown), when it has a bound.
    stop: Option<Stop>,
}

impl RunDecodes<'_> {
    /// The same hook, for a run that stops when `stop` says so.
    pub(super) fn stopping(self, stop: Stop) -> Self {
        RunDecodes {
            stop: Some(stop),
            ..self
        }
    }
}

impl RunDecodes<'_> {
    /// Decodes, counted.
    fn counted(
        &self,
        from: InputKind,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError> {
        Stats::bump(match from {
            InputKind::Original => &self.stats.decodes_original,
            InputKind::Mezzanine => &self.stats.decodes_mezzanine,
        });
        decode().map(Pixels::new)
    }
}

impl imgcas_processors::Decodes for RunDecodes<'_> {
    fn check(&self) -> Result<(), ProcessError> {
        self.stop.as_ref().map_or(Ok(()), Stop::check)
    }

    fn decoded(
        &self,
        from: InputKind,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError> {
        let mut counted = || self.counted(from, decode);
        match &self.cache.decodes {
            None => counted(),
            // Concurrent callers of one key wait for one decode (they are on the blocking
            // pool); a failed decode is not kept, and each waiter gets its error.
            Some(cache) => cache
                .try_get_with((self.hash, Made::Decode(from), denominator), counted)
                .map_err(|e| (*e).clone()),
        }
    }

    fn small(
        &self,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
        reduce: &dyn Fn(&Pixels) -> Pixels,
    ) -> Result<Pixels, ProcessError> {
        let Some(cache) = &self.cache.decodes else {
            return self
                .decoded(InputKind::Original, denominator, decode)
                .map(|decoded| reduce(&decoded));
        };
        let original = (self.hash, Made::Decode(InputKind::Original), denominator);
        cache
            .try_get_with((self.hash, Made::Small, denominator), || {
                // A run's decode at that very scale, reduced, is the small decode itself.
                let decoded = match cache.get(&original) {
                    Some(pixels) => pixels,
                    None => self.counted(InputKind::Original, decode)?,
                };
                Ok::<_, ProcessError>(reduce(&decoded))
            })
            .map_err(|e| (*e).clone())
    }

    fn offer_small(&self, denominator: u32, small: &mut dyn FnMut() -> Pixels) {
        let Some(cache) = &self.cache.decodes else {
            return;
        };
        let Some(offered) = offered_wake(&self.cache.holders, &self.hash) else {
            return;
        };
        // Kept once, however many runs offer at the same moment.
        let kept = cache
            .entry((self.hash, Made::Small, denominator))
            .or_insert_with(small);
        if kept.is_fresh() {
            Stats::bump(&self.stats.small_decodes_spared);
            offered.notify_waiters();
        }
    }

    fn frame_decoded(&self) {
        Stats::bump(&self.stats.frames_decoded);
    }
}

//! The `Quotas` role: what the nodes sharing the maps spend together, so that a limit set for
//! "the service" holds for the whole cluster and not once per node (issue 54): download
//! slots per origin, token buckets (an origin's request rate, a tenant's budget), pauses of
//! an origin (its `Retry-After`, or a run of refused connections), and the origin failures
//! held per URL with their backoff.
//!
//! Every row expires on the store's clock: a dead node's slots come back after their time to
//! live (`shared/design/leases.md`), and no node's wall clock is compared with another's.
//! [`MemoryQuotas`] keeps the same rows in this process's memory, on its monotonic clock: the
//! store of one process (the embedded file) answers the role with it, and the contract suite
//! (`tests/it/maps_contract.rs`, `quotas`) holds both to the same answers.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::MapError;

/// How many rows of each kind [`MemoryQuotas`] keeps at most: expired rows are dropped as
/// new ones come, and past this bound the oldest go first (a flood of distinct origins or
/// failing URLs cannot grow memory without end).
const MEMORY_ROWS: usize = 100_000;

/// One of an origin's download slots, held until released or until its time to live ends.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginSlot {
    pub origin: String,
    pub slot: u32,
    /// Changes with every grant: a release names it, so a slot that expired and was granted
    /// to another download is not released by the first.
    pub token: i64,
}

/// What asking for an origin's download slot gave.
#[derive(Debug, Clone, PartialEq)]
pub enum SlotTake {
    /// A slot, and a token of the origin's rate with it.
    Granted(OriginSlot),
    /// Every slot is held: ask again later.
    Busy,
    /// The origin asked every node to wait (or refused connections in a row) for this long.
    Paused(Duration),
    /// A slot is free but the origin's rate is spent: this long until a token is back.
    RateWait(Duration),
    /// The URL's failure is held (by any node) for this long still: nothing is asked.
    Held(HeldFailure),
}

/// One download's turn at its origin, asked in one statement: a free slot of `limit`, a
/// token of the origin's request rate (bucket `rate_key`), unless the origin is paused or
/// the URL's failure (`url_key`, if given) is held.
#[derive(Debug, Clone)]
pub struct OriginTurn<'a> {
    pub origin: &'a str,
    pub limit: u32,
    pub owner: &'a str,
    pub token: i64,
    /// The slot's life (no renewal: it outlives the longest download).
    pub ttl: Duration,
    pub rate_key: &'a str,
    pub rate: Bucket,
    pub url_key: Option<&'a str>,
}

/// What taking from a token bucket gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Take {
    /// Taken; the level left (negative: in debt, which later takes wait out).
    Granted { left: f64 },
    /// The bucket holds less than was needed: this long at its rate until it does.
    Refused { wait: Duration },
}

/// A token bucket's settings: refilled at `rate` a second up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    pub rate: f64,
    pub burst: f64,
}

impl Bucket {
    /// How long the bucket takes from `level` to `need`.
    pub fn wait(&self, level: f64, need: f64) -> Duration {
        if level >= need {
            return Duration::ZERO;
        }
        let secs = (need - level) / self.rate.max(f64::MIN_POSITIVE);
        Duration::from_secs_f64(secs.clamp(0.0, 86_400.0))
    }
}

/// An origin failure held for a URL (its class and text, encoded by the caller), how many
/// failures in a row it ends, and how long it still holds requests back (zero: no longer
/// held, but the streak is remembered so the next backoff grows).
#[derive(Debug, Clone, PartialEq)]
pub struct HeldFailure {
    pub error: String,
    pub streak: u32,
    pub left: Duration,
}

/// See the module's comment. `owner` names the node (for a slot's holder, as claims do);
/// durations are measured from the call on the store's clock.
#[async_trait]
pub trait Quotas: Send + Sync {
    /// Takes a download's turn at its origin (see [`OriginTurn`]): a slot and a rate token
    /// together, or neither. With the turn, the URL's remembered failure (its streak, when no
    /// longer held), if any.
    async fn take_origin_turn(
        &self,
        turn: &OriginTurn<'_>,
    ) -> Result<(SlotTake, Option<HeldFailure>), MapError>;

    /// Gives a slot back, if it is still held with its token.
    async fn release_origin_slot(&self, slot: &OriginSlot) -> Result<(), MapError>;

    /// Slots of `origin` held now.
    async fn origin_slots_held(&self, origin: &str) -> Result<u32, MapError>;

    /// Pauses every node's requests to `origin` for `length` (a longer pause already set
    /// stands).
    async fn pause_origin(&self, origin: &str, length: Duration) -> Result<(), MapError>;

    /// The time left of `origin`'s pause, if one holds.
    async fn origin_pause(&self, origin: &str) -> Result<Option<Duration>, MapError>;

    /// Takes `cost` from the token bucket `key` when it holds at least `need` (refilled for
    /// the time since it was last taken from, up to `burst`; a new bucket starts full).
    /// `need` ≤ `cost` takes into debt: a tenant's budget admits work while it is above zero
    /// and the work's cost is known only as an estimate.
    async fn take_tokens(
        &self,
        key: &str,
        bucket: Bucket,
        need: f64,
        cost: f64,
    ) -> Result<Take, MapError>;

    /// The failure held for `url`, if one is remembered (held now, or its streak).
    async fn held_failure(&self, url: &str) -> Result<Option<HeldFailure>, MapError>;

    /// Holds `error` for `url` for `hold`, as failure number `streak` in a row; the streak is
    /// remembered for `remember` after the hold ends.
    async fn hold_failure(
        &self,
        url: &str,
        error: &str,
        streak: u32,
        hold: Duration,
        remember: Duration,
    ) -> Result<(), MapError>;

    /// Forgets `url`'s failure and its streak (the origin answered).
    async fn clear_failure(&self, url: &str) -> Result<(), MapError>;
}

/// The rows of [`Quotas`] in this process's memory, for a store no other process shares.
#[derive(Default)]
pub struct MemoryQuotas {
    rows: Mutex<Rows>,
}

#[derive(Default)]
struct Rows {
    /// (origin, slot) → (token, expiry)
    slots: HashMap<(String, u32), (i64, Instant)>,
    pauses: HashMap<String, Instant>,
    /// key → (level, when it was that)
    buckets: HashMap<String, (f64, Instant)>,
    /// url → (error, streak, held until, remembered until)
    failures: HashMap<String, (String, u32, Instant, Instant)>,
}

/// Drops expired rows of `map` once it is over [`MEMORY_ROWS`], then the oldest if still over.
fn bound<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    expiry: impl Fn(&V) -> Instant,
    now: Instant,
) {
    if map.len() < MEMORY_ROWS {
        return;
    }
    map.retain(|_, v| expiry(v) > now);
    while map.len() >= MEMORY_ROWS {
        let Some(oldest) = map
            .iter()
            .min_by_key(|(_, v)| expiry(v))
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        map.remove(&oldest);
    }
}

impl MemoryQuotas {
    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bucket's level now, from its level at `then`.
fn refilled(level: f64, then: Instant, now: Instant, bucket: Bucket) -> f64 {
    let elapsed = now.saturating_duration_since(then).as_secs_f64();
    (level + elapsed * bucket.rate).min(bucket.burst)
}

#[async_trait]
impl Quotas for MemoryQuotas {
    async fn take_origin_turn(
        &self,
        turn: &OriginTurn<'_>,
    ) -> Result<(SlotTake, Option<HeldFailure>), MapError> {
        let now = Instant::now();
        let held = match turn.url_key {
            Some(key) => self.held_failure(key).await?,
            None => None,
        };
        if let Some(active) = held.as_ref().filter(|h| !h.left.is_zero()) {
            return Ok((SlotTake::Held(active.clone()), held));
        }
        let mut rows = self.rows();
        if let Some(left) = rows
            .pauses
            .get(turn.origin)
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
        {
            return Ok((SlotTake::Paused(left), held));
        }
        bound(&mut rows.slots, |(_, expiry)| *expiry, now);
        let free = (0..turn.limit).find(|slot| {
            rows.slots
                .get(&(turn.origin.to_string(), *slot))
                .is_none_or(|(_, expiry)| *expiry <= now)
        });
        let Some(slot) = free else {
            return Ok((SlotTake::Busy, held));
        };
        let level = rows
            .buckets
            .get(turn.rate_key)
            .map_or(turn.rate.burst, |(level, then)| {
                refilled(*level, *then, now, turn.rate)
            });
        if level < 1.0 {
            return Ok((SlotTake::RateWait(turn.rate.wait(level, 1.0)), held));
        }
        rows.buckets
            .insert(turn.rate_key.to_string(), (level - 1.0, now));
        rows.slots.insert(
            (turn.origin.to_string(), slot),
            (turn.token, now + turn.ttl),
        );
        let granted = OriginSlot {
            origin: turn.origin.to_string(),
            slot,
            token: turn.token,
        };
        Ok((SlotTake::Granted(granted), held))
    }

    async fn release_origin_slot(&self, slot: &OriginSlot) -> Result<(), MapError> {
        let mut rows = self.rows();
        let key = (slot.origin.clone(), slot.slot);
        if rows.slots.get(&key).is_some_and(|(t, _)| *t == slot.token) {
            rows.slots.remove(&key);
        }
        Ok(())
    }

    async fn origin_slots_held(&self, origin: &str) -> Result<u32, MapError> {
        let now = Instant::now();
        let rows = self.rows();
        let held = rows
            .slots
            .iter()
            .filter(|((o, _), (_, expiry))| o == origin && *expiry > now)
            .count();
        Ok(held as u32)
    }

    async fn pause_origin(&self, origin: &str, length: Duration) -> Result<(), MapError> {
        let now = Instant::now();
        let mut rows = self.rows();
        bound(&mut rows.pauses, |until| *until, now);
        let until = now + length;
        let entry = rows.pauses.entry(origin.to_string()).or_insert(until);
        *entry = (*entry).max(until);
        Ok(())
    }

    async fn origin_pause(&self, origin: &str) -> Result<Option<Duration>, MapError> {
        let now = Instant::now();
        Ok(self
            .rows()
            .pauses
            .get(origin)
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero()))
    }

    async fn take_tokens(
        &self,
        key: &str,
        bucket: Bucket,
        need: f64,
        cost: f64,
    ) -> Result<Take, MapError> {
        let now = Instant::now();
        let mut rows = self.rows();
        // A bucket idle long enough to be full again is as good as none: dropped first.
        let full_after = |(level, then): &(f64, Instant)| {
            *then + bucket.wait(*level, bucket.burst) + Duration::from_secs(1)
        };
        bound(&mut rows.buckets, full_after, now);
        let level = rows.buckets.get(key).map_or(bucket.burst, |(level, then)| {
            refilled(*level, *then, now, bucket)
        });
        if level < need {
            return Ok(Take::Refused {
                wait: bucket.wait(level, need),
            });
        }
        let left = level - cost;
        rows.buckets.insert(key.to_string(), (left, now));
        Ok(Take::Granted { left })
    }

    async fn held_failure(&self, url: &str) -> Result<Option<HeldFailure>, MapError> {
        let now = Instant::now();
        let rows = self.rows();
        Ok(rows
            .failures
            .get(url)
            .filter(|(_, _, _, remembered)| *remembered > now)
            .map(|(error, streak, until, _)| HeldFailure {
                error: error.clone(),
                streak: *streak,
                left: until.saturating_duration_since(now),
            }))
    }

    async fn hold_failure(
        &self,
        url: &str,
        error: &str,
        streak: u32,
        hold: Duration,
        remember: Duration,
    ) -> Result<(), MapError> {
        let now = Instant::now();
        let mut rows = self.rows();
        bound(&mut rows.failures, |(_, _, _, remembered)| *remembered, now);
        rows.failures.insert(
            url.to_string(),
            (error.to_string(), streak, now + hold, now + hold + remember),
        );
        Ok(())
    }

    async fn clear_failure(&self, url: &str) -> Result<(), MapError> {
        self.rows().failures.remove(url);
        Ok(())
    }
}

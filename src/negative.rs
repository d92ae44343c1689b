//! The negative cache of origin failures, per canonical URL, in memory.
//!
//! Three kinds of error, three lifetimes (the permanent kind, bad bytes, lives elsewhere: in
//! the variants map, under hash + spec, like any result):
//! - the origin says the URL is gone (404/410), or its body is over the size limit: minutes;
//! - the origin failed in a way that says nothing about the content (5xx, timeout, refused
//!   connection, 429, a broken redirect): seconds, doubling with each failure in a row up to
//!   a minute, or as long as the origin's `Retry-After` asks (up to ten minutes);
//! - refusals that need no origin traffic (private address, host not allowed): not cached.
//!
//! While an entry lives, the URL's requests get the cached error (or, for a transient failure
//! of a URL with a stored mapping, that mapping) without touching the origin. A success clears
//! the entry, and with it the backoff.

use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::fetch::FetchError;

const GONE: Duration = Duration::from_secs(120);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Failure streaks are remembered this long after the last failure, so backoff keeps growing
/// for an origin that flaps slower than its backoff.
const STREAK_MEMORY: Duration = Duration::from_secs(3600);
/// What the held failures may take in memory, URLs and error texts counted (issue 28: a cap
/// by count let long URLs against a refusing origin take gigabytes).
const HELD_BYTES: u64 = 32 << 20;

#[derive(Debug, Clone)]
pub struct UrlFailure {
    pub error: FetchError,
    /// Failures in a row.
    pub streak: u32,
    pub until: Instant,
}

impl UrlFailure {
    /// About what the entry holds in memory: its error's text (which may quote the URL
    /// again) and a fixed cost for the rest.
    fn held_bytes(&self) -> usize {
        let text = match &self.error {
            FetchError::BadUrl(t)
            | FetchError::NotAllowed(t)
            | FetchError::Connect(t)
            | FetchError::Body(t)
            | FetchError::BadRedirect(t) => t.len(),
            _ => 0,
        };
        128 + text
    }

    /// Time left, or `None` once the entry no longer holds requests back.
    pub fn remaining(&self) -> Option<Duration> {
        let left = self.until.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }
}

pub struct OriginFailures {
    entries: Cache<String, UrlFailure>,
}

impl Default for OriginFailures {
    fn default() -> Self {
        OriginFailures {
            entries: Cache::builder()
                .max_capacity(HELD_BYTES)
                .weigher(|url: &String, failure: &UrlFailure| {
                    u32::try_from(url.len() + failure.held_bytes()).unwrap_or(u32::MAX)
                })
                .time_to_idle(STREAK_MEMORY)
                .build(),
        }
    }
}

/// How long a URL's failure is held, given the streak it extends; `None`: not cached.
pub fn hold_for(error: &FetchError, streak: u32) -> Option<Duration> {
    let backoff = FIRST_BACKOFF
        .saturating_mul(1u32 << streak.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    match error {
        FetchError::BadUrl(_) | FetchError::UrlTooLong { .. } | FetchError::NotAllowed(_) => None,
        FetchError::NotFound(_) | FetchError::TooLarge { .. } => Some(GONE),
        FetchError::RateLimited {
            retry_after: Some(asked),
        } => Some(backoff.max((*asked).min(MAX_RETRY_AFTER))),
        FetchError::RateLimited { retry_after: None }
        | FetchError::Status(_)
        | FetchError::Timeout
        | FetchError::Connect(_)
        | FetchError::Body(_)
        | FetchError::TooManyRedirects
        | FetchError::BadRedirect(_)
        | FetchError::UnexpectedNotModified => Some(backoff),
    }
}

impl OriginFailures {
    /// The live failure of `url`, if one holds requests back now.
    pub fn active(&self, url: &str) -> Option<(UrlFailure, Duration)> {
        let entry = self.entries.get(url)?;
        let left = entry.remaining()?;
        Some((entry, left))
    }

    /// Records a failed fetch; returns how long it is held.
    pub fn record(&self, url: &str, error: &FetchError) -> Option<Duration> {
        let streak = self.entries.get(url).map_or(0, |e| e.streak) + 1;
        let hold = hold_for(error, streak)?;
        self.entries.insert(
            url.to_string(),
            UrlFailure {
                error: error.clone(),
                streak,
                until: Instant::now() + hold,
            },
        );
        Some(hold)
    }

    /// A successful fetch ends the streak.
    pub fn clear(&self, url: &str) {
        self.entries.invalidate(url);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_class_has_its_lifetime() {
        let s = Duration::from_secs;
        assert_eq!(hold_for(&FetchError::NotFound(404), 1), Some(GONE));
        assert_eq!(hold_for(&FetchError::NotFound(410), 9), Some(GONE));
        assert_eq!(hold_for(&FetchError::NotAllowed("x".into()), 1), None);
        let backoffs: Vec<_> = (1..=8)
            .map(|n| hold_for(&FetchError::Status(503), n).unwrap())
            .collect();
        assert_eq!(
            backoffs,
            [s(1), s(2), s(4), s(8), s(16), s(32), s(60), s(60)]
        );
        assert_eq!(hold_for(&FetchError::Timeout, 3), Some(s(4)));
        let limited = |secs| FetchError::RateLimited {
            retry_after: Some(s(secs)),
        };
        assert_eq!(
            hold_for(&limited(30), 1),
            Some(s(30)),
            "Retry-After honoured"
        );
        assert_eq!(
            hold_for(&limited(0), 3),
            Some(s(4)),
            "never below the backoff"
        );
        assert_eq!(hold_for(&limited(86_400), 1), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn streaks_grow_and_success_clears_them() {
        let failures = OriginFailures::default();
        let url = "http://a.example/x.jpg";
        assert!(failures.active(url).is_none());
        failures.record(url, &FetchError::Status(500));
        let (entry, left) = failures.active(url).unwrap();
        assert_eq!(entry.streak, 1);
        assert!(left <= FIRST_BACKOFF);
        assert_eq!(
            failures.record(url, &FetchError::Status(502)),
            Some(Duration::from_secs(2))
        );
        failures.clear(url);
        assert!(failures.active(url).is_none());
        assert_eq!(
            failures.record(url, &FetchError::Status(502)),
            Some(FIRST_BACKOFF)
        );
    }
}

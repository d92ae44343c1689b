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
//!
//! On shared maps the held failures are the cluster's (issue 54): the pipeline reads a URL's
//! row in the maps' quotas before asking its origin and writes it after a failure
//! ([`SharedFailure`]), so a failing URL is asked once per backoff step by the whole cluster;
//! this memory keeps what the node learned, so that its next requests ask nobody.

use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::fetch::FetchError;

const GONE: Duration = Duration::from_secs(120);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);
/// Failure streaks are remembered this long after the last failure, so backoff keeps growing
/// for an origin that flaps slower than its backoff.
pub const STREAK_MEMORY: Duration = Duration::from_secs(3600);
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
        // Nothing was sent: the slots were busy (maybe with other origins), not this URL.
        FetchError::SlotWait => None,
        FetchError::NotFound(_) | FetchError::TooLarge { .. } => Some(GONE),
        FetchError::RateLimited {
            retry_after: Some(asked),
        }
        | FetchError::Busy {
            retry_after: asked, ..
        } => Some(backoff.max((*asked).min(MAX_RETRY_AFTER))),
        // The pause's own time, not the URL's backoff: the URL did nothing.
        FetchError::Paused { left } => Some((*left).min(MAX_RETRY_AFTER)),
        FetchError::RateLimited { retry_after: None }
        | FetchError::Status(_)
        | FetchError::Timeout
        | FetchError::TooSlow { .. }
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
        self.record_after(url, error, 0).map(|(hold, _)| hold)
    }

    /// [`OriginFailures::record`] of a failure that follows `prior` failures in a row known
    /// elsewhere (the cluster's): returns how long it is held and the streak it ends.
    pub fn record_after(
        &self,
        url: &str,
        error: &FetchError,
        prior: u32,
    ) -> Option<(Duration, u32)> {
        let streak = self.entries.get(url).map_or(0, |e| e.streak).max(prior) + 1;
        let hold = hold_for(error, streak)?;
        self.entries.insert(
            url.to_string(),
            UrlFailure {
                error: error.clone(),
                streak,
                until: Instant::now() + hold,
            },
        );
        Some((hold, streak))
    }

    /// Holds a failure another node recorded, for the `left` it has.
    pub fn adopt(&self, url: &str, shared: &SharedFailure, left: Duration) {
        self.entries.insert(
            url.to_string(),
            UrlFailure {
                error: shared.error.clone(),
                streak: shared.streak,
                until: Instant::now() + left,
            },
        );
    }

    /// A successful fetch ends the streak.
    pub fn clear(&self, url: &str) {
        self.entries.invalidate(url);
    }
}

/// A held failure as the maps keep it for the cluster: the error, encoded, and its streak.
#[derive(Debug, Clone)]
pub struct SharedFailure {
    pub error: FetchError,
    pub streak: u32,
}

/// The longest error text kept for the cluster (an error may quote a long URL).
const SHARED_TEXT_BYTES: usize = 512;

impl SharedFailure {
    /// The row's text: the error as JSON, its texts cut to [`SHARED_TEXT_BYTES`].
    pub fn encode(error: &FetchError) -> String {
        let cut = |t: &String| {
            let mut end = t.len().min(SHARED_TEXT_BYTES);
            while !t.is_char_boundary(end) {
                end -= 1;
            }
            t[..end].to_string()
        };
        let short = match error {
            FetchError::BadUrl(t) => FetchError::BadUrl(cut(t)),
            FetchError::NotAllowed(t) => FetchError::NotAllowed(cut(t)),
            FetchError::Connect(t) => FetchError::Connect(cut(t)),
            FetchError::Body(t) => FetchError::Body(cut(t)),
            FetchError::BadRedirect(t) => FetchError::BadRedirect(cut(t)),
            other => other.clone(),
        };
        serde_json::to_string(&short).unwrap_or_default()
    }

    /// A row's text read back; `None` for text this build cannot read (another release's).
    pub fn decode(text: &str, streak: u32) -> Option<SharedFailure> {
        let error = serde_json::from_str(text).ok()?;
        Some(SharedFailure { error, streak })
    }

    /// The key a URL's row is kept under: its digest (URLs may be kilobytes long).
    pub fn key(url: &str) -> String {
        crate::hash::ContentHash::of(url.as_bytes()).to_hex()
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
    fn shared_failures_round_trip_through_their_text() {
        for error in [
            FetchError::Status(503),
            FetchError::Connect("x".repeat(5000)),
            FetchError::Busy {
                status: 503,
                retry_after: Duration::from_secs(5),
            },
            FetchError::NotFound(404),
        ] {
            let text = SharedFailure::encode(&error);
            assert!(text.len() < 700, "{}", text.len());
            let back = SharedFailure::decode(&text, 3).unwrap();
            assert_eq!(back.streak, 3);
            assert_eq!(
                std::mem::discriminant(&back.error),
                std::mem::discriminant(&error)
            );
        }
        assert!(SharedFailure::decode("{\"Unknown\":1}", 1).is_none());
        let failures = OriginFailures::default();
        let url = "http://a.example/y.jpg";
        assert_eq!(
            failures.record_after(url, &FetchError::Status(500), 3),
            Some((Duration::from_secs(8), 4)),
            "the cluster's streak goes on"
        );
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

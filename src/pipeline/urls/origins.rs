//! Politeness to merchants' origins, held for the whole cluster (issue 54): every download
//! takes one of its origin's `fetch.per_host_concurrency` slots and a token of its
//! `fetch.per_host_rate` from the maps' quotas (PostgreSQL: every node's; the embedded maps:
//! this process's), and an origin that asks for a pause (`429`/`503` with `Retry-After`), or
//! refuses connections several times in a row, is paused for every node. A URL's held
//! failure is the cluster's too (`resolve.rs` reads and writes it through here).
//!
//! This process's own download slots (`fetch/politeness.rs`) are taken first: they bound
//! how many of its requests poll the shared slots. A node that cannot reach the maps' quotas
//! downloads under its own slots only (and says so in its log): the origin is then asked by
//! each node within its own bound, as before, rather than not at all.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use url::Url;

use crate::fetch::politeness::origin_of;
use crate::fetch::{FetchError, FetchOutcome, HopGuard, Validators};
use crate::maps::{Bucket, OriginSlot, OriginTurn, SlotTake};
use crate::negative::SharedFailure;
use crate::pipeline::claims::{new_token, Backoff};
use crate::pipeline::Pipeline;

/// A slot outlives the longest download by this much (no renewal: `fetch.timeout` bounds
/// the request its holder makes), so a dead node's slots come back soon after.
const SLOT_MARGIN: Duration = Duration::from_secs(5);
/// Connection failures in a row, on one node, that pause an origin for the cluster.
const REFUSALS_BEFORE_PAUSE: u32 = 3;
/// The first pause of an origin that refuses connections; each further failure in a row
/// doubles it, up to [`MAX_REFUSAL_PAUSE`].
const FIRST_REFUSAL_PAUSE: Duration = Duration::from_secs(2);
const MAX_REFUSAL_PAUSE: Duration = Duration::from_secs(60);
/// The longest pause an origin's `Retry-After` is granted (as `negative.rs` holds it).
const MAX_ASKED_PAUSE: Duration = Duration::from_secs(600);
/// Origins named in metrics, first come; the rest are counted as `other` (cardinality).
const NAMED_ORIGINS: usize = 50;

/// What a node keeps of its origins: connection failures in a row, the origins its
/// metrics name, and each named origin's requests, failures and time (the operator's page).
pub(in crate::pipeline) struct Origins {
    refusals: moka::sync::Cache<String, u32>,
    named: Mutex<HashSet<String>>,
    tallies: Mutex<HashMap<String, OriginTally>>,
}

/// One origin's downloads on this node (by its metrics label: at most [`NAMED_ORIGINS`]
/// and `other`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OriginTally {
    pub requests: u64,
    /// Requests that ended in an error (refused, timed out, an error status), not a `304`.
    pub failures: u64,
    /// Seconds from sending the request to its answer, summed.
    pub seconds: f64,
}

impl Default for Origins {
    fn default() -> Self {
        Origins {
            refusals: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_idle(Duration::from_secs(600))
                .build(),
            named: Mutex::new(HashSet::new()),
            tallies: Mutex::new(HashMap::new()),
        }
    }
}

impl Origins {
    /// `origin`'s label in metrics: itself while fewer than [`NAMED_ORIGINS`] are named.
    fn label(&self, origin: &str) -> String {
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        if named.contains(origin) {
            return origin.to_string();
        }
        if named.len() < NAMED_ORIGINS {
            named.insert(origin.to_string());
            return origin.to_string();
        }
        "other".to_string()
    }

    fn tally(&self, label: &str, seconds: f64, failed: bool) {
        let mut tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        let tally = tallies.entry(label.to_string()).or_default();
        tally.requests += 1;
        tally.failures += u64::from(failed);
        tally.seconds += seconds;
    }

    /// Every named origin's tally, by label.
    pub(in crate::pipeline) fn tallies(&self) -> Vec<(String, OriginTally)> {
        let tallies = self.tallies.lock().unwrap_or_else(|p| p.into_inner());
        tallies
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// How long an origin that refused `streak` connections in a row is paused.
fn refusal_pause(streak: u32) -> Duration {
    let doublings = streak.saturating_sub(REFUSALS_BEFORE_PAUSE).min(16);
    FIRST_REFUSAL_PAUSE
        .saturating_mul(1 << doublings)
        .min(MAX_REFUSAL_PAUSE)
}

/// When a download that starts waiting for its slots now gives the wait up: its request's
/// limit (`server.request_timeout`, issue 67), less a moment, so that its caller hears why
/// (504 `origin_timeout`) rather than the limit's bare 503. A batch's download is held to the
/// same bound, as its runs are.
pub(in crate::pipeline) fn slot_deadline(request_timeout: Duration) -> tokio::time::Instant {
    let margin = (request_timeout / 20).min(Duration::from_millis(250));
    tokio::time::Instant::now() + request_timeout.saturating_sub(margin)
}

/// The cluster's pauses, asked before a download follows a redirect to another origin: an
/// origin paused for asking so (or for refusing connections) is not asked through another
/// origin's redirect either.
struct PausedHops<'a> {
    pipeline: &'a Pipeline,
}

#[async_trait::async_trait]
impl HopGuard for PausedHops<'_> {
    async fn before_hop(&self, to: &Url) -> Result<(), FetchError> {
        let origin = origin_of(to);
        match self.pipeline.shared.maps.origin_pause(&origin).await {
            Ok(Some(left)) => Err(FetchError::Paused { left }),
            Ok(None) => Ok(()),
            // As for a turn: a node that cannot read the maps asks within its own bounds.
            Err(e) => {
                tracing::warn!(%origin, error = %e, "origin pause unread; the redirect is followed");
                Ok(())
            }
        }
    }
}

/// Why a download was not fetched: the origin failed (or was paused), or the URL's failure
/// is held by the cluster (with the time it has left).
pub(in crate::pipeline) enum NotFetched {
    Failed(FetchError),
    Held(SharedFailure, Duration),
}

impl Pipeline {
    /// Downloads `url` (conditionally with `validators`) politely: this node's slot, then
    /// the cluster's turn (one of the origin's slots and a token of its rate, unless it is
    /// paused or the URL's failure is held: one statement), then the request, timed from
    /// when it is sent. The wait for the slot and the turn ends at `deadline` (the request's:
    /// [`slot_deadline`]) with [`FetchError::SlotWait`]. With the answer, the streak of
    /// failures the cluster remembers for the URL (0: none), which a new failure extends.
    /// What the answer says of an origin (a pause, a refusal, a failure) is charged to the
    /// origin that gave it: after redirects, the last hop's.
    pub(in crate::pipeline) async fn download(
        &self,
        url: &Url,
        validators: Option<&Validators>,
        deadline: tokio::time::Instant,
    ) -> (Result<FetchOutcome, NotFetched>, u32) {
        let s = &self.shared;
        if let Err(e) = s.urls.fetcher.check_source(url) {
            return (Err(NotFetched::Failed(e)), 0);
        }
        let origin = origin_of(url);
        let label = s.urls.origins.label(&origin);
        let waited = Instant::now();
        let Some(_own) = s.urls.fetcher.slots.acquire(url, Some(deadline)).await else {
            self.slot_wait_ended(&label);
            return (Err(NotFetched::Failed(FetchError::SlotWait)), 0);
        };
        let (slot, streak) = match self.origin_turn(url, &origin, &label, deadline).await {
            Ok(turn) => turn,
            Err(not) => {
                match &not {
                    NotFetched::Failed(FetchError::Paused { .. }) => s.metrics.with(|| {
                        metrics::counter!("imgcas_origin_paused_total", "origin" => label.clone())
                            .increment(1);
                    }),
                    NotFetched::Failed(FetchError::SlotWait) => self.slot_wait_ended(&label),
                    _ => {}
                }
                return (Err(not), 0);
            }
        };
        let waited = waited.elapsed().as_secs_f64();
        s.metrics.with(|| {
            metrics::histogram!("imgcas_origin_slot_wait_seconds").record(waited);
        });
        let sent = Instant::now();
        let hops = PausedHops { pipeline: self };
        let answer = s.urls.fetcher.fetch_now(url, validators, Some(&hops)).await;
        let took = sent.elapsed().as_secs_f64();
        // The origin that answered: the one redirected to, when there were redirects.
        let (answered, answered_label) = match origin_of(&answer.from) {
            other if other != origin => {
                let other_label = s.urls.origins.label(&other);
                (other, other_label)
            }
            _ => (origin.clone(), label.clone()),
        };
        let failed = answer.result.is_err();
        s.urls.origins.tally(&answered_label, took, failed);
        s.metrics.with(|| {
            metrics::counter!("imgcas_origin_requests_total", "origin" => answered_label.clone())
                .increment(1);
            metrics::counter!("imgcas_origin_fetch_microseconds_total", "origin" => answered_label.clone())
                .increment((took * 1e6).round() as u64);
            if failed {
                metrics::counter!("imgcas_origin_failures_total", "origin" => answered_label.clone())
                    .increment(1);
            }
        });
        if let Some(slot) = slot {
            // Given back off the request's path: the answer does not wait for it (an
            // unreleased slot expires anyway).
            let maps = s.maps.clone();
            tokio::spawn(async move {
                if let Err(e) = maps.release_origin_slot(&slot).await {
                    tracing::warn!(origin = %slot.origin, error = %e, "origin slot not released; it expires");
                }
            });
        }
        self.origin_answered(&answered, &answered_label, &answer.result)
            .await;
        (answer.result.map_err(NotFetched::Failed), streak)
    }

    /// Counts a download that gave up waiting for a slot at its request's deadline.
    fn slot_wait_ended(&self, label: &str) {
        self.shared.metrics.with(|| {
            metrics::counter!("imgcas_origin_slot_timeouts_total", "origin" => label.to_string())
                .increment(1);
        });
    }

    /// The cluster's turn at `origin` for `url`: one of its slots with a token of its rate
    /// (`None` when the maps do not answer: this node's slot alone bounds the download),
    /// and the URL's remembered streak; or why not (paused, or the URL's failure held).
    async fn origin_turn(
        &self,
        url: &Url,
        origin: &str,
        label: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(Option<OriginSlot>, u32), NotFetched> {
        let past_deadline = || NotFetched::Failed(FetchError::SlotWait);
        let s = &self.shared;
        let fetch = &s.config.fetch;
        let rate_key = format!("rate:{origin}");
        // On a store of one process's own, the node's memory of failures is the whole truth.
        let url_key = s.maps.shared().then(|| SharedFailure::key(url.as_str()));
        let mut backoff = Backoff::new();
        loop {
            let token = new_token(&s.node_id);
            let turn = OriginTurn {
                origin,
                limit: u32::try_from(fetch.per_host_concurrency).unwrap_or(u32::MAX),
                owner: &s.node_id,
                token,
                ttl: fetch.timeout + SLOT_MARGIN,
                rate_key: &rate_key,
                rate: Bucket {
                    rate: fetch.per_host_rate,
                    burst: fetch.per_host_rate.max(1.0),
                },
                url_key: url_key.as_deref(),
            };
            let (take, held) = match s.maps.take_origin_turn(&turn).await {
                Ok(taken) => taken,
                Err(e) => {
                    tracing::warn!(%origin, error = %e, "origin slots unavailable; this node's own bound holds");
                    return Ok((None, 0));
                }
            };
            let streak = held.as_ref().map_or(0, |h| h.streak);
            match take {
                SlotTake::Granted(slot) => return Ok((Some(slot), streak)),
                SlotTake::Paused(left) => {
                    return Err(NotFetched::Failed(FetchError::Paused { left }))
                }
                SlotTake::Held(held) => match SharedFailure::decode(&held.error, held.streak) {
                    Some(failure) => return Err(NotFetched::Held(failure, held.left)),
                    // Another release's row: asked as if none were held.
                    None => return Ok((None, held.streak)),
                },
                SlotTake::Busy => {
                    s.metrics.with(|| {
                        metrics::counter!("imgcas_origin_slot_waits_total", "origin" => label.to_string())
                            .increment(1);
                    });
                    if tokio::time::timeout_at(deadline, backoff.wait())
                        .await
                        .is_err()
                    {
                        return Err(past_deadline());
                    }
                }
                SlotTake::RateWait(wait) => {
                    s.metrics.with(|| {
                        metrics::counter!("imgcas_origin_rate_waits_total", "origin" => label.to_string())
                            .increment(1);
                    });
                    let wait = wait.clamp(Duration::from_millis(1), Duration::from_secs(1));
                    if tokio::time::timeout_at(deadline, tokio::time::sleep(wait))
                        .await
                        .is_err()
                    {
                        return Err(past_deadline());
                    }
                }
            }
        }
    }

    /// What an origin's answer says of the origin as a whole: a pause it asked for, or one
    /// its refused connections call for, is every node's.
    async fn origin_answered(
        &self,
        origin: &str,
        label: &str,
        answer: &Result<FetchOutcome, FetchError>,
    ) {
        let s = &self.shared;
        let (pause, reason) = match answer {
            Err(e) if e.asked_pause().is_some() => (e.asked_pause(), "retry_after"),
            // A pause found on a redirect's hop is already the cluster's; the origin has not
            // answered, so its streak of refusals neither grows nor ends.
            Err(FetchError::Paused { .. }) => (None, ""),
            Err(FetchError::Connect(_)) => {
                let streak = s.urls.origins.refusals.get(origin).unwrap_or(0) + 1;
                s.urls.origins.refusals.insert(origin.to_string(), streak);
                let pause = (streak >= REFUSALS_BEFORE_PAUSE).then(|| refusal_pause(streak));
                (pause, "refused")
            }
            _ => {
                s.urls.origins.refusals.invalidate(origin);
                (None, "")
            }
        };
        let Some(pause) = pause.map(|p| p.min(MAX_ASKED_PAUSE)) else {
            return;
        };
        tracing::warn!(%origin, ?pause, reason, "origin paused for every node");
        s.metrics.with(|| {
            metrics::counter!("imgcas_origin_pauses_total", "origin" => label.to_string(), "reason" => reason)
                .increment(1);
        });
        if let Err(e) = s.maps.pause_origin(origin, pause).await {
            tracing::warn!(%origin, error = %e, "origin pause not shared");
        }
    }

    /// Shares `url`'s failure with the cluster (held for `hold`, number `streak` in a row).
    pub(in crate::pipeline) async fn share_failure(
        &self,
        url: &Url,
        error: &FetchError,
        streak: u32,
        hold: Duration,
    ) {
        let s = &self.shared;
        if !s.maps.shared() {
            return;
        }
        let (key, text) = (
            SharedFailure::key(url.as_str()),
            SharedFailure::encode(error),
        );
        let remember = crate::negative::STREAK_MEMORY;
        if let Err(e) = s
            .maps
            .hold_failure(&key, &text, streak, hold, remember)
            .await
        {
            tracing::warn!(url = %url, error = %e, "held failure not shared");
        }
    }

    /// Ends `url`'s streak for the cluster (it had one).
    pub(in crate::pipeline) async fn clear_shared_failure(&self, url: &Url) {
        let s = &self.shared;
        if let Err(e) = s
            .maps
            .clear_failure(&SharedFailure::key(url.as_str()))
            .await
        {
            tracing::warn!(url = %url, error = %e, "held failure not cleared");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_pause_longer_in_a_row() {
        let s = Duration::from_secs;
        let pauses: Vec<_> = (3..=9).map(refusal_pause).collect();
        assert_eq!(pauses, [s(2), s(4), s(8), s(16), s(32), s(60), s(60)]);
    }

    #[test]
    fn metrics_name_a_bounded_set_of_origins() {
        let origins = Origins::default();
        for i in 0..NAMED_ORIGINS {
            assert_eq!(
                origins.label(&format!("http://o{i}:80")),
                format!("http://o{i}:80")
            );
        }
        assert_eq!(origins.label("http://late:80"), "other");
        assert_eq!(origins.label("http://o3:80"), "http://o3:80");
    }
}

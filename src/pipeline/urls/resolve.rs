//! Steps 1–3: a source URL turned into the hash of its bytes, through the URL map. A known
//! URL is asked again only when its mapping is older than `revalidate_after` (or a caller
//! says its content may have changed), and then with a conditional request; a recent origin
//! failure answers without origin traffic while it is held. In canonical mode (`dedup.near`),
//! new bytes that are a near-duplicate of a stored original (the same picture everywhere, by
//! the pixel check) are mapped to it rather than stored, and a copy of a taken-down original
//! is refused (`download.rs`, where a download's bytes are taken in).

use std::time::Duration;

use bytes::Bytes;
use url::Url;

use imgcas_processors::{self as processors, sniff, SourceInfo};

use super::download::{Publish, Stored};
use super::origins::{slot_deadline, NotFetched};
use crate::admission::Tier;
use crate::error::Error;
use crate::fetch::{FetchError, FetchOutcome, Validators};
use crate::hash::ContentHash;
use crate::maps::{now_ms, OriginalInfo, UrlEntry};
use crate::negative::SharedFailure;
use crate::pipeline::claims::{Backoff, Lease, Turn};
use crate::pipeline::{blocking, Failure, Pipeline};
use crate::stats::Stats;

/// How a source URL was turned into a hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlState {
    /// Checked less than `revalidate_after` ago: no origin traffic.
    Fresh,
    /// The origin was asked again (a `304`, or a body that was hashed).
    Revalidated,
    /// First sighting of the URL: downloaded.
    Downloaded,
    /// The origin failed transiently; the stored mapping was used.
    Stale,
}

/// A URL turned into a hash.
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    /// The original the URL is served from: its own bytes' hash, or in canonical mode the
    /// original they are a near-duplicate of.
    pub hash: ContentHash,
    /// The hash of the URL's own bytes (differs from `hash` only for a canonical mapping).
    pub source: ContentHash,
    pub state: UrlState,
    /// The origin sent a body this time (not a `304`, nor a held or fresh mapping).
    pub downloaded: bool,
    /// The bytes were not stored before this resolution (a new original, not a duplicate).
    pub new_original: bool,
    /// The URL was mapped before, to other bytes.
    pub changed: bool,
    /// When the mapping was last confirmed with the origin (its freshness starts there).
    pub checked_at_ms: u64,
    /// Bytes the origin sent for this resolution (0 unless `downloaded`): what the tenant's
    /// budget is charged for the download, with the run that follows.
    pub fetched_bytes: u64,
}

impl Resolved {
    fn known(entry: &UrlEntry, state: UrlState) -> Self {
        Resolved {
            hash: entry.serving(),
            source: entry.hash,
            state,
            downloaded: false,
            new_original: false,
            changed: false,
            checked_at_ms: entry.checked_at_ms,
            fetched_bytes: 0,
        }
    }
}

fn is_fresh(entry: &UrlEntry, revalidate_after: Duration) -> bool {
    now_ms().saturating_sub(entry.checked_at_ms) < revalidate_after.as_millis() as u64
}

/// Hash and header facts of any bytes, given what the probe read of them, if anything
/// (downloads are stored even when they are no image: the processing error is then cached
/// per spec like any result).
fn describe(bytes: &[u8], probe: Option<(SourceInfo, (u32, u32))>) -> (ContentHash, OriginalInfo) {
    let (probe, upright) = probe.unzip();
    let hash = ContentHash::of(bytes);
    let info = OriginalInfo {
        // The probe's format; sniffed here only when the probe failed (bytes that are no
        // image, or a format this build does not decode, are stored and named all the same).
        format: probe.map(|p| p.format).or_else(|| sniff(bytes)),
        width: probe.map(|p| p.width),
        height: probe.map(|p| p.height),
        upright,
        has_alpha: probe.is_some_and(|p| p.has_alpha),
        bytes: bytes.len() as u64,
        first_seen_ms: now_ms(),
        facts: None,
        focus: None,
    };
    (hash, info)
}

impl Pipeline {
    /// [`describe`] on the blocking pool, holding a processing slot while it hashes and
    /// probes (issue 35): a probe is CPU like a run, so it waits its turn with the runs
    /// instead of beside them, and a flood of crafted uploads queues behind the cold
    /// requests that came first rather than sharing the cores with them. With `readable`,
    /// bytes the probe cannot read are refused (uploads) instead of described.
    pub(in crate::pipeline) async fn describe_in_turn(
        &self,
        bytes: Bytes,
        readable: bool,
    ) -> Result<(ContentHash, OriginalInfo), Error> {
        let limits = self.limits();
        let slot = self.shared.admission.side_work(Tier::Interactive).await;
        blocking(move || {
            let _slot = slot;
            let probe = match processors::probe_upright(&bytes, &limits) {
                Ok(info) => Some(info),
                Err(e) if readable => return Err(e.into()),
                Err(_) => None,
            };
            Ok(describe(&bytes, probe))
        })
        .await
    }

    /// The hash behind a URL, asking the origin only when the mapping is stale or when
    /// `recheck` asks for a conditional request regardless (ingest: the caller says the
    /// content may have changed).
    pub async fn resolve_url(&self, url: &Url, recheck: bool) -> Result<Resolved, Failure> {
        let s = &self.shared;
        let entry = s.maps.url(url.as_str()).await.map_err(Error::from)?;
        if let Some(entry) = &entry {
            if !recheck && is_fresh(entry, s.config.fetch.revalidate_after) {
                self.note_url_requested(url.as_str());
                return Ok(Resolved::known(entry, UrlState::Fresh));
            }
        }
        // A recent failure of this URL answers without origin traffic while it is held.
        if let Some((failure, left)) = s.urls.origin_failures.active(url.as_str()) {
            Stats::bump(&s.stats.origin_failure_hits);
            if let (true, Some(entry)) = (failure.error.is_transient(), &entry) {
                self.note_url_requested(url.as_str());
                return Ok(Resolved::known(entry, UrlState::Stale));
            }
            return Err(Failure {
                error: failure.error.into(),
                source_hash: None,
                cached: true,
                held_for: Some(left),
            });
        }
        // The moment this request arrived: another node's check that began later is as fresh
        // as this request needs, whatever `revalidate_after` says (issue 54).
        let arrived_ms = now_ms();
        // The wait for a download slot is the request's to bound, not the flight's.
        let deadline = slot_deadline(s.config.server.request_timeout);
        let (this, u) = (self.clone(), url.clone());
        // A forced recheck has flights of its own: a request's flight may answer from a
        // mapping another flight just refreshed, without asking the origin, and one that
        // started before the caller's news may have asked too early.
        let key = if recheck {
            format!("recheck {url}")
        } else {
            url.as_str().to_string()
        };
        let resolved = s
            .urls
            .url_flights
            .run(
                key,
                async move {
                    this.refresh_url(u, recheck, entry, arrived_ms, deadline)
                        .await
                },
                |m| Err(Error::Internal(format!("download task failed: {m}")).into()),
            )
            .await;
        if resolved.as_ref().is_ok_and(|r| r.changed) {
            // Remembered requests may name the URL's old bytes.
            self.forget_requests();
        }
        resolved
    }

    /// The one origin request of a flight: conditional when the URL is known.
    /// `seen` is the entry the flight's first caller found (shared maps: the claim below
    /// looks again once it is ours, so it is not read twice); `arrived_ms`, when that caller
    /// arrived; `deadline`, when its wait for a download slot ends ([`slot_deadline`]).
    async fn refresh_url(
        &self,
        url: Url,
        recheck: bool,
        seen: Option<UrlEntry>,
        arrived_ms: u64,
        deadline: tokio::time::Instant,
    ) -> Result<Resolved, Failure> {
        let s = &self.shared;
        let mut entry = match s.maps.shared() {
            true => seen,
            false => s.maps.url(url.as_str()).await.map_err(Error::from)?,
        };
        if let Some(e) = &entry {
            if !recheck && is_fresh(e, s.config.fetch.revalidate_after) {
                return Ok(Resolved::known(e, UrlState::Fresh));
            }
        }
        // One origin request in the cluster: the node that claims the URL asks; the others
        // wait for its entry (or for its claim to expire).
        // (A digest: claim keys are index entries, and URLs can be long.)
        let claim_key = format!("url:{}", ContentHash::of(url.as_str().as_bytes()));
        let mut lease = match self
            .url_turn(&url, &claim_key, recheck, arrived_ms, &mut entry)
            .await
        {
            Ok(Ok(lease)) => lease,
            Ok(Err(done)) => return Ok(done),
            Err(failure) => return self.maps_failed(&url, failure, entry, recheck),
        };
        let validators = entry.as_ref().map(|e| Validators {
            etag: e.etag.clone(),
            last_modified: e.last_modified.clone(),
        });
        // A check's time is when it began: the origin's answer says what the URL named then,
        // and a waiter that arrived before it adopts it (`refreshed`).
        let began_ms = now_ms();
        let (fetched, prior_streak) = self.download(&url, validators.as_ref(), deadline).await;
        let fetched = match fetched {
            Ok(fetched) => fetched,
            // A failure another node holds for this URL answers here too: the cluster asks
            // a failing URL once per backoff step (issue 54), not once per node.
            Err(NotFetched::Held(failure, left)) => {
                lease.release().await;
                return self.held_elsewhere(&url, failure, left, entry);
            }
            Err(NotFetched::Failed(e)) => {
                lease.release().await;
                return self.origin_failed(&url, e, entry, prior_streak).await;
            }
        };
        s.urls.origin_failures.clear(url.as_str());
        if prior_streak > 0 {
            self.clear_shared_failure(&url).await;
        }
        match fetched {
            FetchOutcome::NotModified { validators } => {
                Stats::bump(&s.stats.not_modified);
                // `NotModified` is only returned for conditional requests, which need an entry.
                let mut entry =
                    entry.ok_or_else(|| Error::Internal("304 without an entry".into()))?;
                entry.checked_at_ms = began_ms;
                entry.requested_at_ms = now_ms();
                // A 304 may carry fresher validators (RFC 9110 §15.4.5): the next conditional
                // request must use them, or the origin answers it with the whole body.
                if validators.etag.is_some() {
                    entry.etag = validators.etag;
                }
                if validators.last_modified.is_some() {
                    entry.last_modified = validators.last_modified;
                }
                match lease.settle().await {
                    // The origin confirmed the entry: it is served even when the maps cannot
                    // record the check now (the next request asks again).
                    Ok(_) => {
                        if let Err(e) = s.maps.put_url(url.as_str(), &entry).await {
                            tracing::warn!(url = %url, error = %e, "URL check not recorded");
                        }
                    }
                    Err(why) => tracing::warn!(%why, "URL check not published"),
                }
                lease.release().await;
                Ok(Resolved::known(&entry, UrlState::Revalidated))
            }
            FetchOutcome::Fetched { bytes, validators } => {
                let fetched_bytes = bytes.len() as u64;
                Stats::bump(&s.stats.downloads);
                Stats::add(&s.stats.downloaded_bytes, bytes.len() as u64);
                let publish = match lease.settle().await {
                    Ok(claim) => Publish::Url(claim),
                    Err(why) => {
                        tracing::warn!(%why, "URL mapping not published; the original is");
                        Publish::OriginalOnly
                    }
                };
                let publish_url = matches!(publish, Publish::Url(_));
                let stored = self
                    .store_download(&url, bytes, validators, began_ms, &publish)
                    .await;
                if let (
                    Publish::Url(Some(_)),
                    Ok(Stored {
                        claim_spent: true, ..
                    }),
                ) = (&publish, &stored)
                {
                    lease.given_up();
                }
                lease.release().await;
                if publish_url {
                    self.url_written().await;
                }
                let Stored {
                    serve: hash,
                    source,
                    new_original,
                    ..
                } = stored?;
                let state = if entry.is_some() {
                    UrlState::Revalidated
                } else {
                    UrlState::Downloaded
                };
                Ok(Resolved {
                    hash,
                    source,
                    state,
                    downloaded: true,
                    new_original,
                    changed: entry.is_some_and(|e| e.hash != source),
                    checked_at_ms: began_ms,
                    fetched_bytes,
                })
            }
        }
    }

    /// This node's turn to ask the origin about `url`: the lease once claimed (with `entry`
    /// reread for a recheck), or what another node's check gave while this one waited. An
    /// error is the maps' (a shared store that does not answer).
    async fn url_turn(
        &self,
        url: &Url,
        claim_key: &str,
        recheck: bool,
        arrived_ms: u64,
        entry: &mut Option<UrlEntry>,
    ) -> Result<Result<Lease, Resolved>, Failure> {
        let s = &self.shared;
        let mut backoff = Backoff::new();
        // A recheck asks the origin itself however fresh the entry (its caller says the
        // content may have changed since), so it takes a published result's tombstone over;
        // so does a node that finds the published entry gone already.
        let mut past_published = recheck;
        let lease = loop {
            match self.claim(claim_key.to_string(), past_published).await? {
                Turn::Ours(lease) => {
                    // A grant without a recheck means nobody published in the last seconds
                    // (see `maps/postgres/claims.rs`): the entry read before stands. A
                    // recheck reads the validators as they stand now (a node may have
                    // refreshed them while this one waited).
                    if lease.is_shared() && recheck {
                        *entry = s.maps.url_now(url.as_str()).await.map_err(Error::from)?;
                    }
                    break lease;
                }
                Turn::Theirs(owner) => {
                    past_published = recheck;
                    tracing::debug!(claim = claim_key, %owner, "waiting for another node's download");
                    Stats::bump(&s.stats.claim_waits);
                    backoff.wait().await;
                    if recheck {
                        continue;
                    }
                    if let Some(done) = self.refreshed_elsewhere(url, entry, arrived_ms).await? {
                        return Ok(Err(done));
                    }
                }
                Turn::Published => {
                    if let Some(done) = self.refreshed_elsewhere(url, entry, arrived_ms).await? {
                        return Ok(Err(done));
                    }
                    past_published = true;
                }
            }
        };
        Ok(Ok(lease))
    }

    /// A revalidation the maps could not coordinate (the claim, or the read of another
    /// node's check, failed: a shared store down). The entry held is served, stale, as for
    /// an origin failure: the variants a node already holds stay served through the outage
    /// (audit #3: with `revalidate_after=5s`, 775 of 875 such requests answered 503). A
    /// recheck (its caller says the content changed) and a URL with no entry fail.
    fn maps_failed(
        &self,
        url: &Url,
        failure: Failure,
        entry: Option<UrlEntry>,
        recheck: bool,
    ) -> Result<Resolved, Failure> {
        match (&failure.error, entry, recheck) {
            (Error::StorageUnavailable(why), Some(entry), false) => {
                let s = &self.shared;
                Stats::bump(&s.stats.stale_for_maps);
                tracing::warn!(url = %url, error = %why, "maps unavailable; serving the stored mapping");
                self.note_url_requested(url.as_str());
                Ok(Resolved::known(&entry, UrlState::Stale))
            }
            _ => Err(failure),
        }
    }

    /// The URL's entry, if another node refreshed it since this node read `seen` and that
    /// check is fresh enough for this request: it began after the request arrived
    /// (`arrived_ms`: as fresh as the request needs, whatever the rule), or it is fresh by
    /// this node's own rule (`revalidate_after`). What waiting for that node's download or
    /// check gave. A check newer than `seen` but neither (issue 28: it began before this
    /// request, and is older than the rule allows) is not adopted: the origin may have
    /// changed since it, and this node was about to ask; but its validators are, so that
    /// the ask is conditional (issue 54: under `revalidate_after = 0`, ten nodes made ten
    /// full downloads of one new URL).
    async fn refreshed_elsewhere(
        &self,
        url: &Url,
        seen: &mut Option<UrlEntry>,
        arrived_ms: u64,
    ) -> Result<Option<Resolved>, Failure> {
        let now = self
            .shared
            .maps
            .url_now(url.as_str())
            .await
            .map_err(Error::from)?;
        let adopted = self.refreshed(now.clone(), seen.as_ref(), arrived_ms);
        if adopted.is_none() {
            if let Some(now) = now {
                if seen
                    .as_ref()
                    .is_none_or(|old| now.checked_at_ms > old.checked_at_ms)
                {
                    *seen = Some(now);
                }
            }
        }
        Ok(adopted)
    }

    /// Whether `now`, the URL's entry as just read, is news against `seen` that a request
    /// that arrived at `arrived_ms` may adopt: a check where there was none, or a later
    /// check, begun after the request arrived or fresh by the rule.
    fn refreshed(
        &self,
        now: Option<UrlEntry>,
        seen: Option<&UrlEntry>,
        arrived_ms: u64,
    ) -> Option<Resolved> {
        let now = now.filter(|e| {
            e.checked_at_ms >= arrived_ms || is_fresh(e, self.shared.config.fetch.revalidate_after)
        });
        match (seen, now) {
            (None, Some(e)) => Some(Resolved::known(&e, UrlState::Downloaded)),
            (Some(old), Some(e)) if e.checked_at_ms > old.checked_at_ms => Some(Resolved {
                changed: e.hash != old.hash,
                ..Resolved::known(&e, UrlState::Revalidated)
            }),
            _ => None,
        }
    }

    /// Records an origin failure (held per its class, with backoff, after `prior` failures
    /// in a row the cluster knew of; shared with the other nodes) and serves the stored
    /// mapping instead when the failure says nothing about the content.
    async fn origin_failed(
        &self,
        url: &Url,
        error: FetchError,
        entry: Option<UrlEntry>,
        prior: u32,
    ) -> Result<Resolved, Failure> {
        let held = self
            .shared
            .urls
            .origin_failures
            .record_after(url.as_str(), &error, prior);
        // (A pause is the origin's, kept by every node already; the URL did nothing.)
        if let (Some((hold, streak)), false) = (held, matches!(error, FetchError::Paused { .. })) {
            self.share_failure(url, &error, streak, hold).await;
        }
        let held_for = held.map(|(hold, _)| hold);
        if let (true, Some(entry)) = (error.is_transient(), entry) {
            self.note_url_requested(url.as_str());
            tracing::warn!(url = %url, error = %error, retry_in = ?held_for, "origin failed; serving the stored mapping");
            return Ok(Resolved::known(&entry, UrlState::Stale));
        }
        if error.is_transient() {
            tracing::warn!(url = %url, error = %error, retry_in = ?held_for, "origin failed");
        }
        Err(Failure {
            error: error.into(),
            source_hash: None,
            cached: false,
            held_for,
        })
    }

    /// A failure another node holds for `url`, `left` to go: held here too, and answered as
    /// this node's own held failure (the stored mapping, for a transient one).
    fn held_elsewhere(
        &self,
        url: &Url,
        failure: SharedFailure,
        left: Duration,
        entry: Option<UrlEntry>,
    ) -> Result<Resolved, Failure> {
        let s = &self.shared;
        s.urls.origin_failures.adopt(url.as_str(), &failure, left);
        Stats::bump(&s.stats.origin_failure_hits);
        if let (true, Some(entry)) = (failure.error.is_transient(), &entry) {
            self.note_url_requested(url.as_str());
            return Ok(Resolved::known(entry, UrlState::Stale));
        }
        Err(Failure {
            error: failure.error.into(),
            source_hash: None,
            cached: true,
            held_for: Some(left),
        })
    }
}

//! The decision flow of SPEC "What it is", steps 1–4: URL → hash (URL map, conditional
//! fetch), hash → original (blob store), hash + spec → variant (variants map, processing).
//!
//! Writes keep one order: blob first, then the map entry that points at it. Work that many
//! requests may want at once runs once, through the single-flight maps in [`Shared`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};
use url::Url;

use imgcas_processors::{
    self as processors, sniff, Limits, OutputFormat, ResolvedSpec, SourceFormat, Spec,
    PROCESSOR_VERSION,
};

use crate::admission::Overloaded;
use crate::app::Shared;
use crate::blob::PutOutcome;
use crate::error::Error;
use crate::fetch::{FetchError, FetchOutcome, Validators};
use crate::hash::ContentHash;
use crate::maps::{now_ms, OriginalInfo, StoredVariant, UrlEntry, VariantKey};
use crate::stats::Stats;

/// What a request names.
#[derive(Debug, Clone)]
pub enum Source {
    Url(Url),
    Hash(ContentHash),
}

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

/// The `X-Imgcas-Cache` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Miss,
    Revalidated,
    Stale,
    ErrorHit,
}

impl CacheOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Revalidated => "revalidated",
            CacheOutcome::Stale => "stale",
            CacheOutcome::ErrorHit => "error-hit",
        }
    }

    /// The outcome of a request whose variant was already stored.
    fn stored(url_state: Option<UrlState>) -> Self {
        match url_state {
            None | Some(UrlState::Fresh) => CacheOutcome::Hit,
            Some(UrlState::Revalidated) => CacheOutcome::Revalidated,
            Some(UrlState::Downloaded) => CacheOutcome::Miss,
            Some(UrlState::Stale) => CacheOutcome::Stale,
        }
    }
}

/// A variant located but not yet loaded: enough to answer `If-None-Match`.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: VariantKey,
    pub spec: ResolvedSpec,
    /// Strong ETag (quoted), derived from the key.
    pub etag: String,
    pub url_state: Option<UrlState>,
    /// What the originals index says of the source (read once, in `locate`), for costing a
    /// processing run.
    pub source_format: Option<SourceFormat>,
    pub source_size: Option<(u32, u32)>,
}

impl Target {
    pub fn source_hash(&self) -> ContentHash {
        self.key.hash
    }

    /// The outcome to report when the client's copy is still good (`304`).
    pub fn unchanged_outcome(&self) -> CacheOutcome {
        CacheOutcome::stored(self.url_state)
    }
}

/// A processed image ready to send.
#[derive(Debug, Clone)]
pub struct Served {
    pub bytes: Bytes,
    pub format: OutputFormat,
    pub cache: CacheOutcome,
    /// This caller ran the processing (a concurrent caller that shared the run sees `Miss`
    /// too, but not this).
    pub ran_here: bool,
}

/// A failed request, with what is known of it for the response headers.
#[derive(Debug, Clone)]
pub struct Failure {
    pub error: Error,
    pub source_hash: Option<ContentHash>,
    /// Answered from a cache of errors (variants map or origin failures).
    pub cached: bool,
    /// How long the error is held for this URL: the response's `max-age` (and `Retry-After`
    /// for a 5xx), so shared caches and clients come back when the service would retry.
    pub held_for: Option<Duration>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure {
            error,
            source_hash: None,
            cached: false,
            held_for: None,
        }
    }
}

/// An original as the upload answer describes it.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub hash: ContentHash,
    pub info: OriginalInfo,
    pub duplicate: bool,
}

fn limits(shared: &Shared) -> Limits {
    Limits {
        max_pixels: shared.config.limits.max_pixels,
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f).await?
}

/// Steps 1–3 and the spec's resolution: which variant the request names.
pub async fn locate(
    shared: &Arc<Shared>,
    source: &Source,
    spec: &Spec,
    accept: Option<&str>,
) -> Result<Target, Failure> {
    let (hash, url_state) = match source {
        Source::Hash(hash) => (*hash, None),
        Source::Url(url) => {
            let resolved = resolve_url(shared, url, false).await?;
            (resolved.hash, Some(resolved.state))
        }
    };
    let with_hash = |error: Error| Failure {
        error,
        source_hash: Some(hash),
        cached: false,
        held_for: None,
    };
    let info = shared
        .maps
        .originals
        .get(&hash)
        .map_err(|e| with_hash(e.into()))?
        .ok_or_else(|| with_hash(Error::NotFound(format!("no original with hash {hash}"))))?;
    let source_format = info.format.as_deref().and_then(SourceFormat::from_name);
    let resolved = spec.resolve(
        source_format.and_then(SourceFormat::as_output),
        info.has_alpha,
        accept,
    );
    let key = VariantKey {
        hash,
        canonical_spec: resolved.canonical(),
        processor_version: PROCESSOR_VERSION,
    };
    let digest: [u8; 32] = Sha256::digest(key.to_bytes()).into();
    let etag = format!("\"{}\"", hex::encode(&digest[..16]));
    Ok(Target {
        key,
        spec: resolved,
        etag,
        url_state,
        source_format,
        source_size: info.width.zip(info.height),
    })
}

/// Step 4: the stored variant, or one processing run shared by every concurrent asker.
pub async fn variant(shared: &Arc<Shared>, target: &Target) -> Result<Served, Failure> {
    let hash = target.source_hash();
    let fail = |error: Error, cached: bool| Failure {
        error,
        source_hash: Some(hash),
        cached,
        held_for: None,
    };
    let stored = match shared.hot.get(&target.key) {
        Some(v) => {
            Stats::bump(&shared.stats.hot_hits);
            Some(v)
        }
        None => {
            Stats::bump(&shared.stats.variant_map_reads);
            let v = shared
                .maps
                .variants
                .get(&target.key)
                .map_err(|e| fail(e.into(), false))?;
            if let Some(v) = &v {
                shared.hot.insert(target.key.clone(), v.clone());
            }
            v
        }
    };
    let (stored, processed, ran_here) = match stored {
        Some(v) => (v, false, false),
        None => {
            let (result, led) = shared
                .variant_flights
                .run_led(
                    target.key.to_bytes(),
                    produce(shared.clone(), target.clone()),
                    |m| Err(Error::Internal(format!("processing task failed: {m}"))),
                )
                .await;
            let (v, processed) = result.map_err(|e| fail(e, false))?;
            (v, processed, processed && led)
        }
    };
    match stored {
        StoredVariant::Image { format, bytes, .. } => Ok(Served {
            bytes,
            format,
            ran_here,
            cache: if processed {
                CacheOutcome::Miss
            } else {
                CacheOutcome::stored(target.url_state)
            },
        }),
        StoredVariant::Failed { kind, message } => {
            Err(fail(Error::Process { kind, message }, !processed))
        }
    }
}

/// Processes one variant and stores the result (or the permanent error). Returns the stored
/// value and whether this call did the processing.
async fn produce(shared: Arc<Shared>, target: Target) -> Result<(StoredVariant, bool), Error> {
    let Target {
        key,
        spec,
        source_format,
        source_size,
        ..
    } = target;
    // A flight that landed between our miss and our joining has stored the answer.
    if let Some(v) = shared.maps.variants.get(&key)? {
        return Ok((v, false));
    }
    let limits = limits(&shared);
    // Unknown sizes (bytes no probe could read) are costed at the pixel limit.
    let side = (limits.max_pixels as f64).sqrt() as u32;
    let cost = processors::cost(source_format, source_size.unwrap_or((side, side)), &spec);
    let mut ticket = shared
        .admission
        .admit(cost)
        .map_err(|o| overloaded(&shared, o))?;
    let original = shared.blobs.get(&key.hash).await?.ok_or_else(|| {
        Error::StorageUnavailable(format!(
            "original {} is missing from the blob store",
            key.hash
        ))
    })?;
    let running = ticket.start().await.map_err(|o| overloaded(&shared, o))?;
    let waited = running.waited.as_secs_f64();
    shared.metrics.with(|| {
        metrics::histogram!("imgcas_queue_wait_seconds").record(waited);
    });
    let started = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        let _permit = running.permit;
        processors::process(&original, &spec, &limits)
    })
    .await?;
    let ran = started.elapsed();
    ticket.record(ran);
    drop(ticket);
    shared.metrics.with(|| {
        metrics::histogram!("imgcas_processing_seconds").record(ran.as_secs_f64());
    });
    Stats::bump(&shared.stats.processing_runs);
    let stored = match result {
        Ok(p) => StoredVariant::Image {
            format: p.format,
            width: p.width,
            height: p.height,
            bytes: Bytes::from(p.bytes),
        },
        Err(e) if e.is_permanent() => match Error::from(e) {
            Error::Process { kind, message } => StoredVariant::Failed { kind, message },
            other => return Err(other),
        },
        Err(e) => return Err(e.into()),
    };
    shared.hot.insert(key.clone(), stored.clone());
    let (maps, k, v) = (shared.maps.clone(), key.clone(), stored.clone());
    if let Err(e) = blocking(move || Ok(maps.variants.put(&k, &v)?)).await {
        tracing::warn!(error = %e, "variant not stored; serving it anyway");
    }
    Ok((stored, true))
}

/// A refusal from admission control, counted by reason.
fn overloaded(shared: &Shared, o: Overloaded) -> Error {
    shared.metrics.with(|| {
        metrics::counter!("imgcas_admission_rejections_total", "reason" => o.reason).increment(1);
    });
    Error::Overloaded {
        message: format!(
            "processing is at capacity ({}); retry in {} s",
            o.reason.replace('_', " "),
            o.retry_after.as_secs().max(1)
        ),
        retry_after_secs: o.retry_after.as_secs().max(1),
    }
}

fn is_fresh(entry: &UrlEntry, revalidate_after: Duration) -> bool {
    now_ms().saturating_sub(entry.checked_at_ms) < revalidate_after.as_millis() as u64
}

/// A URL turned into a hash.
#[derive(Debug, Clone, Copy)]
pub struct Resolved {
    pub hash: ContentHash,
    pub state: UrlState,
    /// The origin sent a body this time (not a `304`, nor a held or fresh mapping).
    pub downloaded: bool,
    /// The bytes were not stored before this resolution (a new original, not a duplicate).
    pub new_original: bool,
    /// The URL was mapped before, to other bytes.
    pub changed: bool,
}

impl Resolved {
    fn known(hash: ContentHash, state: UrlState) -> Self {
        Resolved {
            hash,
            state,
            downloaded: false,
            new_original: false,
            changed: false,
        }
    }
}

/// Steps 1–3: the hash behind a URL, asking the origin only when the mapping is stale or
/// when `recheck` asks for a conditional request regardless (ingest: the caller says the
/// content may have changed).
pub async fn resolve_url(
    shared: &Arc<Shared>,
    url: &Url,
    recheck: bool,
) -> Result<Resolved, Failure> {
    let revalidate_after = shared.config.fetch.revalidate_after;
    let entry = shared.maps.urls.get(url.as_str()).map_err(Error::from)?;
    if let Some(entry) = &entry {
        if !recheck && is_fresh(entry, revalidate_after) {
            return Ok(Resolved::known(entry.hash, UrlState::Fresh));
        }
    }
    // A recent failure of this URL answers without origin traffic while it is held.
    if let Some((failure, left)) = shared.origin_failures.active(url.as_str()) {
        Stats::bump(&shared.stats.origin_failure_hits);
        if let (true, Some(entry)) = (failure.error.is_transient(), &entry) {
            return Ok(Resolved::known(entry.hash, UrlState::Stale));
        }
        return Err(Failure {
            error: failure.error.into(),
            source_hash: None,
            cached: true,
            held_for: Some(left),
        });
    }
    let (s, u) = (shared.clone(), url.clone());
    shared
        .url_flights
        .run(url.as_str().to_string(), refresh_url(s, u, recheck), |m| {
            Err(Error::Internal(format!("download task failed: {m}")).into())
        })
        .await
}

async fn refresh_url(shared: Arc<Shared>, url: Url, recheck: bool) -> Result<Resolved, Failure> {
    let entry = shared.maps.urls.get(url.as_str()).map_err(Error::from)?;
    if let Some(e) = &entry {
        if !recheck && is_fresh(e, shared.config.fetch.revalidate_after) {
            return Ok(Resolved::known(e.hash, UrlState::Fresh));
        }
    }
    let validators = entry.as_ref().map(|e| Validators {
        etag: e.etag.clone(),
        last_modified: e.last_modified.clone(),
    });
    let fetched = match shared.fetcher.fetch(&url, validators.as_ref()).await {
        Ok(fetched) => fetched,
        Err(e) => return origin_failed(&shared, &url, e, entry),
    };
    shared.origin_failures.clear(url.as_str());
    match fetched {
        FetchOutcome::NotModified => {
            Stats::bump(&shared.stats.not_modified);
            // `NotModified` is only returned for conditional requests, which need an entry.
            let mut entry = entry.ok_or_else(|| Error::Internal("304 without an entry".into()))?;
            entry.checked_at_ms = now_ms();
            let (maps, u, e) = (shared.maps.clone(), url.to_string(), entry.clone());
            blocking(move || Ok(maps.urls.put(&u, &e)?)).await?;
            Ok(Resolved::known(entry.hash, UrlState::Revalidated))
        }
        FetchOutcome::Fetched { bytes, validators } => {
            Stats::bump(&shared.stats.downloads);
            Stats::add(&shared.stats.downloaded_bytes, bytes.len() as u64);
            let (hash, new_original) = store_download(&shared, &url, bytes, validators).await?;
            let state = if entry.is_some() {
                UrlState::Revalidated
            } else {
                UrlState::Downloaded
            };
            Ok(Resolved {
                hash,
                state,
                downloaded: true,
                new_original,
                changed: entry.is_some_and(|e| e.hash != hash),
            })
        }
    }
}

/// Records an origin failure (held per its class, with backoff) and serves the stored mapping
/// instead when the failure says nothing about the content.
fn origin_failed(
    shared: &Shared,
    url: &Url,
    error: FetchError,
    entry: Option<UrlEntry>,
) -> Result<Resolved, Failure> {
    let held_for = shared.origin_failures.record(url.as_str(), &error);
    if let (true, Some(entry)) = (error.is_transient(), entry) {
        tracing::warn!(url = %url, error = %error, retry_in = ?held_for, "origin failed; serving the stored mapping");
        return Ok(Resolved::known(entry.hash, UrlState::Stale));
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

/// Hashes a download, stores its bytes if new, then points the URL at it. Returns the hash
/// and whether the original is new (no entry in the originals index before).
async fn store_download(
    shared: &Arc<Shared>,
    url: &Url,
    bytes: Bytes,
    validators: Validators,
) -> Result<(ContentHash, bool), Error> {
    let limits = limits(shared);
    let b = bytes.clone();
    let (hash, info) = blocking(move || Ok(describe(&b, &limits))).await?;
    let size = bytes.len() as u64;
    match shared.blobs.put_if_absent(&hash, bytes).await? {
        PutOutcome::Created => Stats::bump(&shared.stats.originals_stored),
        PutOutcome::AlreadyPresent => Stats::add(&shared.stats.dedup_bytes_saved, size),
    }
    let entry = UrlEntry {
        hash,
        etag: validators.etag,
        last_modified: validators.last_modified,
        checked_at_ms: now_ms(),
    };
    let (maps, u) = (shared.maps.clone(), url.to_string());
    // The index, not the blob store's answer, decides "new": a blob a crash left without its
    // index entry is still news to every reader of the maps.
    let new_original = blocking(move || Ok(maps.record_download(&u, &entry, &info)?)).await?;
    Ok((hash, new_original))
}

/// Hash and header facts of any bytes (downloads are stored even when they are no image:
/// the processing error is then cached per spec like any result).
fn describe(bytes: &[u8], limits: &Limits) -> (ContentHash, OriginalInfo) {
    let hash = ContentHash::of(bytes);
    let probe = processors::probe(bytes, limits).ok();
    let info = OriginalInfo {
        format: sniff(bytes).map(|f| f.name().to_string()),
        width: probe.map(|p| p.width),
        height: probe.map(|p| p.height),
        has_alpha: probe.is_some_and(|p| p.has_alpha),
        bytes: bytes.len() as u64,
        first_seen_ms: now_ms(),
    };
    (hash, info)
}

/// `POST /v1/originals`: validates that the bytes are a readable image, stores them once.
pub async fn upload(shared: &Arc<Shared>, bytes: Bytes) -> Result<Uploaded, Error> {
    let limits = limits(shared);
    let b = bytes.clone();
    let (hash, info) = blocking(move || {
        processors::probe(&b, &limits)?;
        Ok(describe(&b, &limits))
    })
    .await?;
    if let Some(existing) = shared.maps.originals.get(&hash)? {
        // The entry may come from a download, committed without fsync: the answer promises
        // the original is kept, so make it durable first (a no-op when nothing is pending).
        let maps = shared.maps.clone();
        blocking(move || Ok(maps.flush()?)).await?;
        Stats::add(&shared.stats.dedup_bytes_saved, bytes.len() as u64);
        return Ok(Uploaded {
            hash,
            info: existing,
            duplicate: true,
        });
    }
    if shared.blobs.put_if_absent(&hash, bytes).await? == PutOutcome::Created {
        Stats::bump(&shared.stats.originals_stored);
    }
    let (maps, i) = (shared.maps.clone(), info.clone());
    let inserted = blocking(move || Ok(maps.originals.insert_durable(&hash, &i)?)).await?;
    let info = if inserted {
        info
    } else {
        shared.maps.originals.get(&hash)?.unwrap_or(info)
    };
    Ok(Uploaded {
        hash,
        info,
        duplicate: !inserted,
    })
}

//! Step 4 of docs/spec.md's flow: which variant a request names ([`Pipeline::locate`]), and that variant — stored
//! (hot cache, then the variants map) or made by one processing run that every concurrent
//! asker shares, admitted by cost ([`Pipeline::variant`]). Errors processing gives for good
//! are stored like results.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use url::Url;

use imgcas_processors::{
    self as processors, mezzanine, OutputFormat, ResolvedSpec, SourceFormat, SourceInfo, Spec,
    MEZZANINE_VERSION, PROCESSOR_VERSION,
};

use super::claims::{Backoff, Turn};
use super::{Failure, Pipeline, UrlState};
use crate::admission::Overloaded;
use crate::blob::{BlobStore, VariantObject};
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{Claim, MapStore, OriginalInfo, VariantBody, VariantKey, VariantRow};
use crate::stats::Stats;

/// SHA-256 of a variant's key: its ETag (the first half) and its blob-store name.
fn key_digest(key: &VariantKey) -> [u8; 32] {
    Sha256::digest(key.to_bytes()).into()
}

/// `row` as `maps` stores it: unchanged where the maps hold variant bytes; otherwise its image
/// bytes put in `blobs` first, and the row naming them returned.
pub(super) async fn row_for(
    maps: &dyn MapStore,
    blobs: &dyn BlobStore,
    key: &VariantKey,
    row: VariantRow,
) -> Result<VariantRow, Error> {
    match row {
        VariantRow::Image {
            format,
            width,
            height,
            body: VariantBody::Inline(bytes),
        } if !maps.holds_variant_bytes() => {
            let len = bytes.len() as u64;
            blobs.put_variant(&variant_object(key), bytes).await?;
            Ok(VariantRow::Image {
                format,
                width,
                height,
                body: VariantBody::InBlobStore { len },
            })
        }
        row => Ok(row),
    }
}

/// Where a variant's bytes live in the blob store, when the maps keep none.
pub(super) fn variant_object(key: &VariantKey) -> VariantObject {
    VariantObject {
        hash: key.hash,
        digest: key_digest(key),
    }
}

/// The variants-map key of an original's mezzanine: its own spec name, which no request's
/// canonical spec can equal (those always name a format), and the mezzanine's version.
pub(super) fn mezzanine_key(hash: &ContentHash) -> VariantKey {
    VariantKey {
        hash: *hash,
        canonical_spec: format!("mezzanine/v{MEZZANINE_VERSION}"),
        processor_version: PROCESSOR_VERSION,
    }
}

/// The header facts a mezzanine decision reads, from the originals index.
fn header_facts(info: &crate::maps::OriginalInfo) -> Option<SourceInfo> {
    Some(SourceInfo {
        format: info.format.as_deref().and_then(SourceFormat::from_name)?,
        width: info.width?,
        height: info.height?,
        has_alpha: info.has_alpha,
    })
}

/// [`Pipeline::produce`]'s future, boxed.
type Producing =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(VariantRow, bool), Error>> + Send>>;

/// What a variant is made from.
enum Route {
    Mezzanine,
    /// The original, with its bytes when deciding read them.
    Original(Option<Bytes>),
}

/// Work that makes a row of the variants map.
enum Job {
    /// A variant a request located.
    Variant(Box<Target>),
    /// An original's mezzanine.
    Mezzanine { hash: ContentHash, info: SourceInfo },
}

impl Job {
    fn key(&self) -> VariantKey {
        match self {
            Job::Variant(t) => t.key.clone(),
            Job::Mezzanine { hash, .. } => mezzanine_key(hash),
        }
    }
}

/// What a request names.
#[derive(Debug, Clone)]
pub enum Source {
    Url(Url),
    Hash(ContentHash),
}

/// Where an answer came from: what a client or CDN is told of the work behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Stored, and the source mapping was fresh (or the source was named by hash).
    Stored,
    /// New work: this variant was processed now, or its source downloaded for the first time.
    Made,
    /// Stored, after the origin was asked again about the source.
    Revalidated,
    /// Stored, with the source mapping used because the origin failed.
    Stale,
}

impl Provenance {
    /// The provenance of a stored variant, given how its source URL was resolved.
    fn stored(url_state: Option<UrlState>) -> Self {
        match url_state {
            None | Some(UrlState::Fresh) => Provenance::Stored,
            Some(UrlState::Revalidated) => Provenance::Revalidated,
            Some(UrlState::Downloaded) => Provenance::Made,
            Some(UrlState::Stale) => Provenance::Stale,
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
    pub source_has_alpha: bool,
    /// Frames of the source, from its container's headers, when the spec could animate
    /// (1 otherwise: whether it has more does not matter then).
    pub source_frames: u32,
    /// Canonical mode: the hash of the request's own bytes, when the variant is made from
    /// the original they are a near-duplicate of (`key.hash`).
    pub own_hash: Option<ContentHash>,
    /// The answer depends on the client's `Accept` (`format=auto`): responses say `Vary`.
    pub varies_by_accept: bool,
    /// The client hints the request's options consulted: responses say `Vary` for them too.
    pub vary_hints: processors::HintsConsulted,
    /// The source URL, when the request named one (its use is noted on remembered hits).
    pub url: Option<Arc<str>>,
    /// When the URL's mapping was last confirmed with the origin.
    pub checked_at_ms: Option<u64>,
    /// The request cache's epoch when locating began: a target located across a change
    /// that ends remembered requests is not remembered.
    pub(super) epoch: u64,
}

impl Target {
    /// The hash of the source's own bytes.
    pub fn source_hash(&self) -> ContentHash {
        self.own_hash.unwrap_or(self.key.hash)
    }

    /// The original whose pixels are used, when it is not the source's own bytes.
    pub fn canonical(&self) -> Option<ContentHash> {
        self.own_hash.map(|_| self.key.hash)
    }

    /// Frames the run makes: every frame of an animated spec, else one.
    pub fn frames_made(&self) -> u32 {
        if self.spec.animated {
            self.source_frames
        } else {
            1
        }
    }

    /// The provenance to report when the client's copy is still good (`304`).
    pub fn unchanged(&self) -> Provenance {
        Provenance::stored(self.url_state)
    }
}

/// A processed image ready to send.
#[derive(Debug, Clone)]
pub struct Served {
    pub bytes: Bytes,
    pub format: OutputFormat,
    pub provenance: Provenance,
    /// This caller ran the processing (a concurrent caller that shared the run sees `Made`
    /// too, but not this).
    pub ran_here: bool,
}

impl Pipeline {
    /// Steps 1–3 and the spec's resolution: which variant the request names.
    pub async fn locate(
        &self,
        source: &Source,
        spec: &Spec,
        accept: Option<&str>,
    ) -> Result<Target, Failure> {
        let epoch = self.request_epoch();
        let (mut hash, mut own, url_state, checked_at_ms) = match source {
            Source::Hash(hash) => (*hash, None, None, None),
            Source::Url(url) => {
                let resolved = self.resolve_url(url, false).await?;
                let own = (resolved.source != resolved.hash).then_some(resolved.source);
                (
                    resolved.hash,
                    own,
                    Some(resolved.state),
                    Some(resolved.checked_at_ms),
                )
            }
        };
        let with_hash = |hash: ContentHash, error: Error| Failure::from(error).with_hash(hash);
        let maps = &self.shared.maps;
        for listed in [Some(hash), own].into_iter().flatten() {
            if self.is_taken_down(&listed) {
                return Err(with_hash(listed, super::taken_down(&listed)));
            }
        }
        let mut info = maps
            .original(&hash)
            .await
            .map_err(|e| with_hash(hash, e.into()))?;
        if info.is_none() && url_state.is_none() {
            // A near-duplicate's own hash (canonical mode) stands for its canonical original.
            if let Some(canonical) = maps
                .alias(&hash)
                .await
                .map_err(|e| with_hash(hash, e.into()))?
            {
                (own, hash) = (Some(hash), canonical);
                if self.is_taken_down(&hash) {
                    return Err(with_hash(hash, super::taken_down(&hash)));
                }
                info = maps
                    .original(&hash)
                    .await
                    .map_err(|e| with_hash(hash, e.into()))?;
            }
        }
        let info = info.ok_or_else(|| {
            with_hash(
                hash,
                Error::NotFound(format!("no original with hash {hash}")),
            )
        })?;
        let source_format = info.format.as_deref().and_then(SourceFormat::from_name);
        let output = source_format.and_then(SourceFormat::as_output);
        let may_be_animated = source_format.is_some_and(SourceFormat::may_animate);
        let source_frames = if may_be_animated && spec.may_animate(output) {
            self.frames_of(&hash, &info)
                .await
                .map_err(|e| with_hash(hash, e))?
        } else {
            1
        };
        let resolved = spec.resolve_frames(output, info.has_alpha, source_frames, accept);
        let key = VariantKey {
            hash,
            canonical_spec: resolved.canonical(),
            processor_version: processors::processor_version(
                source_format,
                info.width.zip(info.height),
                &resolved,
            ),
        };
        let etag = format!("\"{}\"", hex::encode(&key_digest(&key)[..16]));
        Ok(Target {
            key,
            spec: resolved,
            etag,
            url_state,
            source_format,
            source_size: info.width.zip(info.height),
            source_has_alpha: info.has_alpha,
            source_frames,
            own_hash: own,
            varies_by_accept: spec.varies_by_accept(),
            vary_hints: spec.consulted,
            url: match source {
                Source::Url(url) => Some(url.as_str().into()),
                Source::Hash(_) => None,
            },
            checked_at_ms,
            epoch,
        })
    }

    /// An original's frame count: from its facts (a walk of its container's headers, kept
    /// with its index entry), or, before they are computed, from the same walk of its
    /// bytes now; never a decode. Facts of an older version serve too: the walk has only
    /// learnt to count the frames of a GIF cut short (1 before), and until the backfill
    /// computes them again such a GIF resolves, and is made, as the still it was.
    async fn frames_of(&self, hash: &ContentHash, info: &OriginalInfo) -> Result<u32, Error> {
        if let Some(facts) = &info.facts {
            return Ok(facts.picture.as_ref().map_or(1, |p| p.frames));
        }
        let bytes = self.original_bytes(hash).await?;
        Ok(processors::animation::frame_count(&bytes))
    }

    /// The stored variant, or one processing run shared by every concurrent asker.
    pub async fn variant(&self, target: &Target) -> Result<Served, Failure> {
        let s = &self.shared;
        let hash = target.source_hash();
        let fail = |error: Error, cached: bool| Failure {
            error,
            source_hash: Some(hash),
            cached,
            held_for: None,
        };
        let stored = match s.hot.get(&target.key) {
            Some(v) => {
                Stats::bump(&s.stats.hot_hits);
                Some(v)
            }
            None => {
                Stats::bump(&s.stats.variant_map_reads);
                let v = self
                    .stored_variant(&target.key)
                    .await
                    .map_err(|e| fail(e, false))?;
                if let Some(v) = &v {
                    s.hot.insert(target.key.clone(), v.clone());
                }
                v
            }
        };
        let (row, processed, ran_here) = match stored {
            Some(v) => {
                self.note_variant_served(&target.key);
                (v, false, false)
            }
            None => {
                let (this, t) = (self.clone(), target.clone());
                let (result, led) = s
                    .variant_flights
                    .run_led(
                        target.key.to_bytes(),
                        async move { this.produce(Job::Variant(Box::new(t))).await },
                        |m| Err(Error::Internal(format!("processing task failed: {m}"))),
                    )
                    .await;
                let (v, processed) = result.map_err(|e| fail(e, false))?;
                (v, processed, processed && led)
            }
        };
        match row {
            VariantRow::Image {
                format,
                body: VariantBody::Inline(bytes),
                ..
            } => Ok(Served {
                bytes,
                format,
                ran_here,
                provenance: if processed {
                    Provenance::Made
                } else {
                    Provenance::stored(target.url_state)
                },
            }),
            VariantRow::Image {
                body: VariantBody::InBlobStore { .. },
                ..
            } => Err(fail(
                Error::Internal("a variant's bytes were not loaded".into()),
                false,
            )),
            VariantRow::Failed { kind, message } => {
                Err(fail(Error::Process { kind, message }, !processed))
            }
        }
    }

    /// The variants map's row for `key`, with its image bytes in hand: rows of maps that keep
    /// bytes in the blob store are completed from there. A row whose bytes are gone (evicted
    /// by another node between the two reads, or lost) counts as absent: it is made again.
    async fn stored_variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, Error> {
        let s = &self.shared;
        let Some(row) = s.maps.variant(key).await? else {
            return Ok(None);
        };
        let VariantRow::Image {
            format,
            width,
            height,
            body: VariantBody::InBlobStore { len },
        } = row
        else {
            return Ok(Some(row));
        };
        match s.blobs.get_variant(&variant_object(key)).await? {
            Some(bytes) if bytes.len() as u64 == len => Ok(Some(VariantRow::Image {
                format,
                width,
                height,
                body: VariantBody::Inline(bytes),
            })),
            found => {
                tracing::warn!(
                    key = %variant_object(key).key(),
                    expected = len,
                    found = found.map(|b| b.len()),
                    "variant bytes missing or short in the blob store; making them again"
                );
                Ok(None)
            }
        }
    }

    /// Stores a processed result: where the maps keep no bytes, the bytes go to the blob
    /// store first and the row that names them after (under `claim`, when shared, so a
    /// node that lost its claim writes nothing over a newer owner's row).
    async fn store_variant(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: Option<&Claim>,
    ) -> Result<(), Error> {
        let s = &self.shared;
        let row = row_for(s.maps.as_ref(), s.blobs.as_ref(), key, row.clone()).await?;
        match claim {
            Some(claim) => s.maps.put_variant_claimed(key, &row, claim).await?,
            None => s.maps.put_variant(key, &row).await?,
        }
        Ok(())
    }

    /// Deletes the blob-store bytes of variants whose rows are gone, where the maps keep
    /// none themselves.
    pub(super) async fn drop_variant_bytes(&self, keys: &[VariantKey]) -> Result<(), Error> {
        let s = &self.shared;
        if s.maps.holds_variant_bytes() || keys.is_empty() {
            return Ok(());
        }
        let names: Vec<VariantObject> = keys.iter().map(variant_object).collect();
        Ok(s.blobs.delete_variants(&names).await?)
    }

    /// Makes one job's row and stores it (an image, or the permanent error). Returns the
    /// row and whether this call did the processing.
    async fn produce(&self, job: Job) -> Result<(VariantRow, bool), Error> {
        let key = job.key();
        let is_mezzanine = matches!(job, Job::Mezzanine { .. });
        // A flight that landed between our miss and our joining has stored the answer.
        if let Some(v) = self.stored_variant(&key).await? {
            return Ok((v, false));
        }
        // One run in the cluster: the node that claims the key processes; the others wait
        // for its row (or for its claim to expire).
        let claim_key = format!("variant:{}", hex::encode(key_digest(&key)));
        let mut backoff = Backoff::new();
        let mut lease = loop {
            match self.claim(claim_key.clone()).await? {
                Turn::Ours(lease) => {
                    // The owner before us may have published just before it released.
                    if lease.is_shared() {
                        if let Some(v) = self.stored_variant(&key).await? {
                            lease.release().await;
                            return Ok((v, false));
                        }
                    }
                    break lease;
                }
                Turn::Theirs(owner) => {
                    tracing::debug!(claim = %claim_key, %owner, "waiting for another node's run");
                    Stats::bump(&self.shared.stats.claim_waits);
                    backoff.wait().await;
                    if let Some(v) = self.stored_variant(&key).await? {
                        return Ok((v, false));
                    }
                }
            }
        };
        let row = match self.run(job).await {
            Ok(row) => row,
            Err(e) => {
                lease.release().await;
                return Err(e);
            }
        };
        // Taken down while it ran: nothing of it may be stored (the takedown has removed
        // what was, and would not see this).
        if self.is_taken_down(&key.hash) {
            lease.release().await;
            return Err(super::taken_down(&key.hash));
        }
        self.shared.hot.insert(key.clone(), row.clone());
        let this = self.clone();
        let publish = {
            let row = row.clone();
            async move {
                match lease.settle().await {
                    Ok(claim) => match this.store_variant(&key, &row, claim.as_ref()).await {
                        Ok(()) => match this.undo_if_taken_down(&key.hash).await {
                            Ok(false) => this.variant_stored(&key, &row).await,
                            Ok(true) => {}
                            Err(e) => tracing::warn!(error = %e, "takedown list not read"),
                        },
                        Err(e) => {
                            tracing::warn!(error = %e, "variant not stored; serving it anyway")
                        }
                    },
                    Err(why) => tracing::warn!(%why, "variant not published; serving it anyway"),
                }
                lease.release().await;
            }
        };
        if is_mezzanine {
            // The variants waiting for a mezzanine go on with it at once (it is in the hot
            // cache); storing it, under its claim, finishes behind them.
            self.in_background(publish);
        } else {
            publish.await;
        }
        Ok((row, true))
    }

    /// [`Pipeline::produce`] behind a pointer: a variant's run may produce its mezzanine,
    /// and a future cannot contain itself.
    fn produce_boxed(self, job: Job) -> Producing {
        Box::pin(async move { self.produce(job).await })
    }

    /// One processing run, admitted by its cost: the row it makes. A variant the mezzanine
    /// serves waits for the mezzanine first (stored, or built by its own run), holding no
    /// CPU slot meanwhile.
    async fn run(&self, job: Job) -> Result<VariantRow, Error> {
        let s = &self.shared;
        // From here to the end (the wait for a mezzanine included), decodes of this original
        // are kept for the other runs of it.
        let _interest = s.decodes.interest(match &job {
            Job::Variant(t) => t.key.hash,
            Job::Mezzanine { hash, .. } => *hash,
        });
        let limits = self.limits();
        // Unknown sizes (bytes no probe could read) are costed at the pixel limit.
        let side = (limits.max_pixels as f64).sqrt() as u32;
        // What the run reads: the mezzanine's bytes, or the original's (read now when
        // deciding took them, else once admitted).
        let (hash, mezzanine_bytes, read, cost) = match &job {
            Job::Variant(t) => {
                let size = t.source_size.unwrap_or((side, side));
                if t.spec.animated {
                    // Refused from the headers' frame count, before admission (its cost
                    // would be all the frames') and before any frame is decoded.
                    processors::animation::check(t.source_frames, size, &limits)?;
                }
                // A spec implying more work than `limits.max_cost` is refused before
                // admission and before any decode, a mezzanine's included (issue 28). Only
                // for a known size: bytes no probe could read get their own error.
                if t.source_size.is_some() {
                    let work = processors::cost(t.source_format, size, &t.spec)
                        .saturating_mul(u64::from(t.frames_made()));
                    processors::check_cost(work, &limits)?;
                }
                match self.route(t).await? {
                    Route::Mezzanine => match self.mezzanine(&t.key.hash).await? {
                        Ok(bytes) => {
                            let mezzanine = mezzanine::size_for(size);
                            let cost =
                                processors::cost(Some(SourceFormat::Jpeg), mezzanine, &t.spec);
                            (t.key.hash, Some(bytes), None, cost)
                        }
                        // The mezzanine's failure (the original does not decode) is this
                        // variant's too: the same bytes fail the same way.
                        Err(failed) => return Ok(failed),
                    },
                    Route::Original(read) => (
                        t.key.hash,
                        None,
                        read,
                        processors::cost(t.source_format, size, &t.spec)
                            .saturating_mul(u64::from(t.frames_made())),
                    ),
                }
            }
            Job::Mezzanine { hash, info } => (*hash, None, None, mezzanine::build_cost(info)),
        };
        let mut ticket = s.admission.admit(cost).map_err(|o| self.overloaded(o))?;
        let running = ticket.start().await.map_err(|o| self.overloaded(o))?;
        // The input is read only now, holding a CPU slot: runs waiting in the queue hold
        // no bytes, so memory is bounded by the slots, not by the queue (up to 1,024 waiters
        // of 32 MiB each otherwise).
        let from_mezzanine = mezzanine_bytes.is_some();
        let bytes = match mezzanine_bytes.or(read) {
            Some(bytes) => bytes,
            None => self.original_bytes(&hash).await?,
        };
        let waited = running.waited.as_secs_f64();
        s.metrics.with(|| {
            metrics::histogram!("imgcas_queue_wait_seconds").record(waited);
        });
        let started = Instant::now();
        let this = self.clone();
        let result = tokio::task::spawn_blocking(move || {
            let _permit = running.permit;
            let decodes = this.shared.decodes.of(hash, &this.shared.stats);
            match &job {
                Job::Variant(t) => {
                    let input = match from_mezzanine {
                        true => processors::Input::Mezzanine(&bytes),
                        false => processors::Input::Original(&bytes),
                    };
                    processors::process_input(input, &t.spec, &limits, &decodes)
                }
                Job::Mezzanine { .. } => mezzanine::build(&bytes, &limits, &decodes),
            }
        })
        .await?;
        let ran = started.elapsed();
        ticket.record(ran);
        drop(ticket);
        s.metrics.with(|| {
            metrics::histogram!("imgcas_processing_seconds").record(ran.as_secs_f64());
        });
        Stats::bump(&s.stats.processing_runs);
        match result {
            Ok(p) => Ok(VariantRow::Image {
                format: p.format,
                width: p.width,
                height: p.height,
                body: VariantBody::Inline(Bytes::from(p.bytes)),
            }),
            // A failure the configured limits decided is answered, not stored: under other
            // limits the same bytes and spec succeed. Its check reads only the header, so
            // answering it again costs little.
            Err(e) => match e.kind() {
                Some(kind) if !kind.depends_on_limits() => Ok(VariantRow::Failed {
                    kind,
                    message: e.to_string(),
                }),
                _ => Err(e.into()),
            },
        }
    }

    /// Whether a variant is made from its original's mezzanine: decided from the spec and the
    /// original's header facts alone (`processors::mezzanine::serves`), with the mezzanine
    /// switched on (`limits.mezzanine`). The originals index keeps the stored size, not the
    /// orientation: when that could change the answer, the original's header is read (and
    /// its bytes kept for the run, when they are its input).
    async fn route(&self, target: &Target) -> Result<Route, Error> {
        let facts = match (target.source_format, target.source_size) {
            (Some(format), Some((width, height))) => SourceInfo {
                format,
                width,
                height,
                has_alpha: target.source_has_alpha,
            },
            _ => return Ok(Route::Original(None)),
        };
        if !self.shared.config.limits.mezzanine || !mezzanine::may_serve(&facts, &target.spec) {
            return Ok(Route::Original(None));
        }
        // A mezzanine in memory carries the original's upright size: no need to read the
        // original for it (the common case of a second spec).
        if let Some(VariantRow::Image {
            body: VariantBody::Inline(framed),
            ..
        }) = self.shared.hot.get(&mezzanine_key(&target.key.hash))
        {
            if let Ok(m) = mezzanine::parse(&framed) {
                return Ok(
                    match mezzanine::serves(&facts, m.original_upright, &target.spec) {
                        true => Route::Mezzanine,
                        false => Route::Original(None),
                    },
                );
            }
        }
        let original = self.original_bytes(&target.key.hash).await?;
        let limits = self.limits();
        let (bytes, spec) = (original.clone(), target.spec.clone());
        // A header that does not open is the run's to report: it reads the original.
        let serves = super::blocking(move || {
            Ok(processors::decode::open(&bytes, &limits)
                .is_ok_and(|source| mezzanine::serves(&source.info, source.upright_size(), &spec)))
        })
        .await?;
        Ok(match serves {
            true => Route::Mezzanine,
            false => Route::Original(Some(original)),
        })
    }

    /// The mezzanine of original `hash`: stored (a row of the variants map under its own key,
    /// so it is claimed, counted against `limits.variants_max_bytes`, evicted and removed
    /// with its original like a variant), or built now by one run that every concurrent
    /// asker shares. `Ok(Err(row))`: the original cannot be made into one (a stored error).
    async fn mezzanine(&self, hash: &ContentHash) -> Result<Result<Bytes, VariantRow>, Error> {
        let s = &self.shared;
        let key = mezzanine_key(hash);
        let row = match s.hot.get(&key) {
            Some(row) => {
                self.note_variant_served(&key);
                row
            }
            None => {
                let info = self
                    .original(hash)
                    .await?
                    .and_then(|i| header_facts(&i))
                    .ok_or_else(|| {
                        Error::Internal(format!("original {hash} has no size for a mezzanine"))
                    })?;
                let job = Job::Mezzanine { hash: *hash, info };
                let (result, led) = s
                    .variant_flights
                    .run_led(key.to_bytes(), self.clone().produce_boxed(job), |m| {
                        Err(Error::Internal(format!("mezzanine task failed: {m}")))
                    })
                    .await;
                let (row, made) = result?;
                if made && led {
                    Stats::bump(&s.stats.mezzanines_built);
                } else if !made {
                    self.note_variant_served(&key);
                }
                row
            }
        };
        Ok(match row {
            VariantRow::Image {
                body: VariantBody::Inline(bytes),
                ..
            } => Ok(bytes),
            VariantRow::Image { .. } => {
                return Err(Error::Internal(
                    "a mezzanine's bytes were not loaded".into(),
                ))
            }
            failed @ VariantRow::Failed { .. } => Err(failed),
        })
    }

    /// A refusal from admission control, counted by reason.
    fn overloaded(&self, o: Overloaded) -> Error {
        self.shared.metrics.with(|| {
            metrics::counter!("imgcas_admission_rejections_total", "reason" => o.reason)
                .increment(1);
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
}

//! Step 4 of docs/spec.md's flow: which variant a request names ([`Pipeline::locate`], in
//! `locate.rs`), and that variant — stored (hot cache, then the variants map) or made by one
//! processing run that every concurrent asker shares, admitted by cost
//! ([`Pipeline::variant`], here). Errors processing gives for good are stored like results.
//!
//! The rooms: `locate.rs` (the key and ETag a request names), `stored.rs` (rows with their
//! bytes, in the maps or the blob store), `produce.rs` (one claimed, admitted run per key),
//! `route.rs` (original or mezzanine, and the mezzanine itself), `recall.rs` (what repeated
//! requests resolved to).
//!
//! This role owns the variants' state — the hot cache, one run and one read per key at a
//! time, and the request cache — in [`Variants`]; the other roles reach it through methods
//! (a removal empties the hot cache with [`Pipeline::forget_hot_variants`]).

mod locate;
mod produce;
mod recall;
mod route;
mod stored;

pub use recall::Recalled;

use std::sync::Arc;

use bytes::Bytes;
use url::Url;

use imgcas_processors::{self as processors, Chosen, OutputFormat, ResolvedSpec, SourceInfo};

use super::{Failure, Pipeline, UrlState};
use crate::admission::{Asker, Tenant, Tier};
use crate::coalesce::SingleFlight;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::hot::HotVariants;
use crate::maps::{VariantBody, VariantKey, VariantRow};
use crate::stats::Stats;

pub(in crate::pipeline) use stored::{row_for, variant_object, with_bytes_in_hand};

/// The variants' own state, composed into the pipeline.
pub(super) struct Variants {
    /// Recent variants in memory, in front of the variants map.
    hot: HotVariants,
    /// One processing run per variant key at a time.
    variant_flights: SingleFlight<Vec<u8>, Result<(VariantRow, bool), Error>>,
    /// One read of a stored variant (its row and its object) per key at a time, for the
    /// requests that miss it together (`stored.rs`).
    variant_reads: SingleFlight<VariantKey, Result<Option<VariantRow>, Error>>,
    /// What repeated requests resolved to (`recall.rs`).
    requests: recall::RequestCache,
}

impl Variants {
    /// `hot_cache_bytes`: the hot cache's size (`limits.hot_cache_bytes`).
    pub(super) fn new(hot_cache_bytes: u64) -> Variants {
        Variants {
            hot: HotVariants::new(hot_cache_bytes),
            variant_flights: SingleFlight::default(),
            variant_reads: SingleFlight::default(),
            requests: Default::default(),
        }
    }

    /// Requests waiting on another's run, and runs under way (for `/metrics`).
    pub(super) fn flights(&self) -> (usize, usize) {
        (
            self.variant_flights.waiters(),
            self.variant_flights.in_flight(),
        )
    }

    /// The hot cache's bytes (for `/metrics`).
    pub(super) fn hot_bytes(&self) -> u64 {
        self.hot.weighted_size()
    }
}

/// Work that makes a row of the variants map.
enum Job {
    /// A variant a request located, and who asks for it.
    Variant(Box<Target>, Asker),
    /// An original's mezzanine, for the asker of the variant that needs it.
    Mezzanine {
        hash: ContentHash,
        info: SourceInfo,
        asker: Asker,
    },
}

impl Job {
    fn key(&self) -> VariantKey {
        match self {
            Job::Variant(t, _) => t.key.clone(),
            Job::Mezzanine { hash, .. } => route::mezzanine_key(hash),
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
    /// Frames of the source, from its container's headers, when the spec could animate
    /// (1 otherwise: whether it has more does not matter then).
    pub source_frames: u32,
    /// The run, planned once from what the originals index says of the source (read once,
    /// here: format, stored and upright size, alpha; `plan.header`) and the spec
    /// (`processors::plan`): its geometry, route, cost and processor version, kept for the
    /// run.
    pub plan: processors::Plan,
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
    /// Bytes downloaded to locate it (0 unless this request's resolution downloaded): the
    /// run that follows charges them to its tenant's budget with its own cost.
    pub fetched_bytes: u64,
    /// The request cache's epoch when locating began: a target located across a change
    /// that ends remembered requests is not remembered.
    pub(super) epoch: u64,
    /// The tenant of a request that names nothing else: the source URL's host (`-` by hash).
    pub(in crate::pipeline) tenant: Tenant,
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

    /// Who asks for it when nobody says otherwise: an interactive request of the source
    /// URL's host (by hash: the anonymous tenant), from a client nobody named.
    pub fn asker(&self) -> Asker {
        Asker {
            tier: Tier::Interactive,
            tenant: self.tenant.clone(),
            payer: crate::admission::Payer::Anonymous(None),
        }
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
    /// For `q=auto`: the quality its search chose and the score reached.
    pub chosen: Option<Chosen>,
    pub provenance: Provenance,
    /// This caller ran the processing (a concurrent caller that shared the run sees `Made`
    /// too, but not this).
    pub ran_here: bool,
}

impl Pipeline {
    /// Empties the hot cache (a removal may have made any of it wrong).
    pub(in crate::pipeline) fn forget_hot_variants(&self) {
        self.shared.variants.hot.clear();
    }

    /// The stored variant, or one processing run shared by every concurrent asker; a run
    /// is admitted as the target's own asker's ([`Target::asker`]).
    pub async fn variant(&self, target: &Target) -> Result<Served, Failure> {
        self.variant_as(target, || target.asker()).await
    }

    /// [`Pipeline::variant`] with a run admitted as `asker`'s (its tier and tenant), asked
    /// only when there is a run to admit (a stored variant needs no asker).
    pub async fn variant_as(
        &self,
        target: &Target,
        asker: impl FnOnce() -> Asker,
    ) -> Result<Served, Failure> {
        let s = &self.shared;
        let hash = target.source_hash();
        let fail = |error: Error, cached: bool| Failure {
            error,
            source_hash: Some(hash),
            cached,
            held_for: None,
        };
        let hot_key = s.variants.hot.note(&target.key);
        let stored = match s.variants.hot.get(&target.key) {
            Some(v) => {
                Stats::bump(&s.stats.hot_hits);
                Some(v)
            }
            None => {
                // (The read puts what it finds in the hot cache.)
                self.stored_variant_shared(&target.key)
                    .await
                    .map_err(|e| fail(e, false))?
            }
        };
        if let (true, Some(v)) = (hot_key, &stored) {
            if s.variants.hot.pin(&target.key, v) {
                Stats::bump(&s.stats.hot_key_pins);
            }
        }
        let (row, processed, ran_here) = match stored {
            Some(v) => {
                self.note_variant_served(&target.key);
                (v, false, false)
            }
            None => {
                let (this, t, a) = (self.clone(), target.clone(), asker());
                let (result, led) = s
                    .variants
                    .variant_flights
                    .run_led(
                        target.key.to_bytes(),
                        async move { this.produce(Job::Variant(Box::new(t), a)).await },
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
                chosen,
                body: VariantBody::Inline(bytes),
                ..
            } => Ok(Served {
                bytes,
                format,
                chosen,
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
}

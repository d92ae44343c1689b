//! Facts of an original's pixels — placeholders (BlurHash, ThumbHash, dominant colour) and
//! its frames — computed once, by one small decode, and kept with its originals-index entry:
//! in the background right after a new original is stored (from the request's own decode,
//! reduced, when one comes: see `decoded`), by the backfill for originals
//! stored before facts existed, and on demand for an original asked about before either got
//! to it. Answering `info` or `format=json` then reads the entry, never decodes.

use base64::Engine;

use imgcas_processors::{self as processors, FACTS_VERSION};

use crate::admission::Tier;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{OriginalFacts, PictureFacts, VersionCursor, WALK_PAGE};
use crate::pipeline::walks::{Page, Walk};
use crate::pipeline::Pipeline;
use crate::stats::Stats;

impl Pipeline {
    /// An indexed original's facts: kept, or computed now and kept. `Ok(None)`: its bytes
    /// decode to no picture. `NotFound` for a hash not indexed.
    pub async fn facts_of(&self, hash: &ContentHash) -> Result<Option<PictureFacts>, Error> {
        let s = &self.shared;
        let info = s
            .maps
            .original(hash)
            .await?
            .ok_or_else(|| Error::NotFound(format!("no original with hash {hash}")))?;
        if let Some(kept) = info.current_facts() {
            return Ok(kept.picture.clone());
        }
        let (this, h) = (self.clone(), *hash);
        s.originals
            .facts_flights
            .run(h, async move { this.compute_facts(&h).await }, |m| {
                Err(Error::Internal(format!("facts task failed: {m}")))
            })
            .await
    }

    /// One flight of [`Pipeline::facts_of`]: decodes the original once (in a CPU slot,
    /// queued behind the requests that came with it) and keeps what it found.
    async fn compute_facts(&self, hash: &ContentHash) -> Result<Option<PictureFacts>, Error> {
        let s = &self.shared;
        // A flight that just ended may have kept them.
        if let Some(info) = s.maps.original(hash).await? {
            if let Some(kept) = info.current_facts() {
                return Ok(kept.picture.clone());
            }
        }
        let (bytes, _slot) = self.read_then_slot(hash).await?;
        let limits = self.limits();
        // Counted apart from the processing runs (`processing_runs`): this happens once per
        // original, off the request path. Its decode counts among `decodes_original`.
        Stats::bump(&s.stats.facts_computed);
        let this = self.clone();
        let h = *hash;
        // Background work: on the niced threads (`admission/niced.rs`).
        let computed = s
            .admission
            .run_as(Tier::Background, move || {
                let decodes = this.shared.decodes.of(h, &this.shared.stats);
                processors::facts::facts(&bytes, &limits, &decodes)
            })
            .await
            .map_err(|m| Error::Internal(format!("facts task failed: {m}")))?;
        let computed = match computed {
            Ok(facts) => Some(facts),
            // What the bytes are, for good: kept as no picture, never computed again.
            Err(e) if e.kind().is_some_and(|k| !k.depends_on_limits()) => None,
            // A limit (raising it may change the answer) or a fault of ours: not kept.
            Err(e) => {
                tracing::debug!(%hash, error = %e, "facts not computed");
                return Ok(None);
            }
        };
        let facts = OriginalFacts {
            version: FACTS_VERSION,
            picture: computed.map(|f| PictureFacts {
                dominant_color: f.dominant_hex(),
                thumbhash: base64::engine::general_purpose::STANDARD.encode(&f.thumbhash),
                blurhash: f.blurhash,
                has_alpha: f.has_alpha,
                frames: f.frames,
                duration_ms: f.duration_ms,
            }),
        };
        s.maps.put_facts(hash, &facts).await?;
        Ok(facts.picture)
    }

    /// Computes a newly stored original's facts after the current request. Its small
    /// decode is kept meanwhile for the fingerprint, which needs the same one; a request
    /// that decodes the original larger meanwhile leaves them its reduction instead.
    pub(in crate::pipeline) fn facts_in_background(&self, hash: ContentHash) {
        self.in_background_with_small_decode(hash, "facts not computed", move |this| async move {
            this.facts_of(&hash).await.map(drop)
        });
    }

    /// Computes the facts of every indexed original that has none (of this version);
    /// returns how many originals it looked at. Run at start, in the background, as a walk
    /// (`walks/`: one node of a cluster at a time, resumable, throttled). It reads only
    /// the originals the maps index as lacking current facts
    /// ([`crate::maps::Originals::lacking_facts`]), a page at a time: a start on a store
    /// whose facts are current reads one empty page. Originals first seen since it began
    /// are left to the storing path, which computes theirs already.
    pub async fn backfill_facts(&self) -> Result<u64, Error> {
        let began = crate::maps::now_ms();
        self.run_walk(Walk::Facts, |after| self.facts_page(after, began))
            .await
    }

    /// One page of [`Pipeline::backfill_facts`], after `after`.
    async fn facts_page(
        &self,
        after: Option<VersionCursor>,
        began: u64,
    ) -> Result<Page<VersionCursor>, Error> {
        let page = self
            .shared
            .maps
            .lacking_facts(FACTS_VERSION, after, WALK_PAGE)
            .await?;
        // The walk goes on past this page: originals whose facts could not be computed stay
        // lacking, and are not asked for twice.
        let Some(last) = page.last().copied() else {
            return Ok(None);
        };
        let rows = page.len() as u64;
        for cursor in page {
            let Some(kept) = self.shared.maps.original(&cursor.hash).await? else {
                continue;
            };
            if kept.current_facts().is_some() || kept.first_seen_ms >= began {
                continue;
            }
            // Through the flights, so a request asking for the same original meanwhile
            // shares the computation ([`Pipeline::settle`] waits for flights at shutdown).
            if let Err(e) = self.facts_of(&cursor.hash).await {
                // Bytes missing from the blob store: `verify` reports them.
                tracing::warn!(hash = %cursor.hash, error = %e, "facts not computed");
            }
        }
        Ok(Some((last, rows)))
    }
}

//! Mezzanine routing: whether a variant is made from its original or from the original's
//! mezzanine, and the mezzanine itself, stored under its own key or built by one shared run.

use bytes::Bytes;

use imgcas_processors::{
    self as processors, mezzanine, PlannedRoute, SourceInfo, MEZZANINE_VERSION, PROCESSOR_VERSION,
};

use super::{Job, Target};
use crate::admission::Asker;
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{VariantBody, VariantKey, VariantRow};
use crate::pipeline::Pipeline;
use crate::stats::Stats;

/// The variants-map key of an original's mezzanine: its own spec name, which no request's
/// canonical spec can equal (those always name a format), and the mezzanine's version.
pub(in crate::pipeline) fn mezzanine_key(hash: &ContentHash) -> VariantKey {
    VariantKey {
        hash: *hash,
        canonical_spec: format!("mezzanine/v{MEZZANINE_VERSION}"),
        processor_version: PROCESSOR_VERSION,
    }
}

/// The header facts a mezzanine decision reads, from the originals index.
pub(super) fn header_facts(info: &crate::maps::OriginalInfo) -> Option<SourceInfo> {
    Some(SourceInfo {
        format: info.format?,
        width: info.width?,
        height: info.height?,
        has_alpha: info.has_alpha,
    })
}

/// What a variant is made from.
pub(super) enum Route {
    Mezzanine,
    /// The original, with its bytes when deciding read them.
    Original(Option<Bytes>),
}

impl Pipeline {
    /// Whether a variant is made from its original's mezzanine: as its plan decided from
    /// the spec and the original's header facts alone (`processors::plan`, with the
    /// mezzanine switched on by `limits.mezzanine`). The originals index keeps the upright
    /// size too, so nothing is read here, except for an original indexed before it kept it,
    /// and only when the orientation could change the answer: then the original's header is
    /// read (and its bytes kept for the run, when they are its input).
    pub(super) async fn route(&self, target: &Target) -> Result<Route, Error> {
        let plan = &target.plan;
        match plan.route {
            PlannedRoute::Original => return Ok(Route::Original(None)),
            // Either way round (or the orientation known): the original's header is read
            // once, by the mezzanine's build (or not at all, once it is stored).
            PlannedRoute::Mezzanine => return Ok(Route::Mezzanine),
            PlannedRoute::ByOrientation => {}
        }
        // A mezzanine in memory carries the original's upright size: no need to read the
        // original for it (the common case of a second spec).
        if let Some(VariantRow::Image {
            body: VariantBody::Inline(framed),
            ..
        }) = self
            .shared
            .variants
            .hot
            .get(&mezzanine_key(&target.key.hash))
        {
            if let Ok(m) = mezzanine::parse(&framed) {
                return Ok(
                    match plan.mezzanine_serves(m.original_upright, &target.spec) {
                        true => Route::Mezzanine,
                        false => Route::Original(None),
                    },
                );
            }
        }
        let original = self.original_bytes(&target.key.hash).await?;
        let limits = self.limits();
        let (bytes, spec, plan) = (original.clone(), target.spec.clone(), plan.clone());
        // A header that does not open is the run's to report: it reads the original.
        let serves = crate::pipeline::blocking(move || {
            Ok(processors::decode::open(&bytes, &limits)
                .is_ok_and(|source| plan.mezzanine_serves(source.upright_size(), &spec)))
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
    pub(super) async fn mezzanine(
        &self,
        hash: &ContentHash,
        asker: &Asker,
    ) -> Result<Result<Bytes, VariantRow>, Error> {
        let s = &self.shared;
        let key = mezzanine_key(hash);
        let row = match s.variants.hot.get(&key) {
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
                let job = Job::Mezzanine {
                    hash: *hash,
                    info,
                    asker: asker.clone(),
                };
                let (result, led) = s
                    .variants
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
}

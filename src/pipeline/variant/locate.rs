//! Locating the variant a request names: the source resolved (steps 1–3 of docs/spec.md's
//! flow), takedowns checked, a watermark placed by its configuration, the spec resolved
//! against the original's facts, and the key and ETag derived.

use imgcas_processors::{self as processors, SourceFormat, Spec};

use super::stored::key_digest;
use super::{Source, Target};
use crate::admission::{Tenant, NOBODY};
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{OriginalInfo, VariantKey};
use crate::pipeline::{Failure, Pipeline};
use crate::stats::Stats;

impl Pipeline {
    /// Steps 1–3 and the spec's resolution: which variant the request names.
    pub async fn locate(
        &self,
        source: &Source,
        spec: &Spec,
        accept: Option<&str>,
    ) -> Result<Target, Failure> {
        let epoch = self.request_epoch();
        let (mut hash, mut own, url_state, checked_at_ms, fetched_bytes) = match source {
            Source::Hash(hash) => (*hash, None, None, None, 0),
            Source::Url(url) => {
                let resolved = self.resolve_url(url, false).await?;
                let own = (resolved.source != resolved.hash).then_some(resolved.source);
                (
                    resolved.hash,
                    own,
                    Some(resolved.state),
                    Some(resolved.checked_at_ms),
                    resolved.fetched_bytes,
                )
            }
        };
        let with_hash = |hash: ContentHash, error: Error| Failure::from(error).with_hash(hash);
        let maps = &self.shared.maps;
        match own {
            Some(own) => self.may_serve(&[hash, own])?,
            None => self.may_serve(&[hash])?,
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
                self.may_serve(&[hash])?;
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
        let placed;
        let spec = match &spec.shape.watermark {
            None => spec,
            Some(_) => {
                placed = self
                    .place_watermark(spec)
                    .await
                    .map_err(|e| with_hash(hash, e))?;
                &placed
            }
        };
        let source_format = info.format;
        let output = source_format.and_then(SourceFormat::as_output);
        let may_be_animated = source_format.is_some_and(SourceFormat::may_animate);
        let source_frames = if may_be_animated && spec.may_animate(output) {
            self.frames_of(&hash, &info)
                .await
                .map_err(|e| with_hash(hash, e))?
        } else {
            1
        };
        let resolved = spec
            .resolve_frames(
                output,
                info.has_alpha,
                source_frames,
                accept.map(|header| processors::Accept {
                    header,
                    order: &self.shared.config.formats.auto,
                }),
            )
            .with_targets(&self.shared.config.quality.targets())
            // The original's focal point, where the request leaves the window to it.
            .with_focus(spec, info.focus.map(|f| (f.x, f.y)));
        let header = processors::Header {
            format: source_format,
            size: info.width.zip(info.height),
            upright: info.upright,
            has_alpha: info.has_alpha,
            frames_made: if resolved.animated { source_frames } else { 1 },
        };
        let plan = processors::plan(
            &header,
            &resolved,
            &self.limits(),
            self.shared.config.limits.mezzanine,
        );
        Stats::bump(&self.shared.stats.plans_made);
        let key = VariantKey {
            hash,
            canonical_spec: resolved.canonical(),
            processor_version: plan.processor_version,
        };
        let etag = format!("\"{}\"", hex::encode(&key_digest(&key)[..16]));
        Ok(Target {
            key,
            spec: resolved,
            etag,
            url_state,
            source_frames,
            plan,
            own_hash: own,
            varies_by_accept: spec.varies_by_accept(),
            vary_hints: spec.consulted,
            url: match source {
                Source::Url(url) => Some(url.as_str().into()),
                Source::Hash(_) => None,
            },
            tenant: match source {
                Source::Url(url) => Tenant::from(url.host_str().unwrap_or(NOBODY)),
                Source::Hash(_) => Tenant::from(NOBODY),
            },
            checked_at_ms,
            fetched_bytes,
            epoch,
        })
    }

    /// An original's frame count: from its facts (a walk of its container's headers, kept
    /// with its index entry), or, before they are computed, from the same walk of its
    /// bytes now; never a decode. Facts of an older version serve too: the walk has only
    /// learnt to count the frames of a GIF cut short and of an AVIF sequence (1 before), and
    /// until the backfill computes them again such a file resolves, and is made, as the
    /// still it was.
    pub(super) async fn frames_of(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<u32, Error> {
        if let Some(facts) = &info.facts {
            return Ok(facts.picture.as_ref().map_or(1, |p| p.frames));
        }
        let bytes = self.original_bytes(hash).await?;
        Ok(processors::animation::frame_count(&bytes))
    }

    /// The spec with its watermark placed: the configuration's overlay (which must be stored
    /// and not taken down) and settings, for the request's overrides to complete.
    async fn place_watermark(&self, spec: &Spec) -> Result<Spec, Error> {
        let mut spec = spec.clone();
        let Some(mark) = spec.shape.watermark.as_mut() else {
            return Ok(spec);
        };
        let s = &self.shared;
        let watermark = s.structured.watermarks.get(&mark.name).ok_or_else(|| {
            Error::invalid_option("wm", format!("no watermark named `{}`", mark.name))
        })?;
        let overlay = watermark.overlay;
        self.may_serve(&[overlay])
            .map_err(|refused| refused.error)?;
        let info = s.maps.original(&overlay).await?.ok_or_else(|| {
            Error::NotFound(format!(
                "watermark `{}` names no stored original ({overlay})",
                mark.name
            ))
        })?;
        let pixels = match info.width.zip(info.height) {
            Some((w, h)) => u64::from(w) * u64::from(h),
            None => self.limits().max_pixels,
        };
        mark.place(&watermark.placement, pixels);
        Ok(spec)
    }
}

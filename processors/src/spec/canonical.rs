//! The two canonical forms: [`Spec::canonical`], the request as typed (what signatures
//! cover), and [`ResolvedSpec`], the spec decided against a source and a client, whose
//! [`ResolvedSpec::canonical`] string is what variant keys are made of.

use super::accept::negotiate_animated;
use super::options::request_parts;
use super::*;

impl Spec {
    /// The request as typed, normalized: sorted, defaults dropped. Two requests with the same
    /// canonical form are the same request (signatures are computed over it).
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        self.shape.parts(&mut parts);
        request_parts(self, &mut parts);
        join(parts)
    }

    /// Whether the response depends on the client's `Accept` header.
    pub fn varies_by_accept(&self) -> bool {
        self.format == FormatRequest::Auto
    }

    /// Resolves the request against its source and client: the output format becomes concrete
    /// (`original` follows `source_format`, `auto` follows `accept`), `dpr` is folded into the
    /// box, and options that cannot change the output are dropped.
    pub fn resolve(
        &self,
        source_format: Option<OutputFormat>,
        source_has_alpha: bool,
        accept: Option<Accept<'_>>,
    ) -> ResolvedSpec {
        self.resolve_frames(source_format, source_has_alpha, 1, accept)
    }

    /// Whether resolving may depend on the source's frame count: an animation is asked
    /// for (`animated=1`) and the output format may be one that animates. When not, a
    /// caller need not learn the frames (1 does).
    pub fn may_animate(&self, source_format: Option<OutputFormat>) -> bool {
        self.animated
            && match self.format {
                FormatRequest::Exact(f) => f.animates(),
                FormatRequest::Auto => true,
                FormatRequest::Original => source_format.is_some_and(OutputFormat::animates),
            }
    }

    /// [`Spec::resolve`] for a source of `source_frames` frames. An animated source asked
    /// for with `animated=1` in GIF or WebP resolves to an animated spec (`animated=1` in
    /// its canonical form); `format=auto` then picks among the formats that animate: WebP
    /// when the client takes it, else GIF. Every other case takes the first frame and
    /// resolves as [`Spec::resolve`] does, so first-frame variants keep their keys.
    pub fn resolve_frames(
        &self,
        source_format: Option<OutputFormat>,
        source_has_alpha: bool,
        source_frames: u32,
        accept: Option<Accept<'_>>,
    ) -> ResolvedSpec {
        let animate = self.animated && source_frames > 1;
        let fallback = if source_has_alpha {
            OutputFormat::Png
        } else {
            OutputFormat::Jpeg
        };
        let accept = accept.unwrap_or(Accept {
            header: "",
            order: &DEFAULT_ORDER,
        });
        let format = match self.format {
            FormatRequest::Exact(f) => f,
            FormatRequest::Original => source_format.unwrap_or(fallback),
            FormatRequest::Auto if animate => negotiate_animated(accept),
            FormatRequest::Auto => negotiate(accept, source_has_alpha),
        };
        let scale = |v: u32| ((f64::from(v) * self.dpr.as_f64()).round() as u32).max(1);
        let mut shape = self.shape.clone();
        shape.width = shape.width.map(scale);
        shape.height = shape.height.map(scale);
        let has_box = shape.width.is_some() || shape.height.is_some();
        if shape.width.is_none() || shape.height.is_none() {
            // With one side given (or none) every fit behaves like contain.
            shape.fit = Fit::Contain;
        }
        if shape.fit == Fit::Crop && shape.enlarge {
            // Nothing is cut to the source when the box may upscale: it is cover.
            shape.fit = Fit::Cover;
        }
        if !matches!(shape.fit, Fit::Cover | Fit::Pad | Fit::Crop | Fit::Auto) {
            shape.gravity = Gravity::Center;
        }
        if shape.fit == Fit::Pad && !shape.gravity.is_compass() {
            // Padding has no content to look at, nor a window to centre: the middle.
            shape.gravity = Gravity::Center;
        }
        if shape.gravity == Gravity::Auto {
            // No focal point given ([`ResolvedSpec::with_focus`] gives the original's): the
            // smart crop, which looks over the whole picture, not inside a crop's region.
            shape.gravity = match shape.crop {
                None => Gravity::Smart,
                Some(_) => Gravity::Center,
            };
        }
        shape.gravity_offset = match shape.fit {
            // Offsets move a cut window, in output pixels: scaled with the box.
            Fit::Cover | Fit::Crop | Fit::Auto => {
                let px = |v: i32| (f64::from(v) * self.dpr.as_f64()).round() as i32;
                (px(shape.gravity_offset.0), px(shape.gravity_offset.1))
            }
            _ => (0, 0),
        };
        shape.enlarge &= has_box;
        if shape.trim.is_none() {
            // No borders to find: their colour is moot.
            shape.trim_color = None;
        }
        if shape.crop.is_none_or(|region| region.at.is_some()) {
            // Placed by its corner, or absent: the crop's gravity is moot.
            shape.crop_gravity = Gravity::Center;
        }
        // JPEG XL at q=100 is its lossless mode (as cjxl reads it), so both spellings are one
        // variant.
        let lossless = format.has_lossless_mode()
            && (self.lossless
                || (format.facts().lossless_at_full_quality
                    && self.quality == Some(QualityRequest::Fixed(100))));
        let targets = AutoTargets::default();
        let quality = format
            .default_quality()
            .filter(|_| !lossless)
            .map(|default| match self.quality {
                Some(QualityRequest::Fixed(q)) => Quality::Fixed(q),
                Some(QualityRequest::Auto(level)) => Quality::Auto {
                    level,
                    target: targets.of(level),
                },
                None => Quality::Fixed(match self.save_data {
                    true => default.saturating_sub(SAVE_DATA_STEP).max(1),
                    false => default,
                }),
            });
        ResolvedSpec {
            shape,
            format,
            quality,
            lossless,
            progressive: self.progressive && format.facts().progressive,
            animated: animate && format.animates(),
        }
    }
}

/// The order a resolve without a client's `Accept` negotiates by (it matters only for the
/// fallback), made once rather than per request.
static DEFAULT_ORDER: std::sync::LazyLock<AutoFormats> =
    std::sync::LazyLock::new(AutoFormats::default);

/// Where a JPEG output's own loss hides the coarse shrink-on-load (a progressive JPEG decoded
/// at 1/8 from its DC scans alone, where a lossless output of the same spec decodes at 1/4):
/// from each reduction on, the highest quality up to which outputs, scored with SSIMULACRA2
/// against the lossless rendition of their spec, lost at most a point to it on average and 1.2
/// on any photo, at that reduction and every one measured above it, on 14 large progressive
/// camera photos and 14 shared 1.5–2 MP ones (the rule `bench/coarse_decode.py` prints; from
/// 14 on, up to q85, the large photos lost 0.51 on average and 1.19 at worst; at 12, q40
/// already lost 1.27 on one photo; docs/performance.md, "The coarse decode"). The loss shrinks as the reduction grows (the
/// 1/8 decode then holds more of the output's resolution): reduced 8 times, JPEGs lost 0.7–3.4
/// points on average over those photos and 2.7–8 over 1.5–2 MP ones. WebP and AVIF outputs
/// miss that bound at every quality even reduced 14 times, so they never take it.
const JPEG_HIDES_COARSE_DECODE: [(f64, u8); 1] = [(14.0, 85)];

/// Renders `name=value` pairs sorted by name, `&`-separated.
fn join(mut parts: Vec<(&'static str, String)>) -> String {
    parts.sort_by_key(|(name, _)| *name);
    let rendered: Vec<String> = parts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    rendered.join("&")
}

/// A spec with everything decided: what [`crate::process`] executes and what variant keys are
/// made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSpec {
    pub shape: Shape,
    pub format: OutputFormat,
    /// `None` for lossless formats.
    pub quality: Option<Quality>,
    /// Lossless WebP or JPEG XL (only ever set with a format that has a lossless mode).
    pub lossless: bool,
    /// Progressive JPEG (only ever set with `format == Jpeg`).
    pub progressive: bool,
    /// Every frame of an animated source, animated (only ever set with a format that
    /// animates, for a source of more than one frame).
    pub animated: bool,
}

impl ResolvedSpec {
    /// The original's focal point (`(x, y)` in ten-thousandths of the oriented source),
    /// where `spec` (the request this was resolved from) leaves the window's place to it:
    /// `gravity=auto`, or no gravity nor offsets at all, for a fit that cuts a window. The
    /// point is then part of the canonical form, so a variant made for one focal point is
    /// never served for another.
    pub fn with_focus(mut self, spec: &Spec, focus: Option<(u16, u16)>) -> ResolvedSpec {
        let left_to_it = spec.shape.gravity == Gravity::Auto
            || (!spec.gravity_said && spec.shape.gravity_offset == (0, 0));
        let cuts = matches!(self.shape.fit, Fit::Cover | Fit::Crop | Fit::Auto);
        if let (Some((x, y)), true, true) = (focus, left_to_it, cuts) {
            self.shape.gravity = Gravity::Focus { x, y };
        }
        self
    }

    /// Whether the run must see its source whole, at full scale: trimmed borders make the
    /// kept picture smaller than any plan made from the header knows, so neither
    /// shrink-on-load nor a mezzanine (whose decode would be the one trimmed) keeps its
    /// resolution margin.
    pub fn decodes_whole(&self) -> bool {
        self.shape.trim.is_some()
    }

    /// Whether the output's own loss hides a coarse shrink-on-load at this reduction (how many
    /// times smaller than the original the output is): a JPEG at a fixed quality up to what
    /// [`JPEG_HIDES_COARSE_DECODE`] measured for the reduction. Never under `q=auto`: its
    /// search scores every attempt against the pixels it encodes, and those must be the
    /// faithful picture (what a lossless output of the spec decodes), not a shortcut's, or a
    /// score that reads as the target is a worse picture than the target promises; the
    /// search's CPU is paid once per content and spec, so the full decode is affordable there.
    pub fn hides_coarse_decode(&self, reduction: f64) -> bool {
        if self.format != OutputFormat::Jpeg || self.lossless {
            return false;
        }
        let quality = match self.quality {
            Some(Quality::Fixed(q)) => q,
            Some(Quality::Auto { .. }) => return false,
            None => match self.format.default_quality() {
                Some(q) => q,
                None => return false,
            },
        };
        JPEG_HIDES_COARSE_DECODE
            .iter()
            .find(|(from, _)| reduction >= *from)
            .is_some_and(|(_, up_to)| quality <= *up_to)
    }

    /// Whether the coarse decode's rule before issue 68 took it for this spec: lossy JPEG or
    /// WebP at a fixed quality up to 90, or under `q=auto` at a target up to 80, at any
    /// reduction it applies to (8 to 16). Kept for [`crate::processor_version`], which must
    /// tell the variants whose bytes the new rule changed.
    pub(crate) fn hid_coarse_decode_before_68(&self) -> bool {
        let lossy =
            matches!(self.format, OutputFormat::Jpeg | OutputFormat::Webp) && !self.lossless;
        let quality = match self.quality {
            Some(Quality::Fixed(q)) => q,
            Some(Quality::Auto { target, .. }) if target <= 80 => 90,
            Some(Quality::Auto { .. }) => 100,
            None => self.format.default_quality().unwrap_or(100),
        };
        lossy && quality <= 90
    }

    /// This spec with its `q=auto` target taken from `targets` (the service's settings;
    /// [`Spec::resolve`] gives the defaults).
    pub fn with_targets(mut self, targets: &AutoTargets) -> ResolvedSpec {
        if let Some(Quality::Auto { level, target }) = &mut self.quality {
            *target = targets.of(*level);
        }
        self
    }

    /// The variant-key form: every field that shapes the output, defaults dropped, sorted.
    /// The format is always present.
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        self.shape.parts(&mut parts);
        parts.push(("format", self.format.name().into()));
        match (self.quality, self.format.default_quality()) {
            (Some(Quality::Fixed(q)), Some(default)) if q == default => {}
            (Some(quality), _) => parts.push(("q", quality.to_string())),
            (None, _) => {}
        }
        if self.lossless {
            parts.push(("lossless", "1".into()));
        }
        if self.progressive {
            parts.push(("progressive", "1".into()));
        }
        if self.animated {
            parts.push(("animated", "1".into()));
        }
        join(parts)
    }
}

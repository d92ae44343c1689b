//! A variant's plan: what its run is, decided once from the original's header facts (as the
//! originals index holds them) and the resolved spec, before anything is read. The geometry
//! (the fit in the original's upright coordinates, for each orientation the decision needs),
//! the route (original or mezzanine), the cost admission charges and `too_costly` checks,
//! and the processor version in the variant's key are all computed here, each geometry at
//! most once ([`Fits`]); the service keeps the [`Plan`] with its target and hands it to the
//! run ([`crate::process_planned`]), which takes its geometry from it instead of laying the
//! output out again.
//!
//! [`cost`] and [`crate::processor_version`] (`versions.rs`) remain callable alone (offline
//! runs, benchmarks): each is the plan's own computation on a memory of its own.

use crate::decode::{Limits, SourceInfo};
pub use crate::fits::Fit;
use crate::fits::Fits;
use crate::formats::SourceFormat;
use crate::geometry::layout;
use crate::limits::check_cost;
use crate::spec::ResolvedSpec;
use crate::versions::version_with;
use crate::{decode, mezzanine, ProcessError};

/// What the originals index says of an original: all a plan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Option<SourceFormat>,
    /// The stored size (before orientation), when a probe could read it.
    pub size: Option<(u32, u32)>,
    /// The size once orientation is applied, when the index keeps it.
    pub upright: Option<(u32, u32)>,
    pub has_alpha: bool,
    /// Frames the run makes: every frame of an animated spec, else 1.
    pub frames_made: u32,
}

/// Where a run takes its input, as far as the header tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannedRoute {
    Original,
    Mezzanine,
    /// The mezzanine serves one orientation of the original and not the other, and the
    /// index does not say which it has (an entry written before it kept the upright size):
    /// the caller reads an upright size (the original's header, a stored mezzanine's) and
    /// asks [`Plan::mezzanine_serves`].
    ByOrientation,
}

/// What a variant's run is (see the module's doc).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The original's facts it was made from.
    pub header: Header,
    /// The processor version in the variant's key ([`crate::processor_version`]).
    pub processor_version: u32,
    /// The run's work from the original, in pixel-equivalents, frames included ([`cost`]);
    /// an unknown size is costed at the pixel limit.
    pub cost: u64,
    /// The header gave a size: only then is [`Plan::cost`] checked against
    /// `limits.max_cost` before the run (bytes no probe could read get their own error).
    pub size_known: bool,
    pub route: PlannedRoute,
    /// The run's work from the mezzanine, when the route may take it.
    pub mezzanine_cost: Option<u64>,
    /// Bytes the run holds at its peak from the original ([`memory`]).
    pub memory: u64,
    /// Bytes the run holds at its peak from the mezzanine, when the route may take it.
    pub mezzanine_memory: Option<u64>,
    /// A drawing's own size and the size it is drawn at ([`vector_size`]).
    pub drawing: Option<((u32, u32), (u32, u32))>,
    /// The reduction from which the mezzanine serves, when it may.
    mezzanine_from: Option<f64>,
    fits: Vec<Fit>,
}

/// The plan of a variant of an original with `header`, for `spec`, under `limits`;
/// `mezzanine`: whether mezzanines are on (`limits.mezzanine`).
pub fn plan(header: &Header, spec: &ResolvedSpec, limits: &Limits, mezzanine: bool) -> Plan {
    let mut fits = Fits::new(spec);
    let processor_version = version_with(header.format, header.size, spec, &mut fits);
    // Unknown sizes (bytes no probe could read) are costed at the pixel limit.
    let side = (limits.max_pixels as f64).sqrt() as u32;
    let size = header.size.unwrap_or((side, side));
    let (drawing, cost) = cost_with(header.format, size, spec, &mut fits);
    let cost = cost.saturating_mul(u64::from(header.frames_made.max(1)));
    let memory = memory_with(header.format, size, spec, &mut fits);
    let facts = match (header.format, header.size) {
        (Some(format), Some((width, height))) if mezzanine => Some(SourceInfo {
            format,
            width,
            height,
            has_alpha: header.has_alpha,
        }),
        _ => None,
    };
    let mezzanine_from = facts.as_ref().and_then(|f| mezzanine::serves_from(f, spec));
    let route = match (mezzanine_from, header.size) {
        (Some(from), Some((w, h))) => {
            let mut serves = |u| fits.at(u).reduction() >= from;
            match (serves((w, h)), serves((h, w)), header.upright) {
                (false, false, _) => PlannedRoute::Original,
                (true, true, _) => PlannedRoute::Mezzanine,
                (_, _, Some(upright)) if serves(upright) => PlannedRoute::Mezzanine,
                (_, _, Some(_)) => PlannedRoute::Original,
                (_, _, None) => PlannedRoute::ByOrientation,
            }
        }
        _ => PlannedRoute::Original,
    };
    let mezzanine_cost = (route != PlannedRoute::Original).then(|| {
        let mezzanine = mezzanine::size_for(size);
        cost_with(Some(SourceFormat::Jpeg), mezzanine, spec, &mut fits).1
    });
    let mezzanine_memory = (route != PlannedRoute::Original).then(|| {
        let mezzanine = mezzanine::size_for(size);
        memory_with(Some(SourceFormat::Jpeg), mezzanine, spec, &mut fits)
    });
    // The run lays the output out on the upright size (a drawing's drawn size): ready for it.
    match drawing {
        Some((_, drawn)) => fits.at(drawn),
        None => fits.at(header.upright.unwrap_or(size)),
    };
    Plan {
        header: *header,
        processor_version,
        cost,
        size_known: header.size.is_some(),
        route,
        mezzanine_cost,
        memory,
        mezzanine_memory,
        drawing,
        mezzanine_from,
        fits: fits.done,
    }
}

impl Plan {
    /// Refuses a run over `limits.max_cost` when the size is known.
    pub fn check_cost(&self, limits: &Limits) -> Result<(), ProcessError> {
        match self.size_known {
            true => check_cost(self.cost, limits),
            false => Ok(()),
        }
    }

    /// Whether the mezzanine serves the original once its upright size is known (for
    /// [`PlannedRoute::ByOrientation`]).
    pub fn mezzanine_serves(&self, upright: (u32, u32), spec: &ResolvedSpec) -> bool {
        self.mezzanine_from.is_some_and(|from| {
            let reduction = match self.fit_at(upright) {
                Some(fit) => fit.reduction(),
                None => Fits::new(spec).at(upright).reduction(),
            };
            reduction >= from
        })
    }

    /// The fit planned for an input of upright size `at`, if the plan computed it.
    pub fn fit_at(&self, at: (u32, u32)) -> Option<Fit> {
        self.fits.iter().find(|f| f.at == at).copied()
    }

    /// The size a drawing of `own` size is drawn at, if the plan computed it.
    pub fn drawn_from(&self, own: (u32, u32)) -> Option<(u32, u32)> {
        self.drawing.filter(|d| d.0 == own).map(|d| d.1)
    }

    /// The work of drawing this variant's vector source (see [`drawing_cost`]) at the size
    /// the plan draws it (laid out again only for a drawing whose header gives another size
    /// than the index said); 0 for a raster source.
    pub fn drawing_cost(
        &self,
        bytes: &[u8],
        spec: &ResolvedSpec,
        limits: &Limits,
    ) -> Result<u64, ProcessError> {
        drawing_work_of(bytes, limits, |own| {
            self.drawn_from(own)
                .unwrap_or_else(|| vector_size(own, spec))
        })
    }
}

/// The size a vector source of `own` size is drawn at for `spec`: its own, scaled up by what
/// the spec's box asks of it (as if `enlarge=1`), so that the run's plan on it only reduces
/// or crops, and never enlarges a raster. A vector source is never enlarged as pixels are.
pub fn vector_size(own: (u32, u32), spec: &ResolvedSpec) -> (u32, u32) {
    let mut enlarged = spec.clone();
    enlarged.shape.enlarge = true;
    let (rotated, plan, _) = layout(own, &enlarged, false);
    let reduction = plan.reduction(rotated);
    if !(reduction.is_finite() && reduction > 0.0 && reduction < 1.0) {
        return own;
    }
    let scale = |side: u32| ((f64::from(side) / reduction).round() as u32).max(1);
    (scale(own.0), scale(own.1))
}

/// What a run will cost, in pixel-equivalents: the larger of the decoded source (after
/// shrink-on-load, which only JPEG has) and the output, which a decode, a resize and a JPEG
/// encode touch about once each, plus the output's pixels again for each pass the rest of
/// the spec implies ([`output_passes`]: encoders dearer than JPEG's, blur and sharpen). The
/// service admits processing work by it and refuses a spec over `limits.max_cost`
/// (`too_costly`) before any decode. `size` is the stored source size; unknown sizes should
/// be passed as the pixel limit.
pub fn cost(format: Option<SourceFormat>, size: (u32, u32), spec: &ResolvedSpec) -> u64 {
    cost_with(format, size, spec, &mut Fits::new(spec)).1
}

/// [`cost`] with the plan's fits; also the drawing's own and drawn size, for a vector source.
#[allow(clippy::type_complexity)]
fn cost_with(
    format: Option<SourceFormat>,
    size: (u32, u32),
    spec: &ResolvedSpec,
    fits: &mut Fits<'_>,
) -> (Option<((u32, u32), (u32, u32))>, u64) {
    let (w, h) = (size.0.max(1), size.1.max(1));
    // A vector source's decode is its drawing, at the size the spec asks.
    let drawing = match format {
        Some(f) if f.is_vector() => Some(((w, h), vector_size((w, h), spec))),
        _ => None,
    };
    let (w, h) = drawing.map_or((w, h), |d| d.1);
    let fit = fits.at((w, h));
    let denominator = match format.is_some_and(SourceFormat::shrinks_on_load) {
        true => u64::from(fit.denominator(spec)),
        false => 1,
    };
    // A watermark's overlay is decoded whole, by its own size.
    let overlay = spec.shape.watermark.as_ref().map_or(0, |w| w.source.pixels);
    let decoded = (u64::from(w) * u64::from(h) / (denominator * denominator))
        .saturating_mul(decode_weight(format))
        .saturating_add(overlay);
    let (ow, oh) = fit.plan.output_size();
    let output = u64::from(ow) * u64::from(oh);
    let cost = decoded
        .max(output)
        .saturating_add(output.saturating_mul(output_passes(spec, output)))
        .max(1);
    (drawing, cost)
}

/// How many pixel-equivalents a decoded pixel of `format` costs (its room's
/// [`SourceFormat::decode_weight`]); 1 for a format not known.
pub fn decode_weight(format: Option<SourceFormat>) -> u64 {
    format.map_or(1, SourceFormat::decode_weight)
}

pub use crate::formats::JXL_DECODE_WEIGHT;
pub use crate::limits::RUN_BASE_BYTES;

/// Bytes a run holds at its peak, from the same sizes as its [`cost`]: the decoded picture at
/// its decoder's bytes per pixel ([`decode_bytes_per_pixel`]), the output's pixels through
/// resizing and its encoder ([`output_bytes_per_pixel`], a `q=auto` search's attempts
/// included), and [`RUN_BASE_BYTES`] for the codecs'
/// own state. What admission holds against `limits.max_memory` (audit #4: admission counted
/// pixels, and two 49 MP runs of 1.5 and 1.8 GB on two slots took the machine's memory).
pub fn memory(format: Option<SourceFormat>, size: (u32, u32), spec: &ResolvedSpec) -> u64 {
    memory_with(format, size, spec, &mut Fits::new(spec))
}

fn memory_with(
    format: Option<SourceFormat>,
    size: (u32, u32),
    spec: &ResolvedSpec,
    fits: &mut Fits<'_>,
) -> u64 {
    let (w, h) = (size.0.max(1), size.1.max(1));
    let (w, h) = match format {
        Some(f) if f.is_vector() => vector_size((w, h), spec),
        _ => (w, h),
    };
    let fit = fits.at((w, h));
    let denominator = match format.is_some_and(SourceFormat::shrinks_on_load) {
        true => u64::from(fit.denominator(spec)),
        false => 1,
    };
    let decoded = u64::from(w) * u64::from(h) / (denominator * denominator);
    let (ow, oh) = fit.plan.output_size();
    let output = u64::from(ow) * u64::from(oh);
    let overlay = spec.shape.watermark.as_ref().map_or(0, |w| w.source.pixels);
    decoded
        .saturating_mul(decode_bytes_per_pixel(format))
        .saturating_add(output.saturating_mul(output_bytes_per_pixel(spec, output)))
        .saturating_add(overlay.saturating_mul(8))
        .saturating_add(RUN_BASE_BYTES)
}

/// Bytes a decoder holds per pixel of its picture at its peak (its room's
/// [`SourceFormat::decode_bytes_per_pixel`]); 8 for a format not known.
pub fn decode_bytes_per_pixel(format: Option<SourceFormat>) -> u64 {
    format.map_or(8, SourceFormat::decode_bytes_per_pixel)
}

/// Bytes a run holds per output pixel: the resized picture and its copy (8), the encoder's
/// working memory (AVIF and lossless JPEG XL keep several planes and their transforms: 49 MP
/// outputs peaked at 1.5 and 1.8 GB, audit #4), and for a `q=auto` search the reference and
/// one attempt's encode and decode more.
pub fn output_bytes_per_pixel(spec: &ResolvedSpec, output: u64) -> u64 {
    let encoder = spec.format.encoder_bytes_per_pixel(spec.lossless);
    let search = match search_passes(spec, encoder, output) {
        0 => 0,
        _ => 8 + encoder + 16,
    };
    8 + encoder + search
}

/// How many times the output's pixels are charged beyond the first, by what the spec asks of
/// them: measured on a 14 MP photo against its decode and JPEG encode (issue 28: a cost by
/// pixels alone let an 8192×6000 GIF take 37 s of a slot it was charged 1 s for). The
/// encoder's, as its room measured them ([`crate::encoders::Facts::passes`]), the search's
/// and the shaping options' own passes ([`Shape::filter_passes`]).
fn output_passes(spec: &ResolvedSpec, output: u64) -> u64 {
    let encoder = spec.format.encoder_passes(spec.lossless, spec.animated);
    encoder + search_passes(spec, encoder, output) + spec.shape.filter_passes()
}

/// What a `q=auto` search adds (0 without one, for an animation, whose frames are not
/// searched, and for an output too large to search, [`crate::auto_quality::searches`]): the metric's reference side once, then for each attempt it may make, another
/// encode, a decode of its bytes and a comparison. Measured at 512 px against the decode and
/// JPEG encode of a camera photo: the reference about 2 passes, a decode and comparison 4.
fn search_passes(spec: &ResolvedSpec, encoder: u64, output: u64) -> u64 {
    match spec.quality {
        Some(crate::spec::Quality::Auto { .. })
            if !spec.animated && crate::auto_quality::searches(output) =>
        {
            let attempts = u64::from(crate::auto_quality::max_attempts(spec.format)) + 1;
            2 + attempts * (4 + encoder.max(1))
        }
        _ => 0,
    }
}

/// The work of drawing a vector source for `spec`, beyond the pixels [`cost`] counts for it
/// (text laid out, paths, gradients, layers, filters: see `formats/svg.rs`), read from its
/// bytes; 0 for a raster source. The service adds it to a run's cost before admission, so a
/// drawing is charged, or refused as `too_costly`, at the size it will be drawn.
pub fn drawing_cost(
    bytes: &[u8],
    spec: &ResolvedSpec,
    limits: &Limits,
) -> Result<u64, ProcessError> {
    drawing_work_of(bytes, limits, |own| vector_size(own, spec))
}

/// The drawing work of `bytes` at the size `drawn` gives for its own; 0 for a raster source.
fn drawing_work_of(
    bytes: &[u8],
    limits: &Limits,
    drawn: impl FnOnce((u32, u32)) -> (u32, u32),
) -> Result<u64, ProcessError> {
    let source = decode::open(bytes, limits)?;
    if !source.info.format.is_vector() {
        return Ok(0);
    }
    Ok(source.drawing_work(drawn(source.upright_size())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::processor_version;
    use crate::{Limits, ProcessFailure};

    use crate::spec::resolved_for_jpeg as resolved;

    #[test]
    fn only_variants_whose_bytes_changed_take_a_later_version() {
        let jpeg = Some(SourceFormat::Jpeg);
        let png = Some(SourceFormat::Png);
        let version = |format, size, query: &[(&str, &str)]| {
            processor_version(format, size, &resolved(query))
        };
        // Small JPEGs, and large ones barely reduced: unchanged; 1/8 from 16 on, as before.
        assert_eq!(version(jpeg, Some((1600, 1200)), &[("w", "400")]), 4);
        assert_eq!(version(jpeg, Some((1200, 1800)), &[("w", "64")]), 4);
        assert_eq!(version(jpeg, Some((4000, 3000)), &[("w", "1500")]), 4);
        // Once made from the mezzanine, or from a 1/4 decode of a progressive file.
        assert_eq!(version(jpeg, Some((4000, 3000)), &[("w", "800")]), 5);
        assert_eq!(
            version(jpeg, Some((4000, 3000)), &[("w", "200"), ("q", "70")]),
            5
        );
        // Unknown size: counted in. Other formats, and bytes of no known format: unchanged.
        assert_eq!(version(None, None, &[("w", "400")]), 4);
        // The coarse decode only where measured to be hidden: reduced 8 to 16 times, a JPEG
        // above its reduction's quality, a WebP, a `q=auto` output take the 1/4 decode again;
        // JPEGs the rule still lets keep their version, as do other originals.
        assert_eq!(version(jpeg, Some((2400, 1600)), &[("w", "250")]), 12);
        assert_eq!(version(jpeg, None, &[("w", "400")]), 12);
        for output in [
            &[("format", "webp")][..],
            &[("format", "webp"), ("q", "40")],
            &[("format", "jpeg"), ("q", "auto")],
            &[("format", "webp"), ("q", "auto:low")],
        ] {
            let reduced_10 = [&[("w", "400")][..], output].concat();
            assert_eq!(version(jpeg, Some((4000, 3000)), &reduced_10), 12);
            assert_eq!(version(jpeg, None, &reduced_10), 12);
            assert_eq!(version(png, Some((4000, 3000)), &reduced_10), 4);
            let reduced_2 = [&[("w", "2000")][..], output].concat();
            assert_eq!(version(jpeg, Some((4000, 3000)), &reduced_2), 4);
        }
        assert_eq!(
            version(jpeg, Some((4000, 3000)), &[("w", "400"), ("q", "40")]),
            12
        );
        assert_eq!(version(png, Some((4000, 3000)), &[("w", "400")]), 4);
        // Every progressive JPEG output, of any original (its scan script).
        for format in [jpeg, png, None] {
            let progressive = [("w", "400"), ("progressive", "1")];
            assert_eq!(version(format, Some((1600, 1200)), &progressive), 8);
        }
        // Every blurred or sharpened output (box passes).
        for option in ["blur", "sharpen"] {
            for format in [jpeg, png, None] {
                let spec = [("w", "400"), (option, "2"), ("format", "avif")];
                assert_eq!(version(format, Some((1600, 1200)), &spec), 9);
            }
        }
        // Every AVIF output, of any original (libaom speed 7).
        for format in [jpeg, png, None] {
            let avif = [("w", "400"), ("format", "avif")];
            assert_eq!(version(format, Some((1600, 1200)), &avif), 7);
        }
        // Outputs whose own loss does not hide the DC scans' 1/8, reduced 8 to 16 times of a
        // JPEG: back at 1/4. Reduced less, or of other originals, they keep their version.
        for output in [&[("format", "png")][..], &[("format", "jpeg"), ("q", "95")]] {
            let reduced_10 = [&[("w", "400")][..], output].concat();
            assert_eq!(version(jpeg, Some((4000, 3000)), &reduced_10), 7);
            assert_eq!(version(jpeg, None, &reduced_10), 7);
            assert_eq!(version(png, Some((4000, 3000)), &reduced_10), 4);
            let reduced_2 = [&[("w", "2000")][..], output].concat();
            assert_eq!(version(jpeg, Some((4000, 3000)), &reduced_2), 4);
        }
        // Every variant of a JPEG XL original (decoded from 11 on).
        for spec in [&[("w", "400")][..], &[("blur", "2"), ("format", "avif")]] {
            assert_eq!(
                version(Some(SourceFormat::Jxl), Some((4032, 3024)), spec),
                11
            );
        }
        // Every variant of a HEIC or SVG original (decoded from 10 on; refused before).
        for format in [Some(SourceFormat::Heic), Some(SourceFormat::Svg)] {
            for spec in [&[("w", "400")][..], &[("blur", "2"), ("format", "avif")]] {
                assert_eq!(version(format, Some((4032, 3024)), spec), 10);
                assert_eq!(version(format, None, spec), 10);
            }
        }
    }

    #[test]
    fn cost_counts_decoded_pixels_after_shrink_on_load() {
        let thumb = resolved(&[("w", "400")]);
        let full = 4000 * 3000;
        // A 10× reduction decodes JPEG at 1/4: 1000×750 pixels.
        assert_eq!(
            cost(Some(SourceFormat::Jpeg), (4000, 3000), &thumb),
            full / 16
        );
        // PNG has no shrink-on-load.
        assert_eq!(cost(Some(SourceFormat::Png), (4000, 3000), &thumb), full);
        // Enlarging costs the output.
        let big = resolved(&[("w", "2000"), ("enlarge", "1")]);
        assert_eq!(cost(Some(SourceFormat::Png), (100, 100), &big), 2000 * 2000);
    }

    /// Issue 28: the output is charged again for each pass its encoder and filters imply, so
    /// the dear specs cost what they take, and the dearest are over the default limit.
    #[test]
    fn a_run_is_held_to_memory_near_what_49_mp_runs_were_measured_to_take() {
        // Audit #4, measured peaks: a 49 MP AVIF output 1.5 GB, a 49 MP lossless JPEG XL
        // output 1.82 GB, a 7000x7000 JPEG XL rendered for a 100 px PNG 1.77 GB. The
        // estimates hold them (what admission reserves), and not twice over.
        let big = [("w", "7000"), ("h", "7000"), ("fit", "fill")];
        let png = Some(SourceFormat::Png);
        let of = |format: Option<SourceFormat>, extra: &[(&'static str, &'static str)]| {
            memory(format, (7000, 7000), &resolved(&[&big[..], extra].concat()))
        };
        for (estimate, measured) in [
            (of(png, &[("format", "avif")]), 1_500_000_000u64),
            (
                of(png, &[("format", "jxl"), ("lossless", "1")]),
                1_820_000_000,
            ),
            (
                memory(
                    Some(SourceFormat::Jxl),
                    (7000, 7000),
                    &resolved(&[("w", "100"), ("format", "png")]),
                ),
                1_770_000_000,
            ),
        ] {
            assert!(
                estimate >= measured && estimate <= 2 * measured,
                "estimate {estimate} for a measured {measured}"
            );
        }
        // A small JPEG run is small.
        let thumb = memory(
            Some(SourceFormat::Jpeg),
            (4000, 3000),
            &resolved(&[("w", "200")]),
        );
        assert!(thumb < 64 << 20, "{thumb}");
    }

    #[test]
    fn a_jpeg_xl_decode_is_charged_its_decoders_weight() {
        let spec = resolved(&[("w", "100"), ("format", "png")]);
        let png = cost(Some(SourceFormat::Png), (7000, 7000), &spec);
        let jxl = cost(Some(SourceFormat::Jxl), (7000, 7000), &spec);
        assert_eq!(jxl, png - 49_000_000 + 49_000_000 * JXL_DECODE_WEIGHT);
    }

    #[test]
    fn cost_charges_encoders_and_filters_by_the_output() {
        let png = Some(SourceFormat::Png);
        let of = |pairs: &[(&str, &str)]| cost(png, (100, 100), &resolved(pairs));
        let out = 2000 * 2000;
        let big = [("w", "2000"), ("enlarge", "1")];
        let with = |extra: &[(&'static str, &'static str)]| of(&[&big[..], extra].concat());
        assert_eq!(with(&[("format", "jpeg")]), out);
        assert_eq!(with(&[("format", "png")]), 2 * out);
        assert_eq!(with(&[("format", "webp")]), 5 * out);
        assert_eq!(with(&[("format", "webp"), ("lossless", "1")]), 41 * out);
        assert_eq!(with(&[("format", "avif")]), 9 * out);
        assert_eq!(with(&[("format", "gif")]), 51 * out);
        assert_eq!(with(&[("format", "jpeg"), ("blur", "100")]), 4 * out);
        assert_eq!(with(&[("format", "jpeg"), ("sharpen", "100")]), 5 * out);
        assert_eq!(
            with(&[("format", "jpeg"), ("blur", "1"), ("sharpen", "1")]),
            8 * out
        );

        let limits = Limits::default();
        let huge_gif = [
            ("w", "8192"),
            ("h", "6000"),
            ("fit", "fill"),
            ("enlarge", "1"),
            ("format", "gif"),
        ];
        let over = cost(png, (100, 100), &resolved(&huge_gif));
        assert!(matches!(
            check_cost(over, &limits),
            Err(ProcessError::TooCostly { .. })
        ));
        assert_eq!(
            ProcessError::TooCostly {
                cost: over,
                limit: 1
            }
            .kind(),
            Some(ProcessFailure::TooCostly)
        );
        // A 14 MP photo to a GIF of its size, and a 50 MP one to a thumbnail, are admitted.
        let photo_gif = cost(png, (4608, 3072), &resolved(&[("format", "gif")]));
        assert!(check_cost(photo_gif, &limits).is_ok(), "{photo_gif}");
        let thumb = cost(
            png,
            (8660, 5773),
            &resolved(&[("w", "400"), ("format", "avif")]),
        );
        assert!(check_cost(thumb, &limits).is_ok());
    }

    /// The plan is each decision made alone, made once: its processor version, cost,
    /// route and the run's fit are what `processor_version`, `cost`, `mezzanine::serves`
    /// and `layout` give, with no fit computed twice.
    /// An animation as large as the frame limits let through (500 frames of 320 × 312, 50 MP)
    /// stays within the default cost limit as animated AVIF, the format `format=auto` now
    /// picks for it, as it does as WebP and GIF.
    #[test]
    fn the_largest_animation_the_frame_limits_admit_is_within_the_cost_limit() {
        let limits = Limits::default();
        let gif = Some(SourceFormat::Gif);
        for format in ["avif", "webp", "gif"] {
            let spec = crate::Spec::from_pairs([("format", format)])
                .unwrap()
                .resolve_frames(Some(crate::OutputFormat::Gif), false, 500, None);
            assert!(spec.animated, "{format}");
            let header = Header {
                format: gif,
                size: Some((320, 312)),
                upright: Some((320, 312)),
                has_alpha: false,
                frames_made: 500,
            };
            let plan = plan(&header, &spec, &limits, true);
            assert!(plan.check_cost(&limits).is_ok(), "{format}: {}", plan.cost);
        }
    }

    #[test]
    fn a_plan_is_each_computation_alone_made_once() {
        let limits = Limits::default();
        let side = (limits.max_pixels as f64).sqrt() as u32;
        let jpeg = Some(SourceFormat::Jpeg);
        let png = Some(SourceFormat::Png);
        let svg = Some(SourceFormat::Svg);
        let headers = [
            (jpeg, Some((4000, 3000)), Some((3000, 4000)), false),
            (jpeg, Some((1600, 1200)), None, false),
            (png, Some((4000, 3000)), Some((4000, 3000)), false),
            (png, Some((4000, 1000)), None, false),
            (png, Some((4000, 3000)), None, true),
            (svg, Some((300, 200)), Some((300, 200)), true),
            (None, None, None, false),
        ];
        let queries: [&[(&str, &str)]; 6] = [
            &[("w", "400")],
            &[("w", "2000")],
            &[("w", "300"), ("h", "300"), ("fit", "crop")],
            &[("w", "700"), ("format", "avif")],
            &[("w", "500"), ("rotate", "90")],
            &[("h", "900"), ("format", "png")],
        ];
        for (format, size, upright, has_alpha) in headers {
            for query in queries {
                let spec = resolved(query);
                let header = Header {
                    format,
                    size,
                    upright,
                    has_alpha,
                    frames_made: 1,
                };
                let plan = plan(&header, &spec, &limits, true);
                let at = size.unwrap_or((side, side));
                assert_eq!(
                    plan.processor_version,
                    processor_version(format, size, &spec),
                    "{header:?} {query:?}"
                );
                assert_eq!(plan.cost, cost(format, at, &spec), "{header:?} {query:?}");
                let route = match (format, size) {
                    (Some(format), Some((width, height))) => {
                        let info = SourceInfo {
                            format,
                            width,
                            height,
                            has_alpha,
                        };
                        if !mezzanine::may_serve(&info, &spec) {
                            PlannedRoute::Original
                        } else if mezzanine::serves_either_way(&info, &spec) {
                            PlannedRoute::Mezzanine
                        } else if let Some(upright) = upright {
                            match mezzanine::serves(&info, upright, &spec) {
                                true => PlannedRoute::Mezzanine,
                                false => PlannedRoute::Original,
                            }
                        } else {
                            for way in [(width, height), (height, width)] {
                                assert_eq!(
                                    plan.mezzanine_serves(way, &spec),
                                    mezzanine::serves(&info, way, &spec)
                                );
                            }
                            PlannedRoute::ByOrientation
                        }
                    }
                    _ => PlannedRoute::Original,
                };
                assert_eq!(plan.route, route, "{header:?} {query:?}");
                let run_at = match plan.drawing {
                    Some((own, drawn)) => {
                        assert_eq!(drawn, vector_size(own, &spec));
                        drawn
                    }
                    None => upright.unwrap_or(at),
                };
                let fit = plan.fit_at(run_at).expect("the run's fit");
                let (rotated, alone, _) = layout(run_at, &spec, false);
                assert_eq!((fit.rotated, fit.plan), (rotated, alone));
                let mut sizes: Vec<_> = plan.fits.iter().map(|f| f.at).collect();
                sizes.sort_unstable();
                sizes.dedup();
                assert_eq!(sizes.len(), plan.fits.len(), "no fit made twice");
            }
        }
    }
}

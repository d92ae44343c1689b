//! imgcas-processors: the pure image core of imgcas.
//!
//! Bytes and a spec in, bytes or a typed error out. No I/O, no async, no knowledge of HTTP or
//! storage: the service composes this crate, and `imgcas process` runs the same code offline.
//!
//! The walk of one request: [`sniff`] the format, [`open`](decode::open) its headers (limits
//! checked there), [`plan`](geometry::plan) the geometry, decode (DCT-downscaled for JPEG when
//! the output is much smaller), orient and [`rotate`](ops::rotate), resize and pad, filter,
//! [`encode`](encode::encode). Outputs much smaller than a large original that cannot shrink
//! on load are made from its [`mezzanine`] instead; decodes go through a [`Decodes`] hook, by
//! which the service shares one decode between runs (and with an original's facts and
//! fingerprint). Animated sources asked for an animated output take their own
//! walk, frame by frame ([`animation`]).

// No unsafe code but in the modules that drive a C library for a setting its safe wrapper
// cannot reach (`jpeg_encode`: libjpeg's progressive scan script; `webp_encode`: libwebp's
// RGB import without an ARGB pass; `webp_anim`: libwebp's animation encoder fed one frame at
// a time); they allow it alone.
#![deny(unsafe_code)]

use std::sync::Arc;

pub mod animation;
pub mod bytes;
pub mod color;
pub mod compare;
pub mod decode;
pub mod encode;
pub mod error;
pub mod facts;
pub mod fingerprint;
pub mod formats;
pub mod geometry;
#[allow(unsafe_code)]
mod jpeg_encode;
pub mod likeness;
mod limits;
pub mod mezzanine;
pub mod ops;
mod shape;
pub mod smart;
pub mod spec;
mod trim;
mod watermark;
#[allow(unsafe_code)]
mod webp_anim;
#[allow(unsafe_code)]
mod webp_encode;

pub use decode::{probe, probe_upright, Limits, SourceInfo};
pub use error::{decoder_panics, ProcessError, ProcessFailure};
pub use facts::{Facts, FACTS_VERSION};
pub use fingerprint::{Fingerprint, Guards, FINGERPRINT_VERSION};
pub use formats::{sniff, SourceFormat};
pub use image::DynamicImage;
pub use mezzanine::MEZZANINE_VERSION;
pub use spec::{
    accept_class, negotiate, ClientHints, FormatRequest, HintsConsulted, OutputFormat,
    OverlaySource, Placement, ResolvedSpec, Shape, Spec, SpecError, Watermark, PROCESSOR_VERSION,
};

/// A finished variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    pub bytes: Vec<u8>,
    pub format: OutputFormat,
    pub width: u32,
    pub height: u32,
}

/// Which bytes a decode is of: an original, or its mezzanine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputKind {
    Original,
    Mezzanine,
}

impl InputKind {
    pub fn name(self) -> &'static str {
        match self {
            InputKind::Original => "original",
            InputKind::Mezzanine => "mezzanine",
        }
    }
}

/// Decoded pixels, shareable between runs.
pub type Pixels = Arc<DynamicImage>;

/// Bytes a decode holds in memory.
pub fn pixels_size(pixels: &Pixels) -> usize {
    pixels.as_bytes().len()
}

/// Where a run gets its decoded source: a cache that runs share (the service keeps one per
/// original and scale, for seconds), or [`Decode`], which decodes every time. An
/// implementation must return what `decode` returns, or what an earlier call of it for the
/// same bytes and `denominator` returned: a decode is a pure function of those, so sharing one
/// never changes an output. ([`Decodes::small`], which serves no variant, is held to less.)
pub trait Decodes {
    fn decoded(
        &self,
        from: InputKind,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError>;

    /// The small decode of an original (see [`decode::decode_small`]), for what is computed
    /// once per original from few pixels (placeholders, fingerprint) and never for a variant.
    /// Unlike [`Decodes::decoded`], an implementation may answer with what a run offered
    /// through [`Decodes::offer_small`]: a box reduction of a larger decode of the same bytes
    /// to the same size, the same picture within a level or two.
    ///
    /// `decode` decodes at 1/`denominator`; `reduce` takes such a decode to the small size
    /// (see [`decode::Source::small_size`]).
    fn small(
        &self,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
        reduce: &dyn Fn(&Pixels) -> Pixels,
    ) -> Result<Pixels, ProcessError> {
        self.decoded(InputKind::Original, denominator, decode)
            .map(|decoded| reduce(&decoded))
    }

    /// A run decoded its original at the small decode's scale (1/`denominator`) or larger;
    /// `small` gives the small pixels from it (that decode itself, or a reduction of it). An
    /// implementation that expects the small decode to be asked for soon (a new original's
    /// facts) keeps them: for a baseline JPEG, whose entropy decoding is most of any decode,
    /// that spares a second pass over the file. See [`decode::offer_small`].
    fn offer_small(&self, _denominator: u32, _small: &mut dyn FnMut() -> Pixels) {}

    /// One frame of an animation was decoded (animations are decoded frame by frame and
    /// never shared: they are told here so that they can be counted).
    fn frame_decoded(&self) {}

    /// Whether the run may go on: [`ProcessError::Stopped`] once its caller wants it to stop
    /// (a deadline passed, a shutdown). Asked between the stages of a run (decode, shaping,
    /// encode), between an animation's frames and a mezzanine's steps: a step already under
    /// way (one codec call) finishes first.
    fn check(&self) -> Result<(), ProcessError> {
        Ok(())
    }
}

/// No sharing: every run decodes.
pub struct Decode;

impl Decodes for Decode {
    fn decoded(
        &self,
        _from: InputKind,
        _denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError> {
        decode().map(Arc::new)
    }
}

/// What a run is made from.
#[derive(Clone, Copy)]
pub enum Input<'a> {
    /// The original's bytes.
    Original(&'a [u8]),
    /// The original's mezzanine (see [`mezzanine::serves`] for when that is the input).
    Mezzanine(&'a [u8]),
}

/// Runs a resolved spec on an original: from its mezzanine (built here) when
/// [`mezzanine::serves`] says so, else from the original itself. The same bytes as the
/// service makes, which keeps the mezzanine rather than building it each time.
pub fn process(
    bytes: &[u8],
    spec: &ResolvedSpec,
    limits: &Limits,
) -> Result<Processed, ProcessError> {
    let source = decode::open(bytes, limits)?;
    if mezzanine::serves(&source.info, source.upright_size(), spec) {
        let mezzanine = mezzanine::build(bytes, limits, &Decode)?;
        return process_input(Input::Mezzanine(&mezzanine.bytes), spec, limits, &Decode);
    }
    // The header read above is the run's: read once.
    run(Opened::Original(source), spec, limits, &Decode)
}

/// An input, its header read.
enum Opened<'a> {
    Original(decode::Source<'a>),
    Mezzanine(mezzanine::Mezzanine<'a>),
}

/// Runs a resolved spec on the given input, decoding through `decodes`. The caller chooses
/// the input with [`mezzanine::serves`].
pub fn process_input(
    input: Input<'_>,
    spec: &ResolvedSpec,
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    // The input's facts: its upright size, whether it shrinks on load, and how it decodes.
    let opened = match input {
        Input::Original(bytes) => Opened::Original(decode::open(bytes, limits)?),
        Input::Mezzanine(framed) => Opened::Mezzanine(mezzanine::parse(framed)?),
    };
    run(opened, spec, limits, decodes)
}

/// [`process_input`] on an input whose header has been read.
fn run(
    opened: Opened<'_>,
    spec: &ResolvedSpec,
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    // A drawing is drawn at the size the spec asks of it, and a crop's pixels, given in its
    // own size, scale with it.
    let drawing = match &opened {
        Opened::Original(source) if source.info.format.is_vector() => {
            let own = source.upright_size();
            Some((own, vector_size(own, spec)))
        }
        _ => None,
    };
    let scaled;
    let spec = match (drawing, spec.shape.crop) {
        (Some((own, drawn)), Some(region)) => {
            let mut crop_scaled = spec.clone();
            let scale = f64::from(drawn.0) / f64::from(own.0.max(1));
            crop_scaled.shape.crop = Some(region.scaled(scale));
            scaled = crop_scaled;
            &scaled
        }
        _ => spec,
    };
    if let (Opened::Original(source), true) = (&opened, spec.animated) {
        if let Some(processed) = animation::process(source, spec, limits, decodes)? {
            return Ok(processed);
        }
    }
    let (input_size, upright) = match &opened {
        Opened::Original(source) => (drawing.map_or(source.upright_size(), |d| d.1), None),
        Opened::Mezzanine(m) => (mezzanine::stored_size(m, limits)?, Some(m.original_upright)),
    };
    // Plans are made in the original's coordinates (minimum sizes, rounding of the output
    // box), then scaled to the decoded picture, as shrink-on-load does.
    let (uw, uh) = upright.unwrap_or(input_size);
    check_minimum(uw, uh, &spec.shape)?;
    let (rotated, plan, _) = layout((uw, uh), spec, false);
    let (ow, oh) = plan.output_size();
    if u64::from(ow) * u64::from(oh) > limits.max_pixels {
        return Err(ProcessError::too_many_pixels(ow, oh, limits.max_pixels));
    }
    // The service checks this before admission; offline, it is checked here, before the
    // decode (a mezzanine is a JPEG).
    let format = match &opened {
        Opened::Original(source) => Some(source.info.format),
        Opened::Mezzanine(_) => Some(SourceFormat::Jpeg),
    };
    let drawing_work = match &opened {
        Opened::Original(source) => source.drawing_work(input_size),
        Opened::Mezzanine(_) => 0,
    };
    check_cost(
        cost(format, input_size, spec).saturating_add(drawing_work),
        limits,
    )?;
    decodes.check()?;
    // How much smaller than the original the input is (1 for the original itself).
    let shrunk = f64::from(uw.max(uh)) / f64::from(input_size.0.max(input_size.1).max(1));
    let reduction = plan.reduction(rotated) / shrunk;
    let denominator = match &opened {
        _ if spec.decodes_whole() => 1,
        Opened::Original(source) => {
            source.shrink_denominator(reduction, spec.hides_coarse_decode())
        }
        // A mezzanine is a baseline JPEG.
        Opened::Mezzanine(_) => geometry::shrink_denominator(reduction),
    };
    let decoded = match &opened {
        // Drawn at this run's size: no other run shares it.
        Opened::Original(source) if source.info.format.is_vector() => {
            check_size(input_size, limits)?;
            Arc::new(source.render(limits, input_size)?)
        }
        Opened::Original(source) => {
            decodes.decoded(InputKind::Original, denominator, &mut || {
                source.decode(limits, denominator)
            })?
        }
        Opened::Mezzanine(m) => decodes.decoded(InputKind::Mezzanine, denominator, &mut || {
            mezzanine::decode(m, limits, denominator)
        })?,
    };
    if let Opened::Original(source) = &opened {
        if !source.info.format.is_vector() {
            decode::offer_small(source, denominator, &decoded, decodes);
        }
    }
    decodes.check()?;
    let image = shape::shape(
        decoded,
        spec,
        &plan,
        rotated,
        limits,
        &mut Default::default(),
    )?;
    let (width, height) = (image.width(), image.height());
    decodes.check()?;
    let bytes = encode::encode(image, spec)?;
    Ok(Processed {
        bytes,
        format: spec.format,
        width,
        height,
    })
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

/// Refuses a drawing size over the pixel limit.
fn check_size((w, h): (u32, u32), limits: &Limits) -> Result<(), ProcessError> {
    if u64::from(w) * u64::from(h) > limits.max_pixels {
        return Err(ProcessError::too_many_pixels(w, h, limits.max_pixels));
    }
    Ok(())
}

/// The upright source size after `rotate`, the fit plan for it, and the decode denominator:
/// with shrink-on-load (JPEG), 1/2, 1/4 or 1/8 when the output is that much smaller.
pub(crate) fn layout(
    upright: (u32, u32),
    spec: &ResolvedSpec,
    can_shrink: bool,
) -> ((u32, u32), geometry::Plan, u32) {
    let (w, h) = upright;
    let rotated = if spec.shape.rotate % 180 == 90 {
        (h, w)
    } else {
        (w, h)
    };
    let plan = geometry::plan(rotated, spec);
    let denominator = if can_shrink && !spec.decodes_whole() {
        geometry::shrink_denominator(plan.reduction(rotated))
    } else {
        1
    };
    (rotated, plan, denominator)
}

/// What a run will cost, in pixel-equivalents: the larger of the decoded source (after
/// shrink-on-load, which only JPEG has) and the output, which a decode, a resize and a JPEG
/// encode touch about once each, plus the output's pixels again for each pass the rest of
/// the spec implies ([`output_passes`]: encoders dearer than JPEG's, blur and sharpen). The
/// service admits processing work by it and refuses a spec over `limits.max_cost`
/// (`too_costly`) before any decode. `size` is the stored source size; unknown sizes should
/// be passed as the pixel limit.
pub fn cost(format: Option<SourceFormat>, size: (u32, u32), spec: &ResolvedSpec) -> u64 {
    let (w, h) = (size.0.max(1), size.1.max(1));
    // A vector source's decode is its drawing, at the size the spec asks.
    let (w, h) = match format {
        Some(f) if f.is_vector() => vector_size((w, h), spec),
        _ => (w, h),
    };
    let shrinks = format.is_some_and(SourceFormat::shrinks_on_load);
    let (_, plan, denominator) = layout((w, h), spec, shrinks);
    let denominator = u64::from(denominator);
    // A watermark's overlay is decoded whole, by its own size.
    let overlay = spec.shape.watermark.as_ref().map_or(0, |w| w.source.pixels);
    let decoded =
        (u64::from(w) * u64::from(h) / (denominator * denominator)).saturating_add(overlay);
    let (ow, oh) = plan.output_size();
    let output = u64::from(ow) * u64::from(oh);
    decoded
        .max(output)
        .saturating_add(output.saturating_mul(output_passes(spec)))
        .max(1)
}

/// How many times the output's pixels are charged beyond the first, by what the spec asks of
/// them: measured on a 14 MP photo against its decode and JPEG encode (issue 28: a cost by
/// pixels alone let an 8192×6000 GIF take 37 s of a slot it was charged 1 s for). The
/// encoders: PNG about 1, lossy WebP 4, AVIF at speed 7 about 8, lossless WebP about 40 and
/// GIF (the best palette search) about 50, 5 for an animation's frames (a faster search);
/// the shaping options' own passes ([`Shape::filter_passes`]).
fn output_passes(spec: &ResolvedSpec) -> u64 {
    let encoder = match spec.format {
        OutputFormat::Jpeg => 0,
        OutputFormat::Png => 1,
        OutputFormat::Webp if spec.lossless => 40,
        OutputFormat::Webp => 4,
        OutputFormat::Avif => 8,
        // An animation's frames take a faster palette search (`encode`'s animation speed).
        OutputFormat::Gif if spec.animated => 5,
        OutputFormat::Gif => 50,
    };
    encoder + spec.shape.filter_passes()
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
    let source = decode::open(bytes, limits)?;
    if !source.info.format.is_vector() {
        return Ok(0);
    }
    let size = vector_size(source.upright_size(), spec);
    Ok(source.drawing_work(size))
}

/// Refuses a run whose [`cost`] is over `limits.max_cost`.
pub fn check_cost(cost: u64, limits: &Limits) -> Result<(), ProcessError> {
    if cost > limits.max_cost {
        return Err(ProcessError::TooCostly {
            cost,
            limit: limits.max_cost,
        });
    }
    Ok(())
}

/// The processor version of a variant (part of its key, with the original and the
/// canonical spec): [`PROCESSOR_VERSION`], or a later one for the variants whose bytes a
/// later change altered. Read from what the originals index holds (format, stored size),
/// before anything is decoded, and conservative where that is not enough to tell.
///
/// 5: JPEG originals make every output themselves, never from a mezzanine, and a
/// progressive JPEG reduced 8 to 16 times decodes at 1/8 from its DC scans (it decoded at
/// 1/4). Both concern JPEG outputs reduced at least 4 times of originals whose long side is
/// at least the mezzanine's threshold, or reduced 8 to 16 times of any; other variants'
/// bytes are unchanged and keep their version (a baseline JPEG reduced 8 to 16 times is
/// counted in: its header is not in the index).
///
/// 6: AVIF outputs keep full chroma (4:4:4; they were 4:2:0), whatever their original.
///
/// 7: AVIF outputs are encoded at libaom speed 7 (it was 8), whatever their original; and
/// outputs whose own loss would not hide a 1/8 decode from the DC scans (PNG, GIF, lossless
/// WebP, JPEG or WebP above q90: [`ResolvedSpec::hides_coarse_decode`]) of JPEG originals
/// reduced 8 to 16 times decode at 1/4 again, as before version 5.
///
/// 8: progressive JPEG outputs order their coefficients in five scans without refinement
/// passes ([`jpeg_encode`]): the same pixels in other bytes, whatever their original.
///
/// 9: `blur` and `sharpen` use three box passes for the Gaussian ([`ops::blur`]): other
/// pixels, whatever the original and the output.
///
/// 10: HEIC and SVG originals decode (builds before refused them with `unsupported_format`,
/// and the variants map keeps refusals): every variant of a HEIC or SVG original. (An SVG
/// stored by an earlier build is indexed with no format, like any bytes of no image format,
/// whose stored refusals keep their version: it is read as SVG once stored again.)
pub fn processor_version(
    format: Option<SourceFormat>,
    size: Option<(u32, u32)>,
    spec: &ResolvedSpec,
) -> u32 {
    if matches!(format, Some(SourceFormat::Heic | SourceFormat::Svg)) {
        return 10;
    }
    if spec.shape.blur.is_some() || spec.shape.sharpen.is_some() {
        return 9;
    }
    if spec.format == OutputFormat::Jpeg && spec.progressive {
        return 8;
    }
    if spec.format == OutputFormat::Avif {
        return 7;
    }
    if !format.is_some_and(SourceFormat::shrinks_on_load) {
        return PROCESSOR_VERSION;
    }
    let Some((w, h)) = size else {
        return if spec.hides_coarse_decode() { 5 } else { 7 };
    };
    let long = w.max(h);
    // Either orientation: the stored size's EXIF orientation is not in the index.
    let reduced = |upright: (u32, u32)| {
        let (rotated, plan, _) = layout(upright, spec, false);
        plan.reduction(rotated)
    };
    let reductions = [reduced((w, h)), reduced((h, w))];
    // From 16 on, both decode at 1/8: the DC scans give the same pixels as the whole file.
    let one_quarter_before = reductions.iter().any(|r| (8.0..16.0).contains(r));
    if one_quarter_before && !spec.hides_coarse_decode() {
        return 7;
    }
    // A mezzanine served outputs it held twice the resolution of, and it was at least
    // twice smaller than its original: reductions from 4.
    let mezzanine_before = long >= mezzanine::FROM_SIDE && reductions.iter().any(|r| *r >= 4.0);
    if one_quarter_before || mezzanine_before {
        5
    } else {
        PROCESSOR_VERSION
    }
}

/// `min_w`/`min_h` constrain the upright source, before any `rotate`.
pub(crate) fn check_minimum(width: u32, height: u32, spec: &Shape) -> Result<(), ProcessError> {
    let too_narrow = spec.min_width.is_some_and(|m| width < m);
    let too_short = spec.min_height.is_some_and(|m| height < m);
    if too_narrow || too_short {
        let min = format!(
            "{}x{}",
            spec.min_width.map_or("-".into(), |v| v.to_string()),
            spec.min_height.map_or("-".into(), |v| v.to_string())
        );
        return Err(ProcessError::SourceTooSmall { width, height, min });
    }
    Ok(())
}

/// A file of the repository's `testdata/`, for unit tests.
#[cfg(test)]
pub(crate) fn testdata(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::spec::resolved_for_jpeg as resolved;

    #[test]
    fn only_variants_whose_bytes_changed_take_a_later_version() {
        let jpeg = Some(SourceFormat::Jpeg);
        let version = |format, size, query: &[(&str, &str)]| {
            processor_version(format, size, &resolved(query))
        };
        // Small JPEGs, and large ones barely reduced: unchanged; 1/8 from 16 on, as before.
        assert_eq!(version(jpeg, Some((1600, 1200)), &[("w", "400")]), 4);
        assert_eq!(version(jpeg, Some((1200, 1800)), &[("w", "64")]), 4);
        assert_eq!(version(jpeg, Some((4000, 3000)), &[("w", "1500")]), 4);
        // Once made from the mezzanine, or from a 1/4 decode of a progressive file.
        assert_eq!(version(jpeg, Some((4000, 3000)), &[("w", "800")]), 5);
        assert_eq!(version(jpeg, Some((2400, 1600)), &[("w", "250")]), 5);
        // Unknown size: counted in. Other formats, and bytes of no known format: unchanged.
        assert_eq!(version(None, None, &[("w", "400")]), 4);
        assert_eq!(version(jpeg, None, &[("w", "400")]), 5);
        let png = Some(SourceFormat::Png);
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
}

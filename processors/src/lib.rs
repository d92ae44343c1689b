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
// a time; `avif_anim`: libavif's encoder with its loop count, fed one frame at a time); they
// allow it alone.
#![deny(unsafe_code)]

use std::sync::Arc;

pub mod animation;
pub mod auto_quality;
#[allow(unsafe_code)]
mod avif_anim;
pub mod bytes;
pub mod color;
pub mod compare;
pub mod decode;
pub mod encode;
pub mod encoders;
pub mod error;
pub mod facts;
pub mod fingerprint;
mod fits;
pub mod formats;
pub mod geometry;
pub mod interrupt;
#[allow(unsafe_code)]
mod jpeg_encode;
pub mod likeness;
mod limits;
pub mod mezzanine;
pub mod ops;
pub mod plan;
mod shape;
pub mod smart;
pub mod spec;
mod trim;
mod versions;
mod watermark;
#[allow(unsafe_code)]
mod webp_anim;
#[allow(unsafe_code)]
mod webp_encode;

pub use auto_quality::Chosen;
pub use decode::{probe, probe_upright, Limits, SourceInfo};
pub use error::{decoder_panics, ProcessError, ProcessFailure};
pub use facts::{Facts, FACTS_VERSION};
pub use fingerprint::{Fingerprint, Guards, FINGERPRINT_VERSION};
pub use formats::{sniff, SourceFormat};
pub use image::DynamicImage;
pub use limits::check_cost;
pub use mezzanine::MEZZANINE_VERSION;
pub use plan::{cost, drawing_cost, plan, vector_size, Header, Plan, PlannedRoute};
pub use spec::{
    accept_class, negotiate, Accept, AutoFormats, AutoLevel, AutoTargets, ClientHints,
    FormatRequest, HintsConsulted, OutputFormat, OverlaySource, Placement, Quality, QualityRequest,
    ResolvedSpec, Shape, Spec, SpecError, Watermark, PROCESSOR_VERSION,
};
pub use versions::{processor_version, Rung, RUNGS};

/// A finished variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    pub bytes: Vec<u8>,
    /// For `q=auto`: the encoder quality chosen and its score.
    pub chosen: Option<Chosen>,
    /// Encodes its `q=auto` search made (0 without one).
    pub search_encodes: u32,
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
    run(Opened::Original(source), spec, None, limits, &Decode)
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
    run(open_input(input, limits)?, spec, None, limits, decodes)
}

/// [`process_input`] with the variant's [`Plan`], made for this spec from the original's
/// header facts: the run takes its geometry from it, and leaves the cost to the caller who
/// checked [`Plan::check_cost`] (and a drawing's work) before admitting it.
pub fn process_planned(
    input: Input<'_>,
    spec: &ResolvedSpec,
    plan: &Plan,
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    run(
        open_input(input, limits)?,
        spec,
        Some(plan),
        limits,
        decodes,
    )
}

/// The input's facts: its upright size, whether it shrinks on load, and how it decodes.
fn open_input<'a>(input: Input<'a>, limits: &Limits) -> Result<Opened<'a>, ProcessError> {
    Ok(match input {
        Input::Original(bytes) => Opened::Original(decode::open(bytes, limits)?),
        Input::Mezzanine(framed) => Opened::Mezzanine(mezzanine::parse(framed)?),
    })
}

/// [`process_input`] on an input whose header has been read, with the variant's plan when
/// the caller made one.
fn run(
    opened: Opened<'_>,
    spec: &ResolvedSpec,
    plan: Option<&Plan>,
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    // A drawing is drawn at the size the spec asks of it, and a crop's pixels, given in its
    // own size, scale with it.
    let drawing = match &opened {
        Opened::Original(source) if source.info.format.is_vector() => {
            let own = source.upright_size();
            let drawn = plan.and_then(|p| p.drawn_from(own));
            Some((own, drawn.unwrap_or_else(|| vector_size(own, spec))))
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
    let planned = plan.and_then(|p| p.fit_at((uw, uh)));
    let (rotated, fit) = match planned {
        Some(fit) => (fit.rotated, fit.plan),
        None => {
            let (rotated, fit, _) = geometry::layout((uw, uh), spec, false);
            (rotated, fit)
        }
    };
    let (ow, oh) = fit.output_size();
    if u64::from(ow) * u64::from(oh) > limits.max_pixels {
        return Err(ProcessError::too_many_pixels(ow, oh, limits.max_pixels));
    }
    // A planned run was costed and checked before admission, from the header facts (a
    // drawing's work too) — unless they gave no size; else it is checked here, before the
    // decode (a mezzanine is a JPEG).
    if !plan.is_some_and(|p| p.size_known) {
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
    }
    decodes.check()?;
    // How much smaller than the original the input is (1 for the original itself).
    let shrunk = f64::from(uw.max(uh)) / f64::from(input_size.0.max(input_size.1).max(1));
    let reduction = fit.reduction(rotated) / shrunk;
    let denominator = match &opened {
        _ if spec.decodes_whole() => 1,
        Opened::Original(source) => {
            source.shrink_denominator(reduction, spec.hides_coarse_decode(reduction))
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
        &fit,
        rotated,
        limits,
        &mut Default::default(),
    )?;
    let (width, height) = (image.width(), image.height());
    decodes.check()?;
    let encoded = encode::encode(image, spec)?;
    Ok(Processed {
        bytes: encoded.bytes,
        chosen: encoded.chosen,
        search_encodes: encoded.search_encodes,
        format: spec.format,
        width,
        height,
    })
}

/// Refuses a drawing size over the pixel limit.
fn check_size((w, h): (u32, u32), limits: &Limits) -> Result<(), ProcessError> {
    if u64::from(w) * u64::from(h) > limits.max_pixels {
        return Err(ProcessError::too_many_pixels(w, h, limits.max_pixels));
    }
    Ok(())
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

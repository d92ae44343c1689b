//! The mezzanine: a smaller, upright, sRGB derivative of a large original (its long side
//! [`SIDE`] pixels, a high-quality JPEG) from which most outputs are made, so that the second
//! and later specs of an original decode a file of a few hundred kilobytes at a reduced DCT
//! scale instead of the whole original again.
//!
//! Whether a spec is made from the mezzanine is decided by [`serves`] from the spec and the
//! source's header facts alone (stored size, alpha), never from what happens to be stored or
//! cached: a variant's bytes depend only on the original, the canonical spec and the processor
//! version. The mezzanine itself is a pure function of the original ([`build`]), so a lost
//! one is rebuilt to the same bytes.
//!
//! On disk it is a short frame around the JPEG: a magic, the version, and the original's
//! upright size (plans are made in the original's coordinates, then scaled, exactly as a
//! shrink-on-load decode is).

use image::DynamicImage;

use crate::decode::{open, Limits, SourceInfo};
use crate::error::ProcessError;
use crate::geometry::{self, Plan};
use crate::spec::OutputFormat;
use crate::spec::ResolvedSpec;
use crate::{layout, ops, Decodes, InputKind, Processed};

/// Bumped whenever [`build`] would produce other bytes: stored mezzanines of another version
/// are not used.
pub const MEZZANINE_VERSION: u32 = 1;

/// The mezzanine's long side.
pub const SIDE: u32 = 2048;

/// Originals whose long side is at least this have a mezzanine (1.5 × [`SIDE`]): below it, a
/// mezzanine would save too little decoding to pay for itself.
pub const FROM_SIDE: u32 = 3072;

/// JPEG quality of the mezzanine (full chroma at this quality, see `jpeg::encode`).
const QUALITY: u8 = 92;

const MAGIC: &[u8; 8] = b"imgcasMZ";
const FRAME: usize = MAGIC.len() + 12;

/// How much more resolution than the output the mezzanine must hold, along the output's
/// less-reduced axis, for a spec to be made from it. Measured: at this margin an output is
/// within 0.1 dB PSNR of the same output made from the original (at 1.5 it was not: 0.12 dB
/// below, `tests/mezzanine_quality.rs`).
const MARGIN: f64 = 1.75;

/// Whether a spec is made from the mezzanine of a source with these header facts and this
/// upright size (after EXIF orientation): the source is opaque and large (long side ≥
/// [`FROM_SIDE`]), and the mezzanine still holds [`MARGIN`] times the output's resolution
/// along the less-reduced axis.
pub fn serves(info: &SourceInfo, upright: (u32, u32), spec: &ResolvedSpec) -> bool {
    let long = info.width.max(info.height);
    if info.has_alpha || long < FROM_SIDE || !info.format.can_decode() {
        return false;
    }
    let factor = f64::from(long) / f64::from(SIDE);
    let (rotated, plan, _) = layout(upright, spec, false);
    plan.reduction(rotated) >= MARGIN * factor
}

/// Whether [`serves`] may hold, before the orientation is known (either way round): when it
/// cannot, the service need not read the original's header to decide.
pub fn may_serve(info: &SourceInfo, spec: &ResolvedSpec) -> bool {
    [(info.width, info.height), (info.height, info.width)]
        .into_iter()
        .any(|upright| serves(info, upright, spec))
}

/// The mezzanine's size for an original of upright size `upright`.
fn size_for(upright: (u32, u32)) -> (u32, u32) {
    let factor = f64::from(upright.0.max(upright.1)) / f64::from(SIDE);
    let side = |v: u32| ((f64::from(v) / factor).round() as u32).clamp(1, SIDE);
    (side(upright.0), side(upright.1))
}

/// Builds the mezzanine of an original (whose header must satisfy [`serves`] for some spec).
/// The original is decoded through `decodes` at the DCT scale this size picks, as any spec
/// would, so a concurrent spec that needs that same decode shares it.
pub fn build(
    original: &[u8],
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    let source = open(original, limits)?;
    let upright = source.upright_size();
    let size = size_for(upright);
    let plan = Plan {
        crop: None,
        resize_to: size,
        pad: None,
    };
    let denominator = if source.can_shrink_on_load() {
        geometry::shrink_denominator(plan.reduction(upright))
    } else {
        1
    };
    let decoded = decodes.decoded(InputKind::Original, denominator, &mut || {
        source.decode(limits, denominator)
    })?;
    let image = ops::apply_plan(decoded, &plan, crate::spec::Rgb([255, 255, 255]))?;
    let rgb = match image {
        DynamicImage::ImageRgb8(rgb) => rgb,
        other => other.into_rgb8(),
    };
    let jpeg = crate::jpeg::encode(&rgb, QUALITY, false)?;
    let mut framed = Vec::with_capacity(FRAME + jpeg.len());
    framed.extend_from_slice(MAGIC);
    framed.extend_from_slice(&MEZZANINE_VERSION.to_be_bytes());
    framed.extend_from_slice(&upright.0.to_be_bytes());
    framed.extend_from_slice(&upright.1.to_be_bytes());
    framed.extend_from_slice(&jpeg);
    Ok(Processed {
        bytes: framed,
        format: OutputFormat::Jpeg,
        width: size.0,
        height: size.1,
    })
}

/// What building the mezzanine of a source with these header facts costs, in pixels
/// touched (as [`crate::cost`] counts a run): the decode at the scale the build picks.
pub fn build_cost(info: &SourceInfo) -> u64 {
    let (w, h) = (info.width.max(1), info.height.max(1));
    let factor = f64::from(w.max(h)) / f64::from(SIDE);
    let denominator = if info.format == crate::sniff::SourceFormat::Jpeg {
        u64::from(geometry::shrink_denominator(factor))
    } else {
        1
    };
    u64::from(w) * u64::from(h) / (denominator * denominator)
}

/// The mezzanine's size for a source of stored size `(width, height)` (its upright size may
/// be the transpose).
pub fn size_of(width: u32, height: u32) -> (u32, u32) {
    size_for((width, height))
}

/// A stored mezzanine, read: the original's upright size and the JPEG.
pub struct Mezzanine<'a> {
    pub original_upright: (u32, u32),
    pub jpeg: &'a [u8],
}

/// Reads a mezzanine's frame (refusing another version's).
pub fn parse(bytes: &[u8]) -> Result<Mezzanine<'_>, ProcessError> {
    let corrupt = |why: &str| ProcessError::Internal(format!("a stored mezzanine {why}"));
    let field = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err(corrupt("has no mezzanine frame"));
    }
    let version = field(8).ok_or_else(|| corrupt("is truncated"))?;
    if version != MEZZANINE_VERSION {
        return Err(corrupt(&format!("is of version {version}")));
    }
    let (w, h) = field(12)
        .zip(field(16))
        .ok_or_else(|| corrupt("is truncated"))?;
    Ok(Mezzanine {
        original_upright: (w, h),
        jpeg: &bytes[FRAME..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sniff::SourceFormat;
    use crate::spec::Spec;

    fn spec(query: &[(&str, &str)]) -> ResolvedSpec {
        Spec::from_pairs(query.iter().copied()).unwrap().resolve(
            Some(OutputFormat::Jpeg),
            false,
            None,
        )
    }

    fn info(width: u32, height: u32, has_alpha: bool) -> SourceInfo {
        SourceInfo {
            format: SourceFormat::Jpeg,
            width,
            height,
            has_alpha,
        }
    }

    #[test]
    fn serves_small_outputs_of_large_opaque_sources() {
        let photo = info(4000, 3000, false);
        let (landscape, portrait) = ((4000, 3000), (3000, 4000));
        // The mezzanine is 2048 × 1536 (factor 1.95): outputs up to 1/1.75 of it, 1170 × 877.
        assert!(serves(&photo, landscape, &spec(&[("w", "400")])));
        assert!(serves(&photo, landscape, &spec(&[("w", "1160")])));
        assert!(!serves(&photo, landscape, &spec(&[("w", "1180")])));
        assert!(serves(&photo, landscape, &spec(&[("h", "870")])));
        assert!(!serves(&photo, landscape, &spec(&[("h", "880")])));
        // Turned by its EXIF orientation, the same width is a larger share of the picture.
        assert!(!serves(&photo, portrait, &spec(&[("w", "1160")])));
        assert!(may_serve(&photo, &spec(&[("w", "1160")])));
        assert!(!may_serve(&photo, &spec(&[("w", "1180")])));
        // No resize at all, alpha, or a small source: the original.
        assert!(!may_serve(&photo, &spec(&[("format", "webp")])));
        assert!(!may_serve(&info(4000, 3000, true), &spec(&[("w", "400")])));
        assert!(!may_serve(&info(3000, 2000, false), &spec(&[("w", "400")])));
        // A crop to a small part of the picture needs its detail.
        assert!(!serves(
            &photo,
            landscape,
            &spec(&[("w", "400"), ("h", "3000"), ("fit", "cover")])
        ));
    }

    #[test]
    fn frame_round_trip_and_refusals() {
        let framed = [
            MAGIC.as_slice(),
            &MEZZANINE_VERSION.to_be_bytes(),
            &4000u32.to_be_bytes(),
            &3000u32.to_be_bytes(),
            b"jpeg",
        ]
        .concat();
        let m = parse(&framed).unwrap();
        assert_eq!((m.original_upright, m.jpeg), ((4000, 3000), &b"jpeg"[..]));
        assert!(parse(&framed[..10]).is_err());
        assert!(parse(b"\xFF\xD8\xFF").is_err());
        let mut other = framed.clone();
        other[11] ^= 0xFF;
        assert!(parse(&other).is_err());
        assert_eq!(size_for((4000, 3000)), (2048, 1536));
        assert_eq!(size_for((3000, 4500)), (1365, 2048));
    }
}

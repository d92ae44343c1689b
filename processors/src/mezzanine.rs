//! The mezzanine: a smaller, upright, sRGB derivative of a large original (reduced by a power
//! of two to a long side from 1536 to 3071 pixels, a high-quality JPEG) from which most
//! outputs are made, so that the second and later specs of an original decode a file of a few
//! hundred kilobytes at a reduced DCT scale instead of the whole original again.
//!
//! It is built cheaply: a JPEG original is decoded at half the mezzanine's reduction (the
//! scale shrink-on-load picks for it, and the one specs too large for the mezzanine pick, so
//! a `srcset` burst shares one decode), then averaged 2 × 2; other formats are decoded whole
//! and averaged over the whole reduction.
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

use crate::decode::{open, Limits, SourceInfo};
use crate::error::ProcessError;
use crate::geometry;
use crate::spec::OutputFormat;
use crate::spec::ResolvedSpec;
use crate::{layout, ops, Decodes, InputKind, Processed};

/// Bumped whenever [`build`] would produce other bytes: stored mezzanines of another version
/// are not used.
pub const MEZZANINE_VERSION: u32 = 1;

/// Originals whose long side is at least this have a mezzanine: below it, a mezzanine would
/// save too little decoding to pay for itself. Mezzanines' long sides are from half this.
pub const FROM_SIDE: u32 = 3072;

/// JPEG quality of the mezzanine, with full chroma (at 88, with 4:2:0 chroma, outputs were
/// 0.12 dB below the original's path).
const QUALITY: u8 = 92;

const MAGIC: &[u8; 8] = b"imgcasMZ";
const FRAME: usize = MAGIC.len() + 12;

/// How much more resolution than the output the mezzanine must hold, along the output's
/// less-reduced axis, for a spec to be made from it: twice, the margin shrink-on-load keeps.
/// The outputs it serves are those the original's own path would decode at a reduced DCT
/// scale, which is about what the mezzanine's 2 × 2 average is; below it, the original's
/// path decodes at full scale and is sharper (1.25 dB at 1.75, `tests/mezzanine_quality.rs`).
const MARGIN: f64 = 2.0;

/// Whether a spec is made from the mezzanine of a source with these header facts and this
/// upright size (after EXIF orientation): the source is opaque and large (long side ≥
/// [`FROM_SIDE`]), and the mezzanine still holds [`MARGIN`] times the output's resolution
/// along the less-reduced axis.
pub fn serves(info: &SourceInfo, upright: (u32, u32), spec: &ResolvedSpec) -> bool {
    let long = info.width.max(info.height);
    if info.has_alpha || long < FROM_SIDE || !info.format.can_decode() {
        return false;
    }
    let mezzanine = size_for((info.width, info.height));
    let factor = f64::from(long) / f64::from(mezzanine.0.max(mezzanine.1));
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

/// The reduction from an original whose long side is `long` (at least [`FROM_SIDE`]) to its
/// mezzanine: the smallest power of two from 2 that brings the long side below
/// [`FROM_SIDE`].
fn reduction(long: u32) -> u32 {
    let mut k = 2;
    while long / k >= FROM_SIDE {
        k *= 2;
    }
    k
}

/// The mezzanine's size for an original of upright size `upright` (each side divided by the
/// reduction, rounded up, as a scaled JPEG decode rounds). Given the stored size, the
/// mezzanine's size or its transpose.
pub fn size_for(upright: (u32, u32)) -> (u32, u32) {
    let k = reduction(upright.0.max(upright.1));
    (upright.0.div_ceil(k), upright.1.div_ceil(k))
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
    let k = reduction(upright.0.max(upright.1));
    // The scale shrink-on-load picks for this reduction (it keeps twice the output's
    // resolution): k / 2, at most 1/8.
    let denominator = if source.can_shrink_on_load() {
        geometry::shrink_denominator(f64::from(k))
    } else {
        1
    };
    let decoded = decodes.decoded(InputKind::Original, denominator, &mut || {
        source.decode(limits, denominator)
    })?;
    let rgb = ops::reduce_box(&decoded, size);
    let jpeg = crate::jpeg::encode_with(&rgb, QUALITY, false, false)?;
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
    let k = reduction(w.max(h).max(FROM_SIDE));
    let denominator = if info.format == crate::sniff::SourceFormat::Jpeg {
        u64::from(geometry::shrink_denominator(f64::from(k)))
    } else {
        1
    };
    u64::from(w) * u64::from(h) / (denominator * denominator)
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
        // The mezzanine is 2000 × 1500: outputs up to half of it, 1000 × 750.
        assert!(serves(&photo, landscape, &spec(&[("w", "400")])));
        assert!(serves(&photo, landscape, &spec(&[("w", "1000")])));
        assert!(!serves(&photo, landscape, &spec(&[("w", "1010")])));
        assert!(serves(&photo, landscape, &spec(&[("h", "750")])));
        assert!(!serves(&photo, landscape, &spec(&[("h", "760")])));
        // Turned by its EXIF orientation, the same width is a larger share of the picture.
        assert!(!serves(&photo, portrait, &spec(&[("w", "1000")])));
        assert!(may_serve(&photo, &spec(&[("w", "1000")])));
        assert!(!may_serve(&photo, &spec(&[("w", "1010")])));
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
        assert_eq!(size_for((4000, 3000)), (2000, 1500));
        assert_eq!(size_for((3001, 4501)), (1501, 2251));
        assert_eq!(size_for((8000, 6000)), (2000, 1500));
        assert_eq!(size_for((6143, 100)), (3072, 50));
        assert_eq!(size_for((6144, 100)), (1536, 25));
    }
}

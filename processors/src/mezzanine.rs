//! The mezzanine: a smaller, upright, sRGB derivative of a large original (reduced by a power
//! of two to a long side from 1536 to 3071 pixels, a high-quality JPEG) from which most
//! outputs are made, so that the second and later specs of an original decode a file of a few
//! hundred kilobytes at a reduced DCT scale instead of the whole original again.
//!
//! Only sources that cannot shrink on load have one (PNG, WebP, AVIF, TIFF, …: there it
//! saves most of the decoding of every later spec). A JPEG original decodes at the DCT scale
//! each output picks, for about what decoding a mezzanine would cost, so it makes every
//! output itself: a mezzanine would only add its build to the first request. The build
//! decodes the original whole and averages it over the whole reduction.
//!
//! Whether a spec is made from the mezzanine is decided by [`serves`] from the spec and the
//! source's header facts alone (stored size, alpha), never from what happens to be stored or
//! cached: a variant's bytes depend only on the original, the canonical spec and the processor
//! version. The mezzanine itself is a pure function of the original ([`build`]), so a lost
//! one is rebuilt to the same bytes.
//!
//! It is two JPEGs, the top and the bottom half of the picture (split on a row that is a
//! multiple of 8, so that with full chroma every 8 × 8 block is coded, and decoded at any DCT
//! scale, exactly as in one JPEG of the whole): the halves are encoded, and later decoded, on
//! two threads at once, which halves the time the variants waiting for a new mezzanine wait.
//!
//! On disk it is a short frame around the JPEGs: a magic, the version, the original's upright
//! size (plans are made in the original's coordinates, then scaled, exactly as a
//! shrink-on-load decode is), and the length of the first JPEG.

use crate::decode::{open, Limits, SourceInfo};
use crate::error::ProcessError;
use crate::geometry::layout;
use crate::spec::OutputFormat;
use crate::spec::ResolvedSpec;
use crate::{ops, Decodes, InputKind, Processed};

/// Bumped whenever [`build`] would produce other bytes: stored mezzanines of another version
/// are not used.
pub const MEZZANINE_VERSION: u32 = 2;

/// Originals whose long side is at least this have a mezzanine: below it, a mezzanine would
/// save too little decoding to pay for itself. Mezzanines' long sides are from half this.
pub const FROM_SIDE: u32 = 3072;

/// JPEG quality of the mezzanine, with full chroma (at 88, with 4:2:0 chroma, outputs were
/// 0.12 dB below the original's path).
const QUALITY: u8 = 92;

const MAGIC: &[u8; 8] = b"imgcasMZ";
const FRAME: usize = MAGIC.len() + 16;

/// The rows of a stripe are a multiple of this: the JPEG block size, so that no block spans
/// the two stripes (chroma is not subsampled).
const STRIPE_ROWS: u32 = 8;

/// How much more resolution than the output the mezzanine must hold, along the output's
/// less-reduced axis, for a spec to be made from it: four times. The originals that have a
/// mezzanine decode whole on their own path, the sharpest there is; against that, outputs
/// holding less margin lose visibly (0.95 dB at twice, where a JPEG original's own path,
/// decoding at a reduced DCT scale, lost as much as the mezzanine), and outputs within it
/// lose at most 0.35 dB (`tests/mezzanine_quality.rs`).
const MARGIN: f64 = 4.0;

/// Whether a spec is made from the mezzanine of a source with these header facts and this
/// upright size (after EXIF orientation): the source is opaque and large (long side ≥
/// [`FROM_SIDE`]), and the mezzanine still holds [`MARGIN`] times the output's resolution
/// along the less-reduced axis.
pub fn serves(info: &SourceInfo, upright: (u32, u32), spec: &ResolvedSpec) -> bool {
    serves_from(info, spec).is_some_and(|from| {
        let (rotated, plan, _) = layout(upright, spec, false);
        plan.reduction(rotated) >= from
    })
}

/// The reduction of the output (in the original's upright coordinates) from which the
/// mezzanine serves a source with these header facts, when it may serve it at all: the
/// part of [`serves`] that does not depend on the orientation.
pub fn serves_from(info: &SourceInfo, spec: &ResolvedSpec) -> Option<f64> {
    let long = info.width.max(info.height);
    // A mezzanine is a still: animations are made from their original's frames. A source
    // that shrinks on load (JPEG) decodes at the scale each output picks, for about what
    // a mezzanine's decode would cost, so a mezzanine would only add its own build (a
    // decode and an encode) to the first request: measured 2.8x dearer first variants.
    // A vector source (with alpha anyway) is drawn at each output's size.
    let no_mezzanine = info.has_alpha
        || spec.animated
        || spec.decodes_whole()
        || info.format.shrinks_on_load()
        || info.format.is_vector();
    if no_mezzanine || long < FROM_SIDE || !info.format.can_decode() {
        return None;
    }
    let mezzanine = size_for((info.width, info.height));
    let factor = f64::from(long) / f64::from(mezzanine.0.max(mezzanine.1));
    Some(MARGIN * factor)
}

/// Whether [`serves`] may hold, before the orientation is known (either way round): when it
/// cannot, the service need not read the original's header to decide.
pub fn may_serve(info: &SourceInfo, spec: &ResolvedSpec) -> bool {
    both_ways(info).any(|upright| serves(info, upright, spec))
}

/// Whether [`serves`] holds whatever the orientation: then, too, the service need not read
/// the original's header to decide (a header that does not open fails the mezzanine's
/// build as it would fail the run, and the variant takes that failure).
pub fn serves_either_way(info: &SourceInfo, spec: &ResolvedSpec) -> bool {
    both_ways(info).all(|upright| serves(info, upright, spec))
}

/// The stored size, and its transpose.
fn both_ways(info: &SourceInfo) -> impl Iterator<Item = (u32, u32)> {
    [(info.width, info.height), (info.height, info.width)].into_iter()
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
/// The original is decoded through `decodes` (whole: sources with a mezzanine do not shrink
/// on load), so a concurrent spec that needs that same decode shares it.
pub fn build(
    original: &[u8],
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Processed, ProcessError> {
    let source = open(original, limits)?;
    let upright = source.upright_size();
    let size = size_for(upright);
    let k = reduction(upright.0.max(upright.1));
    // 1 for every source [`serves`] gives a mezzanine.
    let denominator = source.shrink_denominator(f64::from(k), false);
    let decoded = decodes.decoded(InputKind::Original, denominator, &mut || {
        source.decode(limits, denominator)
    })?;
    crate::decode::offer_small(&source, denominator, &decoded, decodes);
    decodes.check()?;
    let rgb = ops::reduce_box(&decoded, size);
    drop(decoded);
    decodes.check()?;
    let (top, bottom) = encode_stripes(&rgb)?;
    let mut framed = Vec::with_capacity(FRAME + top.len() + bottom.len());
    framed.extend_from_slice(MAGIC);
    framed.extend_from_slice(&MEZZANINE_VERSION.to_be_bytes());
    framed.extend_from_slice(&upright.0.to_be_bytes());
    framed.extend_from_slice(&upright.1.to_be_bytes());
    let top_len = u32::try_from(top.len())
        .map_err(|_| ProcessError::Internal("a mezzanine stripe over 4 GiB".into()))?;
    framed.extend_from_slice(&top_len.to_be_bytes());
    framed.extend_from_slice(&top);
    framed.extend_from_slice(&bottom);
    Ok(Processed {
        bytes: framed,
        chosen: None,
        search_encodes: 0,
        format: OutputFormat::Jpeg,
        width: size.0,
        height: size.1,
    })
}

/// The JPEGs of a mezzanine's stripes, encoded at once (the bottom one empty when too few
/// rows).
fn encode_stripes(rgb: &image::RgbImage) -> Result<(Vec<u8>, Vec<u8>), ProcessError> {
    let (width, height) = rgb.dimensions();
    let stride = width as usize * 3;
    let raw = rgb.as_raw();
    let stripe = |from: u32, to: u32| {
        let rows = &raw[from as usize * stride..to as usize * stride];
        crate::jpeg_encode::encode_rows(rows, width, QUALITY, false, false)
    };
    let split = split_row(height);
    if split == 0 {
        return Ok((stripe(0, height)?, Vec::new()));
    }
    let (top, bottom) = both(|| stripe(0, split), || stripe(split, height))?;
    Ok((top?, bottom?))
}

/// Runs `top` here and `bottom` on a second thread at once: the two stripes.
fn both<T: Send>(
    top: impl FnOnce() -> T,
    bottom: impl FnOnce() -> T + Send,
) -> Result<(T, T), ProcessError> {
    std::thread::scope(|scope| {
        let lower = scope.spawn(bottom);
        let upper = top();
        let lower = lower
            .join()
            .map_err(|_| ProcessError::Internal("a mezzanine stripe's thread panicked".into()))?;
        Ok((upper, lower))
    })
}

/// The first row of the bottom stripe of a mezzanine `height` rows high (0: one stripe).
fn split_row(height: u32) -> u32 {
    height / 2 / STRIPE_ROWS * STRIPE_ROWS
}

/// What building the mezzanine of a source with these header facts costs, in pixels
/// touched (as [`crate::cost`] counts a run): a whole decode (sources with a mezzanine do
/// not shrink on load).
pub fn build_cost(info: &SourceInfo) -> u64 {
    (u64::from(info.width.max(1)) * u64::from(info.height.max(1)))
        .saturating_mul(info.format.decode_weight())
}

/// Bytes a mezzanine's build holds at its peak: the original decoded whole at its decoder's
/// bytes per pixel, the mezzanine's pixels and their JPEG encode, and the codecs' state.
pub fn build_memory(info: &SourceInfo) -> u64 {
    let pixels = u64::from(info.width.max(1)) * u64::from(info.height.max(1));
    let (mw, mh) = size_for((info.width, info.height));
    let mezzanine = u64::from(mw) * u64::from(mh);
    pixels
        .saturating_mul(info.format.decode_bytes_per_pixel())
        .saturating_add(mezzanine.saturating_mul(12))
        .saturating_add(crate::limits::RUN_BASE_BYTES)
}

/// A stored mezzanine, read: the original's upright size and the JPEGs of its stripes, top
/// first (the bottom one is empty for a single stripe).
pub struct Mezzanine<'a> {
    pub original_upright: (u32, u32),
    pub stripes: [&'a [u8]; 2],
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
    let (w, h, top_len) = match (field(12), field(16), field(20)) {
        (Some(w), Some(h), Some(top)) => (w, h, top as usize),
        _ => return Err(corrupt("is truncated")),
    };
    let jpegs = &bytes[FRAME..];
    if top_len > jpegs.len() {
        return Err(corrupt("is truncated"));
    }
    let (top, bottom) = jpegs.split_at(top_len);
    Ok(Mezzanine {
        original_upright: (w, h),
        stripes: [top, bottom],
    })
}

/// Decodes a mezzanine's stripes at `1/denominator` (on two threads) and stacks them: the
/// picture one JPEG of the whole would decode to.
pub fn decode(
    m: &Mezzanine<'_>,
    limits: &Limits,
    denominator: u32,
) -> Result<image::DynamicImage, ProcessError> {
    let stripe = |jpeg: &[u8]| -> Result<image::RgbImage, ProcessError> {
        Ok(open(jpeg, limits)?.decode(limits, denominator)?.into_rgb8())
    };
    let [top, bottom] = m.stripes;
    if bottom.is_empty() {
        return stripe(top).map(image::DynamicImage::ImageRgb8);
    }
    let (top, bottom) = both(|| stripe(top), || stripe(bottom))?;
    let (top, bottom) = (top?, bottom?);
    if top.width() != bottom.width() {
        return Err(ProcessError::Internal(
            "a stored mezzanine's stripes differ in width".into(),
        ));
    }
    let (width, rows) = (top.width(), top.height() + bottom.height());
    let mut raw = Vec::with_capacity(width as usize * rows as usize * 3);
    raw.extend_from_slice(top.as_raw());
    drop(top);
    raw.extend_from_slice(bottom.as_raw());
    image::RgbImage::from_raw(width, rows, raw)
        .map(image::DynamicImage::ImageRgb8)
        .ok_or_else(|| ProcessError::Internal("a stored mezzanine's stripes do not stack".into()))
}

/// A mezzanine's size, from its first stripe's header and the original's size.
pub fn stored_size(m: &Mezzanine<'_>, limits: &Limits) -> Result<(u32, u32), ProcessError> {
    let top = open(m.stripes[0], limits)?.upright_size();
    let size = size_for(m.original_upright);
    if top.0 != size.0 {
        return Err(ProcessError::Internal(
            "a stored mezzanine does not match its original's size".into(),
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::SourceFormat;

    use crate::spec::resolved_for_jpeg as spec;

    fn info(width: u32, height: u32, has_alpha: bool) -> SourceInfo {
        SourceInfo {
            format: SourceFormat::Png,
            width,
            height,
            has_alpha,
        }
    }

    #[test]
    fn serves_small_outputs_of_large_opaque_sources() {
        let photo = info(4000, 3000, false);
        let (landscape, portrait) = ((4000, 3000), (3000, 4000));
        // The mezzanine is 2000 × 1500: outputs up to a quarter of it, 500 × 375.
        assert!(serves(&photo, landscape, &spec(&[("w", "400")])));
        assert!(serves(&photo, landscape, &spec(&[("w", "500")])));
        assert!(!serves(&photo, landscape, &spec(&[("w", "510")])));
        assert!(serves(&photo, landscape, &spec(&[("h", "375")])));
        assert!(!serves(&photo, landscape, &spec(&[("h", "380")])));
        // Turned by its EXIF orientation, the same width is a larger share of the picture.
        assert!(!serves(&photo, portrait, &spec(&[("w", "500")])));
        assert!(may_serve(&photo, &spec(&[("w", "500")])));
        assert!(!may_serve(&photo, &spec(&[("w", "510")])));
        // No resize at all, alpha, or a small source: the original.
        assert!(!may_serve(&photo, &spec(&[("format", "webp")])));
        assert!(!may_serve(&info(4000, 3000, true), &spec(&[("w", "400")])));
        assert!(!may_serve(&info(3000, 2000, false), &spec(&[("w", "400")])));
        // A JPEG shrinks on load instead, whatever the output.
        let jpeg = SourceInfo {
            format: SourceFormat::Jpeg,
            ..photo
        };
        assert!(!may_serve(&jpeg, &spec(&[("w", "400")])));
        // A crop to a small part of the picture needs its detail.
        assert!(!serves(
            &photo,
            landscape,
            &spec(&[("w", "400"), ("h", "3000"), ("fit", "cover")])
        ));
    }

    #[test]
    fn either_way_round_only_when_the_orientation_cannot_matter() {
        let photo = info(4000, 3000, false);
        // 375 wide is within a quarter of the mezzanine both ways round (2000 and 1500).
        assert!(serves_either_way(&photo, &spec(&[("w", "375")])));
        // 500 wide is, landscape only: the header decides.
        assert!(may_serve(&photo, &spec(&[("w", "500")])));
        assert!(!serves_either_way(&photo, &spec(&[("w", "500")])));
        assert!(!serves_either_way(&photo, &spec(&[("w", "510")])));
        assert!(!serves_either_way(
            &info(4000, 3000, true),
            &spec(&[("w", "100")])
        ));
    }

    #[test]
    fn frame_round_trip_and_refusals() {
        let framed = [
            MAGIC.as_slice(),
            &MEZZANINE_VERSION.to_be_bytes(),
            &4000u32.to_be_bytes(),
            &3000u32.to_be_bytes(),
            &3u32.to_be_bytes(),
            b"topbottom",
        ]
        .concat();
        let m = parse(&framed).unwrap();
        assert_eq!(
            (m.original_upright, m.stripes),
            ((4000, 3000), [&b"top"[..], &b"bottom"[..]])
        );
        assert!(parse(&framed[..10]).is_err());
        assert!(parse(&framed[..FRAME + 2]).is_err());
        assert!(parse(b"\xFF\xD8\xFF").is_err());
        let mut other = framed.clone();
        other[11] ^= 0xFF;
        assert!(parse(&other).is_err());
        assert_eq!(size_for((4000, 3000)), (2000, 1500));
        assert_eq!(size_for((3001, 4501)), (1501, 2251));
        assert_eq!(size_for((8000, 6000)), (2000, 1500));
        assert_eq!(size_for((6143, 100)), (3072, 50));
        assert_eq!(size_for((6144, 100)), (1536, 25));
        assert_eq!((split_row(1500), split_row(17), split_row(15)), (744, 8, 0));
    }

    /// Two stripes decode, at every DCT scale, to the very pixels one JPEG of the whole does:
    /// the stripes are a way to use two cores, not a change of picture.
    #[test]
    fn stripes_decode_as_one_jpeg_would() {
        let limits = Limits::default();
        for (width, height) in [(203, 157), (64, 40), (50, 9)] {
            let rgb = image::RgbImage::from_fn(width, height, |x, y| {
                let v = (x * 7 + y * 13 + (x * y) % 31) as u8;
                image::Rgb([v, v.wrapping_mul(3), 255 - v])
            });
            let whole = crate::jpeg_encode::encode_rows(rgb.as_raw(), width, QUALITY, false, false)
                .unwrap();
            let (top, bottom) = encode_stripes(&rgb).unwrap();
            assert_eq!(bottom.is_empty(), height < 16);
            let m = Mezzanine {
                original_upright: (width * 2, height * 2),
                stripes: [&top, &bottom],
            };
            for denominator in [1, 2, 4, 8] {
                let one = open(&whole, &limits)
                    .unwrap()
                    .decode(&limits, denominator)
                    .unwrap()
                    .into_rgb8();
                let striped = decode(&m, &limits, denominator).unwrap().into_rgb8();
                assert_eq!(
                    one.dimensions(),
                    striped.dimensions(),
                    "{width}x{height} 1/{denominator}"
                );
                assert!(one == striped, "{width}x{height} at 1/{denominator}");
            }
        }
    }
}

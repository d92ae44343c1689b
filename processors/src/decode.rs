//! Bytes to upright pixels. [`open`] reads only headers (format, size, orientation, alpha,
//! ICC) and enforces the limits there, and refuses counts and lengths a container declares
//! that its bytes cannot hold, before any pixel buffer exists; [`Source::decode`]
//! then produces 8-bit RGB or RGBA, DCT-downscaled for JPEG at the scale
//! [`Source::shrink_denominator`] picks for an output.

use image::metadata::Orientation;
use image::DynamicImage;

use crate::error::ProcessError;
use crate::formats::{open_header, DecodeAt, Decoder, SourceFormat};
pub use crate::limits::Limits;

/// What the header of a source says, read without decoding pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceInfo {
    pub format: SourceFormat,
    /// As stored (before orientation).
    pub width: u32,
    pub height: u32,
    pub has_alpha: bool,
}

/// An opened source: headers read and checked, pixels not yet decoded.
pub struct Source<'a> {
    bytes: &'a [u8],
    pub info: SourceInfo,
    /// EXIF (JPEG, WebP, PNG, TIFF) orientation, applied by [`Source::decode`].
    pub orientation: Orientation,
    /// The embedded colour profile, if any.
    pub icc: Option<Vec<u8>>,
    /// The format room's decoder for these bytes.
    decoder: Box<dyn Decoder + 'a>,
}

/// Reads a source's headers and checks them against the limits (in
/// [`crate::formats::open_header`]). Third-party header readers run there and in
/// [`Source::decode`], both under [`crate::error::guarded`]: a panic in one is the file's
/// `undecodable`.
pub fn open<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Source<'a>, ProcessError> {
    let (format, header) = open_header(bytes, limits)?;
    Ok(Source {
        bytes,
        info: SourceInfo {
            format,
            width: header.width,
            height: header.height,
            has_alpha: header.has_alpha,
        },
        orientation: header.orientation,
        icc: header.icc,
        decoder: header.decoder,
    })
}

/// Reads the header only: format, stored size, alpha. Enforces the pixel limit.
pub fn probe(bytes: &[u8], limits: &Limits) -> Result<SourceInfo, ProcessError> {
    probe_upright(bytes, limits).map(|(info, _)| info)
}

/// [`probe`], and the size once orientation is applied ([`Source::upright_size`]): what an
/// index of originals keeps so that routing a variant needs no header read.
pub fn probe_upright(
    bytes: &[u8],
    limits: &Limits,
) -> Result<(SourceInfo, (u32, u32)), ProcessError> {
    open(bytes, limits).map(|s| (s.info, s.upright_size()))
}

fn swaps_axes(o: Orientation) -> bool {
    matches!(
        o,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    )
}

impl<'a> Source<'a> {
    /// The bytes it was opened from.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Width and height once orientation (EXIF, or AVIF's clap and irot) is applied.
    pub fn upright_size(&self) -> (u32, u32) {
        if let Some(size) = self.decoder.upright_size() {
            return size;
        }
        let (w, h) = (self.info.width, self.info.height);
        if swaps_axes(self.orientation) {
            (h, w)
        } else {
            (w, h)
        }
    }

    /// Whether [`Source::decode`] can downscale while decoding (JPEG's DCT scaling).
    pub fn can_shrink_on_load(&self) -> bool {
        self.info.format.shrinks_on_load()
    }

    /// The scale of [`decode_small`]: the smallest that keeps both sides at least
    /// [`SMALL_DECODE_SIDE`] (1 where the format cannot shrink on load).
    pub fn small_denominator(&self) -> u32 {
        if !self.can_shrink_on_load() {
            return 1;
        }
        let (width, height) = self.upright_size();
        [8, 4, 2]
            .into_iter()
            .find(|d| width.min(height) / d >= SMALL_DECODE_SIDE)
            .unwrap_or(1)
    }

    /// The size of [`decode_small`]'s pixels: the decode at [`Source::small_denominator`],
    /// then reduced by the largest whole factor that keeps both sides at least
    /// [`SMALL_DECODE_SIDE`]. A format without shrink-on-load decodes at full size, and the
    /// placeholders' and fingerprint's own reductions of a full-size photo cost more than
    /// the decode's box reduction (a 640 × 960 PNG photo: its small pixels are 128 × 192).
    pub fn small_size(&self) -> (u32, u32) {
        let denominator = self.small_denominator();
        let (width, height) = self.upright_size();
        let (width, height) = (width.div_ceil(denominator), height.div_ceil(denominator));
        let factor = (width.min(height) / SMALL_DECODE_SIDE).max(1);
        (width.div_ceil(factor), height.div_ceil(factor))
    }

    /// The scale to decode at (1/denominator) for an output `reduction` times smaller than
    /// the source: 1 where the format cannot shrink on load; JPEG's rule is its room's
    /// (twice the output's resolution, or 1/8 from its DC scans where `coarse_ok`: the
    /// output's own loss hides it, [`crate::ResolvedSpec::hides_coarse_decode`]).
    pub fn shrink_denominator(&self, reduction: f64, coarse_ok: bool) -> u32 {
        self.decoder.shrink_denominator(reduction, coarse_ok)
    }

    /// Decodes to upright 8-bit RGB or RGBA, at `1/denominator` scale where the format
    /// allows it (JPEG: 1, 2, 4 or 8; others decode at full size).
    pub fn decode(&self, limits: &Limits, denominator: u32) -> Result<DynamicImage, ProcessError> {
        crate::error::guarded(self.info.format.name(), || {
            self.decode_pixels(limits, denominator, None)
        })
    }

    /// The work of drawing it at `size` beyond its pixels (a vector source's; 0 for a
    /// raster).
    pub fn drawing_work(&self, size: (u32, u32)) -> u64 {
        self.decoder.drawing_work(size)
    }

    /// A vector source drawn at `size` (see [`crate::vector_size`]); a raster source decodes
    /// at full size.
    pub fn render(&self, limits: &Limits, size: (u32, u32)) -> Result<DynamicImage, ProcessError> {
        crate::error::guarded(self.info.format.name(), || {
            self.decode_pixels(limits, 1, Some(size))
        })
    }

    fn decode_pixels(
        &self,
        limits: &Limits,
        denominator: u32,
        render: Option<(u32, u32)>,
    ) -> Result<DynamicImage, ProcessError> {
        let decoded = self.decoder.decode(&DecodeAt {
            bytes: self.bytes,
            limits,
            denominator,
            icc: self.icc.as_deref(),
            render,
        })?;
        let mut image = decoded.image;
        if let (Some(icc), false) = (&self.icc, decoded.profile_applied) {
            image = crate::color::to_srgb(normalize(image), icc);
        }
        image.apply_orientation(self.orientation);
        Ok(normalize(image))
    }
}

/// 8-bit RGB, or RGBA when the picture has alpha: the two layouts the pipeline works in.
fn normalize(image: DynamicImage) -> DynamicImage {
    match image {
        DynamicImage::ImageRgb8(_) | DynamicImage::ImageRgba8(_) => image,
        other if other.color().has_alpha() => DynamicImage::ImageRgba8(other.into_rgba8()),
        other => DynamicImage::ImageRgb8(other.into_rgb8()),
    }
}

/// The shortest side a small decode keeps (JPEG shrinks on load down to it); below it,
/// quantisation noise of the smaller decode starts to show in the fingerprint's grid.
pub const SMALL_DECODE_SIDE: u32 = 128;

/// Decodes as small as keeps both sides at least [`SMALL_DECODE_SIDE`] (JPEG shrinks on
/// load; other formats decode at full size), upright, through `decodes`, and box-reduces that
/// decode to [`Source::small_size`]; with the picture's full upright size. For what is
/// computed once per original (fingerprint, placeholders), which needs few pixels: both take
/// this one decode, so the service makes it once for the two.
pub fn decode_small(
    bytes: &[u8],
    limits: &Limits,
    decodes: &dyn crate::Decodes,
) -> Result<(crate::Pixels, (u32, u32)), ProcessError> {
    let source = open(bytes, limits)?;
    let (width, height) = source.upright_size();
    let denominator = source.small_denominator();
    let size = source.small_size();
    if source.info.format.is_vector() {
        // A drawing is drawn small, whatever size it declares.
        let image = source.render(limits, size)?;
        return Ok((crate::Pixels::new(image), (width, height)));
    }
    let image = decodes.small(
        denominator,
        &mut || source.decode(limits, denominator),
        &|decoded| reduce_small(decoded, size),
    )?;
    Ok((image, (width, height)))
}

/// `decoded` box-reduced to `size` (whole blocks: see [`crate::ops::reduce_box`]); as it is
/// when no larger, or when it has alpha (which the placeholders and the fingerprint read, and
/// the box reduction drops).
fn reduce_small(decoded: &crate::Pixels, size: (u32, u32)) -> crate::Pixels {
    if decoded.color().has_alpha() || (decoded.width() <= size.0 && decoded.height() <= size.1) {
        return decoded.clone();
    }
    crate::Pixels::new(DynamicImage::ImageRgb8(crate::ops::reduce_box(
        decoded, size,
    )))
}

/// Offers a run's decode of `source` at 1/`denominator` for its small pixels (see
/// [`crate::Decodes::offer_small`]) when it is at the small decode's scale or larger: reduced
/// to [`Source::small_size`] as [`decode_small`] reduces its own (JPEG: a scaled decode is
/// `ceil(side / denominator)` pixels a side, and the reduction's blocks are whole multiples
/// of that).
pub(crate) fn offer_small(
    source: &Source<'_>,
    denominator: u32,
    decoded: &crate::Pixels,
    decodes: &dyn crate::Decodes,
) {
    let small = source.small_denominator();
    if denominator <= small {
        let size = source.small_size();
        decodes.offer_small(small, &mut || reduce_small(decoded, size));
    }
}

/// Decodes at full size, upright (EXIF orientation applied; first frame only).
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<(SourceInfo, DynamicImage), ProcessError> {
    let source = open(bytes, limits)?;
    let image = source.decode(limits, 1)?;
    Ok((source.info, image))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;
    use image::ImageFormat;

    #[test]
    fn only_an_output_that_hides_it_takes_the_dc_only_eighth() {
        let limits = Limits::default();
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let rgb = open(&photo, &limits).unwrap().decode(&limits, 1).unwrap();
        let progressive = crate::jpeg_encode::encode(&rgb.into_rgb8(), 85, true).unwrap();
        let source = open(&progressive, &limits).unwrap();
        let spec = |query: &str| {
            crate::Spec::parse(query)
                .unwrap()
                .resolve(None, false, None)
        };
        // A JPEG at a quality whose own loss hides the DC scans' 1/8 at its reduction takes it
        // (`bench/coarse_decode.py`: the loss shrinks as the reduction grows).
        for (query, reduction) in [
            ("format=jpeg&q=50", 14.0),
            ("format=jpeg", 14.0),
            ("format=jpeg&q=85", 15.9),
        ] {
            assert!(spec(query).hides_coarse_decode(reduction), "{query}");
            assert_eq!(source.shrink_denominator(reduction, true), 8, "{query}");
        }
        // WebP, AVIF, lossless outputs, JPEGs above the measured quality, and every `q=auto`
        // output (its search scores against the faithful picture) keep libvips' margin of
        // two: 1/4 there.
        for (query, reduction) in [
            ("format=jpeg&q=40", 8.0),
            ("format=jpeg", 13.9),
            ("format=jpeg&q=90", 14.0),
            ("format=jpeg&q=auto:low", 12.0),
            ("format=webp&q=40", 14.0),
            ("format=webp&q=auto", 10.0),
            ("format=avif&q=65", 10.0),
            ("format=png", 10.0),
            ("format=webp&lossless=1", 10.0),
            ("format=gif", 10.0),
        ] {
            assert!(!spec(query).hides_coarse_decode(reduction), "{query}");
            assert_eq!(source.shrink_denominator(reduction, false), 4, "{query}");
        }
        // From 16 on, 1/8 for every output; below 8 the margin rule for every output.
        assert_eq!(source.shrink_denominator(16.0, false), 8);
        assert_eq!(source.shrink_denominator(7.9, true), 2);
    }

    /// Keeps what a run offers, as the service's decode cache does.
    #[derive(Default)]
    struct Offered(std::cell::RefCell<Option<crate::Pixels>>);

    impl crate::Decodes for Offered {
        fn decoded(
            &self,
            _from: crate::InputKind,
            _denominator: u32,
            decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
        ) -> Result<crate::Pixels, ProcessError> {
            decode().map(std::sync::Arc::new)
        }

        fn offer_small(&self, _denominator: u32, small: &mut dyn FnMut() -> crate::Pixels) {
            *self.0.borrow_mut() = Some(small());
        }
    }

    #[test]
    fn a_full_size_decode_is_box_reduced_for_the_small_pixels() {
        let limits = Limits::default();
        // A PNG decodes whole: 640 × 427 (a photo at a quarter) is reduced 3 times.
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let quarter = open(&photo, &limits).unwrap().decode(&limits, 4).unwrap();
        let mut png = Vec::new();
        quarter
            .write_to(&mut std::io::Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        let source = open(&png, &limits).unwrap();
        let (w, h) = (quarter.width(), quarter.height());
        let factor = w.min(h) / SMALL_DECODE_SIDE;
        assert!(factor >= 2, "{w} x {h}");
        assert_eq!(
            source.small_size(),
            (w.div_ceil(factor), h.div_ceil(factor))
        );

        let (small, size) = decode_small(&png, &limits, &crate::Decode).unwrap();
        assert_eq!(size, (w, h));
        assert_eq!((small.width(), small.height()), source.small_size());
        let reduced = crate::ops::reduce_box(&quarter, source.small_size());
        assert!(small.as_bytes() == reduced.as_raw().as_slice());

        // A run's whole decode offered for the small pixels gives the very same pixels.
        let offered = Offered::default();
        offer_small(&source, 1, &std::sync::Arc::new(quarter.clone()), &offered);
        let kept = offered.0.borrow().clone().expect("offered");
        assert!(kept.as_bytes() == small.as_bytes());

        // A picture with alpha is kept whole: the box reduction drops alpha.
        let mut rgba = Vec::new();
        DynamicImage::ImageRgba8(quarter.to_rgba8())
            .write_to(&mut std::io::Cursor::new(&mut rgba), ImageFormat::Png)
            .unwrap();
        let (small, _) = decode_small(&rgba, &limits, &crate::Decode).unwrap();
        assert_eq!((small.width(), small.height()), (w, h));
    }
}

//! Bytes to upright pixels. [`open`] reads only headers (format, size, orientation, alpha,
//! ICC) and enforces the limits there, and refuses counts and lengths a container declares
//! that its bytes cannot hold, before any pixel buffer exists; [`Source::decode`]
//! then produces 8-bit RGB or RGBA, DCT-downscaled for JPEG at the scale
//! [`Source::shrink_denominator`] picks for an output.

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};

use crate::avif::{self, AvifHeader};
use crate::error::ProcessError;
use crate::geometry;
use crate::gif::{self, GifHeader};
use crate::ico;
use crate::jpeg::{self, JpegHeader};
use crate::sniff::{sniff, SourceFormat};

/// Bounds on what one decode may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest width × height accepted, for sources (from their header) and for outputs.
    pub max_pixels: u64,
    /// Most frames an animation is processed with (`animated=1`); its frames × width ×
    /// height are held to `max_pixels` too.
    pub max_frames: u32,
    /// The most work one run may imply, in pixel-equivalents ([`crate::cost`]); a spec over
    /// it is refused with `too_costly` before any decode.
    pub max_cost: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pixels: 50_000_000,
            max_frames: 500,
            max_cost: 1_000_000_000,
        }
    }
}

impl Limits {
    /// Bytes a decoder may allocate: the RGBA picture twice over, plus working room.
    pub(crate) fn max_alloc(&self) -> u64 {
        self.max_pixels.saturating_mul(8).saturating_add(64 << 20)
    }
}

/// What the header of a source says, read without decoding pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceInfo {
    pub format: SourceFormat,
    /// As stored (before orientation).
    pub width: u32,
    pub height: u32,
    pub has_alpha: bool,
}

enum Kind<'a> {
    Jpeg(JpegHeader<'a>),
    Avif(AvifHeader),
    Gif(GifHeader),
    /// An ICO entry, rewrapped as a file of its own.
    Ico(Vec<u8>, ImageFormat),
    Other(ImageFormat),
}

/// An opened source: headers read and checked, pixels not yet decoded.
pub struct Source<'a> {
    bytes: &'a [u8],
    pub info: SourceInfo,
    /// EXIF (JPEG, WebP, PNG, TIFF) orientation, applied by [`Source::decode`].
    pub orientation: Orientation,
    /// The embedded colour profile, if any.
    pub icc: Option<Vec<u8>>,
    kind: Kind<'a>,
}

fn map_image_error(e: ImageError, limits: &Limits, dims: (u32, u32)) -> ProcessError {
    match e {
        ImageError::Limits(_) => ProcessError::too_many_pixels(dims.0, dims.1, limits.max_pixels),
        ImageError::Unsupported(u) => ProcessError::UnsupportedFormat(u.to_string()),
        other => ProcessError::Undecodable(other.to_string()),
    }
}

fn check_pixels(width: u32, height: u32, limits: &Limits) -> Result<(), ProcessError> {
    if width == 0 || height == 0 {
        return Err(ProcessError::Undecodable(format!(
            "the header declares an empty {width}x{height} image"
        )));
    }
    if u64::from(width) * u64::from(height) > limits.max_pixels {
        return Err(ProcessError::too_many_pixels(
            width,
            height,
            limits.max_pixels,
        ));
    }
    Ok(())
}

fn image_format(format: SourceFormat) -> Option<ImageFormat> {
    Some(match format {
        SourceFormat::Png => ImageFormat::Png,
        SourceFormat::Webp => ImageFormat::WebP,
        SourceFormat::Tiff => ImageFormat::Tiff,
        SourceFormat::Bmp => ImageFormat::Bmp,
        _ => return None,
    })
}

fn reader<'a>(
    bytes: &'a [u8],
    format: ImageFormat,
    limits: &Limits,
) -> ImageReader<Cursor<&'a [u8]>> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_alloc = Some(limits.max_alloc());
    reader.limits(decoder_limits);
    reader
}

/// The TIFF structure inside a WebP `EXIF` chunk (some writers prefix it with `Exif\0\0`).
fn webp_exif(bytes: &[u8]) -> Option<&[u8]> {
    let mut i = 12;
    while i + 8 <= bytes.len() {
        let fourcc = &bytes[i..i + 4];
        let size = u32::from_le_bytes(bytes[i + 4..i + 8].try_into().ok()?) as usize;
        let data = bytes.get(i + 8..i + 8 + size)?;
        if fourcc == b"EXIF" {
            return Some(data.strip_prefix(b"Exif\0\0").unwrap_or(data));
        }
        i += 8 + size + (size & 1);
    }
    None
}

/// The canvas a WebP declares in its first chunk (`VP8X` canvas or `VP8L` header), read here
/// because the `image` crate's reader wraps a 16384-pixel lossless side to 0.
fn webp_declared_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let fourcc = bytes.get(12..16)?;
    let u24 = |at: usize| -> Option<u32> {
        let b = bytes.get(at..at + 3)?;
        Some(u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16)
    };
    match fourcc {
        b"VP8X" => Some((u24(24)? + 1, u24(27)? + 1)),
        b"VP8L" if bytes.get(20) == Some(&0x2F) => {
            let bits = u32::from_le_bytes(bytes.get(21..25)?.try_into().ok()?);
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        _ => None,
    }
}

/// The compression field of a BMP info header (0 RGB, 1 RLE8, 2 RLE4, 3 bitfields; OS/2
/// core headers have none and count as 0).
fn bmp_compression(bytes: &[u8]) -> Option<u32> {
    let header_size = u32::from_le_bytes(bytes.get(14..18)?.try_into().ok()?);
    if header_size < 40 {
        return Some(0);
    }
    Some(u32::from_le_bytes(bytes.get(30..34)?.try_into().ok()?))
}

fn orientation_from_exif(tiff: Option<&[u8]>) -> Orientation {
    tiff.map(|t| t.strip_prefix(b"Exif\0\0").unwrap_or(t))
        .and_then(Orientation::from_exif_chunk)
        .unwrap_or(Orientation::NoTransforms)
}

/// Reads a source's headers and checks them against the limits. Third-party header readers
/// run here and in [`Source::decode`], both under [`crate::error::guarded`]: a panic in one
/// is the file's `undecodable`.
pub fn open<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Source<'a>, ProcessError> {
    let name = sniff(bytes).map_or("unknown", SourceFormat::name);
    crate::error::guarded(name, || open_headers(bytes, limits))
}

fn open_headers<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Source<'a>, ProcessError> {
    let format = sniff(bytes).ok_or_else(|| {
        ProcessError::UnsupportedFormat("the bytes are not in an image format imgcas reads".into())
    })?;
    if !format.can_decode() {
        return Err(ProcessError::UnsupportedFormat(format!(
            "{} sources are not supported",
            format.name()
        )));
    }
    crate::frames::check_declared(format, bytes)?;
    if format == SourceFormat::Tiff {
        crate::tif::check_first_ifd(bytes)?;
    }
    // Headers the `image` crate misreads or refuses, read once here for the arms below.
    let tiff_refused = (format == SourceFormat::Tiff)
        .then(|| crate::tif::refused_kind_header(bytes))
        .flatten();
    let webp_declared = (format == SourceFormat::Webp)
        .then(|| webp_declared_size(bytes))
        .flatten();
    let info = |width, height, has_alpha| SourceInfo {
        format,
        width,
        height,
        has_alpha,
    };
    match format {
        SourceFormat::Jpeg => {
            let header = jpeg::parse(bytes)?;
            if let Some(reason) = header.unsupported_reason() {
                return Err(ProcessError::UnsupportedFormat(reason));
            }
            check_pixels(header.width, header.height, limits)?;
            Ok(Source {
                bytes,
                info: info(header.width, header.height, false),
                orientation: orientation_from_exif(header.exif),
                icc: header.icc.clone(),
                kind: Kind::Jpeg(header),
            })
        }
        SourceFormat::Avif => {
            let header = avif::parse(bytes)?;
            check_pixels(header.width, header.height, limits)?;
            Ok(Source {
                bytes,
                info: info(header.width, header.height, header.has_alpha),
                orientation: Orientation::NoTransforms,
                icc: None,
                kind: Kind::Avif(header),
            })
        }
        SourceFormat::Gif => {
            let header = gif::parse(bytes)?;
            let pixels = header.declared_pixels();
            if pixels > limits.max_pixels {
                let (w, h) = if header.frame.0 as u64 * header.frame.1 as u64 == pixels {
                    header.frame
                } else {
                    header.screen
                };
                return Err(ProcessError::too_many_pixels(w, h, limits.max_pixels));
            }
            let (w, h) = header.canvas();
            check_pixels(w, h, limits)?;
            Ok(Source {
                bytes,
                info: info(w, h, true),
                orientation: Orientation::NoTransforms,
                icc: None,
                kind: Kind::Gif(header),
            })
        }
        SourceFormat::Ico => {
            let entry = ico::largest_entry(bytes)?;
            let format = if entry.is_png {
                ImageFormat::Png
            } else {
                ImageFormat::Bmp
            };
            let ((w, h), has_alpha) = {
                let decoder = reader(&entry.bytes, format, limits)
                    .into_decoder()
                    .map_err(|e| map_image_error(e, limits, (0, 0)))?;
                (decoder.dimensions(), decoder.color_type().has_alpha())
            };
            check_pixels(w, h, limits)?;
            Ok(Source {
                bytes,
                info: info(w, h, has_alpha),
                orientation: Orientation::NoTransforms,
                icc: None,
                kind: Kind::Ico(entry.bytes, format),
            })
        }
        SourceFormat::Bmp if !matches!(bmp_compression(bytes), Some(0..=3)) => {
            Err(ProcessError::UnsupportedFormat(format!(
                "BMP compression {:?} is not supported",
                bmp_compression(bytes)
            )))
        }
        SourceFormat::Tiff if tiff_refused.is_some() => {
            let (w, h, orientation) = tiff_refused.unwrap_or_default();
            check_pixels(w, h, limits)?;
            Ok(Source {
                bytes,
                info: info(w, h, false),
                orientation: Orientation::from_exif(orientation)
                    .unwrap_or(Orientation::NoTransforms),
                icc: None,
                kind: Kind::Other(ImageFormat::Tiff),
            })
        }
        SourceFormat::Webp
            if webp_declared
                .is_some_and(|(w, h)| u64::from(w) * u64::from(h) > limits.max_pixels) =>
        {
            let (w, h) = webp_declared.unwrap_or_default();
            Err(ProcessError::too_many_pixels(w, h, limits.max_pixels))
        }
        other => {
            let image_format = image_format(other).ok_or_else(|| {
                ProcessError::UnsupportedFormat(format!(
                    "{} sources are not supported",
                    other.name()
                ))
            })?;
            let mut decoder = reader(bytes, image_format, limits)
                .into_decoder()
                .map_err(|e| map_image_error(e, limits, (0, 0)))?;
            let (w, h) = decoder.dimensions();
            check_pixels(w, h, limits)?;
            let orientation = if other == SourceFormat::Webp {
                orientation_from_exif(webp_exif(bytes))
            } else {
                decoder.orientation().unwrap_or(Orientation::NoTransforms)
            };
            let icc = match decoder.icc_profile().ok().flatten() {
                None if other == SourceFormat::Tiff => crate::tif::icc_profile(bytes),
                icc => icc,
            };
            Ok(Source {
                bytes,
                info: info(w, h, decoder.color_type().has_alpha()),
                orientation,
                icc,
                kind: Kind::Other(image_format),
            })
        }
    }
}

/// Reads the header only: format, stored size, alpha. Enforces the pixel limit.
pub fn probe(bytes: &[u8], limits: &Limits) -> Result<SourceInfo, ProcessError> {
    open(bytes, limits).map(|s| s.info)
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
        if let Kind::Avif(header) = &self.kind {
            return header.upright_size();
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
        matches!(self.kind, Kind::Jpeg(_))
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
    /// the source: 1 where the format cannot shrink on load. JPEG keeps twice the output's
    /// resolution ([`geometry::shrink_denominator`], libvips' rule: the DCT's block shrink
    /// is coarse, the resize after it is the good filter) — except, when `coarse_ok` (the
    /// output's own loss hides it: [`ResolvedSpec::hides_coarse_decode`]), a progressive file
    /// whose 1/8 decode reads only its DC scans ([`jpeg::JpegHeader::dc_only`]): there 1/8
    /// from a reduction of 8 costs an eighth of any other scale (a 16 MP photo: 24 ms against
    /// 185 ms, the AC scans' entropy decoding being most of a progressive decode), and
    /// keeps as much resolution as sharp's and Pillow's shrink-on-load keep by default.
    pub fn shrink_denominator(&self, reduction: f64, coarse_ok: bool) -> u32 {
        match &self.kind {
            Kind::Jpeg(header)
                if coarse_ok && reduction >= 8.0 && header.reads_dc_only_at_one_eighth() =>
            {
                8
            }
            Kind::Jpeg(_) => geometry::shrink_denominator(reduction),
            _ => 1,
        }
    }

    /// Decodes to upright 8-bit RGB or RGBA, at `1/denominator` scale where the format
    /// allows it (JPEG: 1, 2, 4 or 8; others decode at full size).
    pub fn decode(&self, limits: &Limits, denominator: u32) -> Result<DynamicImage, ProcessError> {
        crate::error::guarded(self.info.format.name(), || {
            self.decode_pixels(limits, denominator)
        })
    }

    fn decode_pixels(
        &self,
        limits: &Limits,
        denominator: u32,
    ) -> Result<DynamicImage, ProcessError> {
        let dims = (self.info.width, self.info.height);
        let mut image = match &self.kind {
            Kind::Jpeg(header) => jpeg::decode(self.bytes, header, denominator)?,
            // Transforms are applied inside; `orientation` is NoTransforms.
            Kind::Avif(header) => avif::decode(self.bytes, header)?,
            Kind::Gif(header) => {
                DynamicImage::ImageRgba8(gif::decode(self.bytes, header, limits.max_alloc())?)
            }
            Kind::Ico(entry, format) => with_image_crate(entry, *format, limits, dims)?,
            Kind::Other(ImageFormat::Tiff)
                if self.icc.is_some() && crate::tif::is_cmyk8(self.bytes) =>
            {
                let managed = self
                    .icc
                    .as_deref()
                    .and_then(|icc| crate::tif::decode_cmyk(self.bytes, icc, limits.max_alloc()));
                match managed {
                    Some(result) => {
                        // The profile has been applied: orientation is all that is left.
                        let mut image = result?;
                        image.apply_orientation(self.orientation);
                        return Ok(image);
                    }
                    None => with_image_crate(self.bytes, ImageFormat::Tiff, limits, dims)?,
                }
            }
            Kind::Other(ImageFormat::Tiff) if crate::tif::is_ycbcr8(self.bytes) => {
                crate::tif::decode_ycbcr(self.bytes, limits.max_alloc())?
            }
            Kind::Other(ImageFormat::Tiff) if crate::tif::is_fax3(self.bytes) => {
                crate::tif::decode_fax3(self.bytes, limits.max_alloc())?
            }
            Kind::Other(ImageFormat::WebP) => match webp_still(self.bytes) {
                Some(image) => image,
                // An animation (its first frame) or bytes libwebp refuses: as before.
                None => with_image_crate(self.bytes, ImageFormat::WebP, limits, dims)?,
            },
            Kind::Other(format) => with_image_crate(self.bytes, *format, limits, dims)?,
        };
        // JPEG handles its own profile (CMYK profiles need the raw inks).
        if let (Some(icc), false) = (&self.icc, matches!(self.kind, Kind::Jpeg(_))) {
            image = crate::color::to_srgb(normalize(image), icc);
        }
        image.apply_orientation(self.orientation);
        Ok(normalize(image))
    }
}

/// A still WebP decoded by libwebp (the library that encodes imgcas's WebP, fuzzed
/// continuously upstream): the very pixels the `image` crate's decoder gives (checked on
/// every still WebP of the test corpus), in 40 % of its time. `None` for an animation,
/// which the simple API does not decode, and for what libwebp refuses.
fn webp_still(bytes: &[u8]) -> Option<DynamicImage> {
    let decoded = webp::Decoder::new(bytes).decode()?;
    let (w, h) = (decoded.width(), decoded.height());
    let pixels = decoded.to_vec();
    if decoded.is_alpha() {
        image::RgbaImage::from_raw(w, h, pixels).map(DynamicImage::ImageRgba8)
    } else {
        image::RgbImage::from_raw(w, h, pixels).map(DynamicImage::ImageRgb8)
    }
}

fn with_image_crate(
    bytes: &[u8],
    format: ImageFormat,
    limits: &Limits,
    dims: (u32, u32),
) -> Result<DynamicImage, ProcessError> {
    let decoder = reader(bytes, format, limits)
        .into_decoder()
        .map_err(|e| map_image_error(e, limits, dims))?;
    DynamicImage::from_decoder(decoder).map_err(|e| map_image_error(e, limits, dims))
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

    fn testdata(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn only_an_output_that_hides_it_takes_the_dc_only_eighth() {
        let limits = Limits::default();
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let rgb = open(&photo, &limits).unwrap().decode(&limits, 1).unwrap();
        let progressive = crate::jpeg::encode(&rgb.into_rgb8(), 85, true).unwrap();
        let source = open(&progressive, &limits).unwrap();
        let spec = |query: &str| {
            crate::Spec::parse(query)
                .unwrap()
                .resolve(None, false, None)
        };
        // A q80 JPEG or q75 WebP loses more than the DC scans' 1/8 does: 1/8 from 8 on.
        for query in ["format=jpeg&q=80", "format=webp&q=75", "format=jpeg"] {
            assert!(spec(query).hides_coarse_decode(), "{query}");
            assert_eq!(source.shrink_denominator(10.0, true), 8, "{query}");
        }
        // AVIF, lossless and near-lossless outputs keep libvips' margin of two: 1/4 there.
        for query in [
            "format=avif&q=65",
            "format=png",
            "format=webp&lossless=1",
            "format=jpeg&q=95",
            "format=gif",
        ] {
            assert!(!spec(query).hides_coarse_decode(), "{query}");
            assert_eq!(source.shrink_denominator(10.0, false), 4, "{query}");
        }
        // From 16 on, 1/8 for every output; below 8 the margin rule for every output.
        assert_eq!(source.shrink_denominator(16.0, false), 8);
        assert_eq!(source.shrink_denominator(7.9, true), 2);
    }

    #[test]
    fn libwebp_decodes_stills_to_the_image_crates_pixels() {
        let limits = Limits::default();
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let rgb = open(&photo, &limits).unwrap().decode(&limits, 4).unwrap();
        let rgba = DynamicImage::ImageRgba8(rgb.to_rgba8());
        let lossless = webp::Encoder::from_rgb(rgb.as_bytes(), rgb.width(), rgb.height())
            .encode_lossless()
            .to_vec();
        let with_alpha = webp::Encoder::from_rgba(rgba.as_bytes(), rgba.width(), rgba.height())
            .encode(75.0)
            .to_vec();
        let files = [
            ("hopper (lossy)", testdata("pillow/hopper.webp")),
            (
                "EXIF-oriented",
                testdata("pillow/hopper_orientation_6.webp"),
            ),
            ("lossless", lossless),
            ("lossy with alpha", with_alpha),
        ];
        for (name, bytes) in &files {
            let info = open(bytes, &limits).unwrap().info;
            let dims = (info.width, info.height);
            let ours = webp_still(bytes).expect(name);
            let theirs = with_image_crate(bytes, ImageFormat::WebP, &limits, dims).unwrap();
            assert_eq!(ours.color(), theirs.color(), "{name}");
            assert!(ours.as_bytes() == theirs.as_bytes(), "{name}: other pixels");
        }
        // An animation is left to the frame walk (and its first frame to the image crate).
        assert!(webp_still(&testdata("sharp/animated-loop-3.webp")).is_none());
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

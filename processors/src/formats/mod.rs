//! Source formats, one room (a file here) each, behind one trait, [`Format`]: how its bytes
//! begin, what its header says (size, orientation, alpha, ICC profile, frames), how it decodes
//! and at which scales, and what it can do (`shrinks_on_load`, `may_animate`). A format is told
//! from its bytes alone, never from a URL or a Content-Type ([`sniff`]).
//!
//! Beside the rooms are the walkers they share: [`heif`] (ISO-BMFF boxes, for AVIF and HEIC), [`riff`] (RIFF chunks, for WebP), the `image` crate's decoders ([`image_decoders`]),
//! and the bounded byte reader, [`crate::bytes`].
//!
//! A vector format ([`Format::is_vector`], SVG) is drawn at the size a run asks for
//! ([`DecodeAt::render`]), not decoded at its own.
//!
//! Adding a format: its room here (a file implementing [`Format`]), its variant in
//! [`SourceFormat`] and its line in [`FORMATS`].

use image::metadata::Orientation;
use image::DynamicImage;

use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

mod avif;
mod avif_pixi;
mod bmp;
pub(crate) mod gif;
mod heic;
mod heif;
mod ico;
mod image_decoders;
pub(crate) mod jpeg;
pub(crate) mod jxl;
mod png;
mod riff;
mod svg;
mod svg_expansion;
mod tiff;
mod webp;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceFormat {
    Jpeg,
    Png,
    Gif,
    Webp,
    Avif,
    Heic,
    Tiff,
    Bmp,
    Ico,
    Svg,
    Jxl,
}

/// [`SourceFormat::decode_weight`] of JPEG XL.
pub const JXL_DECODE_WEIGHT: u64 = 4;

/// A format's entry in [`FORMATS`].
struct Entry {
    format: SourceFormat,
    /// Its name in specs, logs and metrics.
    name: &'static str,
    mime: &'static str,
    room: &'static dyn Format,
}

const fn entry(
    format: SourceFormat,
    name: &'static str,
    mime: &'static str,
    room: &'static dyn Format,
) -> Entry {
    Entry {
        format,
        name,
        mime,
        room,
    }
}

/// Every format, in the order bytes are tried against them.
const FORMATS: [Entry; 11] = [
    entry(SourceFormat::Jpeg, "jpeg", "image/jpeg", &jpeg::Jpeg),
    entry(SourceFormat::Png, "png", "image/png", &png::Png),
    entry(SourceFormat::Gif, "gif", "image/gif", &gif::Gif),
    entry(SourceFormat::Webp, "webp", "image/webp", &webp::Webp),
    entry(SourceFormat::Tiff, "tiff", "image/tiff", &tiff::Tiff),
    entry(SourceFormat::Bmp, "bmp", "image/bmp", &bmp::Bmp),
    entry(SourceFormat::Ico, "ico", "image/x-icon", &ico::Ico),
    entry(SourceFormat::Avif, "avif", "image/avif", &avif::Avif),
    entry(SourceFormat::Heic, "heic", "image/heic", &heic::Heic),
    entry(SourceFormat::Svg, "svg", "image/svg+xml", &svg::Svg),
    entry(SourceFormat::Jxl, "jxl", "image/jxl", &jxl::Jxl),
];

/// What one source format knows of itself.
pub(crate) trait Format: Sync {
    /// Whether `bytes` begin as this format's do.
    fn sniff(&self, bytes: &[u8]) -> bool;
    /// Reads the header, checking every count and length it declares against the bytes
    /// present; pixels are not decoded. (The pixel limit on the size it gives is checked
    /// by the caller, after.)
    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError>;
    /// What its animation headers say (frames, plays), for a format that may animate;
    /// `None` for bytes too damaged to walk.
    fn animation(&self, _bytes: &[u8]) -> Option<AnimationHeader> {
        None
    }
    /// Whether its bytes may hold an animation (then [`Format::animation`] counts frames).
    fn may_animate(&self) -> bool {
        false
    }
    /// Whether its decoder can downscale while decoding (JPEG's DCT scaling): such sources
    /// make every output from the original, at the scale the output picks, and have no
    /// mezzanine.
    fn shrinks_on_load(&self) -> bool {
        false
    }
    /// Whether this build decodes it.
    fn can_decode(&self) -> bool {
        true
    }
    /// Whether it is drawn rather than decoded (SVG): drawn at the size a run needs, so that
    /// a run never enlarges it ([`DecodeAt::render`]).
    fn is_vector(&self) -> bool {
        false
    }
    /// The output `format=original` means for it, where imgcas writes the format.
    fn as_output(&self) -> Option<OutputFormat> {
        None
    }
}

/// What a room's [`Format::open`] read: the stored size (before orientation), alpha, the
/// orientation and profile the source's decode applies after the room's, and the decoder.
pub(crate) struct Header<'a> {
    pub width: u32,
    pub height: u32,
    pub has_alpha: bool,
    pub orientation: Orientation,
    pub icc: Option<Vec<u8>>,
    pub decoder: Box<dyn Decoder + 'a>,
}

impl<'a> Header<'a> {
    /// A header with no orientation and no profile.
    fn plain(width: u32, height: u32, has_alpha: bool, decoder: impl Decoder + 'a) -> Self {
        Header {
            width,
            height,
            has_alpha,
            orientation: Orientation::NoTransforms,
            icc: None,
            decoder: Box::new(decoder),
        }
    }
}

/// How one opened source decodes: its room's state from the header.
pub(crate) trait Decoder: Send + Sync {
    /// The pixels at `1/denominator` scale where the format shrinks on load (full size
    /// otherwise), in any 8-bit layout, before orientation.
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError>;
    /// The displayed size where the format has its own transforms (AVIF's aperture and
    /// rotation); `None` where the orientation says it.
    fn upright_size(&self) -> Option<(u32, u32)> {
        None
    }
    /// The scale to decode at for an output `reduction` times smaller (see
    /// the source's `shrink_denominator`): 1 where the format cannot shrink.
    fn shrink_denominator(&self, _reduction: f64, _coarse_ok: bool) -> u32 {
        1
    }
    /// The work of drawing a vector source at `size` (and of laying its text out again as
    /// it is opened), in the pixel-equivalents of `crate::cost`, beyond the drawn pixels
    /// that `cost` counts; 0 for a raster, whose decode `cost` counts by its size.
    fn drawing_work(&self, _size: (u32, u32)) -> u64 {
        0
    }
}

/// What a decode is asked for: the source's bytes, the limits, the scale (1/denominator),
/// the source's profile.
#[derive(Clone, Copy)]
pub(crate) struct DecodeAt<'a> {
    pub bytes: &'a [u8],
    pub limits: &'a Limits,
    pub denominator: u32,
    pub icc: Option<&'a [u8]>,
    /// The size a vector source is drawn at (`None`: its own size over the denominator);
    /// raster formats ignore it.
    pub render: Option<(u32, u32)>,
}

/// A room's decode.
pub(crate) struct Decoded {
    pub image: DynamicImage,
    /// The colour profile has been applied by the decoder (JPEG, which needs the raw inks
    /// of CMYK for it; a CMYK TIFF's profile): it is not applied again.
    pub profile_applied: bool,
}

impl Decoded {
    fn pixels(image: DynamicImage) -> Self {
        Decoded {
            image,
            profile_applied: false,
        }
    }
}

/// What an animated container's headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnimationHeader {
    /// Frames, counted from their blocks (1 for a still picture in an animatable format).
    pub frames: u32,
    /// How many times the animation plays; 0 for ever.
    pub plays: u32,
    /// The largest frame rectangle a GIF declares. A GIF frame may be larger than its
    /// logical screen, and the decoder allocates for the frame: the limits count it. (WebP
    /// and APNG frames lie within the canvas, which their decoders enforce: `(0, 0)`.)
    pub largest_frame: (u32, u32),
    /// One play's length in milliseconds: the frames' delays as the container declares them,
    /// summed (0 for a still picture, or where nothing is declared).
    pub duration_ms: u64,
}

impl AnimationHeader {
    fn of(frames: u32, plays: u32) -> Self {
        AnimationHeader {
            frames,
            plays,
            largest_frame: (0, 0),
            duration_ms: 0,
        }
    }

    fn lasting(self, duration_ms: u64) -> Self {
        AnimationHeader {
            duration_ms,
            ..self
        }
    }
}

/// The animation facts of GIF, WebP, PNG, JPEG XL and AVIF bytes, from their headers alone
/// (GIF blocks, WebP `ANMF` chunks, APNG `acTL`, JPEG XL frame headers, an AVIF sequence's
/// sample tables; no frame decoded); `None` for other formats and for a container too damaged
/// to walk (its decode says why).
pub fn animation_header(bytes: &[u8]) -> Option<AnimationHeader> {
    sniff(bytes)?.room().animation(bytes)
}

/// Frames in the bytes, from their headers: 1 for anything but an animation.
pub fn frame_count(bytes: &[u8]) -> u32 {
    animation_header(bytes).map_or(1, |h| h.frames).max(1)
}

/// The header of any bytes in a format this crate reads: sniffed, read by its room under the
/// panic guard (a panic there is the file's `undecodable`), its size checked against the pixel
/// limit, before any pixel buffer exists. A source is opened from it (`decode::open`), and a
/// drawing reads its embedded rasters' sizes with it.
pub(crate) fn open_header<'a>(
    bytes: &'a [u8],
    limits: &Limits,
) -> Result<(SourceFormat, Header<'a>), ProcessError> {
    let format = sniff(bytes).ok_or_else(|| {
        ProcessError::UnsupportedFormat("the bytes are not in an image format imgcas reads".into())
    })?;
    if !format.can_decode() {
        return Err(ProcessError::UnsupportedFormat(format!(
            "{} sources are not supported",
            format.name()
        )));
    }
    let header = crate::error::guarded(format.name(), || {
        let header = format.room().open(bytes, limits)?;
        check_pixels(header.width, header.height, limits)?;
        Ok(header)
    })?;
    Ok((format, header))
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

/// The format of `bytes` from its magic numbers, if it is an image format imgcas knows of.
pub fn sniff(bytes: &[u8]) -> Option<SourceFormat> {
    FORMATS
        .iter()
        .find(|e| e.room.sniff(bytes))
        .map(|e| e.format)
}

impl SourceFormat {
    /// Its room. Every variant has an entry (a test walks them); were one missing, the format
    /// would read as HEIC does: known, not decoded.
    pub(crate) fn room(self) -> &'static dyn Format {
        self.entry().map_or(&heic::Heic, |e| e.room)
    }

    fn entry(self) -> Option<&'static Entry> {
        FORMATS.iter().find(|e| e.format == self)
    }

    pub fn shrinks_on_load(self) -> bool {
        self.room().shrinks_on_load()
    }

    pub fn name(self) -> &'static str {
        self.entry().map_or("unknown", |e| e.name)
    }

    /// How many pixel-equivalents (the unit of `crate::cost`) one decoded pixel costs: 1 for
    /// the decoders the unit was measured on (a decode, a resize and a JPEG encode touch a
    /// pixel about once each, about 40 ns of one core here), more for a decoder that does far
    /// more per pixel. JPEG XL (jxl-oxide, one thread) keeps float planes through inverse
    /// transforms and restoration filters: here its lossy render took about 90 ns a pixel on
    /// three camera photos (1.9 MP, `cjxl -d 1`) and on a flat 7000×7000 (4.4 CPU s), its
    /// lossless one 65 ns, against 5–15 ns for PNG (audit #4: a 6.6 KB file declaring
    /// 7000×7000 was charged as a 49 MP PNG); [`JXL_DECODE_WEIGHT`] holds it with room for
    /// slower machines, and the run's deadline stops the rest (`interrupt.rs`).
    pub fn decode_weight(self) -> u64 {
        match self {
            SourceFormat::Jxl => JXL_DECODE_WEIGHT,
            _ => 1,
        }
    }

    /// Bytes its decoder holds per pixel of the picture at its peak: the 8-bit RGBA picture
    /// (4) and the decoder's own planes beside it. JPEG XL keeps 32-bit float planes (a flat
    /// 7000×7000 render peaked at 1.35 GB here, 1.77 GB in audit #4); AV1 and HEVC their 8- to
    /// 16-bit YUV planes; PNG and TIFF may be 16 bits a sample before they are brought to 8; a
    /// drawing its premultiplied canvas and the picture made from it.
    pub fn decode_bytes_per_pixel(self) -> u64 {
        match self {
            SourceFormat::Jxl => 40,
            SourceFormat::Avif | SourceFormat::Heic => 16,
            SourceFormat::Png | SourceFormat::Tiff | SourceFormat::Svg => 12,
            _ => 8,
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        FORMATS.iter().find(|e| e.name == name).map(|e| e.format)
    }

    pub fn mime(self) -> &'static str {
        self.entry().map_or("application/octet-stream", |e| e.mime)
    }

    /// Whether bytes of the format may hold an animation (GIF, WebP, APNG, JPEG XL, AVIF
    /// sequences), whose frames
    /// [`animation_header`] counts.
    pub fn may_animate(self) -> bool {
        self.room().may_animate()
    }

    /// Whether this build decodes the format.
    pub fn can_decode(self) -> bool {
        self.room().can_decode()
    }

    /// Whether the format is drawn at the size a run needs (SVG) rather than decoded.
    pub fn is_vector(self) -> bool {
        self.room().is_vector()
    }

    /// The output format `format=original` means for this source, where imgcas writes it
    /// (otherwise the caller falls back to JPEG, or PNG for sources with alpha).
    pub fn as_output(self) -> Option<OutputFormat> {
        self.room().as_output()
    }
}

/// The orientation EXIF gives (its TIFF structure, with or without the `Exif\0\0` prefix);
/// none without EXIF.
fn exif_orientation(tiff: Option<&[u8]>) -> Orientation {
    tiff.map(|t| t.strip_prefix(b"Exif\0\0").unwrap_or(t))
        .and_then(Orientation::from_exif_chunk)
        .unwrap_or(Orientation::NoTransforms)
}

/// A refusal naming the format: `undecodable`, "{format}: {what}".
fn undecodable(format: &str, what: impl std::fmt::Display) -> ProcessError {
    ProcessError::Undecodable(format!("{format}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_format_has_its_own_room_and_name() {
        let all = [
            SourceFormat::Jpeg,
            SourceFormat::Png,
            SourceFormat::Gif,
            SourceFormat::Webp,
            SourceFormat::Avif,
            SourceFormat::Heic,
            SourceFormat::Tiff,
            SourceFormat::Bmp,
            SourceFormat::Ico,
            SourceFormat::Svg,
            SourceFormat::Jxl,
        ];
        assert_eq!(all.len(), FORMATS.len());
        for format in all {
            assert!(format.entry().is_some(), "{format:?}");
            assert_eq!(SourceFormat::from_name(format.name()), Some(format));
        }
        let only_jpeg: Vec<_> = all.into_iter().filter(|f| f.shrinks_on_load()).collect();
        assert_eq!(only_jpeg, [SourceFormat::Jpeg]);
    }

    #[test]
    fn magic_numbers() {
        assert_eq!(sniff(b"\xFF\xD8\xFF\xE0rest"), Some(SourceFormat::Jpeg));
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some(SourceFormat::Png));
        assert_eq!(sniff(b"GIF89a...."), Some(SourceFormat::Gif));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some(SourceFormat::Webp));
        assert_eq!(
            sniff(b"\0\0\0\x1cftypavif\0\0\0\0mif1miaf"),
            Some(SourceFormat::Avif)
        );
        assert_eq!(
            sniff(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"),
            Some(SourceFormat::Heic)
        );
        // An AVIF brand anywhere among the brands makes it AVIF.
        assert_eq!(
            sniff(b"\0\0\0\x18ftypmif1\0\0\0\0heicavif"),
            Some(SourceFormat::Avif)
        );
        assert_eq!(sniff(b"II*\0\x08\0\0\0"), Some(SourceFormat::Tiff));
        assert_eq!(sniff(b"\0\0\x01\0\x01\0rest"), Some(SourceFormat::Ico));
        assert_eq!(sniff(b"\xFF\x0Arest"), Some(SourceFormat::Jxl));
        assert_eq!(
            sniff(b"\0\0\0\x0cJXL \r\n\x87\nrest"),
            Some(SourceFormat::Jxl)
        );
        assert_eq!(sniff(b"<html>not an image</html>"), None);
        assert_eq!(sniff(b""), None);
    }
}

//! HEIC (HEVC in HEIF), the format phones save photos in: the header from the same box
//! walker AVIF's room uses (the primary item's `ispe` size for the pixel limit, alpha, and the
//! `irot`/`imir`/`clap` transforms, all read before libheif sees a byte), and the decode
//! through the system's libheif (grids, alpha, 10-bit pictures brought to 8 bits), which
//! applies the container's transforms itself.
//!
//! The container's transforms are the orientation: the EXIF orientation Apple also writes
//! describes the same turn already made by `irot`, so it is not applied again. The ICC
//! profile (`colr` of type `prof`/`rICC`) goes to the shared colour step like any source's.

use image::{DynamicImage, RgbImage, RgbaImage};
use libheif_rs::{ColorSpace, HeifContext, LibHeif, RgbChroma};

use super::avif::AvifHeader;
use super::{DecodeAt, Decoded, Decoder, Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Heic;

impl Format for Heic {
    /// A HEIF brand and no AVIF brand (AVIF's room is tried first).
    fn sniff(&self, bytes: &[u8]) -> bool {
        super::heif::brands(bytes).any(|brand| {
            matches!(
                brand,
                b"heic" | b"heix" | b"heim" | b"heis" | b"hevc" | b"hevx" | b"mif1" | b"msf1"
            )
        })
    }

    fn open<'a>(&self, bytes: &'a [u8], _limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let walked = super::avif::parse_container(bytes, "HEIC")?;
        let icc = profile(bytes);
        Ok(Header {
            width: walked.width,
            height: walked.height,
            has_alpha: walked.has_alpha,
            orientation: image::metadata::Orientation::NoTransforms,
            icc,
            decoder: Box::new(HeicDecoder { walked }),
        })
    }
}

struct HeicDecoder {
    walked: AvifHeader,
}

impl Decoder for HeicDecoder {
    /// Full size, upright (libheif applies `clap`, `irot` and `imir`).
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        decode(at.bytes, self.walked.has_alpha).map(Decoded::pixels)
    }

    fn upright_size(&self) -> Option<(u32, u32)> {
        Some(self.walked.upright_size())
    }
}

fn undecodable(what: impl std::fmt::Display) -> ProcessError {
    super::undecodable("HEIC", what)
}

/// The primary image's ICC profile, as libheif reads it from the container (no pixels are
/// decoded for it).
fn profile(bytes: &[u8]) -> Option<Vec<u8>> {
    let context = HeifContext::read_from_bytes(bytes).ok()?;
    let handle = context.primary_image_handle().ok()?;
    handle
        .color_profile_raw()
        .map(|p| p.data)
        .filter(|p| !p.is_empty())
}

/// The primary image, upright, as 8-bit RGB (RGBA where the container declares alpha).
fn decode(bytes: &[u8], has_alpha: bool) -> Result<DynamicImage, ProcessError> {
    let library = LibHeif::new();
    let context = HeifContext::read_from_bytes(bytes).map_err(undecodable)?;
    let handle = context.primary_image_handle().map_err(undecodable)?;
    let alpha = has_alpha || handle.has_alpha_channel();
    let chroma = if alpha {
        RgbChroma::Rgba
    } else {
        RgbChroma::Rgb
    };
    // Asked for interleaved 8-bit RGB(A), libheif converts from any bit depth and chroma.
    let image = library
        .decode(&handle, ColorSpace::Rgb(chroma), None)
        .map_err(undecodable)?;
    let (width, height) = (image.width(), image.height());
    let plane = image
        .planes()
        .interleaved
        .ok_or_else(|| undecodable("libheif gave no interleaved plane"))?;
    let channels: usize = if alpha { 4 } else { 3 };
    let row = width as usize * channels;
    if plane.storage_bits_per_pixel != 8 * channels as u8 || plane.stride < row {
        return Err(undecodable("libheif gave an unexpected pixel layout"));
    }
    let mut pixels = Vec::with_capacity(row * height as usize);
    for y in 0..height as usize {
        let line = plane
            .data
            .get(y * plane.stride..y * plane.stride + row)
            .ok_or_else(|| undecodable("libheif gave fewer rows than its size"))?;
        pixels.extend_from_slice(line);
    }
    let short = || undecodable("libheif gave fewer pixels than its size");
    Ok(if alpha {
        DynamicImage::ImageRgba8(RgbaImage::from_raw(width, height, pixels).ok_or_else(short)?)
    } else {
        DynamicImage::ImageRgb8(RgbImage::from_raw(width, height, pixels).ok_or_else(short)?)
    })
}

//! Bytes to upright pixels, with the pixel limit checked from the header before any pixel
//! buffer is allocated.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};

use crate::error::ProcessError;
use crate::sniff::{sniff, SourceFormat};

/// Bounds on what one decode may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest width × height accepted, for sources (from their header) and for outputs.
    pub max_pixels: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pixels: 50_000_000,
        }
    }
}

/// What the header of a source says, read without decoding pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceInfo {
    pub format: SourceFormat,
    /// As stored (before EXIF orientation).
    pub width: u32,
    pub height: u32,
    pub has_alpha: bool,
}

fn image_format(format: SourceFormat) -> Option<ImageFormat> {
    match format {
        SourceFormat::Jpeg => Some(ImageFormat::Jpeg),
        SourceFormat::Png => Some(ImageFormat::Png),
        SourceFormat::Gif => Some(ImageFormat::Gif),
        SourceFormat::Webp => Some(ImageFormat::WebP),
        _ => None,
    }
}

fn map_image_error(e: ImageError, limits: &Limits, dims: (u32, u32)) -> ProcessError {
    match e {
        ImageError::Limits(_) => ProcessError::too_many_pixels(dims.0, dims.1, limits.max_pixels),
        ImageError::Unsupported(u) => ProcessError::UnsupportedFormat(u.to_string()),
        other => ProcessError::Undecodable(other.to_string()),
    }
}

fn sniffed(bytes: &[u8]) -> Result<(SourceFormat, ImageFormat), ProcessError> {
    let format = sniff(bytes).ok_or_else(|| {
        ProcessError::UnsupportedFormat("the bytes are not in an image format imgcas reads".into())
    })?;
    match image_format(format) {
        Some(f) if format.can_decode() => Ok((format, f)),
        _ => Err(ProcessError::UnsupportedFormat(format!(
            "{} sources are not supported",
            format.name()
        ))),
    }
}

fn open<'a>(
    bytes: &'a [u8],
    format: ImageFormat,
    limits: &Limits,
) -> Result<impl ImageDecoder + 'a, ProcessError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut decoder_limits = image::Limits::default();
    // Headroom for a decoder's working buffers beside the RGBA output itself.
    decoder_limits.max_alloc = Some(limits.max_pixels.saturating_mul(8) + (64 << 20));
    reader.limits(decoder_limits);
    reader
        .into_decoder()
        .map_err(|e| map_image_error(e, limits, (0, 0)))
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

/// Reads the header only: format, stored size, alpha. Enforces the pixel limit.
pub fn probe(bytes: &[u8], limits: &Limits) -> Result<SourceInfo, ProcessError> {
    let (format, image_format) = sniffed(bytes)?;
    let decoder = open(bytes, image_format, limits)?;
    let (width, height) = decoder.dimensions();
    check_pixels(width, height, limits)?;
    Ok(SourceInfo {
        format,
        width,
        height,
        has_alpha: decoder.color_type().has_alpha(),
    })
}

/// Decodes to upright 8-bit RGB or RGBA (EXIF orientation applied; first frame only).
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<(SourceInfo, DynamicImage), ProcessError> {
    let (format, image_format) = sniffed(bytes)?;
    let mut decoder = open(bytes, image_format, limits)?;
    let (width, height) = decoder.dimensions();
    check_pixels(width, height, limits)?;
    let has_alpha = decoder.color_type().has_alpha();
    // A broken EXIF block must not cost the picture: treat it as "no orientation".
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder)
        .map_err(|e| map_image_error(e, limits, (width, height)))?;
    image.apply_orientation(orientation);
    let image = if has_alpha {
        DynamicImage::ImageRgba8(image.into_rgba8())
    } else {
        DynamicImage::ImageRgb8(image.into_rgb8())
    };
    let info = SourceInfo {
        format,
        width,
        height,
        has_alpha,
    };
    Ok((info, image))
}

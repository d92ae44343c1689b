//! The `image` crate's decoders, for the rooms that use them (PNG, BMP, TIFF, WebP
//! animations, ICO entries): held to the allocation limit, their errors mapped to imgcas's.

use std::io::Cursor;

use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader};

use super::{DecodeAt, Decoded, Decoder, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) fn map_error(e: ImageError, limits: &Limits, dims: (u32, u32)) -> ProcessError {
    match e {
        ImageError::Limits(_) => ProcessError::too_many_pixels(dims.0, dims.1, limits.max_pixels),
        ImageError::Unsupported(u) => ProcessError::UnsupportedFormat(u.to_string()),
        other => ProcessError::Undecodable(other.to_string()),
    }
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

/// Decodes whole with the crate's decoder for `format`; `dims` (the header's size) names a
/// refusal by the allocation limit.
pub(crate) fn decode(
    bytes: &[u8],
    format: ImageFormat,
    limits: &Limits,
    dims: (u32, u32),
) -> Result<DynamicImage, ProcessError> {
    let decoder = reader(bytes, format, limits)
        .into_decoder()
        .map_err(|e| map_error(e, limits, dims))?;
    DynamicImage::from_decoder(decoder).map_err(|e| map_error(e, limits, dims))
}

/// A source's header read by the crate's decoder for `format`, which decodes it whole.
pub(crate) fn open<'a>(
    bytes: &[u8],
    format: ImageFormat,
    limits: &Limits,
) -> Result<Header<'a>, ProcessError> {
    let mut decoder = reader(bytes, format, limits)
        .into_decoder()
        .map_err(|e| map_error(e, limits, (0, 0)))?;
    let (width, height) = decoder.dimensions();
    Ok(Header {
        width,
        height,
        has_alpha: decoder.color_type().has_alpha(),
        orientation: decoder.orientation().unwrap_or(Orientation::NoTransforms),
        icc: decoder.icc_profile().ok().flatten(),
        decoder: Box::new(Whole {
            format,
            dims: (width, height),
        }),
    })
}

/// A source the crate's decoder for `format` decodes whole, its header's size `dims`.
pub(crate) struct Whole {
    pub format: ImageFormat,
    pub dims: (u32, u32),
}

impl Decoder for Whole {
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        decode(at.bytes, self.format, at.limits, self.dims).map(Decoded::pixels)
    }
}

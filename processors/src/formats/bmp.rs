//! BMP: RGB, RLE and bitfield bitmaps through the `image` crate; the other compressions (JPEG
//! or PNG inside, Huffman) are refused by name from the info header.

use image::ImageFormat;

use super::image_decoders;
use super::{Format, Header};
use crate::bytes::u32le_at;
use crate::error::ProcessError;
use crate::limits::Limits;

pub(crate) struct Bmp;

impl Format for Bmp {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(b"BM") && bytes.len() >= 26
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let compression = compression(bytes);
        if !matches!(compression, Some(0..=3)) {
            return Err(ProcessError::UnsupportedFormat(format!(
                "BMP compression {compression:?} is not supported"
            )));
        }
        image_decoders::open(bytes, ImageFormat::Bmp, limits)
    }
}

/// The compression field of the info header (0 RGB, 1 RLE8, 2 RLE4, 3 bitfields; OS/2 core
/// headers have none and count as 0).
fn compression(bytes: &[u8]) -> Option<u32> {
    if u32le_at(bytes, 14)? < 40 {
        return Some(0);
    }
    u32le_at(bytes, 30)
}

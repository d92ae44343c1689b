//! GIF: the first frame, composited onto its logical screen. The frame's declared size is read
//! from the block structure and checked against the pixel limit before the decoder allocates;
//! a file with no colour table at all gets a grayscale one, as other decoders do (animations,
//! decoded frame by frame in [`crate::animation`], get the same table).

use std::borrow::Cow;
use std::io::Cursor;
use std::num::NonZeroU64;

use image::{Rgba, RgbaImage};

use crate::error::ProcessError;

/// The logical screen and the first frame's rectangle, from the headers alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GifHeader {
    pub screen: (u32, u32),
    pub frame: (u32, u32),
}

impl GifHeader {
    /// The size of the decoded picture: the screen, or the frame when the screen is empty.
    pub fn canvas(&self) -> (u32, u32) {
        if self.screen.0 == 0 || self.screen.1 == 0 {
            self.frame
        } else {
            self.screen
        }
    }

    /// The most pixels decoding may allocate for.
    pub fn declared_pixels(&self) -> u64 {
        let area = |(w, h): (u32, u32)| u64::from(w) * u64::from(h);
        area(self.screen).max(area(self.frame))
    }
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
    ])))
}

fn undecodable(m: &str) -> ProcessError {
    ProcessError::Undecodable(m.into())
}

/// Walks header, colour table and extension blocks up to the first image descriptor.
pub fn parse(b: &[u8]) -> Result<GifHeader, ProcessError> {
    let screen = (
        le16(b, 6).ok_or_else(|| undecodable("truncated GIF header"))?,
        le16(b, 8).ok_or_else(|| undecodable("truncated GIF header"))?,
    );
    let flags = *b
        .get(10)
        .ok_or_else(|| undecodable("truncated GIF header"))?;
    let mut i = 13;
    if flags & 0x80 != 0 {
        i += 3 << ((flags & 7) + 1);
    }
    loop {
        match b.get(i) {
            Some(0x21) => {
                // Extension: label, then sub-blocks until a zero length.
                i += 2;
                loop {
                    let len =
                        usize::from(*b.get(i).ok_or_else(|| undecodable("truncated extension"))?);
                    i += 1 + len;
                    if len == 0 {
                        break;
                    }
                }
            }
            Some(0x2C) => {
                let w = le16(b, i + 5).ok_or_else(|| undecodable("truncated image descriptor"))?;
                let h = le16(b, i + 7).ok_or_else(|| undecodable("truncated image descriptor"))?;
                return Ok(GifHeader {
                    screen,
                    frame: (w, h),
                });
            }
            Some(0x3B) | None => return Err(undecodable("the GIF has no image")),
            Some(other) => return Err(undecodable(&format!("unknown GIF block {other:#04x}"))),
        }
    }
}

/// A GIF with no global table may have frames with no table at all: such bytes get a
/// grayscale global table, as other decoders give them (frames with their own table keep it).
pub fn with_fallback_palette(b: &[u8]) -> Cow<'_, [u8]> {
    if b.get(10).is_some_and(|flags| flags & 0x80 == 0) && b.len() >= 13 {
        let mut copy = Vec::with_capacity(b.len() + 768);
        copy.extend_from_slice(&b[..13]);
        copy[10] |= 0x87;
        copy.extend((0..=255u8).flat_map(|v| [v, v, v]));
        copy.extend_from_slice(&b[13..]);
        Cow::Owned(copy)
    } else {
        Cow::Borrowed(b)
    }
}

/// Decodes the first frame to RGBA on its canvas.
pub fn decode(b: &[u8], header: &GifHeader, max_bytes: u64) -> Result<RgbaImage, ProcessError> {
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::Indexed);
    if let Some(limit) = NonZeroU64::new(max_bytes) {
        options.set_memory_limit(gif::MemoryLimit::Bytes(limit));
    }
    let map = |e: gif::DecodingError| ProcessError::Undecodable(format!("GIF: {e}"));
    let b = with_fallback_palette(b);
    let mut decoder = options.read_info(Cursor::new(&*b)).map_err(map)?;
    let global: Option<Vec<u8>> = decoder.global_palette().map(<[u8]>::to_vec);
    let frame = decoder
        .read_next_frame()
        .map_err(map)?
        .ok_or_else(|| undecodable("the GIF has no frame"))?;
    let palette: &[u8] = frame
        .palette
        .as_deref()
        .or(global.as_deref())
        .unwrap_or_default();
    let (cw, ch) = header.canvas();
    let mut canvas = RgbaImage::from_pixel(cw, ch, Rgba([0, 0, 0, 0]));
    let fw = u32::from(frame.width);
    let (left, top) = (u32::from(frame.left), u32::from(frame.top));
    for (i, &index) in frame.buffer.iter().enumerate() {
        let (x, y) = (left + i as u32 % fw.max(1), top + i as u32 / fw.max(1));
        if x >= cw || y >= ch || Some(index) == frame.transparent {
            continue;
        }
        let at = usize::from(index) * 3;
        if let Some(rgb) = palette.get(at..at + 3) {
            canvas.put_pixel(x, y, Rgba([rgb[0], rgb[1], rgb[2], 255]));
        }
    }
    Ok(canvas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_descriptor_is_found_past_tables_and_extensions() {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&[4, 0, 2, 0, 0x80, 0, 0]); // 4x2 screen, 2-entry global table
        b.extend_from_slice(&[0, 0, 0, 255, 255, 255]);
        b.extend_from_slice(&[0x21, 0xF9, 4, 0, 0, 0, 0, 0]); // graphic control extension
        b.extend_from_slice(&[0x2C, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]);
        let h = parse(&b).unwrap();
        assert_eq!(h.screen, (4, 2));
        assert_eq!(h.frame, (65535, 65535));
        assert_eq!(h.declared_pixels(), 65535 * 65535);
    }
}

//! GIF: its block structure, walked without decoding ([`Blocks`]: the first frame's header
//! here, the frames and plays of an animation in [`crate::animation`]), and its first frame,
//! composited onto its logical screen. The frame's declared size is checked against the
//! pixel limit before the decoder allocates; a file with no colour table at all gets a
//! grayscale one, as other decoders do (animations, decoded frame by frame, get it too).

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

/// One block of a GIF's body, as [`Blocks`] walks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block<'a> {
    /// An extension: its label and its sub-blocks (each a length byte and its data).
    Extension { label: u8, sub_blocks: &'a [u8] },
    /// An image descriptor: the size its frame declares.
    Image { width: u32, height: u32 },
}

/// The blocks after the header and global colour table, found by skipping each block's
/// sub-blocks (no LZW decoding): the walk the first-frame header ([`parse`]) and the
/// animation facts (`crate::animation::header`) share. It ends at the trailer or at the end
/// of the bytes; an `Err` (bytes cut short inside a block, an unknown block) ends it too.
/// An image's data is skipped when the next block is asked for, so a reader that stops at
/// a descriptor never looks past it.
pub struct Blocks<'a> {
    b: &'a [u8],
    at: usize,
    /// Where the last image descriptor began, its data not yet skipped.
    image_at: Option<usize>,
    done: bool,
}

impl<'a> Blocks<'a> {
    /// `None` for bytes too short to hold the header.
    pub fn new(b: &'a [u8]) -> Option<Blocks<'a>> {
        let flags = *b.get(10)?;
        let mut at = 13;
        if flags & 0x80 != 0 {
            at += 3 << ((flags & 7) + 1);
        }
        Some(Blocks {
            b,
            at,
            image_at: None,
            done: false,
        })
    }

    /// Past a run of sub-blocks starting at `at`; `None` when the bytes end first.
    fn skip_sub_blocks(&self, mut at: usize) -> Option<usize> {
        loop {
            let len = usize::from(*self.b.get(at)?);
            at = at.checked_add(1 + len)?;
            if len == 0 {
                return Some(at);
            }
        }
    }

    fn step(&mut self) -> Option<Result<Block<'a>, ProcessError>> {
        let b = self.b;
        if let Some(image) = self.image_at.take() {
            let Some(&local) = b.get(image + 9) else {
                return Some(Err(undecodable("truncated image descriptor")));
            };
            let mut data = image + 10;
            if local & 0x80 != 0 {
                data += 3 << ((local & 7) + 1);
            }
            // The LZW minimum code size, then the data's sub-blocks.
            match self.skip_sub_blocks(data + 1) {
                Some(next) => self.at = next,
                None => return Some(Err(undecodable("truncated image data"))),
            }
        }
        let at = self.at;
        match b.get(at) {
            Some(0x21) => {
                let (Some(&label), Some(end)) = (b.get(at + 1), self.skip_sub_blocks(at + 2))
                else {
                    return Some(Err(undecodable("truncated extension")));
                };
                self.at = end;
                Some(Ok(Block::Extension {
                    label,
                    sub_blocks: &b[at + 2..end],
                }))
            }
            Some(0x2C) => {
                let (Some(width), Some(height)) = (le16(b, at + 5), le16(b, at + 7)) else {
                    return Some(Err(undecodable("truncated image descriptor")));
                };
                self.image_at = Some(at);
                Some(Ok(Block::Image { width, height }))
            }
            Some(0x3B) | None => None,
            Some(other) => Some(Err(undecodable(&format!("unknown GIF block {other:#04x}")))),
        }
    }
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Result<Block<'a>, ProcessError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        self.done = !matches!(item, Some(Ok(_)));
        item
    }
}

/// Reads the header and walks the blocks up to the first image descriptor.
pub fn parse(b: &[u8]) -> Result<GifHeader, ProcessError> {
    let truncated = || undecodable("truncated GIF header");
    let screen = (
        le16(b, 6).ok_or_else(truncated)?,
        le16(b, 8).ok_or_else(truncated)?,
    );
    for block in Blocks::new(b).ok_or_else(truncated)? {
        if let Block::Image { width, height } = block? {
            return Ok(GifHeader {
                screen,
                frame: (width, height),
            });
        }
    }
    Err(undecodable("the GIF has no image"))
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

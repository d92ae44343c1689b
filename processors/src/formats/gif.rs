//! GIF: its block structure, walked without decoding ([`Blocks`]: the first frame's header,
//! and the frames and plays of an animation), and its first frame,
//! composited onto its logical screen. The frame's declared size is checked against the
//! pixel limit before the decoder allocates; a file with no colour table at all gets a
//! grayscale one, as other decoders do (animations, decoded frame by frame, get it too).

use std::borrow::Cow;
use std::io::Cursor;
use std::num::NonZeroU64;

use image::{DynamicImage, Rgba, RgbaImage};

use super::{AnimationHeader, DecodeAt, Decoded, Decoder, Format, Header};
use crate::bytes::{Reader, Short};
use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

pub(crate) struct Gif;

impl Format for Gif {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a")
    }

    /// The canvas is the picture's size; the decoder allocates for the larger of screen and
    /// first frame, and both are held to the pixel limit.
    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let header = parse(bytes)?;
        let pixels = header.declared_pixels();
        if pixels > limits.max_pixels {
            let (w, h) = if u64::from(header.frame.0) * u64::from(header.frame.1) == pixels {
                header.frame
            } else {
                header.screen
            };
            return Err(ProcessError::too_many_pixels(w, h, limits.max_pixels));
        }
        let (w, h) = header.canvas();
        Ok(Header::plain(w, h, true, header))
    }

    /// Image descriptors, found by skipping every block's sub-blocks; plays from the
    /// `NETSCAPE2.0` extension (its count is of repeats after the first play, 0 for ever;
    /// with no extension the animation plays once).
    fn animation(&self, bytes: &[u8]) -> Option<AnimationHeader> {
        let mut header = AnimationHeader::of(0, 1);
        // A graphic control extension's delay (hundredths of a second) is the next image's.
        let mut delay = 0u64;
        let area = |(w, h): (u32, u32)| u64::from(w) * u64::from(h);
        // The walk ends at the trailer, or where the bytes are cut short (common in GIFs
        // found on the web) with the frame cut into counted: the decoder plays the frames
        // before it.
        for block in Blocks::new(bytes)?.map_while(Result::ok) {
            match block {
                Block::Extension {
                    label: 0xFF,
                    sub_blocks,
                } => {
                    // An application extension: its 11-byte name, then `[3, 1, repeats]`
                    // (u16 LE).
                    let name = sub_blocks.get(..12);
                    let looping = sub_blocks.get(12..16);
                    if let (Some(b"\x0bNETSCAPE2.0" | b"\x0bANIMEXTS1.0"), Some(&[3, 1, lo, hi])) =
                        (name, looping)
                    {
                        let repeats = u32::from(u16::from_le_bytes([lo, hi]));
                        header.plays = if repeats == 0 { 0 } else { repeats + 1 };
                    }
                }
                Block::Extension {
                    label: 0xF9,
                    sub_blocks,
                } => {
                    // `[4, flags, delay (u16 LE), transparent index]`.
                    if let Some(&[4, _, lo, hi]) = sub_blocks.get(..4) {
                        delay = u64::from(u16::from_le_bytes([lo, hi]));
                    }
                }
                Block::Extension { .. } => {}
                Block::Image { width, height } => {
                    header.frames += 1;
                    header.duration_ms += delay * 10;
                    delay = 0;
                    if area((width, height)) > area(header.largest_frame) {
                        header.largest_frame = (width, height);
                    }
                }
            }
        }
        Some(header)
    }

    fn may_animate(&self) -> bool {
        true
    }

    fn as_output(&self) -> Option<OutputFormat> {
        Some(OutputFormat::Gif)
    }
}

impl Decoder for GifHeader {
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        let rgba = decode(at.bytes, self, at.limits.max_alloc())?;
        Ok(Decoded::pixels(DynamicImage::ImageRgba8(rgba)))
    }
}

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

fn undecodable(m: &str) -> ProcessError {
    ProcessError::Undecodable(m.into())
}

fn short(s: Short) -> ProcessError {
    ProcessError::Undecodable(format!("GIF: {s}"))
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
/// animation facts ([`Gif`]'s `animation`) share. It ends at the trailer or at the end
/// of the bytes; an `Err` (bytes cut short inside a block, an unknown block) ends it too.
/// An image's data is skipped when the next block is asked for, so a reader that stops at
/// a descriptor never looks past it. Every read goes through [`Reader`], so a length or
/// a table the file declares is never read past the bytes present.
pub struct Blocks<'a> {
    r: Reader<'a>,
    /// An image descriptor was read up to its size: its flags, colour table and data are
    /// still to skip.
    in_image: bool,
    done: bool,
}

/// The logical screen's size, from the first 10 bytes.
fn screen(r: &mut Reader<'_>) -> Result<(u32, u32), Short> {
    r.take(6, "GIF signature")?;
    Ok((
        u32::from(r.u16le("GIF screen width")?),
        u32::from(r.u16le("GIF screen height")?),
    ))
}

/// Past a colour table whose flags byte says it follows (bit 7; bits 0-2 its size).
fn skip_colour_table(r: &mut Reader<'_>, flags: u8, what: &'static str) -> Result<(), Short> {
    if flags & 0x80 != 0 {
        r.take(3 << ((flags & 7) + 1), what)?;
    }
    Ok(())
}

/// Past a run of sub-blocks, each a length byte and that many bytes, to the empty one.
fn skip_sub_blocks(r: &mut Reader<'_>) -> Result<(), Short> {
    loop {
        let len = r.u8("GIF sub-block length")?;
        if len == 0 {
            return Ok(());
        }
        r.take(usize::from(len), "GIF sub-block")?;
    }
}

impl<'a> Blocks<'a> {
    /// `None` for bytes too short to hold the header and its global colour table.
    pub fn new(b: &'a [u8]) -> Option<Blocks<'a>> {
        let mut r = Reader::new(b);
        screen(&mut r).ok()?;
        let flags = r.u8("GIF flags").ok()?;
        r.take(2, "GIF background and aspect").ok()?;
        skip_colour_table(&mut r, flags, "GIF global colour table").ok()?;
        Some(Blocks {
            r,
            in_image: false,
            done: false,
        })
    }

    fn step(&mut self) -> Result<Option<Block<'a>>, ProcessError> {
        let r = &mut self.r;
        if std::mem::take(&mut self.in_image) {
            let local = r.u8("GIF image descriptor flags").map_err(short)?;
            skip_colour_table(r, local, "GIF local colour table").map_err(short)?;
            r.u8("GIF LZW code size").map_err(short)?;
            skip_sub_blocks(r).map_err(short)?;
        }
        if r.left() == 0 {
            return Ok(None);
        }
        match r.u8("GIF block").map_err(short)? {
            0x21 => {
                let label = r.u8("GIF extension label").map_err(short)?;
                let mut rest = r.clone();
                skip_sub_blocks(&mut rest).map_err(short)?;
                let sub_blocks = r
                    .take(rest.position() - r.position(), "GIF extension")
                    .map_err(short)?;
                Ok(Some(Block::Extension { label, sub_blocks }))
            }
            0x2C => {
                let mut descriptor = || -> Result<Block<'a>, Short> {
                    r.take(4, "GIF image position")?;
                    let width = u32::from(r.u16le("GIF image width")?);
                    let height = u32::from(r.u16le("GIF image height")?);
                    Ok(Block::Image { width, height })
                };
                let image = descriptor().map_err(short)?;
                self.in_image = true;
                Ok(Some(image))
            }
            0x3B => Ok(None),
            other => Err(ProcessError::Undecodable(format!(
                "unknown GIF block {other:#04x}"
            ))),
        }
    }
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Result<Block<'a>, ProcessError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        self.done = !matches!(item, Some(Ok(_)));
        item
    }
}

/// Reads the header and walks the blocks up to the first image descriptor.
pub fn parse(b: &[u8]) -> Result<GifHeader, ProcessError> {
    let screen = screen(&mut Reader::new(b)).map_err(short)?;
    let blocks = Blocks::new(b).ok_or_else(|| undecodable("truncated GIF header"))?;
    for block in blocks {
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

    #[test]
    fn a_length_past_the_end_is_an_error_never_a_walk_past_it() {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&[4, 0, 2, 0, 0, 0, 0]); // no global table
                                                     // A comment extension whose one sub-block declares 200 bytes; 3 are present.
        let mut cut = b.clone();
        cut.extend_from_slice(&[0x21, 0xFE, 200, 1, 2, 3]);
        let message = parse(&cut).unwrap_err().to_string();
        assert!(
            message.contains("GIF sub-block need at least 200 bytes, 3 are left"),
            "{message}"
        );
        // A global table of 256 entries declared in a file of 13 bytes.
        b[10] = 0x87;
        assert!(Blocks::new(&b).is_none());
        assert!(parse(&b).is_err());
        // An image whose data's sub-blocks never end: the walk past it stops at the end.
        let mut endless = b"GIF89a".to_vec();
        endless.extend_from_slice(&[1, 0, 1, 0, 0, 0, 0]);
        endless.extend_from_slice(&[0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2]);
        endless.extend(std::iter::repeat_n([255u8; 256], 64).flatten());
        let blocks: Vec<_> = Blocks::new(&endless).unwrap().collect();
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(
            blocks[0],
            Ok(Block::Image {
                width: 1,
                height: 1
            })
        );
        assert!(blocks[1].is_err());
    }
}

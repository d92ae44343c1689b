//! What an animated container says of itself, from its headers alone: frames and plays
//! ([`header`], [`frame_count`]: GIF blocks, WebP `ANMF` chunks, APNG `acTL`; no LZW, VP8 or
//! zlib decoding), and [`check_declared`], which refuses at `open` the chunk lengths and
//! frame counts the bytes cannot hold. Every walk goes through the bounded reader. Kept apart
//! from `animation.rs` (which decodes and makes animations) so that `decode` can use it
//! without importing the decoders' users.

use crate::bytes::{Reader, Short};
use crate::error::ProcessError;
use crate::gif::{Block, Blocks};
use crate::sniff::{sniff, SourceFormat};

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
}

impl AnimationHeader {
    fn of(frames: u32, plays: u32) -> Self {
        AnimationHeader {
            frames,
            plays,
            largest_frame: (0, 0),
        }
    }
}

/// Bytes an `fcTL` chunk takes with its length, type and CRC: every APNG frame has one.
const FCTL_CHUNK_BYTES: usize = 12 + 26;

/// The chunks of a WebP's RIFF, read through the bounded reader: type and data, in order,
/// within the RIFF's own length (bytes after it are not the container's: decoders ignore
/// them). A chunk whose declared length runs past the bytes is an `Err`, and the walk ends.
struct RiffChunks<'a> {
    r: Reader<'a>,
    done: bool,
}

impl<'a> RiffChunks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        let riff = bytes
            .get(4..8)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let end = riff.saturating_add(8).min(bytes.len());
        RiffChunks {
            r: Reader::new(bytes.get(12..end).unwrap_or_default()),
            done: false,
        }
    }

    fn chunk(&mut self) -> Result<(&'a [u8], &'a [u8]), Short> {
        let fourcc = self.r.take(4, "chunk type")?;
        let len = self.r.u32le("chunk length")?;
        let what = match fourcc {
            b"ANMF" => "an ANMF chunk",
            b"ANIM" => "an ANIM chunk",
            b"ALPH" => "an ALPH chunk",
            b"VP8X" => "a VP8X chunk",
            b"VP8 " | b"VP8L" => "the image chunk",
            _ => "a chunk",
        };
        let data = self.r.chunk(u64::from(len), what)?;
        // RIFF pads odd chunks to even lengths; a file may end without the pad.
        if len % 2 == 1 && self.r.left() > 0 {
            self.r.take(1, "padding")?;
        }
        Ok((fourcc, data))
    }
}

impl<'a> Iterator for RiffChunks<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), Short>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.r.left() < 8 {
            return None;
        }
        let chunk = self.chunk();
        self.done = chunk.is_err();
        Some(chunk)
    }
}

/// The chunks of a PNG up to its first `IDAT` (the image data: what comes after is frames,
/// never headers), read through the bounded reader: type and data. A walk cut short by the
/// bytes ends there, its rest left to the decoder.
struct PngChunks<'a> {
    r: Reader<'a>,
    done: bool,
}

impl<'a> PngChunks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        PngChunks {
            r: Reader::new(bytes.get(8..).unwrap_or_default()),
            done: false,
        }
    }

    /// Bytes after the chunks read so far.
    fn left(&self) -> usize {
        self.r.left()
    }

    fn chunk(&mut self) -> Result<(&'a [u8], &'a [u8]), Short> {
        let len = self.r.u32be("chunk length")?;
        let kind = self.r.take(4, "chunk type")?;
        let data = self.r.chunk(u64::from(len), "chunk")?;
        self.r.take(4, "CRC")?;
        Ok((kind, data))
    }
}

impl<'a> Iterator for PngChunks<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let chunk = self.chunk().ok();
        self.done = chunk.is_none_or(|(kind, _)| kind == b"IDAT");
        chunk
    }
}

/// The `acTL` chunk's frame count and plays.
fn actl(data: &[u8]) -> Result<(u32, u32), Short> {
    let mut r = Reader::new(data);
    Ok((r.u32be("acTL frame count")?, r.u32be("acTL plays")?))
}

/// What a WebP or PNG container declares, checked against the bytes present before anything
/// trusts it (issue 35): every RIFF chunk of a WebP lies within the file (an `ANMF` of 4 GB
/// in 68 bytes is refused here, not walked), and an APNG's `acTL` frame count fits the bytes
/// after it, one `fcTL` chunk a frame at the least. Other formats: nothing to check here.
pub fn check_declared(format: SourceFormat, bytes: &[u8]) -> Result<(), ProcessError> {
    let refused = |name: &str, e: Short| ProcessError::Undecodable(format!("{name}: {e}"));
    match format {
        SourceFormat::Webp => RiffChunks::new(bytes)
            .try_for_each(|chunk| chunk.map(drop))
            .map_err(|e| refused("WebP", e)),
        SourceFormat::Png => {
            let mut chunks = PngChunks::new(bytes);
            while let Some((kind, data)) = chunks.next() {
                if kind == b"acTL" {
                    let (frames, _) = actl(data).map_err(|e| refused("APNG", e))?;
                    Reader::new(&bytes[bytes.len() - chunks.left()..])
                        .count(
                            u64::from(frames),
                            FCTL_CHUNK_BYTES,
                            "acTL frames (an fcTL each)",
                        )
                        .map_err(|e| refused("APNG", e))?;
                    break;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The animation facts of GIF, WebP and PNG bytes, from their headers; `None` for other
/// formats and for a container too damaged to walk (its decode says why).
pub fn header(bytes: &[u8]) -> Option<AnimationHeader> {
    match sniff(bytes)? {
        SourceFormat::Gif => gif_header(bytes),
        SourceFormat::Webp => webp_header(bytes),
        SourceFormat::Png => apng_header(bytes),
        _ => None,
    }
}

/// Frames in the bytes, from their headers: 1 for anything but an animation.
pub fn frame_count(bytes: &[u8]) -> u32 {
    header(bytes).map_or(1, |h| h.frames).max(1)
}

/// GIF: image descriptors, found by skipping every block's sub-blocks; plays from the
/// `NETSCAPE2.0` extension (its count is of repeats after the first play, 0 for ever; with
/// no extension the animation plays once).
fn gif_header(b: &[u8]) -> Option<AnimationHeader> {
    let mut header = AnimationHeader::of(0, 1);
    let area = |(w, h): (u32, u32)| u64::from(w) * u64::from(h);
    // The walk ends at the trailer, or where the bytes are cut short (common in GIFs found
    // on the web) with the frame cut into counted: the decoder plays the frames before it.
    for block in Blocks::new(b)?.map_while(Result::ok) {
        match block {
            Block::Extension {
                label: 0xFF,
                sub_blocks,
            } => {
                // An application extension: its 11-byte name, then `[3, 1, repeats (u16 LE)]`.
                let name = sub_blocks.get(..12);
                let looping = sub_blocks.get(12..16);
                if let (Some(b"\x0bNETSCAPE2.0" | b"\x0bANIMEXTS1.0"), Some(&[3, 1, lo, hi])) =
                    (name, looping)
                {
                    let repeats = u32::from(u16::from_le_bytes([lo, hi]));
                    header.plays = if repeats == 0 { 0 } else { repeats + 1 };
                }
            }
            Block::Extension { .. } => {}
            Block::Image { width, height } => {
                header.frames += 1;
                if area((width, height)) > area(header.largest_frame) {
                    header.largest_frame = (width, height);
                }
            }
        }
    }
    Some(header)
}

/// WebP: `ANMF` chunks of a file with an `ANIM` chunk (whose loop count is the plays), as
/// far as the chunks can be walked.
fn webp_header(b: &[u8]) -> Option<AnimationHeader> {
    let mut frames = 0u32;
    let mut plays = None;
    for (fourcc, data) in RiffChunks::new(b).map_while(Result::ok) {
        match fourcc {
            b"ANIM" => {
                let loops = data.get(4..6)?;
                plays = Some(u32::from(u16::from_le_bytes([loops[0], loops[1]])));
            }
            b"ANMF" => frames += 1,
            _ => {}
        }
    }
    Some(match plays {
        Some(plays) => AnimationHeader::of(frames, plays),
        None => AnimationHeader::of(1, 1),
    })
}

/// APNG: the frame count and plays its `acTL` chunk declares (before the image data).
fn apng_header(b: &[u8]) -> Option<AnimationHeader> {
    match PngChunks::new(b).find(|(kind, _)| *kind == b"acTL") {
        Some((_, data)) => actl(data)
            .ok()
            .map(|(frames, plays)| AnimationHeader::of(frames, plays)),
        None => Some(AnimationHeader::of(1, 1)),
    }
}

//! Animated sources (GIF, WebP and APNG of more than one frame) in, animated GIF or WebP out.
//!
//! What an animation is — how many frames, how many plays — is read from the container's
//! block headers alone ([`header`]: no LZW, VP8 or zlib decoding; the RIFF and PNG chunk
//! walks go through the bounded reader, and [`check_declared`] refuses, at `open`, chunk
//! lengths and frame counts the bytes cannot hold), and the limits are checked
//! on that before any frame is decoded ([`check`]): an animation's pixels are frames × width
//! × height, and a 2,000-frame file must be refused without decoding 2,000 frames to learn
//! it. Frames are then decoded one at a time, composited onto the canvas (disposal and
//! blending are the decoders'), shaped exactly as a still is, and handed to the encoder
//! (`encode::AnimationWriter`) before the next is decoded: a run holds a few frames, whatever
//! their number.

use std::io::Cursor;
use std::sync::Arc;

use image::codecs::gif::GifDecoder;
use image::codecs::png::PngDecoder;
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, DynamicImage, Frames, ImageDecoder, RgbaImage};

use crate::bytes::{Reader, Short};
use crate::decode::{Limits, Source};
use crate::error::ProcessError;
use crate::gif::{Block, Blocks};
use crate::sniff::{sniff, SourceFormat};
use crate::spec::{Gravity, ResolvedSpec};
use crate::{encode, ops, smart, Decodes, Processed};

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

/// The limits of an animation of `frames` frames of `size` (its source, or its output):
/// at most `limits.max_frames` frames, and frames × width × height within the pixel limit.
pub fn check(frames: u32, size: (u32, u32), limits: &Limits) -> Result<(), ProcessError> {
    let (width, height) = size;
    let pixels = u64::from(frames)
        .saturating_mul(u64::from(width))
        .saturating_mul(u64::from(height));
    if frames > limits.max_frames || pixels > limits.max_pixels {
        return Err(ProcessError::AnimationTooLarge {
            frames,
            width,
            height,
            pixels,
            max_frames: limits.max_frames,
            limit: limits.max_pixels,
        });
    }
    Ok(())
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

/// The longest a frame shows (ms): WebP's limit (24-bit durations).
pub const MAX_DELAY_MS: u32 = (1 << 24) - 1;

/// One output frame: its pixels and how long it shows, in milliseconds.
pub struct OutputFrame {
    pub pixels: RgbaImage,
    pub delay_ms: u32,
}

/// Runs an animated spec (`spec.animated`) on an opened original: every frame shaped as a
/// still would be, then encoded as an animation. `Ok(None)` when the headers show one frame
/// only (the caller makes a still). Each decoded frame is reported to `decodes`.
pub(crate) fn process(
    source: &Source<'_>,
    spec: &ResolvedSpec,
    limits: &Limits,
    decodes: &dyn Decodes,
) -> Result<Option<Processed>, ProcessError> {
    let bytes = source.bytes();
    let Some(header) = header(bytes).filter(|h| h.frames > 1) else {
        return Ok(None);
    };
    // The canvas, and any larger frame the decoder would allocate for.
    let canvas = (source.info.width, source.info.height);
    check(header.frames, canvas, limits)?;
    let (fw, fh) = header.largest_frame;
    if u64::from(fw) * u64::from(fh) > u64::from(canvas.0) * u64::from(canvas.1) {
        check(header.frames, (fw, fh), limits)?;
    }
    let (uw, uh) = source.upright_size();
    crate::check_minimum(uw, uh, &spec.shape)?;
    let (rotated, plan, _) = crate::layout((uw, uh), spec, false);
    check(header.frames, plan.output_size(), limits)?;
    encode::check_animation_size(spec.format, plan.output_size())?;
    // The image crate's frame decoders are third-party code reading input bytes: a panic in
    // one is the file's failure (see `guarded`), never the server's.
    let name = source.info.format.name();
    let mut frames = crate::error::guarded(name, || decoder(bytes, source.info.format, limits))?;
    // Each frame is shaped and handed to the writer before the next is decoded: a run holds
    // a few frames, not the animation (issue 28).
    let mut writer: Option<encode::AnimationWriter> = None;
    let mut made = 0u32;
    let mut crop = None;
    // No more frames than the headers showed: the limits were checked on those.
    while made < header.frames {
        let frame = match crate::error::guarded(name, || Ok(frames.next()))? {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(image::ImageError::Limits(_))) => {
                return Err(ProcessError::too_many_pixels(
                    canvas.0,
                    canvas.1,
                    limits.max_pixels,
                ))
            }
            // Bytes cut short after some frames: browsers play what decodes, and so do we.
            Some(Err(_)) if made > 0 => break,
            Some(Err(e)) => return Err(ProcessError::Undecodable(e.to_string())),
        };
        decodes.frame_decoded();
        let (numer, denom) = frame.delay().numer_denom_ms();
        // WebP holds durations below 2^24 ms (4.6 hours); longer ones are held that long.
        let delay_ms = (numer / denom.max(1)).min(MAX_DELAY_MS);
        let mut image = DynamicImage::ImageRgba8(frame.into_buffer());
        if let Some(icc) = &source.icc {
            image = crate::color::to_srgb(image, icc);
        }
        image.apply_orientation(source.orientation);
        if spec.shape.rotate != 0 {
            image = ops::rotate(&image, spec.shape.rotate);
        }
        let mut frame_plan = plan.rescaled(rotated, (image.width(), image.height()));
        if spec.shape.gravity == Gravity::Smart {
            // Placed on the first frame and kept: a crop that moved between frames would
            // make the picture jump.
            let placed =
                *crop.get_or_insert_with(|| frame_plan.crop.map(|c| smart::place(&image, c)));
            frame_plan.crop = placed;
        }
        let mut image = ops::apply_plan(Arc::new(image), &frame_plan, spec.shape.background)?;
        if let Some(sigma) = spec.shape.blur {
            image = ops::blur(image, sigma.as_f64());
        }
        if let Some(sigma) = spec.shape.sharpen {
            image = ops::sharpen(image, sigma.as_f64());
        }
        let pixels = image.into_rgba8();
        let writer = match &mut writer {
            Some(writer) => writer,
            None => writer.insert(encode::AnimationWriter::new(
                spec,
                pixels.dimensions(),
                header.plays,
            )?),
        };
        writer.add(OutputFrame { pixels, delay_ms })?;
        made += 1;
    }
    let Some(writer) = writer else {
        return Err(ProcessError::Undecodable(
            "the animation has no frame".into(),
        ));
    };
    let (width, height) = writer.size();
    let bytes = writer.finish()?;
    Ok(Some(Processed {
        bytes,
        format: spec.format,
        width,
        height,
    }))
}

/// The frames of an animated GIF, WebP or APNG, composited, decoded as they are asked for.
fn decoder<'a>(
    bytes: &'a [u8],
    format: SourceFormat,
    limits: &Limits,
) -> Result<Frames<'a>, ProcessError> {
    let mut decoder_limits = image::Limits::default();
    decoder_limits.max_alloc = Some(limits.max_alloc());
    let map = |e: image::ImageError| ProcessError::Undecodable(e.to_string());
    Ok(match format {
        SourceFormat::Gif => {
            let patched = crate::gif::with_fallback_palette(bytes).into_owned();
            let mut decoder = GifDecoder::new(Cursor::new(patched)).map_err(map)?;
            decoder.set_limits(decoder_limits).map_err(map)?;
            decoder.into_frames()
        }
        SourceFormat::Webp => {
            let mut decoder = WebPDecoder::new(Cursor::new(bytes)).map_err(map)?;
            decoder.set_limits(decoder_limits).map_err(map)?;
            decoder.into_frames()
        }
        SourceFormat::Png => {
            let mut decoder = PngDecoder::new(Cursor::new(bytes)).map_err(map)?;
            decoder.set_limits(decoder_limits).map_err(map)?;
            decoder.apng().map_err(map)?.into_frames()
        }
        other => {
            return Err(ProcessError::UnsupportedFormat(format!(
                "{} sources are not animated",
                other.name()
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GIF of `frames` 2×2 frames (one LZW byte each), looping `repeats` times after the
    /// first play when given.
    fn gif(frames: u32, repeats: Option<u16>) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&[2, 0, 2, 0, 0x80, 0, 0, 0, 0, 0, 255, 255, 255]);
        if let Some(n) = repeats {
            b.extend_from_slice(&[0x21, 0xFF, 11]);
            b.extend_from_slice(b"NETSCAPE2.0");
            b.extend_from_slice(&[3, 1]);
            b.extend_from_slice(&n.to_le_bytes());
            b.push(0);
        }
        for _ in 0..frames {
            b.extend_from_slice(&[0x21, 0xF9, 4, 0, 10, 0, 0, 0]);
            b.extend_from_slice(&[0x2C, 0, 0, 0, 0, 2, 0, 2, 0, 0, 2, 2, 0x4C, 0x01, 0]);
        }
        b.push(0x3B);
        b
    }

    #[test]
    fn gif_frames_and_plays_come_from_the_blocks() {
        let seven = header(&gif(7, Some(0))).unwrap();
        assert_eq!(
            (seven.frames, seven.plays, seven.largest_frame),
            (7, 0, (2, 2))
        );
        // Cut short inside the fourth frame: three whole frames and the one cut into.
        let mut cut = gif(7, None);
        cut.truncate(19 + 3 * 23 + 20);
        assert_eq!(header(&cut).map(|h| h.frames), Some(4));
        assert_eq!(header(&gif(3, Some(2))).map(|h| h.plays), Some(3));
        assert_eq!(header(&gif(3, None)).map(|h| h.plays), Some(1));
        assert_eq!(frame_count(&gif(1, None)), 1);
        // A frame far larger than the 2×2 screen is what the limits count.
        let mut huge = gif(3, None);
        let second = 19 + 23 + 8;
        huge[second + 5..second + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
        let h = header(&huge).unwrap();
        assert_eq!((h.frames, h.largest_frame), (3, (65535, 65535)));
        // A run refuses it before decoding a frame (the screen alone passes every check).
        let limits = Limits::default();
        let source = crate::decode::open(&huge, &limits).unwrap();
        let spec = crate::Spec::parse("format=webp")
            .unwrap()
            .resolve_frames(None, true, 3, None);
        let refused = process(&source, &spec, &limits, &crate::Decode);
        assert!(
            matches!(
                refused,
                Err(ProcessError::AnimationTooLarge { width: 65535, .. })
            ),
            "{:?}",
            refused.err()
        );
    }

    #[test]
    fn limits_count_every_frame() {
        let limits = Limits {
            max_pixels: 1000,
            max_frames: 10,
            ..Limits::default()
        };
        assert!(check(10, (10, 10), &limits).is_ok());
        assert!(matches!(
            check(11, (1, 1), &limits),
            Err(ProcessError::AnimationTooLarge { frames: 11, .. })
        ));
        let err = check(2, (25, 25), &limits).unwrap_err();
        assert_eq!(err.kind(), Some(crate::ProcessFailure::TooManyPixels));
    }
}

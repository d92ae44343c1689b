//! Animated sources (GIF, WebP, APNG, JPEG XL and AVIF sequences of more than one frame) in,
//! animated GIF, WebP or AVIF out.
//!
//! What an animation is — how many frames, how many plays — is read from the container's
//! block headers alone by the format's room in `formats/` ([`header`], re-exported here; the
//! room's `open` refuses what the bytes cannot hold), and the limits are checked
//! on that before any frame is decoded ([`check`]): an animation's pixels are frames × width
//! × height, and a 2,000-frame file must be refused without decoding 2,000 frames to learn
//! it. Frames are then decoded one at a time, composited onto the canvas (disposal and
//! blending are the decoders'), shaped as a still is (`shape.rs`), and handed to the encoder
//! (`encode::AnimationWriter`) before the next is decoded: a run holds a few frames, whatever
//! their number.

use std::io::Cursor;
use std::sync::Arc;

use image::codecs::gif::GifDecoder;
use image::codecs::png::PngDecoder;
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, DynamicImage, Frames, ImageDecoder};

use crate::decode::{Limits, Source};
use crate::encode::{self, OutputFrame};
use crate::error::ProcessError;
use crate::formats::SourceFormat;
use crate::spec::ResolvedSpec;
use crate::{Decodes, Processed};

pub use crate::formats::{animation_header as header, frame_count, AnimationHeader};

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

/// The longest a frame shows (ms): WebP's limit (24-bit durations).
pub const MAX_DELAY_MS: u32 = (1 << 24) - 1;

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
    let (rotated, plan, _) = crate::geometry::layout((uw, uh), spec, false);
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
    let mut kept = Default::default();
    // No more frames than the headers showed: the limits were checked on those.
    while made < header.frames {
        decodes.check()?;
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
        let image = crate::shape::shape(Arc::new(image), spec, &plan, rotated, limits, &mut kept)?;
        let pixels = image.into_rgba8();
        let writer = match &mut writer {
            Some(writer) => writer,
            None => writer.insert(encode::AnimationWriter::new(
                spec,
                pixels.dimensions(),
                header.plays,
                source.info.has_alpha,
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
    decodes.check()?;
    let encoded = writer.finish()?;
    Ok(Some(Processed {
        bytes: encoded.bytes,
        chosen: encoded.chosen,
        search_encodes: encoded.search_encodes,
        format: spec.format,
        width,
        height,
    }))
}

/// The frames of an animated GIF, WebP, APNG, JPEG XL or AVIF, composited, decoded as they
/// are asked for.
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
            let patched = crate::formats::gif::with_fallback_palette(bytes).into_owned();
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
        SourceFormat::Jxl => crate::formats::jxl::frames(bytes, limits)?,
        SourceFormat::Avif => crate::avif_anim::frames(bytes, limits.max_pixels)
            .map_err(|e| ProcessError::Undecodable(format!("AVIF: {e}")))?,
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

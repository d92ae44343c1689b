//! WebP: every RIFF chunk held to the bytes present at `open` (an `ANMF` of 4 GB in 68 bytes
//! is refused, not walked) in the same walk that finds the `EXIF` chunk (the orientation; some
//! writers prefix its TIFF structure with `Exif\0\0`); the canvas read from the first chunk
//! (the `image` crate wraps a 16384-pixel lossless side to 0); frames and plays
//! from `ANMF` and `ANIM`. Stills decode through libwebp, animations' first frame through the
//! `image` crate.

use image::{DynamicImage, ImageFormat};

use super::image_decoders;
use super::riff::Chunks;
use super::{AnimationHeader, DecodeAt, Decoded, Decoder, Format, Header};
use crate::bytes::{u24le_at, u32le_at};
use crate::error::ProcessError;
use crate::limits::Limits;
use crate::spec::OutputFormat;

pub(crate) struct Webp;

impl Format for Webp {
    fn sniff(&self, bytes: &[u8]) -> bool {
        bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP"
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        // One walk: every chunk held to the bytes, and the first `EXIF` kept.
        let mut exif = None;
        for chunk in Chunks::new(bytes) {
            let (fourcc, data) = chunk.map_err(|e| super::undecodable("WebP", e))?;
            if fourcc == b"EXIF" && exif.is_none() {
                exif = Some(data.strip_prefix(b"Exif\0\0").unwrap_or(data));
            }
        }
        if let Some((w, h)) = declared_size(bytes) {
            if u64::from(w) * u64::from(h) > limits.max_pixels {
                return Err(ProcessError::too_many_pixels(w, h, limits.max_pixels));
            }
        }
        // The image crate's header, its orientation the EXIF chunk's (which it ignores).
        let mut header = image_decoders::open(bytes, ImageFormat::WebP, limits)?;
        header.orientation = super::exif_orientation(exif);
        header.decoder = Box::new(WebpSource {
            dims: (header.width, header.height),
        });
        Ok(header)
    }

    /// `ANMF` chunks of a file with an `ANIM` chunk (whose loop count is the plays), as far
    /// as the chunks can be walked.
    fn animation(&self, bytes: &[u8]) -> Option<AnimationHeader> {
        let mut frames = 0u32;
        let mut plays = None;
        let mut duration_ms = 0u64;
        for (fourcc, data) in Chunks::new(bytes).map_while(Result::ok) {
            match fourcc {
                b"ANIM" => plays = Some(u32::from(crate::bytes::u16le_at(data, 4)?)),
                b"ANMF" => {
                    frames += 1;
                    // The frame's duration: 24 bits LE after its offset and size.
                    if let Some(&[a, b, c]) = data.get(12..15) {
                        duration_ms += u64::from(u32::from_le_bytes([a, b, c, 0]));
                    }
                }
                _ => {}
            }
        }
        Some(match plays {
            Some(plays) => AnimationHeader::of(frames, plays).lasting(duration_ms),
            None => AnimationHeader::of(1, 1),
        })
    }

    fn may_animate(&self) -> bool {
        true
    }

    fn as_output(&self) -> Option<OutputFormat> {
        Some(OutputFormat::Webp)
    }
}

/// The canvas the first chunk declares (`VP8X` canvas or `VP8L` header).
fn declared_size(bytes: &[u8]) -> Option<(u32, u32)> {
    match bytes.get(12..16)? {
        b"VP8X" => Some((u24le_at(bytes, 24)? + 1, u24le_at(bytes, 27)? + 1)),
        b"VP8L" if bytes.get(20) == Some(&0x2F) => {
            let bits = u32le_at(bytes, 21)?;
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        _ => None,
    }
}

/// A WebP's decode: libwebp for a still, the `image` crate for the rest (`dims`, the
/// header's size, names a refusal by the allocation limit).
struct WebpSource {
    dims: (u32, u32),
}

impl Decoder for WebpSource {
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        let image = match still(at.bytes) {
            Some(image) => image,
            // An animation (its first frame) or bytes libwebp refuses: the image crate.
            None => image_decoders::decode(at.bytes, ImageFormat::WebP, at.limits, self.dims)?,
        };
        Ok(Decoded::pixels(image))
    }
}

/// A still WebP decoded by libwebp (the library that encodes imgcas's WebP, fuzzed
/// continuously upstream): the very pixels the `image` crate's decoder gives (checked on
/// every still WebP of the test corpus), in 40 % of its time. `None` for an animation,
/// which the simple API does not decode, and for what libwebp refuses.
fn still(bytes: &[u8]) -> Option<DynamicImage> {
    let decoded = webp::Decoder::new(bytes).decode()?;
    let (w, h) = (decoded.width(), decoded.height());
    let pixels = decoded.to_vec();
    if decoded.is_alpha() {
        image::RgbaImage::from_raw(w, h, pixels).map(DynamicImage::ImageRgba8)
    } else {
        image::RgbImage::from_raw(w, h, pixels).map(DynamicImage::ImageRgb8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn libwebp_decodes_stills_to_the_image_crates_pixels() {
        let photo = testdata("exif-orientation/Landscape_1.jpg");
        let header = super::super::jpeg::parse(&photo).unwrap();
        let rgb = super::super::jpeg::decode(&photo, &header, 4).unwrap();
        let rgba = DynamicImage::ImageRgba8(rgb.to_rgba8());
        let lossless = webp::Encoder::from_rgb(rgb.as_bytes(), rgb.width(), rgb.height())
            .encode_lossless()
            .to_vec();
        let with_alpha = webp::Encoder::from_rgba(rgba.as_bytes(), rgba.width(), rgba.height())
            .encode(75.0)
            .to_vec();
        let files = [
            ("hopper (lossy)", testdata("pillow/hopper.webp")),
            (
                "EXIF-oriented",
                testdata("pillow/hopper_orientation_6.webp"),
            ),
            ("lossless", lossless),
            ("lossy with alpha", with_alpha),
        ];
        let limits = Limits::default();
        for (name, bytes) in &files {
            let header = Webp.open(bytes, &limits).unwrap();
            let dims = (header.width, header.height);
            let ours = still(bytes).expect(name);
            let theirs = image_decoders::decode(bytes, ImageFormat::WebP, &limits, dims).unwrap();
            assert_eq!(ours.color(), theirs.color(), "{name}");
            assert!(ours.as_bytes() == theirs.as_bytes(), "{name}: other pixels");
        }
        // An animation is left to the frame walk (and its first frame to the image crate).
        assert!(still(&testdata("sharp/animated-loop-3.webp")).is_none());
    }
}

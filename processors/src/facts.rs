//! What a page wants to know of a picture before it loads it, computed once per original:
//! placeholders to paint while the image loads (a BlurHash of 4 × 3 components, a ThumbHash,
//! the dominant colour) from the smallest decode that suffices, and how many frames it has
//! and how long one play lasts, from a walk of its container's headers (no pixel decoded).

use image::DynamicImage;

use crate::decode::{self, Limits};
use crate::error::ProcessError;
use crate::Decodes;

/// Bumped when facts already kept are wrong or lack something: facts of another version are
/// computed again. 2: a GIF cut short counts the frames before the cut (it counted 1), as
/// processing does. 3: an AVIF image sequence counts its frames (it counted 1), and JPEG XL
/// is read (it was no picture). (A change that moves placeholders by rounding alone, as
/// ThumbHash's smaller input did, leaves kept ones be: recomputing every original's is not
/// worth it.) 4: an animation's duration (one play, in milliseconds) is kept.
pub const FACTS_VERSION: u32 = 4;

/// BlurHash components across and down (landscape-friendly, the usual choice).
const BLURHASH_COMPONENTS: (u32, u32) = (4, 3);

/// The side the placeholders are computed at (ThumbHash takes at most 100 × 100).
const PLACEHOLDER_SIDE: u32 = 100;

/// The side ThumbHash is computed at. It keeps at most 7 frequencies a side, which 32 pixels
/// hold as well as 100 (the hashes differ in rounding, the pictures they paint do not), and
/// its encoder visits every pixel once per frequency: at 100 px it took most of the facts'
/// time, a cost every new original pays.
const THUMBHASH_SIDE: u32 = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// BlurHash (4 × 3 components), as its usual text.
    pub blurhash: String,
    /// ThumbHash's bytes (the API shows them in base64).
    pub thumbhash: Vec<u8>,
    /// The most common colour (coarsely bucketed, then averaged within the bucket), alpha
    /// ignored where the picture is transparent.
    pub dominant_color: [u8; 3],
    pub has_alpha: bool,
    /// Frames in the container (1 for a still picture).
    pub frames: u32,
    /// One play's length in milliseconds, as the container's delays declare it (0 for a still
    /// picture).
    pub duration_ms: u64,
}

impl Facts {
    /// `#rrggbb`.
    pub fn dominant_hex(&self) -> String {
        let [r, g, b] = self.dominant_color;
        format!("#{r:02x}{g:02x}{b:02x}")
    }
}

/// The facts of encoded bytes: opened and checked against `limits` like any source, decoded
/// as small as suffices ([`decode::decode_small`], through `decodes`).
pub fn facts(bytes: &[u8], limits: &Limits, decodes: &dyn Decodes) -> Result<Facts, ProcessError> {
    let (image, _) = decode::decode_small(bytes, limits, decodes)?;
    // One walk of the headers gives both (a JPEG XL's is a parse of its frame headers).
    let header = crate::animation::header(bytes);
    let mut facts = of_image(&image, header.map_or(1, |h| h.frames).max(1));
    if facts.frames > 1 {
        facts.duration_ms = header.map_or(0, |h| h.duration_ms);
    }
    Ok(facts)
}

/// The placeholders of decoded, upright pixels.
pub fn of_image(image: &DynamicImage, frames: u32) -> Facts {
    let small = image
        .thumbnail(PLACEHOLDER_SIDE, PLACEHOLDER_SIDE)
        .into_rgba8();
    let (w, h) = (small.width(), small.height());
    let rgba = small.as_raw();
    let (cx, cy) = BLURHASH_COMPONENTS;
    // Components in range and a buffer of w × h × 4: it cannot fail.
    let blurhash = blurhash::encode(cx, cy, w, h, rgba).unwrap_or_default();
    let thumbhash = if w.max(h) > THUMBHASH_SIDE {
        let scale = f64::from(THUMBHASH_SIDE) / f64::from(w.max(h));
        let side = |s: u32| ((f64::from(s) * scale).round() as u32).clamp(1, THUMBHASH_SIDE);
        let (tw, th) = (side(w), side(h));
        let thumb = image::imageops::thumbnail(&small, tw, th);
        thumbhash::rgba_to_thumb_hash(tw as usize, th as usize, thumb.as_raw())
    } else {
        thumbhash::rgba_to_thumb_hash(w as usize, h as usize, rgba)
    };
    Facts {
        blurhash,
        thumbhash,
        dominant_color: dominant(rgba),
        has_alpha: image.color().has_alpha(),
        frames,
        duration_ms: 0,
    }
}

/// The most common colour: pixels bucketed by their top 4 bits per channel (transparent ones
/// skipped), the fullest bucket's mean. Mean colour of all when every pixel is transparent.
fn dominant(rgba: &[u8]) -> [u8; 3] {
    let mut counts = vec![0u32; 4096];
    let mut sums = vec![[0u64; 3]; 4096];
    for p in rgba.chunks_exact(4) {
        if p[3] < 128 {
            continue;
        }
        let bucket =
            (usize::from(p[0] >> 4) << 8) | (usize::from(p[1] >> 4) << 4) | usize::from(p[2] >> 4);
        counts[bucket] += 1;
        for c in 0..3 {
            sums[bucket][c] += u64::from(p[c]);
        }
    }
    let Some((best, &n)) = counts.iter().enumerate().max_by_key(|(_, n)| **n) else {
        return [0, 0, 0];
    };
    if n == 0 {
        let all = rgba.chunks_exact(4).count().max(1) as u64;
        let mean =
            |c: usize| (rgba.chunks_exact(4).map(|p| u64::from(p[c])).sum::<u64>() / all) as u8;
        return [mean(0), mean(1), mean(2)];
    }
    let s = sums[best];
    let n = u64::from(n);
    [(s[0] / n) as u8, (s[1] / n) as u8, (s[2] / n) as u8]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::animation::frame_count;
    use image::{Rgb, RgbImage};

    #[test]
    fn a_mostly_red_picture_has_a_red_dominant_colour_and_its_placeholders() {
        let mut img = RgbImage::from_pixel(200, 120, Rgb([200, 20, 20]));
        for x in 0..40 {
            for y in 0..120 {
                img.put_pixel(x, y, Rgb([10, 10, 240]));
            }
        }
        let facts = of_image(&DynamicImage::ImageRgb8(img), 1);
        assert_eq!(facts.dominant_hex(), "#c81414");
        assert_eq!(facts.blurhash.len(), 4 + 2 * 4 * 3, "{}", facts.blurhash);
        assert!(!facts.thumbhash.is_empty());
        assert!(!facts.has_alpha);
        let (_, _, avg) = (
            0,
            0,
            thumbhash::thumb_hash_to_average_rgba(&facts.thumbhash).unwrap(),
        );
        assert!(avg.0 > avg.2, "ThumbHash's average is reddish: {avg:?}");
    }

    #[test]
    fn frames_are_counted_from_headers() {
        let still = {
            let mut out = Vec::new();
            DynamicImage::ImageRgb8(RgbImage::new(4, 4))
                .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Gif)
                .unwrap();
            out
        };
        assert_eq!(frame_count(&still), 1);
        let animated = {
            let mut out = Vec::new();
            {
                let mut encoder =
                    ::gif::Encoder::new(&mut out, 4, 4, &[0, 0, 0, 255, 255, 255]).unwrap();
                for i in 0..7u8 {
                    let frame = ::gif::Frame {
                        width: 4,
                        height: 4,
                        buffer: std::borrow::Cow::Owned(vec![i % 2; 16]),
                        ..Default::default()
                    };
                    encoder.write_frame(&frame).unwrap();
                }
            }
            out
        };
        assert_eq!(frame_count(&animated), 7);
        assert_eq!(frame_count(b"not an image"), 1);
    }

    /// Mean absolute difference, per channel value, of a ThumbHash's painted placeholder
    /// from the picture reduced to the placeholder's size.
    fn painted_error(hash: &[u8], picture: &image::RgbaImage) -> f64 {
        let (w, h, painted) = thumbhash::thumb_hash_to_rgba(hash).unwrap();
        let truth = image::imageops::thumbnail(picture, w as u32, h as u32);
        let total: f64 = painted
            .iter()
            .zip(truth.as_raw())
            .map(|(a, b)| f64::from((i16::from(*a) - i16::from(*b)).abs()))
            .sum();
        total / painted.len() as f64
    }

    #[test]
    fn thumbhash_from_fewer_pixels_paints_the_picture_as_well_as_from_100() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
        let mut photos = Vec::new();
        for sub in ["photos", "exif-orientation", "sharp"] {
            for entry in std::fs::read_dir(dir.join(sub)).unwrap().flatten() {
                if entry.path().extension().is_some_and(|e| e == "jpg") {
                    photos.push(entry.path());
                }
            }
        }
        assert!(photos.len() >= 6, "{photos:?}");
        let limits = Limits::default();
        let (mut ours, mut full) = (0.0, 0.0);
        for path in &photos {
            let bytes = std::fs::read(path).unwrap();
            let (image, _) = decode::decode_small(&bytes, &limits, &crate::Decode).unwrap();
            let picture = image
                .thumbnail(PLACEHOLDER_SIDE, PLACEHOLDER_SIDE)
                .into_rgba8();
            let at_100 = thumbhash::rgba_to_thumb_hash(
                picture.width() as usize,
                picture.height() as usize,
                picture.as_raw(),
            );
            ours += painted_error(&of_image(&image, 1).thumbhash, &picture);
            full += painted_error(&at_100, &picture);
        }
        let n = photos.len() as f64;
        let (ours, full) = (ours / n, full / n);
        assert!(
            ours <= full + 0.5,
            "{THUMBHASH_SIDE} px: {ours:.2}, 100 px: {full:.2}"
        );
    }
}

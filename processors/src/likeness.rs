//! The pixel-level check behind a canonical merge: whether two pictures whose fingerprints
//! match are the same picture everywhere, not only on the whole.
//!
//! A fingerprint summarises a picture in 32 × 32 area means, so an edit covering a few
//! percent of it (a line of text in a corner, a box or a logo in the centre) moves it by a
//! bit or two, inside the merge radius (issue 28: an attacker's edited copy, published first,
//! stood in for every later copy of the photo). Merging serves one picture for another, so it
//! asks more: both are decoded (at no less than twice a common size of at most 384 pixels),
//! brought to that size, and compared tile by tile (4 × 4 pixels) after the one global change
//! a re-encode or a brightness nudge makes (a gain and an offset per channel, fitted over the
//! samples neither picture clips). The largest signed mean difference of any tile, in any
//! channel, is the pictures' [`local_difference`]: a re-encode, a resize or a format change
//! leaves noise that alternates in sign and cancels over a tile, while an overlay moves the
//! tiles it covers one way, tens of levels. [`MAX_LOCAL_DIFFERENCE`] is set between the two on
//! the shared photographs (`processors/tests/it/near_dup_accuracy.rs`).

use fast_image_resize::images::Image as FirImage;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, RgbImage};

use crate::decode::{open, Limits};
use crate::error::ProcessError;

/// Side of a comparison tile, in pixels of the common size (at most [`COMMON_SIDE`]).
const TILE: u32 = 4;
/// The common size's longer side, at most.
const COMMON_SIDE: u32 = 384;

/// The largest [`local_difference`] of two pictures a merge accepts (levels of 255 in the
/// worst tile and channel, after the global fit): above all but a few percent of the resizes,
/// re-encodes and format changes of the shared photographs, below every overlay of 0.3–5 % of
/// the area (the smallest measured: 12.7).
pub const MAX_LOCAL_DIFFERENCE: f32 = 12.0;

/// Whether the pictures in `a` and `b` are the same everywhere by [`MAX_LOCAL_DIFFERENCE`].
/// Each is decoded upright at no less than twice the common size (JPEG's DCT scaling, which
/// is coarse, only that far) and brought to it by one antialiased resize, so that two
/// formats, decoded in their own ways, are compared by what they show.
pub fn same_picture(a: &[u8], b: &[u8], limits: &Limits) -> Result<bool, ProcessError> {
    Ok(local_difference_of(a, b, limits)? <= MAX_LOCAL_DIFFERENCE)
}

/// [`local_difference`] of two encoded pictures, decoded as [`same_picture`] decodes them.
pub fn local_difference_of(a: &[u8], b: &[u8], limits: &Limits) -> Result<f32, ProcessError> {
    let (a, b) = (open(a, limits)?, open(b, limits)?);
    let common = common_size(a.upright_size(), b.upright_size());
    let at_common = |source: &crate::decode::Source<'_>| -> Result<RgbImage, ProcessError> {
        let (w, h) = source.upright_size();
        let reduction =
            (f64::from(w) / f64::from(common.0)).min(f64::from(h) / f64::from(common.1));
        let denominator = if source.can_shrink_on_load() {
            crate::geometry::shrink_denominator(reduction)
        } else {
            1
        };
        let decoded = source.decode(limits, denominator)?;
        resized(&decoded, common)
    };
    let (a, b) = (at_common(&a)?, at_common(&b)?);
    Ok(difference_at_common_size(&a, &b))
}

/// The signed mean difference, in levels of 255, of the tile and channel where two pictures
/// differ most, once both are at a common size and `b` is fitted to `a` by a gain and an
/// offset per channel.
pub fn local_difference(a: &DynamicImage, b: &DynamicImage) -> f32 {
    let common = common_size((a.width(), a.height()), (b.width(), b.height()));
    match (resized(a, common), resized(b, common)) {
        (Ok(a), Ok(b)) => difference_at_common_size(&a, &b),
        _ => f32::INFINITY,
    }
}

/// `image` as RGB at `size`, by one antialiased resize.
fn resized(image: &DynamicImage, size: (u32, u32)) -> Result<RgbImage, ProcessError> {
    let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
    if (rgb.width(), rgb.height()) == size {
        return Ok(rgb.into_rgb8());
    }
    let mut dst = FirImage::new(size.0, size.1, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    Resizer::new()
        .resize(&rgb, &mut dst, &options)
        .map_err(|e| ProcessError::Internal(format!("resize failed: {e}")))?;
    RgbImage::from_raw(size.0, size.1, dst.into_vec())
        .ok_or_else(|| ProcessError::Internal("resize produced a short buffer".into()))
}

fn difference_at_common_size(a: &RgbImage, b: &RgbImage) -> f32 {
    let (w, h) = a.dimensions();
    let fits: Vec<(f32, f32)> = (0..3).map(|c| fit(a, b, c)).collect();
    let (tiles_x, tiles_y) = (w.div_ceil(TILE), h.div_ceil(TILE));
    // Signed sums per tile and channel: the noise a re-encode or a resampling leaves
    // alternates in sign and cancels over a tile; an overlay moves its tiles one way.
    let mut sums = vec![[0f32; 3]; (tiles_x * tiles_y) as usize];
    let mut counts = vec![0u32; sums.len()];
    for (x, y, pa) in a.enumerate_pixels() {
        let pb = b.get_pixel(x, y);
        let tile = ((y / TILE) * tiles_x + x / TILE) as usize;
        for (c, (gain, offset)) in fits.iter().enumerate() {
            sums[tile][c] += residual(pa[c], pb[c], *gain, *offset);
        }
        counts[tile] += 1;
    }
    sums.iter()
        .zip(&counts)
        .map(|(s, n)| s.iter().map(|v| v.abs()).fold(0.0, f32::max) / (*n).max(1) as f32)
        .fold(0.0, f32::max)
}

/// What of sample `a` the fitted `b` does not explain; none where a clipped sample leaves room
/// for the difference (a copy brightened to white says only that the original was bright,
/// at least as bright as the fit predicts: so is an original at white).
fn residual(a: u8, b: u8, gain: f32, offset: f32) -> f32 {
    let r = f32::from(a) - (gain * f32::from(b) + offset);
    let (high, low) = (|v: u8| v >= 250, |v: u8| v <= 5);
    if (r > 0.0 && (high(b) || low(a))) || (r < 0.0 && (low(b) || high(a))) {
        return 0.0;
    }
    r
}

/// The size both pictures are compared at: the smaller of the two in each direction, its
/// longer side at most [`COMMON_SIDE`], and at least one tile.
fn common_size(a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    let (w, h) = (a.0.min(b.0), a.1.min(b.1));
    let long = w.max(h).max(1);
    let scale = (f64::from(COMMON_SIDE) / f64::from(long)).min(1.0);
    let side = |v: u32| ((f64::from(v) * scale).round() as u32).max(TILE);
    (side(w), side(h))
}

/// Least-squares gain and offset mapping channel `c` of `b` onto `a`, over the samples
/// neither clips (a brightened copy saturates what was near white: those samples would bend
/// the fit), the gain held to 0.8–1.25 (a re-encode or a brightness nudge, never a different
/// picture).
fn fit(a: &RgbImage, b: &RgbImage, c: usize) -> (f32, f32) {
    let (mut n, mut sa, mut sb, mut sbb, mut sab) = (0f64, 0f64, 0f64, 0f64, 0f64);
    for (pa, pb) in a.pixels().zip(b.pixels()) {
        let clipped = |v: u8| !(6..=249).contains(&v);
        if clipped(pa[c]) || clipped(pb[c]) {
            continue;
        }
        let (x, y) = (f64::from(pb[c]), f64::from(pa[c]));
        n += 1.0;
        sa += y;
        sb += x;
        sbb += x * x;
        sab += x * y;
    }
    if n < 16.0 {
        return (1.0, 0.0);
    }
    let variance = sbb - sb * sb / n;
    let gain = if variance > 1e-6 {
        ((sab - sa * sb / n) / variance).clamp(0.8, 1.25)
    } else {
        1.0
    };
    let offset = (sa - gain * sb) / n;
    (gain as f32, offset as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn picture(w: u32, h: u32) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
            let v = ((x * 7 + y * 3) % 200 + 20) as u8;
            Rgb([v, v / 2 + 40, 255 - v])
        }))
    }

    #[test]
    fn a_brightness_change_and_a_resize_are_the_same_picture() {
        let a = picture(256, 192);
        let brighter = DynamicImage::ImageRgb8(RgbImage::from_fn(256, 192, |x, y| {
            let p = a.to_rgb8().get_pixel(x, y).0;
            Rgb(p.map(|c| (f32::from(c) * 1.05 + 2.0).min(255.0) as u8))
        }));
        assert!(local_difference(&a, &brighter) < 2.0);
        let half = a.resize_exact(128, 96, image::imageops::FilterType::Triangle);
        assert!(local_difference(&a, &half) < MAX_LOCAL_DIFFERENCE);
    }

    #[test]
    fn a_box_over_two_percent_of_the_area_is_not() {
        let a = picture(256, 192);
        let mut boxed = a.to_rgb8();
        // 36 × 28 pixels: 2 % of the area, in the centre.
        for y in 82..110 {
            for x in 110..146 {
                boxed.put_pixel(x, y, Rgb([255, 255, 255]));
            }
        }
        let boxed = DynamicImage::ImageRgb8(boxed);
        assert!(local_difference(&a, &boxed) > 3.0 * MAX_LOCAL_DIFFERENCE);
        // Tiny pictures (smaller than a tile) compare without panicking.
        assert!(local_difference(&picture(1, 1), &picture(3, 2)).is_finite());
    }
}

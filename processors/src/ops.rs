//! Pixel operations on upright 8-bit RGB/RGBA images: rotate, resize (SIMD, via
//! `fast_image_resize`), pad, blur, sharpen and alpha flattening.

use std::sync::Arc;

use fast_image_resize::images::Image as FirImage;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{DynamicImage, Rgb, RgbImage, Rgba, RgbaImage};

use crate::error::ProcessError;
use crate::geometry::{Padding, Plan};
use crate::spec::Rgb as Colour;

/// Clockwise rotation by a multiple of 90 degrees (into a new picture: the source may be
/// shared).
pub fn rotate(image: &DynamicImage, degrees: u16) -> DynamicImage {
    match degrees {
        90 => image.rotate90(),
        180 => image.rotate180(),
        270 => image.rotate270(),
        _ => image.clone(),
    }
}

/// Crops and resizes as the plan says (Lanczos3), then pads. The source may be shared with
/// other runs (a shared decode): it is read, and copied only when the plan keeps it whole.
pub fn apply_plan(
    image: Arc<DynamicImage>,
    plan: &Plan,
    background: Colour,
) -> Result<DynamicImage, ProcessError> {
    let resized = resize(image, plan)?;
    Ok(match plan.pad {
        Some(padding) => pad(resized, padding, background),
        None => resized,
    })
}

fn resize(image: Arc<DynamicImage>, plan: &Plan) -> Result<DynamicImage, ProcessError> {
    let (w, h) = plan.resize_to;
    if plan.crop.is_none() && (image.width(), image.height()) == (w, h) {
        return Ok(Arc::unwrap_or_clone(image));
    }
    let pixel_type = match *image {
        DynamicImage::ImageRgb8(_) => PixelType::U8x3,
        DynamicImage::ImageRgba8(_) => PixelType::U8x4,
        _ => {
            return Err(ProcessError::Internal(
                "resize expects 8-bit RGB or RGBA".into(),
            ))
        }
    };
    let mut dst = FirImage::new(w, h, pixel_type);
    let mut options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Lanczos3));
    if let Some(c) = plan.crop {
        options = options.crop(c.left, c.top, c.width, c.height);
    }
    Resizer::new()
        .resize(image.as_ref(), &mut dst, &options)
        .map_err(|e| ProcessError::Internal(format!("resize failed: {e}")))?;
    let buffer = dst.into_vec();
    let bad_buffer = || ProcessError::Internal("resize produced a short buffer".into());
    Ok(match pixel_type {
        PixelType::U8x3 => {
            DynamicImage::ImageRgb8(RgbImage::from_raw(w, h, buffer).ok_or_else(bad_buffer)?)
        }
        _ => DynamicImage::ImageRgba8(RgbaImage::from_raw(w, h, buffer).ok_or_else(bad_buffer)?),
    })
}

fn pad(image: DynamicImage, padding: Padding, background: Colour) -> DynamicImage {
    let (cw, ch) = padding.canvas;
    let (x, y) = (i64::from(padding.offset.0), i64::from(padding.offset.1));
    let [r, g, b] = background.0;
    match image {
        DynamicImage::ImageRgba8(img) => {
            let mut canvas = RgbaImage::from_pixel(cw, ch, Rgba([r, g, b, 255]));
            image::imageops::overlay(&mut canvas, &img, x, y);
            DynamicImage::ImageRgba8(canvas)
        }
        other => {
            let mut canvas = RgbImage::from_pixel(cw, ch, Rgb([r, g, b]));
            image::imageops::overlay(&mut canvas, &other.into_rgb8(), x, y);
            DynamicImage::ImageRgb8(canvas)
        }
    }
}

/// Shrinks `image` to `size` by averaging blocks of n × n pixels, n = its width over the
/// size's, rounded up (a whole number: a power of two for the mezzanine). Blocks at the right
/// and bottom edges that the picture does not fill average what they hold. Alpha is dropped
/// (the mezzanine is of opaque pictures). A box over whole blocks is exact and fast: each
/// source pixel counts once, no kernel is evaluated.
pub fn reduce_box(image: &DynamicImage, size: (u32, u32)) -> RgbImage {
    let rgb;
    let source = match image {
        DynamicImage::ImageRgb8(img) => img,
        other => {
            rgb = other.to_rgb8();
            &rgb
        }
    };
    let (sw, sh) = source.dimensions();
    let (w, h) = (size.0.max(1), size.1.max(1));
    let n = sw.div_ceil(w).max(sh.div_ceil(h)).max(1);
    if n == 1 {
        return source.clone();
    }
    let raw = source.as_raw();
    let stride = sw as usize * 3;
    if n == 2 && sw % 2 == 0 && sh % 2 == 0 {
        return halve(raw, stride, w, h);
    }
    let (n, sw) = (n as usize, sw as usize);
    let mut out = vec![0u8; w as usize * h as usize * 3];
    // Each band of n rows is first summed down its columns, whole rows at a time (a loop
    // the compiler vectorises), then across each block of n columns: the same exact sums
    // as pixel by pixel, in a fraction of the time. Up to 257 rows a column sum fits 16 bits,
    // twice the lanes of 32 (the facts' small decode, every cold request, reduces so).
    let mut band = vec![0u32; stride];
    let mut band16 = vec![0u16; if n <= 257 { stride } else { 0 }];
    for (oy, line) in out.chunks_exact_mut(w as usize * 3).enumerate() {
        let rows = (oy * n).min(sh as usize)..((oy + 1) * n).min(sh as usize);
        let height = rows.len();
        let band_rows = raw[rows.start * stride..rows.end * stride].chunks_exact(stride);
        if band16.is_empty() {
            band.iter_mut().for_each(|s| *s = 0);
            for row in band_rows {
                for (sum, &value) in band.iter_mut().zip(row) {
                    *sum += u32::from(value);
                }
            }
        } else {
            band16.iter_mut().for_each(|s| *s = 0);
            for row in band_rows {
                for (sum, &value) in band16.iter_mut().zip(row) {
                    *sum += u16::from(value);
                }
            }
            for (wide, &sum) in band.iter_mut().zip(&band16) {
                *wide = u32::from(sum);
            }
        }
        for (ox, pixel) in line.chunks_exact_mut(3).enumerate() {
            let columns = (ox * n).min(sw)..((ox + 1) * n).min(sw);
            let count = (height * columns.len()).max(1) as u32;
            let mut sums = [0u32; 3];
            for px in band[columns.start * 3..columns.end * 3].chunks_exact(3) {
                sums[0] += px[0];
                sums[1] += px[1];
                sums[2] += px[2];
            }
            for (value, sum) in pixel.iter_mut().zip(sums) {
                *value = ((sum + count / 2) / count) as u8;
            }
        }
    }
    RgbImage::from_raw(w, h, out).unwrap_or_else(|| RgbImage::new(w, h))
}

/// [`reduce_box`] by 2 of an RGB picture with even sides: each output pixel the rounded mean
/// of a 2 × 2 block, two rows at a time (the common case, kept simple enough to vectorise).
fn halve(raw: &[u8], stride: usize, w: u32, h: u32) -> RgbImage {
    let out_stride = w as usize * 3;
    let mut out = vec![0u8; out_stride * h as usize];
    for (pair, line) in raw
        .chunks_exact(stride * 2)
        .zip(out.chunks_exact_mut(out_stride))
    {
        let (top, bottom) = pair.split_at(stride);
        for ((t, b), o) in top
            .chunks_exact(6)
            .zip(bottom.chunks_exact(6))
            .zip(line.chunks_exact_mut(3))
        {
            for c in 0..3 {
                let sum =
                    u16::from(t[c]) + u16::from(t[c + 3]) + u16::from(b[c]) + u16::from(b[c + 3]);
                o[c] = ((sum + 2) / 4) as u8;
            }
        }
    }
    RgbImage::from_raw(w, h, out).unwrap_or_else(|| RgbImage::new(w, h))
}

/// Gaussian blur with the given sigma.
pub fn blur(image: DynamicImage, sigma: f64) -> DynamicImage {
    image.blur(sigma as f32)
}

/// Unsharp mask with the given sigma.
pub fn sharpen(image: DynamicImage, sigma: f64) -> DynamicImage {
    image.unsharpen(sigma as f32, 0)
}

/// Composites RGBA over an opaque background, for formats without alpha.
pub fn flatten(image: DynamicImage, background: Colour) -> RgbImage {
    match image {
        DynamicImage::ImageRgba8(img) => {
            let [br, bg, bb] = background.0.map(u32::from);
            let (w, h) = img.dimensions();
            let mut out = RgbImage::new(w, h);
            for (dst, src) in out.pixels_mut().zip(img.pixels()) {
                let [r, g, b, a] = src.0.map(u32::from);
                let mix = |c: u32, bgc: u32| ((c * a + bgc * (255 - a) + 127) / 255) as u8;
                *dst = Rgb([mix(r, br), mix(g, bg), mix(b, bb)]);
            }
            out
        }
        other => other.into_rgb8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each output pixel the rounded mean of the source pixels in its block, computed one
    /// pixel at a time (0 for a block the picture does not reach).
    fn block_means(source: &RgbImage, size: (u32, u32)) -> RgbImage {
        let (sw, sh) = source.dimensions();
        let n = sw.div_ceil(size.0).max(sh.div_ceil(size.1)).max(1);
        RgbImage::from_fn(size.0, size.1, |ox, oy| {
            let (mut sums, mut count) = ([0u32; 3], 0u32);
            for y in (oy * n)..((oy + 1) * n).min(sh) {
                for x in (ox * n)..((ox + 1) * n).min(sw) {
                    let px = source.get_pixel(x, y);
                    for c in 0..3 {
                        sums[c] += u32::from(px[c]);
                    }
                    count += 1;
                }
            }
            let c = count.max(1);
            image::Rgb(sums.map(|s| ((s + c / 2) / c) as u8))
        })
    }

    #[test]
    fn box_reduction_is_the_mean_of_each_block() {
        // A pattern with every value and uneven neighbours, so a misplaced block shows.
        let source = RgbImage::from_fn(203, 131, |x, y| {
            image::Rgb([
                (x * 7 + y * 3) as u8,
                (x * y) as u8,
                (255 - (x + y * 11) % 256) as u8,
            ])
        });
        let picture = DynamicImage::ImageRgb8(source.clone());
        for size in [
            (102, 66), // by 2, odd sides
            (68, 44),  // by 3
            (51, 33),  // by 4, partial edge blocks
            (26, 17),  // by 8
            (203, 131),
            (60, 10), // by 14 down: the width's blocks run past the picture
        ] {
            let reduced = reduce_box(&picture, size);
            assert_eq!(reduced.dimensions(), size);
            assert!(reduced == block_means(&source, size), "{size:?}");
        }
        // Blocks of more than 257 rows: column sums past 16 bits.
        let tall = RgbImage::from_fn(4, 600, |x, y| image::Rgb([255, (x * y) as u8, y as u8]));
        let reduced = reduce_box(&DynamicImage::ImageRgb8(tall.clone()), (1, 2));
        assert!(reduced == block_means(&tall, (1, 2)));
        let even = RgbImage::from_fn(64, 48, |x, y| image::Rgb([x as u8 * 4, y as u8 * 5, 9]));
        let halved = reduce_box(&DynamicImage::ImageRgb8(even.clone()), (32, 24));
        assert!(halved == block_means(&even, (32, 24)));
    }
}

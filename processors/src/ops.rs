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
    let mut out = vec![0u8; w as usize * h as usize * 3];
    let mut sums = vec![0u32; w as usize * 3];
    let mut counts = vec![0u32; w as usize];
    for oy in 0..h {
        sums.iter_mut().for_each(|s| *s = 0);
        counts.iter_mut().for_each(|c| *c = 0);
        let rows = (oy * n)..((oy + 1) * n).min(sh);
        for y in rows {
            let row = &raw[y as usize * stride..(y as usize + 1) * stride];
            for (ox, block) in row.chunks(n as usize * 3).take(w as usize).enumerate() {
                let (mut r, mut g, mut b) = (0u32, 0u32, 0u32);
                for px in block.chunks_exact(3) {
                    r += u32::from(px[0]);
                    g += u32::from(px[1]);
                    b += u32::from(px[2]);
                }
                sums[ox * 3] += r;
                sums[ox * 3 + 1] += g;
                sums[ox * 3 + 2] += b;
                counts[ox] += (block.len() / 3) as u32;
            }
        }
        let line = &mut out[oy as usize * w as usize * 3..(oy as usize + 1) * w as usize * 3];
        for (ox, count) in counts.iter().enumerate() {
            let c = (*count).max(1);
            for channel in 0..3 {
                line[ox * 3 + channel] = ((sums[ox * 3 + channel] + c / 2) / c) as u8;
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

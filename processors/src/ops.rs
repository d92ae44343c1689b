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

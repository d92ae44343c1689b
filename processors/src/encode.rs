//! Pixels to bytes in the asked format. Nothing from the source's metadata is written.

use image::codecs::gif::GifEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{DynamicImage, ImageEncoder};

use crate::error::ProcessError;
use crate::ops::flatten;
use crate::spec::{OutputFormat, ResolvedSpec};

/// libaom speed for AVIF (0 slowest … 10 fastest): a service answers while the client waits.
const AVIF_SPEED: u8 = 8;

/// Largest side libwebp accepts.
const WEBP_MAX_SIDE: u32 = 16383;

/// Encodes `image` as `spec` says: its format, quality, `lossless`/`progressive`, and `bg` for
/// formats without alpha.
pub fn encode(image: DynamicImage, spec: &ResolvedSpec) -> Result<Vec<u8>, ProcessError> {
    let format = spec.format;
    let background = spec.shape.background;
    let q = spec.quality.or(format.default_quality()).unwrap_or(80);
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        ProcessError::Internal(format!("{what} encoding failed: {e}"))
    };
    let mut out = Vec::new();
    match format {
        OutputFormat::Jpeg => {
            let rgb = flatten(image, background);
            let (w, h) = rgb.dimensions();
            if w > crate::jpeg::MAX_SIDE || h > crate::jpeg::MAX_SIDE {
                return Err(ProcessError::too_many_pixels(
                    w,
                    h,
                    u64::from(crate::jpeg::MAX_SIDE),
                ));
            }
            out = crate::jpeg::encode(&rgb, q, spec.progressive)?;
        }
        OutputFormat::Png => {
            let encoder =
                PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive);
            let color = image.color().into();
            encoder
                .write_image(image.as_bytes(), image.width(), image.height(), color)
                .map_err(|e| internal("PNG", &e))?;
        }
        OutputFormat::Webp => {
            let (w, h) = (image.width(), image.height());
            if w > WEBP_MAX_SIDE || h > WEBP_MAX_SIDE {
                return Err(ProcessError::TooManyPixels {
                    width: u64::from(w),
                    height: u64::from(h),
                    pixels: u64::from(w) * u64::from(h),
                    limit: u64::from(WEBP_MAX_SIDE) * u64::from(WEBP_MAX_SIDE),
                });
            }
            let encoder = match &image {
                DynamicImage::ImageRgba8(img) => webp::Encoder::from_rgba(img.as_raw(), w, h),
                DynamicImage::ImageRgb8(img) => webp::Encoder::from_rgb(img.as_raw(), w, h),
                _ => return Err(ProcessError::Internal("WebP expects RGB or RGBA".into())),
            };
            let mut config = webp::WebPConfig::new()
                .map_err(|()| ProcessError::Internal("libwebp config failed".into()))?;
            if spec.lossless {
                // Lossless: `quality` is effort here; 75 with method 4 is libwebp's own middle.
                config.lossless = 1;
                config.quality = 75.0;
            } else {
                config.quality = f32::from(q);
            }
            config.method = 4;
            let memory = encoder
                .encode_advanced(&config)
                .map_err(|e| internal("WebP", &format!("{e:?}")))?;
            out.extend_from_slice(&memory);
        }
        OutputFormat::Gif => {
            let rgba = image.into_rgba8();
            let mut encoder = GifEncoder::new(&mut out);
            encoder
                .encode(
                    rgba.as_raw(),
                    rgba.width(),
                    rgba.height(),
                    image::ExtendedColorType::Rgba8,
                )
                .map_err(|e| internal("GIF", &e))?;
        }
        OutputFormat::Avif => {
            // RGBA input gives the AVIF an alpha plane; RGB input none.
            let (w, h) = (image.width(), image.height());
            let pixels = libavif::RgbPixels::new(w, h, image.as_bytes())
                .map_err(|e| internal("AVIF", &format!("{e:?}")))?;
            let yuv = pixels.to_image(libavif::YuvFormat::Yuv420);
            let mut encoder = libavif::Encoder::new();
            encoder
                .set_quality(q)
                .set_alpha_quality(q.saturating_add(20).min(100))
                .set_speed(AVIF_SPEED)
                .set_max_threads(1);
            let data = encoder
                .encode(&yuv)
                .map_err(|e| internal("AVIF", &format!("{e:?}")))?;
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

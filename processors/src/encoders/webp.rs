//! WebP out, through libwebp (`crate::webp_encode`: RGB imported without an ARGB pass;
//! `crate::webp_anim`: its animation encoder fed a frame at a time): lossy or lossless, alpha,
//! animated; at most 16383 pixels a side.

use image::DynamicImage;

use super::{
    animation_failed, encoding_failed, Encoder, Facts, FrameSink, OutputFormat, Passes, PerPixel,
    Search, Settings,
};
use crate::error::ProcessError;

pub(super) struct Webp;

/// Largest side libwebp accepts.
const MAX_SIDE: u32 = 16383;

/// The libwebp settings asked for: lossless, or `quality`.
fn config(settings: Settings) -> Result<webp::WebPConfig, ProcessError> {
    let mut config = webp::WebPConfig::new()
        .map_err(|()| ProcessError::Internal("libwebp config failed".into()))?;
    if settings.lossless {
        // Lossless: `quality` is effort here; 75 with method 4 is libwebp's own middle.
        config.lossless = 1;
        config.quality = 75.0;
    } else {
        config.quality = f32::from(settings.quality);
    }
    config.method = 4;
    Ok(config)
}

/// WebP: lossy about 4 passes, lossless about 40; animated up to 16383 a side.
const FACTS: Facts = Facts {
    default_quality: Some(80),
    lossless_mode: true,
    animates: true,
    animation_max_side: Some(MAX_SIDE),
    bytes_per_pixel: PerPixel::both(12).lossless(24),
    passes: Passes::still(4).lossless(40),
    search: Some(Search::within(30, 95).at_70(76.0, 1.0, 2.2)),
    accept_bit: 2,
    ..Facts::of(OutputFormat::Webp, "webp", "image/webp")
};

impl Encoder for Webp {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn encode(&self, image: &DynamicImage, settings: Settings) -> Result<Vec<u8>, ProcessError> {
        let (w, h) = (image.width(), image.height());
        if w > MAX_SIDE || h > MAX_SIDE {
            return Err(ProcessError::TooManyPixels {
                width: u64::from(w),
                height: u64::from(h),
                pixels: u64::from(w) * u64::from(h),
                limit: u64::from(MAX_SIDE) * u64::from(MAX_SIDE),
            });
        }
        let (pixels, alpha) = match image {
            DynamicImage::ImageRgba8(img) => (img.as_raw(), true),
            DynamicImage::ImageRgb8(img) => (img.as_raw(), false),
            _ => return Err(ProcessError::Internal("WebP expects RGB or RGBA".into())),
        };
        let config = config(settings)?;
        crate::webp_encode::encode(pixels, w, h, alpha, &config)
            .map_err(|e| encoding_failed("WebP", &e))
    }

    fn animation(
        &self,
        (width, height): (u32, u32),
        settings: Settings,
        plays: u32,
        _alpha: bool,
    ) -> Result<Option<Box<dyn FrameSink>>, ProcessError> {
        let config = config(settings)?;
        // WebP counts plays in 16 bits; more is as good as for ever.
        let loops = if plays > 0xFFFF { 0 } else { plays as i32 };
        let writer = crate::webp_anim::AnimWriter::new(width, height, &config, loops)
            .map_err(|e| animation_failed(OutputFormat::Webp, &e))?;
        Ok(Some(Box::new(Animation(writer))))
    }
}

struct Animation(crate::webp_anim::AnimWriter);

impl FrameSink for Animation {
    fn add(&mut self, pixels: image::RgbaImage, delay_ms: u32) -> Result<(), ProcessError> {
        self.0.add(pixels.as_raw(), delay_ms).map_err(|e| {
            match e.contains("longer than WebP holds") {
                true => ProcessError::UnsupportedFormat(e),
                false => animation_failed(OutputFormat::Webp, &e),
            }
        })
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ProcessError> {
        self.0
            .finish()
            .map_err(|e| animation_failed(OutputFormat::Webp, &e))
    }
}

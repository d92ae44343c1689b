//! AVIF out, through libavif with libaom: a still in full chroma, an animation as an AV1
//! sequence (`crate::avif_anim`: libavif's encoder with its loop count, fed a frame at a
//! time); alpha where the pixels have it.

use image::DynamicImage;

use super::{
    animation_failed, encoding_failed, Encoder, Facts, FrameSink, OutputFormat, Passes, PerPixel,
    Search, Settings,
};
use crate::error::ProcessError;

pub(super) struct Avif;

/// libaom speed (0 slowest … 10 fastest): a service answers while the client waits.
/// Measured on `bench/peers.py`'s photos fed the reference resize (q65, 512 px): speed 8
/// 29 ms an image, speed 7 39 ms for 11 % fewer bytes on the large set at 0.08 dB more
/// (equal on the small photos), speed 6 73 ms for another 0.4 dB at 2 % more bytes. Speed
/// 7 keeps AVIF ahead of every peer's req/s; 6 would fall behind thumbor's. The image stays
/// 8-bit with libavif's SSIM tuning: 10-bit scores 0.2 dB more at 1 % more bytes but takes a
/// third longer, and PSNR tuning trades SSIM for PSNR (docs/performance.md, "Against the
/// peers", has every setting measured).
const SPEED: u8 = 7;

/// AVIF: at speed 7 about 8 passes. An AV1 sequence's frames are coded from the ones before
/// them. In one process, at every quality (`examples/anim_compare.rs`), 10 frames of the
/// sharp fixture's cartoon GIF took 3.5–4.5 times animated WebP's time (4 passes), and
/// 24-frame photographic pans 0.7–1.1 times: charged as the cartoon, 16. (40, from whole runs
/// of `imgcas process` at the default qualities, refused long animations that WebP serves
/// within `limits.max_cost`, once `format=auto` chose AVIF for them.) Its encoder is the
/// dearest: its search makes one attempt fewer.
const FACTS: Facts = Facts {
    default_quality: Some(60),
    animates: true,
    bytes_per_pixel: PerPixel::both(24),
    passes: Passes::still(8).animated(16),
    search: Some(Search::within(20, 90).at_70(56.0, 1.4, 1.0).steps(4, 0.75)),
    accept_bit: 1,
    ..Facts::of(OutputFormat::Avif, "avif", "image/avif")
};

impl Encoder for Avif {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn encode(&self, image: &DynamicImage, settings: Settings) -> Result<Vec<u8>, ProcessError> {
        let q = settings.quality;
        // RGBA input gives the AVIF an alpha plane; RGB input none.
        let (w, h) = (image.width(), image.height());
        let pixels = libavif::RgbPixels::new(w, h, image.as_bytes())
            .map_err(|e| encoding_failed("AVIF", &format!("{e:?}")))?;
        // Full chroma, as sharp and avifenc write by default: at libaom's speed 8 it
        // encodes no slower than 4:2:0 and scores 0.8 dB more at equal bytes on the
        // photos of `bench/peers.py` (README, "Against the peers").
        let yuv = pixels.to_image(libavif::YuvFormat::Yuv444);
        let mut encoder = libavif::Encoder::new();
        encoder
            .set_quality(q)
            .set_alpha_quality(q.saturating_add(20).min(100))
            .set_speed(SPEED)
            .set_max_threads(1);
        let data = encoder
            .encode(&yuv)
            .map_err(|e| encoding_failed("AVIF", &format!("{e:?}")))?;
        Ok(data.to_vec())
    }

    fn animation(
        &self,
        (width, height): (u32, u32),
        settings: Settings,
        plays: u32,
        alpha: bool,
    ) -> Result<Option<Box<dyn FrameSink>>, ProcessError> {
        let writer = crate::avif_anim::AvifAnimWriter::new(
            width,
            height,
            settings.quality,
            SPEED,
            alpha,
            plays,
        )
        .map_err(|e| animation_failed(OutputFormat::Avif, &e))?;
        Ok(Some(Box::new(Animation(writer))))
    }
}

struct Animation(crate::avif_anim::AvifAnimWriter);

impl FrameSink for Animation {
    fn add(&mut self, pixels: image::RgbaImage, delay_ms: u32) -> Result<(), ProcessError> {
        self.0
            .add(pixels.as_raw(), delay_ms)
            .map_err(|e| animation_failed(OutputFormat::Avif, &e))
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, ProcessError> {
        self.0
            .finish()
            .map_err(|e| animation_failed(OutputFormat::Avif, &e))
    }
}

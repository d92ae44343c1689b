//! Still JPEG XL encoding, through `jixel` (pure Rust, BSD-3-Clause OR Apache-2.0), a port of
//! libjxl-tiny's encoder. Chosen over libjxl itself (Debian 12's 0.7, through bindings of our
//! own; `jpegxl-rs`/`jpegxl-sys` are GPL-3.0 and out) by bytes at equal SSIMULACRA2, checked
//! by butteraugli, and encode time on the shared photos (docs/performance.md, "JPEG XL"),
//! and because it brings no C library to build, install or fuzz around.
//!
//! Lossy output is VarDCT at the distance libjxl's `cjxl` gives a quality; lossless output is
//! modular. The picture is declared sRGB (the pipeline's pixels are), with no metadata.

use std::panic::{catch_unwind, AssertUnwindSafe};

use image::DynamicImage;

use super::{Encoder, Facts, OutputFormat, Passes, PerPixel, Search, Settings};
use crate::error::ProcessError;

pub(super) struct Jxl;

/// JPEG XL's quality when a request names none: the one whose outputs score as WebP's and
/// AVIF's defaults do on the shared photos (SSIMULACRA2 75.5, median at 512 px, by
/// `processors/examples/format_compare.rs`; q75 scored 59).
pub const JXL_DEFAULT_QUALITY: u8 = 86;

/// jixel's effort: `Fastest` (16×16 merges on quiet blocks, the cheapest entropy coding). On
/// the 40 shared photos at 512 px and SSIMULACRA2 70 it took 30 ms an encode, half of AVIF's
/// at speed 7, for 0.78 of WebP's bytes; its default `Fast` took AVIF's time for 3 % fewer
/// bytes and a worse butteraugli score, `Medium` twice AVIF's time for more bytes
/// (`examples/format_compare.rs`, docs/performance.md).
const SPEED: jixel::Speed = jixel::Speed::Fastest;

/// Encodes packed RGB (`alpha` false) or RGBA pixels, `width` × `height`: lossless, or lossy
/// at quality `q` (1–100, read as cjxl reads it).
fn encode_pixels(
    pixels: &[u8],
    width: u32,
    height: u32,
    alpha: bool,
    q: u8,
    lossless: bool,
) -> Result<Vec<u8>, ProcessError> {
    let failed = |what: &dyn std::fmt::Display| {
        ProcessError::Internal(format!("JPEG XL encoding failed: {what}"))
    };
    let config = jixel::EncodeConfig::default()
        .with_speed(SPEED)
        // One thread: the run already holds one of the service's bounded processing slots.
        .with_num_threads(1)
        .with_lossless(lossless)
        .with_distance(jixel::distance_from_quality(f32::from(q.clamp(1, 100))));
    let (w, h) = (width as usize, height as usize);
    // The encoder is young: a panic in it is this run's internal error, not the worker's end.
    let result = catch_unwind(AssertUnwindSafe(|| match alpha {
        true => jixel::encode_image_with_alpha(pixels, w, h, &config),
        false => jixel::encode_image(pixels, w, h, &config),
    }));
    match result {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(failed(&format!("{e:?}"))),
        Err(_) => Err(failed(&"the encoder panicked")),
    }
}

/// JPEG XL: lossless at `lossless=1` or `q=100`; stills only (an animation asked as JPEG XL
/// is its first frame). jixel at its `Fastest` effort: half of AVIF's time lossy (5 passes),
/// and lossless a quarter of lossless WebP's (12), at 512 px (`examples/format_compare.rs`).
const FACTS: Facts = Facts {
    default_quality: Some(JXL_DEFAULT_QUALITY),
    lossless_mode: true,
    lossless_at_full_quality: true,
    bytes_per_pixel: PerPixel::both(24).lossless(32),
    passes: Passes::still(5).lossless(12),
    search: Some(Search::within(30, 95).at_70(82.0, 0.7, 0.9)),
    accept_bit: 4,
    ..Facts::of(OutputFormat::Jxl, "jxl", "image/jxl")
};

impl Encoder for Jxl {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    /// A still: its encoder writes no animation, so an animation asked as JPEG XL is its
    /// first frame.
    fn encode(&self, image: &DynamicImage, settings: Settings) -> Result<Vec<u8>, ProcessError> {
        let (w, h) = (image.width(), image.height());
        let rgba;
        let rgb;
        let (pixels, alpha) = match image {
            DynamicImage::ImageRgba8(img) => (img.as_raw(), true),
            DynamicImage::ImageRgb8(img) => (img.as_raw(), false),
            other if other.color().has_alpha() => {
                rgba = other.to_rgba8();
                (rgba.as_raw(), true)
            }
            other => {
                rgb = other.to_rgb8();
                (rgb.as_raw(), false)
            }
        };
        encode_pixels(pixels, w, h, alpha, settings.quality, settings.lossless)
    }
}

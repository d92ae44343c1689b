//! Pixels to bytes in the asked format. Nothing from the source's metadata is written.

use image::codecs::gif::{GifEncoder, Repeat};
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{DynamicImage, ImageEncoder};

use crate::auto_quality::Chosen;
use crate::error::ProcessError;
use crate::ops::flatten;
use crate::spec::{OutputFormat, Quality, ResolvedSpec};

/// libaom speed for AVIF (0 slowest … 10 fastest): a service answers while the client waits.
/// Measured on `bench/peers.py`'s photos fed the reference resize (q65, 512 px): speed 8
/// 29 ms an image, speed 7 39 ms for 11 % fewer bytes on the large set at 0.08 dB more
/// (equal on the small photos), speed 6 73 ms for another 0.4 dB at 2 % more bytes. Speed
/// 7 keeps AVIF ahead of every peer's req/s; 6 would fall behind thumbor's. The image stays
/// 8-bit with libavif's SSIM tuning: 10-bit scores 0.2 dB more at 1 % more bytes but takes a
/// third longer, and PSNR tuning trades SSIM for PSNR (docs/performance.md, "Against the
/// peers", has every setting measured).
const AVIF_SPEED: u8 = 7;

/// Largest side libwebp accepts.
const WEBP_MAX_SIDE: u32 = 16383;

/// GIF encoder speed for animations (1 best … 30 fastest palettes): an animation quantizes
/// every frame, so the still's best-quality setting would cost its frames over.
const GIF_ANIMATION_SPEED: i32 = 10;

/// One output frame: its pixels and how long it shows, in milliseconds.
pub struct OutputFrame {
    pub pixels: image::RgbaImage,
    pub delay_ms: u32,
}

/// The libwebp settings `spec` asks for: lossless, or its quality.
fn webp_config(spec: &ResolvedSpec, quality: u8) -> Result<webp::WebPConfig, ProcessError> {
    let mut config = webp::WebPConfig::new()
        .map_err(|()| ProcessError::Internal("libwebp config failed".into()))?;
    if spec.lossless {
        // Lossless: `quality` is effort here; 75 with method 4 is libwebp's own middle.
        config.lossless = 1;
        config.quality = 75.0;
    } else {
        config.quality = f32::from(quality);
    }
    config.method = 4;
    Ok(config)
}

/// The output size limits of animated formats (WebP 16383 a side, GIF 65535), checked
/// before any frame is decoded.
pub fn check_animation_size(format: OutputFormat, (w, h): (u32, u32)) -> Result<(), ProcessError> {
    let side = match format {
        OutputFormat::Webp => WEBP_MAX_SIDE,
        OutputFormat::Gif => u32::from(u16::MAX),
        _ => return Ok(()),
    };
    if w > side || h > side {
        return Err(ProcessError::too_many_pixels(
            w,
            h,
            u64::from(side) * u64::from(side),
        ));
    }
    Ok(())
}

/// An animated output written frame by frame (issue 28: a run held every decoded frame, then
/// the WebP encoder's copy of each, until the end): an animated WebP (libwebp's animation
/// encoder, [`crate::webp_anim`]), AVIF (an AV1 sequence through libavif,
/// [`crate::avif_anim`]) or GIF, playing `plays` times (0: for ever), with an alpha plane
/// where the source has alpha (AVIF decides its planes once); other formats keep the first
/// frame as a still. A frame is encoded, or copied by the encoder, as it is
/// added, so a run holds a few frames whatever their number.
pub(crate) struct AnimationWriter {
    spec: ResolvedSpec,
    size: (u32, u32),
    kind: Writing,
}

enum Writing {
    Webp(crate::webp_anim::AnimWriter),
    Avif(crate::avif_anim::AvifAnimWriter),
    Gif {
        encoder: GifEncoder<SharedBuffer>,
        out: SharedBuffer,
    },
    Still(Option<image::RgbaImage>),
}

/// A byte buffer the GIF encoder writes into and the writer reads back once it is done.
#[derive(Clone, Default)]
struct SharedBuffer(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl std::io::Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn animation_failed(format: OutputFormat, e: &dyn std::fmt::Display) -> ProcessError {
    ProcessError::Internal(format!("{} animation encoding failed: {e}", format.name()))
}

impl AnimationWriter {
    /// A writer of frames of `size`.
    pub(crate) fn new(
        spec: &ResolvedSpec,
        size: (u32, u32),
        plays: u32,
        alpha: bool,
    ) -> Result<AnimationWriter, ProcessError> {
        check_animation_size(spec.format, size)?;
        let failed = |e: &dyn std::fmt::Display| animation_failed(spec.format, e);
        let kind = match spec.format {
            OutputFormat::Webp => {
                // An animation's frames are not searched: `q=auto` takes its starting quality.
                let config = webp_config(spec, encoder_quality(spec))?;
                // WebP counts plays in 16 bits; more is as good as for ever.
                let loops = if plays > 0xFFFF { 0 } else { plays as i32 };
                let writer = crate::webp_anim::AnimWriter::new(size.0, size.1, &config, loops)
                    .map_err(|e| failed(&e))?;
                Writing::Webp(writer)
            }
            OutputFormat::Avif => Writing::Avif(
                crate::avif_anim::AvifAnimWriter::new(
                    size.0,
                    size.1,
                    encoder_quality(spec),
                    AVIF_SPEED,
                    alpha,
                    plays,
                )
                .map_err(|e| failed(&e))?,
            ),
            OutputFormat::Gif => {
                let out = SharedBuffer::default();
                let mut encoder = GifEncoder::new_with_speed(out.clone(), GIF_ANIMATION_SPEED);
                // GIF counts repeats after the first play; without the extension it plays once.
                let repeat = match plays {
                    0 => Some(Repeat::Infinite),
                    1 => None,
                    n => Some(Repeat::Finite(u16::try_from(n - 1).unwrap_or(u16::MAX))),
                };
                if let Some(repeat) = repeat {
                    encoder.set_repeat(repeat).map_err(|e| failed(&e))?;
                }
                Writing::Gif { encoder, out }
            }
            _ => Writing::Still(None),
        };
        Ok(AnimationWriter {
            spec: spec.clone(),
            size,
            kind,
        })
    }

    /// Adds the next frame (of the writer's size).
    pub(crate) fn add(&mut self, frame: OutputFrame) -> Result<(), ProcessError> {
        let failed = |e: &dyn std::fmt::Display| animation_failed(self.spec.format, e);
        // libwebp reads each frame as the first one's size: a frame of another would be read
        // out of bounds.
        if frame.pixels.dimensions() != self.size {
            return Err(failed(&"frames of different sizes"));
        }
        match &mut self.kind {
            Writing::Webp(writer) => {
                writer
                    .add(frame.pixels.as_raw(), frame.delay_ms)
                    .map_err(|e| match e.contains("longer than WebP holds") {
                        true => ProcessError::UnsupportedFormat(e),
                        false => failed(&e),
                    })
            }
            Writing::Avif(writer) => writer
                .add(frame.pixels.as_raw(), frame.delay_ms)
                .map_err(|e| failed(&e)),
            Writing::Gif { encoder, .. } => {
                let delay = image::Delay::from_numer_denom_ms(frame.delay_ms, 1);
                encoder
                    .encode_frame(image::Frame::from_parts(frame.pixels, 0, 0, delay))
                    .map_err(|e| failed(&e))
            }
            Writing::Still(first) => {
                first.get_or_insert(frame.pixels);
                Ok(())
            }
        }
    }

    /// The size of every frame.
    pub(crate) fn size(&self) -> (u32, u32) {
        self.size
    }

    /// The encoded animation (an animation's frames are not searched: under `q=auto` it
    /// is encoded at the search's starting quality, reported without a score).
    pub(crate) fn finish(self) -> Result<Encoded, ProcessError> {
        let format = self.spec.format;
        let unscored = |bytes| Encoded {
            bytes,
            chosen: matches!(self.spec.quality, Some(Quality::Auto { .. })).then(|| Chosen {
                quality: encoder_quality(&self.spec),
                score_tenths: None,
            }),
            search_encodes: 0,
        };
        match self.kind {
            Writing::Webp(writer) => writer
                .finish()
                .map(unscored)
                .map_err(|e| animation_failed(format, &e)),
            Writing::Avif(writer) => writer
                .finish()
                .map(unscored)
                .map_err(|e| animation_failed(format, &e)),
            Writing::Gif { encoder, out } => {
                // Dropping the encoder writes the trailer.
                drop(encoder);
                let bytes = out.0.borrow().clone();
                Ok(unscored(bytes))
            }
            Writing::Still(first) => {
                let first = first
                    .ok_or_else(|| ProcessError::Internal("an animation needs a frame".into()))?;
                encode(DynamicImage::ImageRgba8(first), &self.spec)
            }
        }
    }
}

/// The fixed quality the encoder takes for `spec`: the spec's own, or the format's default;
/// for `q=auto`, the quality its search starts from (what an animation, whose frames are not
/// searched, and an output too large to search are encoded at).
pub fn encoder_quality(spec: &ResolvedSpec) -> u8 {
    match spec.quality {
        Some(Quality::Fixed(q)) => q,
        Some(Quality::Auto { target, .. }) => {
            crate::auto_quality::starting_quality(spec.format, target)
        }
        None => spec.format.default_quality().unwrap_or(80),
    }
}

/// An encoded output, and for `q=auto` the quality chosen and its score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub chosen: Option<Chosen>,
    /// Encodes a `q=auto` search made (0 without one).
    pub search_encodes: u32,
}

/// Encodes `image` as `spec` says: its format, quality (searched, for `q=auto`),
/// `lossless`/`progressive`, and `bg` for formats without alpha.
pub fn encode(image: DynamicImage, spec: &ResolvedSpec) -> Result<Encoded, ProcessError> {
    // The pixels handed to the encoder, once: what a search scores every attempt against.
    let image = match spec.format {
        OutputFormat::Jpeg => DynamicImage::ImageRgb8(flatten(image, spec.shape.background)),
        _ => image,
    };
    let pixels = u64::from(image.width()) * u64::from(image.height());
    let chosen = match spec.quality {
        Some(Quality::Auto { target, .. }) if crate::auto_quality::searches(pixels) => {
            let searched = crate::auto_quality::search(&image, spec.format, target, |q| {
                encode_at(&image, spec, q)
            })?;
            return Ok(Encoded {
                bytes: searched.bytes,
                chosen: Some(searched.chosen),
                search_encodes: searched.encodes,
            });
        }
        // Too large to search: the level's starting quality, reported without a score.
        Some(Quality::Auto { .. }) => Some(Chosen {
            quality: encoder_quality(spec),
            score_tenths: None,
        }),
        _ => None,
    };
    Ok(Encoded {
        bytes: encode_at(&image, spec, encoder_quality(spec))?,
        chosen,
        search_encodes: 0,
    })
}

/// Encodes `image` at encoder quality `q` (JPEG's pixels already flattened).
fn encode_at(image: &DynamicImage, spec: &ResolvedSpec, q: u8) -> Result<Vec<u8>, ProcessError> {
    let format = spec.format;
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        ProcessError::Internal(format!("{what} encoding failed: {e}"))
    };
    let mut out = Vec::new();
    match format {
        OutputFormat::Jpeg => {
            // `encode` flattened it already.
            let rgb = image
                .as_rgb8()
                .ok_or_else(|| ProcessError::Internal("JPEG expects RGB".into()))?;
            let (w, h) = rgb.dimensions();
            if w > crate::jpeg_encode::MAX_SIDE || h > crate::jpeg_encode::MAX_SIDE {
                return Err(ProcessError::too_many_pixels(
                    w,
                    h,
                    u64::from(crate::jpeg_encode::MAX_SIDE),
                ));
            }
            out = crate::jpeg_encode::encode(rgb, q, spec.progressive)?;
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
            let (pixels, alpha) = match image {
                DynamicImage::ImageRgba8(img) => (img.as_raw(), true),
                DynamicImage::ImageRgb8(img) => (img.as_raw(), false),
                _ => return Err(ProcessError::Internal("WebP expects RGB or RGBA".into())),
            };
            let config = webp_config(spec, q)?;
            let encoded = crate::webp_encode::encode(pixels, w, h, alpha, &config)
                .map_err(|e| internal("WebP", &e))?;
            out.extend_from_slice(&encoded);
        }
        OutputFormat::Gif => {
            let rgba = image.to_rgba8();
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
        OutputFormat::Jxl => {
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
            out = crate::jxl_encode::encode(pixels, w, h, alpha, q, spec.lossless)?;
        }
        OutputFormat::Avif => {
            // RGBA input gives the AVIF an alpha plane; RGB input none.
            let (w, h) = (image.width(), image.height());
            let pixels = libavif::RgbPixels::new(w, h, image.as_bytes())
                .map_err(|e| internal("AVIF", &format!("{e:?}")))?;
            // Full chroma, as sharp and avifenc write by default: at libaom's speed 8 it
            // encodes no slower than 4:2:0 and scores 0.8 dB more at equal bytes on the
            // photos of `bench/peers.py` (README, "Against the peers").
            let yuv = pixels.to_image(libavif::YuvFormat::Yuv444);
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

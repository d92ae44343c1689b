//! Pixels to bytes in the asked format: the flattening a format without alpha needs, the
//! `q=auto` search, and an animation written frame by frame; each format's own encoding is
//! its room's (`encoders/`). Nothing from the source's metadata is written.

use image::DynamicImage;

use crate::auto_quality::Chosen;
use crate::encoders::{animation_failed, FrameSink, Settings};
use crate::error::ProcessError;
use crate::ops::flatten;
use crate::spec::{OutputFormat, Quality, ResolvedSpec};

/// One output frame: its pixels and how long it shows, in milliseconds.
pub struct OutputFrame {
    pub pixels: image::RgbaImage,
    pub delay_ms: u32,
}

/// The output size limits of animated formats (WebP 16383 a side, GIF 65535), checked
/// before any frame is decoded.
pub fn check_animation_size(format: OutputFormat, (w, h): (u32, u32)) -> Result<(), ProcessError> {
    let Some(side) = format.facts().animation_max_side else {
        return Ok(());
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
/// the WebP encoder's copy of each, until the end), by its format's room: an animated WebP,
/// AVIF (an AV1 sequence) or GIF, playing `plays` times (0: for ever), with an alpha plane
/// where the source has alpha (AVIF decides its planes once); other formats keep the first
/// frame as a still. A frame is encoded, or copied by the encoder, as it is added, so a run
/// holds a few frames whatever their number.
pub(crate) struct AnimationWriter {
    spec: ResolvedSpec,
    size: (u32, u32),
    kind: Writing,
}

enum Writing {
    Frames(Box<dyn FrameSink>),
    Still(Option<image::RgbaImage>),
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
        // An animation's frames are not searched: `q=auto` takes its starting quality.
        let settings = settings(spec, encoder_quality(spec));
        let kind = match spec
            .format
            .encoder()
            .animation(size, settings, plays, alpha)?
        {
            Some(sink) => Writing::Frames(sink),
            None => Writing::Still(None),
        };
        Ok(AnimationWriter {
            spec: spec.clone(),
            size,
            kind,
        })
    }

    /// Adds the next frame (of the writer's size).
    pub(crate) fn add(&mut self, frame: OutputFrame) -> Result<(), ProcessError> {
        // libwebp reads each frame as the first one's size: a frame of another would be read
        // out of bounds.
        if frame.pixels.dimensions() != self.size {
            return Err(animation_failed(
                self.spec.format,
                &"frames of different sizes",
            ));
        }
        match &mut self.kind {
            Writing::Frames(sink) => sink.add(frame.pixels, frame.delay_ms),
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
        let unscored = |bytes| Encoded {
            bytes,
            chosen: matches!(self.spec.quality, Some(Quality::Auto { .. })).then(|| Chosen {
                quality: encoder_quality(&self.spec),
                score_tenths: None,
            }),
            search_encodes: 0,
        };
        match self.kind {
            Writing::Frames(sink) => sink.finish().map(unscored),
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
    let image = match spec.format.keeps_alpha() {
        true => image,
        false => DynamicImage::ImageRgb8(flatten(image, spec.shape.background)),
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

/// What the format's room is asked to write for `spec` at encoder quality `quality`.
fn settings(spec: &ResolvedSpec, quality: u8) -> Settings {
    Settings {
        quality,
        lossless: spec.lossless,
        progressive: spec.progressive,
    }
}

/// Encodes `image` at encoder quality `q` (a format without alpha's pixels already
/// flattened).
fn encode_at(image: &DynamicImage, spec: &ResolvedSpec, q: u8) -> Result<Vec<u8>, ProcessError> {
    spec.format.encoder().encode(image, settings(spec, q))
}

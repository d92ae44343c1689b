//! PNG out, through `image`'s encoder at its fast compression with adaptive filters:
//! lossless, so no quality and nothing searched.

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{DynamicImage, ImageEncoder};

use super::{encoding_failed, Encoder, Facts, OutputFormat, Settings};
use crate::error::ProcessError;

pub(super) struct Png;

/// PNG: lossless, about one pass.
const FACTS: Facts = Facts::of(OutputFormat::Png, "png", "image/png");

impl Encoder for Png {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn encode(&self, image: &DynamicImage, _settings: Settings) -> Result<Vec<u8>, ProcessError> {
        let mut out = Vec::new();
        let encoder =
            PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive);
        let color = image.color().into();
        encoder
            .write_image(image.as_bytes(), image.width(), image.height(), color)
            .map_err(|e| encoding_failed("PNG", &e))?;
        Ok(out)
    }
}

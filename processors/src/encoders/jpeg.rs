//! JPEG out, through mozjpeg's libjpeg-turbo (`crate::jpeg_encode`: its progressive scan
//! script and the rows handed over without a copy). No alpha: the pixels come flattened onto
//! `bg`.

use image::DynamicImage;

use super::{Encoder, Facts, OutputFormat, Passes, PerPixel, Search, Settings};
use crate::error::ProcessError;
use crate::jpeg_encode::MAX_SIDE;

pub(super) struct Jpeg;

/// JPEG: no alpha (flattened onto `bg`), progressive on asking, the reference the other
/// formats' passes are measured against.
const FACTS: Facts = Facts {
    aliases: &["jpg"],
    default_quality: Some(82),
    progressive: true,
    keeps_alpha: false,
    bytes_per_pixel: PerPixel::both(4),
    passes: Passes::still(0),
    search: Some(Search::within(30, 95).at_70(69.0, 1.6, 2.0)),
    ..Facts::of(OutputFormat::Jpeg, "jpeg", "image/jpeg")
};

impl Encoder for Jpeg {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn encode(&self, image: &DynamicImage, settings: Settings) -> Result<Vec<u8>, ProcessError> {
        // The caller flattened it already.
        let rgb = image
            .as_rgb8()
            .ok_or_else(|| ProcessError::Internal("JPEG expects RGB".into()))?;
        let (w, h) = rgb.dimensions();
        if w > MAX_SIDE || h > MAX_SIDE {
            return Err(ProcessError::too_many_pixels(w, h, u64::from(MAX_SIDE)));
        }
        crate::jpeg_encode::encode(rgb, settings.quality, settings.progressive)
    }
}

//! JPEG out, through mozjpeg's libjpeg-turbo (`crate::jpeg_encode`: its progressive scan
//! script and the rows handed over without a copy). No alpha: the pixels come flattened onto
//! `bg`.

use image::DynamicImage;

use super::{Encoder, Facts, Lossy, OutputFormat, Passes, Search, Settings};
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
    bytes_per_pixel: Lossy {
        lossy: 4,
        lossless: 4,
    },
    passes: Passes {
        still: 0,
        animated: 0,
        lossless: 0,
    },
    search: Some(Search {
        floor: 30,
        ceiling: 95,
        at_70: 69.0,
        above: 1.6,
        below: 2.0,
        attempts: 5,
        slope: 0.65,
    }),
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

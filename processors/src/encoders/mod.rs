//! Output formats, one room each: `jpeg.rs`, `png.rs`, `webp.rs`, `avif.rs`, `gif.rs` and
//! `jxl.rs` each implement [`Encoder`] — the format's names, media type, default quality,
//! lossless and progressive modes, alpha, animation, what admission charges for its encoder,
//! its `q=auto` search, its `Accept` bit, and the encodes of a still and of an animation — and
//! [`ENCODERS`] holds them in [`OutputFormat`]'s order. The spec, the plan, `q=auto`,
//! `format=auto`, the canonical form and the dialects read a format's facts from its row, so
//! a new output format is its room plus its variant and row here.
//!
//! Below the spec: a room is told what to write ([`Settings`]), not handed the request, so
//! the spec can name formats by this module's [`OutputFormat`].

use std::fmt;

use image::DynamicImage;

use crate::error::ProcessError;

mod avif;
mod gif;
mod jpeg;
mod jxl;
mod png;
mod webp;

pub use jxl::JXL_DEFAULT_QUALITY;

/// Formats imgcas can write, each the row of [`ENCODERS`] at its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    Jpeg,
    Png,
    Webp,
    Avif,
    Gif,
    /// JPEG XL, through the pure-Rust `jixel` encoder (`jxl.rs` says why that one).
    Jxl,
}

/// The rooms, in [`OutputFormat`]'s order.
pub static ENCODERS: [&dyn Encoder; 6] = [
    &jpeg::Jpeg,
    &png::Png,
    &webp::Webp,
    &avif::Avif,
    &gif::Gif,
    &jxl::Jxl,
];

/// What a room is asked to write: the encoder's quality (a lossless mode or format ignores
/// it), the lossless mode, and the progressive form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub quality: u8,
    pub lossless: bool,
    pub progressive: bool,
}

/// A format's `q=auto` search (`auto_quality.rs`): the qualities it stays within, where it
/// starts for a target (a line through the quality reaching 70, with a slope above and one
/// below), how many attempts it may make, and the score points per quality step it assumes
/// before two attempts give the real slope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Search {
    pub floor: u8,
    pub ceiling: u8,
    pub at_70: f64,
    pub above: f64,
    pub below: f64,
    pub attempts: u32,
    pub slope: f64,
}

/// What a format is, as data: its row's facts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Facts {
    /// Its variant of [`OutputFormat`] (its index in [`ENCODERS`]).
    pub format: OutputFormat,
    /// Its `format=` name (also the canonical form's and the extension a dialect names).
    pub name: &'static str,
    /// Other names `format=` and the dialects take for it.
    pub aliases: &'static [&'static str],
    pub media_type: &'static str,
    /// The quality when the request names none; `None` for a lossless format.
    pub default_quality: Option<u8>,
    /// Whether `lossless=1` changes its output (a lossy format with a lossless mode).
    pub lossless_mode: bool,
    /// Whether `q=100` asks for its lossless mode (as cjxl reads it).
    pub lossless_at_full_quality: bool,
    /// Whether `progressive=1` changes its output.
    pub progressive: bool,
    /// Whether it keeps an alpha channel (else the pixels are flattened onto `bg` first).
    pub keeps_alpha: bool,
    /// Whether imgcas writes animations in it.
    pub animates: bool,
    /// The largest side of an animation it holds, checked before any frame is decoded.
    pub animation_max_side: Option<u32>,
    /// Bytes its encoder holds per output pixel, lossy and lossless (what admission charges
    /// for memory).
    pub bytes_per_pixel: PerPixel,
    /// Times its encoder costs the output's pixels beyond the first (what admission charges
    /// for time, `plan.rs`), measured against a decode and JPEG encode.
    pub passes: Passes,
    /// Its `q=auto` search; `None` for a lossless format (quality 100, nothing searched).
    pub search: Option<Search>,
    /// Its bit in an `Accept` class (`spec/accept.rs`); 0 for a format `format=auto` never
    /// offers (a fallback, or one no header names).
    pub accept_bit: u8,
}

impl Facts {
    /// A lossless still format's facts, which a room's own override.
    pub const fn of(format: OutputFormat, name: &'static str, media_type: &'static str) -> Facts {
        Facts {
            format,
            name,
            aliases: &[],
            media_type,
            default_quality: None,
            lossless_mode: false,
            lossless_at_full_quality: false,
            progressive: false,
            keeps_alpha: true,
            animates: false,
            animation_max_side: None,
            bytes_per_pixel: PerPixel::both(8),
            passes: Passes::still(1),
            search: None,
            accept_bit: 0,
        }
    }
}

/// Bytes an encoder holds per output pixel, lossy and in its lossless mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerPixel {
    pub lossy: u64,
    pub lossless: u64,
}

impl PerPixel {
    /// As many bytes either way.
    pub const fn both(bytes: u64) -> PerPixel {
        PerPixel {
            lossy: bytes,
            lossless: bytes,
        }
    }

    /// Its lossless mode's bytes.
    pub const fn lossless(self, bytes: u64) -> PerPixel {
        PerPixel {
            lossless: bytes,
            ..self
        }
    }
}

/// An encoder's passes for a still, an animation's frames and the lossless mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passes {
    pub still: u64,
    pub animated: u64,
    pub lossless: u64,
}

impl Passes {
    /// `passes` for a still, and as many for the rest until said otherwise.
    pub const fn still(passes: u64) -> Passes {
        Passes {
            still: passes,
            animated: passes,
            lossless: passes,
        }
    }

    /// An animation's frames' passes.
    pub const fn animated(self, passes: u64) -> Passes {
        Passes {
            animated: passes,
            ..self
        }
    }

    /// The lossless mode's passes.
    pub const fn lossless(self, passes: u64) -> Passes {
        Passes {
            lossless: passes,
            ..self
        }
    }
}

impl Search {
    /// A search within `floor..=ceiling`, of 5 attempts at most, assuming 0.65 score points
    /// a quality step until it measures its own; it starts where [`Search::at_70`] says.
    pub const fn within(floor: u8, ceiling: u8) -> Search {
        Search {
            floor,
            ceiling,
            at_70: 70.0,
            above: 1.0,
            below: 1.0,
            attempts: 5,
            slope: 0.65,
        }
    }

    /// The quality that reaches 70 on a typical photo, and the qualities per score point
    /// above 70 and below it.
    pub const fn at_70(self, quality: f64, above: f64, below: f64) -> Search {
        Search {
            at_70: quality,
            above,
            below,
            ..self
        }
    }

    /// At most `attempts` attempts, assuming `slope` score points a quality step.
    pub const fn steps(self, attempts: u32, slope: f64) -> Search {
        Search {
            attempts,
            slope,
            ..self
        }
    }
}

/// One output format's room.
pub trait Encoder: Sync {
    /// What the format is.
    fn facts(&self) -> &'static Facts;
    /// Encodes a still (RGBA or RGB pixels; RGB only for a format without alpha).
    fn encode(&self, image: &DynamicImage, settings: Settings) -> Result<Vec<u8>, ProcessError>;
    /// A writer of an animation of `size` playing `plays` times (0: for ever), with an alpha
    /// plane where `alpha`; `None` where the format keeps the first frame as a still.
    fn animation(
        &self,
        _size: (u32, u32),
        _settings: Settings,
        _plays: u32,
        _alpha: bool,
    ) -> Result<Option<Box<dyn FrameSink>>, ProcessError> {
        Ok(None)
    }
}

/// An animation encoded frame by frame: a frame is encoded, or copied by the encoder, as it
/// is added, so a run holds a few frames whatever their number.
pub trait FrameSink {
    /// Adds the next frame, shown for `delay_ms`.
    fn add(&mut self, pixels: image::RgbaImage, delay_ms: u32) -> Result<(), ProcessError>;
    /// The encoded animation.
    fn finish(self: Box<Self>) -> Result<Vec<u8>, ProcessError>;
}

/// An animation's encoder failing, as the run's internal error.
pub(crate) fn animation_failed(format: OutputFormat, e: &dyn fmt::Display) -> ProcessError {
    ProcessError::Internal(format!("{} animation encoding failed: {e}", format.name()))
}

/// A still's encoder failing, as the run's internal error.
fn encoding_failed(what: &str, e: &dyn fmt::Display) -> ProcessError {
    ProcessError::Internal(format!("{what} encoding failed: {e}"))
}

impl OutputFormat {
    /// Its room.
    pub fn encoder(self) -> &'static dyn Encoder {
        ENCODERS[self as usize]
    }

    /// What it is: its room's facts.
    pub fn facts(self) -> &'static Facts {
        self.encoder().facts()
    }

    pub fn name(self) -> &'static str {
        self.facts().name
    }

    /// The format `format=` (or a dialect's extension) names, by its name or an alias.
    pub fn from_name(name: &str) -> Option<Self> {
        ENCODERS
            .iter()
            .map(|e| e.facts())
            .find(|f| f.name == name || f.aliases.contains(&name))
            .map(|f| f.format)
    }

    pub fn mime(self) -> &'static str {
        self.facts().media_type
    }

    /// The quality used when the request names none; `None` for lossless formats.
    pub fn default_quality(self) -> Option<u8> {
        self.facts().default_quality
    }

    /// Whether `lossless=1` changes the output.
    pub fn has_lossless_mode(self) -> bool {
        self.facts().lossless_mode
    }

    /// Whether the format can hold an animation imgcas writes (an animation asked in another
    /// is its first frame).
    pub fn animates(self) -> bool {
        self.facts().animates
    }

    /// Whether the format keeps an alpha channel (else the output is flattened onto `bg`).
    pub fn keeps_alpha(self) -> bool {
        self.facts().keeps_alpha
    }

    /// Bytes its encoder holds per output pixel.
    pub fn encoder_bytes_per_pixel(self, lossless: bool) -> u64 {
        let bytes = self.facts().bytes_per_pixel;
        match lossless {
            true => bytes.lossless,
            false => bytes.lossy,
        }
    }

    /// Its encoder's passes over the output's pixels beyond the first.
    pub fn encoder_passes(self, lossless: bool, animated: bool) -> u64 {
        let passes = self.facts().passes;
        match (lossless, animated) {
            (true, _) => passes.lossless,
            (false, true) => passes.animated,
            (false, false) => passes.still,
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_is_its_formats_and_each_name_one_formats() {
        for (i, encoder) in ENCODERS.iter().enumerate() {
            let facts = encoder.facts();
            assert_eq!(facts.format as usize, i, "{}", facts.name);
            assert_eq!(OutputFormat::from_name(facts.name), Some(facts.format));
            for alias in facts.aliases {
                assert_eq!(OutputFormat::from_name(alias), Some(facts.format));
            }
            assert!(facts.media_type.starts_with("image/"));
            // A lossy format has a default quality and a search; a lossless one neither.
            assert_eq!(
                facts.default_quality.is_some(),
                facts.search.is_some(),
                "{}",
                facts.name
            );
        }
        let bits: Vec<u8> = ENCODERS
            .iter()
            .map(|e| e.facts().accept_bit)
            .filter(|b| *b != 0)
            .collect();
        assert!(bits.iter().all(|b| b.is_power_of_two()));
        assert_eq!(
            bits.iter().fold(0, |all, b| all | b).count_ones() as usize,
            bits.len(),
            "each offered format its own bit"
        );
        assert_eq!(OutputFormat::from_name("jpg"), Some(OutputFormat::Jpeg));
        assert_eq!(OutputFormat::from_name("tiff"), None);
    }
}

//! `q=auto`: the encoder quality searched per variant, so that each output reaches its
//! level's look, a SSIMULACRA2 score against the exact pixels handed to the encoder, in the
//! fewest bytes the search finds. One fixed quality per format wastes bytes on easy pictures
//! and falls short on hard ones; a variant is made once per content and spec, so the few
//! extra encodes are paid once for every later request.
//!
//! The search: the pixels are scored against once (the metric's reference side precomputed),
//! then each attempt is an encode, a decode of its bytes and one comparison, by far the
//! dearest part at web sizes. So the search makes as few as it can: it starts at the quality
//! that reaches the target on a typical photo ([`starting_quality`]) and takes a passing
//! attempt within [`SLACK`] of the target at once; otherwise it steps by the score's distance
//! from a point just above the target, at the slope the last two attempts measured (an
//! assumed one after the first), never past a quality already known to pass or fail, until
//! an attempt lands within the slack, the passing and failing qualities are [`ENOUGH`] apart,
//! or the format's attempts are spent. The answer is the lowest quality tried that reached
//! the target; when none did, the format's ceiling. Every step is integer arithmetic on
//! deterministic encodes and scores (the metric's SIMD and scalar kernels give the same
//! bits), so every node and every rebuild makes the same bytes.
//!
//! A picture with alpha is scored as SSIMULACRA2's own tool scores it: composited on a dark
//! and on a light background, the lower of the two scores.

use fast_ssim2::{PixelDescriptor, PixelSlice, Ssimulacra2Reference};
use image::{DynamicImage, GenericImageView, RgbImage};

use crate::error::ProcessError;
use crate::spec::OutputFormat;
use crate::Limits;

/// What a search chose: the encoder quality and the score its output reached, in tenths
/// (the header's one decimal); no score for an animation, whose frames are not searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chosen {
    pub quality: u8,
    pub score_tenths: Option<i16>,
}

impl Chosen {
    /// The score as a number with one decimal.
    pub fn score(&self) -> Option<f64> {
        self.score_tenths.map(|t| f64::from(t) / 10.0)
    }
}

/// The qualities a search stays within, per format: below the floor an encoder's artefacts
/// are of another kind than the metric ranks well (blocks, smears); above the ceiling bytes
/// grow much faster than the score.
pub fn bounds(format: OutputFormat) -> (u8, u8) {
    format
        .facts()
        .search
        .map_or((100, 100), |s| (s.floor, s.ceiling))
}

/// The largest output searched, in pixels (2048 × 1220, a 1920 × 1080 screen with room): the
/// metric holds its reference's planes at every scale in memory, about 50 bytes a pixel, and
/// a comparison as much again. A larger output is encoded at the level's starting quality,
/// answered without a score, as an animation's frames are.
pub const SEARCH_MAX_PIXELS: u64 = 2_500_000;

/// Whether an output of `pixels` is searched.
pub fn searches(pixels: u64) -> bool {
    pixels <= SEARCH_MAX_PIXELS
}

/// Most attempts one search makes, per format (its encode, decode and comparison each):
/// what admission charges. AVIF's encoder is the dearest, so it gets one fewer.
pub fn max_attempts(format: OutputFormat) -> u32 {
    format.facts().search.map_or(5, |s| s.attempts)
}

/// The search stops once its passing and failing attempts are this many qualities apart:
/// a step of one costs an encode for about 2 % of bytes.
const ENOUGH: u8 = 2;

/// A passing attempt this close above the target is taken without trying lower: another
/// encode and scoring would save a few per cent of bytes at the cost of most of a fixed
/// variant's work. Steps aim at half of it above the target, so that they land in it.
const SLACK: f64 = 2.0;

/// The quality that reaches `target` on a typical photo, where a search starts: measured per
/// format on the shared photos at 512 px (the median quality each level's search chose), a
/// line through them on each side of 70.
pub fn starting_quality(format: OutputFormat, target: u8) -> u8 {
    let (floor, ceiling) = bounds(format);
    // Quality at 70, and qualities per score point above and below it.
    let Some(search) = format.facts().search else {
        return 100;
    };
    let (at_70, above, below) = (search.at_70, search.above, search.below);
    let from_70 = f64::from(target) - 70.0;
    let q = at_70 + from_70 * if from_70 >= 0.0 { above } else { below };
    (q.round() as i64).clamp(i64::from(floor), i64::from(ceiling)) as u8
}

/// Score points per quality step assumed before two attempts give the real slope.
fn assumed_slope(format: OutputFormat) -> f64 {
    format.facts().search.map_or(0.65, |s| s.slope)
}

/// Searches the quality of `format` whose output of `pixels` scores at least `target`, in
/// the fewest bytes; `encode_at` encodes them at a quality.
pub(crate) fn search(
    pixels: &DynamicImage,
    format: OutputFormat,
    target: u8,
    mut encode_at: impl FnMut(u8) -> Result<Vec<u8>, ProcessError>,
) -> Result<Searched, ProcessError> {
    let reference = Scorer::new(pixels)?;
    let target = f64::from(target);
    let (floor, ceiling) = bounds(format);
    let mut encodes = 0;
    let mut attempt = |q: u8| -> Result<Attempt, ProcessError> {
        encodes += 1;
        let bytes = encode_at(q)?;
        let score = reference.score(&bytes)?;
        Ok(Attempt {
            quality: q,
            bytes,
            score,
        })
    };
    // The lowest quality that passed, and the highest that failed; the last two scored,
    // for the slope.
    let mut passed: Option<Attempt> = None;
    let mut failed: Option<Attempt> = None;
    let mut last: Option<(u8, f64)> = None;
    let mut slope = assumed_slope(format);
    let aim = target + SLACK / 2.0;
    let mut q = starting_quality(format, target as u8);
    for _ in 0..max_attempts(format) {
        let tried = attempt(q)?;
        if let Some((q0, s0)) = last {
            if q0 != tried.quality {
                let measured = (tried.score - s0) / (f64::from(tried.quality) - f64::from(q0));
                // A flat or inverted stretch says little about the next step.
                slope = measured.clamp(0.15, 3.0);
            }
        }
        last = Some((tried.quality, tried.score));
        if tried.score >= target {
            if passed.as_ref().is_none_or(|p| tried.quality < p.quality) {
                passed = Some(tried);
            }
        } else if failed.as_ref().is_none_or(|f| tried.quality > f.quality) {
            failed = Some(tried);
        }
        let step_to = |from: &Attempt| {
            let steps = (aim - from.score) / slope;
            let steps = if steps > 0.0 {
                steps.ceil()
            } else {
                steps.floor()
            };
            f64::from(from.quality) + steps
        };
        let next = match (&passed, &failed) {
            (Some(p), _) if p.score < target + SLACK => None,
            (Some(p), Some(f)) if p.quality <= f.quality.saturating_add(ENOUGH) => None,
            (Some(p), Some(f)) => {
                Some(step_to(p).clamp(f64::from(f.quality) + 1.0, f64::from(p.quality) - 1.0))
            }
            (Some(p), None) if p.quality == floor => None,
            (Some(p), None) => Some(step_to(p).clamp(f64::from(floor), f64::from(p.quality) - 1.0)),
            (None, Some(f)) if f.quality == ceiling => None,
            (None, Some(f)) => {
                Some(step_to(f).clamp(f64::from(f.quality) + 1.0, f64::from(ceiling)))
            }
            (None, None) => None,
        };
        match next {
            Some(n) => q = n as u8,
            None => break,
        }
    }
    let chosen = match (passed, failed) {
        (Some(p), _) => p,
        // Nothing reached the target: the ceiling is the closest the format comes.
        (None, Some(f)) if f.quality == ceiling => f,
        (None, _) => attempt(ceiling)?,
    };
    Ok(Searched {
        chosen: Chosen {
            quality: chosen.quality,
            score_tenths: Some((chosen.score * 10.0).round().clamp(-9999.0, 1000.0) as i16),
        },
        bytes: chosen.bytes,
        encodes,
    })
}

/// What a search made: the output, what it chose, and the encodes it took.
pub(crate) struct Searched {
    pub bytes: Vec<u8>,
    pub chosen: Chosen,
    pub encodes: u32,
}

/// The SSIMULACRA2 score of `distorted` against `reference` (two pictures of one size), as a
/// search scores its attempts: for the tests and `bench/quality.py`'s checks.
pub fn score(reference: &DynamicImage, distorted: &DynamicImage) -> Result<f64, ProcessError> {
    if reference.dimensions() != distorted.dimensions() {
        return Err(ProcessError::Internal(
            "pictures of different sizes cannot be compared".into(),
        ));
    }
    Scorer::new(reference)?.compare(distorted)
}

struct Attempt {
    quality: u8,
    bytes: Vec<u8>,
    score: f64,
}

/// The light and dark backgrounds a picture with alpha is scored on.
const BACKGROUNDS: [[u8; 3]; 2] = [[26, 26, 26], [230, 230, 230]];

/// The reference side of the metric, computed once per search.
struct Scorer {
    /// One reference per background (one for an opaque picture).
    references: Vec<Ssimulacra2Reference>,
    alpha: bool,
    size: (u32, u32),
}

impl Scorer {
    fn new(pixels: &DynamicImage) -> Result<Scorer, ProcessError> {
        let alpha = pixels.color().has_alpha();
        let planes = on_backgrounds(pixels, alpha);
        let references = planes
            .iter()
            .map(|rgb| Ssimulacra2Reference::new(&slice(rgb)?).map_err(metric_failed))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scorer {
            references,
            alpha,
            size: (pixels.width(), pixels.height()),
        })
    }

    /// The score of an encoded output: its decode compared with the reference, the lowest
    /// over the backgrounds.
    fn score(&self, bytes: &[u8]) -> Result<f64, ProcessError> {
        let (w, h) = self.size;
        let limits = Limits {
            max_pixels: u64::from(w) * u64::from(h),
            max_frames: 1,
            ..Limits::default()
        };
        let (_, decoded) = crate::decode::decode(bytes, &limits)?;
        if decoded.width() != w || decoded.height() != h {
            return Err(ProcessError::Internal(
                "an encoded output decodes to another size".into(),
            ));
        }
        self.compare(&decoded)
    }

    /// The score of a decoded picture of the reference's size.
    fn compare(&self, decoded: &DynamicImage) -> Result<f64, ProcessError> {
        let planes = on_backgrounds(decoded, self.alpha);
        let mut lowest = f64::INFINITY;
        for (reference, rgb) in self.references.iter().zip(&planes) {
            let score = reference.compare(&slice(rgb)?).map_err(metric_failed)?;
            lowest = lowest.min(score);
        }
        // A score that is no number would steer the search anywhere.
        if !lowest.is_finite() {
            return Err(ProcessError::Internal(format!("SSIMULACRA2 gave {lowest}")));
        }
        Ok(lowest)
    }
}

/// The picture as opaque RGB: itself, or composited on each of [`BACKGROUNDS`].
fn on_backgrounds(pixels: &DynamicImage, alpha: bool) -> Vec<RgbImage> {
    if !alpha {
        return vec![pixels.to_rgb8()];
    }
    BACKGROUNDS
        .iter()
        .map(|bg| crate::ops::flatten(pixels.clone(), crate::spec::Rgb(*bg)))
        .collect()
}

fn slice(rgb: &RgbImage) -> Result<PixelSlice<'_>, ProcessError> {
    PixelSlice::new(
        rgb.as_raw(),
        rgb.width(),
        rgb.height(),
        rgb.width() as usize * 3,
        PixelDescriptor::RGB8_SRGB,
    )
    .map_err(|e| ProcessError::Internal(format!("SSIMULACRA2 input: {e}")))
}

fn metric_failed(e: fast_ssim2::Ssimulacra2Error) -> ProcessError {
    ProcessError::Internal(format!("SSIMULACRA2 failed: {e}"))
}

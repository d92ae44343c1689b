//! Client hints: `dpr=auto` and `w=auto` decided by `Sec-CH-DPR` and `Sec-CH-Width`, rounded
//! up to fixed ladders so hints never multiply variants, and `Save-Data` lowering a default
//! quality or a `q=auto` level.

use super::*;

/// The client hints a request carried, as the HTTP layer read them (`None`: absent or not
/// a number).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientHints {
    /// `Sec-CH-DPR`.
    pub dpr: Option<f64>,
    /// `Sec-CH-Width`: the image's display width, in device pixels.
    pub width: Option<f64>,
    /// `Save-Data: on`.
    pub save_data: bool,
}

/// Which client hints a request's options consult: the request headers its answer varies by
/// (besides `Accept`, for `format=auto`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HintsConsulted {
    pub dpr: bool,
    pub width: bool,
    pub save_data: bool,
}

impl HintsConsulted {
    /// The hint headers consulted, for `Vary`.
    pub fn headers(self) -> impl Iterator<Item = &'static str> {
        [
            (self.dpr, "Sec-CH-DPR"),
            (self.width, "Sec-CH-Width"),
            (self.save_data, "Save-Data"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
    }
}

/// How much `Save-Data: on` lowers a format's default quality (jpeg 82 → 67, webp 80 → 65,
/// avif 60 → 45); an explicit `q` is kept.
pub const SAVE_DATA_STEP: u8 = 15;

/// The widths `w=auto` rounds a `Sec-CH-Width` hint up to, so that hints never make more
/// variants than these: roughly every 10–25 % from phone icons to 8K.
pub const WIDTH_LADDER: &[u32] = &[
    16,
    32,
    48,
    64,
    96,
    128,
    160,
    200,
    256,
    320,
    400,
    480,
    560,
    640,
    750,
    828,
    960,
    1080,
    1200,
    1440,
    1600,
    1920,
    2048,
    2560,
    3072,
    3840,
    4096,
    5120,
    6144,
    7680,
    MAX_DIMENSION,
];

/// The ratios `dpr=auto` rounds a `Sec-CH-DPR` hint up to (at most 4, the option's limit).
pub const DPR_LADDER: &[u32] = &[100, 150, 200, 300, 400];

/// The ladder's smallest step at least `value` (its top when none is).
fn round_up(ladder: &[u32], value: f64) -> u32 {
    let top = ladder.last().copied().unwrap_or(1);
    ladder
        .iter()
        .copied()
        .find(|&step| f64::from(step) >= value)
        .unwrap_or(top)
}

impl Spec {
    /// The client hints this spec consults. `Save-Data` is consulted by a request that asks
    /// for client hints (`dpr=auto` or `w=auto`) and leaves a lossy format's quality to its
    /// default, and by every `q=auto` request: a page opts into adaptation, and every other
    /// answer stays the same for every client.
    pub fn consults(&self) -> HintsConsulted {
        HintsConsulted {
            dpr: self.dpr_auto,
            width: self.width_auto,
            save_data: (matches!(self.quality, Some(QualityRequest::Auto(_)))
                || ((self.dpr_auto || self.width_auto) && self.quality.is_none()))
                && !self.lossless
                && !matches!(self.format, FormatRequest::Exact(f) if f.default_quality().is_none()),
        }
    }

    /// This spec with its `auto` values decided by `hints`: only concrete options are left,
    /// so the variant key holds what the hints resolved to, and a hint equal to an explicit
    /// value makes the same variant (`dpr=auto` with `Sec-CH-DPR: 2` is `dpr=2`).
    ///
    /// - `dpr=auto`: the hint rounded up to [`DPR_LADDER`]; 1 without one.
    /// - `w=auto`: the hint rounded up to [`WIDTH_LADDER`]. It is in device pixels already,
    ///   so it is not multiplied by the ratio: the ratio is folded into the height instead,
    ///   and the spec is left in device pixels with a ratio of 1. Without a hint, no width
    ///   (the source's).
    /// - `Save-Data: on`, when consulted: the default quality lowered by [`SAVE_DATA_STEP`],
    ///   or a `q=auto` level lowered by one ([`AutoLevel::lower`]).
    ///
    /// What was consulted is kept in `consulted`, for the answer's `Vary`.
    pub fn with_hints(&self, hints: &ClientHints) -> Spec {
        let consults = self.consults();
        let mut spec = self.clone();
        spec.consulted = consults;
        let usable = |v: Option<f64>| v.filter(|v| v.is_finite() && *v > 0.0);
        if self.dpr_auto {
            spec.dpr_auto = false;
            spec.dpr = Hundredths(
                usable(hints.dpr).map_or(100, |d| round_up(DPR_LADDER, (d * 100.0).round())),
            );
        }
        if self.width_auto {
            spec.width_auto = false;
            if let Some(width) = usable(hints.width) {
                let ratio = spec.dpr.as_f64();
                spec.shape.width = Some(round_up(WIDTH_LADDER, width));
                spec.shape.height = spec
                    .shape
                    .height
                    .map(|h| ((f64::from(h) * ratio).round() as u32).max(1));
                spec.dpr = Hundredths(100);
            }
        }
        spec.save_data = consults.save_data && hints.save_data;
        if let (true, Some(QualityRequest::Auto(level))) = (spec.save_data, spec.quality) {
            spec.quality = Some(QualityRequest::Auto(level.lower()));
        }
        spec
    }
}

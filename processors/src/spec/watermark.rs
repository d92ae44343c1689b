//! The watermark option: `wm=<name>` with its overrides (`wm_pos`, `wm_scale`, `wm_opacity`)
//! as a request gives them, and the same watermark placed by the service (the overlay
//! original's hash and every setting decided), which is what variant keys hold: changing a
//! watermark's overlay or its settings makes other variants, never stale ones.
//!
//! The names live in the service's configuration (`[watermarks]`); this crate parses their
//! settings ([`Placement::parse`]) so that the configuration and requests read them alike.

use std::fmt;
use std::sync::Arc;

use super::values::{gravity, gravity_name, parse_u32};
use super::{Gravity, Hundredths, SpecError};

/// The settings a configured watermark gives when a request does not override them.
pub const DEFAULT_POSITION: Gravity = Gravity::SouthEast;
/// A quarter of the output's width.
pub const DEFAULT_SCALE: Hundredths = Hundredths(25);
pub const DEFAULT_OPACITY: Hundredths = Hundredths(100);
/// Pixels between the overlay and the output's edges it sits by.
pub const DEFAULT_MARGIN: u32 = 10;
/// The largest margin a configuration may give.
pub const MAX_MARGIN: u32 = 1000;

/// A watermark: as a request names it, or placed (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    /// `wm=<name>` as given.
    pub name: String,
    /// The overlay original's SHA-256 (hex) once placed; `None` in a request as given.
    pub overlay: Option<String>,
    /// Where it sits (a compass point; `center` for the middle).
    pub position: Option<Gravity>,
    /// Its width as a fraction of the output's, 0.01–1.
    pub scale: Option<Hundredths>,
    /// 0 (invisible) to 1 (as drawn).
    pub opacity: Option<Hundredths>,
    /// Pixels from the edges it sits by (configuration only).
    pub margin: Option<u32>,
    /// The overlay's bytes and stored size, which the service attaches to a run (not part of
    /// the watermark's identity: its hash is).
    pub source: OverlaySource,
}

/// A configured watermark's settings: its overlay and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The overlay original's SHA-256, hex.
    pub overlay: String,
    pub position: Gravity,
    pub scale: Hundredths,
    pub opacity: Hundredths,
    pub margin: u32,
}

impl Placement {
    /// A configuration's watermark: `hash=<sha256>[&position=…][&scale=…][&opacity=…][&margin=…]`.
    pub fn parse(options: &str) -> Result<Placement, SpecError> {
        let mut placement = Placement {
            overlay: String::new(),
            position: DEFAULT_POSITION,
            scale: DEFAULT_SCALE,
            opacity: DEFAULT_OPACITY,
            margin: DEFAULT_MARGIN,
        };
        for pair in options.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "hash" => {
                    let hex = value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit());
                    if !hex {
                        return Err(SpecError::new(name, "must be a SHA-256 (64 hex digits)"));
                    }
                    placement.overlay = value.to_ascii_lowercase();
                }
                "position" => placement.position = position(name, value)?,
                "scale" => placement.scale = scale(name, value)?,
                "opacity" => placement.opacity = opacity(name, value)?,
                "margin" => {
                    placement.margin = parse_u32(name, value, 0, MAX_MARGIN)?;
                }
                _ => {
                    return Err(SpecError::new(
                        name,
                        "unknown watermark setting (known: hash, position, scale, opacity, margin)",
                    ))
                }
            }
        }
        if placement.overlay.is_empty() {
            return Err(SpecError::new(
                "hash",
                "names the overlay original; required",
            ));
        }
        Ok(placement)
    }
}

/// Whether `name` is what the configuration names things with (a preset, a watermark): up to
/// 64 letters, digits, `_` and `-`.
pub fn is_plain_name(name: &str) -> bool {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    !name.is_empty() && name.len() <= 64 && name.chars().all(plain)
}

impl Watermark {
    /// `wm=<name>`: a plain name ([`is_plain_name`]).
    pub(super) fn named(option: &str, name: &str) -> Result<Watermark, SpecError> {
        if !is_plain_name(name) {
            return Err(SpecError::new(
                option,
                "must name a configured watermark (letters, digits, `_` and `-`)",
            ));
        }
        Ok(Watermark {
            name: name.to_string(),
            overlay: None,
            position: None,
            scale: None,
            opacity: None,
            margin: None,
            source: OverlaySource::default(),
        })
    }

    /// Placed by its configuration: the overlay, and each setting the request left out;
    /// `overlay_pixels` is the overlay's stored size (what decoding it costs).
    pub fn place(&mut self, placement: &Placement, overlay_pixels: u64) {
        self.overlay = Some(placement.overlay.clone());
        self.position = self.position.or(Some(placement.position));
        self.scale = self.scale.or(Some(placement.scale));
        self.opacity = self.opacity.or(Some(placement.opacity));
        self.margin = Some(placement.margin);
        self.source.pixels = overlay_pixels;
    }

    /// Its options as `(name, value)` pairs: the request's as given, or every placed one.
    pub(super) fn parts(&self, out: &mut Vec<(&'static str, String)>) {
        out.push((
            "wm",
            self.overlay.clone().unwrap_or_else(|| self.name.clone()),
        ));
        let settings = [
            ("wm_pos", self.position.map(|p| gravity_name(p).to_string())),
            ("wm_scale", self.scale.map(|s| s.to_string())),
            ("wm_opacity", self.opacity.map(|o| o.to_string())),
            ("wm_margin", self.margin.map(|m| m.to_string())),
        ];
        out.extend(settings.into_iter().filter_map(|(k, v)| Some((k, v?))));
    }
}

/// `wm_pos`: a compass point or `center` (no `smart`: an overlay has no content to look at).
pub(super) fn position(option: &str, value: &str) -> Result<Gravity, SpecError> {
    match gravity(option, value)? {
        Gravity::Smart | Gravity::Auto => Err(SpecError::new(
            option,
            "a watermark sits by a compass point",
        )),
        g => Ok(g),
    }
}

/// `wm_scale`: 0.01–1 of the output's width.
pub(super) fn scale(option: &str, value: &str) -> Result<Hundredths, SpecError> {
    Hundredths::parse(option, value, 1, 100)
}

/// `wm_opacity`: 0–1.
pub(super) fn opacity(option: &str, value: &str) -> Result<Hundredths, SpecError> {
    Hundredths::parse(option, value, 0, 100)
}

/// The overlay's bytes (attached by the service before a run) and its stored pixels (for the
/// run's cost). Every two compare equal: a watermark's identity is its hash and settings.
#[derive(Clone, Default)]
pub struct OverlaySource {
    pub bytes: Option<Arc<Vec<u8>>>,
    pub pixels: u64,
}

impl PartialEq for OverlaySource {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for OverlaySource {}

impl fmt::Debug for OverlaySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.bytes.as_ref().map(|b| b.len());
        write!(
            f,
            "OverlaySource {{ bytes: {bytes:?}, pixels: {} }}",
            self.pixels
        )
    }
}

//! Processing options: parsing, validation and the two canonical forms.
//!
//! A request's options become a [`Spec`], which still says what the client asked for
//! (`format=original`, `format=auto`, `dpr=2`). Before anything is looked up, the service
//! resolves it against the source and the client into a [`ResolvedSpec`]: the format is
//! concrete, `dpr` is folded into the box, and options that cannot change the output are
//! dropped. The resolved form's [`ResolvedSpec::canonical`] string is what variant keys are
//! made of, so requests that must produce the same bytes share one variant.

use std::fmt;

/// Bumped whenever the bytes produced for an unchanged resolved spec change, so that
/// variants made by older code stop matching by themselves. When a change touches only some
/// variants, those alone take a later version (see [`crate::processor_version`]), so an
/// upgrade does not make every stored variant again.
pub const PROCESSOR_VERSION: u32 = 4;

/// Largest `w`/`h` a client may ask for (before `dpr`).
pub const MAX_DIMENSION: u32 = 8192;

/// A bad option, named so the client can fix its URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid option `{option}`: {message}")]
pub struct SpecError {
    pub option: String,
    pub message: String,
}

impl SpecError {
    fn new(option: &str, message: impl Into<String>) -> Self {
        SpecError {
            option: option.to_string(),
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fit {
    #[default]
    Contain,
    Cover,
    Fill,
    Pad,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gravity {
    #[default]
    Center,
    North,
    South,
    East,
    West,
    NorthEast,
    NorthWest,
    SouthEast,
    SouthWest,
    /// The crop window goes where the picture has the most detail (edge energy and
    /// saturation), found on the decoded pixels: `fit=cover` only.
    Smart,
}

impl Gravity {
    /// Where the kept region sits along each axis: 0 = left/top, 0.5 = middle, 1 = right/bottom.
    pub fn anchor(self) -> (f64, f64) {
        match self {
            Gravity::Center | Gravity::Smart => (0.5, 0.5),
            Gravity::North => (0.5, 0.0),
            Gravity::South => (0.5, 1.0),
            Gravity::East => (1.0, 0.5),
            Gravity::West => (0.0, 0.5),
            Gravity::NorthEast => (1.0, 0.0),
            Gravity::NorthWest => (0.0, 0.0),
            Gravity::SouthEast => (1.0, 1.0),
            Gravity::SouthWest => (0.0, 1.0),
        }
    }
}

/// Formats imgcas can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputFormat {
    Jpeg,
    Png,
    Webp,
    Avif,
    Gif,
}

impl OutputFormat {
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "jpeg",
            OutputFormat::Png => "png",
            OutputFormat::Webp => "webp",
            OutputFormat::Avif => "avif",
            OutputFormat::Gif => "gif",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "jpeg" | "jpg" => OutputFormat::Jpeg,
            "png" => OutputFormat::Png,
            "webp" => OutputFormat::Webp,
            "avif" => OutputFormat::Avif,
            "gif" => OutputFormat::Gif,
            _ => return None,
        })
    }

    pub fn mime(self) -> &'static str {
        match self {
            OutputFormat::Jpeg => "image/jpeg",
            OutputFormat::Png => "image/png",
            OutputFormat::Webp => "image/webp",
            OutputFormat::Avif => "image/avif",
            OutputFormat::Gif => "image/gif",
        }
    }

    /// The quality used when the request names none; `None` for lossless formats.
    pub fn default_quality(self) -> Option<u8> {
        match self {
            OutputFormat::Jpeg => Some(82),
            OutputFormat::Webp => Some(80),
            OutputFormat::Avif => Some(60),
            OutputFormat::Png | OutputFormat::Gif => None,
        }
    }

    /// Whether the format can hold an animation (imgcas writes animated GIF and WebP).
    pub fn animates(self) -> bool {
        matches!(self, OutputFormat::Gif | OutputFormat::Webp)
    }

    /// Whether the format keeps an alpha channel (JPEG output is flattened onto `bg`).
    pub fn keeps_alpha(self) -> bool {
        !matches!(self, OutputFormat::Jpeg)
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the client asked for in `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FormatRequest {
    /// Keep the source's format (or the nearest one imgcas writes).
    #[default]
    Original,
    /// The best format the client's `Accept` header allows.
    Auto,
    Exact(OutputFormat),
}

/// A value kept in hundredths so that specs compare and print exactly (`dpr=1.5`, `blur=0.3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hundredths(pub u32);

impl Hundredths {
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 100.0
    }

    fn parse(option: &str, value: &str, min: u32, max: u32) -> Result<Self, SpecError> {
        let range = || format!("must be a number from {} to {}", fmt_h(min), fmt_h(max));
        let v: f64 = value
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| SpecError::new(option, range()))?;
        // The range holds for the value as given, not as rounded to hundredths
        // (`blur=100.0000001` is over 100). Division is exactly rounded, so a bound written as
        // a decimal compares equal to itself.
        if v < f64::from(min) / 100.0 || v > f64::from(max) / 100.0 {
            return Err(SpecError::new(option, range()));
        }
        Ok(Hundredths((v * 100.0).round() as u32))
    }
}

fn fmt_h(h: u32) -> String {
    if h.is_multiple_of(100) {
        (h / 100).to_string()
    } else if h.is_multiple_of(10) {
        format!("{}.{}", h / 100, (h % 100) / 10)
    } else {
        format!("{}.{:02}", h / 100, h % 100)
    }
}

impl fmt::Display for Hundredths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&fmt_h(self.0))
    }
}

/// An sRGB colour, `rrggbb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rgb(pub [u8; 3]);

impl Default for Rgb {
    fn default() -> Self {
        Rgb([255, 255, 255])
    }
}

impl fmt::Display for Rgb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02x}{:02x}{:02x}", self.0[0], self.0[1], self.0[2])
    }
}

/// The options that shape the pixels: the same in the request form and the resolved form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shape {
    /// Box width; in a [`ResolvedSpec`], in output pixels (`dpr` applied).
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub fit: Fit,
    pub gravity: Gravity,
    pub enlarge: bool,
    /// Clockwise degrees applied after EXIF orientation: 0, 90, 180 or 270.
    pub rotate: u16,
    pub blur: Option<Hundredths>,
    pub sharpen: Option<Hundredths>,
    pub background: Rgb,
    pub min_width: Option<u32>,
    pub min_height: Option<u32>,
}

impl Shape {
    /// Its non-default options as `(name, value)` pairs.
    fn parts(&self, out: &mut Vec<(&'static str, String)>) {
        let d = Shape::default();
        if self.background != d.background {
            out.push(("bg", self.background.to_string()));
        }
        if let Some(b) = self.blur {
            out.push(("blur", b.to_string()));
        }
        if self.enlarge {
            out.push(("enlarge", "1".into()));
        }
        if self.fit != d.fit {
            out.push(("fit", fit_name(self.fit).into()));
        }
        if self.gravity != d.gravity {
            out.push(("gravity", gravity_name(self.gravity).into()));
        }
        let numbers = [
            ("h", self.height),
            ("min_h", self.min_height),
            ("min_w", self.min_width),
            ("w", self.width),
        ];
        for (name, value) in numbers {
            if let Some(v) = value {
                out.push((name, v.to_string()));
            }
        }
        if self.rotate != 0 {
            out.push(("rotate", self.rotate.to_string()));
        }
        if let Some(s) = self.sharpen {
            out.push(("sharpen", s.to_string()));
        }
    }
}

/// The options of one request, validated, as the client gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub shape: Shape,
    /// Device pixel ratio, 1–4, in hundredths.
    pub dpr: Hundredths,
    /// `dpr=auto`: the ratio comes from the `Sec-CH-DPR` hint ([`Spec::with_hints`]); 1
    /// without one.
    pub dpr_auto: bool,
    /// `w=auto`: the width comes from the `Sec-CH-Width` hint; the source's without one.
    pub width_auto: bool,
    /// The client sent `Save-Data: on` and the request consults it (see
    /// [`Spec::consults`]): the default quality is lowered by [`SAVE_DATA_STEP`].
    pub save_data: bool,
    /// The hints [`Spec::with_hints`] consulted (none before it runs).
    pub consulted: HintsConsulted,
    pub format: FormatRequest,
    pub quality: Option<u8>,
    /// `lossless=1`: lossless WebP (other formats are lossless already or cannot be).
    pub lossless: bool,
    /// `progressive=1`: progressive JPEG.
    pub progressive: bool,
    /// `animated=1` (the default): an animated source stays animated in a format that can
    /// be (GIF, WebP); `animated=0` takes its first frame.
    pub animated: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            shape: Shape::default(),
            dpr: Hundredths(100),
            dpr_auto: false,
            width_auto: false,
            save_data: false,
            consulted: HintsConsulted::default(),
            format: FormatRequest::Original,
            quality: None,
            lossless: false,
            progressive: false,
            animated: true,
        }
    }
}

/// Option names the spec understands; anything else is refused.
pub const OPTION_NAMES: &[&str] = &[
    "w",
    "h",
    "fit",
    "gravity",
    "enlarge",
    "dpr",
    "format",
    "q",
    "lossless",
    "progressive",
    "rotate",
    "blur",
    "sharpen",
    "bg",
    "min_w",
    "min_h",
    "animated",
];

fn parse_flag(option: &str, value: &str) -> Result<bool, SpecError> {
    match value {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(SpecError::new(option, "must be 0 or 1")),
    }
}

fn parse_u32(option: &str, value: &str, min: u32, max: u32) -> Result<u32, SpecError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| {
            SpecError::new(
                option,
                format!("must be a whole number from {min} to {max}"),
            )
        })
}

impl Spec {
    /// Parses `(name, value)` pairs (a query string without `url` and `sig`).
    /// Order does not matter; a repeated or unknown option is an error.
    pub fn from_pairs<'a, I>(pairs: I) -> Result<Spec, SpecError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut spec = Spec::default();
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in pairs {
            let Some(&known) = OPTION_NAMES.iter().find(|n| **n == name) else {
                return Err(SpecError::new(
                    name,
                    format!("unknown option (known: {})", OPTION_NAMES.join(", ")),
                ));
            };
            if seen.contains(&known) {
                return Err(SpecError::new(name, "given more than once"));
            }
            seen.push(known);
            spec.set(known, value)?;
        }
        Ok(spec)
    }

    /// Parses a query-style string such as `w=400&format=webp`.
    pub fn parse(query: &str) -> Result<Spec, SpecError> {
        let pairs: Vec<(&str, &str)> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .collect();
        Spec::from_pairs(pairs)
    }

    fn set(&mut self, name: &str, value: &str) -> Result<(), SpecError> {
        match name {
            "w" if value == "auto" => self.width_auto = true,
            "w" => self.shape.width = Some(parse_u32(name, value, 1, MAX_DIMENSION)?),
            "h" => self.shape.height = Some(parse_u32(name, value, 1, MAX_DIMENSION)?),
            "min_w" => self.shape.min_width = Some(parse_u32(name, value, 1, u32::MAX / 2)?),
            "min_h" => self.shape.min_height = Some(parse_u32(name, value, 1, u32::MAX / 2)?),
            "q" => self.quality = Some(parse_u32(name, value, 1, 100)? as u8),
            "dpr" if value == "auto" => self.dpr_auto = true,
            "dpr" => self.dpr = Hundredths::parse(name, value, 100, 400)?,
            "blur" => self.shape.blur = Some(Hundredths::parse(name, value, 30, 10_000)?),
            "sharpen" => self.shape.sharpen = Some(Hundredths::parse(name, value, 30, 10_000)?),
            "enlarge" => self.shape.enlarge = parse_flag(name, value)?,
            "lossless" => self.lossless = parse_flag(name, value)?,
            "progressive" => self.progressive = parse_flag(name, value)?,
            "animated" => self.animated = parse_flag(name, value)?,
            "rotate" => {
                self.shape.rotate = match value {
                    "0" => 0,
                    "90" => 90,
                    "180" => 180,
                    "270" => 270,
                    _ => return Err(SpecError::new(name, "must be 0, 90, 180 or 270")),
                }
            }
            "fit" => {
                self.shape.fit = match value {
                    "contain" => Fit::Contain,
                    "cover" => Fit::Cover,
                    "fill" => Fit::Fill,
                    "pad" => Fit::Pad,
                    _ => {
                        return Err(SpecError::new(
                            name,
                            "must be one of contain, cover, fill, pad",
                        ))
                    }
                }
            }
            "gravity" => {
                self.shape.gravity = match value {
                    "center" => Gravity::Center,
                    "north" => Gravity::North,
                    "south" => Gravity::South,
                    "east" => Gravity::East,
                    "west" => Gravity::West,
                    "northeast" => Gravity::NorthEast,
                    "northwest" => Gravity::NorthWest,
                    "southeast" => Gravity::SouthEast,
                    "southwest" => Gravity::SouthWest,
                    "smart" => Gravity::Smart,
                    _ => return Err(SpecError::new(
                        name,
                        "must be one of center, north, south, east, west, northeast, northwest, southeast, southwest, smart",
                    )),
                }
            }
            "format" => {
                self.format = match value {
                    "original" => FormatRequest::Original,
                    "auto" => FormatRequest::Auto,
                    other => FormatRequest::Exact(OutputFormat::from_name(other).ok_or_else(
                        || {
                            SpecError::new(
                                name,
                                "must be one of jpeg, png, webp, avif, gif, auto, original",
                            )
                        },
                    )?),
                }
            }
            "bg" => {
                let hex = value.strip_prefix('#').unwrap_or(value);
                let bad = || SpecError::new(name, "must be a hex colour rrggbb");
                if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad());
                }
                let channel = |i: usize| {
                    hex.get(i..i + 2)
                        .and_then(|c| u8::from_str_radix(c, 16).ok())
                        .ok_or_else(bad)
                };
                self.shape.background = Rgb([channel(0)?, channel(2)?, channel(4)?]);
            }
            _ => unreachable!("option names are checked against OPTION_NAMES"),
        }
        Ok(())
    }

    /// The request as typed, normalized: sorted, defaults dropped. Two requests with the same
    /// canonical form are the same request (signatures are computed over it).
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        self.shape.parts(&mut parts);
        if self.width_auto {
            parts.push(("w", "auto".into()));
        }
        if self.dpr_auto {
            parts.push(("dpr", "auto".into()));
        } else if self.dpr != Spec::default().dpr {
            parts.push(("dpr", self.dpr.to_string()));
        }
        match self.format {
            FormatRequest::Original => {}
            FormatRequest::Auto => parts.push(("format", "auto".into())),
            FormatRequest::Exact(f) => parts.push(("format", f.name().into())),
        }
        if let Some(q) = self.quality {
            parts.push(("q", q.to_string()));
        }
        if self.lossless {
            parts.push(("lossless", "1".into()));
        }
        if self.progressive {
            parts.push(("progressive", "1".into()));
        }
        if !self.animated {
            parts.push(("animated", "0".into()));
        }
        join(parts)
    }

    /// Whether the response depends on the client's `Accept` header.
    pub fn varies_by_accept(&self) -> bool {
        self.format == FormatRequest::Auto
    }

    /// Resolves the request against its source and client: the output format becomes concrete
    /// (`original` follows `source_format`, `auto` follows `accept`), `dpr` is folded into the
    /// box, and options that cannot change the output are dropped.
    pub fn resolve(
        &self,
        source_format: Option<OutputFormat>,
        source_has_alpha: bool,
        accept: Option<&str>,
    ) -> ResolvedSpec {
        self.resolve_frames(source_format, source_has_alpha, 1, accept)
    }

    /// Whether resolving may depend on the source's frame count: an animation is asked
    /// for (`animated=1`) and the output format may be one that animates. When not, a
    /// caller need not learn the frames (1 does).
    pub fn may_animate(&self, source_format: Option<OutputFormat>) -> bool {
        self.animated
            && match self.format {
                FormatRequest::Exact(f) => f.animates(),
                FormatRequest::Auto => true,
                FormatRequest::Original => source_format.is_some_and(OutputFormat::animates),
            }
    }

    /// [`Spec::resolve`] for a source of `source_frames` frames. An animated source asked
    /// for with `animated=1` in GIF or WebP resolves to an animated spec (`animated=1` in
    /// its canonical form); `format=auto` then picks among the formats that animate: WebP
    /// when the client takes it, else GIF. Every other case takes the first frame and
    /// resolves as [`Spec::resolve`] does, so first-frame variants keep their keys.
    pub fn resolve_frames(
        &self,
        source_format: Option<OutputFormat>,
        source_has_alpha: bool,
        source_frames: u32,
        accept: Option<&str>,
    ) -> ResolvedSpec {
        let animate = self.animated && source_frames > 1;
        let fallback = if source_has_alpha {
            OutputFormat::Png
        } else {
            OutputFormat::Jpeg
        };
        let format = match self.format {
            FormatRequest::Exact(f) => f,
            FormatRequest::Original => source_format.unwrap_or(fallback),
            FormatRequest::Auto if animate => negotiate_animated(accept.unwrap_or("")),
            FormatRequest::Auto => negotiate(accept.unwrap_or(""), source_has_alpha),
        };
        let scale = |v: u32| ((f64::from(v) * self.dpr.as_f64()).round() as u32).max(1);
        let mut shape = self.shape.clone();
        shape.width = shape.width.map(scale);
        shape.height = shape.height.map(scale);
        let has_box = shape.width.is_some() || shape.height.is_some();
        if shape.width.is_none() || shape.height.is_none() {
            // With one side given (or none) every fit behaves like contain.
            shape.fit = Fit::Contain;
        }
        if !matches!(shape.fit, Fit::Cover | Fit::Pad) {
            shape.gravity = Gravity::Center;
        }
        if shape.fit == Fit::Pad && shape.gravity == Gravity::Smart {
            // Padding has no content to look at: smart placement is the middle.
            shape.gravity = Gravity::Center;
        }
        shape.enlarge &= has_box;
        let lossless = self.lossless && format == OutputFormat::Webp;
        let quality = format
            .default_quality()
            .filter(|_| !lossless)
            .map(|default| {
                self.quality.unwrap_or(match self.save_data {
                    true => default.saturating_sub(SAVE_DATA_STEP).max(1),
                    false => default,
                })
            });
        ResolvedSpec {
            shape,
            format,
            quality,
            lossless,
            progressive: self.progressive && format == OutputFormat::Jpeg,
            animated: animate && format.animates(),
        }
    }
}

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
    /// default: a page opts into adaptation, and every other answer stays the same for every
    /// client.
    pub fn consults(&self) -> HintsConsulted {
        HintsConsulted {
            dpr: self.dpr_auto,
            width: self.width_auto,
            save_data: (self.dpr_auto || self.width_auto)
                && self.quality.is_none()
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
    /// - `Save-Data: on`, when consulted: the default quality lowered by [`SAVE_DATA_STEP`].
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
        spec
    }
}

/// What of an `Accept` header format negotiation reads: whether it admits AVIF (bit 0) and
/// WebP (bit 1). Two headers of one class negotiate alike for every source, so a cache of
/// negotiated answers can key on the class rather than the header.
pub fn accept_class(accept: &str) -> u8 {
    let accepts = |mime: &str| {
        accept.split(',').any(|item| {
            let mut parts = item.split(';');
            let ty = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                let p = p.trim();
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            ty.eq_ignore_ascii_case(mime) && !refused
        })
    };
    let bit = |format: OutputFormat, bit: u8| if accepts(format.mime()) { bit } else { 0 };
    bit(OutputFormat::Avif, AVIF_BIT) | bit(OutputFormat::Webp, WEBP_BIT)
}

/// The bits of [`accept_class`].
const AVIF_BIT: u8 = 1;
const WEBP_BIT: u8 = 2;

/// The best output format an `Accept` header allows: AVIF, then WebP, then PNG where the
/// source has alpha, else JPEG. Formats that would drop the source's alpha are skipped.
pub fn negotiate(accept: &str, has_alpha: bool) -> OutputFormat {
    let class = accept_class(accept);
    for (candidate, bit) in [
        (OutputFormat::Avif, AVIF_BIT),
        (OutputFormat::Webp, WEBP_BIT),
    ] {
        if (candidate.keeps_alpha() || !has_alpha) && class & bit != 0 {
            return candidate;
        }
    }
    if has_alpha {
        OutputFormat::Png
    } else {
        OutputFormat::Jpeg
    }
}

/// The best output format for an animation an `Accept` header allows: WebP, else GIF (imgcas
/// writes no animated AVIF, and every browser takes GIF).
fn negotiate_animated(accept: &str) -> OutputFormat {
    if accept_class(accept) & WEBP_BIT != 0 {
        OutputFormat::Webp
    } else {
        OutputFormat::Gif
    }
}

fn fit_name(f: Fit) -> &'static str {
    match f {
        Fit::Contain => "contain",
        Fit::Cover => "cover",
        Fit::Fill => "fill",
        Fit::Pad => "pad",
    }
}

fn gravity_name(g: Gravity) -> &'static str {
    match g {
        Gravity::Center => "center",
        Gravity::North => "north",
        Gravity::South => "south",
        Gravity::East => "east",
        Gravity::West => "west",
        Gravity::NorthEast => "northeast",
        Gravity::NorthWest => "northwest",
        Gravity::SouthEast => "southeast",
        Gravity::SouthWest => "southwest",
        Gravity::Smart => "smart",
    }
}

/// Renders `name=value` pairs sorted by name, `&`-separated.
fn join(mut parts: Vec<(&'static str, String)>) -> String {
    parts.sort_by_key(|(name, _)| *name);
    let rendered: Vec<String> = parts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    rendered.join("&")
}

/// A spec with everything decided: what [`crate::process`] executes and what variant keys are
/// made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSpec {
    pub shape: Shape,
    pub format: OutputFormat,
    /// `None` for lossless formats.
    pub quality: Option<u8>,
    /// Lossless WebP (only ever set with `format == Webp`).
    pub lossless: bool,
    /// Progressive JPEG (only ever set with `format == Jpeg`).
    pub progressive: bool,
    /// Every frame of an animated source, animated (only ever set with a format that
    /// animates, for a source of more than one frame).
    pub animated: bool,
}

impl ResolvedSpec {
    /// Whether the output's own loss hides a coarse shrink-on-load: lossy JPEG or WebP at
    /// quality 90 or less. Measured on the large photos of `bench/peers.py`, a progressive
    /// JPEG decoded at 1/8 from its DC scans alone lands 44.5 dB from a full decode and
    /// Lanczos3 (52.5 dB at 1/4 then Lanczos3); a q80 JPEG or q75 WebP loses more than that
    /// by itself (about 35 dB), so the shortcut costs them nothing measurable, while an AVIF
    /// at q65 (about 39 dB) lost 1.1 dB to it, and a lossless output all of the difference.
    pub fn hides_coarse_decode(&self) -> bool {
        let lossy =
            matches!(self.format, OutputFormat::Jpeg | OutputFormat::Webp) && !self.lossless;
        let quality = self
            .quality
            .or(self.format.default_quality())
            .unwrap_or(100);
        lossy && quality <= 90
    }

    /// The variant-key form: every field that shapes the output, defaults dropped, sorted.
    /// The format is always present.
    pub fn canonical(&self) -> String {
        let mut parts = Vec::new();
        self.shape.parts(&mut parts);
        parts.push(("format", self.format.name().into()));
        if let (Some(q), Some(default)) = (self.quality, self.format.default_quality()) {
            if q != default {
                parts.push(("q", q.to_string()));
            }
        }
        if self.lossless {
            parts.push(("lossless", "1".into()));
        }
        if self.progressive {
            parts.push(("progressive", "1".into()));
        }
        if self.animated {
            parts.push(("animated", "1".into()));
        }
        join(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(q: &str) -> SpecError {
        Spec::parse(q).expect_err(q)
    }

    #[test]
    fn order_does_not_matter_and_defaults_drop() {
        let a = Spec::parse("w=400&h=300").unwrap();
        let b = Spec::parse("h=300&w=400&fit=contain&q=&").map(|_| ());
        assert!(b.is_err(), "an empty q is an error");
        let b = Spec::parse("h=300&gravity=center&w=400&fit=contain&dpr=1&enlarge=0").unwrap();
        assert_eq!(a.canonical(), "h=300&w=400");
        assert_eq!(a.canonical(), b.canonical());
        assert_eq!(Spec::parse("").unwrap().canonical(), "");
    }

    #[test]
    fn every_option_parses() {
        let s = Spec::parse(
            "w=10&h=20&fit=pad&gravity=southwest&enlarge=1&dpr=1.5&format=webp&q=70&rotate=90&blur=0.3&sharpen=2&bg=%23000000&min_w=5&min_h=6",
        );
        // `%23` is not decoded here (the HTTP layer decodes); a raw '#' is accepted.
        assert!(s.is_err());
        let s = Spec::parse(
            "w=10&h=20&fit=pad&gravity=southwest&enlarge=1&dpr=1.5&format=webp&q=70&rotate=90&blur=0.3&sharpen=2&bg=#000000&min_w=5&min_h=6",
        )
        .unwrap();
        assert_eq!(
            s.canonical(),
            "bg=000000&blur=0.3&dpr=1.5&enlarge=1&fit=pad&format=webp&gravity=southwest&h=20&min_h=6&min_w=5&q=70&rotate=90&sharpen=2&w=10"
        );
    }

    #[test]
    fn the_frame_mode_is_in_the_key_of_animated_sources_only() {
        let gif = Some(OutputFormat::Gif);
        let key = |q: &str, frames: u32, accept: Option<&str>| {
            Spec::parse(q)
                .unwrap()
                .resolve_frames(gif, true, frames, accept)
                .canonical()
        };
        // A still, or the first frame: the key a first-frame variant always had.
        assert_eq!(key("format=webp&w=100", 1, None), "format=webp&w=100");
        assert_eq!(
            key("format=webp&w=100&animated=0", 10, None),
            "format=webp&w=100"
        );
        assert_eq!(
            key("format=webp&w=100", 10, None),
            "animated=1&format=webp&w=100"
        );
        assert_eq!(key("w=100", 10, None), "animated=1&format=gif&w=100");
        // Still formats take the first frame whatever was asked.
        assert_eq!(key("format=png&w=100", 10, None), "format=png&w=100");
        // Auto picks a format that animates: WebP when taken, else GIF.
        let avif_too = Some("image/avif,image/webp,*/*");
        assert_eq!(key("format=auto", 10, avif_too), "animated=1&format=webp");
        assert_eq!(key("format=auto", 10, Some("*/*")), "animated=1&format=gif");
        assert_eq!(key("format=auto&animated=0", 10, avif_too), "format=avif");
        // The request form keeps what was asked (signatures are made over it).
        assert_eq!(
            Spec::parse("animated=0&w=5").unwrap().canonical(),
            "animated=0&w=5"
        );
        assert_eq!(Spec::parse("animated=1").unwrap().canonical(), "");
        assert!(Spec::parse("animated=2").is_err());
        assert!(!Spec::parse("format=png").unwrap().may_animate(gif));
        assert!(Spec::parse("").unwrap().may_animate(gif));
        assert!(!Spec::parse("")
            .unwrap()
            .may_animate(Some(OutputFormat::Png)));
    }

    #[test]
    fn bad_values_name_the_option() {
        for (q, opt) in [
            ("w=0", "w"),
            ("w=8193", "w"),
            ("w=abc", "w"),
            ("h=-1", "h"),
            ("fit=squash", "fit"),
            ("gravity=up", "gravity"),
            ("enlarge=2", "enlarge"),
            ("dpr=5", "dpr"),
            ("dpr=0.5", "dpr"),
            ("dpr=NaN", "dpr"),
            ("format=bmp", "format"),
            ("q=0", "q"),
            ("q=101", "q"),
            ("rotate=45", "rotate"),
            ("blur=0.1", "blur"),
            ("sharpen=101", "sharpen"),
            ("bg=fff", "bg"),
            ("bg=gggggg", "bg"),
            ("min_w=0", "min_w"),
            ("width=3", "width"),
            ("w=1&w=2", "w"),
        ] {
            assert_eq!(err(q).option, opt, "{q}");
        }
    }

    #[test]
    fn resolution_folds_dpr_and_format() {
        let s = Spec::parse("w=200&dpr=2&format=original").unwrap();
        let r = s.resolve(Some(OutputFormat::Jpeg), false, None);
        let t = Spec::parse("w=400&format=jpeg&q=82").unwrap();
        assert_eq!(
            r.canonical(),
            t.resolve(Some(OutputFormat::Png), true, None).canonical()
        );
        assert_eq!(r.canonical(), "format=jpeg&w=400");
    }

    #[test]
    fn client_hints_resolve_to_concrete_options_on_their_ladders() {
        let key = |query: &str, hints: ClientHints| {
            let spec = Spec::parse(query).unwrap().with_hints(&hints);
            let consulted: Vec<_> = spec.consulted.headers().collect();
            let key = spec
                .resolve(Some(OutputFormat::Jpeg), false, None)
                .canonical();
            (key, consulted)
        };
        let none = ClientHints::default();
        let dpr = |d: f64| ClientHints {
            dpr: Some(d),
            ..none
        };
        let width = |w: f64| ClientHints {
            width: Some(w),
            ..none
        };
        let explicit = |q: &str| key(q, none).0;
        // dpr=auto with a hint of 2 is dpr=2; odd ratios round up to the ladder; none is 1.
        assert_eq!(key("w=300&dpr=auto", dpr(2.0)).0, explicit("w=300&dpr=2"));
        assert_eq!(key("w=300&dpr=auto", dpr(2.625)).0, explicit("w=300&dpr=3"));
        assert_eq!(key("w=300&dpr=auto", dpr(9.0)).0, explicit("w=300&dpr=4"));
        assert_eq!(key("w=300&dpr=auto", none).0, explicit("w=300"));
        assert_eq!(key("w=300&dpr=auto", dpr(f64::NAN)).0, explicit("w=300"));
        // w=auto: the hint, in device pixels, rounded up; the ratio is not applied to it again.
        assert_eq!(key("w=auto", width(700.0)).0, explicit("w=750"));
        assert_eq!(key("w=auto", width(640.0)).0, explicit("w=640"));
        assert_eq!(key("w=auto", width(1e9)).0, explicit("w=8192"));
        let both = ClientHints {
            dpr: Some(2.0),
            width: Some(700.0),
            save_data: false,
        };
        assert_eq!(
            key("w=auto&h=100&dpr=auto", both).0,
            explicit("w=750&h=200")
        );
        // Without the hint, the source's width.
        assert_eq!(key("w=auto&format=webp", none).0, explicit("format=webp"));
        // Save-Data lowers the default quality of a request that asks for hints, to a value
        // an explicit q would give; an explicit q wins.
        let save = ClientHints {
            save_data: true,
            ..width(300.0)
        };
        assert_eq!(key("w=auto", save).0, explicit("w=320&q=67"));
        assert_eq!(key("w=auto&q=90", save).0, explicit("w=320&q=90"));
        assert_eq!(
            key("w=300", save).0,
            explicit("w=300"),
            "no hints asked for"
        );
        // What each request consulted: its Vary.
        assert_eq!(key("w=300", none).1, Vec::<&str>::new());
        assert_eq!(key("w=300&dpr=auto", none).1, ["Sec-CH-DPR", "Save-Data"]);
        assert_eq!(key("w=auto&q=50", none).1, ["Sec-CH-Width"]);
        // The request form keeps `auto`; an unknown value is still refused.
        assert_eq!(
            Spec::parse("dpr=auto&w=auto").unwrap().canonical(),
            "dpr=auto&w=auto"
        );
        assert!(Spec::parse("h=auto").is_err());
        assert!(Spec::parse("dpr=automatic").is_err());
    }

    #[test]
    fn irrelevant_options_drop_from_the_variant_key() {
        let a = Spec::parse("w=100&gravity=north&fit=cover").unwrap();
        let b = Spec::parse("w=100").unwrap();
        let resolve = |s: &Spec| s.resolve(Some(OutputFormat::Png), false, None).canonical();
        assert_eq!(
            resolve(&a),
            resolve(&b),
            "one side given: fit and gravity are moot"
        );
        let c = Spec::parse("w=100&h=100&fit=cover&gravity=north").unwrap();
        assert_eq!(
            resolve(&c),
            "fit=cover&format=png&gravity=north&h=100&w=100"
        );
        let png_q = Spec::parse("format=png&q=50").unwrap();
        assert_eq!(resolve(&png_q), "format=png");
    }

    #[test]
    fn lossless_and_progressive_only_stay_where_they_change_the_output() {
        let resolve = |q: &str| {
            Spec::parse(q)
                .unwrap()
                .resolve(Some(OutputFormat::Jpeg), false, None)
                .canonical()
        };
        assert_eq!(
            resolve("format=webp&lossless=1&q=50"),
            "format=webp&lossless=1"
        );
        assert_eq!(resolve("format=jpeg&lossless=1"), "format=jpeg");
        assert_eq!(resolve("format=png&lossless=1&progressive=1"), "format=png");
        assert_eq!(resolve("progressive=1&q=82"), "format=jpeg&progressive=1");
        assert_eq!(resolve("format=webp&progressive=1"), "format=webp");
        assert_eq!(resolve("lossless=0&progressive=0"), "format=jpeg");
        assert_eq!(err("lossless=yes").option, "lossless");
        assert_eq!(err("progressive=2").option, "progressive");
    }

    #[test]
    fn smart_gravity_is_kept_for_cover_only() {
        let resolve = |q: &str| {
            Spec::parse(q)
                .unwrap()
                .resolve(Some(OutputFormat::Png), false, None)
        };
        assert_eq!(
            resolve("w=10&h=10&fit=cover&gravity=smart").shape.gravity,
            Gravity::Smart
        );
        assert_eq!(
            resolve("w=10&h=10&fit=pad&gravity=smart").shape.gravity,
            Gravity::Center
        );
        assert_eq!(resolve("w=10&gravity=smart").canonical(), "format=png&w=10");
    }

    #[test]
    fn negotiation_prefers_avif_then_webp_then_legacy_by_alpha() {
        assert_eq!(
            negotiate("image/avif,image/webp,*/*", false),
            OutputFormat::Avif
        );
        assert_eq!(
            negotiate("image/avif,image/webp,*/*", true),
            OutputFormat::Avif,
            "AVIF keeps alpha"
        );
        assert_eq!(negotiate("image/webp,*/*", true), OutputFormat::Webp);
        assert_eq!(negotiate("image/webp;q=0, */*", false), OutputFormat::Jpeg);
        assert_eq!(negotiate("*/*", true), OutputFormat::Png);
        assert_eq!(negotiate("", false), OutputFormat::Jpeg);
    }
}

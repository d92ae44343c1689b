//! Processing options: parsing, validation and the two canonical forms.
//!
//! A request's options become a [`Spec`], which still says what the client asked for
//! (`format=original`, `format=auto`, `dpr=2`). Before anything is looked up, the service
//! resolves it against the source and the client into a [`ResolvedSpec`]: the format is
//! concrete, `dpr` is folded into the box, and options that cannot change the output are
//! dropped. The resolved form's [`ResolvedSpec::canonical`] string is what variant keys are
//! made of, so requests that must produce the same bytes share one variant.
//!
//! Here: the option types and the [`Spec`] itself. Each option's name, reading, canonical form and doc line are its entry in `options.rs`;
//! parsing is in `parse.rs`, the two
//! canonical forms and the resolution in `canonical.rs`, client hints in `hints.rs`, and
//! `Accept` negotiation in `accept.rs`.

mod accept;
mod canonical;
mod focus;
mod hints;
mod options;
mod parse;
mod quality;
mod region;
mod values;
mod watermark;

pub use accept::{accept_class, negotiate, Accept, AutoFormats};
pub use canonical::ResolvedSpec;
pub(crate) use focus::{of_size as focus_of_size, window_start};
pub use hints::{ClientHints, HintsConsulted, DPR_LADDER, SAVE_DATA_STEP, WIDTH_LADDER};
pub use options::{Doc, OptionDef, OPTIONS};
pub use quality::{AutoLevel, AutoTargets, Quality, QualityRequest};
pub use region::{Extent, Placed, Region};
pub use watermark::{is_plain_name, OverlaySource, Placement, Watermark};

pub use crate::encoders::{OutputFormat, JXL_DEFAULT_QUALITY};

use std::fmt;

/// The base of the processor version in every variant's key. It does not move: a change
/// that alters stored variants' bytes adds a rung to the history (`versions.rs`), and the
/// variants it touched alone take its later version, so that an upgrade does not make every
/// stored variant again.
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
    /// Cover, except that without `enlarge` a box the source cannot fill is cut to the
    /// source side by side, not shrunk to the box's shape (imgproxy's `fill`); with
    /// `enlarge` it is cover.
    Crop,
    /// Crop when the source and the box are turned the same way (both landscape or both
    /// portrait), else contain (imgproxy's `auto`).
    Auto,
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
    /// A focal point (`fp:X:Y`): the window is centred on it as far as the source allows.
    /// Ten-thousandths of the oriented source's width and height (`focus.rs`).
    Focus {
        x: u16,
        y: u16,
    },
    /// A focal point in pixels of the oriented source (`fp:412px:300px`, thumbor's
    /// `focal()`), turned into a fraction once the source's size is known.
    FocusPx {
        x: u32,
        y: u32,
    },
    /// `gravity=auto`: the focal point set for the original, else the smart crop. Never in a
    /// resolved spec (see [`ResolvedSpec::with_focus`]).
    Auto,
}

impl Gravity {
    /// The centre or a compass point (not smart, not a focal point).
    pub fn is_compass(self) -> bool {
        !matches!(
            self,
            Gravity::Smart | Gravity::Focus { .. } | Gravity::FocusPx { .. } | Gravity::Auto
        )
    }

    /// Where the kept region sits along each axis: 0 = left/top, 0.5 = middle, 1 = right/bottom.
    pub fn anchor(self) -> (f64, f64) {
        match self {
            Gravity::Center | Gravity::Smart | Gravity::Auto => (0.5, 0.5),
            Gravity::North => (0.5, 0.0),
            Gravity::South => (0.5, 1.0),
            Gravity::East => (1.0, 0.5),
            Gravity::West => (0.0, 0.5),
            Gravity::NorthEast => (1.0, 0.0),
            Gravity::NorthWest => (0.0, 0.0),
            Gravity::SouthEast => (1.0, 1.0),
            Gravity::SouthWest => (0.0, 1.0),
            Gravity::Focus { x, y } => (f64::from(x) / 10_000.0, f64::from(y) / 10_000.0),
            // Its size unknown here: the middle (the geometry turns it into a fraction).
            Gravity::FocusPx { .. } => (0.5, 0.5),
        }
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
    /// `crop`: the region of the source the rest works on.
    pub crop: Option<Region>,
    /// Where `crop` sits when it gives no corner.
    pub crop_gravity: Gravity,
    /// `gravity_offset`: the window of a `cover` or `crop` moved from its compass gravity, in
    /// output pixels (`dpr` applied once resolved).
    pub gravity_offset: (i32, i32),
    /// `trim`: borders within this percentage of their colour are cut from the decode.
    pub trim: Option<u8>,
    /// The borders' colour (`trim_color`); the top-left pixel's when `None`.
    pub trim_color: Option<Rgb>,
    /// `wm`: an overlay drawn on the output (see [`Watermark`]).
    pub watermark: Option<Watermark>,
}

impl Shape {
    /// How many times its options pass over the output's pixels, for the run's cost
    /// ([`crate::cost`]): blur and sharpen are three and four box passes (measured against a
    /// 14 MP photo's decode and JPEG encode). An option that filters the pixels says its
    /// passes here.
    pub(crate) fn filter_passes(&self) -> u64 {
        let blur = if self.blur.is_some() { 3 } else { 0 };
        let sharpen = if self.sharpen.is_some() { 4 } else { 0 };
        // Finding borders reads the decode once (at most: it stops at the first picture).
        let trim = if self.trim.is_some() { 1 } else { 0 };
        // Blending the overlay reads and writes the output once (its decode is counted
        // apart, by its own size).
        let watermark = if self.watermark.is_some() { 2 } else { 0 };
        blur + sharpen + trim + watermark
    }

    /// Its non-default options as `(name, value)` pairs.
    fn parts(&self, out: &mut options::Parts) {
        options::shape_parts(self, out);
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
    /// `q`: a fixed quality or `q=auto:<level>`; `None`: the format's default.
    pub quality: Option<QualityRequest>,
    /// `lossless=1`: lossless WebP (other formats are lossless already or cannot be).
    pub lossless: bool,
    /// `progressive=1`: progressive JPEG.
    pub progressive: bool,
    /// `animated=1` (the default): an animated source stays animated in a format that can
    /// be (GIF, WebP); `animated=0` takes its first frame.
    pub animated: bool,
    /// The request named a `gravity`: the original's focal point then applies only to
    /// `gravity=auto` (see [`ResolvedSpec::with_focus`]).
    pub gravity_said: bool,
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
            gravity_said: false,
        }
    }
}

/// A spec from `(name, value)` pairs resolved for a JPEG source without alpha or client, as
/// the processors' tests use them.
#[cfg(test)]
pub(crate) fn resolved_for_jpeg(query: &[(&str, &str)]) -> ResolvedSpec {
    Spec::from_pairs(query.iter().copied())
        .unwrap()
        .resolve(Some(OutputFormat::Jpeg), false, None)
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
        let order = AutoFormats::default();
        let key = |q: &str, frames: u32, accept: Option<&str>| {
            let accept = accept.map(|header| Accept {
                header,
                order: &order,
            });
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
        // Still formats take the first frame whatever was asked; so does JPEG XL, whose
        // encoder here writes stills.
        assert_eq!(key("format=png&w=100", 10, None), "format=png&w=100");
        assert_eq!(key("format=jxl&w=100", 10, None), "format=jxl&w=100");
        // Auto picks the first format of the order that animates and is taken (JPEG XL
        // does not animate here), else GIF.
        let avif_too = Some("image/jxl,image/avif,image/webp,*/*");
        assert_eq!(key("format=auto", 10, avif_too), "animated=1&format=avif");
        let webp = Some("image/jxl,image/webp,*/*");
        assert_eq!(key("format=auto", 10, webp), "animated=1&format=webp");
        assert_eq!(key("format=auto", 10, Some("*/*")), "animated=1&format=gif");
        // A first frame is a still: JPEG XL, the first of the order.
        assert_eq!(key("format=auto&animated=0", 10, avif_too), "format=jxl");
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
    fn bad_crops_name_their_option() {
        for (q, opt) in [
            ("crop=1", "crop"),
            ("crop=a,b", "crop"),
            ("crop=1.5,2", "crop"),
            ("crop=10,10,1", "crop"),
            ("crop=10,10,-1,0", "crop"),
            ("crop=10,10&gravity=smart", "crop"),
            ("crop_gravity=smart", "crop_gravity"),
            ("trim=101", "trim"),
            ("trim_color=red", "trim_color"),
            ("trim=5&crop=10,10", "trim"),
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
        // A crop placed by its corner has no gravity; a whole one is no crop.
        let placed = Spec::parse("crop=10,20,3,4&crop_gravity=east&w=5").unwrap();
        assert_eq!(resolve(&placed), "crop=10,20,3,4&format=png&w=5");
        let whole = Spec::parse("crop=0,0&w=5").unwrap();
        assert_eq!(resolve(&whole), resolve(&Spec::parse("w=5").unwrap()));
        // A trim colour without trim is moot.
        let colour = Spec::parse("trim_color=ff0000&w=5").unwrap();
        assert_eq!(resolve(&colour), resolve(&Spec::parse("w=5").unwrap()));
        let trim = Spec::parse("trim=5&trim_color=FF0000&w=5").unwrap();
        assert_eq!(resolve(&trim), "format=png&trim=5&trim_color=ff0000&w=5");
        // Crop with enlarge is cover: one variant.
        let crop = Spec::parse("w=300&h=400&fit=crop&enlarge=1").unwrap();
        let cover = Spec::parse("w=300&h=400&fit=cover&enlarge=1").unwrap();
        assert_eq!(resolve(&crop), resolve(&cover));
        let crop = Spec::parse("w=300&h=400&fit=crop&gravity=east").unwrap();
        assert_eq!(
            resolve(&crop),
            "fit=crop&format=png&gravity=east&h=400&w=300"
        );
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
    fn negotiation_follows_the_order_the_client_allows_then_legacy_by_alpha() {
        let default = AutoFormats::default();
        let ask = |header: &'static str, has_alpha: bool| {
            negotiate(
                Accept {
                    header,
                    order: &default,
                },
                has_alpha,
            )
        };
        assert_eq!(ask("image/avif,image/webp,*/*", false), OutputFormat::Avif);
        assert_eq!(
            ask("image/avif,image/webp,*/*", true),
            OutputFormat::Avif,
            "AVIF keeps alpha"
        );
        assert_eq!(
            ask("image/webp,image/avif,image/jxl,*/*", true),
            OutputFormat::Jxl
        );
        assert_eq!(ask("image/webp,*/*", true), OutputFormat::Webp);
        assert_eq!(ask("image/webp;q=0, */*", false), OutputFormat::Jpeg);
        assert_eq!(ask("*/*", true), OutputFormat::Png);
        assert_eq!(ask("", false), OutputFormat::Jpeg);
        let webp_first = AutoFormats::parse("webp, avif").unwrap();
        let header = "image/jxl,image/avif,image/webp";
        let ours = Accept {
            header,
            order: &webp_first,
        };
        assert_eq!(negotiate(ours, false), OutputFormat::Webp);
        let none = AutoFormats::parse("").unwrap();
        assert_eq!(
            negotiate(
                Accept {
                    header,
                    order: &none
                },
                false
            ),
            OutputFormat::Jpeg
        );
        assert_eq!(webp_first.to_string(), "webp,avif");
        assert_eq!(default.to_string(), "jxl,avif,webp");
        assert!(AutoFormats::parse("avif,avif").is_err());
        assert!(AutoFormats::parse("png").is_err());
        assert!(AutoFormats::parse("heic").is_err());
    }
}

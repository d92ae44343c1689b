//! The processing options, one entry each: its name, the values it takes and its default
//! as `docs/api.md`'s options table says them (a test holds the page to these entries), how
//! a value is read into a [`Spec`], and how it is written in the canonical forms. Adding an
//! option, or a value of one, touches its entry here (or its value table in `values.rs`, for
//! a named value) plus the code where it applies. What a value of one option means together with
//! another (`trim` with `crop`, `gravity=smart` with `crop`) is `parse.rs`'s; what it
//! becomes once resolved against a source, `canonical.rs`'s.

use super::values::{
    colour, fit_name, gravity_name, named, parse_flag, parse_u32, FITS, GRAVITIES,
};
use super::watermark;
use super::*;

/// The `(name, value)` pairs a canonical form is made of (sorted when joined).
pub(super) type Parts = Vec<(&'static str, String)>;

/// One option of the native URL.
pub struct OptionDef {
    pub name: &'static str,
    pub doc: Doc,
    read: Read,
    /// Its part of the shape's canonical form, the same in the request's form and in the
    /// resolved one (variant keys): nothing when it holds its default.
    shape_form: fn(&Shape, &mut Parts),
    /// Its part of the request's canonical form (what signatures cover) beyond the shape's;
    /// the resolved form of the request-wide options is [`ResolvedSpec::canonical`]'s.
    request_form: fn(&Spec, &mut Parts),
}

/// The option's row in `docs/api.md`'s options table.
#[derive(Debug, Clone, Copy)]
pub enum Doc {
    Row {
        values: &'static str,
        default: &'static str,
        /// Ours, not imgproxy's or Cloudinary's: marked `(extension)` in the table.
        extension: bool,
    },
    /// Shares the row of the option named (`h` stands with `w`).
    RowOf(&'static str),
}

/// How a value is read.
#[derive(Clone, Copy)]
enum Read {
    Spec(fn(&mut Spec, &'static str, &str) -> Result<(), SpecError>),
    /// An adjustment of the request's watermark (`wm`), read once `wm` is, wherever it
    /// stands in the request.
    Watermark(fn(&mut Watermark, &'static str, &str) -> Result<(), SpecError>),
}

/// Pushes `name=value` when the option is set.
fn push<T: ToString>(out: &mut Parts, name: &'static str, value: Option<T>) {
    if let Some(v) = value {
        out.push((name, v.to_string()));
    }
}

/// The entry of an option name.
pub fn option(name: &str) -> Option<&'static OptionDef> {
    OPTIONS.iter().find(|o| o.name == name)
}

impl OptionDef {
    /// Reads `value` into `spec`; an adjustment of the watermark waits in `later` for `wm`.
    pub(super) fn read<'v>(
        &'static self,
        spec: &mut Spec,
        value: &'v str,
        later: &mut Vec<(&'static OptionDef, &'v str)>,
    ) -> Result<(), SpecError> {
        match self.read {
            Read::Spec(read) => read(spec, self.name, value),
            Read::Watermark(_) => {
                later.push((self, value));
                Ok(())
            }
        }
    }

    /// Reads a watermark adjustment that waited for `wm`.
    pub(super) fn read_later(&self, spec: &mut Spec, value: &str) -> Result<(), SpecError> {
        let Read::Watermark(read) = self.read else {
            return Ok(());
        };
        match spec.shape.watermark.as_mut() {
            Some(wm) => read(wm, self.name, value),
            None => Err(SpecError::new(
                self.name,
                "needs `wm`, the watermark it adjusts",
            )),
        }
    }
}

/// The shape's part of both canonical forms.
pub(super) fn shape_parts(shape: &Shape, out: &mut Parts) {
    for o in OPTIONS {
        (o.shape_form)(shape, out);
    }
}

/// The request-wide part of the request's canonical form.
pub(super) fn request_parts(spec: &Spec, out: &mut Parts) {
    for o in OPTIONS {
        (o.request_form)(spec, out);
    }
}

/// Every option of the native URL, in the order an unknown option's error lists them.
pub const OPTIONS: &[OptionDef] = &[
    OptionDef {
        name: "w",
        doc: Doc::Row {
            values: "1–8192 px (one alone keeps the aspect ratio); `w=auto`: the `Sec-CH-Width` client hint (below)",
            default: "source size",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            if value == "auto" {
                s.width_auto = true;
            } else {
                s.shape.width = Some(parse_u32(name, value, 1, MAX_DIMENSION)?);
            }
            Ok(())
        }),
        shape_form: |shape, out| push(out, "w", shape.width),
        request_form: |spec, out| {
            if spec.width_auto {
                out.push(("w", "auto".into()));
            }
        },
    },
    OptionDef {
        name: "h",
        doc: Doc::RowOf("w"),
        read: Read::Spec(|s, name, value| {
            s.shape.height = Some(parse_u32(name, value, 1, MAX_DIMENSION)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "h", shape.height),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "fit",
        doc: Doc::Row {
            values: "`contain`, `cover` (crop), `fill` (stretch), `pad` (contain, then pad to the box with `bg`), `crop` (cover, except that without `enlarge` a box the source cannot fill is cut to the source side by side instead of shrunk to its shape: imgproxy's `fill`; with `enlarge` it is `cover`), `auto` (`crop` when the source and the box are turned the same way, both landscape or both portrait, else `contain`: imgproxy's `auto`)",
            default: "`contain`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.fit = named(name, value, FITS)?;
            Ok(())
        }),
        shape_form: |shape, out| {
            if shape.fit != Shape::default().fit {
                out.push(("fit", fit_name(shape.fit).into()));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "gravity",
        doc: Doc::Row {
            values: "`center`, `north`, `south`, `east`, `west`, `northeast`, `northwest`, `southeast`, `southwest`, `smart` (for `cover`: the crop goes where the picture has the most edge detail and colour), `fp:X:Y` (for `cover` and `crop`: a focal point, `X` and `Y` fractions from 0 to 1 of the oriented source, or its pixels as `fp:412px:300px`; the window is centred on it as far as the source allows), `auto` (for `cover` and `crop`: the focal point set for the original, else `smart`). Without a `gravity` a `cover` or `crop` of an original with a focal point set is centred on it",
            default: "`center`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.gravity = match focus::focal_point(name, value)? {
                Some(focal_point) => focal_point,
                None => named(name, value, GRAVITIES)?,
            };
            s.gravity_said = true;
            Ok(())
        }),
        shape_form: |shape, out| match focus::focal_point_name(shape.gravity) {
            Some(focal_point) => out.push(("gravity", focal_point)),
            None if shape.gravity != Shape::default().gravity => {
                out.push(("gravity", gravity_name(shape.gravity).into()))
            }
            None => {}
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "gravity_offset",
        doc: Doc::Row {
            values: "`X,Y`: whole output pixels (`dpr` applies) that move a `cover` or `crop` window from its compass gravity, inwards from the edge it names (from the middle: right and down); never past the source. Not with `smart` or a focal point",
            default: "`0,0`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.gravity_offset = focus::offset(name, value)?;
            Ok(())
        }),
        shape_form: |shape, out| {
            let (x, y) = shape.gravity_offset;
            if (x, y) != (0, 0) {
                out.push(("gravity_offset", format!("{x},{y}")));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "enlarge",
        doc: Doc::Row {
            values: "`0`/`1`: allow upscaling; without it the box shrinks (keeping its shape) until nothing upscales, except `pad`, which always reaches the box",
            default: "`0`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.enlarge = parse_flag(name, value)?;
            Ok(())
        }),
        shape_form: |shape, out| {
            if shape.enlarge {
                out.push(("enlarge", "1".into()));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "dpr",
        doc: Doc::Row {
            values: "1–4 (decimals allowed), multiplies `w` and `h`; `dpr=auto`: the `Sec-CH-DPR` client hint (below)",
            default: "`1`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            if value == "auto" {
                s.dpr_auto = true;
            } else {
                s.dpr = Hundredths::parse(name, value, 100, 400)?;
            }
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| {
            if spec.dpr_auto {
                out.push(("dpr", "auto".into()));
            } else if spec.dpr != Spec::default().dpr {
                out.push(("dpr", spec.dpr.to_string()));
            }
        },
    },
    OptionDef {
        name: "format",
        doc: Doc::Row {
            values: "`jpeg`, `png`, `webp`, `avif`, `gif`, `jxl`, `auto` (the first format of `formats.auto` that `Accept` lists, by default JPEG XL, then AVIF, then WebP, else JPEG, or PNG for sources with alpha; for an animation with `animated=1`, the first of those that animates (AVIF, WebP) as `Accept` allows, else GIF; sets `Vary: Accept`), `original`; `json`: no pixels, the original's facts as `info` answers them (see [Placeholders and facts](#placeholders-and-facts))",
            default: "`original`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.format = match value {
                "original" => FormatRequest::Original,
                "auto" => FormatRequest::Auto,
                other => FormatRequest::Exact(OutputFormat::from_name(other).ok_or_else(|| {
                    SpecError::new(name, "must be one of jpeg, png, webp, avif, gif, jxl, auto, original")
                })?),
            };
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| match spec.format {
            FormatRequest::Original => {}
            FormatRequest::Auto => out.push(("format", "auto".into())),
            FormatRequest::Exact(f) => out.push(("format", f.name().into())),
        },
    },
    OptionDef {
        name: "q",
        doc: Doc::Row {
            values: "1–100, `auto`, `auto:best`, `auto:good`, `auto:eco`, `auto:low`",
            default: "jpeg 82, webp 80, avif 60, jxl 86 (`quality.default`); `jxl` at `q=100` is lossless",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.quality = Some(QualityRequest::from_value(value).ok_or_else(|| {
                SpecError::new(name, "must be 1-100, auto or auto:best|good|eco|low")
            })?);
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| push(out, "q", spec.quality),
    },
    OptionDef {
        name: "lossless",
        doc: Doc::Row {
            values: "`0`/`1`: lossless WebP or JPEG XL (ignored for other formats)",
            default: "`0`",
            extension: true,
        },
        read: Read::Spec(|s, name, value| {
            s.lossless = parse_flag(name, value)?;
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| {
            if spec.lossless {
                out.push(("lossless", "1".into()));
            }
        },
    },
    OptionDef {
        name: "progressive",
        doc: Doc::Row {
            values: "`0`/`1`: progressive JPEG (ignored for other formats)",
            default: "`0`",
            extension: true,
        },
        read: Read::Spec(|s, name, value| {
            s.progressive = parse_flag(name, value)?;
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| {
            if spec.progressive {
                out.push(("progressive", "1".into()));
            }
        },
    },
    OptionDef {
        name: "rotate",
        doc: Doc::Row {
            values: "`0`, `90`, `180`, `270`, clockwise, after EXIF orientation (always applied)",
            default: "`0`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.rotate = match value {
                "0" => 0,
                "90" => 90,
                "180" => 180,
                "270" => 270,
                _ => return Err(SpecError::new(name, "must be 0, 90, 180 or 270")),
            };
            Ok(())
        }),
        shape_form: |shape, out| {
            if shape.rotate != 0 {
                out.push(("rotate", shape.rotate.to_string()));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "blur",
        doc: Doc::Row {
            values: "sigma 0.3–100",
            default: "off",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.blur = Some(Hundredths::parse(name, value, 30, 10_000)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "blur", shape.blur),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "sharpen",
        doc: Doc::RowOf("blur"),
        read: Read::Spec(|s, name, value| {
            s.shape.sharpen = Some(Hundredths::parse(name, value, 30, 10_000)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "sharpen", shape.sharpen),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "bg",
        doc: Doc::Row {
            values: "`rrggbb` (a leading `#` allowed) for `pad` and for flattening alpha into JPEG",
            default: "`ffffff`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.background = colour(name, value)?;
            Ok(())
        }),
        shape_form: |shape, out| {
            if shape.background != Shape::default().background {
                out.push(("bg", shape.background.to_string()));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "min_w",
        doc: Doc::Row {
            values: "the upright source must be at least this large, else 422 `source_too_small`",
            default: "none",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.min_width = Some(parse_u32(name, value, 1, u32::MAX / 2)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "min_w", shape.min_width),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "min_h",
        doc: Doc::RowOf("min_w"),
        read: Read::Spec(|s, name, value| {
            s.shape.min_height = Some(parse_u32(name, value, 1, u32::MAX / 2)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "min_h", shape.min_height),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "animated",
        doc: Doc::Row {
            values: "`1`: an animated source stays animated in GIF and WebP (every frame, with its delay, and the loop count); `0`: its first frame only. Ignored for still sources and still formats (see [Animation](#animation))",
            default: "`1`",
            extension: true,
        },
        read: Read::Spec(|s, name, value| {
            s.animated = parse_flag(name, value)?;
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |spec, out| {
            if !spec.animated {
                out.push(("animated", "0".into()));
            }
        },
    },
    OptionDef {
        name: "crop",
        doc: Doc::Row {
            values: "`W,H` or `W,H,X,Y`: the region of the source every other option works on, cut first (after EXIF orientation and `rotate`); a side is `0` (whole), pixels, or a fraction below 1 (`0.5`); `X,Y` its top-left corner, else placed by `crop_gravity`. Not with `gravity=smart`",
            default: "none",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            let region = Region::parse(name, value)?;
            s.shape.crop = (!region.is_whole()).then_some(region);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "crop", shape.crop),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "crop_gravity",
        doc: Doc::Row {
            values: "where a `crop` without a corner sits: `center` or a compass point as for `gravity`",
            default: "`center`",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.crop_gravity = match named(name, value, GRAVITIES)? {
                Gravity::Smart | Gravity::Auto => {
                    return Err(SpecError::new(name, "a crop's region sits by a compass point"))
                }
                g => g,
            };
            Ok(())
        }),
        shape_form: |shape, out| {
            if shape.crop_gravity != Shape::default().crop_gravity {
                out.push(("crop_gravity", gravity_name(shape.crop_gravity).into()));
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "trim",
        doc: Doc::Row {
            values: "0–100: borders of one colour, found on the decode from each edge inwards, are cut before the rest applies (a row or column is border when every channel of every pixel is within that percentage of 255 of the colour); a picture that is all border, or has none, is kept whole. Not with `crop`",
            default: "off",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.trim = Some(parse_u32(name, value, 0, 100)? as u8);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "trim", shape.trim),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "trim_color",
        doc: Doc::Row {
            values: "`rrggbb`: the borders' colour (with `trim`)",
            default: "the top-left pixel's",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.trim_color = Some(colour(name, value)?);
            Ok(())
        }),
        shape_form: |shape, out| push(out, "trim_color", shape.trim_color),
        request_form: |_, _| {},
    },
    OptionDef {
        name: "wm",
        doc: Doc::Row {
            values: "a watermark's name from the configuration (`[watermarks]`, `IMGCAS_WATERMARKS`): that stored original is drawn over the output (on every frame of an animation), at its configured position, scale, opacity and margin; an unknown name is 400 `invalid_option`; an overlay taken down answers 451 `taken_down`",
            default: "none",
            extension: false,
        },
        read: Read::Spec(|s, name, value| {
            s.shape.watermark = Some(Watermark::named(name, value)?);
            Ok(())
        }),
        shape_form: |shape, out| {
            if let Some(w) = &shape.watermark {
                w.parts(out);
            }
        },
        request_form: |_, _| {},
    },
    OptionDef {
        name: "wm_pos",
        doc: Doc::Row {
            values: "with `wm`: where it sits, `center` or a compass point (`north` … `southwest`)",
            default: "the watermark's",
            extension: false,
        },
        read: Read::Watermark(|w, name, value| {
            w.position = Some(watermark::position(name, value)?);
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |_, _| {},
    },
    OptionDef {
        name: "wm_scale",
        doc: Doc::Row {
            values: "with `wm`: its width as a fraction of the output's, 0.01–1 (kept within the output's height)",
            default: "the watermark's",
            extension: false,
        },
        read: Read::Watermark(|w, name, value| {
            w.scale = Some(watermark::scale(name, value)?);
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |_, _| {},
    },
    OptionDef {
        name: "wm_opacity",
        doc: Doc::Row {
            values: "with `wm`: 0 (invisible) to 1",
            default: "the watermark's",
            extension: false,
        },
        read: Read::Watermark(|w, name, value| {
            w.opacity = Some(watermark::opacity(name, value)?);
            Ok(())
        }),
        shape_form: |_, _| {},
        request_form: |_, _| {},
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The `format` option's documented values and its refusal name every output format's
    /// room (`encoders/`), so a new room cannot be left out of them.
    #[test]
    fn the_format_option_names_every_output_format() {
        let format = OPTIONS.iter().find(|o| o.name == "format").unwrap();
        let Doc::Row { values, .. } = format.doc else {
            panic!("format is documented in the table")
        };
        let mut refused = Spec::default();
        let Read::Spec(read) = format.read else {
            panic!("format is read into the spec")
        };
        let refusal = read(&mut refused, "format", "bmp").unwrap_err().to_string();
        for encoder in crate::encoders::ENCODERS {
            let name = encoder.facts().name;
            assert!(
                values.contains(&format!("`{name}`")),
                "{name} in the values"
            );
            assert!(refusal.contains(name), "{name} in `{refusal}`");
            let mut spec = Spec::default();
            read(&mut spec, "format", name).unwrap();
            assert_eq!(spec.format, FormatRequest::Exact(encoder.facts().format));
        }
    }

    #[test]
    fn every_named_value_has_its_name_both_ways() {
        for (name, fit) in FITS {
            assert_eq!(fit_name(*fit), *name);
        }
        for (name, gravity) in GRAVITIES {
            assert_eq!(gravity_name(*gravity), *name);
        }
        let fits = [
            Fit::Contain,
            Fit::Cover,
            Fit::Fill,
            Fit::Pad,
            Fit::Crop,
            Fit::Auto,
        ];
        assert!(fits.iter().all(|f| !fit_name(*f).is_empty()));
    }

    /// The rows of `docs/api.md`'s options table: the option names of the first cell, the
    /// whole first cell, the values and the default.
    fn api_rows() -> Vec<(Vec<String>, String, String, String)> {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/api.md"))
            .expect("docs/api.md");
        let table = page
            .split("### Processing options")
            .nth(1)
            .expect("the options section");
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.trim().trim_matches('|').split(" | ").collect();
                let first = cells[0].trim().to_string();
                let names = first
                    .replace(" (extension)", "")
                    .split(',')
                    .map(|n| n.trim().trim_matches('`').to_string())
                    .collect();
                (names, first, cells[1].trim().into(), cells[2].trim().into())
            })
            .collect()
    }

    /// The page's options table says what the entries say, row for row: adding an option or
    /// changing its doc line without the other fails here. (`preset` and `sig` are the
    /// image route's own parameters, not options of a spec.)
    #[test]
    fn the_api_pages_options_table_is_these_entries() {
        let rows = api_rows();
        let mut expected = Vec::new();
        for o in OPTIONS {
            let Doc::Row {
                values,
                default,
                extension,
            } = o.doc
            else {
                continue;
            };
            let mut names = vec![o.name];
            names.extend(
                OPTIONS
                    .iter()
                    .filter(|p| matches!(p.doc, Doc::RowOf(of) if of == o.name))
                    .map(|p| p.name),
            );
            let mut first: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
            if extension {
                first = vec![format!("{} (extension)", first.join(", "))];
            }
            expected.push((first.join(", "), values, default));
        }
        for (first, values, default) in &expected {
            let row = rows.iter().find(|(_, f, _, _)| f == first);
            let Some((_, _, v, d)) = row else {
                panic!("docs/api.md has no options row {first}");
            };
            assert_eq!((v.as_str(), d.as_str()), (*values, *default), "row {first}");
        }
        for (names, first, _, _) in &rows {
            let route_own = ["preset", "sig"].contains(&names[0].as_str());
            assert!(
                route_own || expected.iter().any(|(f, _, _)| f == first),
                "docs/api.md's row {first} is no option's entry"
            );
        }
        for o in OPTIONS {
            if let Doc::RowOf(of) = o.doc {
                assert!(
                    option(of).is_some_and(|p| matches!(p.doc, Doc::Row { .. })),
                    "{}",
                    o.name
                );
            }
        }
    }

    /// A spec read from every option writes each one back in its request form.
    #[test]
    fn every_option_is_read_and_written_by_its_entry() {
        let query = "w=400&h=300&fit=cover&gravity=north&enlarge=1&dpr=2&format=webp&q=70\
            &lossless=1&progressive=1&rotate=90&blur=1.5&sharpen=0.5&bg=00ff00&min_w=10&min_h=10\
            &animated=0&crop_gravity=east&trim=10&trim_color=112233&wm=logo&wm_pos=south\
            &wm_scale=0.5&wm_opacity=0.3&gravity_offset=3,-4";
        let spec = Spec::parse(query).expect("every option");
        let canonical = spec.canonical();
        for o in OPTIONS {
            assert!(
                canonical
                    .split('&')
                    .any(|p| p.starts_with(&format!("{}=", o.name)))
                    || o.name == "crop",
                "{} not written: {canonical}",
                o.name
            );
        }
        let crop = Spec::parse("crop=100,100").expect("crop");
        assert_eq!(crop.canonical(), "crop=100,100");
    }
}

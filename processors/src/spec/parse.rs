//! Parsing a request's options into a [`Spec`]: names checked against [`OPTION_NAMES`],
//! values against their ranges, an unknown or repeated option refused.

use super::*;

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
    "crop",
    "crop_gravity",
    "trim",
    "trim_color",
    "wm",
    "wm_pos",
    "wm_scale",
    "wm_opacity",
];

/// A hex colour `rrggbb` (a leading `#` allowed).
fn colour(option: &str, value: &str) -> Result<Rgb, SpecError> {
    let hex = value.strip_prefix('#').unwrap_or(value);
    let bad = || SpecError::new(option, "must be a hex colour rrggbb");
    if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let channel = |i: usize| {
        hex.get(i..i + 2)
            .and_then(|c| u8::from_str_radix(c, 16).ok())
            .ok_or_else(bad)
    };
    Ok(Rgb([channel(0)?, channel(2)?, channel(4)?]))
}

pub(super) fn gravity(option: &str, value: &str) -> Result<Gravity, SpecError> {
    Ok(match value {
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
        _ => {
            return Err(SpecError::new(
                option,
                "must be one of center, north, south, east, west, northeast, northwest, southeast, southwest, smart",
            ))
        }
    })
}

fn parse_flag(option: &str, value: &str) -> Result<bool, SpecError> {
    match value {
        "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(SpecError::new(option, "must be 0 or 1")),
    }
}

pub(super) fn parse_u32(option: &str, value: &str, min: u32, max: u32) -> Result<u32, SpecError> {
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
        // The overrides wait for `wm`, wherever it comes in the pairs.
        let mut overrides: Vec<(&str, &str)> = Vec::new();
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
            match known {
                "wm_pos" | "wm_scale" | "wm_opacity" => overrides.push((known, value)),
                _ => spec.set(known, value)?,
            }
        }
        for (name, value) in overrides {
            let Some(wm) = spec.shape.watermark.as_mut() else {
                return Err(SpecError::new(name, "needs `wm`, the watermark it adjusts"));
            };
            match name {
                "wm_pos" => wm.position = Some(watermark::position(name, value)?),
                "wm_scale" => wm.scale = Some(watermark::scale(name, value)?),
                _ => wm.opacity = Some(watermark::opacity(name, value)?),
            }
        }
        if spec.shape.crop.is_some() && spec.shape.trim.is_some() {
            return Err(SpecError::new("trim", "cannot be combined with crop"));
        }
        if spec.shape.crop.is_some() && spec.shape.gravity == Gravity::Smart {
            // Smart placement looks over the whole picture, not inside a region of it.
            return Err(SpecError::new(
                "crop",
                "cannot be combined with gravity=smart",
            ));
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
                    "crop" => Fit::Crop,
                    "auto" => Fit::Auto,
                    _ => {
                        return Err(SpecError::new(
                            name,
                            "must be one of contain, cover, fill, pad, crop, auto",
                        ))
                    }
                }
            }
            "gravity" => self.shape.gravity = gravity(name, value)?,
            "crop" => {
                let region = Region::parse(name, value)?;
                self.shape.crop = (!region.is_whole()).then_some(region);
            }
            "crop_gravity" => match gravity(name, value)? {
                Gravity::Smart => {
                    return Err(SpecError::new(
                        name,
                        "a crop's region sits by a compass point",
                    ))
                }
                g => self.shape.crop_gravity = g,
            },
            "format" => {
                self.format = match value {
                    "original" => FormatRequest::Original,
                    "auto" => FormatRequest::Auto,
                    other => {
                        FormatRequest::Exact(OutputFormat::from_name(other).ok_or_else(|| {
                            SpecError::new(
                                name,
                                "must be one of jpeg, png, webp, avif, gif, auto, original",
                            )
                        })?)
                    }
                }
            }
            "bg" => self.shape.background = colour(name, value)?,
            "trim" => self.shape.trim = Some(parse_u32(name, value, 0, 100)? as u8),
            "trim_color" => self.shape.trim_color = Some(colour(name, value)?),
            "wm" => self.shape.watermark = Some(Watermark::named(name, value)?),
            _ => unreachable!("option names are checked against OPTION_NAMES"),
        }
        Ok(())
    }
}

//! How option values are read and named: colours, flags, whole numbers in a range, and the
//! tables of named values (`FITS`, `GRAVITIES`), each read and written from the same line.
//! Below `options.rs` (the entries that use them) and `watermark.rs` (a configuration's
//! watermark settings take the same values).

use super::{Fit, Gravity, Rgb, SpecError};

/// The named values of `fit`, in the order errors list them.
pub(super) const FITS: &[(&str, Fit)] = &[
    ("contain", Fit::Contain),
    ("cover", Fit::Cover),
    ("fill", Fit::Fill),
    ("pad", Fit::Pad),
    ("crop", Fit::Crop),
    ("auto", Fit::Auto),
];

/// The named values of `gravity` (`crop_gravity` and `wm_pos` take the compass points).
pub(super) const GRAVITIES: &[(&str, Gravity)] = &[
    ("center", Gravity::Center),
    ("north", Gravity::North),
    ("south", Gravity::South),
    ("east", Gravity::East),
    ("west", Gravity::West),
    ("northeast", Gravity::NorthEast),
    ("northwest", Gravity::NorthWest),
    ("southeast", Gravity::SouthEast),
    ("southwest", Gravity::SouthWest),
    ("smart", Gravity::Smart),
    ("auto", Gravity::Auto),
];

/// A named value, read by its table.
pub(super) fn named<T: Copy>(
    option: &str,
    value: &str,
    table: &[(&str, T)],
) -> Result<T, SpecError> {
    match table.iter().find(|(name, _)| *name == value) {
        Some((_, v)) => Ok(*v),
        None => {
            let names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
            Err(SpecError::new(
                option,
                format!("must be one of {}", names.join(", ")),
            ))
        }
    }
}

/// A named value's name, from its table (every value has one: a test checks).
fn name_of<T: Copy + PartialEq>(value: T, table: &[(&'static str, T)]) -> &'static str {
    table
        .iter()
        .find(|(_, v)| *v == value)
        .map_or("", |(name, _)| *name)
}

pub(super) fn fit_name(f: Fit) -> &'static str {
    name_of(f, FITS)
}

pub(super) fn gravity_name(g: Gravity) -> &'static str {
    name_of(g, GRAVITIES)
}

/// A hex colour `rrggbb` (a leading `#` allowed).
pub(super) fn colour(option: &str, value: &str) -> Result<Rgb, SpecError> {
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

/// A `gravity` value (`crop_gravity` and `wm_pos` read their compass points through this).
pub(super) fn gravity(option: &str, value: &str) -> Result<Gravity, SpecError> {
    named(option, value, GRAVITIES)
}

pub(super) fn parse_flag(option: &str, value: &str) -> Result<bool, SpecError> {
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

//! `crop=W,H[,X,Y]`: the part of the source every other option works on, cut first (after
//! EXIF orientation and `rotate`). A side is `0` (the whole side), pixels, or a fraction of
//! the side below 1 (`0.5`); without `X,Y` the region sits by `crop_gravity`. imgproxy's
//! `crop` and thumbor's manual crop say the same.

use std::fmt;

use super::{Gravity, SpecError};

/// One side of a [`Region`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    Whole,
    Pixels(u32),
    /// Ten-thousandths of the side (1–9,999).
    Fraction(u16),
}

/// A region of the source: its size, and where its top-left corner is, if said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub width: Extent,
    pub height: Extent,
    pub at: Option<(u32, u32)>,
}

/// A region in source pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
}

fn extent(option: &str, text: &str) -> Result<Extent, SpecError> {
    let bad = || SpecError::new(option, "a side is 0 (whole), pixels, or a fraction below 1");
    if text == "0" {
        return Ok(Extent::Whole);
    }
    if text.contains('.') {
        let v: f64 = text.parse().map_err(|_| bad())?;
        let parts = (v * 10_000.0).round();
        return match (1.0..=9_999.0).contains(&parts) {
            true => Ok(Extent::Fraction(parts as u16)),
            false => Err(bad()),
        };
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=u32::MAX / 2).contains(&n) => Ok(Extent::Pixels(n)),
        _ => Err(bad()),
    }
}

impl Region {
    pub fn parse(option: &str, value: &str) -> Result<Region, SpecError> {
        let parts: Vec<&str> = value.split(',').collect();
        let at = |i: usize| -> Result<u32, SpecError> {
            parts[i]
                .parse()
                .map_err(|_| SpecError::new(option, "X and Y are whole pixels"))
        };
        let (width, height) = match parts.len() {
            2 | 4 => (extent(option, parts[0])?, extent(option, parts[1])?),
            _ => return Err(SpecError::new(option, "must be W,H or W,H,X,Y")),
        };
        let at = match parts.len() {
            4 => Some((at(2)?, at(3)?)),
            _ => None,
        };
        Ok(Region { width, height, at })
    }

    /// Whether it keeps the whole source whatever its size.
    pub fn is_whole(&self) -> bool {
        self.width == Extent::Whole && self.height == Extent::Whole && self.at.is_none()
    }

    /// The same region for the source drawn `scale` times its own size (a drawing, SVG): its
    /// pixels scaled with it, its fractions unchanged.
    pub fn scaled(&self, scale: f64) -> Region {
        let px = |n: u32| ((f64::from(n) * scale).round() as u32).max(1);
        let side = |e: Extent| match e {
            Extent::Pixels(n) => Extent::Pixels(px(n)),
            other => other,
        };
        Region {
            width: side(self.width),
            height: side(self.height),
            at: self.at.map(|(x, y)| {
                let at = |v: u32| (f64::from(v) * scale).round() as u32;
                (at(x), at(y))
            }),
        }
    }

    /// The region of a source `(sw, sh)` pixels large, placed by its corner or by `gravity`;
    /// never empty, never past the source.
    pub fn within(&self, source: (u32, u32), gravity: Gravity) -> Placed {
        let side = |e: Extent, s: u32| match e {
            Extent::Whole => s,
            Extent::Pixels(n) => n.min(s),
            Extent::Fraction(f) => {
                ((f64::from(s) * f64::from(f) / 10_000.0).round() as u32).clamp(1, s.max(1))
            }
        };
        let (sw, sh) = (source.0.max(1), source.1.max(1));
        let (w, h) = (side(self.width, sw), side(self.height, sh));
        let (left, top, w, h) = match self.at {
            Some((x, y)) => {
                let (x, y) = (x.min(sw - 1), y.min(sh - 1));
                (x, y, w.min(sw - x).max(1), h.min(sh - y).max(1))
            }
            None => {
                let (ax, ay) = gravity.anchor();
                let place = |free: u32, a: f64| (f64::from(free) * a).round() as u32;
                (place(sw - w, ax), place(sh - h, ay), w, h)
            }
        };
        Placed {
            left: f64::from(left),
            top: f64::from(top),
            width: f64::from(w),
            height: f64::from(h),
        }
    }
}

impl fmt::Display for Extent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Extent::Whole => write!(f, "0"),
            Extent::Pixels(n) => write!(f, "{n}"),
            Extent::Fraction(parts) => write!(f, "{}", f64::from(*parts) / 10_000.0),
        }
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.width, self.height)?;
        if let Some((x, y)) = self.at {
            write!(f, ",{x},{y}")?;
        }
        Ok(())
    }
}

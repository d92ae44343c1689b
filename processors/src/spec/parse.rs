//! Parsing a request's options into a [`Spec`]: each read by its entry in `options.rs`, an
//! unknown or repeated option refused, and the options that cannot stand together refused.

use super::options::{option, OPTIONS};
use super::*;

impl Spec {
    /// Parses `(name, value)` pairs (a query string without `url` and `sig`).
    /// Order does not matter; a repeated or unknown option is an error.
    pub fn from_pairs<'a, I>(pairs: I) -> Result<Spec, SpecError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut spec = Spec::default();
        let mut seen: Vec<&str> = Vec::new();
        // The watermark's adjustments wait for `wm`, wherever it comes in the pairs.
        let mut later = Vec::new();
        for (name, value) in pairs {
            let Some(known) = option(name) else {
                let names: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
                return Err(SpecError::new(
                    name,
                    format!("unknown option (known: {})", names.join(", ")),
                ));
            };
            if seen.contains(&known.name) {
                return Err(SpecError::new(name, "given more than once"));
            }
            seen.push(known.name);
            known.read(&mut spec, value, &mut later)?;
        }
        for (known, value) in later {
            known.read_later(&mut spec, value)?;
        }
        if spec.shape.crop.is_some() && spec.shape.trim.is_some() {
            return Err(SpecError::new("trim", "cannot be combined with crop"));
        }
        if spec.shape.gravity_offset != (0, 0) && !spec.shape.gravity.is_compass() {
            return Err(SpecError::new(
                "gravity_offset",
                "moves a window from a compass gravity: not with smart or a focal point",
            ));
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
}

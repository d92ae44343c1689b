//! What an SVG document amounts to once its references are followed (`<use>`, `url(#id)`,
//! `<tref>`), counted on the XML before usvg converts it: the elements a copy makes, and the
//! text it will lay out, with the work of that layout ([`layout_work`]), and how long, in
//! device units, a path that text is laid along can be ([`check_text_paths`]). `svg.rs`
//! refuses a document by these counts before any conversion.

use std::collections::HashMap;

use resvg::usvg::roxmltree;

use crate::error::ProcessError;

/// How deep elements may nest (usvg converts groups recursively).
pub const MAX_DEPTH: usize = 96;
/// Elements once every reference is counted as the copy it makes.
pub const MAX_EXPANDED: u64 = 200_000;

fn undecodable(what: impl std::fmt::Display) -> ProcessError {
    super::undecodable("SVG", what)
}

/// The elements a document amounts to once references are followed: each element counts
/// itself, its children, and every element it references (`href="#id"`, `url(#id)`) again,
/// as usvg copies a `<use>` target or a paint server per reference.
pub(super) struct Expansion<'d, 'input> {
    root: roxmltree::Node<'d, 'input>,
    by_id: HashMap<&'d str, roxmltree::Node<'d, 'input>>,
    /// Counted elements and characters of text (by node id, and whether it stands inside
    /// a text: its characters count only there); `None` while being counted (a reference
    /// loop, which usvg cuts: counted as nothing).
    counted: HashMap<(roxmltree::NodeId, bool), Option<Counted>>,
}

/// What an element amounts to once its references are followed.
#[derive(Clone, Copy, Default)]
struct Counted {
    elements: u64,
    /// Characters usvg lays out as text: those inside `<text>`, and what a `<tref>` copies.
    chars: u64,
    /// The work of laying its texts out ([`layout_work`] of each `<text>`'s characters).
    layout: u64,
}

/// The work of laying out one `<text>` of `chars` characters, in the units of
/// [`drawing_work`]. usvg's layout is quadratic in a text's length (each cluster looks its
/// character up from the text's start): measured on usvg 0.49 here, 1,000 characters took
/// 4 ms, 20,000 took 0.7 s (1.65 ns × chars²), 90,000 took 11–13 s. Charged at about twice
/// that, so that a text is refused before it is laid out, never after.
pub(crate) fn layout_work(chars: u64) -> u64 {
    (chars.saturating_mul(chars) / 4).saturating_add(chars.saturating_mul(300))
}

impl<'d, 'input> Expansion<'d, 'input> {
    pub(super) fn new(document: &'d roxmltree::Document<'input>) -> Self {
        let by_id = document
            .descendants()
            .filter_map(|n| n.attribute("id").map(|id| (id, n)))
            .collect();
        Expansion {
            root: document.root_element(),
            by_id,
            counted: HashMap::new(),
        }
    }

    /// Refuses a document over [`MAX_EXPANDED`] elements; else the work of laying out its
    /// texts, every copy counted.
    pub(super) fn check(mut self) -> Result<u64, ProcessError> {
        self.count(self.root, 0, false).map(|c| c.layout)
    }

    /// `in_text`: the node is inside a `<text>` (its character data is laid out).
    fn count(
        &mut self,
        node: roxmltree::Node<'d, 'input>,
        hops: usize,
        in_text: bool,
    ) -> Result<Counted, ProcessError> {
        // Tree depth is checked already; references add hops (a chain of `use`s).
        if hops > 4 * MAX_DEPTH {
            return Err(undecodable("references chain too deep"));
        }
        let name = node.tag_name().name();
        let in_text = in_text || name == "text";
        let key = (node.id(), in_text);
        match self.counted.get(&key) {
            Some(Some(n)) => return Ok(*n),
            Some(None) => return Ok(Counted::default()),
            None => {}
        }
        self.counted.insert(key, None);
        let mut total = Counted {
            elements: 1,
            chars: 0,
            layout: 0,
        };
        if in_text {
            let own: usize = node
                .children()
                .filter(|c| c.is_text())
                .map(|c| c.text().map_or(0, |t| t.chars().count()))
                .sum();
            total.chars = own as u64;
        }
        let targets: Vec<roxmltree::Node<'d, 'input>> = node
            .attributes()
            .flat_map(|a| references(a.value()))
            .filter_map(|id| self.by_id.get(id).copied())
            .collect();
        // A `tref` copies its target's character data into the text.
        if name == "tref" && in_text {
            for target in &targets {
                let copied: usize = target
                    .descendants()
                    .filter(|d| d.is_text())
                    .map(|d| d.text().map_or(0, |t| t.chars().count()))
                    .sum();
                total.chars = total.chars.saturating_add(copied as u64);
            }
        }
        let children = node.children().filter(|c| c.is_element());
        for next in children
            .map(|c| (c, in_text))
            .chain(targets.into_iter().map(|t| (t, false)))
        {
            let counted = self.count(next.0, hops + 1, next.1)?;
            total.elements = total.elements.saturating_add(counted.elements);
            total.chars = total.chars.saturating_add(counted.chars);
            total.layout = total.layout.saturating_add(counted.layout);
            if total.elements > MAX_EXPANDED {
                return Err(undecodable(format!(
                    "more than {MAX_EXPANDED} elements once its references are followed"
                )));
            }
        }
        // A text is laid out as a whole: its characters, nested spans' included.
        if name == "text" {
            total.layout = total.layout.saturating_add(layout_work(total.chars));
        }
        self.counted.insert(key, Some(total));
        Ok(total)
    }
}

/// The ids an attribute value refers to: `#id` (an `href`) and every `url(#id)`.
pub(super) fn references(value: &str) -> Vec<&str> {
    let mut ids = Vec::new();
    if let Some(id) = value.strip_prefix('#') {
        ids.push(id.trim());
    }
    let mut rest = value;
    while let Some(at) = rest.find("url(") {
        rest = &rest[at + 4..];
        let inner = rest.split(')').next().unwrap_or_default();
        let inner = inner.trim().trim_matches(|c| c == '"' || c == '\'');
        if let Some(id) = inner.strip_prefix('#') {
            ids.push(id);
        }
    }
    ids
}

/// The longest path text may be laid along, in device units (its length in user units times
/// the scale it is laid out at): beyond, usvg's placement of each glyph (kurbo's inverse arc
/// length at half a device unit's accuracy) asks more precision than a float has, and one
/// 14-character text on a path from y = 10^27 ran for minutes (a fuzz find; measured here:
/// fast up to 10^18, endless from 10^20). Nothing drawn is that long.
pub const MAX_TEXT_PATH_UNITS: f64 = 1e12;

/// Refuses a document with a `<textPath>` whose path may be longer than
/// [`MAX_TEXT_PATH_UNITS`] device units, bounded from above on the XML: its length by twice
/// the sum of the numbers in the path's data (a polyline's, or a curve's control polygon's,
/// length is at most that), the scale by the product of every upscaling the document holds
/// (each `transform`, `patternTransform` and `viewBox` taken at most once: no chain of
/// references applies one twice).
pub(super) fn check_text_paths(document: &roxmltree::Document) -> Result<(), ProcessError> {
    let text_paths: Vec<_> = document
        .descendants()
        .filter(|n| n.tag_name().name() == "textPath")
        .collect();
    if text_paths.is_empty() {
        return Ok(());
    }
    // A symbol's viewport is the size a `<use>` gives it: any of them.
    let largest_use = document
        .descendants()
        .filter(|n| n.tag_name().name() == "use")
        .flat_map(|n| ["width", "height"].map(|a| n.attribute(a)))
        .flatten()
        .filter_map(|v| numbers(v).next())
        .fold(None, |a: Option<f64>, b| {
            Some(a.unwrap_or(0.0).max(b.abs()))
        });
    let scale: f64 = document
        .descendants()
        .filter(|n| n.is_element())
        .map(|n| upscaling(&n, largest_use))
        .fold(1.0, |a, b| a * b);
    // Read once, for every text path's reference.
    let by_id: HashMap<&str, roxmltree::Node> = document
        .descendants()
        .filter_map(|n| n.attribute("id").map(|id| (id, n)))
        .collect();
    for text_path in text_paths {
        let mut data = text_path.attribute("path").map(numbers_sum).unwrap_or(0.0);
        for id in text_path.attributes().flat_map(|a| references(a.value())) {
            let Some(target) = by_id.get(id) else {
                continue;
            };
            data += target
                .attributes()
                .filter(|a| a.name() != "id" && a.name() != "transform")
                .map(|a| numbers_sum(a.value()))
                .sum::<f64>();
        }
        let units = 2.0 * data * scale;
        if units.is_nan() || units > MAX_TEXT_PATH_UNITS {
            return Err(undecodable(format!(
                "text laid along a path that may be {units:.1e} device units long (at most {MAX_TEXT_PATH_UNITS:.0e})"
            )));
        }
    }
    Ok(())
}

/// At most how much an element's own transforms and viewport may enlarge what it holds
/// (1 when they only shrink or move it); `largest_use`: the largest size a `<use>` gives.
fn upscaling(node: &roxmltree::Node, largest_use: Option<f64>) -> f64 {
    let mut scale = 1.0f64;
    for name in ["transform", "patternTransform"] {
        if let Some(list) = node.attribute(name) {
            scale *= transform_upscaling(list);
        }
    }
    if let Some(view_box) = node.attribute("viewBox") {
        let boxed: Vec<f64> = numbers(view_box).map(f64::abs).collect();
        let side = |attributes: [&str; 2]| {
            attributes
                .iter()
                .filter_map(|a| node.attribute(*a))
                .filter_map(|v| numbers(v).next())
                .map(f64::abs)
                .next()
        };
        let symbol = node.tag_name().name() == "symbol";
        let (width, height) = match (
            side(["width", "markerWidth"]),
            side(["height", "markerHeight"]),
        ) {
            (None, None) if symbol => (largest_use, largest_use),
            sides => sides,
        };
        if let [_, _, box_width, box_height, ..] = boxed[..] {
            let sx = width.map(|w| w / box_width.max(1e-300));
            let sy = height.map(|h| h / box_height.max(1e-300));
            // One side given: the other scales alike (the aspect is kept).
            let factor = match (sx, sy) {
                (Some(x), Some(y)) => x.max(y),
                (Some(s), None) | (None, Some(s)) => s,
                (None, None) => 1.0,
            };
            scale *= enlarging(factor);
        }
    }
    scale
}

/// At most how much a transform list enlarges: the product of its functions' bounds (a
/// matrix by its linear part's largest singular value, a scale by its larger factor, a skew
/// by 1 + |tan|; moves and rotations by 1). A function of no known name counts by all its
/// numbers, so a misspelling cannot hide a scale.
fn transform_upscaling(list: &str) -> f64 {
    let mut scale = 1.0f64;
    for function in list.split(')') {
        let Some((name, args)) = function.split_once('(') else {
            continue;
        };
        let name = name.trim_matches(|c: char| c.is_whitespace() || c == ',');
        let args: Vec<f64> = numbers(args).collect();
        let arg = |i: usize| args.get(i).copied().unwrap_or(0.0).abs();
        let factor = match name {
            "translate" | "rotate" => 1.0,
            "scale" => arg(0).max(if args.len() > 1 { arg(1) } else { arg(0) }),
            "matrix" => {
                // The linear part's largest singular value.
                let raw = |i: usize| args.get(i).copied().unwrap_or(0.0);
                let (a, b, c, d) = (raw(0), raw(1), raw(2), raw(3));
                let squares = a * a + b * b + c * c + d * d;
                let det = a * d - b * c;
                ((squares + (squares * squares - 4.0 * det * det).max(0.0).sqrt()) / 2.0).sqrt()
            }
            "skewX" | "skewY" => 1.0 + arg(0).to_radians().tan().abs(),
            _ => args.iter().map(|n| n.abs() + 1.0).product(),
        };
        scale *= enlarging(factor);
    }
    scale
}

/// A scale factor as an upscaling: at least 1, and the largest float for one that is none.
fn enlarging(factor: f64) -> f64 {
    if factor.is_finite() {
        factor.max(1.0)
    } else {
        f64::MAX
    }
}

/// The sum of the magnitudes of the numbers in an attribute's value.
fn numbers_sum(value: &str) -> f64 {
    numbers(value).map(f64::abs).sum()
}

/// The numbers in an attribute's value (path data, transform lists, lists of lengths),
/// read as path data writes them: a sign only first or after an exponent's `e`, one point,
/// and a second point or sign starting the next number (`-5e3.5.25` is -5000, 0.5, 0.25).
fn numbers(value: &str) -> impl Iterator<Item = f64> + '_ {
    let bytes = value.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || loop {
        while at < bytes.len() && !matches!(bytes[at], b'0'..=b'9' | b'.' | b'-' | b'+') {
            at += 1;
        }
        if at >= bytes.len() {
            return None;
        }
        let start = at;
        let (mut point, mut exponent, mut digits) = (false, false, false);
        if matches!(bytes[at], b'-' | b'+') {
            at += 1;
        }
        while at < bytes.len() {
            match bytes[at] {
                b'0'..=b'9' => digits = true,
                b'.' if !point && !exponent => point = true,
                b'e' | b'E' if digits && !exponent => {
                    exponent = true;
                    if matches!(bytes.get(at + 1), Some(b'-' | b'+')) {
                        at += 1;
                    }
                }
                _ => break,
            }
            at += 1;
        }
        match value[start..at].parse::<f64>() {
            Ok(n) if n.is_finite() => return Some(n),
            // Beyond a float: as large as one gets.
            Ok(_) => return Some(f64::MAX),
            // `1em`: a number and a unit, not an exponent.
            Err(_) if exponent => {
                let mantissa = value[start..at].split(['e', 'E']).next().unwrap_or("");
                if let Ok(n) = mantissa.parse::<f64>() {
                    return Some(n);
                }
            }
            // A lone sign or point: no number.
            Err(_) => continue,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_on(path: &str, wrap: (&str, &str), root: &str) -> String {
        format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" {root}>
<path id="p" d="{path}"/>{}<text font-size="24"><textPath xlink:href="#p">Some long text</textPath></text>{}
</svg>"##,
            wrap.0, wrap.1
        )
    }

    fn checked(svg: &str) -> Result<(), ProcessError> {
        check_text_paths(&roxmltree::Document::parse(svg).unwrap())
    }

    const CURVE: &str = "M 20 100 C 35 135 85 135 100 200 C 115 65 165 65 180 100";
    const BOX: &str = r#"viewBox="0 0 200 200""#;

    /// The fuzz find (a text along a path from y = 10^27, minutes of usvg's layout) and the
    /// same length reached by scaling instead: refused before usvg sees them. Paths as long
    /// as drawings have, moved and rotated anyhow, and icons drawn large, are laid out.
    #[test]
    fn text_along_a_path_too_long_to_place_glyphs_on_is_refused() {
        let far = "M 20 1088888888888888888888888880 C 35 135 85 135 100 200";
        assert!(checked(&text_on(far, ("", ""), BOX)).is_err());
        let long = "M 20 10000000000 C 35 135 85 135 100 200";
        assert!(checked(&text_on(long, ("", ""), BOX)).is_ok());
        for (wrap, root) in [
            (("<g transform=\"scale(1e10)\">", "</g>"), BOX),
            (
                (
                    "<g transform=\"scale(100000)\"><g transform=\"matrix(0 100000 1 0 0 0)\">",
                    "</g></g>",
                ),
                BOX,
            ),
            (("", ""), r#"width="1e12" viewBox="0 0 1 1""#),
            (
                (
                    "<symbol id=\"s\" viewBox=\"0 0 0.000001 0.000001\">",
                    "</symbol><use href=\"#s\" width=\"100000\"/>",
                ),
                BOX,
            ),
        ] {
            let svg = text_on(long, wrap, root);
            assert!(checked(&svg).is_err(), "{svg}");
        }
        for (wrap, root) in [
            (("", ""), BOX),
            (
                (
                    "<g transform=\"translate(100000 -100000) rotate(89) skewX(30)\">",
                    "</g>",
                ),
                r#"width="4000" height="4000" viewBox="0 0 200 200""#,
            ),
            (
                (
                    "<symbol id=\"s\" viewBox=\"0 0 24 24\">",
                    "</symbol><use href=\"#s\" width=\"1000\" height=\"1000\"/>",
                ),
                BOX,
            ),
        ] {
            let svg = text_on(CURVE, wrap, root);
            assert!(checked(&svg).is_ok(), "{svg}");
        }
        // Documents with no text along a path are not looked at.
        let no_text = format!(r#"<svg xmlns="http://www.w3.org/2000/svg"><path d="{far}"/></svg>"#);
        assert!(checked(&no_text).is_ok());
    }

    #[test]
    fn numbers_are_read_as_path_data_writes_them() {
        let read: Vec<f64> = numbers("M20-5e3.5.25L1e+2,-.5z").collect();
        assert_eq!(read, vec![20.0, -5e3, 0.5, 0.25, 100.0, -0.5]);
        assert_eq!(transform_upscaling("translate(5e9) rotate(90)"), 1.0);
        assert_eq!(
            transform_upscaling("scale(2, 30) matrix(1 0 0 1 9e9 9e9)"),
            30.0
        );
        let rotated_twice = transform_upscaling("matrix(0 2 -2 0 5 5)");
        assert!((rotated_twice - 2.0).abs() < 1e-9, "{rotated_twice}");
        assert_eq!(numbers("2em 1e").collect::<Vec<_>>(), vec![2.0, 1.0]);
        assert!(transform_upscaling("sacle(1e200)") > 1e199);
    }
}

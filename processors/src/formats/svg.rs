//! SVG: logos and icons, rasterised by resvg (pure Rust) at the size the output needs, so that
//! `w=800` of a 100-pixel-wide logo is drawn at 800 pixels, never a small raster enlarged.
//!
//! An SVG is a document that can point elsewhere and multiply itself, so it is held to bounds
//! before usvg converts it: at most [`MAX_NODES`] XML nodes, nesting at most [`MAX_DEPTH`]
//! deep, no entity declarations (the billion-laughs family), and at most [`MAX_EXPANDED`]
//! elements once every `<use>` and `url(#…)` reference is counted as the copy it makes (the
//! same bomb with references). Nothing outside the document is ever read: `<image>` links to
//! files or URLs resolve to nothing, embedded `data:` images are drawn only when they are
//! PNG, JPEG, GIF or WebP whose header this crate's own rooms read within
//! [`MAX_EMBEDDED_PIXELS`] (an embedded SVG is not drawn), and fonts are the system's only
//! (loaded once). usvg runs no script and has no `<foreignObject>` content; SVG is never an
//! output format, so what a document carries never reaches a browser.
//!
//! Filters are costed before drawing: a filter's work grows with its region's pixels at the
//! drawn size and, for `feMorphology`, with its radius, not with the output's pixels (a
//! 2.5 KB document of 60 dilated rectangles took 47 s of one core at 400×400). The drawing is
//! refused as `too_costly` when its filters' work ([`filter_work`]) is over `limits.max_cost`.
//!
//! The declared size is the picture's own size (the `w`/`h` a request leaves out); one over
//! the pixel limit is taken at the largest size within it, as the declaration is nominal.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use image::{DynamicImage, RgbaImage};
use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{self, fontdb, roxmltree, ImageHrefResolver, ImageKind};

use super::{DecodeAt, Decoded, Decoder, Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

/// XML nodes (elements, text, comments) a document may hold.
pub const MAX_NODES: u32 = 100_000;
/// How deep elements may nest (usvg converts groups recursively).
pub const MAX_DEPTH: usize = 96;
/// Elements once every reference is counted as the copy it makes.
pub const MAX_EXPANDED: u64 = 200_000;
/// The most pixels an embedded raster image may declare.
pub const MAX_EMBEDDED_PIXELS: u64 = 4096 * 4096;
/// How far into the bytes the root `<svg` element is looked for (past the XML declaration,
/// comments and a doctype).
const PROLOG_BYTES: usize = 64 * 1024;

pub(crate) struct Svg;

impl Format for Svg {
    /// `<svg` as the first element, after an optional byte-order mark, XML declaration,
    /// comments, processing instructions and doctype: an HTML page with an inline icon is
    /// not an SVG.
    fn sniff(&self, bytes: &[u8]) -> bool {
        root_is_svg(bytes)
    }

    fn open<'a>(&self, bytes: &'a [u8], limits: &Limits) -> Result<Header<'a>, ProcessError> {
        let tree = parse(bytes)?;
        let (width, height) = own_size(&tree, limits);
        Ok(Header::plain(width, height, true, Drawing { tree }))
    }

    fn is_vector(&self) -> bool {
        true
    }
}

fn undecodable(what: impl std::fmt::Display) -> ProcessError {
    super::undecodable("SVG", what)
}

/// Whether the first element of the bytes is `<svg`.
fn root_is_svg(bytes: &[u8]) -> bool {
    let b = &bytes[..bytes.len().min(PROLOG_BYTES)];
    let mut at = if b.starts_with(b"\xEF\xBB\xBF") { 3 } else { 0 };
    loop {
        while b.get(at).is_some_and(|c| c.is_ascii_whitespace()) {
            at += 1;
        }
        let rest = &b[at.min(b.len())..];
        let skip_to = |end: &[u8]| memchr::memmem::find(rest, end).map(|i| at + i + end.len());
        let next = if rest.starts_with(b"<?") {
            skip_to(b"?>")
        } else if rest.starts_with(b"<!--") {
            skip_to(b"-->")
        } else if rest.starts_with(b"<!DOCTYPE") || rest.starts_with(b"<!doctype") {
            // An internal subset may hold `>`: it ends at `]>`.
            match (memchr::memchr(b'[', rest), memchr::memchr(b'>', rest)) {
                (Some(open), Some(close)) if open < close => skip_to(b"]>"),
                (_, Some(close)) => Some(at + close + 1),
                _ => None,
            }
        } else {
            return rest.starts_with(b"<svg")
                && rest
                    .get(4)
                    .is_some_and(|c| c.is_ascii_whitespace() || *c == b'>' || *c == b'/');
        };
        match next {
            Some(next) => at = next,
            None => return false,
        }
    }
}

/// The document, bounded (see the module's doc), converted by usvg.
fn parse(bytes: &[u8]) -> Result<usvg::Tree, ProcessError> {
    let text = std::str::from_utf8(bytes).map_err(|_| undecodable("the document is not UTF-8"))?;
    if memchr::memmem::find(bytes, b"<!ENTITY").is_some() {
        return Err(undecodable("entity declarations are not accepted"));
    }
    let xml = roxmltree::ParsingOptions {
        allow_dtd: true,
        nodes_limit: MAX_NODES,
        // External entities resolve to nothing (and declarations are refused above).
        entity_resolver: None,
    };
    let document = roxmltree::Document::parse_with_options(text, xml).map_err(|e| match e {
        roxmltree::Error::NodesLimitReached => {
            undecodable(format!("more than {MAX_NODES} XML nodes"))
        }
        other => undecodable(other),
    })?;
    check_depth(&document)?;
    Expansion::new(&document).check()?;
    usvg::Tree::from_xmltree(&document, &options()).map_err(undecodable)
}

/// Refuses nesting deeper than [`MAX_DEPTH`], in one pass in document order (a parent comes
/// before its children), without recursion.
fn check_depth(document: &roxmltree::Document) -> Result<(), ProcessError> {
    let mut depths: HashMap<roxmltree::NodeId, usize> = HashMap::new();
    for node in document.descendants().filter(|n| n.is_element()) {
        let parent = node.parent().and_then(|p| depths.get(&p.id()).copied());
        let depth = parent.unwrap_or(0) + 1;
        if depth > MAX_DEPTH {
            return Err(undecodable(format!(
                "elements nest more than {MAX_DEPTH} deep"
            )));
        }
        depths.insert(node.id(), depth);
    }
    Ok(())
}

/// The elements a document amounts to once references are followed: each element counts
/// itself, its children, and every element it references (`href="#id"`, `url(#id)`) again,
/// as usvg copies a `<use>` target or a paint server per reference.
struct Expansion<'d, 'input> {
    root: roxmltree::Node<'d, 'input>,
    by_id: HashMap<&'d str, roxmltree::Node<'d, 'input>>,
    /// Counted elements (by node id); `None` while being counted (a reference loop, which
    /// usvg cuts: counted as nothing).
    counted: HashMap<roxmltree::NodeId, Option<u64>>,
}

impl<'d, 'input> Expansion<'d, 'input> {
    fn new(document: &'d roxmltree::Document<'input>) -> Self {
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

    fn check(mut self) -> Result<(), ProcessError> {
        self.count(self.root, 0).map(|_| ())
    }

    fn count(
        &mut self,
        node: roxmltree::Node<'d, 'input>,
        hops: usize,
    ) -> Result<u64, ProcessError> {
        // Tree depth is checked already; references add hops (a chain of `use`s).
        if hops > 4 * MAX_DEPTH {
            return Err(undecodable("references chain too deep"));
        }
        match self.counted.get(&node.id()) {
            Some(Some(n)) => return Ok(*n),
            Some(None) => return Ok(0),
            None => {}
        }
        self.counted.insert(node.id(), None);
        let mut total: u64 = 1;
        let targets: Vec<roxmltree::Node<'d, 'input>> = node
            .attributes()
            .flat_map(|a| references(a.value()))
            .filter_map(|id| self.by_id.get(id).copied())
            .collect();
        for next in node.children().filter(|c| c.is_element()).chain(targets) {
            total = total.saturating_add(self.count(next, hops + 1)?);
            if total > MAX_EXPANDED {
                return Err(undecodable(format!(
                    "more than {MAX_EXPANDED} elements once its references are followed"
                )));
            }
        }
        self.counted.insert(node.id(), Some(total));
        Ok(total)
    }
}

/// The ids an attribute value refers to: `#id` (an `href`) and every `url(#id)`.
fn references(value: &str) -> Vec<&str> {
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

/// The system's fonts, loaded once: text draws with them and with nothing the document names
/// by URL or path. The generic families (`sans-serif`, `serif`, `monospace`, and text that
/// names none) are the first of the usual free faces the system has, else any face it has.
static FONTS: LazyLock<(Arc<fontdb::Database>, String)> = LazyLock::new(|| {
    let mut fonts = fontdb::Database::new();
    fonts.load_system_fonts();
    let families: Vec<String> = fonts
        .faces()
        .flat_map(|face| face.families.iter().map(|(name, _)| name.clone()))
        .collect();
    let pick = |wanted: &[&str]| {
        wanted
            .iter()
            .find(|w| families.iter().any(|f| f == *w))
            .map(|w| w.to_string())
            .or_else(|| families.first().cloned())
    };
    let sans = pick(&["DejaVu Sans", "Liberation Sans", "Noto Sans", "Arial"]);
    if let Some(serif) = pick(&["DejaVu Serif", "Liberation Serif", "Noto Serif"]) {
        fonts.set_serif_family(serif);
    }
    if let Some(mono) = pick(&["DejaVu Sans Mono", "Liberation Mono", "Noto Sans Mono"]) {
        fonts.set_monospace_family(mono);
    }
    if let Some(sans) = &sans {
        fonts.set_sans_serif_family(sans.clone());
    }
    (Arc::new(fonts), sans.unwrap_or_default())
});

/// usvg's options: no resources directory, no file or URL images, embedded rasters only
/// through [`embedded`], the shared fonts (their sans-serif face for text naming none).
fn options() -> usvg::Options<'static> {
    usvg::Options {
        resources_dir: None,
        image_href_resolver: ImageHrefResolver {
            resolve_data: Box::new(|_mime, data, _| embedded(data)),
            resolve_string: Box::new(|_href, _| None),
        },
        fontdb: FONTS.0.clone(),
        font_family: FONTS.1.clone(),
        ..usvg::Options::default()
    }
}

/// An embedded `data:` image, when its bytes are PNG, JPEG, GIF or WebP (whatever the declared
/// type says) and its header, read by this crate's own rooms, declares at most
/// [`MAX_EMBEDDED_PIXELS`].
fn embedded(data: Arc<Vec<u8>>) -> Option<ImageKind> {
    use super::SourceFormat as F;
    let limits = Limits {
        max_pixels: MAX_EMBEDDED_PIXELS,
        ..Limits::default()
    };
    let info = crate::decode::probe(&data, &limits).ok()?;
    match info.format {
        F::Png => Some(ImageKind::PNG(data)),
        F::Jpeg => Some(ImageKind::JPEG(data)),
        F::Gif => Some(ImageKind::GIF(data)),
        F::Webp => Some(ImageKind::WEBP(data)),
        _ => None,
    }
}

/// The declared size in whole pixels, scaled down to fit the pixel limit when it is over.
fn own_size(tree: &usvg::Tree, limits: &Limits) -> (u32, u32) {
    let size = tree.size();
    let (w, h) = (f64::from(size.width()), f64::from(size.height()));
    let over = (w * h / limits.max_pixels.max(1) as f64).sqrt().max(1.0);
    let side = |v: f64| ((v / over).floor() as u32).max(1);
    (side(w), side(h))
}

/// A converted document, drawn at any size.
struct Drawing {
    tree: usvg::Tree,
}

impl Decoder for Drawing {
    /// Drawn at `at.render` (the size a run needs), or at its own size over the denominator.
    fn decode(&self, at: &DecodeAt<'_>) -> Result<Decoded, ProcessError> {
        let (width, height) = at.render.unwrap_or_else(|| {
            let (w, h) = own_size(&self.tree, at.limits);
            (w.div_ceil(at.denominator), h.div_ceil(at.denominator))
        });
        if u64::from(width) * u64::from(height) > at.limits.max_pixels {
            return Err(ProcessError::too_many_pixels(
                width,
                height,
                at.limits.max_pixels,
            ));
        }
        let size = self.tree.size();
        let scale =
            Transform::from_scale(width as f32 / size.width(), height as f32 / size.height());
        crate::check_cost(filter_work(&self.tree, scale), at.limits)?;
        let mut pixmap =
            Pixmap::new(width, height).ok_or_else(|| undecodable("an empty drawing size"))?;
        resvg::render(&self.tree, scale, &mut pixmap.as_mut());
        let pixels = pixmap
            .pixels()
            .iter()
            .flat_map(|p| {
                let c = p.demultiply();
                [c.red(), c.green(), c.blue(), c.alpha()]
            })
            .collect();
        let image = RgbaImage::from_raw(width, height, pixels)
            .ok_or_else(|| undecodable("the drawing's pixels do not fill its size"))?;
        Ok(Decoded::pixels(DynamicImage::ImageRgba8(image)))
    }
}

/// The work of a drawing's filters at `scale`, in the pixel-equivalents of
/// `crate::cost`: per filtered group and per primitive, its filter region's pixels at the
/// drawn size times the primitive's passes over them. A morphology's passes grow with its
/// radius in drawn pixels (resvg's minimum and maximum run along each axis); a blur is three
/// box passes each way; the others a few passes. Calibrated on resvg 0.49 here: a 30-unit
/// dilation over 600×600 drawn pixels took 0.8 s, about 5·10^7 of these units.
fn filter_work(tree: &usvg::Tree, scale: Transform) -> u64 {
    use usvg::filter::Kind;
    let mut work: u64 = 0;
    let mut groups = vec![tree.root()];
    while let Some(group) = groups.pop() {
        for child in group.children() {
            if let usvg::Node::Group(g) = child {
                groups.push(g);
            }
        }
        if group.filters().is_empty() {
            continue;
        }
        let transform = scale.pre_concat(group.abs_transform());
        // How much one user unit is in drawn pixels (the transform's mean scale).
        let unit = f64::from((transform.sx * transform.sy - transform.kx * transform.ky).abs())
            .sqrt()
            .max(1e-6);
        for filter in group.filters() {
            let region = filter.rect();
            let pixels = f64::from(region.width()) * f64::from(region.height()) * unit * unit;
            for primitive in filter.primitives() {
                let passes = match primitive.kind() {
                    Kind::Morphology(m) => {
                        2.0 * (f64::from(m.radius_x().get()) + f64::from(m.radius_y().get())) * unit
                            + 2.0
                    }
                    Kind::GaussianBlur(_) | Kind::DropShadow(_) => 6.0,
                    Kind::ConvolveMatrix(m) => {
                        f64::from(m.matrix().columns()) * f64::from(m.matrix().rows())
                    }
                    Kind::DiffuseLighting(_) | Kind::SpecularLighting(_) => 20.0,
                    Kind::Turbulence(t) => 10.0 * f64::from(t.num_octaves().max(1)),
                    _ => 2.0,
                };
                work = work.saturating_add((pixels * passes).min(u64::MAX as f64) as u64);
            }
        }
    }
    work
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_element_decides() {
        assert!(root_is_svg(b"<svg xmlns='http://www.w3.org/2000/svg'/>"));
        assert!(root_is_svg(
            b"\xEF\xBB\xBF<?xml version='1.0'?>\n<!-- logo -->\n<!DOCTYPE svg PUBLIC \"-//W3C//DTD SVG 1.1//EN\" \"x\">\n<svg>"
        ));
        assert!(root_is_svg(b"<!DOCTYPE svg [ <!ELEMENT a (b)> ]><svg>"));
        assert!(!root_is_svg(b"<html><body><svg></svg></body></html>"));
        assert!(!root_is_svg(b"<svgfoo>"));
        assert!(!root_is_svg(b"<!-- never closed <svg>"));
        assert!(!root_is_svg(b""));
    }

    #[test]
    fn references_are_read_from_hrefs_and_urls() {
        assert_eq!(references("#a"), ["a"]);
        assert_eq!(references("fill:url(#g) ; stroke: url('#h')"), ["g", "h"]);
        assert!(references("http://example.test/#x").is_empty());
    }

    /// 400×400 pixels of `shapes` rectangles, each dilated by 30 units between two blurs.
    fn dilated(shapes: usize) -> Vec<u8> {
        let mut svg = String::from(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="400"><defs><filter id="b" x="-50%" y="-50%" width="200%" height="200%"><feGaussianBlur stdDeviation="40"/><feMorphology operator="dilate" radius="30"/><feGaussianBlur stdDeviation="40"/></filter></defs>"##,
        );
        for i in 0..shapes {
            svg.push_str(&format!(
                r##"<rect x="{i}" y="{i}" width="300" height="300" fill="red" filter="url(#b)"/>"##
            ));
        }
        svg.push_str("</svg>");
        svg.into_bytes()
    }

    #[test]
    fn filters_are_costed_before_drawing() {
        let limits = Limits::default();
        let one = Transform::identity();
        let work = |shapes| filter_work(&parse(&dilated(shapes)).unwrap(), one);
        // Sixty dilated shapes (47 s of drawing here) are over the limit; three (2.4 s) are
        // not, and the work grows with the drawn size.
        assert!(work(60) > limits.max_cost, "{}", work(60));
        assert!(work(3) < limits.max_cost, "{}", work(3));
        let doubled = filter_work(
            &parse(&dilated(3)).unwrap(),
            Transform::from_scale(2.0, 2.0),
        );
        assert!(doubled > 4 * work(3), "{doubled} vs {}", work(3));
        // A logo's drop shadow is nothing.
        let shadow = br##"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"><filter id="s"><feDropShadow dx="1" dy="1" stdDeviation="1"/></filter><text x="4" y="30" filter="url(#s)">Logo</text></svg>"##;
        assert!(filter_work(&parse(shadow).unwrap(), one) < 1_000_000);
        // Refused as too costly, before any pixel is drawn.
        let drawing = Drawing {
            tree: parse(&dilated(60)).unwrap(),
        };
        let bytes = dilated(60);
        let at = DecodeAt {
            bytes: &bytes,
            limits: &limits,
            denominator: 1,
            icc: None,
            render: Some((400, 400)),
        };
        let refused = drawing.decode(&at).err().expect("refused");
        assert_eq!(refused.kind(), Some(crate::ProcessFailure::TooCostly));
    }
}

//! SVG: logos and icons, rasterised by resvg (pure Rust) at the size the output needs, so that
//! `w=800` of a 100-pixel-wide logo is drawn at 800 pixels, never a small raster enlarged.
//!
//! An SVG is a document that can point elsewhere and multiply itself, so it is held to bounds
//! before usvg converts it: at most [`MAX_NODES`] XML nodes, nesting at most [`MAX_DEPTH`]
//! deep, no entity declarations (the billion-laughs family), and at most [`MAX_EXPANDED`](super::svg_expansion::MAX_EXPANDED)
//! elements once every `<use>` and `url(#…)` reference is counted as the copy it makes (the
//! same bomb with references). Nothing outside the document is ever read: `<image>` links to
//! files or URLs resolve to nothing, embedded `data:` images are drawn only when they are
//! PNG, JPEG, GIF or WebP whose header this crate's own rooms read within
//! [`MAX_EMBEDDED_PIXELS`] (an embedded SVG is not drawn), and fonts are the system's only
//! (loaded once). usvg runs no script and has no `<foreignObject>` content; SVG is never an
//! output format, so what a document carries never reaches a browser.
//!
//! Everything that draws is costed before drawing, as admission needs: text by its
//! characters before usvg lays it out ([`layout_work`](super::svg_expansion::layout_work): 400 KB of one `<text>` took 53 s), then on the converted tree at the drawn size ([`drawing_work`]): paths by segments
//! and covered pixels, gradients by stops, patterns, masks, clip paths, layers and filters
//! (a filter's work grows with its region's pixels and, for `feMorphology`, with its
//! radius: 60 dilated rectangles in 2.5 KB took 47 s). A drawing over `limits.max_cost` is
//! refused as `too_costly` before any pixel is drawn.
//!
//! The declared size is the picture's own size (the `w`/`h` a request leaves out); one over
//! the pixel limit is taken at the largest size within it, as the declaration is nominal.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use image::{DynamicImage, RgbaImage};
use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{self, fontdb, roxmltree, ImageHrefResolver, ImageKind};

use super::svg_expansion::{check_text_paths, Expansion};
use super::{DecodeAt, Decoded, Decoder, Format, Header};
use crate::error::ProcessError;
use crate::limits::Limits;

/// XML nodes (elements, text, comments) a document may hold.
pub const MAX_NODES: u32 = 100_000;
use super::svg_expansion::MAX_DEPTH;
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
        let (tree, layout) = parse(bytes, limits)?;
        let (width, height) = own_size(&tree, limits);
        Ok(Header::plain(width, height, true, Drawing { tree, layout }))
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

/// The document, bounded (see the module's doc), converted by usvg. Its text is costed
/// before usvg lays it out ([`TEXT_LAYOUT_UNITS`] a character), and refused as too costly
/// over `limits.max_cost`: the layout itself is the dear part, and it runs at every opening
/// of the bytes (a probe at download included), before any size is asked.
fn parse(bytes: &[u8], limits: &Limits) -> Result<(usvg::Tree, u64), ProcessError> {
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
    let layout = Expansion::new(&document).check()?;
    check_text_paths(&document)?;
    crate::limits::check_cost(layout, limits)?;
    let tree = usvg::Tree::from_xmltree(&document, &options()).map_err(undecodable)?;
    Ok((tree, layout))
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
    let (format, _) = super::open_header(&data, &limits).ok()?;
    match format {
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
    /// The work its conversion took laying text out ([`layout_work`](super::svg_expansion::layout_work)): paid again by every
    /// run, which opens the document anew.
    layout: u64,
}

impl Drawing {
    fn scale_to(&self, (width, height): (u32, u32)) -> Transform {
        let size = self.tree.size();
        Transform::from_scale(width as f32 / size.width(), height as f32 / size.height())
    }
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
        let scale = self.scale_to((width, height));
        crate::check_cost(drawing_work(&self.tree, scale), at.limits)?;
        let mut pixmap =
            Pixmap::new(width, height).ok_or_else(|| undecodable("an empty drawing size"))?;
        draw(&self.tree, scale, &mut pixmap)?;
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

    fn drawing_work(&self, size: (u32, u32)) -> u64 {
        drawing_work(&self.tree, self.scale_to(size)).saturating_add(self.layout)
    }
}

/// Draws `tree` onto `pixmap`: at once where the run has no stop signal, else a piece at a
/// time with the signal read between pieces (`interrupt.rs`), so that a drawing stops within
/// one piece of its deadline (audit #4: one drew for 4.6 CPU s after its answer). A piece is
/// a path, a picture, a text, or a group drawn on a layer of its own; a group that is not
/// (no opacity, clip, mask, filter or blend) is walked into, as resvg itself walks it, so
/// the pieces draw the same pixels in the same order.
fn draw(tree: &usvg::Tree, transform: Transform, pixmap: &mut Pixmap) -> Result<(), ProcessError> {
    if crate::interrupt::signal().is_none() {
        resvg::render(tree, transform, &mut pixmap.as_mut());
        return Ok(());
    }
    draw_pieces(tree.root(), transform, &mut pixmap.as_mut())
}

fn draw_pieces(
    group: &usvg::Group,
    transform: Transform,
    pixmap: &mut resvg::tiny_skia::PixmapMut<'_>,
) -> Result<(), ProcessError> {
    for node in group.children() {
        if crate::interrupt::requested() {
            return Err(crate::interrupt::stopped());
        }
        match node {
            usvg::Node::Group(inner) if !inner.should_isolate() => {
                draw_pieces(inner, transform.pre_concat(inner.transform()), pixmap)?;
            }
            _ => {
                // `render_node` places a node by its box (it is meant for drawing one node
                // on a canvas of its own): moved back by as much, it draws where the whole
                // drawing would.
                if let Some(b) = node.abs_layer_bounding_box() {
                    resvg::render_node(node, transform.pre_translate(b.x(), b.y()), pixmap);
                }
            }
        }
    }
    Ok(())
}

/// The work of drawing a document at `scale`, in the pixel-equivalents of `crate::cost`
/// (calibrated on resvg 0.49 here: about 6·10^7 units a second of one core), counted on the
/// converted tree (every `<use>` already a copy) before any pixel is drawn:
/// - a path: its segments (more when stroked, and per dash), and the pixels its box covers
///   at the drawn size; a gradient paint adds a share per stop for each of those pixels
///   (tiny-skia walks the stops for every pixel: 90,000 stops over 1000×1000 took 13.5 s),
///   a pattern its tile and its content;
/// - a group drawn on a layer of its own (opacity, a clip path, a mask, a filter, a blend):
///   the layer's pixels a few times over, the clip path's and mask's canvases and contents,
///   and each filter primitive's passes over its region (a morphology's grow with its
///   radius: 60 dilated rectangles in 2.5 KB took 47 s);
/// - text, through the outlines it was converted to; an embedded raster, its own pixels
///   (decoded at each drawing) and those it covers.
///
/// Shared contents (a clip path, mask or pattern used many times) are walked once and
/// charged at each use, so counting stays linear in the document.
pub(crate) fn drawing_work(tree: &usvg::Tree, scale: Transform) -> u64 {
    let size = tree.size();
    let canvas =
        f64::from(size.width() * scale.sx).abs() * f64::from(size.height() * scale.sy).abs();
    let mut work = Work {
        scale,
        canvas: canvas.max(1.0),
        shared: HashMap::new(),
        embedded: HashMap::new(),
    };
    let total = work.group(tree.root(), 0);
    total.min(u64::MAX as f64) as u64
}

/// Fixed work of any node drawn (its setup, transform, bounds).
const NODE_UNITS: f64 = 20.0;
/// A segment of a filled path: edges built and walked.
const SEGMENT_UNITS: f64 = 4.0;
/// A segment (or a dash) of a stroked path: the stroker's outline of it, then filled.
const STROKE_SEGMENT_UNITS: f64 = 16.0;
/// Dash-and-gap pairs a path past which tiny-skia does not dash it.
const MAX_DASH_PAIRS: f64 = 1_000_000.0;
/// A row an edge spans at the drawn size (anti-aliased: several samples a row).
const ROW_UNITS: f64 = 2.5;
/// How many gradient stops cost one more pass over a painted pixel (measured: 30,000 stops
/// over 1000×1000 pixels took 13.9 s, about a pass per 35 stops; charged a little more).
const STOPS_PER_PASS: f64 = 20.0;
/// The largest pattern tile drawn (its own pixmap, 4 bytes a pixel: 256 MiB); a larger one
/// is refused as too costly, whatever `limits.max_cost` allows.
const MAX_TILE_PIXELS: f64 = (1u64 << 26) as f64;
/// How deep shared contents may nest inside each other before the count stops descending
/// (usvg itself cuts reference loops; this bounds the walk whatever the tree).
const MAX_SHARED_DEPTH: usize = 64;

struct Work {
    scale: Transform,
    /// The drawn canvas's pixels.
    canvas: f64,
    /// The work of shared groups (clip paths, masks, patterns, filter images) by address,
    /// walked once.
    shared: HashMap<*const usvg::Group, f64>,
    /// Embedded rasters' own pixels, by address of their bytes.
    embedded: HashMap<*const u8, f64>,
}

impl Work {
    /// Pixels of a box in user units under `transform` at the drawn scale, at most the
    /// canvas's.
    fn pixels(&self, rect: Option<usvg::Rect>, transform: Transform) -> f64 {
        let Some(rect) = rect else { return 0.0 };
        let t = self.scale.pre_concat(transform);
        let area = f64::from(rect.width()) * f64::from(rect.height());
        let det = f64::from((t.sx * t.sy - t.kx * t.ky).abs());
        (area * det).min(self.canvas).max(0.0)
    }

    /// How much one user unit is in drawn pixels under `transform` (its mean scale).
    fn unit(&self, transform: Transform) -> f64 {
        let t = self.scale.pre_concat(transform);
        f64::from((t.sx * t.sy - t.kx * t.ky).abs())
            .sqrt()
            .max(1e-6)
    }

    fn group(&mut self, group: &usvg::Group, depth: usize) -> f64 {
        let mut total = NODE_UNITS;
        if group.should_isolate() {
            let layer = self.pixels(
                Some(group.abs_layer_bounding_box().to_rect()),
                Transform::identity(),
            );
            // Allocated and cleared, drawn into, composited back.
            total += 3.0 * layer;
        }
        if let Some(clip) = group.clip_path() {
            total += 2.0 * self.canvas + self.clip(clip, depth);
        }
        if let Some(mask) = group.mask() {
            total += 3.0 * self.canvas + self.mask(mask, depth);
        }
        total += self.filters(group, depth);
        for child in group.children() {
            total += match child {
                usvg::Node::Group(g) => self.group(g, depth),
                usvg::Node::Path(p) => self.path(p, depth),
                usvg::Node::Image(i) => self.image(i),
                usvg::Node::Text(t) => NODE_UNITS + self.group(t.flattened(), depth),
            };
        }
        total
    }

    /// A group shared by reference, walked once and charged at each use.
    fn shared(&mut self, group: &usvg::Group, depth: usize) -> f64 {
        let key = group as *const usvg::Group;
        if let Some(known) = self.shared.get(&key) {
            return *known;
        }
        if depth >= MAX_SHARED_DEPTH {
            return self.canvas;
        }
        // Counted as nothing while being walked: a loop adds nothing more.
        self.shared.insert(key, 0.0);
        let work = self.group(group, depth + 1);
        self.shared.insert(key, work);
        work
    }

    fn clip(&mut self, clip: &usvg::ClipPath, depth: usize) -> f64 {
        let mut work = self.shared(clip.root(), depth);
        if let Some(inner) = clip.clip_path() {
            work += 2.0 * self.canvas + self.clip(inner, depth + 1).min(self.canvas * 1e6);
        }
        work
    }

    fn mask(&mut self, mask: &usvg::Mask, depth: usize) -> f64 {
        let mut work = self.shared(mask.root(), depth);
        if let (Some(inner), true) = (mask.mask(), depth < MAX_SHARED_DEPTH) {
            work += 3.0 * self.canvas + self.mask(inner, depth + 1);
        }
        work
    }

    fn path(&mut self, path: &usvg::Path, depth: usize) -> f64 {
        let segments = path.data().segments().count() as f64;
        // The rasterizer steps every edge down every row it spans: a zigzag of long edges
        // costs far more than its box says.
        let rows = edge_rows(path.data(), self.scale.pre_concat(path.abs_transform()));
        let mut total = NODE_UNITS;
        if let Some(fill) = path.fill() {
            let covered = self.pixels(Some(path.data().bounds()), path.abs_transform());
            total += segments * SEGMENT_UNITS
                + rows * ROW_UNITS
                + self.paint(fill.paint(), covered, path.abs_transform(), depth);
        }
        if let Some(stroke) = path.stroke() {
            let covered = self.pixels(Some(path.abs_stroke_bounding_box()), Transform::identity());
            let dashes = stroke.dasharray().map_or(0.0, |pattern| {
                let period: f64 = pattern.iter().map(|d| f64::from(d.abs())).sum();
                let length = polyline_length(path.data());
                // tiny-skia gives dashing up past a million dash-and-gap pairs a path (the
                // stroke is then drawn whole).
                let pairs = match period > 0.0 {
                    true => length / period * (pattern.len() / 2) as f64,
                    false => 0.0,
                };
                match pairs > MAX_DASH_PAIRS {
                    true => 0.0,
                    false => 2.0 * pairs,
                }
            });
            // The outline has two sides, each as long as the path.
            total += (segments + dashes) * STROKE_SEGMENT_UNITS
                + 2.0 * rows * ROW_UNITS
                + self.paint(stroke.paint(), covered, path.abs_transform(), depth);
        }
        total
    }

    /// Painting `covered` pixels with `paint`, on a path drawn under `at`.
    fn paint(&mut self, paint: &usvg::Paint, covered: f64, at: Transform, depth: usize) -> f64 {
        match paint {
            usvg::Paint::Color(_) => covered,
            usvg::Paint::LinearGradient(g) => {
                covered * (1.0 + g.stops().len() as f64 / STOPS_PER_PASS)
            }
            usvg::Paint::RadialGradient(g) => {
                covered * (2.0 + g.stops().len() as f64 / STOPS_PER_PASS)
            }
            usvg::Paint::Pattern(p) => {
                // resvg draws the tile on a pixmap of its own: the tile's box at the scale of
                // the pattern under the path, not bounded by the canvas (the svg fuzz target's
                // find: a 20 × 40 tile in the units of a 320-wide box, drawn 20 times up, asked
                // for a pixmap of billions of pixels, and the allocation's failure aborts).
                let (sx, sy) = self
                    .scale
                    .pre_concat(at)
                    .pre_concat(p.transform())
                    .get_scale();
                let rect = p.rect();
                let side = |length: f32, scale: f32| f64::from(length * scale).round().abs();
                let tile = side(rect.width(), sx) * side(rect.height(), sy);
                if tile > MAX_TILE_PIXELS {
                    return f64::INFINITY;
                }
                2.0 * covered + 2.0 * tile + self.shared(p.root(), depth)
            }
        }
    }

    fn image(&mut self, image: &usvg::Image) -> f64 {
        let covered = self.pixels(Some(image.abs_bounding_box()), Transform::identity());
        let own = match image.kind() {
            ImageKind::PNG(data)
            | ImageKind::JPEG(data)
            | ImageKind::GIF(data)
            | ImageKind::WEBP(data) => {
                let key = data.as_ptr();
                match self.embedded.get(&key) {
                    Some(pixels) => *pixels,
                    None => {
                        let pixels = super::open_header(
                            data,
                            &Limits {
                                max_pixels: MAX_EMBEDDED_PIXELS,
                                ..Limits::default()
                            },
                        )
                        .map_or(MAX_EMBEDDED_PIXELS as f64, |(_, h)| {
                            f64::from(h.width) * f64::from(h.height)
                        });
                        self.embedded.insert(key, pixels);
                        pixels
                    }
                }
            }
            ImageKind::SVG(tree) => self.group(tree.root(), MAX_SHARED_DEPTH),
        };
        NODE_UNITS + 2.0 * own + 2.0 * covered
    }

    /// Each filter primitive's passes over its region at the drawn size (see
    /// [`drawing_work`]), and the contents of `feImage`s.
    fn filters(&mut self, group: &usvg::Group, depth: usize) -> f64 {
        use usvg::filter::Kind;
        let unit = self.unit(group.abs_transform());
        let mut work = 0.0;
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
                    Kind::Image(image) => 2.0 + self.shared(image.root(), depth) / pixels.max(1.0),
                    _ => 2.0,
                };
                work += pixels * passes;
            }
        }
        work
    }
}

/// The rows a path's edges span at the drawn size, summed (curves by their control
/// polygons, which span at least as many).
fn edge_rows(path: &resvg::tiny_skia::Path, transform: Transform) -> f64 {
    let mut points = path.points().to_vec();
    transform.map_points(&mut points);
    points
        .windows(2)
        .map(|w| f64::from((w[1].y - w[0].y).abs()) + 1.0)
        .sum()
}

/// A path's length along its points (curves by their control polygons, which is longer:
/// conservative for dashes).
fn polyline_length(path: &resvg::tiny_skia::Path) -> f64 {
    path.points()
        .windows(2)
        .map(|w| f64::from(w[0].distance(w[1])))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::svg_expansion::references;

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
        let work = |shapes| drawing_work(&parse(&dilated(shapes), &limits).unwrap().0, one);
        // Sixty dilated shapes (47 s of drawing here) are over the limit; three (2.4 s) are
        // not, and the work grows with the drawn size.
        assert!(work(60) > limits.max_cost, "{}", work(60));
        assert!(work(3) < limits.max_cost, "{}", work(3));
        let doubled = drawing_work(
            &parse(&dilated(3), &limits).unwrap().0,
            Transform::from_scale(2.0, 2.0),
        );
        assert!(doubled > 4 * work(3), "{doubled} vs {}", work(3));
        // A logo's drop shadow is nothing.
        let shadow = br##"<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"><filter id="s"><feDropShadow dx="1" dy="1" stdDeviation="1"/></filter><text x="4" y="30" filter="url(#s)">Logo</text></svg>"##;
        assert!(drawing_work(&parse(shadow, &limits).unwrap().0, one) < 1_000_000);
        // Refused as too costly, before any pixel is drawn.
        let drawing = Drawing {
            tree: parse(&dilated(60), &limits).unwrap().0,
            layout: 0,
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

    #[test]
    fn a_drawing_in_pieces_is_the_drawing_and_stops_between_pieces() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let doc = br##"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="150">
            <defs><linearGradient id="g"><stop offset="0" stop-color="#f00"/><stop offset="1" stop-color="#00f"/></linearGradient></defs>
            <rect width="200" height="150" fill="#eee"/>
            <g transform="translate(20 10) rotate(12)">
              <rect x="5" y="5" width="80" height="40" fill="url(#g)"/>
              <g transform="scale(1.5)"><circle cx="60" cy="50" r="20" fill="#0a0" stroke="#000"/></g>
              <g opacity="0.5"><rect x="40" y="30" width="60" height="60" fill="#00f"/></g>
            </g>
            <text x="10" y="140" font-size="20">Ab</text>
        </svg>"##;
        let limits = Limits::default();
        let tree = parse(doc, &limits).unwrap().0;
        let scale = Transform::from_scale(1.5, 1.5);
        let mut whole = Pixmap::new(300, 225).unwrap();
        draw(&tree, scale, &mut whole).unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let _guard = crate::interrupt::stop_this_thread_when(Arc::new(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            false
        }));
        let mut pieces = Pixmap::new(300, 225).unwrap();
        draw(&tree, scale, &mut pieces).unwrap();
        assert!(asked.load(Ordering::Relaxed) >= 5, "read between pieces");
        let most = whole
            .data()
            .iter()
            .zip(pieces.data())
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(most <= 1, "pieces differ from the whole by {most}");
        // A signal raised after the second piece stops the drawing there.
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let _guard = crate::interrupt::stop_this_thread_when(Arc::new(move || {
            counter.fetch_add(1, Ordering::Relaxed) >= 2
        }));
        let mut cut = Pixmap::new(300, 225).unwrap();
        let stopped = draw(&tree, scale, &mut cut).expect_err("stopped");
        assert!(matches!(stopped, ProcessError::Stopped(_)), "{stopped}");
    }
}

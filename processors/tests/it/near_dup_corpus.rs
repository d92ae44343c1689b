//! The near-duplicate measurement on the shared photographs, shared by the accuracy test
//! (`near_dup_accuracy.rs`, which asserts the targets) and the benchmark that reports it
//! (`processors/benches/near_dup.rs`, which writes `bench/results/near-dup.json`): the
//! photos (`../shared/corpus/photos/`, pinned with their SHA-256 in
//! `tests/near-dup-photos.tsv`), the transforms made of each with the `image` crate (never
//! with imgcas's own processors), their fingerprints and pixel differences, and the counts.

use std::io::Cursor;
use std::path::{Path, PathBuf};

use image::codecs::jpeg::JpegEncoder;
use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader, Rgb, RgbImage};
use imgcas_processors::fingerprint::{fingerprint, Fingerprint, Guards};
use imgcas_processors::likeness::{local_difference_of, MAX_LOCAL_DIFFERENCE};
use imgcas_processors::{Decode, Limits};
use sha2::{Digest, Sha256};

pub const REPORT_RADIUS: u32 = 8;
pub const CANONICAL_RADIUS: u32 = 4;

/// The transforms, with the recall each must reach at the report radius.
pub const TRANSFORMS: &[(&str, f64)] = &[
    ("resize_50", 0.99),
    ("resize_25", 0.99),
    ("jpeg_q50", 0.99),
    ("jpeg_q70", 0.99),
    ("jpeg_q95", 0.99),
    ("png", 0.99),
    ("webp", 0.99),
    ("orientation_set", 0.99),
    ("orientation_applied", 0.99),
    ("metadata_stripped", 0.99),
    ("crop_2pct_edges", 0.90),
    ("crop_2pct_corner", 0.90),
    ("brightness_up_5", 0.90),
    ("brightness_down_5", 0.90),
    // Edits, not copies: no recall target; the pixel check must refuse every merge of them
    // (issue 28). A line of text about 4 % of the height tall (0.3–0.5 % of the area), text
    // over 2 % of the area, boxes over 2 % and 5 % in the centre, a logo over 1 % in a corner.
    ("text_overlay", 0.0),
    ("text_2pct", 0.0),
    ("box_center_2pct", 0.0),
    ("box_center_5pct", 0.0),
    ("logo_corner_1pct", 0.0),
];

/// The transforms that edit the picture: never merged once the pixel check has looked.
pub const EDITS: &[&str] = &[
    "text_overlay",
    "text_2pct",
    "box_center_2pct",
    "box_center_5pct",
    "logo_corner_1pct",
];

pub fn photos_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/corpus/photos")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn pinned() -> Vec<(String, String)> {
    let list = include_str!("../near-dup-photos.tsv");
    list.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(f, h)| (f.to_string(), h.to_string()))
        .collect()
}

/// The photo as the image crate sees it upright (orientation applied), and its tag.
fn upright(bytes: &[u8]) -> (DynamicImage, image::metadata::Orientation) {
    let mut decoder = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .expect("format")
        .into_decoder()
        .expect("decoder");
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).expect("decode");
    image.apply_orientation(orientation);
    (DynamicImage::ImageRgb8(image.to_rgb8()), orientation)
}

fn jpeg(image: &DynamicImage, quality: u8) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(&image.to_rgb8())
        .expect("jpeg");
    out
}

fn encoded(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let rgb = DynamicImage::ImageRgb8(image.to_rgb8());
    rgb.write_to(&mut out, format).expect("encode");
    out.into_inner()
}

fn png(image: &DynamicImage) -> Vec<u8> {
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    let mut out = Vec::new();
    let encoder =
        PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Adaptive);
    DynamicImage::ImageRgb8(image.to_rgb8())
        .write_with_encoder(encoder)
        .expect("png");
    out
}

/// A JPEG's segments before the scan, without APP1–APP15 and comments (EXIF, XMP, ICC,
/// IPTC): what "strip metadata" tools leave.
fn strip_jpeg_metadata(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes[..2].to_vec();
    let mut at = 2;
    while at + 4 <= bytes.len() && bytes[at] == 0xFF {
        let marker = bytes[at + 1];
        if marker == 0xDA {
            break;
        }
        let len = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        let end = (at + 2 + len).min(bytes.len());
        if !(0xE1..=0xEF).contains(&marker) && marker != 0xFE {
            out.extend_from_slice(&bytes[at..end]);
        }
        at = end;
    }
    out.extend_from_slice(&bytes[at..]);
    out
}

/// A JPEG with an EXIF APP1 segment holding only `Orientation = value`, after SOI.
fn with_orientation(jpeg: &[u8], value: u8) -> Vec<u8> {
    let mut app1 = vec![0xFF, 0xE1, 0, 34];
    app1.extend_from_slice(b"Exif\0\0MM\0\x2a\0\0\0\x08");
    app1.extend_from_slice(&[0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, value, 0, 0]);
    app1.extend_from_slice(&[0, 0, 0, 0]);
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&app1);
    out.extend_from_slice(&jpeg[2..]);
    out
}

fn exif_value(o: image::metadata::Orientation) -> u8 {
    o.to_exif()
}

/// 5 × 7 glyphs for the overlay's text.
fn glyph(c: char) -> [u8; 7] {
    match c {
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        _ => [0; 7],
    }
}

/// White text with a dark shadow in the bottom-right corner, about 4 % of the height tall.
fn text_overlay(image: &DynamicImage) -> DynamicImage {
    let scale = (image.height() / 25 / 7).max(1);
    text_at_scale(image, scale)
}

/// The same text, its box (9 × 42 glyph pixels at `scale`) about `area` of the picture.
fn text_of_area(image: &DynamicImage, area: f64) -> DynamicImage {
    let pixels = f64::from(image.width()) * f64::from(image.height());
    let scale = (area * pixels / 378.0).sqrt().round().max(1.0) as u32;
    text_at_scale(image, scale)
}

/// A filled rectangle of `area` of the picture (its aspect the picture's), centred, or in
/// the top-left corner as a two-colour checkered logo.
fn patch(image: &DynamicImage, area: f64, logo: bool) -> DynamicImage {
    let mut rgb = image.to_rgb8();
    let (w, h) = rgb.dimensions();
    let (pw, ph) = (
        (f64::from(w) * area.sqrt()).round() as u32,
        (f64::from(h) * area.sqrt()).round() as u32,
    );
    let (x0, y0) = if logo {
        (w / 50, h / 50)
    } else {
        ((w - pw) / 2, (h - ph) / 2)
    };
    let cell = (pw / 6).max(1);
    for y in y0..(y0 + ph).min(h) {
        for x in x0..(x0 + pw).min(w) {
            let colour = match logo {
                false => [250, 250, 250],
                true if ((x - x0) / cell + (y - y0) / cell) % 2 == 0 => [200, 30, 40],
                true => [250, 210, 40],
            };
            rgb.put_pixel(x, y, Rgb(colour));
        }
    }
    DynamicImage::ImageRgb8(rgb)
}

fn text_at_scale(image: &DynamicImage, scale: u32) -> DynamicImage {
    let mut rgb = image.to_rgb8();
    let (w, h) = rgb.dimensions();
    let text = "SHOP 24";
    let width = text.len() as u32 * 6 * scale;
    let (x0, y0) = (
        w.saturating_sub(width + 2 * scale),
        h.saturating_sub(9 * scale),
    );
    for (i, c) in text.chars().enumerate() {
        for (row, bits) in glyph(c).iter().enumerate() {
            for col in 0..5u32 {
                if bits & (0x10 >> col) == 0 {
                    continue;
                }
                for dy in 0..scale {
                    for dx in 0..scale {
                        let x = x0 + (i as u32 * 6 + col) * scale + dx;
                        let y = y0 + row as u32 * scale + dy;
                        for (ox, oy, colour) in [(1, 1, [20, 20, 20]), (0, 0, [250, 250, 250])] {
                            if x + ox < w && y + oy < h {
                                rgb.put_pixel(x + ox, y + oy, Rgb(colour));
                            }
                        }
                    }
                }
            }
        }
    }
    DynamicImage::ImageRgb8(rgb)
}

fn scaled(image: &DynamicImage, factor: f32) -> DynamicImage {
    let mut rgb: RgbImage = image.to_rgb8();
    for p in rgb.pixels_mut() {
        p.0 =
            p.0.map(|c| (f32::from(c) * factor).round().clamp(0.0, 255.0) as u8);
    }
    DynamicImage::ImageRgb8(rgb)
}

fn transform(
    name: &str,
    bytes: &[u8],
    (up, orientation): &(DynamicImage, image::metadata::Orientation),
) -> Vec<u8> {
    let is_jpeg = bytes.starts_with(&[0xFF, 0xD8]);
    let (w, h) = (up.width(), up.height());
    // Bilinear: what most tools use for a quick downscale (and the cheapest here).
    let lanczos = image::imageops::FilterType::Triangle;
    let crop = |left: u32, top: u32, right: u32, bottom: u32| {
        jpeg(
            &up.crop_imm(left, top, w - left - right, h - top - bottom),
            90,
        )
    };
    let (dx, dy) = (w * 2 / 100, h * 2 / 100);
    match name {
        "resize_50" => jpeg(&up.resize_exact(w / 2, h / 2, lanczos), 85),
        "resize_25" => jpeg(&up.resize_exact(w / 4, h / 4, lanczos), 85),
        "jpeg_q50" => jpeg(up, 50),
        "jpeg_q70" => jpeg(up, 70),
        "jpeg_q95" => jpeg(up, 95),
        "png" => png(up),
        "webp" => encoded(up, ImageFormat::WebP),
        // Stored a quarter turn counter-clockwise, tagged 6 ("turn clockwise to view").
        "orientation_set" => with_orientation(&jpeg(&up.rotate270(), 90), 6),
        "orientation_applied" => jpeg(up, 92),
        "metadata_stripped" if is_jpeg => {
            let stripped = strip_jpeg_metadata(bytes);
            match exif_value(*orientation) {
                // Tools that strip keep the tag that rights the picture, or apply it.
                1 => stripped,
                value => with_orientation(&stripped, value),
            }
        }
        "metadata_stripped" => png(up),
        "crop_2pct_edges" => crop(dx, dy, dx, dy),
        "crop_2pct_corner" => crop(dx, dy, 0, 0),
        "brightness_up_5" => jpeg(&scaled(up, 1.05), 90),
        "brightness_down_5" => jpeg(&scaled(up, 0.95), 90),
        "text_overlay" => jpeg(&text_overlay(up), 90),
        "text_2pct" => jpeg(&text_of_area(up, 0.02), 90),
        "box_center_2pct" => jpeg(&patch(up, 0.02, false), 90),
        "box_center_5pct" => jpeg(&patch(up, 0.05, false), 90),
        "logo_corner_1pct" => jpeg(&patch(up, 0.01, true), 90),
        other => panic!("unknown transform {other}"),
    }
}

pub struct Photo {
    pub name: String,
    pub original: Fingerprint,
    pub transformed: Vec<Fingerprint>,
    /// The pixel check's local difference of each transform from the original.
    pub difference: Vec<f32>,
}

fn measure(dir: &Path, name: &str, sha: &str) -> Photo {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        hex(&Sha256::digest(&bytes)),
        sha,
        "{name} is not the pinned file"
    );
    let limits = Limits::default();
    let fp = |b: &[u8]| fingerprint(b, &limits, &Decode).unwrap_or_else(|e| panic!("{name}: {e}"));
    let up = upright(&bytes);
    let (mut transformed, mut difference) = (Vec::new(), Vec::new());
    for (t, _) in TRANSFORMS {
        let made = transform(t, &bytes, &up);
        transformed.push(fp(&made));
        difference.push(
            local_difference_of(&bytes, &made, &limits).unwrap_or_else(|e| panic!("{name}: {e}")),
        );
    }
    Photo {
        name: name.to_string(),
        original: fp(&bytes),
        transformed,
        difference,
    }
}

/// Measures every pinned photo, on all cores; in the pinned order.
pub fn measure_all(dir: &Path) -> Vec<Photo> {
    let list = pinned();
    assert_eq!(list.len(), 255, "the pinned list names all 255 photos");
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut photos: Vec<Photo> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((name, sha)) = list.get(i) else {
                            break done;
                        };
                        done.push((i, measure(dir, name, sha)));
                    }
                })
            })
            .collect();
        let mut all: Vec<(usize, Photo)> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, p)| p).collect()
    });
    photos.shrink_to_fit();
    photos
}

/// What one transform's copies gave.
pub struct TransformTally {
    pub name: &'static str,
    /// The recall it must reach at the report radius (0 for an edit).
    pub target: f64,
    /// Copies matched at the report radius, and at the canonical radius with its guards.
    pub at_report: usize,
    pub at_canonical: usize,
    /// Canonical matches the pixel check accepts too: merged.
    pub merged: usize,
    /// Photos whose copy the report radius missed, with the distance.
    pub missed: Vec<String>,
    /// Canonical matches merged (with their local difference), and those the pixel check
    /// refused.
    pub merged_names: Vec<String>,
    pub refused_names: Vec<String>,
    /// The local difference's minimum, median and maximum over the photos.
    pub difference: (f32, f32, f32),
}

/// Every count of a measurement.
pub struct Tally {
    pub photos: usize,
    pub transforms: Vec<TransformTally>,
    /// Distinct photos, pairwise: pairs, pairs within the report radius unguarded, false
    /// matches at the report radius (named), false matches at the canonical radius.
    pub pairs: u64,
    pub unguarded_within_report: u64,
    pub false_report: Vec<String>,
    pub false_canonical: u64,
    /// Each photo against every transform of the others: pairs, false matches at the report
    /// and the canonical radius.
    pub cross: [u64; 3],
}

pub fn tally(photos: &[Photo]) -> Tally {
    let report = Guards::report(REPORT_RADIUS);
    let canonical = Guards::canonical(CANONICAL_RADIUS);
    let mut transforms = Vec::new();
    for (t, (name, target)) in TRANSFORMS.iter().enumerate() {
        let found = |g: &Guards| {
            photos
                .iter()
                .filter(|p| p.original.matches(&p.transformed[t], g))
                .count()
        };
        let named = |merged: bool| -> Vec<String> {
            photos
                .iter()
                .filter(|p| {
                    p.original.matches(&p.transformed[t], &canonical)
                        && (p.difference[t] <= MAX_LOCAL_DIFFERENCE) == merged
                })
                .map(|p| format!("{} ({:.1})", p.name, p.difference[t]))
                .collect()
        };
        let mut differences: Vec<f32> = photos.iter().map(|p| p.difference[t]).collect();
        differences.sort_by(f32::total_cmp);
        let quantile = |q: f64| differences[((differences.len() - 1) as f64 * q).round() as usize];
        let merged_names = named(true);
        transforms.push(TransformTally {
            name,
            target: *target,
            at_report: found(&report),
            at_canonical: found(&canonical),
            merged: merged_names.len(),
            missed: photos
                .iter()
                .filter(|p| !p.original.matches(&p.transformed[t], &report))
                .map(|p| format!("{} (d={})", p.name, p.original.distance(&p.transformed[t])))
                .collect(),
            merged_names,
            refused_names: named(false),
            difference: (quantile(0.0), quantile(0.5), quantile(1.0)),
        });
    }

    // Distinct photos against each other, and against every transform of the others.
    let mut tally = Tally {
        photos: photos.len(),
        transforms,
        pairs: 0,
        unguarded_within_report: 0,
        false_report: Vec::new(),
        false_canonical: 0,
        cross: [0; 3],
    };
    for (i, a) in photos.iter().enumerate() {
        for (j, b) in photos.iter().enumerate() {
            if i == j {
                continue;
            }
            if i < j {
                tally.pairs += 1;
                tally.unguarded_within_report +=
                    u64::from(a.original.distance(&b.original) <= REPORT_RADIUS);
                if a.original.matches(&b.original, &report) {
                    tally.false_report.push(format!("{} ~ {}", a.name, b.name));
                }
                tally.false_canonical += u64::from(a.original.matches(&b.original, &canonical));
            }
            for t in &b.transformed {
                tally.cross[0] += 1;
                tally.cross[1] += u64::from(a.original.matches(t, &report));
                tally.cross[2] += u64::from(a.original.matches(t, &canonical));
            }
        }
    }
    tally
}

//! What the coarse shrink-on-load costs the look, for `docs/performance.md` (issue 68): each
//! progressive JPEG given is fitted inside a box that reduces it by each reduction (8 to 16:
//! where a 1/8 decode from its DC scans alone and the margin rule's 1/4 decode part ways),
//! once from the DC-only 1/8 decode ("coarse") and once from the decode a lossless output of
//! the same spec takes ("full"), both resized by the same plan and encoded at every quality
//! asked. Each output is scored with SSIMULACRA2 against the lossless rendition of its spec
//! (the full decode's pixels, as `format=png` serves them). Prints one tab-separated row per
//! format, quality and reduction: photos, mean full and coarse scores, the mean and the
//! largest loss (full − coarse, per photo), and the mean times of the decode and resize.
//!
//! `cargo run --release -p imgcas-processors --example coarse_decode -- <progressive.jpg>...`
//!
//! Env: FORMATS (default `jpeg,webp,avif`), QUALITIES (default `40,50,60,70,75,80,85,90,95`),
//! REDUCTIONS (default `8,10,12,14`), MIN_SIDE (the smallest output's long side, default 192).

use std::sync::Arc;
use std::time::Instant;

use image::DynamicImage;
use imgcas_processors::auto_quality::score;
use imgcas_processors::{decode, encode, geometry, ops, Limits, OutputFormat, Spec};

/// The smallest output measured by default (MIN_SIDE): SSIMULACRA2 compares at six scales,
/// each half the one before, and much below this its coarsest are a few pixels wide.
const MIN_SIDE: u32 = 192;

/// One photo at one reduction: the two resized pictures and the times of their decodes and
/// resizes.
struct Shaped {
    full: DynamicImage,
    coarse: DynamicImage,
    full_ms: f64,
    coarse_ms: f64,
}

/// A table cell: (format's index, quality, reduction).
type Cell = (usize, u32, u32);

/// One photo in a cell: (full score, coarse score, full ms, coarse ms).
type Sample = (f64, f64, f64, f64);

fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(str::to_owned)
        .collect()
}

fn numbers(name: &str, default: &str) -> Result<Vec<u32>, String> {
    list(name, default)
        .iter()
        .map(|n| {
            n.parse()
                .map_err(|_| format!("{name}: {n} is not a number"))
        })
        .collect()
}

/// The box query that reduces `size` by about `reduction`, unless the output would be smaller
/// than `min_side`.
fn box_query(size: (u32, u32), reduction: u32, min_side: u32) -> Option<String> {
    let side = (size.0.max(size.1) as f64 / f64::from(reduction)).round() as u32;
    (side >= min_side).then(|| format!("w={side}&h={side}&fit=contain"))
}

fn shape(bytes: &[u8], query: &str, limits: &Limits) -> Result<Option<Shaped>, String> {
    let spec = Spec::parse(&format!("{query}&format=png"))
        .map_err(|e| e.to_string())?
        .resolve(None, false, None);
    let source = decode::open(bytes, limits).map_err(|e| e.to_string())?;
    let size = source.upright_size();
    let plan = geometry::plan(size, &spec);
    let reduction = plan.reduction(size);
    let full_at = source.shrink_denominator(reduction, false);
    if source.shrink_denominator(reduction, true) != 8 || full_at == 8 {
        // Not progressive, or reduced 16 times or more: both paths are one decode.
        return Ok(None);
    }
    let run = |denominator: u32| -> Result<(DynamicImage, f64), String> {
        let start = Instant::now();
        let image = source
            .decode(limits, denominator)
            .map_err(|e| e.to_string())?;
        let plan = plan.rescaled(size, (image.width(), image.height()));
        let resized = ops::apply_plan(Arc::new(image), &plan, spec.shape.background)
            .map_err(|e| e.to_string())?;
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        Ok((DynamicImage::ImageRgb8(resized.to_rgb8()), ms))
    };
    let (full, full_ms) = run(full_at)?;
    let (coarse, coarse_ms) = run(8)?;
    Ok(Some(Shaped {
        full,
        coarse,
        full_ms,
        coarse_ms,
    }))
}

fn encoded_score(
    reference: &DynamicImage,
    pixels: &DynamicImage,
    format: &str,
    quality: u32,
    limits: &Limits,
) -> Result<f64, String> {
    let spec = Spec::parse(&format!("format={format}&q={quality}"))
        .map_err(|e| e.to_string())?
        .resolve(None, false, None);
    let out = encode::encode(pixels.clone(), &spec).map_err(|e| e.to_string())?;
    let back = decode::decode(&out.bytes, limits)
        .map_err(|e| e.to_string())?
        .1;
    score(reference, &back).map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: coarse_decode <progressive.jpg>...".into());
    }
    let formats = list("FORMATS", "jpeg,webp,avif");
    for f in &formats {
        OutputFormat::from_name(f).ok_or(format!("FORMATS: {f} is not a format"))?;
    }
    let qualities = numbers("QUALITIES", "40,50,60,70,75,80,85,90,95")?;
    let reductions = numbers("REDUCTIONS", "8,10,12,14")?;
    let min_side = match numbers("MIN_SIDE", &MIN_SIDE.to_string())?.as_slice() {
        [side] => *side,
        _ => return Err("MIN_SIDE: one number".into()),
    };
    let limits = Limits::default();
    let mut rows: Vec<(Cell, Vec<Sample>)> = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        let size = decode::open(&bytes, &limits)
            .map_err(|e| format!("{path}: {e}"))?
            .upright_size();
        for &reduction in &reductions {
            let Some(query) = box_query(size, reduction, min_side) else {
                eprintln!("{path}: too small to measure at reduction {reduction}, skipped");
                continue;
            };
            let Some(shaped) = shape(&bytes, &query, &limits)? else {
                eprintln!("{path}: one decode at reduction {reduction}, skipped");
                continue;
            };
            for (fi, format) in formats.iter().enumerate() {
                for &quality in &qualities {
                    let full = encoded_score(&shaped.full, &shaped.full, format, quality, &limits)?;
                    let coarse =
                        encoded_score(&shaped.full, &shaped.coarse, format, quality, &limits)?;
                    let key = (fi, quality, reduction);
                    let sample = (full, coarse, shaped.full_ms, shaped.coarse_ms);
                    match rows.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, samples)) => samples.push(sample),
                        None => rows.push((key, vec![sample])),
                    }
                }
            }
        }
        eprintln!("{path}: done");
    }
    rows.sort_by_key(|(k, _)| *k);
    println!(
        "format\tquality\treduction\tphotos\tfull\tcoarse\tmean_loss\tmax_loss\tfull_ms\tcoarse_ms"
    );
    for ((fi, quality, reduction), samples) in &rows {
        let n = samples.len() as f64;
        let mean = |f: fn(&Sample) -> f64| samples.iter().map(f).sum::<f64>() / n;
        let max_loss = samples.iter().map(|s| s.0 - s.1).fold(f64::MIN, f64::max);
        println!(
            "{}\t{quality}\t{reduction}\t{}\t{:.2}\t{:.2}\t{:.2}\t{:.2}\t{:.1}\t{:.1}",
            formats[*fi],
            samples.len(),
            mean(|s| s.0),
            mean(|s| s.1),
            mean(|s| s.0 - s.1),
            max_loss,
            mean(|s| s.2),
            mean(|s| s.3),
        );
    }
    Ok(())
}

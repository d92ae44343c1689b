//! JPEG XL against AVIF, WebP and JPEG at equal SSIMULACRA2, for `docs/performance.md`
//! (issue 53): each photo of a folder is fitted inside 512×512 (the pixels handed to the
//! encoder, as `q=auto` scores them) and encoded by imgcas's own encoders at every fifth
//! quality within each format's search bounds, on one thread, each output scored with
//! SSIMULACRA2. Per photo and format, the bytes and encode time at a score of 70 are read off
//! the curve (linear between the two qualities around it), and butteraugli's 3-norm there
//! (libjxl's `butteraugli_main`, where installed) checks the look by a second meter; with
//! `FORMAT_COMPARE_BUTTERAUGLI=1`, every encode is also measured by butteraugli and the bytes
//! at an equal 3-norm of 1.3 are read off too (slow: a second a measurement). Also measured:
//! the encoder's other efforts (`jixel` at `Fastest` and `Medium`), libjxl's own encoder
//! (`cjxl` effort 7, its default, where installed; the process's time), the median quality
//! reaching 60, 70 and 80 (where `q=auto` starts) and the median score of each default
//! quality, and lossless output (PNG, WebP, JPEG XL) bytes and time.
//!
//! `cargo run --release -p imgcas-processors --example format_compare -- <folder> [photos]`

#[path = "shared/photos.rs"]
mod shared;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use imgcas_processors::auto_quality::{bounds, score};
use imgcas_processors::encode::encode;
use imgcas_processors::{decode, probe, process, DynamicImage, Limits, OutputFormat, Spec};

const TARGET: f64 = 70.0;
const BUTTERAUGLI_TARGET: f64 = 1.3;

/// One encode: quality, bytes, score, milliseconds, butteraugli's 3-norm (when measured), and
/// its decoded pixels.
struct Point {
    quality: f64,
    bytes: f64,
    score: f64,
    ms: f64,
    butteraugli: Option<f64>,
    pixels: DynamicImage,
}

/// What an encoder came to on one photo at [`TARGET`] (and at [`BUTTERAUGLI_TARGET`]).
struct AtTarget {
    bytes: f64,
    ms: f64,
    butteraugli: Option<f64>,
    bytes_at_butteraugli: Option<f64>,
}

/// An encoder measured: its name, qualities, and how it encodes the shaped pixels (from the
/// reference PNG where it is a command) at a quality, giving bytes and milliseconds.
type Encodes<'a> = Box<dyn Fn(&DynamicImage, &Path, u8) -> Result<(Vec<u8>, f64), String> + 'a>;

/// An encoder measured: its name, its quality bounds, its default quality, and its encodes.
struct Encoder<'a> {
    name: String,
    bounds: (u8, u8),
    default: Option<u8>,
    encodes: Encodes<'a>,
}

/// butteraugli's 3-norm of decoded pixels against the photo's reference.
type Measure<'a> = &'a dyn Fn(&DynamicImage) -> Option<f64>;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: format_compare <folder> [photos]";
    let folder = args.next().ok_or(usage)?;
    let count: usize = args
        .next()
        .map_or(Ok(40), |n| n.parse().map_err(|_| usage))?;
    let photos = shared::photos(&folder, count)?;
    let scratch = tempfile_dir()?;
    let has = |tool: &str| Command::new(tool).arg("--help").output().is_ok();
    let butteraugli = has("butteraugli_main");
    let every_butteraugli = butteraugli && std::env::var_os("FORMAT_COMPARE_BUTTERAUGLI").is_some();
    let limits = Limits::default();
    let spec_of = |query: &str| {
        Spec::parse(query)
            .map(|s| s.resolve(Some(OutputFormat::Png), false, None))
            .map_err(|e| e.to_string())
    };
    let ours = |format: OutputFormat| -> Encodes<'_> {
        Box::new(move |shaped, _, q| {
            let spec = spec_of(&format!("format={}&q={q}", format.name()))?;
            let t = Instant::now();
            let out = encode(shaped.clone(), &spec).map_err(|e| e.to_string())?;
            Ok((out.bytes, t.elapsed().as_secs_f64() * 1e3))
        })
    };
    let jixel_at = |speed: jixel::Speed| -> Encodes<'_> {
        Box::new(move |shaped, _, q| {
            let rgb = shaped.to_rgb8();
            let config = jixel::EncodeConfig::default()
                .with_speed(speed)
                .with_num_threads(1)
                .with_distance(jixel::distance_from_quality(f32::from(q)));
            let t = Instant::now();
            let out = jixel::encode_image(
                rgb.as_raw(),
                rgb.width() as usize,
                rgb.height() as usize,
                &config,
            )
            .map_err(|e| format!("{e:?}"))?;
            Ok((out, t.elapsed().as_secs_f64() * 1e3))
        })
    };
    let jxl_bounds = bounds(OutputFormat::Jxl);
    let mut encoders: Vec<Encoder<'_>> = [
        OutputFormat::Jpeg,
        OutputFormat::Webp,
        OutputFormat::Avif,
        OutputFormat::Jxl,
    ]
    .into_iter()
    .map(|f| {
        let name = match f {
            OutputFormat::Jxl => "jxl (jixel Fast)".to_string(),
            f => f.name().to_string(),
        };
        Encoder {
            name,
            bounds: bounds(f),
            default: f.default_quality(),
            encodes: ours(f),
        }
    })
    .collect();
    for (name, speed) in [
        ("jixel Fastest", jixel::Speed::Fastest),
        ("jixel Medium", jixel::Speed::Medium),
    ] {
        encoders.push(Encoder {
            name: name.into(),
            bounds: jxl_bounds,
            default: None,
            encodes: jixel_at(speed),
        });
    }
    if has("cjxl") {
        let cjxl: Encodes<'_> = Box::new(|_, reference, q| {
            let out = reference.with_file_name("cjxl.jxl");
            let t = Instant::now();
            let done = Command::new("cjxl")
                .arg(reference)
                .arg(&out)
                .args([
                    "-q",
                    &q.to_string(),
                    "-e",
                    "7",
                    "--num_threads=0",
                    "--quiet",
                ])
                .output()
                .map_err(|e| e.to_string())?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if !done.status.success() {
                return Err(format!("cjxl: {done:?}"));
            }
            Ok((std::fs::read(&out).map_err(|e| e.to_string())?, ms))
        });
        encoders.push(Encoder {
            name: "libjxl 0.7 (cjxl -e 7)".into(),
            bounds: jxl_bounds,
            default: None,
            encodes: cjxl,
        });
    }
    let n = encoders.len();
    let mut at_target: Vec<Vec<AtTarget>> = (0..n).map(|_| Vec::new()).collect();
    let mut qualities: Vec<[Vec<f64>; 3]> = (0..n).map(|_| Default::default()).collect();
    let mut default_scores: Vec<Vec<f64>> = (0..n).map(|_| Vec::new()).collect();
    // Lossless: PNG, WebP, JPEG XL (bytes, ms) summed.
    let lossless = [
        "format=png",
        "format=webp&lossless=1",
        "format=jxl&lossless=1",
    ];
    let mut lossless_sums = [(0.0, 0.0); 3];
    for path in &photos {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let info = probe(&bytes, &limits).map_err(|e| e.to_string())?;
        let shape = Spec::parse("w=512&h=512&fit=contain&format=png")
            .map_err(|e| e.to_string())?
            .resolve(info.format.as_output(), info.has_alpha, None);
        let png = process(&bytes, &shape, &limits)
            .map_err(|e| e.to_string())?
            .bytes;
        let decoded = |b: &[u8]| {
            decode::decode(b, &limits)
                .map(|d| d.1)
                .map_err(|e| e.to_string())
        };
        let shaped = decoded(&png)?;
        let reference = scratch.join("reference.png");
        std::fs::write(&reference, &png).map_err(|e| e.to_string())?;
        let measure = |pixels: &DynamicImage| butteraugli_of(&reference, &scratch, pixels);
        let mut photo = Vec::new();
        for (i, encoder) in encoders.iter().enumerate() {
            let (floor, ceiling) = encoder.bounds;
            let encodes = &encoder.encodes;
            let mut curve = Vec::new();
            for q in (floor..=ceiling).filter(|q| q % 5 == 0) {
                let (out, ms) = encodes(&shaped, &reference, q)?;
                let pixels = decoded(&out)?;
                let s = score(&shaped, &pixels).map_err(|e| e.to_string())?;
                curve.push(Point {
                    quality: f64::from(q),
                    bytes: out.len() as f64,
                    score: s,
                    ms,
                    butteraugli: every_butteraugli.then(|| measure(&pixels)).flatten(),
                    pixels,
                });
            }
            if let Some(default) = encoder.default {
                let (out, _) = encodes(&shaped, &reference, default)?;
                let s = score(&shaped, &decoded(&out)?).map_err(|e| e.to_string())?;
                default_scores[i].push(s);
            }
            photo.push(record(
                &curve,
                &mut qualities[i],
                butteraugli.then_some(&measure),
            ));
        }
        // Counted where every encoder brackets the target, so that each mean is over the
        // same photos.
        if photo.iter().all(Option::is_some) {
            for (i, figures) in photo.into_iter().flatten().enumerate() {
                at_target[i].push(figures);
            }
        }
        for (sum, query) in lossless_sums.iter_mut().zip(lossless) {
            let spec = spec_of(query)?;
            let t = Instant::now();
            let out = encode(shaped.clone(), &spec).map_err(|e| e.to_string())?;
            sum.1 += t.elapsed().as_secs_f64() * 1e3;
            sum.0 += out.bytes.len() as f64;
        }
        eprintln!("{}", path.display());
    }
    let every = at_target[0].len();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let of = |i: usize, f: fn(&AtTarget) -> Option<f64>| -> Vec<f64> {
        at_target[i].iter().filter_map(f).collect()
    };
    let webp_bytes = mean(&of(1, |a| Some(a.bytes)));
    let avif_ms = mean(&of(2, |a| Some(a.ms)));
    let webp_at_ba = mean(&of(1, |a| a.bytes_at_butteraugli));
    println!(
        "{} photos at 512 px, SSIMULACRA2 {TARGET} ({every} bracketed by every encoder):",
        photos.len()
    );
    for (i, Encoder { name, .. }) in encoders.iter().enumerate() {
        let bytes = mean(&of(i, |a| Some(a.bytes)));
        let ms = mean(&of(i, |a| Some(a.ms)));
        let at_ba = of(i, |a| a.bytes_at_butteraugli);
        let [q60, q70, q80] = &qualities[i];
        println!(
            "  {name:24} bytes {bytes:8.0} (÷ WebP {:.3})  encode {ms:6.1} ms (÷ AVIF {:.2})  \
             butteraugli 3-norm {:.3}{}  quality at 60/70/80: {:.0}/{:.0}/{:.0}  default scores {:.1}",
            bytes / webp_bytes,
            ms / avif_ms,
            mean(&of(i, |a| a.butteraugli)),
            if at_ba.is_empty() {
                String::new()
            } else {
                format!(
                    "; at 3-norm {BUTTERAUGLI_TARGET}: bytes {:.0} (÷ WebP {:.3}, {} photos)",
                    mean(&at_ba),
                    mean(&at_ba) / webp_at_ba,
                    at_ba.len()
                )
            },
            median(q60),
            median(q70),
            median(q80),
            median(&default_scores[i]),
        );
    }
    for ((bytes, ms), query) in lossless_sums.iter().zip(lossless) {
        println!(
            "  lossless {query:24} mean bytes {:8.0}  encode {:6.1} ms",
            bytes / photos.len() as f64,
            ms / photos.len() as f64
        );
    }
    Ok(())
}

/// Reads a curve at [`TARGET`] (and the qualities at 60, 70 and 80), with butteraugli at the
/// target from the two encodes around it, where `measure` is given.
fn record(
    curve: &[Point],
    qualities: &mut [Vec<f64>; 3],
    measure: Option<Measure<'_>>,
) -> Option<AtTarget> {
    for (slot, target) in qualities.iter_mut().zip([60.0, 70.0, 80.0]) {
        if let Some((a, b, t)) = bracket(curve, target) {
            slot.push(a.quality + t * (b.quality - a.quality));
        }
    }
    // Bytes at an equal butteraugli 3-norm (lower is better), where every encode has one.
    let bytes_at_butteraugli = curve.windows(2).find_map(|w| {
        let (a, b) = (w[0].butteraugli?, w[1].butteraugli?);
        (a > BUTTERAUGLI_TARGET && b <= BUTTERAUGLI_TARGET).then(|| {
            let t = (a - BUTTERAUGLI_TARGET) / (a - b);
            w[0].bytes + t * (w[1].bytes - w[0].bytes)
        })
    });
    let (a, b, t) = bracket(curve, TARGET)?;
    let lerp = |x: f64, y: f64| x + t * (y - x);
    let butteraugli = match (a.butteraugli, b.butteraugli) {
        (Some(x), Some(y)) => Some(lerp(x, y)),
        _ => measure.and_then(|m| Some(lerp(m(&a.pixels)?, m(&b.pixels)?))),
    };
    Some(AtTarget {
        bytes: lerp(a.bytes, b.bytes),
        ms: lerp(a.ms, b.ms),
        butteraugli,
        bytes_at_butteraugli,
    })
}

/// The two neighbouring encodes whose scores straddle `target`, and where it lies between.
fn bracket(curve: &[Point], target: f64) -> Option<(&Point, &Point, f64)> {
    curve.windows(2).find_map(|w| {
        let (a, b) = (&w[0], &w[1]);
        (a.score < target && b.score >= target)
            .then(|| (a, b, (target - a.score) / (b.score - a.score)))
    })
}

/// butteraugli's 3-norm of `pixels` against the reference PNG.
fn butteraugli_of(reference: &Path, scratch: &Path, pixels: &DynamicImage) -> Option<f64> {
    let distorted = scratch.join("distorted.png");
    pixels.to_rgb8().save(&distorted).ok()?;
    let out = Command::new("butteraugli_main")
        .arg(reference)
        .arg(&distorted)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("3-norm: ")?.trim().parse().ok())
}

/// A scratch folder for the files the command-line tools read.
fn tempfile_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("format_compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

//! Animated AVIF against animated WebP and GIF, for `docs/performance.md` (issue 53).
//!
//! `anim_compare <file>...`: each animation made at its own size as animated WebP and AVIF at
//! every fifth quality within the formats' search bounds, and as GIF. Each output's frames are
//! scored with SSIMULACRA2 against the exact frames (the same run in lossless WebP), sampled
//! at every source frame's start (an encoder may merge frames it cannot tell apart, so frames
//! are matched by time, not by index); the mean over frames is the output's score. Prints the
//! bytes and the run's time (decode, resize, encode: `process`, one thread) at a mean score of
//! 70 for WebP and AVIF (linear between the qualities around it), and GIF's bytes and score;
//! then the median over the animations of AVIF's bytes over WebP's at that score, where an
//! animation only one of the two formats brings to 70 counts as that format's win.
//! `ANIM_COMPARE_CURVES=1` prints each format's (bytes, score, ms) at every quality.
//!
//! `anim_compare --memory <webp|avif|gif>`: four runs at once, on four threads, of a 499-frame
//! 300 × 300 GIF (changing content: a moving gradient) into the format; prints the process's
//! peak resident memory (`VmHWM`). Run once per format, each in a process of its own.
//!
//! `cargo run --release -p imgcas-processors --example anim_compare -- <args>`

use std::io::Cursor;
use std::time::Instant;

use image::codecs::gif::GifDecoder;
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, DynamicImage, RgbaImage};
use imgcas_processors::auto_quality::{bounds, score};
use imgcas_processors::{animation, probe, process, Limits, OutputFormat, Spec};

const TARGET: f64 = 70.0;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--memory") {
        let format = args.get(1).ok_or("--memory <webp|avif|gif>")?;
        return memory(format);
    }
    if args.is_empty() {
        return Err("usage: anim_compare <file>... | --memory <webp|avif|gif>".into());
    }
    let (mut webp_sum, mut avif_sum) = ((0.0, 0.0), (0.0, 0.0));
    let mut counted = 0;
    let mut ratios = Vec::new();
    for path in &args {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        // An animation beyond the service's limits is refused there too: skipped here.
        let exact = match run(&bytes, "format=webp&lossless=1") {
            Ok((out, _)) => frames(&out)?,
            Err(e) => {
                println!("{path}: skipped: {e}");
                continue;
            }
        };
        let starts = starts(&exact);
        let mut at = Vec::new();
        for format in [OutputFormat::Webp, OutputFormat::Avif] {
            let (floor, ceiling) = bounds(format);
            let mut curve = Vec::new();
            for q in (floor..=ceiling).filter(|q| q % 5 == 0) {
                let (out, ms) = run(&bytes, &format!("format={}&q={q}", format.name()))?;
                let s = mean_score(&exact, &starts, &frames(&out)?)?;
                curve.push((out.len() as f64, s, ms));
            }
            if std::env::var_os("ANIM_COMPARE_CURVES").is_some() {
                eprintln!("{path} {}: {curve:?}", format.name());
            }
            at.push(at_target(&curve));
        }
        let (gif, gif_ms) = run(&bytes, "format=gif")?;
        let gif_score = mean_score(&exact, &starts, &frames(&gif)?)?;
        let name = std::path::Path::new(path)
            .file_name()
            .map_or(path.clone(), |n| n.to_string_lossy().into_owned());
        let ratio = match (at[0], at[1]) {
            (Reach::At(webp), Reach::At(avif)) => {
                counted += 1;
                webp_sum = (webp_sum.0 + webp.0, webp_sum.1 + webp.1);
                avif_sum = (avif_sum.0 + avif.0, avif_sum.1 + avif.1);
                println!(
                    "{name}: {} frames; at SSIMULACRA2 {TARGET}: WebP {:.0} B {:.0} ms, AVIF {:.0} B \
                     {:.0} ms (AVIF ÷ WebP: bytes {:.2}, time {:.1}); GIF {} B {gif_ms:.0} ms at {gif_score:.1}",
                    exact.len(),
                    webp.0,
                    webp.1,
                    avif.0,
                    avif.1,
                    avif.0 / webp.0,
                    avif.1 / webp.1,
                    gif.len(),
                );
                avif.0 / webp.0
            }
            (webp, avif) => {
                println!(
                    "{name}: {} frames; not both at {TARGET}: WebP {webp}, AVIF {avif}; \
                     GIF {} B at {gif_score:.1}",
                    exact.len(),
                    gif.len()
                );
                // The format that reaches the look wins outright; neither: no verdict.
                match (webp, avif) {
                    (Reach::Below(_), Reach::At(_)) => 0.0,
                    (Reach::At(_), Reach::Below(_)) => f64::INFINITY,
                    _ => f64::NAN,
                }
            }
        };
        ratios.push(ratio);
    }
    if counted > 0 {
        println!(
            "{counted} animations, AVIF ÷ WebP at equal score: bytes {:.2}, time {:.1} (sums)",
            avif_sum.0 / webp_sum.0,
            avif_sum.1 / webp_sum.1
        );
    }
    ratios.retain(|r| !r.is_nan());
    ratios.sort_by(f64::total_cmp);
    if !ratios.is_empty() {
        let mid = ratios.len() / 2;
        let median = if ratios.len() % 2 == 1 {
            ratios[mid]
        } else {
            (ratios[mid - 1] + ratios[mid]) / 2.0
        };
        println!(
            "median AVIF ÷ WebP bytes at equal score over {} animations: {median:.2} \
             (an animation only one format brings to {TARGET} counts as that format's win)",
            ratios.len()
        );
    }
    Ok(())
}

/// Where a format's curve of (bytes, mean score, ms) by rising quality meets the target.
#[derive(Clone, Copy)]
enum Reach {
    /// Bytes and ms at the target (linear between the qualities around it; the floor's own
    /// figures when the floor already scores above it).
    At((f64, f64)),
    /// Never reaches it: the best mean score of the curve.
    Below(f64),
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reach::At((bytes, ms)) => write!(f, "{bytes:.0} B {ms:.0} ms"),
            Reach::Below(best) => write!(f, "never (best {best:.1})"),
        }
    }
}

fn at_target(curve: &[(f64, f64, f64)]) -> Reach {
    if let Some(first) = curve.first().filter(|p| p.1 >= TARGET) {
        return Reach::At((first.0, first.2));
    }
    curve
        .windows(2)
        .find_map(|w| {
            let (a, b) = (w[0], w[1]);
            (a.1 < TARGET && b.1 >= TARGET).then(|| {
                let t = (TARGET - a.1) / (b.1 - a.1);
                Reach::At((a.0 + t * (b.0 - a.0), a.2 + t * (b.2 - a.2)))
            })
        })
        .unwrap_or(Reach::Below(
            curve.iter().map(|p| p.1).fold(f64::MIN, f64::max),
        ))
}

/// `bytes` through `query` with every frame (`animated=1`), as the service resolves it, and
/// the run's milliseconds.
fn run(bytes: &[u8], query: &str) -> Result<(Vec<u8>, f64), String> {
    let limits = Limits::default();
    let info = probe(bytes, &limits).map_err(|e| e.to_string())?;
    let resolved = Spec::parse(&format!("{query}&animated=1"))
        .map_err(|e| e.to_string())?
        .resolve_frames(
            info.format.as_output(),
            info.has_alpha,
            animation::frame_count(bytes),
            None,
        );
    let t = Instant::now();
    let out = process(bytes, &resolved, &limits).map_err(|e| e.to_string())?;
    Ok((out.bytes, t.elapsed().as_secs_f64() * 1e3))
}

/// The frames of an animated WebP, GIF or AVIF output (an AVIF read through imgcas's own
/// sequence decoder into lossless WebP), with their delays in ms.
fn frames(bytes: &[u8]) -> Result<Vec<(RgbaImage, u64)>, String> {
    let decoded = match bytes {
        [b'G', b'I', b'F', ..] => GifDecoder::new(Cursor::new(bytes))
            .map_err(|e| e.to_string())?
            .into_frames(),
        [b'R', b'I', b'F', b'F', ..] => WebPDecoder::new(Cursor::new(bytes))
            .map_err(|e| e.to_string())?
            .into_frames(),
        _ => return frames(&run(bytes, "format=webp&lossless=1")?.0),
    };
    decoded
        .map(|f| {
            let f = f.map_err(|e| e.to_string())?;
            let (n, d) = f.delay().numer_denom_ms();
            Ok((f.into_buffer(), u64::from(n / d.max(1))))
        })
        .collect()
}

fn starts(frames: &[(RgbaImage, u64)]) -> Vec<u64> {
    let mut at = 0;
    frames
        .iter()
        .map(|f| {
            let start = at;
            at += f.1.max(1);
            start
        })
        .collect()
}

/// The mean SSIMULACRA2 of `output`'s frames against `exact`'s, each exact frame against the
/// output frame showing at its start.
fn mean_score(
    exact: &[(RgbaImage, u64)],
    starts: &[u64],
    output: &[(RgbaImage, u64)],
) -> Result<f64, String> {
    let shown = self::starts(output);
    let mut sum = 0.0;
    for ((frame, _), start) in exact.iter().zip(starts) {
        let i = shown.partition_point(|&s| s <= *start).saturating_sub(1);
        let distorted = &output.get(i).ok_or("an output without frames")?.0;
        sum += score(
            &DynamicImage::ImageRgba8(frame.clone()),
            &DynamicImage::ImageRgba8(distorted.clone()),
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(sum / exact.len().max(1) as f64)
}

/// Four runs at once of a 499-frame 300 × 300 GIF into `format`; prints the peak memory.
fn memory(format: &str) -> Result<(), String> {
    let gif = long_gif(499, 300)?;
    let query = format!("w=300&format={format}");
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let (gif, query) = (gif.clone(), query.clone());
            std::thread::spawn(move || run(&gif, &query).map(|(out, ms)| (out.len(), ms)))
        })
        .collect();
    let mut done = Vec::new();
    for r in runs {
        done.push(r.join().map_err(|_| "a run panicked")??);
    }
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let peak = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap_or("?")
        .trim();
    println!(
        "{format}: four 499-frame 300x300 animations at once: peak {peak}; outputs {:?} bytes, {:.0} ms each",
        done.iter().map(|d| d.0).collect::<Vec<_>>(),
        done.iter().map(|d| d.1).sum::<f64>() / done.len() as f64
    );
    Ok(())
}

/// A GIF of `frames` frames of `size`², each a diagonal gradient shifted by its index (every
/// frame differs, as in a real clip; palettes of few colours, as GIFs have).
fn long_gif(frames: u32, size: u32) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut encoder = image::codecs::gif::GifEncoder::new_with_speed(&mut out, 30);
        encoder
            .set_repeat(image::codecs::gif::Repeat::Infinite)
            .map_err(|e| e.to_string())?;
        for i in 0..frames {
            let pixels = RgbaImage::from_fn(size, size, |x, y| {
                let v = ((x + y + i * 3) % 256) as u8;
                image::Rgba([v, v / 2, 255 - v, 255])
            });
            let delay = image::Delay::from_numer_denom_ms(40, 1);
            encoder
                .encode_frame(image::Frame::from_parts(pixels, 0, 0, delay))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

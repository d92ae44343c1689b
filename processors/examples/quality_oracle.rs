//! How close `q=auto:good`'s search comes to the best any per-image choice could do, for
//! `docs/performance.md`: each photo of a folder is fitted inside 512×512 and encoded at every
//! quality within the format's bounds, each output scored as the search scores it; the
//! oracle takes, photo by photo, the lowest quality whose output reaches the target. Prints
//! the search's and the oracle's mean bytes against today's default quality and against the
//! lowest fixed quality (steps of 5, as `bench/quality.py`) whose every output scores at
//! least the target − 1, and the search's attempts. Every output, the search's too, is scored
//! against the lossless rendition of its spec (the same spec as PNG: for a large progressive
//! photo reduced 8 times or more, the faithful decode, never the DC scans' 1/8), and the
//! search's lowest score is printed with the photos below the target − 1.
//!
//! `cargo run --release -p imgcas-processors --example quality_oracle -- <folder> <jpeg|webp|avif> [photos]`
//!
//! The large progressive photos: `python3 bench/media.py` leaves them in
//! `bench/.media/large-progressive` (camera photos of 12–22 MP made progressive by `jpegtran`).

#[path = "shared/photos.rs"]
mod shared;

use imgcas_processors::auto_quality::{bounds, score};
use imgcas_processors::{decode, probe, process, Limits, OutputFormat, Spec};

const TARGET: f64 = 70.0;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: quality_oracle <folder> <jpeg|webp|avif> [photos]";
    let folder = args.next().ok_or(usage)?;
    let name = args.next().ok_or(usage)?;
    let count: usize = args
        .next()
        .map_or(Ok(40), |n| n.parse().map_err(|_| usage))?;
    let format = OutputFormat::from_name(&name).ok_or(usage)?;
    let default = format.default_quality().ok_or("a lossy format")?;
    let (floor, ceiling) = bounds(format);
    let photos = shared::photos(&folder, count)?;
    let limits = Limits::default();
    // Per photo: (quality, bytes, score) at every quality; the search's bytes and attempts.
    let mut curves = Vec::new();
    let (mut searched_bytes, mut attempts) = (0usize, 0u32);
    let (mut lowest, mut below) = (f64::MAX, 0usize);
    for path in &photos {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let info = probe(&bytes, &limits).map_err(|e| e.to_string())?;
        let run = |query: &str| {
            let spec = Spec::parse(query).map_err(|e| e.to_string())?;
            let spec = spec.resolve(info.format.as_output(), info.has_alpha, None);
            process(&bytes, &spec, &limits).map_err(|e| e.to_string())
        };
        let decoded = |b: &[u8]| {
            decode::decode(b, &limits)
                .map(|d| d.1)
                .map_err(|e| e.to_string())
        };
        let box_ = "w=512&h=512&fit=contain";
        let shaped = decoded(&run(&format!("{box_}&format=png"))?.bytes)?;
        let mut curve = Vec::new();
        for q in floor..=ceiling {
            let out = run(&format!("{box_}&format={name}&q={q}"))?;
            let s = score(&shaped, &decoded(&out.bytes)?).map_err(|e| e.to_string())?;
            curve.push((q, out.bytes.len(), s));
        }
        let searched = run(&format!("{box_}&format={name}&q=auto:good"))?;
        searched_bytes += searched.bytes.len();
        let searched_score =
            score(&shaped, &decoded(&searched.bytes)?).map_err(|e| e.to_string())?;
        lowest = lowest.min(searched_score);
        if searched_score < TARGET - 1.0 {
            below += 1;
            eprintln!("{}: q=auto:good scores {searched_score:.2}", path.display());
        }
        attempts += searched.search_encodes;
        curves.push(curve);
    }
    let at = |curve: &[(u8, usize, f64)], q: u8| curve[usize::from(q - floor)];
    let oracle: usize = curves
        .iter()
        .map(|c| {
            c.iter()
                .find(|p| p.2 >= TARGET)
                .unwrap_or(&at(c, ceiling))
                .1
        })
        .sum();
    let default_bytes: usize = curves.iter().map(|c| at(c, default).1).sum();
    let fixed = (floor..=ceiling)
        .filter(|q| q % 5 == 0)
        .find(|&q| curves.iter().all(|c| at(c, q).2 >= TARGET - 1.0))
        .unwrap_or(ceiling);
    let fixed_bytes: usize = curves.iter().map(|c| at(c, fixed).1).sum();
    let ratio = |a: usize, b: usize| a as f64 / b.max(1) as f64;
    println!(
        "{name}, {} photos: q=auto:good ÷ default (q{default}) {:.3}, ÷ fixed at the floor (q{fixed}) {:.3}; \
         oracle ÷ default {:.3}, ÷ fixed {:.3}; search ÷ oracle {:.3}; attempts per search {:.2}; \
         the search's lowest score against the lossless rendition {lowest:.2}, {below} below {}",
        photos.len(),
        ratio(searched_bytes, default_bytes),
        ratio(searched_bytes, fixed_bytes),
        ratio(oracle, default_bytes),
        ratio(oracle, fixed_bytes),
        ratio(searched_bytes, oracle),
        f64::from(attempts) / photos.len().max(1) as f64,
        TARGET - 1.0,
    );
    Ok(())
}

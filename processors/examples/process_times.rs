//! `cargo run --release -p imgcas-processors --example process_times -- photo.jpg "w=400&format=jpeg" 9`:
//! the in-process time of `process()` (the service's run of the same spec, mezzanine
//! included: nothing is kept between runs), median and best of N runs, as one JSON line. The
//! benchmarks hold the service's cold request over HTTP against it (`bench/decode_once.py`).

use std::time::Instant;

use imgcas_processors::{process, Limits, Spec};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: process_times <image> [spec] [runs]");
    let query = args.next().unwrap_or_else(|| "w=400&format=jpeg".into());
    let runs: usize = args.next().map_or(9, |n| n.parse().expect("runs"));
    let bytes = std::fs::read(&path).expect("readable image");
    let limits = Limits::default();
    let spec = Spec::parse(&query).expect("spec").resolve_frames(
        None,
        false,
        imgcas_processors::animation::frame_count(&bytes),
        None,
    );
    let mut times: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            let start = Instant::now();
            let out = process(&bytes, &spec, &limits).expect("processes");
            std::hint::black_box(out);
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "{{\"spec\": \"{query}\", \"runs\": {}, \"p50_ms\": {:.2}, \"best_ms\": {:.2}}}",
        times.len(),
        times[times.len() / 2],
        times[0]
    );
}

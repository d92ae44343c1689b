//! The checks of the image fuzz targets, shared by `fuzz/fuzz_targets/*.rs` and the replay of
//! found inputs in plain `cargo test` (`processors/tests/it/fuzz_replay.rs`): each takes any
//! bytes and returns what they must give (`ok`, or the error's code); a panic, a hang or a
//! runaway allocation is the bug. A small pixel limit keeps each input's work bounded.
// Each target uses one check of this file.
#![allow(dead_code)]

use imgcas_processors::{Decode, Limits, OutputFormat, ProcessError, Spec};

/// Lets a panic unwind to the guard around a third-party decoder, as it does in the service
/// (where it is the input's `undecodable`): libFuzzer's hook aborts at the panic itself,
/// before any `catch_unwind`, so every input reaching a known, guarded decoder bug would
/// stop the run as a crash. A panic that escapes the guards still ends the run (libfuzzer-sys
/// aborts on one that leaves the target). The fuzz targets call this; the replay keeps the
/// test harness's own hook.
pub fn unwind_to_the_guards() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            eprintln!("panic (caught unless it escapes): {info}")
        }));
    });
}

/// The limits of every check: a small pixel limit, and the `svg` check's cost limit (below)
/// for every drawing a check opens, whatever it does with it. The service charges a document
/// before it lays its text out or draws it, at its own limit (50 times this one); under the
/// fuzzer's instrumentation a document runs about three times slower than in the service, so
/// at the service's limit a costly drawing honestly charged outlives the fuzzer's timeout.
/// A drawing inside this limit that still does is an under-charge: the `svg` target's kind
/// of find.
fn limits() -> Limits {
    Limits {
        max_pixels: 4_000_000,
        max_cost: 20_000_000,
        ..Limits::default()
    }
}

fn outcome<T>(r: Result<T, ProcessError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.kind().map_or("internal", |k| k.code()).into(),
    }
}

/// `probe`: every format's header walker (sizes, counts, containers, animation headers).
pub fn probe(data: &[u8]) -> String {
    let _ = imgcas_processors::animation::frame_count(data);
    outcome(imgcas_processors::probe(data, &limits()))
}

/// The facts (placeholders, frame count) of any bytes.
pub fn facts(data: &[u8]) -> String {
    outcome(imgcas_processors::facts::facts(data, &limits(), &Decode))
}

/// The near-duplicate fingerprint of any bytes.
pub fn fingerprint(data: &[u8]) -> String {
    outcome(imgcas_processors::fingerprint::fingerprint(
        data,
        &limits(),
        &Decode,
    ))
}

/// The whole processing path, still and animated.
pub fn decode(data: &[u8]) -> String {
    let still = Spec::from_pairs([("w", "48"), ("h", "48"), ("fit", "cover")])
        .expect("a valid spec")
        .resolve(Some(OutputFormat::Png), false, None);
    let _ = imgcas_processors::process(data, &still, &limits());
    // Resolved for the frames the headers declare, as the service does: an animated source
    // walks the frame decoders.
    let frames = imgcas_processors::animation::frame_count(data);
    let animated = Spec::from_pairs([("w", "48"), ("format", "webp"), ("animated", "1")])
        .expect("a valid spec")
        .resolve_frames(None, false, frames, None);
    outcome(imgcas_processors::process(data, &animated, &limits()))
}

/// `svg`: a drawing costed and drawn at two sizes, as the service does (the cost first, then
/// the run, which opens the document again: four openings, each laying its text out). The
/// cost limit ([`limits`]) is 2·10^7 pixel-equivalents, about a third of a second of one
/// core by the costing's own calibration (the service's default is 50 times that): an input
/// over it is refused before it is drawn, so one that outlives the fuzzer's timeout (10 s) is
/// a drawing the costing under-charges several times over.
pub fn svg(data: &[u8]) -> String {
    let limits = limits();
    let mut answer = String::new();
    for (w, format) in [("48", OutputFormat::Png), ("400", OutputFormat::Webp)] {
        let spec =
            Spec::from_pairs([("w", w)])
                .expect("a valid spec")
                .resolve(Some(format), false, None);
        let _ = imgcas_processors::drawing_cost(data, &spec, &limits);
        answer = outcome(imgcas_processors::process(data, &spec, &limits));
    }
    answer
}

/// Seconds one unit of cost is taken to cost (the service's prior, `admission`), how many
/// times over a run may take before it is stopped (the service's `SPARE`), and how much
/// slower the fuzzer's instrumented build runs than the service.
const SECS_PER_UNIT: f64 = 40e-9;
const SPARE: f64 = 10.0;
const INSTRUMENTED: f64 = 3.0;

/// `jxl`: JPEG XL bytes through the whole path with the cost checks on, as the service runs
/// them (issue 67): the plan's cost first (over the limit: refused before any decode), then
/// the run under a stop signal raised at the deadline the service would give it (its cost
/// at [`SECS_PER_UNIT`], [`SPARE`] times over, at least a second). Two things are bugs:
/// a run that goes on more than a second past its signal (the render was not cut short), and
/// a run the signal had to stop at all (the cost under-charged it [`SPARE`] times over).
/// Bytes that are not JPEG XL are passed over.
pub fn jxl(data: &[u8]) -> String {
    use imgcas_processors::SourceFormat;
    if imgcas_processors::sniff(data) != Some(SourceFormat::Jxl) {
        return "not_jxl".into();
    }
    let limits = limits();
    let spec = Spec::from_pairs([("w", "48"), ("h", "48"), ("fit", "cover")])
        .expect("a valid spec")
        .resolve(Some(OutputFormat::Png), false, None);
    let size = match imgcas_processors::probe(data, &limits) {
        Ok(info) => (info.width, info.height),
        Err(e) => return outcome::<()>(Err(e)),
    };
    let cost = imgcas_processors::cost(Some(SourceFormat::Jxl), size, &spec);
    if let Err(e) = imgcas_processors::check_cost(cost, &limits) {
        return outcome::<()>(Err(e));
    }
    let deadline = (cost as f64 * SECS_PER_UNIT * SPARE * INSTRUMENTED).max(1.0);
    let deadline = std::time::Duration::from_secs_f64(deadline);
    let started = std::time::Instant::now();
    let _signal =
        imgcas_processors::interrupt::stop_this_thread_when(std::sync::Arc::new(move || {
            started.elapsed() > deadline
        }));
    let result = imgcas_processors::process(data, &spec, &limits);
    let took = started.elapsed();
    assert!(
        took <= deadline + std::time::Duration::from_secs(1),
        "ran {took:?}, past its stop at {deadline:?} (cost {cost} for {size:?})"
    );
    if let Err(ProcessError::Stopped(_)) = &result {
        panic!("under-charged: stopped at {deadline:?} for a cost of {cost} ({size:?})");
    }
    outcome(result)
}

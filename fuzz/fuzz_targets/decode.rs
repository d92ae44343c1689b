//! Any bytes through the whole processing path (sniff, header checks, decode, resize, encode)
//! under a small pixel limit: an error is fine, a panic, hang or runaway allocation is a bug.
#![no_main]

use imgcas_processors::{process, Limits, OutputFormat, Spec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_pixels: 4_000_000,
        ..Limits::default()
    };
    let spec = Spec::from_pairs([("w", "48"), ("h", "48"), ("fit", "cover")])
        .expect("a valid spec")
        .resolve(Some(OutputFormat::Png), false, None);
    let _ = imgcas_processors::probe(data, &limits);
    let _ = process(data, &spec, &limits);
});

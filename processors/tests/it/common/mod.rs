//! Inputs shared by the quality tests: the test data folder, and the 12 MP photo the
//! benchmarks use; and the one run from bytes and a query the tests share.

use std::path::Path;

use image::DynamicImage;
use imgcas_processors::{
    probe, process, process_input, Decode, Input, Limits, OutputFormat, ProcessError, Spec,
};

/// Bytes through a query, as the service would run them (probe, resolve, process), decoded.
pub fn run(bytes: &[u8], query: &str) -> Result<DynamicImage, ProcessError> {
    let spec = Spec::parse(query).unwrap();
    let info = probe(bytes, &Limits::default())?;
    let resolved = spec.resolve(info.format.as_output(), info.has_alpha, None);
    let out = process(bytes, &resolved, &Limits::default())?;
    Ok(image::load_from_memory(&out.bytes).expect("output decodes"))
}

pub fn testdata(path: &str) -> Vec<u8> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(path);
    std::fs::read(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The benchmarks' 12 MP photo: a real photograph (`Landscape_1.jpg`) enlarged to
/// 4000×2667, JPEG q90; large enough to shrink on load at every factor.
pub fn twelve_megapixels() -> Vec<u8> {
    let source = testdata("exif-orientation/Landscape_1.jpg");
    let enlarge = Spec::from_pairs([("w", "4000"), ("enlarge", "1"), ("q", "90")])
        .unwrap()
        .resolve(Some(OutputFormat::Jpeg), false, None);
    process_input(
        Input::Original(&source),
        &enlarge,
        &Limits::default(),
        &Decode,
    )
    .unwrap()
    .bytes
}

//! The mezzanine costs no visible quality: on native-resolution photos stored losslessly
//! (PNG: the sources that have a mezzanine, since JPEG shrinks on load instead), an output
//! made from the mezzanine is within 0.35 dB PSNR of the same output made from the original
//! itself (decoded whole), both measured against a reference made without any shortcut (the
//! original decoded at full size, Lanczos3 to the output size, not encoded). The photos:
//! sharp's 3840×2160 `gain-map.jpg`, the 12 MP photo the benchmarks use (`Landscape_1.jpg`
//! enlarged to 4000×2667), and sharp's 2725×2225 photo, which is below the mezzanine's
//! threshold and must not use it. JPEG originals never use it.

use crate::common;

use common::{testdata, twelve_megapixels};

use image::DynamicImage;
use imgcas_processors::compare::psnr;
use imgcas_processors::geometry::Plan;
use imgcas_processors::{
    decode, mezzanine, ops, process, process_input, Decode, Input, Limits, OutputFormat,
    ResolvedSpec, Spec,
};

fn spec(query: &[(&str, &str)]) -> ResolvedSpec {
    Spec::from_pairs(query.iter().copied())
        .unwrap()
        .resolve(Some(OutputFormat::Jpeg), false, None)
}

/// The same picture stored losslessly, as a PNG.
fn as_png(original: &[u8]) -> Vec<u8> {
    let png = Spec::from_pairs([("format", "png")]).unwrap().resolve(
        Some(OutputFormat::Png),
        false,
        None,
    );
    process_input(Input::Original(original), &png, &Limits::default(), &Decode)
        .unwrap()
        .bytes
}

/// How much PSNR an output from the mezzanine may lose against the whole decode of a
/// lossless original (the best path there is, which a JPEG original's shrink-on-load path
/// is not: against that, the mezzanine was within 0.08 dB). Measured at most 0.32 dB, at
/// w=500 of the 12 MP photo (an enlarged, smooth picture, where the mezzanine's JPEG q92
/// shows most); 0.05 dB at most on the native-resolution photo.
const TOLERANCE_DB: f64 = 0.35;

fn decoded(bytes: &[u8]) -> DynamicImage {
    decode::decode(bytes, &Limits::default()).unwrap().1
}

/// (PSNR from the mezzanine, PSNR from the original) of one spec, against the reference.
fn compare(original: &[u8], full: &DynamicImage, spec: &ResolvedSpec) -> (f64, f64) {
    let limits = Limits::default();
    let direct = process_input(Input::Original(original), spec, &limits, &Decode).unwrap();
    let via_mezzanine = process(original, spec, &limits).unwrap();
    assert_eq!(
        (direct.width, direct.height),
        (via_mezzanine.width, via_mezzanine.height)
    );
    let plan = Plan {
        crop: None,
        resize_to: (direct.width, direct.height),
        pad: None,
    };
    let reference = ops::apply_plan(
        std::sync::Arc::new(full.clone()),
        &plan,
        imgcas_processors::spec::Rgb([0, 0, 0]),
    )
    .unwrap();
    (
        psnr(&decoded(&via_mezzanine.bytes), &reference),
        psnr(&decoded(&direct.bytes), &reference),
    )
}

/// Every width of `widths` (`w=` or `h=`, by `axis`) of `original`: made from the mezzanine
/// exactly when `uses_mezzanine`, and within [`TOLERANCE_DB`] of the original's path.
fn check(name: &str, original: &[u8], axis: &str, widths: &[u32], uses_mezzanine: bool) {
    let limits = Limits::default();
    let source = decode::open(original, &limits).unwrap();
    let (info, upright) = (source.info, source.upright_size());
    let full = decoded(original);
    for &size in widths {
        let value = size.to_string();
        let spec = spec(&[(axis, &value)]);
        assert_eq!(
            mezzanine::serves(&info, upright, &spec),
            uses_mezzanine,
            "{name} {axis}={size}"
        );
        let (from_mezzanine, from_original) = compare(original, &full, &spec);
        eprintln!(
            "{name} {axis}={size}: mezzanine {from_mezzanine:.3} dB, original {from_original:.3} dB"
        );
        assert!(
            from_mezzanine >= from_original - TOLERANCE_DB,
            "{name} {axis}={size}: {from_mezzanine:.3} dB from the mezzanine, {from_original:.3} dB from the original"
        );
    }
}

#[test]
fn the_mezzanine_path_is_within_a_few_tenths_of_a_decibel_of_the_full_decode() {
    let gain_map = as_png(&testdata("sharp/gain-map.jpg"));
    // The mezzanine is 1920 × 1080: outputs up to a quarter of it, 480 wide.
    check("gain-map", &gain_map, "w", &[320, 480], true);
    check("gain-map", &gain_map, "w", &[490, 960], false);
    let photo = as_png(&twelve_megapixels());
    // 4000×2667, its mezzanine 2000×1334: at w=500 and at h=333 the mezzanine has about
    // four times the output's resolution, the margin's edge.
    check("12 MP", &photo, "w", &[320, 500], true);
    check("12 MP", &photo, "h", &[333], true);
    check("12 MP", &photo, "w", &[510, 990], false);
}

#[test]
fn a_photo_below_the_threshold_is_made_from_itself() {
    check(
        "sharp 2725x2225",
        &as_png(&testdata("sharp/2569067123_aca715a2ee_o.jpg")),
        "w",
        &[320, 640, 960],
        false,
    );
}

#[test]
fn jpeg_originals_are_made_from_themselves_at_every_size() {
    // They shrink on load: no mezzanine, however large and however small the output.
    for original in [testdata("sharp/gain-map.jpg"), twelve_megapixels()] {
        let source = decode::open(&original, &Limits::default()).unwrap();
        for width in ["100", "320", "960", "1600"] {
            let spec = spec(&[("w", width)]);
            assert!(!mezzanine::may_serve(&source.info, &spec), "w={width}");
            let offline = process(&original, &spec, &Limits::default()).unwrap();
            let direct = process_input(
                Input::Original(&original),
                &spec,
                &Limits::default(),
                &Decode,
            )
            .unwrap();
            assert_eq!(offline, direct, "w={width}");
        }
    }
}

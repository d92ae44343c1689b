//! `q=auto` in the core: its metric agrees with SSIMULACRA2's reference implementation, and
//! every output reaches its level's target (within the floor's point) on the test photos, in
//! each lossy format, searched deterministically.

use image::DynamicImage;
use imgcas_processors::auto_quality::{bounds, score};
use imgcas_processors::{probe, process, Limits, Spec};

use crate::common::{testdata, twelve_megapixels};

/// Decoded as the search decodes its attempts (libjpeg-turbo, libwebp, libavif).
fn decode(bytes: &[u8]) -> DynamicImage {
    imgcas_processors::decode::decode(bytes, &Limits::default())
        .expect("decodes")
        .1
}

/// libjxl's `ssimulacra2` tool's scores of four JPEGs of one 256×256 photo crop, as
/// imazen/fast-ssim2 recorded them (`testdata/LICENSES.md`). The JPEGs are decoded as the
/// search decodes its attempts (libjpeg-turbo).
#[test]
fn scores_agree_with_the_reference_implementation() {
    let source = image::load_from_memory(&testdata("ssimulacra2/source.png")).expect("PNG");
    let mut worst: f64 = 0.0;
    for (file, reference) in [
        ("q20.jpg", 57.145_590_32),
        ("q45.jpg", 68.627_475_95),
        ("q70.jpg", 79.388_050_44),
        ("q90.jpg", 90.851_524_74),
    ] {
        let distorted = decode(&testdata(&format!("ssimulacra2/{file}")));
        let got = score(&source, &distorted).unwrap();
        worst = worst.max((got - reference).abs());
        assert!(
            (got - reference).abs() < 0.01,
            "{file}: {got} against {reference}"
        );
    }
    eprintln!("largest difference from the reference tool: {worst:.3}");
    assert_eq!(score(&source, &source).unwrap().round(), 100.0);
}

/// The exact pixels a lossy output of `query` was encoded from: the same spec as PNG (the
/// test photos are too small to shrink on load at these widths, so both decode whole).
fn shaped(bytes: &[u8], query: &str) -> DynamicImage {
    let lossless = format!("{query}&format=png");
    decode(&run(bytes, &lossless).bytes)
}

fn run(bytes: &[u8], query: &str) -> imgcas_processors::Processed {
    let spec = Spec::parse(query).unwrap();
    let info = probe(bytes, &Limits::default()).unwrap();
    let resolved = spec.resolve(info.format.as_output(), info.has_alpha, None);
    process(bytes, &resolved, &Limits::default()).unwrap()
}

#[test]
fn every_output_reaches_its_target_on_the_test_photos() {
    let photos = [
        ("kodak-02", testdata("photos/kodak-02.jpg"), "w=512"),
        ("kodak-15", testdata("photos/kodak-15.jpg"), "w=512"),
        (
            "landscape",
            testdata("exif-orientation/Landscape_1.jpg"),
            "w=600",
        ),
    ];
    for (name, bytes, size) in &photos {
        let reference = shaped(bytes, size);
        for format in ["jpeg", "webp", "avif"] {
            for (level, target) in [("good", 70.0), ("best", 80.0), ("low", 50.0)] {
                let query = format!("{size}&format={format}&q=auto:{level}");
                let out = run(bytes, &query);
                let chosen = out.chosen.expect("a search's choice");
                let (floor, ceiling) = bounds(out.format);
                assert!(
                    (floor..=ceiling).contains(&chosen.quality),
                    "{name} {query}"
                );
                // Scored again, independently of the search: its own claim holds.
                let again = score(&reference, &decode(&out.bytes)).unwrap();
                let claimed = chosen.score().expect("a score");
                assert!(
                    (again - claimed).abs() < 0.06,
                    "{name} {query}: {again} {claimed}"
                );
                assert!(
                    again >= target - 1.0 || chosen.quality == ceiling,
                    "{name} {query}: {again} at q{}",
                    chosen.quality
                );
                // Deterministic: the same bytes again.
                assert_eq!(run(bytes, &query).bytes, out.bytes, "{name} {query}");
            }
        }
    }
}

#[test]
fn pictures_with_alpha_are_scored_on_dark_and_light() {
    // A photo given an alpha ramp from opaque at the left to clear at the right.
    let mut rgba = decode(&testdata("photos/kodak-15.jpg")).to_rgba8();
    let width = rgba.width();
    for (x, _, pixel) in rgba.enumerate_pixels_mut() {
        pixel.0[3] = (255 - x * 255 / width) as u8;
    }
    let mut bytes = Vec::new();
    DynamicImage::ImageRgba8(rgba)
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    for format in ["webp", "avif"] {
        let out = run(&bytes, &format!("w=300&format={format}&q=auto"));
        let chosen = out.chosen.expect("chosen");
        assert!(chosen.score().unwrap() >= 69.0, "{format}: {chosen:?}");
        assert!(decode(&out.bytes).color().has_alpha(), "{format}");
    }
}

#[test]
fn a_large_photo_shrunk_on_load_is_searched_too() {
    let bytes = twelve_megapixels();
    let out = run(&bytes, "w=800&format=jpeg&q=auto");
    let chosen = out.chosen.expect("chosen");
    assert!(chosen.score().unwrap() >= 69.0, "{chosen:?}");
}

/// A real 13 MP progressive camera photo (3120 × 4160, 4:2:0).
fn large_progressive_photo() -> Vec<u8> {
    testdata("photos-large/oppo-r7-plus-progressive.jpg")
}

/// Issue 68: reduced 8 to 16 times, a progressive JPEG could decode from its DC scans alone,
/// and `q=auto` scored its attempts against those coarse pixels: it reported its target for
/// outputs 5–10 points below it against the faithful picture. Now the search's reference is
/// what a lossless output of the spec decodes: its claim is the score against `format=png`
/// of the same spec, and that holds the target.
#[test]
fn a_large_progressive_photo_reduced_eight_times_or_more_keeps_its_look_under_auto() {
    let bytes = large_progressive_photo();
    // Reductions of 8.1, 10.4 and 14.5.
    for size in ["w=512&h=512", "w=400&h=400", "w=287&h=287"] {
        let size = format!("{size}&fit=contain");
        let reference = shaped(&bytes, &size);
        for format in ["jpeg", "webp"] {
            let query = format!("{size}&format={format}&q=auto");
            let out = run(&bytes, &query);
            let chosen = out.chosen.expect("a search's choice");
            let against_lossless = score(&reference, &decode(&out.bytes)).unwrap();
            let claimed = chosen.score().expect("a score");
            assert!(
                (against_lossless - claimed).abs() < 0.06,
                "{query}: claimed {claimed}, {against_lossless} against the lossless rendition"
            );
            assert!(
                against_lossless >= 69.0,
                "{query}: {against_lossless} at q{}",
                chosen.quality
            );
        }
    }
}

/// The photo fitted into `size` from its decode at 1/`denominator`, resized by the spec's
/// plan: the pixels a run of that spec encodes when it decodes at that scale.
fn resized_at(bytes: &[u8], size: &str, denominator: u32) -> DynamicImage {
    use imgcas_processors::{geometry, ops};

    let limits = Limits::default();
    let spec = Spec::parse(&format!("{size}&format=png"))
        .unwrap()
        .resolve(None, false, None);
    let source = imgcas_processors::decode::open(bytes, &limits).unwrap();
    let upright = source.upright_size();
    let plan = geometry::plan(upright, &spec);
    let image = source.decode(&limits, denominator).unwrap();
    let plan = plan.rescaled(upright, (image.width(), image.height()));
    let resized = ops::apply_plan(std::sync::Arc::new(image), &plan, spec.shape.background);
    DynamicImage::ImageRgb8(resized.unwrap().to_rgb8())
}

/// `pixels` encoded as `query` encodes them.
fn encoded(pixels: &DynamicImage, query: &str) -> Vec<u8> {
    let spec = Spec::parse(query).unwrap().resolve(None, false, None);
    imgcas_processors::encode::encode(pixels.clone(), &spec)
        .unwrap()
        .bytes
}

/// Issue 68: where the rule keeps the coarse decode (JPEG up to q85, reduced 14 to 16
/// times), the served output is the coarse decode's, and it loses at most a point against
/// the same quality encoded from the full decode, both scored against the lossless
/// rendition of the spec. Above that quality, or reduced less, the run decodes in full.
#[test]
fn fixed_qualities_the_rule_keeps_coarse_lose_at_most_a_point() {
    let bytes = large_progressive_photo();
    // 4160 / 287: a reduction of 14.5.
    let size = "w=287&h=287&fit=contain";
    let reference = shaped(&bytes, size);
    let (full, coarse) = (resized_at(&bytes, size, 4), resized_at(&bytes, size, 8));
    for quality in ["50", "70", "82", "85"] {
        let query = format!("{size}&format=jpeg&q={quality}");
        let served = run(&bytes, &query).bytes;
        assert!(
            served == encoded(&coarse, &query),
            "q{quality}: the rule keeps the coarse decode here"
        );
        let from_full = score(&reference, &decode(&encoded(&full, &query))).unwrap();
        let from_coarse = score(&reference, &decode(&served)).unwrap();
        assert!(
            from_full - from_coarse <= 1.0,
            "q{quality}: {from_coarse} served, {from_full} from the full decode"
        );
    }
    // 4160 / 400: a reduction of 10.4.
    for (size, quality) in [(size, "90"), ("w=400&h=400&fit=contain", "50")] {
        let query = format!("{size}&format=jpeg&q={quality}");
        assert!(
            run(&bytes, &query).bytes == encoded(&resized_at(&bytes, size, 4), &query),
            "{query}: decoded in full"
        );
    }
}

//! JPEG XL out (issue 53): `format=jxl` written by imgcas's encoder and read back by libjxl's
//! own decoder (`djxl`, Debian's `libjxl-tools`): lossy at a quality and under `q=auto`,
//! lossless as `lossless=1` or `q=100` (one variant, the exact pixels, alpha kept), an
//! animation's first frame, and nothing of the source's metadata.

use image::DynamicImage;
use imgcas_processors::auto_quality::score;
use imgcas_processors::{
    animation, decode, probe, process, Limits, OutputFormat, Processed, SourceFormat, Spec,
};

use super::common::testdata;
use super::jxl::{difference, djxl_bytes};

/// `bytes` through `query` as the service resolves it.
fn run(bytes: &[u8], query: &str) -> Processed {
    let limits = Limits::default();
    let info = probe(bytes, &limits).expect("probe");
    let frames = animation::frame_count(bytes);
    let resolved = Spec::parse(query).expect("spec").resolve_frames(
        info.format.as_output(),
        info.has_alpha,
        frames,
        None,
    );
    process(bytes, &resolved, &limits).expect(query)
}

fn decoded(bytes: &[u8]) -> DynamicImage {
    decode::decode(bytes, &Limits::default())
        .expect("decodes")
        .1
}

/// The output is a bare JPEG XL codestream of the asked size, which imgcas's decoder and
/// djxl read as the same picture: rounding apart (their float paths differ by a step or two
/// on most samples; seen here: mean 0.01, the odd sample 11 apart at a low quality).
fn check_jxl(out: &Processed, size: (u32, u32), what: &str) -> DynamicImage {
    assert_eq!(out.format, OutputFormat::Jxl, "{what}");
    assert_eq!(&out.bytes[..2], [0xFF, 0x0A], "{what}: a bare codestream");
    assert_eq!(
        imgcas_processors::sniff(&out.bytes),
        Some(SourceFormat::Jxl)
    );
    let ours = decoded(&out.bytes);
    assert_eq!((ours.width(), ours.height()), size, "{what}");
    if let Some(theirs) = djxl_bytes(&out.bytes, what) {
        let (mean, most) = difference(&ours, &theirs);
        assert!(
            mean < 0.5 && most <= 16,
            "{what}: mean {mean}, largest {most}"
        );
    }
    ours
}

#[test]
fn lossy_output_is_the_picture_at_the_look_asked_for() {
    let photo = testdata("photos/kodak-15.jpg");
    let reference = decoded(&run(&photo, "w=384&format=png").bytes);
    let size = (reference.width(), reference.height());
    let mut previous = (0usize, 0f64);
    for q in [40, 75, 90] {
        let out = run(&photo, &format!("w=384&format=jxl&q={q}"));
        let ours = check_jxl(&out, size, &format!("q{q}"));
        let scored = score(&reference, &ours).expect("scores");
        eprintln!("q{q}: {} bytes, SSIMULACRA2 {scored:.1}", out.bytes.len());
        // A higher quality is more bytes and a better score.
        assert!(out.bytes.len() > previous.0 && scored > previous.1, "q{q}");
        previous = (out.bytes.len(), scored);
    }
    assert!(previous.1 > 75.0, "q90 scores {}", previous.1);
    // The default quality is the one a request without `q` gets.
    let default = run(&photo, "w=384&format=jxl");
    let q86 = run(&photo, "w=384&format=jxl&q=86");
    assert_eq!(default.bytes, q86.bytes);
}

#[test]
fn q_auto_reaches_its_target_in_jpeg_xl() {
    let photo = testdata("photos/kodak-02.jpg");
    let reference = decoded(&run(&photo, "w=384&format=png").bytes);
    let out = run(&photo, "w=384&format=jxl&q=auto:good");
    let chosen = out.chosen.expect("a search's choice");
    let reached = chosen.score().expect("a score");
    assert!(reached >= 70.0, "{chosen:?}");
    let ours = check_jxl(&out, (reference.width(), reference.height()), "q=auto:good");
    // The score the search reports is the output's own, by an independent decode.
    let scored = score(&reference, &ours).expect("scores");
    assert!((scored - reached).abs() < 0.2, "{scored} vs {reached}");
    assert!(out.search_encodes >= 1);
}

#[test]
fn lossless_keeps_every_pixel_and_alpha_asked_either_way() {
    let resolve = |q: &str| {
        Spec::parse(q)
            .unwrap()
            .resolve(Some(OutputFormat::Png), true, None)
            .canonical()
    };
    assert_eq!(resolve("format=jxl&lossless=1"), "format=jxl&lossless=1");
    assert_eq!(resolve("format=jxl&q=100"), "format=jxl&lossless=1");
    assert_eq!(resolve("format=jxl&q=99"), "format=jxl&q=99");
    assert_eq!(resolve("format=jxl&q=86"), "format=jxl");
    // With alpha (an APNG's first frame: RGBA), and without (a photo).
    for (file, query) in [
        ("image-rs/apng-ball.png", "w=64&format=jxl&lossless=1"),
        ("image-rs/apng-ball.png", "w=64&format=jxl&q=100"),
        ("photos/kodak-02.jpg", "w=200&format=jxl&lossless=1"),
    ] {
        let source = testdata(file);
        let exact = decoded(&run(&source, &query.replace("format=jxl", "format=png")).bytes);
        let out = run(&source, query);
        let ours = check_jxl(&out, (exact.width(), exact.height()), query);
        assert_eq!(
            ours.color().has_alpha(),
            exact.color().has_alpha(),
            "{query}"
        );
        assert_eq!(difference(&ours, &exact), (0.0, 0), "{query}: lossless");
        if let Some(theirs) = djxl_bytes(&out.bytes, query) {
            assert_eq!(difference(&theirs, &exact), (0.0, 0), "{query}: djxl");
        }
    }
}

#[test]
fn an_animation_asked_as_jpeg_xl_is_its_first_frame() {
    let gif = testdata("sharp/animated-loop-3.gif");
    let out = run(&gif, "w=100&format=jxl");
    let first = decoded(&run(&gif, "w=100&format=png").bytes);
    let ours = check_jxl(&out, (first.width(), first.height()), "animation");
    assert!(score(&first, &ours).expect("scores") > 60.0);
    assert_eq!(animation::frame_count(&out.bytes), 1);
}

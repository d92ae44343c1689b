//! JPEG XL sources (issue 53), on libjxl's conformance files (`testdata/jxl/`, BSD-3 with
//! CC0 pictures): sniffed, their size and frames read from the headers, decoded to the pixels
//! libjxl's own decoder (`djxl`, from Debian's `libjxl-tools`; for a picture with alpha of
//! more than 8 bits, the conformance suite's reference PNG) gives, upright and in sRGB; an
//! animation stays one through a resize into animated WebP, with its frames' durations; the
//! limits refuse before a pixel is decoded; damaged bytes are a clear error.

use std::path::PathBuf;
use std::process::Command;

use image::DynamicImage;
use imgcas_processors::{animation, decode, probe, Limits, ProcessFailure, SourceFormat, Spec};

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/jxl")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `name` decoded by libjxl's `djxl` to a PNG, read back through imgcas's PNG decoder (which
/// applies an RGB profile the PNG carries, so both sides are sRGB): the independent decoder's
/// pixels. `None` where djxl is not installed, on a developer's machine only: under `CI`,
/// where `.ci/run` installs it, its absence fails the test.
fn djxl(name: &str) -> Option<DynamicImage> {
    djxl_bytes(&testdata(name), name)
}

/// [`djxl`] of any JPEG XL bytes (`what` names them in messages): also what checks imgcas's
/// own JPEG XL outputs (`jxl_out.rs`).
pub fn djxl_bytes(bytes: &[u8], what: &str) -> Option<DynamicImage> {
    if Command::new("djxl").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "djxl (Debian's libjxl-tools): CI must run this check (.ci/run installs it)"
        );
        eprintln!("djxl not installed: {what} not held to it");
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("in.jxl");
    std::fs::write(&input, bytes).expect("write");
    let output = dir.path().join("out.png");
    let status = Command::new("djxl")
        .arg(&input)
        .arg(&output)
        // An XYB picture in sRGB, as imgcas renders it (a picture coded in its own space
        // comes out in it, with its profile in the PNG).
        .arg("--color_space=RGB_D65_SRG_Rel_SRG")
        .output()
        .expect("djxl runs");
    assert!(status.status.success(), "djxl {what}: {status:?}");
    let png = std::fs::read(&output).expect("djxl's PNG");
    Some(
        decode::decode(&png, &Limits::default())
            .expect("djxl's PNG decodes")
            .1,
    )
}

/// Asserts that two decodes of one codestream are rounding apart, not pictures apart.
fn same_picture(ours: &DynamicImage, reference: &DynamicImage, what: &str) {
    let (mean, most) = difference(ours, reference);
    eprintln!("{what}: mean {mean:.3}, largest {most}");
    assert!(
        mean < 1.0 && most <= 8,
        "{what}: mean {mean}, largest {most}"
    );
}

/// Mean and largest absolute difference of two pictures' samples, in 8-bit steps.
pub fn difference(a: &DynamicImage, b: &DynamicImage) -> (f64, u8) {
    assert_eq!((a.width(), a.height()), (b.width(), b.height()));
    let (a, b) = (a.to_rgba8(), b.to_rgba8());
    let mut sum = 0u64;
    let mut most = 0u8;
    for (x, y) in a.as_raw().iter().zip(b.as_raw()) {
        let d = x.abs_diff(*y);
        sum += u64::from(d);
        most = most.max(d);
    }
    (sum as f64 / a.as_raw().len() as f64, most)
}

#[test]
fn stills_decode_to_the_pixels_libjxl_gives() {
    let limits = Limits::default();
    // (file, size upright, alpha): lossy photos (XYB), grayscale with its own profile, a
    // JPEG recompressed losslessly, an oriented picture, alpha.
    for (name, size, alpha) in [
        ("bicycles.jxl", (1024, 631), false),
        ("grayscale.jxl", (200, 200), false),
        ("grayscale_jpeg.jxl", (200, 200), false),
        ("bench_oriented_brg.jxl", (606, 500), false),
        ("sunset_logo.jxl", (924, 1386), true),
        ("alpha_nonpremultiplied.jxl", (1024, 1024), true),
    ] {
        let bytes = testdata(name);
        assert_eq!(
            imgcas_processors::sniff(&bytes),
            Some(SourceFormat::Jxl),
            "{name}"
        );
        let (info, upright) = imgcas_processors::probe_upright(&bytes, &limits).expect(name);
        assert_eq!(upright, size, "{name}");
        assert_eq!(info.has_alpha, alpha, "{name}");
        let (_, ours) = decode::decode(&bytes, &limits).expect(name);
        assert_eq!((ours.width(), ours.height()), size, "{name}");
        assert_eq!(ours.color().has_alpha(), alpha, "{name}");
        if name == "sunset_logo.jxl" {
            // djxl 0.7 writes pictures of more than 8 bits with alpha wrongly scaled (its
            // PNGs and PAMs alike); the next file is checked against libjxl's reference PNG.
            continue;
        }
        let reference = if name == "alpha_nonpremultiplied.jxl" {
            let png = testdata("alpha_nonpremultiplied.ref.png");
            decode::decode(&png, &limits).expect("reference PNG").1
        } else {
            match djxl(name) {
                Some(pixels) => pixels,
                None => continue,
            }
        };
        same_picture(&ours, &reference, name);
    }
}

#[test]
fn an_animation_stays_one_with_its_durations() {
    let bytes = testdata("animation_spline.jxl");
    let header = animation::header(&bytes).expect("animation header");
    assert!(header.frames > 1, "{header:?}");
    let spec = Spec::parse("w=160&format=webp&animated=1").unwrap();
    let info = probe(&bytes, &Limits::default()).unwrap();
    let resolved = spec.resolve_frames(None, info.has_alpha, header.frames, None);
    let out = imgcas_processors::process(&bytes, &resolved, &Limits::default()).expect("runs");
    let webp = animation::header(&out.bytes).expect("WebP header");
    assert_eq!(webp.frames, header.frames);
    assert_eq!(webp.plays, header.plays);
    assert_eq!((out.width, out.height), (160, 160));
    // The conformance file's frames show 20 ms each (its test.json).
    let decoder = image::codecs::webp::WebPDecoder::new(std::io::Cursor::new(&out.bytes)).unwrap();
    for frame in image::AnimationDecoder::into_frames(decoder) {
        let (n, d) = frame.unwrap().delay().numer_denom_ms();
        assert_eq!(n / d, 20);
    }
    // A still output takes the first frame, as djxl does.
    let first = decode::decode(&bytes, &Limits::default()).unwrap().1;
    if let Some(reference) = djxl("animation_spline.jxl") {
        same_picture(&first, &reference, "first frame");
    }
}

#[test]
fn the_limits_refuse_from_the_headers() {
    let bytes = testdata("bicycles.jxl");
    let small = Limits {
        max_pixels: 1024 * 631 - 1,
        ..Limits::default()
    };
    let e = probe(&bytes, &small).unwrap_err();
    assert_eq!(e.kind(), Some(ProcessFailure::TooManyPixels), "{e}");
    // An animation of more frames than allowed is refused before a frame renders.
    let animated = testdata("animation_spline.jxl");
    let frames = animation::frame_count(&animated);
    let few = Limits {
        max_frames: frames - 1,
        ..Limits::default()
    };
    let spec = Spec::parse("format=webp&animated=1").unwrap();
    let resolved = spec.resolve_frames(None, false, frames, None);
    let e = imgcas_processors::process(&animated, &resolved, &few).unwrap_err();
    assert_eq!(e.kind(), Some(ProcessFailure::TooManyPixels), "{e}");
}

#[test]
fn damaged_bytes_are_undecodable_never_a_panic() {
    let bytes = testdata("bicycles.jxl");
    let limits = Limits::default();
    // Cut short at every thousand bytes or so, and flipped bits along the way. Every refusal
    // is `Undecodable`; a file cut short is always refused (its last group is missing), and
    // a damaged one at least sometimes (a flip in entropy-coded pixels may decode, to other
    // pixels).
    let undecodable = |input: &[u8], what: String| match decode::decode(input, &limits) {
        Ok(_) => false,
        Err(e) => {
            assert_eq!(e.kind(), Some(ProcessFailure::Undecodable), "{what}: {e}");
            true
        }
    };
    let cuts: Vec<usize> = (2..bytes.len()).step_by(997).collect();
    let refused_cuts = cuts
        .iter()
        .filter(|&&cut| undecodable(&bytes[..cut], format!("cut at {cut}")))
        .count();
    assert_eq!(refused_cuts, cuts.len(), "every file cut short is refused");
    let flips: Vec<usize> = (16..bytes.len()).step_by(1499).collect();
    let refused_flips = flips
        .iter()
        .filter(|&&at| {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x5a;
            undecodable(&damaged, format!("flip at {at}"))
        })
        .count();
    assert!(
        refused_flips > 0,
        "no damaged file of {} refused",
        flips.len()
    );
}

/// Audit #4's bomb: 6.9 KB of one flat colour declaring 7000×7000 renders for seconds in one
/// decoder call. Under a stop signal raised 100 ms in, the render itself is cut short (its
/// buffers' budget taken away: the decoder fails at its next one) and the run answers
/// `Stopped`; without a signal it renders whole. And the plan charges the decoder's weight.
#[test]
fn a_jpeg_xl_render_stops_when_its_run_is_told_to() {
    let bytes = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/crafted/jxl-flat-7000x7000.jxl"),
    )
    .expect("the crafted file");
    let limits = Limits::default();
    let spec = Spec::from_pairs([("w", "100"), ("format", "png")])
        .unwrap()
        .resolve(None, false, None);
    let started = std::time::Instant::now();
    let _guard =
        imgcas_processors::interrupt::stop_this_thread_when(std::sync::Arc::new(move || {
            started.elapsed() > std::time::Duration::from_millis(100)
        }));
    let stopped = imgcas_processors::process(&bytes, &spec, &limits).expect_err("cut short");
    assert!(
        matches!(stopped, imgcas_processors::ProcessError::Stopped(_)),
        "{stopped}"
    );
    drop(_guard);
    let cost = imgcas_processors::cost(Some(SourceFormat::Jxl), (7000, 7000), &spec);
    assert!(
        cost >= 49_000_000 * imgcas_processors::plan::JXL_DECODE_WEIGHT,
        "{cost}"
    );
}

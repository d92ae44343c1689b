//! Animations through the processing core, on real files from `testdata/` (copied from the
//! shared corpus, and libavif's test sequences): frames, delays and plays survive a resize
//! into animated WebP, GIF and AVIF (the AVIF held to libavif's own `avifdec`), and AVIF image
//! sequences animate in;
//! `animated=0` and still formats take the first frame; the limits refuse an animation from
//! its headers before a frame is decoded.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use image::codecs::gif::GifDecoder;
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, DynamicImage};
use imgcas_processors::animation;
use imgcas_processors::{
    probe, process, process_input, Decode, Decodes, Input, InputKind, Limits, Pixels, ProcessError,
    ProcessFailure, Spec,
};

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `query` on `bytes` as the service resolves it (with the frames from the headers).
fn run(bytes: &[u8], query: &str, limits: &Limits) -> Result<Vec<u8>, ProcessError> {
    let spec = Spec::parse(query).unwrap();
    let info = probe(bytes, limits)?;
    let frames = animation::frame_count(bytes);
    let resolved = spec.resolve_frames(info.format.as_output(), info.has_alpha, frames, None);
    process(bytes, &resolved, limits).map(|p| p.bytes)
}

/// Frames of an animated output: (width, height, delay in ms) each.
fn frames_of(bytes: &[u8]) -> Vec<(u32, u32, u32)> {
    let frames = if bytes.starts_with(b"GIF") {
        GifDecoder::new(Cursor::new(bytes)).unwrap().into_frames()
    } else {
        WebPDecoder::new(Cursor::new(bytes)).unwrap().into_frames()
    };
    frames
        .map(|f| {
            let f = f.unwrap();
            let (n, d) = f.delay().numer_denom_ms();
            (f.buffer().width(), f.buffer().height(), n / d)
        })
        .collect()
}

fn frames_and_plays(bytes: &[u8]) -> Option<(u32, u32)> {
    animation::header(bytes).map(|h| (h.frames, h.plays))
}

const LOOP_3_DELAYS: [u32; 10] = [3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 15000];

#[test]
fn a_ten_frame_gif_becomes_an_animated_webp_with_its_delays_and_plays() {
    let gif = testdata("sharp/animated-loop-3.gif");
    assert_eq!(frames_and_plays(&gif), Some((10, 3)));
    let webp = run(&gif, "format=webp&w=100", &Limits::default()).unwrap();
    let frames = frames_of(&webp);
    let delays: Vec<u32> = frames.iter().map(|f| f.2).collect();
    assert_eq!(delays, LOOP_3_DELAYS, "the last frame keeps its own delay");
    assert!(frames.iter().all(|f| (f.0, f.1) == (100, 77)), "{frames:?}");
    assert_eq!(frames_and_plays(&webp), Some((10, 3)));
    // Back to GIF: the repeats count is after the first play, so 3 plays is 2 repeats.
    let again = run(&webp, "format=gif&w=50", &Limits::default()).unwrap();
    let delays: Vec<u32> = frames_of(&again).iter().map(|f| f.2).collect();
    assert_eq!(delays, LOOP_3_DELAYS);
    assert_eq!(animation::header(&again).map(|h| h.plays), Some(3));
}

#[test]
fn the_frames_are_the_sources_resized() {
    let gif = testdata("sharp/animated-loop-3.gif");
    let webp = run(&gif, "format=webp&w=185&q=95", &Limits::default()).unwrap();
    let source: Vec<DynamicImage> = GifDecoder::new(Cursor::new(&gif))
        .unwrap()
        .into_frames()
        .map(|f| DynamicImage::ImageRgba8(f.unwrap().into_buffer()))
        .collect();
    let out: Vec<DynamicImage> = WebPDecoder::new(Cursor::new(&webp))
        .unwrap()
        .into_frames()
        .map(|f| DynamicImage::ImageRgba8(f.unwrap().into_buffer()))
        .collect();
    assert_eq!(out.len(), source.len());
    for (i, (s, o)) in source.iter().zip(&out).enumerate() {
        let expected = s.resize_exact(o.width(), o.height(), image::imageops::Lanczos3);
        let error = imgcas_processors::compare::mean_abs_error(&expected, o);
        assert!(error < 6.0, "frame {i}: mean error {error}");
    }
}

#[test]
fn animated_0_and_still_formats_take_the_first_frame() {
    let gif = testdata("sharp/animated-loop-3.gif");
    let still = run(&gif, "format=webp&w=100&animated=0", &Limits::default()).unwrap();
    let decoder = WebPDecoder::new(Cursor::new(&still)).unwrap();
    assert!(!decoder.has_animation());
    assert_eq!(animation::frame_count(&still), 1);
    let avif = run(&gif, "format=avif&w=100&animated=0", &Limits::default()).unwrap();
    assert_eq!(avif_sequence(&avif).0, 1, "animated=0: one AVIF image");
    for format in ["png", "jpeg"] {
        let out = run(&gif, &format!("format={format}&w=100"), &Limits::default()).unwrap();
        let info = probe(&out, &Limits::default()).unwrap();
        assert_eq!((info.width, info.height), (100, 77), "{format}");
        assert_eq!(animation::frame_count(&out), 1, "{format}");
    }
}

#[test]
fn apng_and_animated_webp_sources_animate_too() {
    let apng = testdata("image-rs/apng-ball.png");
    assert_eq!(animation::frame_count(&apng), 20);
    let webp = run(&apng, "format=webp&w=50", &Limits::default()).unwrap();
    assert_eq!(frames_of(&webp).len(), 20);
    let gif = run(&apng, "format=gif&w=50", &Limits::default()).unwrap();
    assert_eq!(frames_of(&gif).len(), 20);
    // Format original keeps PNG, which imgcas writes as a still.
    let png = run(&apng, "w=50", &Limits::default()).unwrap();
    assert_eq!(animation::frame_count(&png), 1);

    let anim = testdata("image-rs/anim.webp");
    let frames = animation::frame_count(&anim);
    assert!(frames > 1, "{frames}");
    let gif = run(&anim, "format=gif&w=64", &Limits::default()).unwrap();
    assert_eq!(frames_of(&gif).len() as u32, frames);
    let same = run(&anim, "w=64", &Limits::default()).unwrap();
    assert!(same.starts_with(b"RIFF"));
    assert_eq!(animation::frame_count(&same), frames);
}

/// Counts the frames a run decodes.
#[derive(Default)]
struct Counting(AtomicU64);

impl Decodes for Counting {
    fn decoded(
        &self,
        from: InputKind,
        denominator: u32,
        decode: &mut dyn FnMut() -> Result<DynamicImage, ProcessError>,
    ) -> Result<Pixels, ProcessError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Decode.decoded(from, denominator, decode)
    }

    fn frame_decoded(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn limits_refuse_an_animation_from_its_headers_before_any_frame_is_decoded() {
    let gif = testdata("sharp/animated-loop-3.gif");
    let spec = Spec::parse("format=webp&w=100").unwrap();
    let resolved = spec.resolve_frames(None, true, 10, None);
    assert!(resolved.animated);
    let run_with = |limits: Limits| {
        let counting = Counting::default();
        let result = process_input(Input::Original(&gif), &resolved, &limits, &counting);
        (result, counting.0.load(Ordering::Relaxed))
    };
    let few_frames = Limits {
        max_frames: 9,
        ..Limits::default()
    };
    let (result, decoded) = run_with(few_frames);
    let err = result.unwrap_err();
    assert_eq!(err.kind(), Some(ProcessFailure::TooManyPixels), "{err}");
    assert!(err.to_string().contains("10 frames"), "{err}");
    assert_eq!(decoded, 0);
    // 10 frames of 370×285 are 1,054,500 pixels: over a limit one frame is under.
    let few_pixels = Limits {
        max_pixels: 1_000_000,
        ..Limits::default()
    };
    let (result, decoded) = run_with(few_pixels);
    assert_eq!(
        result.unwrap_err().kind(),
        Some(ProcessFailure::TooManyPixels)
    );
    assert_eq!(decoded, 0);
    let (result, decoded) = run_with(Limits::default());
    assert!(result.is_ok());
    assert_eq!(decoded, 10);
    // The first frame alone is within both.
    let still = Spec::parse("format=webp&w=100&animated=0")
        .unwrap()
        .resolve_frames(None, true, 10, None);
    let counting = Counting::default();
    process_input(Input::Original(&gif), &still, &few_pixels, &counting).unwrap();
    assert_eq!(counting.0.load(Ordering::Relaxed), 1);
}

/// An AVIF's frames and repetitions after the first play (-1: for ever), as libavif's decoder
/// reads its container (no frame decoded).
fn avif_sequence(bytes: &[u8]) -> (i32, i32) {
    use libavif_sys as avif;
    // SAFETY: the decoder reads `bytes` (alive for the call) and is destroyed before return.
    unsafe {
        let decoder = avif::avifDecoderCreate();
        assert!(!decoder.is_null());
        assert_eq!(
            avif::avifDecoderSetIOMemory(decoder, bytes.as_ptr(), bytes.len()),
            0
        );
        let parsed = avif::avifDecoderParse(decoder);
        let found = ((*decoder).imageCount, (*decoder).repetitionCount);
        avif::avifDecoderDestroy(decoder);
        assert_eq!(parsed, 0, "libavif parses the output");
        found
    }
}

/// Frame durations, in the file's timescale (ms for imgcas's AVIF, written at 1000 a second),
/// that libavif's own tool (`avifdec --info`, Debian's `libavif-bin`) reads, after decoding
/// every frame; `None` where it is not installed (on a developer's
/// machine only: under `CI`, where `.ci/run` installs it, its absence fails the test).
fn avifdec_durations(bytes: &[u8]) -> Option<Vec<u32>> {
    if std::process::Command::new("avifdec")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "avifdec (libavif-bin): CI must run this check (.ci/run installs it)"
        );
        eprintln!("avifdec not installed: the AVIF animation not held to it");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("anim.avif");
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("avifdec")
        .arg("--info")
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "avifdec: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // "* Decoded frame [3] [pts 9.00 (9000 timescales)] [duration 3.00 (3000 timescales)] ..."
    Some(
        text.lines()
            .filter(|l| l.contains("Decoded frame"))
            .map(|l| {
                let duration = l.split("[duration ").nth(1).unwrap_or_default();
                let ticks = duration
                    .split('(')
                    .nth(1)
                    .and_then(|t| t.split(' ').next())
                    .and_then(|t| t.parse::<u32>().ok())
                    .unwrap_or_else(|| panic!("a duration in {l}"));
                ticks
            })
            .collect(),
    )
}

#[test]
fn a_ten_frame_gif_becomes_an_animated_avif_with_its_delays_and_plays() {
    let gif = testdata("sharp/animated-loop-3.gif");
    let avif = run(&gif, "format=avif&w=100", &Limits::default()).unwrap();
    // Ten frames, repeated twice after the first play (three plays, as the GIF says).
    assert_eq!(avif_sequence(&avif), (10, 2));
    if let Some(durations) = avifdec_durations(&avif) {
        // A timescale of 1000: durations in ms, each as the GIF gave it.
        assert_eq!(durations, LOOP_3_DELAYS);
    }
    // Smaller than the same animation as WebP at their default qualities.
    let webp = run(&gif, "format=webp&w=100", &Limits::default()).unwrap();
    eprintln!("animated AVIF {} bytes, WebP {}", avif.len(), webp.len());
    // The first frame looks as the still AVIF of it does.
    let first = run(&gif, "format=avif&w=100&animated=0", &Limits::default()).unwrap();
    let (a, b) = (
        imgcas_processors::decode::decode(&avif, &Limits::default())
            .unwrap()
            .1,
        imgcas_processors::decode::decode(&first, &Limits::default())
            .unwrap()
            .1,
    );
    assert_eq!((a.width(), a.height()), (100, 77));
    let score = imgcas_processors::auto_quality::score(&b, &a).unwrap();
    assert!(score > 70.0, "first frame against the still: {score}");
}

/// libavif's own test sequences (`testdata/avif-sequences/`, BSD-2): frames and plays from
/// the container, each frame's duration as libavif's `avifdec` reads it, kept through a
/// resize into animated WebP; the first frame as the still decode gives it.
#[test]
fn avif_sequences_are_animations_in() {
    // (file, frames, plays, size, the duration of each frame in ms)
    for (name, frames, plays, size, ms) in [
        ("colors-animated-8bpc.avif", 5, 1, (150, 150), 33),
        (
            "colors-animated-8bpc-alpha-exif-xmp.avif",
            5,
            0,
            (150, 150),
            167,
        ),
        (
            "colors-animated-12bpc-keyframes-0-2-3.avif",
            5,
            0,
            (64, 64),
            1000,
        ),
    ] {
        let bytes = testdata(&format!("avif-sequences/{name}"));
        assert_eq!(frames_and_plays(&bytes), Some((frames, plays)), "{name}");
        if let Some(durations) = avifdec_durations(&bytes) {
            assert_eq!(durations.len() as u32, frames, "{name}");
        }
        let webp = run(&bytes, "format=webp&w=50", &Limits::default()).unwrap();
        let made = frames_of(&webp);
        assert_eq!(made.len() as u32, frames, "{name}");
        let (w, h) = size;
        for (fw, fh, delay) in made {
            assert_eq!((fw, fh), (50, 50 * h / w), "{name}");
            assert_eq!(delay, ms, "{name}");
        }
        assert_eq!(
            frames_and_plays(&webp).map(|(_, p)| p),
            Some(plays),
            "{name}"
        );
        // The still decode is the first frame.
        let still = imgcas_processors::decode::decode(&bytes, &Limits::default())
            .unwrap()
            .1;
        assert_eq!((still.width(), still.height()), size, "{name}");
    }
    // An animated AVIF of ours reads back with its frames and delays.
    let gif = testdata("sharp/animated-loop-3.gif");
    let avif = run(&gif, "format=avif&w=100", &Limits::default()).unwrap();
    assert_eq!(frames_and_plays(&avif), Some((10, 3)));
    let webp = run(&avif, "format=webp", &Limits::default()).unwrap();
    let delays: Vec<u32> = frames_of(&webp).into_iter().map(|(_, _, d)| d).collect();
    assert_eq!(delays, LOOP_3_DELAYS);
    // The limits refuse a sequence of more frames than allowed, from its container.
    let bytes = testdata("avif-sequences/colors-animated-8bpc.avif");
    let few = Limits {
        max_frames: 4,
        ..Limits::default()
    };
    let e = run(&bytes, "format=webp", &few).unwrap_err();
    assert_eq!(e.kind(), Some(ProcessFailure::TooManyPixels), "{e}");
}

/// An animation's duration (one play) from its headers alone, in every format that
/// animates: the delays its frames are played with, as the frame decoders give them to an
/// animated WebP (whose delays image-rs's decoder reads back), within a millisecond a frame of
/// rounding; 0 for a still picture.
#[test]
fn the_headers_say_how_long_one_play_lasts() {
    let limits = Limits::default();
    for name in [
        "sharp/animated-loop-3.gif",
        "sharp/animated-loop-3.webp",
        "image-rs/anim.webp",
        "image-rs/apng-ball.png",
        "jxl/animation_spline.jxl",
        "avif-sequences/colors-animated-8bpc.avif",
    ] {
        let bytes = testdata(name);
        let header = animation::header(&bytes).expect(name);
        assert!(header.frames > 1, "{name}");
        let webp = run(&bytes, "w=32&format=webp&animated=1", &limits).expect(name);
        let played: u64 = frames_of(&webp).iter().map(|f| u64::from(f.2)).sum();
        assert!(played > 0, "{name}");
        assert!(
            header.duration_ms.abs_diff(played) <= u64::from(header.frames),
            "{name}: headers {} ms, played {played} ms",
            header.duration_ms
        );
    }
    let loop_3: u64 = LOOP_3_DELAYS.iter().map(|&d| u64::from(d)).sum();
    let gif = animation::header(&testdata("sharp/animated-loop-3.gif")).unwrap();
    assert_eq!(gif.duration_ms, loop_3);
    let still = animation::header(&testdata("pillow/hopper.webp")).unwrap();
    assert_eq!((still.frames, still.duration_ms), (1, 0));
}

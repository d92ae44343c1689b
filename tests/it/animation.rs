//! Animation through HTTP (issue 16, item 2; AVIF, issue 53): an animated GIF, WebP, APNG or
//! AVIF sequence stays animated in GIF, WebP and AVIF, with its frames' delays and its plays,
//! and its facts say its frames and one play's duration; offline (`imgcas process`) too; `animated=0` and still formats take
//! the first frame, under keys of their own; an animation over `limits.max_frames` or the
//! pixel limit is refused with 422 `too_many_pixels` before a frame is decoded, and the
//! refusal is not stored.

use crate::common;

use std::io::Cursor;
use std::path::PathBuf;

use common::*;
use image::codecs::gif::{GifDecoder, GifEncoder};
use image::codecs::webp::WebPDecoder;
use image::{AnimationDecoder, Delay, Frame, Rgba, RgbaImage};

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The delays (ms) of an animated GIF or WebP; empty for a still WebP.
fn delays(bytes: &[u8]) -> Vec<u32> {
    let frames = if bytes.starts_with(b"GIF") {
        GifDecoder::new(Cursor::new(bytes)).unwrap().into_frames()
    } else {
        WebPDecoder::new(Cursor::new(bytes)).unwrap().into_frames()
    };
    frames
        .map(|f| {
            let (n, d) = f.unwrap().delay().numer_denom_ms();
            n / d
        })
        .collect()
}

/// The sharp fixture: 10 frames of 370×285, 3 s each but the last (15 s), played 3 times.
const DELAYS: [u32; 10] = [3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 3000, 15000];

/// A GIF of `frames` 40×40 frames, 20 ms apart, each far from the one before (libwebp
/// merges a frame into the previous one when lossy coding cannot tell them apart).
fn long_gif(frames: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = GifEncoder::new_with_speed(&mut out, 30);
        for i in 0..frames {
            let shade = (i * 97 % 256) as u8;
            let image = RgbaImage::from_pixel(40, 40, Rgba([shade, 80, 255 - shade, 255]));
            let frame = Frame::from_parts(image, 0, 0, Delay::from_numer_denom_ms(20, 1));
            encoder.encode_frame(frame).unwrap();
        }
    }
    out
}

#[tokio::test]
async fn a_ten_frame_gif_becomes_an_animated_webp_and_animated_0_one_frame() {
    let origin = Origin::start().await;
    let app = spawn_app().await;
    origin.put("/loop.gif", testdata("sharp/animated-loop-3.gif"));
    let source = origin.url("/loop.gif");

    let r = app.image_by_url(&source, "format=webp&w=100").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("image/webp"));
    let animated_etag = header(&r, "etag").map(str::to_string);
    let webp = r.bytes().await.unwrap().to_vec();
    assert_eq!(delays(&webp), DELAYS, "10 frames, each with its own delay");
    assert_eq!(dimensions(&webp), (100, 77));
    assert_eq!(app.stats().frames_decoded, 10);

    let r = app
        .image_by_url(&source, "format=webp&w=100&animated=0")
        .await;
    assert_eq!(r.status(), 200);
    assert_ne!(header(&r, "etag").map(str::to_string), animated_etag);
    let still = r.bytes().await.unwrap().to_vec();
    assert!(!WebPDecoder::new(Cursor::new(&still))
        .unwrap()
        .has_animation());
    assert_eq!(dimensions(&still), (100, 77));
    assert_eq!(app.processing_runs(), 2, "two variants, two runs");

    // The animated variant is stored: asked again, nothing is processed or decoded.
    let again = app.image_by_url(&source, "format=webp&w=100").await;
    assert_eq!(again.bytes().await.unwrap().to_vec(), webp);
    assert_eq!(app.processing_runs(), 2);
    assert_eq!(app.stats().frames_decoded, 10);

    // Format original keeps GIF, animated; a still format takes the first frame.
    let gif = app.image_by_url(&source, "w=50").await;
    assert_eq!(header(&gif, "content-type"), Some("image/gif"));
    assert_eq!(delays(&gif.bytes().await.unwrap()), DELAYS);
    let jpeg = app.image_by_url(&source, "w=50&format=jpeg").await;
    assert_eq!(jpeg.status(), 200);
    assert_eq!(dimensions(&jpeg.bytes().await.unwrap()), (50, 39));

    // AVIF keeps the animation (an image sequence, brand `avis`; its frames, delays and
    // plays are checked in the core's tests against libavif's tools); `animated=0` is a still
    // image (brand `avif`), another variant.
    let runs = app.processing_runs();
    let avif = app.image_by_url(&source, "w=50&format=avif").await;
    assert_eq!(avif.status(), 200);
    assert_eq!(header(&avif, "content-type"), Some("image/avif"));
    let avif = avif.bytes().await.unwrap();
    assert_eq!(&avif[4..12], b"ftypavis", "an AV1 image sequence");
    let still = app
        .image_by_url(&source, "w=50&format=avif&animated=0")
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(&still[4..12], b"ftypavif", "a still AVIF");
    assert_eq!(app.processing_runs(), runs + 2);
    app.stop().await;
}

#[tokio::test]
async fn format_auto_picks_a_format_that_animates() {
    let app = spawn_app().await;
    let r = app.upload(testdata("sharp/animated-loop-3.gif")).await;
    let hash = json(r).await["hash"].as_str().unwrap().to_string();
    let ask = |accept: &'static str| {
        let url = app.url(&format!("/v1/image/{hash}?format=auto&w=60"));
        app.client.get(url).header("accept", accept).send()
    };
    // A client taking AVIF gets animated AVIF (the default order's first format that
    // animates), one taking only WebP animated WebP, one taking JPEG XL and WebP WebP (JPEG XL
    // is written as stills).
    let r = ask("image/avif,image/webp,*/*").await.unwrap();
    assert_eq!(header(&r, "content-type"), Some("image/avif"));
    assert!(header(&r, "vary").unwrap_or("").contains("Accept"));
    let avif = r.bytes().await.unwrap();
    assert_eq!(&avif[4..12], b"ftypavis", "an AV1 image sequence");
    assert_eq!(imgcas_processors::animation::frame_count(&avif), 10);
    for accept in ["image/webp,*/*", "image/jxl,image/webp,*/*"] {
        let r = ask(accept).await.unwrap();
        assert_eq!(header(&r, "content-type"), Some("image/webp"), "{accept}");
        assert_eq!(delays(&r.bytes().await.unwrap()).len(), 10);
    }
    let r = ask("image/png,*/*").await.unwrap();
    assert_eq!(header(&r, "content-type"), Some("image/gif"));
    assert_eq!(delays(&r.bytes().await.unwrap()).len(), 10);
    app.stop().await;
}

#[tokio::test]
async fn apng_and_animated_webp_from_the_corpus_animate() {
    let app = spawn_app().await;
    for (file, frames) in [
        ("image-rs/apng-ball.png", 20),
        ("image-rs/anim.webp", 0),
        ("avif-sequences/colors-animated-8bpc.avif", 5),
    ] {
        let bytes = testdata(file);
        let r = app.upload(bytes).await;
        let hash = json(r).await["hash"].as_str().unwrap().to_string();
        let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
        assert_eq!(info["animated"], true, "{file}: {info}");
        let expected = if frames == 0 {
            info["frames"].as_u64().unwrap() as usize
        } else {
            frames
        };
        assert!(expected > 1);
        for format in ["webp", "gif"] {
            let r = app
                .get(&format!("/v1/image/{hash}?format={format}&w=48"))
                .await;
            assert_eq!(r.status(), 200, "{file} as {format}");
            let out = r.bytes().await.unwrap();
            assert_eq!(delays(&out).len(), expected, "{file} as {format}");
            if format == "webp" {
                // The facts' duration is one play as the frames are played, within a
                // millisecond a frame of rounding.
                let played: u64 = delays(&out).iter().map(|&d| u64::from(d)).sum();
                let said = info["duration_ms"]
                    .as_u64()
                    .expect("an animation's duration");
                assert!(said.abs_diff(played) <= expected as u64, "{file}: {info}");
            }
        }
    }
    // A still picture has no duration.
    let r = app.upload(testdata("pillow/hopper.webp")).await;
    let hash = json(r).await["hash"].as_str().unwrap().to_string();
    let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert_eq!(info["frames"], 1, "{info}");
    assert!(info["duration_ms"].is_null(), "{info}");
    app.stop().await;
}

#[tokio::test]
async fn a_2000_frame_gif_is_refused_from_its_headers_with_no_frame_decoded() {
    let app = spawn_app().await;
    let r = app.upload(long_gif(2000)).await;
    assert_eq!(r.status(), 201);
    let hash = json(r).await["hash"].as_str().unwrap().to_string();
    let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert_eq!(info["frames"], 2000);
    app.pipeline.settle().await;

    let before = app.stats();
    for _ in 0..2 {
        let r = app.get(&format!("/v1/image/{hash}?format=webp&w=20")).await;
        assert_eq!(r.status(), 422);
        let body = json(r).await;
        assert_eq!(body["error"]["code"], "too_many_pixels", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("2000 frames"), "{message}");
    }
    let after = app.stats();
    assert_eq!(
        after.frames_decoded, before.frames_decoded,
        "no frame decoded"
    );
    assert_eq!(after.decodes_original, before.decodes_original);
    assert_eq!(
        after.processing_runs, before.processing_runs,
        "refused before a run"
    );

    // Its first frame is within every limit.
    let r = app
        .get(&format!("/v1/image/{hash}?format=webp&w=20&animated=0"))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.stats().frames_decoded, before.frames_decoded);
    app.stop().await;
}

#[tokio::test]
async fn the_limits_are_settings_and_frames_times_pixels_count() {
    // 10 frames of 370×285 are 1,054,500 pixels; one frame is 105,450.
    let app = spawn_app_with(|c| c.limits.max_pixels = 1_000_000).await;
    let r = app.upload(testdata("sharp/animated-loop-3.gif")).await;
    let hash = json(r).await["hash"].as_str().unwrap().to_string();
    let r = app.get(&format!("/v1/image/{hash}?format=gif&w=100")).await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "too_many_pixels");
    assert_eq!(app.stats().frames_decoded, 0);
    let r = app.get(&format!("/v1/image/{hash}?format=png&w=100")).await;
    assert_eq!(r.status(), 200, "a still of it is within the limit");
    app.stop().await;

    // A refusal by the frame limit is not stored: raised, on the same data dir (and bucket),
    // the same request is served.
    let storage = Restartable::new().await;
    let app = storage.spawn(|c| c.limits.max_frames = 10).await;
    let r = app.upload(long_gif(10)).await;
    let ten = json(r).await["hash"].as_str().unwrap().to_string();
    let r = app.get(&format!("/v1/image/{ten}?format=webp")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(delays(&r.bytes().await.unwrap()), [20; 10]);
    let r = app.upload(long_gif(11)).await;
    let eleven = json(r).await["hash"].as_str().unwrap().to_string();
    let r = app.get(&format!("/v1/image/{eleven}?format=webp")).await;
    assert_eq!(r.status(), 422);
    app.stop().await;
    let app = storage.spawn(|c| c.limits.max_frames = 11).await;
    let r = app.get(&format!("/v1/image/{eleven}?format=webp")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(delays(&r.bytes().await.unwrap()).len(), 11);
    app.stop().await;
}

/// An animated WebP whose second frame declares itself 1×1 in its `ANMF` header while its
/// VP8 data and `ALPH` are 370×285 (testdata/crafted, made from the sharp fixture) makes the
/// image crate's WebP decoder panic. That is the file's failure: 422 `undecodable`, cached,
/// counted, and no panic text in the answer; its facts and fingerprint fail the same way.
#[tokio::test]
async fn a_frame_that_panics_its_decoder_is_undecodable_and_cached() {
    let origin = Origin::start().await;
    origin.put(
        "/crafted.webp",
        testdata("crafted/webp-anmf-smaller-than-vp8.webp"),
    );
    let app = spawn_app().await;
    let first = app
        .image_from(&origin, "/crafted.webp", "format=webp&w=100")
        .await;
    assert_eq!(first.status(), 422);
    let body = json(first).await;
    assert_eq!(body["error"]["code"], "undecodable");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        !message.contains("panic") && !message.contains(".rs"),
        "{message}"
    );
    let runs = app.processing_runs();
    let second = app
        .image_from(&origin, "/crafted.webp", "format=webp&w=100")
        .await;
    assert_eq!(second.status(), 422);
    assert_eq!(header(&second, "x-imgcas-cache"), Some("error-hit"));
    assert_eq!(app.processing_runs(), runs, "the error is cached");
    let panics = metric_value(
        &app.metrics().await,
        "imgcas_decoder_panics_total",
        &[("format", "webp")],
    );
    assert!(panics >= 1.0, "{panics}");
    // Its first frame alone decodes.
    let still = app
        .image_from(&origin, "/crafted.webp", "format=png&w=100")
        .await;
    assert_eq!(still.status(), 200);
}

/// Offline, on the server's code (issue 53): `imgcas process` keeps an animated GIF animated as
/// AVIF (an AV1 image sequence with the GIF's frames, which libavif's `avifdec` decodes where
/// installed, always under CI) and reads an AVIF image sequence as an animation.
#[test]
fn imgcas_process_writes_and_reads_animated_avif() {
    let dir = tempfile::tempdir().unwrap();
    let gif = dir.path().join("in.gif");
    std::fs::write(&gif, testdata("sharp/animated-loop-3.gif")).unwrap();
    let avif = dir.path().join("out.avif");
    assert_eq!(
        process_offline(dir.path(), "w=100&format=avif", &gif, &avif),
        0
    );
    let written = std::fs::read(&avif).unwrap();
    assert_eq!(&written[4..12], b"ftypavis", "an AV1 image sequence");
    let header = imgcas_processors::animation::header(&written).expect("an animation");
    assert_eq!(header.frames, 10);
    assert_eq!(header.duration_ms, 42_000, "the GIF's delays");
    if std::process::Command::new("avifdec")
        .arg("--version")
        .output()
        .is_ok()
    {
        let done = std::process::Command::new("avifdec")
            .arg("--info")
            .arg(&avif)
            .output()
            .unwrap();
        assert!(done.status.success(), "{done:?}");
        let decoded = String::from_utf8_lossy(&done.stdout)
            .lines()
            .filter(|l| l.contains("Decoded frame"))
            .count();
        assert_eq!(decoded, 10, "avifdec decodes every frame");
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI installs avifdec");
    }
    // An AVIF sequence in, animated WebP out, every frame.
    let sequence = dir.path().join("seq.avif");
    std::fs::write(
        &sequence,
        testdata("avif-sequences/colors-animated-8bpc.avif"),
    )
    .unwrap();
    let webp = dir.path().join("out.webp");
    assert_eq!(
        process_offline(dir.path(), "w=64&format=webp", &sequence, &webp),
        0
    );
    assert_eq!(delays(&std::fs::read(&webp).unwrap()).len(), 5);
}

/// `imgcas process --spec <spec> -o <output> <input>`, with `dir` as its data folder: the exit
/// code.
fn process_offline(
    dir: &std::path::Path,
    spec: &str,
    input: &std::path::Path,
    output: &std::path::Path,
) -> i32 {
    let (input, output) = (input.to_str().unwrap(), output.to_str().unwrap());
    binary::run(dir, &[], &["process", "--spec", spec, "-o", output, input]).0
}

//! The processing core on real files (from `testdata/`, copied from the shared corpus) and on
//! generated images: orientation, limits, corrupt input, every output format, fit geometry.

use std::io::Cursor;
use std::path::PathBuf;

use image::codecs::png::{CompressionType, FilterType as PngFilter};
use image::{
    DynamicImage, GenericImageView, ImageEncoder, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage,
};
use imgcas_processors::compare::mean_abs_error;
use imgcas_processors::{probe, process, Limits, OutputFormat, ProcessError, Spec};

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

use crate::common::run;

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// Mean absolute difference per channel, on RGB.
#[test]
fn exif_orientations_come_out_upright() {
    let reference = run(&testdata("exif-orientation/Landscape_1.jpg"), "format=png").unwrap();
    assert_eq!(reference.dimensions(), (1800, 1200));
    for name in ["Landscape_3.jpg", "Landscape_6.jpg"] {
        let out = run(&testdata(&format!("exif-orientation/{name}")), "format=png").unwrap();
        assert_eq!(out.dimensions(), (1800, 1200), "{name}");
        let diff = mean_abs_error(&out, &reference);
        assert!(
            diff < 6.0,
            "{name}: mean abs error {diff:.2} against Landscape_1"
        );
    }
}

#[test]
fn outputs_carry_no_metadata() {
    let bytes = testdata("exif-orientation/Landscape_6.jpg");
    assert!(
        bytes.windows(6).any(|w| w == b"Exif\0\0"),
        "the source has EXIF"
    );
    let spec = Spec::parse("w=200&format=jpeg")
        .unwrap()
        .resolve(None, false, None);
    let out = process(&bytes, &spec, &Limits::default()).unwrap();
    assert!(!out.bytes.windows(4).any(|w| w == b"Exif"));
}

#[test]
fn declared_giants_are_refused_from_the_header() {
    let err = run(&testdata("malicious/lottapixel.jpg"), "w=10").unwrap_err();
    assert!(matches!(err, ProcessError::TooManyPixels { .. }), "{err:?}");
    // A tiny pixel limit refuses an ordinary image the same way.
    let small = Limits {
        max_pixels: 100,
        ..Limits::default()
    };
    let png = encode(&DynamicImage::new_rgb8(20, 20), ImageFormat::Png);
    assert!(matches!(
        probe(&png, &small),
        Err(ProcessError::TooManyPixels { .. })
    ));
}

#[test]
fn a_png_header_declaring_20000_squared_is_refused_before_decoding() {
    // Signature + IHDR (20000x20000 RGBA) + an empty IDAT: 400 Mpx declared in 60 bytes.
    fn chunk(kind: &[u8], data: &[u8]) -> Vec<u8> {
        let mut c = (data.len() as u32).to_be_bytes().to_vec();
        c.extend_from_slice(kind);
        c.extend_from_slice(data);
        let mut crc = 0xFFFF_FFFFu32;
        for b in kind.iter().chain(data) {
            crc ^= u32::from(*b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        c.extend_from_slice(&(!crc).to_be_bytes());
        c
    }
    let mut ihdr = 20000u32.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&20000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &[]));
    png.extend(chunk(b"IEND", &[]));
    let err = run(&png, "w=10").unwrap_err();
    assert!(matches!(err, ProcessError::TooManyPixels { .. }), "{err:?}");
}

#[test]
fn corrupt_files_fail_cleanly() {
    for name in [
        "pillow/broken.png",
        "jpeg-decoder/missing-sos.jpg",
        "jpeg-decoder/null_height.jpg",
    ] {
        let err = run(&testdata(name), "w=10").unwrap_err();
        assert!(
            matches!(err, ProcessError::Undecodable(_)),
            "{name}: {err:?}"
        );
    }
    // Truncated: an error or a partial picture, never a panic.
    let _ = run(&testdata("pillow/truncated_jpeg.jpg"), "w=10");
    let err = run(b"just text", "w=10").unwrap_err();
    assert!(matches!(err, ProcessError::UnsupportedFormat(_)));
}

fn gradient(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x % 256) as u8, (y % 256) as u8, 128])
    }))
}

#[test]
fn every_output_format_round_trips() {
    let rgb = encode(&gradient(300, 200), ImageFormat::Png);
    let rgba = encode(
        &DynamicImage::ImageRgba8(RgbaImage::from_pixel(300, 200, Rgba([9, 9, 9, 100]))),
        ImageFormat::Png,
    );
    for source in [&rgb, &rgba] {
        for (format, mime_magic) in [
            ("jpeg", &b"\xFF\xD8\xFF"[..]),
            ("png", &b"\x89PNG"[..]),
            ("webp", &b"RIFF"[..]),
            ("gif", &b"GIF8"[..]),
        ] {
            let spec = Spec::parse(&format!("w=150&format={format}"))
                .unwrap()
                .resolve(None, false, None);
            let out = process(source, &spec, &Limits::default()).unwrap();
            assert!(out.bytes.starts_with(mime_magic), "{format}");
            let img = image::load_from_memory(&out.bytes).unwrap();
            assert_eq!(img.dimensions(), (150, 100), "{format}");
            assert_eq!((out.width, out.height), (150, 100));
        }
    }
    // AVIF: encoded by libavif/libaom, read back by imgcas itself.
    let spec = Spec::parse("w=150&format=avif")
        .unwrap()
        .resolve(None, false, None);
    let out = process(&rgb, &spec, &Limits::default()).unwrap();
    assert_eq!(&out.bytes[4..12], b"ftypavif");
    let (_, back) = imgcas_processors::decode::decode(&out.bytes, &Limits::default()).unwrap();
    assert_eq!(back.dimensions(), (150, 100));
    assert_eq!(OutputFormat::Webp.default_quality(), Some(80));
}

#[test]
fn alpha_flattens_onto_bg_for_jpeg() {
    let transparent = encode(
        &DynamicImage::ImageRgba8(RgbaImage::from_pixel(40, 40, Rgba([0, 0, 0, 0]))),
        ImageFormat::Png,
    );
    let out = run(&transparent, "format=jpeg&bg=ff0000")
        .unwrap()
        .to_rgb8();
    let p = out.get_pixel(20, 20).0;
    // JPEG chroma subsampling moves pure red a little; transparent black must not show.
    assert!(p[0] > 230 && p[1] < 50 && p[2] < 50, "{p:?}");
}

#[test]
fn fit_modes_produce_their_boxes() {
    let src = encode(&gradient(400, 200), ImageFormat::Png);
    assert_eq!(run(&src, "w=100&h=100").unwrap().dimensions(), (100, 50));
    assert_eq!(
        run(&src, "w=100&h=100&fit=cover").unwrap().dimensions(),
        (100, 100)
    );
    assert_eq!(
        run(&src, "w=100&h=100&fit=fill").unwrap().dimensions(),
        (100, 100)
    );
    let padded = run(&src, "w=100&h=100&fit=pad&bg=00ff00").unwrap();
    assert_eq!(padded.dimensions(), (100, 100));
    let corner = padded.to_rgb8().get_pixel(0, 0).0;
    assert!(
        corner[1] > 240 && corner[0] < 15,
        "pad colour at the corner: {corner:?}"
    );
    assert_eq!(
        run(&src, "w=100&rotate=90").unwrap().dimensions(),
        (100, 200)
    );
    assert_eq!(
        run(&src, "w=1000").unwrap().dimensions(),
        (400, 200),
        "no enlarge"
    );
    assert_eq!(
        run(&src, "w=800&enlarge=1").unwrap().dimensions(),
        (800, 400)
    );
    assert_eq!(run(&src, "w=50&dpr=2").unwrap().dimensions(), (100, 50));
    assert!(run(&src, "w=100&blur=2&sharpen=1").is_ok());
    let err = run(&src, "min_w=401").unwrap_err();
    assert!(matches!(err, ProcessError::SourceTooSmall { .. }));
}

#[test]
fn cover_crops_with_gravity() {
    // Left half black, right half white: gravity picks which half survives a square crop.
    let img = DynamicImage::ImageRgb8(RgbImage::from_fn(200, 100, |x, _| {
        if x < 100 {
            Rgb([0, 0, 0])
        } else {
            Rgb([255, 255, 255])
        }
    }));
    let src = encode(&img, ImageFormat::Png);
    let west = run(&src, "w=50&h=50&fit=cover&gravity=west")
        .unwrap()
        .to_rgb8();
    let east = run(&src, "w=50&h=50&fit=cover&gravity=east")
        .unwrap()
        .to_rgb8();
    assert!(west.get_pixel(25, 25).0[0] < 10);
    assert!(east.get_pixel(25, 25).0[0] > 245);
}

#[test]
fn crop_keeps_its_region_before_the_rest() {
    // Four quadrants of 100 × 100: black, red / green, white.
    let img = DynamicImage::ImageRgb8(RgbImage::from_fn(200, 200, |x, y| {
        match (x < 100, y < 100) {
            (true, true) => Rgb([0, 0, 0]),
            (false, true) => Rgb([255, 0, 0]),
            (true, false) => Rgb([0, 255, 0]),
            (false, false) => Rgb([255, 255, 255]),
        }
    }));
    let src = encode(&img, ImageFormat::Png);
    // The top-right quadrant by its corner, then 50 wide: all red.
    let red = run(&src, "crop=100,100,100,0&w=50").unwrap().to_rgb8();
    assert_eq!(red.dimensions(), (50, 50));
    assert_eq!(red.get_pixel(25, 25).0, [255, 0, 0]);
    // Near the region's edge the resize kernel may reach a pixel past it (as cover's crop
    // does): a unit or two, never the neighbour's colour.
    let edge = red.get_pixel(2, 47).0;
    assert!(edge[0] >= 250 && edge[1] <= 5 && edge[2] <= 5, "{edge:?}");
    // The bottom-left quadrant by gravity: all green.
    let green = run(&src, "crop=0.5,0.5&crop_gravity=southwest")
        .unwrap()
        .to_rgb8();
    assert_eq!(green.dimensions(), (100, 100));
    assert_eq!(green.get_pixel(50, 50).0, [0, 255, 0]);
}

#[test]
fn trim_cuts_the_borders_then_the_spec_applies_to_what_is_left() {
    // A red 120 × 60 picture in a white frame of 40 px: 200 × 140 in all.
    let img = DynamicImage::ImageRgb8(RgbImage::from_fn(200, 140, |x, y| {
        match (40..160).contains(&x) && (40..100).contains(&y) {
            true => Rgb([220, 20, 20]),
            false => Rgb([255, 255, 255]),
        }
    }));
    let src = encode(&img, ImageFormat::Png);
    let trimmed = run(&src, "trim=10").unwrap().to_rgb8();
    assert_eq!(trimmed.dimensions(), (120, 60));
    assert_eq!(trimmed.get_pixel(0, 0).0, [220, 20, 20]);
    // The box applies to what is left: 60 wide is half of it.
    let half = run(&src, "trim=10&w=60").unwrap();
    assert_eq!((half.width(), half.height()), (60, 30));
    // A border colour that frames nothing trims nothing.
    let untouched = run(&src, "trim=10&trim_color=0000ff").unwrap();
    assert_eq!((untouched.width(), untouched.height()), (200, 140));
}

#[test]
fn webp_exif_orientation_is_applied() {
    let reference = run(&testdata("pillow/hopper.webp"), "format=png").unwrap();
    let rotated = run(&testdata("pillow/hopper_orientation_6.webp"), "format=png").unwrap();
    assert_eq!(rotated.dimensions(), reference.dimensions());
    let diff = mean_abs_error(&rotated, &reference);
    assert!(
        diff < 10.0,
        "mean abs error {diff:.2} against the upright hopper"
    );
}

#[test]
fn tiny_jpegs_match_libjpeg() {
    let out = run(&testdata("jpeg-decoder/jpg-size-3x3.jpg"), "format=png").unwrap();
    let reference = image::load_from_memory(&testdata("jpeg-decoder/jpg-size-3x3.png")).unwrap();
    assert!(mean_abs_error(&out, &reference) < 3.0);
}

#[test]
fn lenient_and_unusual_containers() {
    // An ICO whose PNG entry is RGB (no alpha), a plain BMP, a GIF with no colour table.
    assert_eq!(
        run(&testdata("image-rs/png_rgb8.ico"), "format=png")
            .unwrap()
            .width(),
        32
    );
    assert!(run(&testdata("image-rs/rgb24.bmp"), "w=20").is_ok());
    assert!(run(&testdata("pillow/no_palette.gif"), "format=png").is_ok());
    // Valid but unread: a clean unsupported_format, never undecodable.
    for name in [
        "jpeg-decoder/jpeg_lossless_sel1.jpg",
        "image-rs/rgba32abf.bmp",
    ] {
        let err = run(&testdata(name), "w=10").unwrap_err();
        assert!(
            matches!(err, ProcessError::UnsupportedFormat(_)),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn shrink_on_load_matches_a_full_decode() {
    // A smooth 2000x1500 JPEG to 200 px: decoded at 1/4 scale, it must look like the
    // full-size decode resized (within JPEG noise).
    let big = encode(&gradient(2000, 1500), ImageFormat::Jpeg);
    let fast = run(&big, "w=200&format=png").unwrap();
    let full = image::load_from_memory(&big).unwrap().resize_exact(
        200,
        150,
        image::imageops::FilterType::Lanczos3,
    );
    assert_eq!(fast.dimensions(), (200, 150));
    let diff = mean_abs_error(&fast, &full);
    assert!(diff < 2.0, "mean abs error {diff:.2}");
}

#[test]
fn avif_mirror_and_rotation_come_out_upright() {
    let reference = run(&testdata("avif/kimono.jpg"), "format=png").unwrap();
    for name in [
        "kimono.mirror-horizontal.avif",
        "kimono.mirror-vertical.rotate270.avif",
    ] {
        let out = run(&testdata(&format!("avif/{name}")), "format=png").unwrap();
        assert_eq!(out.dimensions(), (722, 1024), "{name}");
        let diff = mean_abs_error(&out, &reference);
        assert!(
            diff < 10.0,
            "{name}: mean abs error {diff:.2} against kimono.jpg"
        );
    }
}

#[test]
fn avif_clean_aperture_is_applied_even_where_libavif_is_strict() {
    // libavif refuses this file's `clap` in strict mode; imgcas decodes it anyway and crops.
    let reference = image::load_from_memory(&testdata("avif/kimono.crop.png")).unwrap();
    let out = run(&testdata("avif/kimono.crop.avif"), "format=png").unwrap();
    assert_eq!(out.dimensions(), (385, 330));
    let diff = mean_abs_error(&out, &reference);
    assert!(
        diff < 10.0,
        "mean abs error {diff:.2} against kimono.crop.png"
    );
}

/// The rows of a grayscale picture that hold dark (ink) pixels: the first and the last.
fn inked_rows(image: &DynamicImage) -> (u32, u32) {
    let gray = image.to_luma8();
    let inked: Vec<u32> = (0..gray.height())
        .filter(|y| (0..gray.width()).any(|x| gray.get_pixel(x, *y).0[0] < 60))
        .collect();
    (inked[0], inked[inked.len() - 1])
}

#[test]
fn heic_photos_from_phones_come_out_upright() {
    // iPhone 13 Pro, a 4032x3024 grid with an ICC profile (Display P3, converted to sRGB by
    // the shared colour step) and no turn.
    let pug_bytes = testdata("heic/pug.heic");
    let opened = imgcas_processors::decode::open(&pug_bytes, &Limits::default()).unwrap();
    assert!(
        opened.icc.as_ref().is_some_and(|p| p.len() > 100),
        "the profile is read"
    );
    let pug = run(&pug_bytes, "w=400&format=jpeg").unwrap();
    assert_eq!(pug.dimensions(), (400, 300));
    // iPhone 8 Plus, portrait: the grid is stored 4032x3024 with `irot` 3 (and EXIF orientation
    // 6 saying the same turn, which must not be applied twice). Upright, the drawn arrow
    // points up: its tip is near the top, in the middle, and its stem ends in the lower half.
    let source = testdata("heic/arrow.heic");
    let info = probe(&source, &Limits::default()).unwrap();
    assert_eq!(info.format.name(), "heic");
    assert_eq!((info.width, info.height), (4032, 3024), "as stored");
    let arrow = run(&source, "w=150&format=png").unwrap();
    assert_eq!(arrow.dimensions(), (150, 200));
    let (top, bottom) = inked_rows(&arrow);
    assert!(
        top < 30 && bottom > 120 && bottom < 170,
        "ink rows {top}..{bottom}"
    );
    let gray = arrow.to_luma8();
    let tip: Vec<u32> = (0..150)
        .filter(|x| gray.get_pixel(*x, top).0[0] < 60)
        .collect();
    assert!(tip.iter().all(|x| (55..95).contains(x)), "tip at {tip:?}");
}

#[test]
fn heic_ten_bit_and_alpha_sources_decode() {
    // 10-bit (made with libheif's heif-enc from a 16-bit PNG): brought to 8 bits.
    let ten = testdata("heic/pug-10bit.heic");
    let out = run(&ten, "format=png").unwrap();
    assert_eq!(out.dimensions(), (252, 189));
    let reference = run(
        &testdata("heic/pug.heic"),
        "w=252&h=189&fit=fill&format=png",
    )
    .unwrap();
    let diff = mean_abs_error(&out, &reference);
    assert!(diff < 12.0, "10-bit against the 8-bit photo: {diff:.2}");
    // Alpha: the left half opaque red, the right half transparent.
    let alpha = testdata("heic/alpha.heic");
    assert!(probe(&alpha, &Limits::default()).unwrap().has_alpha);
    let out = run(&alpha, "format=png").unwrap().to_rgba8();
    assert_eq!(out.dimensions(), (96, 64));
    let left = out.get_pixel(10, 32).0;
    let right = out.get_pixel(86, 32).0;
    assert!(
        left[3] > 240 && left[0] > 180 && left[2] < 80,
        "left {left:?}"
    );
    assert!(right[3] < 15, "right {right:?}");
    // `format=original` of a HEIC answers a format browsers show.
    let spec = Spec::parse("format=original").unwrap();
    let info = probe(&ten, &Limits::default()).unwrap();
    let resolved = spec.resolve(info.format.as_output(), info.has_alpha, None);
    let bytes = process(&ten, &resolved, &Limits::default()).unwrap().bytes;
    assert_eq!(image::guess_format(&bytes).unwrap(), ImageFormat::Jpeg);
}

#[test]
fn heic_limits_are_read_before_decoding() {
    let source = testdata("heic/pug.heic");
    let small = Limits {
        max_pixels: 1_000_000,
        ..Limits::default()
    };
    let refused = probe(&source, &small).unwrap_err();
    assert!(
        matches!(refused, ProcessError::TooManyPixels { .. }),
        "{refused:?}"
    );
    // Truncated: a clean refusal, never a panic.
    for cut in [40, 1000, 5000, source.len() / 2] {
        let outcome = run(&source[..cut], "w=100&format=jpeg");
        assert!(outcome.is_err(), "cut at {cut}");
    }
}

/// The centre pixel of a source processed to PNG, as RGB.
fn centre_rgb(name: &str) -> [u8; 3] {
    let out = run(&testdata(name), "format=png").unwrap().to_rgb8();
    out.get_pixel(out.width() / 2, out.height() / 2).0
}

fn assert_near(name: &str, got: [u8; 3], want: [u8; 3], tolerance: u8) {
    let close = got
        .iter()
        .zip(want)
        .all(|(g, w)| g.abs_diff(w) <= tolerance);
    assert!(close, "{name}: got {got:?}, want {want:?} ± {tolerance}");
}

#[test]
fn embedded_profiles_are_converted_to_srgb() {
    // Expected values: the same files through LittleCMS (Pillow's ImageCms, perceptual intent),
    // an independent colour engine.
    assert_near(
        "prophoto.png",
        centre_rgb("sharp/prophoto.png"),
        [117, 160, 210],
        3,
    );
    assert_near("p3.png", centre_rgb("sharp/p3.png"), [255, 0, 0], 3);
    // FOGRA39 CMYK (0, 100, 100, 0): printing red, far from the naive (255, 0, 0).
    assert_near(
        "fogra-0-100-100-0.tif",
        centre_rgb("sharp/fogra-0-100-100-0.tif"),
        [227, 6, 20],
        8,
    );
}

#[test]
fn lossless_webp_keeps_every_pixel_and_lossy_does_not() {
    let source = encode(&gradient(120, 80), ImageFormat::Png);
    let lossless = run(&source, "format=webp&lossless=1").unwrap();
    assert_eq!(lossless.to_rgb8(), gradient(120, 80).to_rgb8());
    let lossy = run(&source, "format=webp").unwrap();
    assert_ne!(lossy.to_rgb8(), gradient(120, 80).to_rgb8());
}

#[test]
fn progressive_jpeg_is_written_on_request() {
    let source = encode(&gradient(300, 200), ImageFormat::Png);
    let sof = |query: &str| {
        let spec = Spec::parse(query).unwrap().resolve(None, false, None);
        let out = process(&source, &spec, &Limits::default()).unwrap();
        image::load_from_memory(&out.bytes).expect("decodes");
        // The first start-of-frame marker: C0 baseline (C1 extended), C2 progressive.
        out.bytes
            .windows(2)
            .find(|w| w[0] == 0xFF && (0xC0..=0xC2).contains(&w[1]))
            .map(|w| w[1])
    };
    assert_eq!(sof("format=jpeg&progressive=1"), Some(0xC2));
    assert_ne!(sof("format=jpeg"), Some(0xC2));
}

#[test]
fn avif_output_keeps_alpha() {
    let half = DynamicImage::ImageRgba8(RgbaImage::from_fn(64, 64, |x, _| {
        Rgba([200, 40, 40, if x < 32 { 255 } else { 0 }])
    }));
    let source = encode(&half, ImageFormat::Png);
    let spec = Spec::parse("format=avif")
        .unwrap()
        .resolve(None, true, None);
    let out = process(&source, &spec, &Limits::default()).unwrap();
    let (info, back) = imgcas_processors::decode::decode(&out.bytes, &Limits::default()).unwrap();
    assert!(info.has_alpha);
    let back = back.to_rgba8();
    assert!(back.get_pixel(8, 30).0[3] > 240);
    assert!(back.get_pixel(56, 30).0[3] < 15);
}

#[test]
fn smart_gravity_crops_towards_the_subject() {
    // A plain backdrop with a detailed subject near the right edge.
    let scene = DynamicImage::ImageRgb8(RgbImage::from_fn(1200, 400, |x, y| {
        if x > 900 && x < 1180 && y > 60 && y < 340 && (x / 6 + y / 6) % 2 == 0 {
            Rgb([220, 30, 40])
        } else if x > 900 && x < 1180 && y > 60 && y < 340 {
            Rgb([20, 20, 20])
        } else {
            Rgb([200, 200, 195])
        }
    }));
    let source = encode(&scene, ImageFormat::Png);
    let busy = |img: &DynamicImage| {
        let rgb = img.to_rgb8();
        rgb.pixels()
            .filter(|p| p.0[0] > 150 && p.0[1] < 100)
            .count()
    };
    let smart = run(&source, "w=200&h=200&fit=cover&gravity=smart&format=png").unwrap();
    let centre = run(&source, "w=200&h=200&fit=cover&format=png").unwrap();
    assert_eq!(smart.dimensions(), (200, 200));
    assert_eq!(busy(&centre), 0, "the centre crop misses the subject");
    assert!(
        busy(&smart) > 5000,
        "the smart crop holds it: {}",
        busy(&smart)
    );
}

#[test]
fn avif_without_pixi_decodes_like_its_twin_with_one() {
    // libavif's strict mode requires `pixi`; imgcas adds it from `av1C` and decodes.
    let fixed = run(&testdata("pillow/hopper-missing-pixi.avif"), "format=png").unwrap();
    let twin = run(&testdata("pillow/hopper.avif"), "format=png").unwrap();
    assert_eq!(fixed.dimensions(), (128, 128));
    // The twin is a separate, smaller encode of the same picture: close, not identical.
    let diff = mean_abs_error(&fixed, &twin);
    assert!(diff < 6.0, "mean abs error {diff:.2} against hopper.avif");
}

#[test]
fn a_ycck_jpeg_goes_through_its_cmyk_profile() {
    // Reference: the same file through its SWOP profile by LittleCMS (perceptual intent).
    let reference = image::load_from_memory(&testdata("jpeg-decoder/ycck.lcms-srgb.png")).unwrap();
    let out = run(&testdata("jpeg-decoder/ycck.jpg"), "format=png").unwrap();
    assert_eq!(out.dimensions(), reference.dimensions());
    let diff = mean_abs_error(&out, &reference);
    assert!(diff < 1.5, "mean abs error {diff:.2} against LittleCMS");
}

#[test]
fn jpeg_chroma_keeps_full_resolution_from_quality_90() {
    let source = encode(&gradient(64, 64), ImageFormat::Png);
    let luma_sampling = |query: &str| {
        let spec = Spec::parse(query).unwrap().resolve(None, false, None);
        let out = process(&source, &spec, &Limits::default()).unwrap().bytes;
        // SOF0: FF C0, length (2), precision (1), height (2), width (2), count (1), then per
        // component: id, sampling factors, table. The first component is luma.
        let at = out
            .windows(2)
            .position(|w| w == [0xFF, 0xC0])
            .expect("SOF0");
        out[at + 11]
    };
    assert_eq!(luma_sampling("format=jpeg"), 0x22, "4:2:0 below q=90");
    assert_eq!(luma_sampling("format=jpeg&q=90"), 0x11, "4:4:4 from q=90");
}

/// CRC-32 (IEEE) for hand-built PNG chunks.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn metadata_payloads_never_reach_an_output() {
    const PHP: &[u8] = b"<?php system($_GET['c']); ?>";
    // A JPEG with the payload in a comment, an EXIF block and an XMP packet.
    let plain = encode(&gradient(64, 48), ImageFormat::Jpeg);
    let segment = |marker: u8, body: &[u8]| {
        let mut s = vec![0xFF, marker];
        s.extend_from_slice(&u16::try_from(body.len() + 2).unwrap().to_be_bytes());
        s.extend_from_slice(body);
        s
    };
    let mut jpeg = plain[..2].to_vec();
    jpeg.extend(segment(0xFE, PHP));
    jpeg.extend(segment(
        0xE1,
        &[b"Exif\0\0MM\0*\0\0\0\x08\0\0".as_slice(), PHP].concat(),
    ));
    jpeg.extend(segment(
        0xE1,
        &[b"http://ns.adobe.com/xap/1.0/\0<x:xmpmeta>".as_slice(), PHP].concat(),
    ));
    jpeg.extend_from_slice(&plain[2..]);
    // A PNG with the payload in a tEXt chunk.
    let plain = encode(&gradient(64, 48), ImageFormat::Png);
    let iend = plain.len() - 12;
    let mut text = b"tEXtComment\0".to_vec();
    text.extend_from_slice(PHP);
    let mut png = plain[..iend].to_vec();
    png.extend_from_slice(&u32::try_from(text.len() - 4).unwrap().to_be_bytes());
    png.extend_from_slice(&text);
    png.extend_from_slice(&crc32(&text).to_be_bytes());
    png.extend_from_slice(&plain[iend..]);

    for (name, source) in [("jpeg", &jpeg), ("png", &png)] {
        assert!(
            source.windows(PHP.len()).any(|w| w == PHP),
            "{name} carries it"
        );
        for format in ["jpeg", "png", "webp", "avif", "gif"] {
            let spec = Spec::parse(&format!("w=32&format={format}"))
                .unwrap()
                .resolve(None, false, None);
            let out = process(source, &spec, &Limits::default())
                .unwrap_or_else(|e| panic!("{name} to {format}: {e}"))
                .bytes;
            for needle in [PHP, b"<?php", b"Exif", b"xmpmeta", b"tEXt"] {
                assert!(
                    !out.windows(needle.len()).any(|w| w == needle),
                    "{name} to {format} carries {:?}",
                    String::from_utf8_lossy(needle)
                );
            }
        }
    }
}

/// A PNG chunk: length, type, data, CRC.
fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut typed = kind.to_vec();
    typed.extend_from_slice(data);
    let mut out = u32::try_from(data.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(&typed);
    out.extend_from_slice(&crc32(&typed).to_be_bytes());
    out
}

/// `png` with one more chunk right after IHDR (signature 8 bytes + IHDR 25 bytes).
fn with_chunk_after_ihdr(png: &[u8], kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = png[..33].to_vec();
    out.extend(png_chunk(kind, data));
    out.extend_from_slice(&png[33..]);
    out
}

#[test]
fn a_lossless_webp_header_declaring_16384_squared_is_refused_before_decoding() {
    // VP8L: signature 0x2F, then 14 bits width-1, 14 bits height-1, alpha, 3 bits version.
    let bits: u32 = 16383 | (16383 << 14);
    let mut vp8l = vec![0x2F];
    vp8l.extend_from_slice(&bits.to_le_bytes());
    vp8l.extend_from_slice(&[0; 16]);
    let mut webp = b"RIFF".to_vec();
    webp.extend_from_slice(&u32::try_from(4 + 8 + vp8l.len()).unwrap().to_le_bytes());
    webp.extend_from_slice(b"WEBPVP8L");
    webp.extend_from_slice(&u32::try_from(vp8l.len()).unwrap().to_le_bytes());
    webp.extend_from_slice(&vp8l);
    let err = run(&webp, "w=10").unwrap_err();
    assert!(matches!(err, ProcessError::TooManyPixels { .. }), "{err:?}");
}

#[test]
fn an_apng_declaring_two_billion_frames_is_refused_from_its_header() {
    let still = encode(&gradient(16, 16), ImageFormat::Png);
    // acTL: num_frames = 2^31, plays forever: frames the 156 bytes after it cannot hold
    // (issue 35; before, the still was served and the facts said 2^31 frames).
    let mut actl = 0x8000_0000u32.to_be_bytes().to_vec();
    actl.extend_from_slice(&0u32.to_be_bytes());
    let apng = with_chunk_after_ihdr(&still, b"acTL", &actl);
    match run(&apng, "format=png") {
        Err(ProcessError::Undecodable(m)) => assert!(m.contains("acTL frames"), "{m}"),
        other => panic!("{:?}", other.map(|i| i.dimensions())),
    }
    // A count the bytes can hold is the decoder's to check, as before.
    let mut actl = 2u32.to_be_bytes().to_vec();
    actl.extend_from_slice(&0u32.to_be_bytes());
    let apng = with_chunk_after_ihdr(&still, b"acTL", &actl);
    assert!(probe(&apng, &Limits::default()).is_ok());
}

#[test]
fn a_text_chunk_bomb_does_not_stop_the_picture() {
    // 64 MiB of zeros as a zTXt chunk (≈64 KB compressed). The png crate keeps zTXt compressed
    // until asked and imgcas never asks (outputs carry no text): the picture decodes, quickly.
    // A zlib stream of 64 MiB of zeros: the IDAT of an all-black 8192x8192 grey PNG.
    let black = {
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new_with_quality(
            &mut out,
            CompressionType::Best,
            PngFilter::NoFilter,
        )
        .write_image(
            &vec![0u8; 8192 * 8192],
            8192,
            8192,
            image::ExtendedColorType::L8,
        )
        .unwrap();
        out
    };
    let mut compressed = Vec::new();
    let mut at = 8;
    while at + 12 <= black.len() {
        let len = u32::from_be_bytes(black[at..at + 4].try_into().unwrap()) as usize;
        if &black[at + 4..at + 8] == b"IDAT" {
            compressed.extend_from_slice(&black[at + 8..at + 8 + len]);
        }
        at += 12 + len;
    }
    let mut data = b"Comment\0\0".to_vec();
    data.extend_from_slice(&compressed);
    let still = encode(&gradient(16, 16), ImageFormat::Png);
    let png = with_chunk_after_ihdr(&still, b"zTXt", &data);
    let started = std::time::Instant::now();
    let out = run(&png, "format=png").unwrap();
    assert_eq!(out.dimensions(), (16, 16));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

/// Issue 35: containers whose declared counts and sizes the bytes cannot hold are refused
/// from their headers, before anything walks them (`testdata/crafted/`, see its licence row).
#[test]
fn declared_counts_and_sizes_past_the_bytes_are_refused_from_the_headers() {
    for (name, says) in [
        ("crafted/avif-ipma-count.avif", "ipma"),
        ("crafted/ico-65535-entries.ico", "directory entries"),
        ("crafted/tiff-ifd-65535-entries.tif", "IFD entries"),
        ("crafted/apng-actl-2pow31-frames.png", "acTL frames"),
        ("crafted/webp-anmf-4gb.webp", "ANMF"),
    ] {
        let bytes = testdata(name);
        match probe(&bytes, &Limits::default()) {
            Err(ProcessError::Undecodable(message)) => {
                assert!(message.contains(says), "{name}: {message}")
            }
            other => panic!("{name}: {other:?}"),
        }
        // The whole run answers the same, as a still and as an animation.
        for query in ["w=64&format=png", "w=64&format=webp&animated=1"] {
            assert!(
                matches!(run(&bytes, query), Err(ProcessError::Undecodable(_))),
                "{name} {query}"
            );
        }
    }
    // A GIF whose image data runs in sub-blocks to the end of the file, never terminated:
    // every walk ends with the bytes (each sub-block is at least its length byte), and the
    // picture is what the data before the end holds, as browsers show a GIF cut short.
    let endless = testdata("crafted/gif-endless-sub-blocks.gif");
    assert_eq!(imgcas_processors::animation::frame_count(&endless), 1);
    for query in ["w=64&format=png", "w=64&format=webp&animated=1"] {
        let out = run(&endless, query).unwrap();
        assert_eq!(out.dimensions(), (16, 16), "{query}");
    }
}

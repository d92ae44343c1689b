//! Watermarks (issue 31, item 4) in the processing core: the overlay placed by its settings,
//! faded by its opacity, at its share of the output's width, on every frame of an animation;
//! and the variant's canonical form holding the overlay's hash and every setting.

use std::io::Cursor;
use std::sync::Arc;

use image::{DynamicImage, GenericImageView, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};
use imgcas_processors::{process, Limits, OutputFormat, Placement, Spec};

fn encode(image: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// A 200×100 overlay: opaque red on the left half, transparent on the right.
fn overlay() -> Vec<u8> {
    let image = RgbaImage::from_fn(200, 100, |x, _| {
        if x < 100 {
            Rgba([255, 0, 0, 255])
        } else {
            Rgba([0, 0, 255, 0])
        }
    });
    encode(&DynamicImage::ImageRgba8(image), ImageFormat::Png)
}

const OVERLAY_HASH: &str = "ab00000000000000000000000000000000000000000000000000000000000000";

/// `query` (naming `wm`) with the watermark placed by `placement` and `bytes` attached, as the
/// service does.
fn placed(query: &str, placement: &str, bytes: Vec<u8>, pixels: u64) -> Spec {
    let mut spec = Spec::parse(query).unwrap();
    let placement = Placement::parse(&format!("hash={OVERLAY_HASH}&{placement}")).unwrap();
    let mark = spec.shape.watermark.as_mut().expect("wm parsed");
    mark.place(&placement, pixels);
    mark.source.bytes = Some(Arc::new(bytes));
    spec
}

fn marked(query: &str, placement: &str) -> imgcas_processors::ResolvedSpec {
    placed(query, placement, overlay(), 200 * 100).resolve(Some(OutputFormat::Png), false, None)
}

#[test]
fn the_overlay_sits_at_its_position_scaled_and_faded() {
    let base = DynamicImage::ImageRgb8(RgbImage::from_pixel(400, 300, Rgb([128, 128, 128])));
    let source = encode(&base, ImageFormat::Png);
    // A quarter of 400 = 100×50, 10 px from the bottom-right corner, half opaque.
    let spec = marked(
        "wm=logo&format=png",
        "position=southeast&scale=0.25&opacity=0.5&margin=10",
    );
    assert_eq!(
        spec.canonical(),
        format!("format=png&wm={OVERLAY_HASH}&wm_margin=10&wm_opacity=0.5&wm_pos=southeast&wm_scale=0.25")
    );
    let out = process(&source, &spec, &Limits::default()).unwrap();
    let image = image::load_from_memory(&out.bytes).unwrap().to_rgb8();
    assert_eq!(image.dimensions(), (400, 300));
    // The overlay's opaque half: x 290..340, y 240..290, red blended half over grey.
    let inside = image.get_pixel(310, 265).0;
    assert!(inside[0] > 180 && inside[1] < 80, "{inside:?}");
    // Its transparent half and the rest: grey.
    assert_eq!(image.get_pixel(365, 265).0, [128, 128, 128]);
    assert_eq!(image.get_pixel(100, 100).0, [128, 128, 128]);
    // A request's overrides win over the configuration.
    let moved = marked(
        "wm=logo&wm_pos=northwest&wm_opacity=1&format=png",
        "position=southeast&margin=0",
    );
    let out = process(&source, &moved, &Limits::default()).unwrap();
    let image = image::load_from_memory(&out.bytes).unwrap().to_rgb8();
    assert_eq!(image.get_pixel(5, 5).0, [255, 0, 0]);
    assert_eq!(image.get_pixel(395, 295).0, [128, 128, 128]);
}

#[test]
fn settings_are_checked_where_they_are_given() {
    for (query, option) in [
        ("wm_pos=north", "wm_pos"),
        ("wm=logo&wm_scale=0", "wm_scale"),
        ("wm=logo&wm_scale=1.5", "wm_scale"),
        ("wm=logo&wm_opacity=2", "wm_opacity"),
        ("wm=logo&wm_pos=smart", "wm_pos"),
        ("wm=../etc", "wm"),
    ] {
        let err = Spec::parse(query).unwrap_err();
        assert_eq!(err.option, option, "{query}");
    }
    assert!(Placement::parse("position=north").is_err(), "no hash");
    assert!(Placement::parse(&format!("hash={OVERLAY_HASH}&size=2")).is_err());
    // The request's own canonical form (what signatures cover) keeps the name.
    let spec = Spec::parse("wm_scale=0.5&wm=logo").unwrap();
    assert_eq!(spec.canonical(), "wm=logo&wm_scale=0.5");
}

#[test]
fn every_frame_of_an_animation_is_marked() {
    use image::codecs::gif::{GifDecoder, GifEncoder};
    use image::{AnimationDecoder, Delay, Frame};
    let mut gif = Vec::new();
    {
        let mut encoder = GifEncoder::new(&mut gif);
        for shade in [40u8, 200] {
            let frame = RgbaImage::from_pixel(120, 80, Rgba([shade, shade, shade, 255]));
            let frame = Frame::from_parts(frame, 0, 0, Delay::from_numer_denom_ms(100, 1));
            encoder.encode_frame(frame).unwrap();
        }
    }
    let spec = placed(
        "wm=logo&format=gif",
        "position=northwest&scale=0.5&margin=0",
        overlay(),
        200 * 100,
    );
    let resolved = spec.resolve_frames(Some(OutputFormat::Gif), false, 2, None);
    assert!(resolved.animated);
    let out = process(&gif, &resolved, &Limits::default()).unwrap();
    let frames: Vec<_> = GifDecoder::new(Cursor::new(out.bytes))
        .unwrap()
        .into_frames()
        .map(|f| f.unwrap().into_buffer())
        .collect();
    assert_eq!(frames.len(), 2);
    for frame in &frames {
        let p = frame.get_pixel(5, 5).0;
        assert!(p[0] > 200 && p[1] < 60, "{p:?}");
        assert_eq!(frame.dimensions(), (120, 80));
    }
    let _ = DynamicImage::ImageRgba8(frames[0].clone()).dimensions();
}

#[test]
fn admission_counts_the_overlay() {
    let plain =
        Spec::parse("w=400&format=png")
            .unwrap()
            .resolve(Some(OutputFormat::Png), false, None);
    let marked = marked("w=400&wm=logo&format=png", "scale=0.25");
    let size = (1600, 1200);
    let (without, with) = (
        imgcas_processors::cost(None, size, &plain),
        imgcas_processors::cost(None, size, &marked),
    );
    // The overlay's 200×100 decoded, and a blend over the 400×300 output.
    assert!(
        with >= without + 200 * 100 + 400 * 300,
        "{without} → {with}"
    );
}

#[test]
fn an_svg_overlay_is_drawn_at_its_size() {
    let base = DynamicImage::ImageRgb8(RgbImage::from_pixel(400, 300, Rgb([128, 128, 128])));
    let source = encode(&base, ImageFormat::Png);
    // A 20×10 drawing, green, scaled to half of 400: drawn at 200×100, not enlarged.
    let svg = br##"<svg xmlns="http://www.w3.org/2000/svg" width="20" height="10"><rect width="20" height="10" fill="#00c000"/></svg>"##;
    let spec = placed(
        "wm=logo&format=png",
        "position=northwest&scale=0.5&margin=0",
        svg.to_vec(),
        20 * 10,
    );
    let resolved = spec.resolve(Some(OutputFormat::Png), false, None);
    let out = process(&source, &resolved, &Limits::default()).unwrap();
    let image = image::load_from_memory(&out.bytes).unwrap().to_rgb8();
    assert_eq!(image.get_pixel(199, 99).0, [0, 192, 0]);
    assert_eq!(image.get_pixel(201, 101).0, [128, 128, 128]);
}

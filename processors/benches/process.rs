//! Processing speed, always next to a peer measured in the same run: the `image` crate's
//! straightforward path (full decode with zune-jpeg, `imageops` Lanczos3, its JPEG encoder).
//! Read the ratio between the two lines of a group, not the absolute times.
//!
//! `cargo bench -p imgcas-processors` (add `-- 12mp` to pick groups).

use std::hint::black_box;
use std::io::Cursor;

use criterion::{criterion_group, criterion_main, Criterion};
use image::{DynamicImage, ImageFormat, RgbImage};
use imgcas_processors::{process, Limits, OutputFormat, Spec};

/// A photo-like picture: smooth gradients, edges and fine noise, so that JPEG has real work.
fn photo_like(width: u32, height: u32) -> Vec<u8> {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut noise = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 24) as f32 - 12.0
    };
    let img = RgbImage::from_fn(width, height, |x, y| {
        let (fx, fy) = (x as f32 / width as f32, y as f32 / height as f32);
        let wave = ((fx * 40.0).sin() * (fy * 25.0).cos()) * 40.0;
        let edge = if (x / 97 + y / 131) % 2 == 0 {
            30.0
        } else {
            -30.0
        };
        let base = [
            fx * 200.0 + 20.0,
            fy * 180.0 + 30.0,
            (1.0 - fx) * 160.0 + 40.0,
        ];
        image::Rgb(base.map(|b| (b + wave + edge + noise()).clamp(0.0, 255.0) as u8))
    });
    let mut out = Cursor::new(Vec::new());
    DynamicImage::ImageRgb8(img)
        .write_to(&mut out, ImageFormat::Jpeg)
        .expect("encode fixture");
    out.into_inner()
}

fn ours(source: &[u8], query: &str) -> Vec<u8> {
    let spec = Spec::parse(query)
        .expect("spec")
        .resolve(Some(OutputFormat::Jpeg), false, None);
    process(source, &spec, &Limits::default())
        .expect("process")
        .bytes
}

fn peer_image_crate(source: &[u8], width: u32) -> Vec<u8> {
    let img = image::load_from_memory(source).expect("decode");
    let height = (u64::from(img.height()) * u64::from(width) / u64::from(img.width())) as u32;
    let small = img.resize_exact(width, height, image::imageops::FilterType::Lanczos3);
    let mut out = Cursor::new(Vec::new());
    small.write_to(&mut out, ImageFormat::Jpeg).expect("encode");
    out.into_inner()
}

fn thumbnails(c: &mut Criterion) {
    let source = photo_like(4000, 3000);
    let mut group = c.benchmark_group("12mp_to_400px");
    group.sample_size(10);
    group.bench_function("imgcas_jpeg", |b| {
        b.iter(|| ours(black_box(&source), "w=400&format=jpeg"))
    });
    group.bench_function("peer_image_crate_jpeg", |b| {
        b.iter(|| peer_image_crate(black_box(&source), 400))
    });
    group.bench_function("imgcas_webp", |b| {
        b.iter(|| ours(black_box(&source), "w=400&format=webp"))
    });
    group.bench_function("imgcas_avif", |b| {
        b.iter(|| ours(black_box(&source), "w=400&format=avif"))
    });
    group.finish();
}

fn cover_crops(c: &mut Criterion) {
    let source = photo_like(4000, 3000);
    let mut group = c.benchmark_group("12mp_cover_300x300");
    group.sample_size(10);
    group.bench_function("imgcas_jpeg", |b| {
        b.iter(|| ours(black_box(&source), "w=300&h=300&fit=cover&format=jpeg"))
    });
    group.finish();
}

/// A real photograph (testdata, MIT) upscaled to 12 MP and saved at quality 80, like a
/// marketplace upload: smoother than `photo_like`, so entropy decoding costs less.
fn upscaled_photo() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/exif-orientation/Landscape_1.jpg"
    );
    let small = image::open(path).expect("testdata photo");
    let big = small.resize_exact(4000, 3000, image::imageops::FilterType::CatmullRom);
    let mut out = Cursor::new(Vec::new());
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 80)
        .encode_image(&big.to_rgb8())
        .expect("encode fixture");
    out.into_inner()
}

fn photo_thumbnails(c: &mut Criterion) {
    let source = upscaled_photo();
    let mut group = c.benchmark_group("12mp_photo_q80_to_400px");
    group.sample_size(20);
    group.bench_function("imgcas_jpeg", |b| {
        b.iter(|| ours(black_box(&source), "w=400&format=jpeg"))
    });
    group.bench_function("peer_image_crate_jpeg", |b| {
        b.iter(|| peer_image_crate(black_box(&source), 400))
    });
    group.finish();
}

criterion_group!(benches, thumbnails, photo_thumbnails, cover_crops);
criterion_main!(benches);

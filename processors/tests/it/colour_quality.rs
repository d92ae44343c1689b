//! Colour management keeps its precision on the fast paths. A picture with a wide-gamut
//! profile (Display P3 and ProPhoto: the profiles of sharp's fixtures) is converted to sRGB on
//! the pixels the run decodes: a JPEG's shrunk decode (1/2, 1/4, 1/8 of its size), a PNG's
//! whole decode before its mezzanine. Converting the shrunk pixels is not the same arithmetic
//! as converting all of them and then reducing (the transform is not linear), so the
//! tolerance is tested against a reference that takes no shortcut: the whole picture decoded
//! and converted at full size, Lanczos3 to the output size, not encoded.
//!
//! The stated tolerance: lossless (PNG) outputs score at least [`PNG_FLOOR_DB`] against that
//! reference, JPEG q95 outputs [`JPEG_FLOOR_DB`], at every scale; and each output is plainly
//! managed: at least 3 dB closer to the managed reference than to the unmanaged one (the same
//! pixels read as sRGB). Beside them is printed what the very same photo without a profile
//! scores on the same path: the managed outputs are within 0.2 dB of it for P3 at the shrunk
//! scales; ProPhoto's are 1.3 to 2.2 dB lower at every scale, the whole decode included, which
//! is its conversion's saturated colours being harder to resize, not the shortcut.

use crate::common;

use common::{testdata, twelve_megapixels};
use std::sync::Arc;

use image::codecs::png::PngEncoder;
use image::{DynamicImage, ImageEncoder};
use imgcas_processors::compare::psnr;
use imgcas_processors::geometry::Plan;
use imgcas_processors::spec::Rgb;
use imgcas_processors::{decode, ops, process, Limits, OutputFormat, ResolvedSpec, Spec};

/// The least PSNR of a lossless output against the full-precision reference. Measured at
/// least 35.8 dB (ProPhoto, w=240 of 4000: a 1/8 decode); whole decodes score infinity.
const PNG_FLOOR_DB: f64 = 35.0;
/// The same for JPEG q95 outputs: measured at least 34.0 dB (ProPhoto, w=240).
const JPEG_FLOOR_DB: f64 = 33.0;

fn spec(query: &[(&str, &str)], format: OutputFormat) -> ResolvedSpec {
    Spec::from_pairs(query.iter().copied())
        .unwrap()
        .resolve(Some(format), false, None)
}

/// The embedded profile of one of sharp's tagged fixtures.
fn profile(fixture: &str) -> Vec<u8> {
    let bytes = testdata(fixture);
    let source = decode::open(&bytes, &Limits::default()).unwrap();
    source.icc.expect("the fixture carries a profile")
}

/// `jpeg` with `icc` embedded as APP2 `ICC_PROFILE` segments right after its start marker.
fn tag_jpeg(jpeg: &[u8], icc: &[u8]) -> Vec<u8> {
    const CHUNK: usize = 65_519;
    let chunks: Vec<&[u8]> = icc.chunks(CHUNK).collect();
    let mut out = jpeg[..2].to_vec();
    for (i, chunk) in chunks.iter().enumerate() {
        let length = u16::try_from(2 + 12 + 2 + chunk.len()).unwrap();
        out.extend_from_slice(&[0xFF, 0xE2]);
        out.extend_from_slice(&length.to_be_bytes());
        out.extend_from_slice(b"ICC_PROFILE\0");
        out.push(u8::try_from(i + 1).unwrap());
        out.push(u8::try_from(chunks.len()).unwrap());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// The pixels of `jpeg` as a PNG, with `icc` embedded when given.
fn png_of(jpeg: &[u8], icc: Option<&[u8]>) -> Vec<u8> {
    let rgb = decode::decode(jpeg, &Limits::default())
        .unwrap()
        .1
        .to_rgb8();
    let mut out = Vec::new();
    let mut encoder = PngEncoder::new(&mut out);
    if let Some(icc) = icc {
        encoder.set_icc_profile(icc.to_vec()).unwrap();
    }
    encoder
        .write_image(
            rgb.as_raw(),
            rgb.width(),
            rgb.height(),
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
}

fn decoded(bytes: &[u8]) -> DynamicImage {
    decode::decode(bytes, &Limits::default()).unwrap().1
}

fn resized(full: &DynamicImage, size: (u32, u32)) -> DynamicImage {
    let plan = Plan {
        crop: None,
        resize_to: size,
        pad: None,
    };
    ops::apply_plan(Arc::new(full.clone()), &plan, Rgb([0, 0, 0])).unwrap()
}

/// (managed output against the managed reference, managed output against the unmanaged
/// reference, untagged output against its own reference), in dB.
fn scores(tagged: &[u8], untagged: &[u8], spec: &ResolvedSpec) -> (f64, f64, f64) {
    let limits = Limits::default();
    let managed = process(tagged, spec, &limits).unwrap();
    let plain = process(untagged, spec, &limits).unwrap();
    let size = (managed.width, managed.height);
    assert_eq!(size, (plain.width, plain.height));
    let managed_reference = resized(&decoded(tagged), size);
    let plain_reference = resized(&decoded(untagged), size);
    let managed = decoded(&managed.bytes);
    (
        psnr(&managed, &managed_reference),
        psnr(&managed, &plain_reference),
        psnr(&decoded(&plain.bytes), &plain_reference),
    )
}

fn check(name: &str, tagged: &[u8], untagged: &[u8], widths: &[u32], format: OutputFormat) {
    for &width in widths {
        let value = width.to_string();
        let spec = spec(&[("w", &value), ("q", "95")], format);
        let (managed, unmanaged, plain) = scores(tagged, untagged, &spec);
        eprintln!(
            "{name} w={width}: managed {managed:.3} dB (against the unmanaged reference \
             {unmanaged:.3}), untagged {plain:.3} dB"
        );
        let floor = match format {
            OutputFormat::Png => PNG_FLOOR_DB,
            _ => JPEG_FLOOR_DB,
        };
        assert!(
            managed >= floor,
            "{name} w={width} {format:?}: {managed:.3} dB against the reference, below {floor} dB"
        );
        assert!(
            managed >= unmanaged + 3.0,
            "{name} w={width}: the profile was not applied ({managed:.3} against {unmanaged:.3} dB)"
        );
    }
}

#[test]
fn a_jpeg_managed_on_its_shrunk_decode_is_within_tolerance() {
    let photo = twelve_megapixels();
    // w=2000: whole decode; 1000: 1/2; 500: 1/4; 240: 1/8.
    let widths = [2000, 1000, 500, 240];
    for fixture in ["sharp/p3.png", "sharp/prophoto.png"] {
        let tagged = tag_jpeg(&photo, &profile(fixture));
        check(fixture, &tagged, &photo, &widths, OutputFormat::Jpeg);
        check(fixture, &tagged, &photo, &widths, OutputFormat::Png);
    }
}

#[test]
fn a_png_managed_before_its_mezzanine_is_within_tolerance() {
    let photo = twelve_megapixels();
    let plain = png_of(&photo, None);
    // w=320 and 500 are made from the mezzanine (2000 px wide), 1000 from the original.
    for fixture in ["sharp/p3.png", "sharp/prophoto.png"] {
        let tagged = png_of(&photo, Some(&profile(fixture)));
        check(
            fixture,
            &tagged,
            &plain,
            &[320, 500, 1000],
            OutputFormat::Jpeg,
        );
        check(
            fixture,
            &tagged,
            &plain,
            &[320, 500, 1000],
            OutputFormat::Png,
        );
    }
}

//! Colour management: pictures with an embedded ICC profile (Display P3, Adobe RGB, ProPhoto,
//! CMYK, …) are converted to sRGB with `moxcms`, since outputs carry no profile and are read
//! as sRGB. An unreadable profile is ignored rather than failing the picture.

use image::{DynamicImage, RgbImage, RgbaImage};
use moxcms::{ColorProfile, DataColorSpace, Layout, ProfileText, TransformOptions};

fn describes_srgb(profile: &ColorProfile) -> bool {
    let text = match &profile.description {
        Some(ProfileText::PlainString(s)) => s.clone(),
        Some(ProfileText::Localizable(l)) => l.first().map(|s| s.value.clone()).unwrap_or_default(),
        Some(ProfileText::Description(d)) => d.ascii_string.clone(),
        None => String::new(),
    };
    text.to_ascii_lowercase().contains("srgb")
}

/// Converts RGB(A) pixels described by `icc` to sRGB. Pictures already in sRGB, without an RGB
/// profile, or with a profile that cannot be read are returned as they are.
pub fn to_srgb(image: DynamicImage, icc: &[u8]) -> DynamicImage {
    let Ok(profile) = ColorProfile::new_from_slice(icc) else {
        return image;
    };
    if profile.color_space != DataColorSpace::Rgb || describes_srgb(&profile) {
        return image;
    }
    let srgb = ColorProfile::new_srgb();
    let layout = match &image {
        DynamicImage::ImageRgb8(_) => Layout::Rgb,
        DynamicImage::ImageRgba8(_) => Layout::Rgba,
        _ => return image,
    };
    let Ok(transform) =
        profile.create_transform_8bit(layout, &srgb, layout, TransformOptions::default())
    else {
        return image;
    };
    let (w, h) = (image.width(), image.height());
    let mut out = vec![0u8; image.as_bytes().len()];
    if transform.transform(image.as_bytes(), &mut out).is_err() {
        return image;
    }
    match layout {
        Layout::Rgb => RgbImage::from_raw(w, h, out).map(DynamicImage::ImageRgb8),
        _ => RgbaImage::from_raw(w, h, out).map(DynamicImage::ImageRgba8),
    }
    .unwrap_or(image)
}

/// CMYK pixels (as stored: Adobe files invert them) through a CMYK profile to sRGB.
/// `None` when the profile is not a usable CMYK profile.
pub fn cmyk_to_srgb(
    width: u32,
    height: u32,
    cmyk: &[u8],
    icc: &[u8],
    inverted: bool,
) -> Option<RgbImage> {
    let profile = ColorProfile::new_from_slice(icc).ok()?;
    if profile.color_space != DataColorSpace::Cmyk {
        return None;
    }
    let transform = profile
        .create_transform_8bit(
            Layout::Rgba,
            &ColorProfile::new_srgb(),
            Layout::Rgb,
            TransformOptions::default(),
        )
        .ok()?;
    let source: Vec<u8> = if inverted {
        cmyk.iter().map(|v| 255 - v).collect()
    } else {
        cmyk.to_vec()
    };
    let mut out = vec![0u8; source.len() / 4 * 3];
    transform.transform(&source, &mut out).ok()?;
    RgbImage::from_raw(width, height, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_p3_colours_become_more_saturated_srgb() {
        let icc = ColorProfile::new_display_p3().encode().unwrap();
        let img = DynamicImage::ImageRgb8(RgbImage::from_pixel(2, 2, image::Rgb([200, 100, 50])));
        let out = to_srgb(img, &icc).to_rgb8();
        let [r, g, b] = out.get_pixel(0, 0).0;
        // The same numbers mean a wider-gamut colour in P3: in sRGB, red rises, green and blue fall.
        assert!(r > 205 && g < 98 && b < 45, "{r} {g} {b}");
        let gray = DynamicImage::ImageRgb8(RgbImage::from_pixel(1, 1, image::Rgb([128, 128, 128])));
        let [r, g, b] = to_srgb(gray, &icc).to_rgb8().get_pixel(0, 0).0;
        assert!(r.abs_diff(128) <= 1 && g.abs_diff(128) <= 1 && b.abs_diff(128) <= 1);
    }

    #[test]
    fn unreadable_profiles_change_nothing() {
        let img = DynamicImage::ImageRgb8(RgbImage::from_pixel(1, 1, image::Rgb([1, 2, 3])));
        assert_eq!(to_srgb(img.clone(), b"not a profile"), img);
    }
}

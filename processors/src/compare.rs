//! Picture comparison for tests and benchmarks: mean absolute error and PSNR over RGB.

use image::DynamicImage;

/// The mean of `f` over every pair of corresponding RGB channel values. Sizes must match.
fn mean_over_channels(a: &DynamicImage, b: &DynamicImage, f: impl Fn(u8, u8) -> f64) -> f64 {
    let (a, b) = (a.to_rgb8(), b.to_rgb8());
    assert_eq!(
        a.dimensions(),
        b.dimensions(),
        "compared pictures differ in size"
    );
    let sum: f64 = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| f(*x, *y))
        .sum();
    sum / a.as_raw().len().max(1) as f64
}

/// Mean absolute difference per RGB channel (0–255). Sizes must match.
pub fn mean_abs_error(a: &DynamicImage, b: &DynamicImage) -> f64 {
    mean_over_channels(a, b, |x, y| f64::from(x.abs_diff(y)))
}

/// Peak signal-to-noise ratio in dB over RGB (infinite for identical pictures).
pub fn psnr(a: &DynamicImage, b: &DynamicImage) -> f64 {
    let mse = mean_over_channels(a, b, |x, y| (f64::from(x) - f64::from(y)).powi(2));
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0 * 255.0 / mse).log10()
    }
}

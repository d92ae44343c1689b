//! `gravity=smart`: where a `fit=cover` crop window goes when the client leaves it to us.
//!
//! The window slides along the one axis the crop shortens and stops where the picture holds the
//! most "interest": luma edge energy (detail, subjects in focus) plus saturation (product colours
//! against plain backdrops), measured on a coarse grid so the cost stays far below the resize's.
//! A gentle pull towards the middle keeps flat pictures centred, as `center` would.

use image::DynamicImage;

use crate::geometry::SourceCrop;

/// Samples per axis the analysis looks at, at most.
const GRID: u32 = 256;
/// How much a window at the very edge is discounted against one in the middle.
const CENTRE_PULL: f64 = 0.1;

/// The crop moved along its free axis to the most interesting place in `image`.
pub fn place(image: &DynamicImage, crop: SourceCrop) -> SourceCrop {
    let (w, h) = (image.width(), image.height());
    let slide_x = crop.width + 0.5 < f64::from(w);
    let slide_y = crop.height + 0.5 < f64::from(h);
    if slide_x == slide_y || w < 3 || h < 3 {
        return crop;
    }
    let step = (w.max(h) / GRID).max(1);
    let profile = interest_profile(image, step, slide_x);
    let (extent, window) = if slide_x {
        (f64::from(w), crop.width)
    } else {
        (f64::from(h), crop.height)
    };
    let cells = profile.len();
    let span = ((window / f64::from(step)).round() as usize).clamp(1, cells);
    let mut prefix = vec![0.0; cells + 1];
    for (i, v) in profile.iter().enumerate() {
        prefix[i + 1] = prefix[i] + v;
    }
    let positions = cells - span;
    let score = |start: usize| {
        let sum = prefix[start + span] - prefix[start];
        let off_centre = if positions == 0 {
            0.0
        } else {
            (start as f64 / positions as f64 - 0.5).abs() * 2.0
        };
        sum * (1.0 - CENTRE_PULL * off_centre)
    };
    let centre = positions / 2;
    let mut best = (centre, score(centre));
    for start in 0..=positions {
        let s = score(start);
        if s > best.1 {
            best = (start, s);
        }
    }
    if best.0 == centre {
        return crop;
    }
    let best = best.0;
    let start = (best as f64 * f64::from(step)).clamp(0.0, extent - window);
    if slide_x {
        SourceCrop {
            left: start,
            ..crop
        }
    } else {
        SourceCrop { top: start, ..crop }
    }
}

/// Interest summed across the fixed axis, one value per grid cell along the sliding axis.
fn interest_profile(image: &DynamicImage, step: u32, along_x: bool) -> Vec<f64> {
    let (w, h) = (image.width(), image.height());
    let channels = usize::from(image.color().channel_count());
    let bytes = image.as_bytes();
    let stride = w as usize * channels;
    let sample = |x: u32, y: u32| -> (f64, f64) {
        let i = y as usize * stride + x as usize * channels;
        let px = bytes.get(i..i + 3).unwrap_or(&[0, 0, 0]);
        let (r, g, b) = (f64::from(px[0]), f64::from(px[1]), f64::from(px[2]));
        let luma = 0.299 * r + 0.587 * g + 0.114 * b;
        let sat = f64::from(px.iter().max().unwrap_or(&0) - px.iter().min().unwrap_or(&0));
        (luma, sat)
    };
    let cols = (w - 1) / step;
    let rows = (h - 1) / step;
    let mut profile = vec![0.0; if along_x { cols } else { rows } as usize];
    for gy in 0..rows {
        for gx in 0..cols {
            let (x, y) = (gx * step, gy * step);
            let (l, s) = sample(x, y);
            let (lr, _) = sample(x + step, y);
            let (ld, _) = sample(x, y + step);
            let interest = (l - lr).abs() + (l - ld).abs() + 0.25 * s;
            let cell = if along_x { gx } else { gy };
            profile[cell as usize] += interest;
        }
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage};

    /// A flat grey picture with a busy checkerboard in one region.
    fn busy_at(w: u32, h: u32, region: (u32, u32, u32, u32)) -> DynamicImage {
        let (x0, y0, x1, y1) = region;
        DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
            let inside = (x0..x1).contains(&x) && (y0..y1).contains(&y);
            if inside && (x / 4 + y / 4) % 2 == 0 {
                Rgb([250, 30, 30])
            } else if inside {
                Rgb([10, 10, 10])
            } else {
                Rgb([128, 128, 128])
            }
        }))
    }

    fn centred(w: f64, h: f64, cw: f64, ch: f64) -> SourceCrop {
        SourceCrop {
            left: (w - cw) / 2.0,
            top: (h - ch) / 2.0,
            width: cw,
            height: ch,
        }
    }

    #[test]
    fn the_window_moves_to_the_detail() {
        let img = busy_at(900, 300, (700, 50, 880, 250));
        let placed = place(&img, centred(900.0, 300.0, 300.0, 300.0));
        assert!(placed.left >= 580.0 && placed.left <= 600.0, "{placed:?}");
        assert_eq!(placed.top, 0.0);

        let tall = busy_at(200, 1000, (20, 30, 180, 150));
        let placed = place(&tall, centred(200.0, 1000.0, 200.0, 200.0));
        assert!(placed.top <= 30.0, "{placed:?}");
    }

    #[test]
    fn a_flat_picture_stays_centred() {
        let img = busy_at(900, 300, (0, 0, 0, 0));
        let crop = centred(900.0, 300.0, 300.0, 300.0);
        assert_eq!(place(&img, crop), crop);
    }
}

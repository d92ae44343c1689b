//! `trim`: the borders of one colour around a picture, found on its decode. A border is every
//! full row or column, from an edge inwards, whose pixels are all within the threshold of the
//! border colour (`trim_color`, else the top-left pixel's): each channel, alpha included,
//! differs by at most `threshold` percent of 255.

use image::{DynamicImage, GenericImageView};

use crate::spec::Rgb;

/// The picture inside its borders, as left, top, width and height, in its own pixels; `None`
/// when there is no border, or nothing but border (then nothing is trimmed).
pub(crate) fn bounds(
    image: &DynamicImage,
    threshold: u8,
    colour: Option<Rgb>,
) -> Option<(u32, u32, u32, u32)> {
    let (w, h) = image.dimensions();
    if w == 0 || h == 0 {
        return None;
    }
    let reference = match colour {
        Some(Rgb([r, g, b])) => [r, g, b, 255],
        None => image.get_pixel(0, 0).0,
    };
    let tolerance = (u32::from(threshold.min(100)) * 255 / 100) as u8;
    let border = |x: u32, y: u32| {
        let p = image.get_pixel(x, y).0;
        p.iter()
            .zip(reference)
            .all(|(a, b)| a.abs_diff(b) <= tolerance)
    };
    let row = |y: u32| (0..w).all(|x| border(x, y));
    let column = |x: u32, top: u32, bottom: u32| (top..bottom).all(|y| border(x, y));
    let top = (0..h).find(|&y| !row(y))?;
    let bottom = (top..h).rev().find(|&y| !row(y)).map_or(h, |y| y + 1);
    let left = (0..w).find(|&x| !column(x, top, bottom)).unwrap_or(0);
    let right = (left..w)
        .rev()
        .find(|&x| !column(x, top, bottom))
        .map_or(w, |x| x + 1);
    let inside = (left, top, right - left, bottom - top);
    (inside != (0, 0, w, h)).then_some(inside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgba, RgbaImage};

    /// A 100 × 80 white picture with a red 30 × 20 block at (10, 40).
    fn framed() -> DynamicImage {
        DynamicImage::ImageRgba8(RgbaImage::from_fn(100, 80, |x, y| {
            if (10..40).contains(&x) && (40..60).contains(&y) {
                Rgba([200, 0, 0, 255])
            } else {
                Rgba([250, 250, 250, 255])
            }
        }))
    }

    #[test]
    fn borders_of_the_corner_colour_go() {
        assert_eq!(bounds(&framed(), 0, None), Some((10, 40, 30, 20)));
        // Within the threshold the border is still border; the block is far from it.
        assert_eq!(bounds(&framed(), 10, None), Some((10, 40, 30, 20)));
        // A threshold that takes the block in takes everything: nothing is trimmed.
        assert_eq!(bounds(&framed(), 100, None), None);
    }

    #[test]
    fn a_named_colour_that_borders_nothing_trims_nothing() {
        assert_eq!(bounds(&framed(), 0, Some(Rgb([0, 0, 255]))), None);
        assert_eq!(
            bounds(&framed(), 2, Some(Rgb([255, 255, 255]))),
            Some((10, 40, 30, 20))
        );
    }
}

//! Drawing a watermark on an output: its overlay (an original the service attached to the
//! run) decoded under the run's limits, brought to its share of the output's width (a
//! drawing, SVG, is drawn at that size), faded by its opacity and blended over the output at
//! its position and margin. An animation's frames share one prepared overlay ([`Prepared`]).

use image::{imageops, DynamicImage, RgbaImage};

use crate::decode::{open, Limits};
use crate::error::ProcessError;
use crate::spec::{Gravity, Watermark};

/// An overlay made ready for one output size.
pub(crate) struct Prepared {
    output: (u32, u32),
    overlay: RgbaImage,
    at: (i64, i64),
}

fn missing(what: &str) -> ProcessError {
    ProcessError::Undecodable(format!("watermark: {what}"))
}

/// `image` with the watermark drawn on it; `prepared` keeps the overlay for the next picture
/// of the same size (an animation's frames).
pub(crate) fn stamp(
    image: DynamicImage,
    watermark: &Watermark,
    limits: &Limits,
    prepared: &mut Option<Prepared>,
) -> Result<DynamicImage, ProcessError> {
    let output = (image.width(), image.height());
    let ready = match prepared.take() {
        Some(p) if p.output == output => p,
        _ => prepare(watermark, output, limits)?,
    };
    let had_alpha = image.color().has_alpha();
    let mut canvas = image.into_rgba8();
    imageops::overlay(&mut canvas, &ready.overlay, ready.at.0, ready.at.1);
    *prepared = Some(ready);
    let stamped = DynamicImage::ImageRgba8(canvas);
    Ok(if had_alpha {
        stamped
    } else {
        DynamicImage::ImageRgb8(stamped.into_rgb8())
    })
}

/// The overlay at its size for `output`, faded, and where it goes.
fn prepare(
    watermark: &Watermark,
    output: (u32, u32),
    limits: &Limits,
) -> Result<Prepared, ProcessError> {
    let bytes = watermark
        .source
        .bytes
        .as_ref()
        .ok_or_else(|| missing("its overlay was not attached to the run"))?;
    let source = open(bytes, limits)?;
    let (ow, oh) = source.upright_size();
    let margin = watermark.margin.unwrap_or(0);
    let scale = watermark.scale.map_or(1.0, |s| s.as_f64());
    // Its share of the width, kept within the height (a tall overlay on a wide output).
    let room = (
        output.0.saturating_sub(2 * margin).max(1),
        output.1.saturating_sub(2 * margin).max(1),
    );
    let mut width = (f64::from(output.0) * scale).round().max(1.0);
    let mut height = width * f64::from(oh) / f64::from(ow.max(1));
    let fit = (f64::from(room.0) / width)
        .min(f64::from(room.1) / height)
        .min(1.0);
    width = (width * fit).round().max(1.0);
    height = (height * fit).round().max(1.0);
    let size = (width as u32, height as u32);
    let mut overlay = if source.info.format.is_vector() {
        source.render(limits, size)?.into_rgba8()
    } else {
        let decoded = source.decode(limits, 1)?.into_rgba8();
        imageops::resize(&decoded, size.0, size.1, imageops::FilterType::Lanczos3)
    };
    let opacity = watermark.opacity.map_or(1.0, |o| o.as_f64());
    if opacity < 1.0 {
        for pixel in overlay.pixels_mut() {
            pixel.0[3] = (f64::from(pixel.0[3]) * opacity).round() as u8;
        }
    }
    let at = place(
        watermark.position.unwrap_or(Gravity::SouthEast),
        output,
        size,
        margin,
    );
    Ok(Prepared {
        output,
        overlay,
        at,
    })
}

/// The top-left corner of an overlay of `size` at `position` on `output`, `margin` from the
/// edges it sits by.
fn place(position: Gravity, output: (u32, u32), size: (u32, u32), margin: u32) -> (i64, i64) {
    let (w, h) = (i64::from(output.0), i64::from(output.1));
    let (ow, oh, m) = (i64::from(size.0), i64::from(size.1), i64::from(margin));
    // By the gravity's anchor, so that a new gravity needs no arm here: each axis sits at
    // its low edge (0), its middle, or its high edge (1), `margin` in from an edge.
    let (ax, ay) = position.anchor();
    let along = |anchor: f64, room: i64| match anchor {
        a if a <= 0.0 => m,
        a if a >= 1.0 => room - m,
        _ => room / 2,
    };
    let (x, y) = (along(ax, w - ow), along(ay, h - oh));
    (x.max(0), y.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlays_sit_by_their_edges_with_their_margin() {
        let out = (400, 300);
        let size = (100, 50);
        assert_eq!(place(Gravity::SouthEast, out, size, 10), (290, 240));
        assert_eq!(place(Gravity::NorthWest, out, size, 10), (10, 10));
        assert_eq!(place(Gravity::Center, out, size, 10), (150, 125));
        assert_eq!(place(Gravity::South, out, size, 0), (150, 250));
        // Larger than the output: pinned at the corner, never placed off it.
        assert_eq!(place(Gravity::SouthEast, (50, 20), size, 10), (0, 0));
    }
}

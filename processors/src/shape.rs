//! The shaping sequence, written once: rotate, place a smart crop, apply the fit plan (crop,
//! resize, pad), blur, sharpen, watermark. A still runs it on its decode; an animation on each
//! frame. A new option that changes pixels goes here, and both get it.

use std::sync::Arc;

use image::DynamicImage;

use crate::decode::Limits;
use crate::error::ProcessError;
use crate::geometry::{self, Plan, SourceCrop};
use crate::spec::{Gravity, Placed, ResolvedSpec};
use crate::{ops, smart, watermark};

/// What pictures that share one shaping keep from the first: an animation places its smart
/// crop and finds its trimmed borders on its first frame, and keeps both (a crop that moved,
/// or a size that changed, between frames would break the picture). A still keeps its own.
#[derive(Default)]
pub(crate) struct Kept {
    /// Where the smart crop was placed; `None` until placed.
    smart: Option<Option<SourceCrop>>,
    /// The plan once the borders are trimmed, for the rotated source; `None` until found.
    trimmed: Option<Plan>,
    /// The watermark's overlay, prepared for the output's size; `None` until drawn once.
    watermark: Option<watermark::Prepared>,
}

/// Shapes `image`, upright and at the scale it was decoded, as `spec` says. `plan` was made
/// for the upright source turned by `rotate` (`rotated`, its size then) and is rescaled to the
/// picture here. `kept` holds what pictures that share the shaping share (a still passes its
/// own).
pub(crate) fn shape(
    image: Arc<DynamicImage>,
    spec: &ResolvedSpec,
    plan: &Plan,
    rotated: (u32, u32),
    limits: &Limits,
    kept: &mut Kept,
) -> Result<DynamicImage, ProcessError> {
    let image = match spec.shape.rotate {
        0 => image,
        degrees => Arc::new(ops::rotate(&image, degrees)),
    };
    let plan = match spec.shape.trim {
        None => *plan,
        Some(threshold) => *kept
            .trimmed
            .get_or_insert_with(|| trimmed(&image, rotated, spec, threshold)),
    };
    let mut plan = plan.rescaled(rotated, (image.width(), image.height()));
    if spec.shape.gravity == Gravity::Smart {
        plan.crop = *kept
            .smart
            .get_or_insert_with(|| plan.crop.map(|c| smart::place(&image, c)));
    }
    let mut image = ops::apply_plan(image, &plan, spec.shape.background)?;
    if let Some(sigma) = spec.shape.blur {
        image = ops::blur(image, sigma.as_f64());
    }
    if let Some(sigma) = spec.shape.sharpen {
        image = ops::sharpen(image, sigma.as_f64());
    }
    if let Some(mark) = &spec.shape.watermark {
        image = watermark::stamp(image, mark, limits, &mut kept.watermark)?;
    }
    Ok(image)
}

/// The plan for what is left of `image` (the rotated source at its decoded scale) once its
/// borders are trimmed, in the rotated source's coordinates.
fn trimmed(image: &DynamicImage, rotated: (u32, u32), spec: &ResolvedSpec, threshold: u8) -> Plan {
    let Some((left, top, width, height)) =
        crate::trim::bounds(image, threshold, spec.shape.trim_color)
    else {
        return geometry::plan(rotated, spec);
    };
    let fx = f64::from(rotated.0) / f64::from(image.width().max(1));
    let fy = f64::from(rotated.1) / f64::from(image.height().max(1));
    let region = Placed {
        left: f64::from(left) * fx,
        top: f64::from(top) * fy,
        width: f64::from(width) * fx,
        height: f64::from(height) * fy,
    };
    geometry::plan_within(rotated, region, spec)
}

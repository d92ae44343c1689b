//! The shaping sequence, written once: rotate, place a smart crop, apply the fit plan (crop,
//! resize, pad), blur, sharpen. A still runs it on its decode; an animation on each frame. A
//! new option that changes pixels goes here, and both get it.

use std::sync::Arc;

use image::DynamicImage;

use crate::error::ProcessError;
use crate::geometry::{Plan, SourceCrop};
use crate::spec::{Gravity, ResolvedSpec};
use crate::{ops, smart};

/// Where a smart crop was placed, for pictures that share one: an animation places it on its
/// first frame and keeps it (a crop that moved between frames would make the picture jump).
/// `None` until placed.
pub(crate) type Placed = Option<Option<SourceCrop>>;

/// Shapes `image`, upright and at the scale it was decoded, as `spec` says. `plan` was made
/// for the upright source turned by `rotate` (`rotated`, its size then) and is rescaled to the
/// picture here. `placed` holds the smart crop across pictures that share it (a still passes
/// its own `None`).
pub(crate) fn shape(
    image: Arc<DynamicImage>,
    spec: &ResolvedSpec,
    plan: &Plan,
    rotated: (u32, u32),
    placed: &mut Placed,
) -> Result<DynamicImage, ProcessError> {
    let image = match spec.shape.rotate {
        0 => image,
        degrees => Arc::new(ops::rotate(&image, degrees)),
    };
    let mut plan = plan.rescaled(rotated, (image.width(), image.height()));
    if spec.shape.gravity == Gravity::Smart {
        plan.crop = *placed.get_or_insert_with(|| plan.crop.map(|c| smart::place(&image, c)));
    }
    let mut image = ops::apply_plan(image, &plan, spec.shape.background)?;
    if let Some(sigma) = spec.shape.blur {
        image = ops::blur(image, sigma.as_f64());
    }
    if let Some(sigma) = spec.shape.sharpen {
        image = ops::sharpen(image, sigma.as_f64());
    }
    Ok(image)
}

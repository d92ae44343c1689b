//! Where every output pixel comes from: the fit rules turned into one resize plan.
//!
//! Kept apart from the pixel work so the rules (which box, whether to upscale, where the crop
//! and the padding go) are plain arithmetic with plain tests.

use crate::spec::{focus_of_size, window_start, Fit, Gravity, Placed, ResolvedSpec};

/// A region of the source, in source pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourceCrop {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
}

/// What to do with an upright source of a given size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// The part of the source that is kept (`None` = all of it).
    pub crop: Option<SourceCrop>,
    /// Size the kept part is resized to.
    pub resize_to: (u32, u32),
    /// Final canvas and where the resized image sits on it (`fit=pad`).
    pub pad: Option<Padding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    pub canvas: (u32, u32),
    pub offset: (u32, u32),
}

impl Plan {
    pub fn output_size(&self) -> (u32, u32) {
        self.pad.map_or(self.resize_to, |p| p.canvas)
    }

    /// How many source pixels go into one output pixel, along the less-reduced axis.
    pub fn reduction(&self, source: (u32, u32)) -> f64 {
        let (sw, sh) = self
            .crop
            .map_or((f64::from(source.0), f64::from(source.1)), |c| {
                (c.width, c.height)
            });
        (sw / f64::from(self.resize_to.0)).min(sh / f64::from(self.resize_to.1))
    }

    /// The same plan for the source decoded at another size (shrink-on-load): the crop moves
    /// into the smaller picture's coordinates, the output stays.
    pub fn rescaled(&self, from: (u32, u32), to: (u32, u32)) -> Plan {
        if from == to {
            return *self;
        }
        let (fx, fy) = (
            f64::from(to.0) / f64::from(from.0),
            f64::from(to.1) / f64::from(from.1),
        );
        Plan {
            crop: self.crop.map(|c| SourceCrop {
                left: c.left * fx,
                top: c.top * fy,
                width: (c.width * fx).min(f64::from(to.0)),
                height: (c.height * fy).min(f64::from(to.1)),
            }),
            ..*self
        }
    }
}

/// The DCT scale denominator (1, 2, 4 or 8) for a plan's reduction, keeping at least twice the
/// output's resolution for the final Lanczos pass, as libvips does.
pub fn shrink_denominator(reduction: f64) -> u32 {
    [8, 4, 2]
        .into_iter()
        .find(|d| reduction >= 2.0 * f64::from(*d))
        .unwrap_or(1)
}

fn round_px(v: f64) -> u32 {
    (v.round() as u32).max(1)
}

/// The plan for a source of `(sw, sh)` upright pixels: for its `crop` region, if it has one
/// (the plan's crop then lies within the region, in the source's coordinates).
pub fn plan(source: (u32, u32), spec: &ResolvedSpec) -> Plan {
    match spec.shape.crop {
        None => plan_whole(source, spec),
        Some(region) => plan_within(source, region.within(source, spec.shape.crop_gravity), spec),
    }
}

/// The plan for the part `r` of a source of `(sw, sh)` pixels (a crop's region, or what
/// trimming left), in the source's coordinates.
pub fn plan_within(source: (u32, u32), r: Placed, spec: &ResolvedSpec) -> Plan {
    let size = (
        (r.width.round() as u32).max(1),
        (r.height.round() as u32).max(1),
    );
    if size == source {
        return plan_whole(source, spec);
    }
    // A focal point is said of the whole source: here, of the region.
    let gravity = match spec.shape.gravity {
        Gravity::FocusPx { x, y } => Gravity::FocusPx {
            x: (f64::from(x) - r.left).max(0.0) as u32,
            y: (f64::from(y) - r.top).max(0.0) as u32,
        },
        Gravity::Focus { x, y } => {
            let into = |v: u16, start: f64, len: f64, whole: u32| {
                let at = f64::from(v) / 10_000.0 * f64::from(whole);
                (((at - start) / len.max(1.0)) * 10_000.0).clamp(0.0, 10_000.0) as u16
            };
            Gravity::Focus {
                x: into(x, r.left, r.width, source.0),
                y: into(y, r.top, r.height, source.1),
            }
        }
        g => g,
    };
    let inner = plan_box(size, spec, gravity);
    let crop = match inner.crop {
        Some(c) => SourceCrop {
            left: r.left + c.left,
            top: r.top + c.top,
            ..c
        },
        None => SourceCrop {
            left: r.left,
            top: r.top,
            width: r.width,
            height: r.height,
        },
    };
    Plan {
        crop: Some(crop),
        ..inner
    }
}

/// The plan for the whole of a source of `(sw, sh)` pixels.
fn plan_whole(source: (u32, u32), spec: &ResolvedSpec) -> Plan {
    plan_box(source, spec, spec.shape.gravity)
}

/// The plan for a source of `(sw, sh)` pixels, a window of it placed by `gravity`.
fn plan_box(source: (u32, u32), spec: &ResolvedSpec, gravity: Gravity) -> Plan {
    let spec = &spec.shape;
    let gravity = focus_of_size(gravity, source);
    let (sw, sh) = (f64::from(source.0), f64::from(source.1));
    let whole = |w: u32, h: u32| Plan {
        crop: None,
        resize_to: (w, h),
        pad: None,
    };
    let (bw, bh) = match (spec.width, spec.height) {
        (None, None) => return whole(source.0, source.1),
        (Some(w), None) => (f64::from(w), sh * f64::from(w) / sw),
        (None, Some(h)) => (sw * f64::from(h) / sh, f64::from(h)),
        (Some(w), Some(h)) => (f64::from(w), f64::from(h)),
    };
    let no_upscale = |scale: f64| if spec.enlarge { scale } else { scale.min(1.0) };
    // Auto: crop when the source and the box are turned the same way (both landscape, or
    // both portrait), else contain (imgproxy's `auto`).
    let fit = match spec.fit {
        Fit::Auto if (sw >= sh) == (bw >= bh) => Fit::Crop,
        Fit::Auto => Fit::Contain,
        fit => fit,
    };
    match fit {
        Fit::Auto => unreachable!("resolved just above"),
        Fit::Contain | Fit::Pad => {
            let scale = no_upscale((bw / sw).min(bh / sh));
            let resize_to = (round_px(sw * scale), round_px(sh * scale));
            if fit == Fit::Contain {
                return whole(resize_to.0, resize_to.1);
            }
            let canvas = (round_px(bw), round_px(bh));
            let (ax, ay) = gravity.anchor();
            let offset = (
                (f64::from(canvas.0.saturating_sub(resize_to.0)) * ax).round() as u32,
                (f64::from(canvas.1.saturating_sub(resize_to.1)) * ay).round() as u32,
            );
            Plan {
                crop: None,
                resize_to,
                pad: Some(Padding { canvas, offset }),
            }
        }
        Fit::Fill => {
            // Without enlarge the box shrinks, keeping its shape, until no axis upscales.
            let over = if spec.enlarge {
                1.0
            } else {
                (bw / sw).max(bh / sh).max(1.0)
            };
            whole(round_px(bw / over), round_px(bh / over))
        }
        Fit::Cover | Fit::Crop => {
            let out = if fit == Fit::Crop {
                // The source scaled to cover the box (never up without enlarge), the box
                // cut to it side by side.
                let scale = no_upscale((bw / sw).max(bh / sh));
                (round_px(bw.min(sw * scale)), round_px(bh.min(sh * scale)))
            } else {
                // Without enlarge the box shrinks, keeping its shape, until nothing upscales.
                let over = if spec.enlarge {
                    1.0
                } else {
                    (bw / sw).max(bh / sh).max(1.0)
                };
                (round_px(bw / over), round_px(bh / over))
            };
            let scale = (f64::from(out.0) / sw).max(f64::from(out.1) / sh);
            let cw = (f64::from(out.0) / scale).min(sw);
            let ch = (f64::from(out.1) / scale).min(sh);
            let (dx, dy) = spec.gravity_offset;
            let crop = SourceCrop {
                left: window_start(gravity, 0, sw, cw, dx, scale),
                top: window_start(gravity, 1, sh, ch, dy, scale),
                width: cw,
                height: ch,
            };
            let crop = (cw < sw || ch < sh).then_some(crop);
            Plan {
                crop,
                resize_to: out,
                pad: None,
            }
        }
    }
}

/// The upright source size after `rotate`, the fit plan for it, and the decode denominator:
/// with shrink-on-load (JPEG), 1/2, 1/4 or 1/8 when the output is that much smaller.
pub(crate) fn layout(
    upright: (u32, u32),
    spec: &ResolvedSpec,
    can_shrink: bool,
) -> ((u32, u32), Plan, u32) {
    let (w, h) = upright;
    let rotated = if spec.shape.rotate % 180 == 90 {
        (h, w)
    } else {
        (w, h)
    };
    let plan = plan(rotated, spec);
    let denominator = if can_shrink && !spec.decodes_whole() {
        shrink_denominator(plan.reduction(rotated))
    } else {
        1
    };
    (rotated, plan, denominator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{OutputFormat, Spec};

    fn p(src: (u32, u32), q: &str) -> Plan {
        let spec = Spec::parse(q)
            .unwrap()
            .resolve(Some(OutputFormat::Png), false, None);
        plan(src, &spec)
    }

    #[test]
    fn contain_keeps_aspect_and_does_not_upscale() {
        assert_eq!(p((1000, 500), "w=400").output_size(), (400, 200));
        assert_eq!(p((1000, 500), "h=100").output_size(), (200, 100));
        assert_eq!(p((1000, 500), "w=400&h=400").output_size(), (400, 200));
        assert_eq!(p((100, 50), "w=400").output_size(), (100, 50));
        assert_eq!(p((100, 50), "w=400&enlarge=1").output_size(), (400, 200));
        assert_eq!(p((100, 50), "").output_size(), (100, 50));
        assert_eq!(p((1000, 1), "w=10").output_size(), (10, 1), "never zero");
    }

    #[test]
    fn a_cover_window_sits_on_its_focal_point_or_moves_by_its_offset() {
        let left = |src, q: &str| p(src, q).crop.map(|c| (c.left, c.top, c.width, c.height));
        // 1000×500 into 100×100: a 500×500 window, centred on 900 px as far as it goes.
        let fp = "w=100&h=100&fit=cover&gravity=fp:0.9:0.5";
        assert_eq!(left((1000, 500), fp), Some((500.0, 0.0, 500.0, 500.0)));
        let px = "w=100&h=100&fit=cover&gravity=fp:400px:0px";
        assert_eq!(left((1000, 500), px), Some((150.0, 0.0, 500.0, 500.0)));
        // West, 10 output px in at a fifth of the scale: 50 source px from the left edge.
        let west = "w=100&h=100&fit=cover&gravity=west&gravity_offset=10,0";
        assert_eq!(left((1000, 500), west), Some((50.0, 0.0, 500.0, 500.0)));
        // East moves away from its edge; dpr=2 doubles the offset as it doubles the box.
        let east = "w=100&h=100&fit=cover&gravity=east&gravity_offset=10,0&dpr=2";
        assert_eq!(left((1000, 500), east), Some((450.0, 0.0, 500.0, 500.0)));
        // In a crop's region the focal point is still the whole source's.
        let region = "crop=500,500,500,0&w=100&h=50&fit=cover&gravity=fp:0.6:0.5";
        assert_eq!(
            left((1000, 500), region),
            Some((500.0, 125.0, 500.0, 250.0))
        );
    }

    #[test]
    fn shrink_on_load_keeps_a_two_times_margin() {
        // 12 Mpx to 400 px wide: 1/4 scale (1000 px), not 1/8 (500 px < 2 x 400).
        let plan = p((4000, 3000), "w=400");
        assert_eq!(shrink_denominator(plan.reduction((4000, 3000))), 4);
        assert_eq!(
            shrink_denominator(p((4000, 3000), "w=2000").reduction((4000, 3000))),
            1
        );
        assert_eq!(
            shrink_denominator(p((4000, 3000), "w=100").reduction((4000, 3000))),
            8
        );
        let cover = p((4000, 3000), "w=400&h=400&fit=cover");
        let scaled = cover.rescaled((4000, 3000), (1000, 750));
        let c = scaled.crop.unwrap();
        assert_eq!((c.left, c.width, c.height), (125.0, 750.0, 750.0));
        assert_eq!(scaled.resize_to, (400, 400));
    }

    #[test]
    fn dpr_multiplies_the_box() {
        assert_eq!(p((1000, 500), "w=200&dpr=2").output_size(), (400, 200));
    }

    #[test]
    fn cover_crops_by_gravity() {
        let plan = p((1000, 500), "w=100&h=100&fit=cover");
        assert_eq!(plan.resize_to, (100, 100));
        let c = plan.crop.unwrap();
        assert_eq!(
            (c.left, c.top, c.width, c.height),
            (250.0, 0.0, 500.0, 500.0)
        );
        let c = p((1000, 500), "w=100&h=100&fit=cover&gravity=east")
            .crop
            .unwrap();
        assert_eq!(c.left, 500.0);
        let c = p((500, 1000), "w=100&h=100&fit=cover&gravity=north")
            .crop
            .unwrap();
        assert_eq!((c.top, c.height), (0.0, 500.0));
    }

    #[test]
    fn cover_without_enlarge_shrinks_the_box() {
        let plan = p((200, 100), "w=400&h=400&fit=cover");
        assert_eq!(plan.resize_to, (100, 100));
        assert_eq!(plan.crop.unwrap().width, 100.0);
    }

    #[test]
    fn crop_without_enlarge_cuts_the_box_to_the_source() {
        // Wider than the box, shorter: nothing upscales, the height is the source's.
        let plan = p((500, 200), "w=300&h=400&fit=crop");
        assert_eq!(plan.resize_to, (300, 200));
        let c = plan.crop.unwrap();
        assert_eq!((c.left, c.width, c.height), (100.0, 300.0, 200.0));
        // A source larger than the box both ways: as cover.
        let (crop, cover) = (
            p((1000, 500), "w=100&h=100&fit=crop"),
            p((1000, 500), "w=100&h=100&fit=cover"),
        );
        assert_eq!(crop.resize_to, cover.resize_to);
        assert_eq!(crop.crop, cover.crop);
        // Smaller both ways: the source as it is.
        let small = p((80, 60), "w=300&h=400&fit=crop");
        assert_eq!((small.resize_to, small.crop), ((80, 60), None));
    }

    /// The crop a plan makes, as left, top, width, height.
    fn region(src: (u32, u32), q: &str) -> Option<(f64, f64, f64, f64)> {
        p(src, q).crop.map(|c| (c.left, c.top, c.width, c.height))
    }

    #[test]
    fn crop_cuts_its_region_first() {
        // 1000 × 500: the middle 400 × 300, then 200 wide.
        assert_eq!(p((1000, 500), "crop=400,300&w=200").resize_to, (200, 150));
        let cases = [
            ("crop=400,300&w=200", (300.0, 100.0, 400.0, 300.0)),
            // By its corner, half the width, the whole height below the corner.
            ("crop=0.5,0,10,20", (10.0, 20.0, 500.0, 480.0)),
            // Cover's crop lies inside the region.
            (
                "crop=400,400,0,0&w=100&h=50&fit=cover",
                (0.0, 100.0, 400.0, 200.0),
            ),
            // A region larger than the source is cut to it, and sits by its gravity.
            (
                "crop=2000,100&crop_gravity=south",
                (0.0, 400.0, 1000.0, 100.0),
            ),
        ];
        for (q, expected) in cases {
            assert_eq!(region((1000, 500), q), Some(expected), "{q}");
        }
        // The whole source is no crop at all.
        assert_eq!(region((1000, 500), "crop=1000,500&w=100"), None);
    }

    #[test]
    fn auto_crops_when_the_source_is_turned_as_the_box_and_else_contains() {
        let landscape = p((1000, 500), "w=300&h=200&fit=auto");
        assert_eq!(landscape.output_size(), (300, 200));
        assert!(landscape.crop.is_some());
        let portrait = p((500, 1000), "w=300&h=200&fit=auto");
        assert_eq!((portrait.output_size(), portrait.crop), ((100, 200), None));
    }

    #[test]
    fn fill_stretches() {
        assert_eq!(
            p((1000, 500), "w=300&h=300&fit=fill").output_size(),
            (300, 300)
        );
        assert_eq!(
            p((100, 100), "w=400&h=200&fit=fill").output_size(),
            (100, 50)
        );
    }

    #[test]
    fn pad_reaches_the_exact_box() {
        let plan = p((1000, 500), "w=400&h=400&fit=pad");
        assert_eq!(plan.resize_to, (400, 200));
        assert_eq!(
            plan.pad,
            Some(Padding {
                canvas: (400, 400),
                offset: (0, 100)
            })
        );
        let plan = p((1000, 500), "w=400&h=400&fit=pad&gravity=south");
        assert_eq!(plan.pad.unwrap().offset, (0, 200));
        let plan = p((100, 50), "w=400&h=400&fit=pad");
        assert_eq!(plan.resize_to, (100, 50));
        assert_eq!(plan.pad.unwrap().canvas, (400, 400));
    }
}

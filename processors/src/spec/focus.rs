//! Where a cut window goes when the client says more than a compass point: a focal point
//! (`gravity=fp:X:Y`, fractions of the oriented source, as imgproxy's `gravity:fp`, Cloudflare's
//! `gravity=0.5x0.3` and imgix's `fp-x`/`fp-y` say it; or `fp:Xpx:Ypx`, its pixels, as
//! thumbor's `focal()` says it) and offsets from a compass gravity
//! (`gravity_offset=X,Y`, pixels of the output, as imgproxy's `gravity:no:10:20`). Read here,
//! written back in the canonical form here, and placed here: the geometry asks
//! [`window_start`] where a `cover` or `crop` window begins.

use super::{Gravity, SpecError, MAX_DIMENSION};

/// Ten-thousandths in one: a focal point's unit.
const WHOLE: f64 = 10_000.0;

/// A fraction from 0 to 1, to four places, in ten-thousandths.
fn fraction(option: &str, text: &str) -> Result<u16, SpecError> {
    let bad = || {
        SpecError::new(
            option,
            "a focal point is fp:X:Y, each a fraction from 0 to 1",
        )
    };
    let v: f64 = text.parse().map_err(|_| bad())?;
    if !v.is_finite() || !(0.0..=1.0).contains(&v) {
        return Err(bad());
    }
    Ok((v * WHOLE).round() as u16)
}

/// `fp:X:Y` as a [`Gravity::Focus`], or `None` when `value` is not a focal point.
pub(super) fn focal_point(option: &str, value: &str) -> Result<Option<Gravity>, SpecError> {
    let Some(rest) = value.strip_prefix("fp:") else {
        return Ok(None);
    };
    let Some((x, y)) = rest.split_once(':') else {
        return Err(SpecError::new(
            option,
            "a focal point is fp:X:Y, each a fraction from 0 to 1",
        ));
    };
    if let (Some(x), Some(y)) = (x.strip_suffix("px"), y.strip_suffix("px")) {
        let px = |t: &str| {
            t.parse::<u32>()
                .ok()
                .filter(|v| *v <= u32::MAX / 2)
                .ok_or_else(|| SpecError::new(option, "a focal point's pixels are whole numbers"))
        };
        return Ok(Some(Gravity::FocusPx {
            x: px(x)?,
            y: px(y)?,
        }));
    }
    Ok(Some(Gravity::Focus {
        x: fraction(option, x)?,
        y: fraction(option, y)?,
    }))
}

/// A focal point's canonical spelling (`fp:0.25:0.6`, `fp:412px:300px`); `None` for the
/// other gravities.
pub(super) fn focal_point_name(gravity: Gravity) -> Option<String> {
    let f = |v: u16| f64::from(v) / WHOLE;
    match gravity {
        Gravity::Focus { x, y } => Some(format!("fp:{}:{}", f(x), f(y))),
        Gravity::FocusPx { x, y } => Some(format!("fp:{x}px:{y}px")),
        _ => None,
    }
}

/// `gravity` for a source (or a region of it) `whole` pixels large, a focal point in pixels
/// turned into fractions of it.
pub(crate) fn of_size(gravity: Gravity, whole: (u32, u32)) -> Gravity {
    match gravity {
        Gravity::FocusPx { x, y } => {
            let f = |v: u32, side: u32| {
                (f64::from(v) / f64::from(side.max(1)) * WHOLE).clamp(0.0, WHOLE) as u16
            };
            Gravity::Focus {
                x: f(x, whole.0),
                y: f(y, whole.1),
            }
        }
        g => g,
    }
}

/// `gravity_offset=X,Y`: whole pixels of the output, each within ±[`MAX_DIMENSION`].
pub(super) fn offset(option: &str, value: &str) -> Result<(i32, i32), SpecError> {
    let bad = || {
        SpecError::new(
            option,
            format!("must be X,Y: whole pixels from -{MAX_DIMENSION} to {MAX_DIMENSION}"),
        )
    };
    let (x, y) = value.split_once(',').ok_or_else(bad)?;
    let limit = MAX_DIMENSION as i32;
    let one = |t: &str| {
        t.parse::<i32>()
            .ok()
            .filter(|v| (-limit..=limit).contains(v))
            .ok_or_else(bad)
    };
    Ok((one(x)?, one(y)?))
}

/// Where a window `window` long begins along a side `whole` long (source pixels), by
/// `gravity` along that side (`axis` 0: across, 1: down), moved by `offset` output pixels
/// (`scale`: output pixels per source pixel), never past either end.
///
/// A compass gravity anchors the window to its edge, and an offset moves it inwards from
/// that edge (away from the east or south edge, as imgproxy reads offsets; from the middle,
/// right or down). A focal point centres the window on itself as far as the side allows.
pub(crate) fn window_start(
    gravity: Gravity,
    axis: usize,
    whole: f64,
    window: f64,
    offset: i32,
    scale: f64,
) -> f64 {
    let free = (whole - window).max(0.0);
    let start = match gravity {
        Gravity::Focus { x, y } => {
            let at = f64::from(if axis == 0 { x } else { y }) / WHOLE;
            whole * at - window / 2.0
        }
        other => {
            let anchor = if axis == 0 {
                other.anchor().0
            } else {
                other.anchor().1
            };
            let moved = f64::from(offset) / scale.max(f64::MIN_POSITIVE);
            let inwards = if anchor >= 1.0 { -moved } else { moved };
            free * anchor + inwards
        }
    };
    start.clamp(0.0, free)
}

#[cfg(test)]
mod tests {
    use super::super::{OutputFormat, Spec};
    use super::*;

    #[test]
    fn focal_points_and_offsets_stay_where_they_move_a_cut_window() {
        let canonical = |q: &str| {
            let spec = Spec::parse(q).map_err(|e| e.option)?;
            Ok::<_, String>(
                spec.resolve(Some(OutputFormat::Png), false, None)
                    .canonical(),
            )
        };
        let cases = [
            (
                "w=10&h=10&fit=cover&gravity=fp:0.25:0.750",
                "fit=cover&format=png&gravity=fp:0.25:0.75&h=10&w=10",
            ),
            (
                "w=10&h=10&fit=pad&gravity=fp:0.25:0.75",
                "fit=pad&format=png&h=10&w=10",
            ),
            (
                "w=10&h=10&fit=crop&gravity=north&gravity_offset=3,-4&dpr=2",
                "fit=crop&format=png&gravity=north&gravity_offset=6,-8&h=20&w=20",
            ),
            ("w=10&h=10&gravity_offset=3,4", "format=png&h=10&w=10"),
        ];
        for (query, resolved) in cases {
            assert_eq!(canonical(query).as_deref(), Ok(resolved), "{query}");
        }
        for refused in [
            "gravity=smart&gravity_offset=1,0",
            "gravity=fp:0:0&gravity_offset=0,1",
        ] {
            assert_eq!(
                canonical(refused),
                Err("gravity_offset".to_string()),
                "{refused}"
            );
        }
    }

    #[test]
    fn an_originals_focal_point_applies_where_the_request_leaves_the_place_to_it() {
        let focused = |q: &str, focus| {
            let spec = Spec::parse(q).expect("parses");
            let resolved = spec.resolve(Some(OutputFormat::Png), false, None);
            resolved.with_focus(&spec, focus).canonical()
        };
        let fp = Some((2500, 7500));
        let cover = "w=10&h=10&fit=cover";
        let at_point = "fit=cover&format=png&gravity=fp:0.25:0.75&h=10&w=10";
        assert_eq!(focused(cover, fp), at_point);
        assert_eq!(focused(cover, None), "fit=cover&format=png&h=10&w=10");
        let said = "w=10&h=10&fit=cover&gravity=center";
        assert_eq!(focused(said, fp), "fit=cover&format=png&h=10&w=10");
        let auto = "w=10&h=10&fit=crop&gravity=auto";
        assert_eq!(
            focused(auto, fp),
            "fit=crop&format=png&gravity=fp:0.25:0.75&h=10&w=10"
        );
        assert_eq!(
            focused(auto, None),
            "fit=crop&format=png&gravity=smart&h=10&w=10"
        );
        let moved = "w=10&h=10&fit=cover&gravity_offset=0,3";
        assert_eq!(
            focused(moved, fp),
            "fit=cover&format=png&gravity_offset=0,3&h=10&w=10"
        );
        assert_eq!(focused("w=10&gravity=auto", fp), "format=png&w=10");
        // The request form (what signatures cover) is unchanged by a centre said.
        let request = |q: &str| Spec::parse(q).expect("parses").canonical();
        assert_eq!(request(said), request(cover));
        assert_eq!(request("gravity=auto&w=5"), "gravity=auto&w=5");
    }

    #[test]
    fn focal_points_read_and_write_back() {
        assert_eq!(
            focal_point("gravity", "fp:0.25:0.6"),
            Ok(Some(Gravity::Focus { x: 2500, y: 6000 }))
        );
        let name = |x, y| focal_point_name(Gravity::Focus { x, y });
        assert_eq!(name(2500, 6000).as_deref(), Some("fp:0.25:0.6"));
        assert_eq!(name(0, 10_000).as_deref(), Some("fp:0:1"));
        let px = focal_point("gravity", "fp:412px:300px");
        assert_eq!(px, Ok(Some(Gravity::FocusPx { x: 412, y: 300 })));
        let named = focal_point_name(Gravity::FocusPx { x: 412, y: 300 });
        assert_eq!(named.as_deref(), Some("fp:412px:300px"));
        assert_eq!(
            of_size(Gravity::FocusPx { x: 250, y: 3000 }, (1000, 2000)),
            Gravity::Focus { x: 2500, y: 10_000 }
        );
        assert_eq!(focal_point("gravity", "north"), Ok(None));
        for bad in [
            "fp:1.5:0",
            "fp:0.5",
            "fp:-0.1:0",
            "fp:a:b",
            "fp:NaN:0",
            "fp:inf:0",
            "fp:-1px:2px",
        ] {
            assert_eq!(
                focal_point("gravity", bad).map_err(|e| e.option),
                Err("gravity".to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn offsets_read_whole_pixels_within_the_limit() {
        assert_eq!(offset("gravity_offset", "10,-20"), Ok((10, -20)));
        for bad in ["10", "1.5,2", "9000,0", "a,b", ",", "1,2,3"] {
            assert!(offset("gravity_offset", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_window_sits_on_its_focal_point_or_its_edge_moved_inwards_never_past_the_side() {
        // (gravity, axis, offset, scale) on a 1000 px side with a 400 px window (100 px for
        // the second), and where the window starts.
        let (fp, centred) = (
            Gravity::Focus { x: 2000, y: 9000 },
            Gravity::Focus { x: 5000, y: 5000 },
        );
        let cases = [
            // Centred on 200 px: held at the left end.
            (fp, 0, 0, 1.0, 0.0),
            // Down: centred on 900 px, a 100 px window starts at 850.
            (fp, 1, 0, 1.0, 850.0),
            (centred, 0, 0, 1.0, 300.0),
            // North anchors to the top; 20 output px at half scale are 40 source px down.
            (Gravity::North, 1, 20, 0.5, 40.0),
            // South anchors to the bottom; an offset moves it up, away from the edge.
            (Gravity::South, 1, 20, 1.0, 580.0),
            // The centre moves right or down, and never past the side.
            (Gravity::Center, 0, 50, 1.0, 350.0),
            (Gravity::Center, 0, 5000, 1.0, 600.0),
            (Gravity::West, 0, -50, 1.0, 0.0),
        ];
        for (i, (gravity, axis, offset, scale, start)) in cases.into_iter().enumerate() {
            let window = if i == 1 { 100.0 } else { 400.0 };
            let got = window_start(gravity, axis, 1000.0, window, offset, scale);
            assert_eq!(got, start, "case {i}: {gravity:?}");
        }
    }
}

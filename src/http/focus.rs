//! `PUT` and `DELETE /v1/originals/<hash>/focus`: an original's focal point, set once for
//! every URL and spec of it (`pipeline/originals/focus.rs`). The body is a point
//! `{"x": 0.3, "y": 0.6}` or a region `{"left", "top", "width", "height"}`, fractions from 0
//! to 1 of the oriented source; what it may not say is refused by name.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;

use super::admin::{path_hash, removal};
use super::Service;
use crate::error::Error;
use crate::maps::Focus;
use crate::pipeline::FocusSet;
use crate::wire::{FocusAnswer, FocusSetAnswer};

/// What a client may send: a point, or a region (not both).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FocusBody {
    x: Option<f64>,
    y: Option<f64>,
    left: Option<f64>,
    top: Option<f64>,
    width: Option<f64>,
    height: Option<f64>,
}

const SHAPE: &str = "expected {\"x\", \"y\"} or {\"left\", \"top\", \"width\", \"height\"}, \
                     fractions from 0 to 1 of the oriented source";

/// A fraction in ten-thousandths, or the error naming `field`.
fn part(field: &str, v: f64) -> Result<u16, Error> {
    if !v.is_finite() || !(0.0..=1.0).contains(&v) {
        return Err(Error::invalid_option(
            field,
            "must be a fraction from 0 to 1 of the oriented source",
        ));
    }
    Ok((v * 10_000.0).round() as u16)
}

/// The focal point a body says.
fn focus_of(body: &[u8]) -> Result<Focus, Error> {
    let b: FocusBody = serde_json::from_slice(body)
        .map_err(|e| Error::invalid_option("body", format!("{SHAPE}: {e}")))?;
    match (b.x, b.y, b.left, b.top, b.width, b.height) {
        (Some(x), Some(y), None, None, None, None) => Ok(Focus {
            x: part("x", x)?,
            y: part("y", y)?,
            region: None,
        }),
        (None, None, Some(left), Some(top), Some(width), Some(height)) => {
            let [left, top, width, height] = [
                part("left", left)?,
                part("top", top)?,
                part("width", width)?,
                part("height", height)?,
            ];
            if width == 0 || height == 0 {
                return Err(Error::invalid_option("width", "a region is not empty"));
            }
            if u32::from(left) + u32::from(width) > 10_000
                || u32::from(top) + u32::from(height) > 10_000
            {
                return Err(Error::invalid_option(
                    "left",
                    "the region lies within the source",
                ));
            }
            Ok(Focus {
                x: left + width / 2,
                y: top + height / 2,
                region: Some([left, top, width, height]),
            })
        }
        _ => Err(Error::invalid_option("body", SHAPE)),
    }
}

fn answer(set: FocusSet) -> FocusSetAnswer {
    FocusSetAnswer {
        hash: set.hash.to_hex(),
        focus: set.focus.as_ref().map(FocusAnswer::from),
        variants_removed: set.variants_removed,
    }
}

/// `PUT /v1/originals/<hash>/focus`.
pub async fn put(State(service): State<Service>, Path(raw): Path<String>, body: Bytes) -> Response {
    removal(|| async {
        let hash = path_hash(&raw)?;
        let focus = focus_of(&body)?;
        Ok(answer(
            service.pipeline().set_focus(&hash, Some(focus)).await?,
        ))
    })
    .await
}

/// `DELETE /v1/originals/<hash>/focus`.
pub async fn clear(State(service): State<Service>, Path(raw): Path<String>) -> Response {
    removal(|| async {
        let hash = path_hash(&raw)?;
        Ok(answer(service.pipeline().set_focus(&hash, None).await?))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        match focus_of(body.as_bytes()) {
            Err(Error::InvalidOption { option, .. }) => option,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn a_point_or_a_region_is_read_and_anything_else_refused_by_name() {
        let point = focus_of(br#"{"x": 0.25, "y": 1}"#).expect("a point");
        assert_eq!((point.x, point.y, point.region), (2500, 10_000, None));
        let region = focus_of(br#"{"left": 0.1, "top": 0.2, "width": 0.4, "height": 0.2}"#)
            .expect("a region");
        assert_eq!((region.x, region.y), (3000, 3000));
        assert_eq!(region.region, Some([1000, 2000, 4000, 2000]));
        assert_eq!(refused(r#"{"x": 1.5, "y": 0}"#), "x");
        assert_eq!(refused(r#"{"x": 0.5}"#), "body");
        assert_eq!(refused(r#"{"x": 0.5, "y": 0.5, "left": 0}"#), "body");
        assert_eq!(refused(r#"{"x": 0.5, "y": 0.5, "z": 1}"#), "body");
        assert_eq!(refused("not json"), "body");
        assert_eq!(
            refused(r#"{"left": 0.8, "top": 0, "width": 0.4, "height": 0.2}"#),
            "left"
        );
        assert_eq!(
            refused(r#"{"left": 0, "top": 0, "width": 0, "height": 0.2}"#),
            "width"
        );
    }
}

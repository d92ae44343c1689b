//! Issue 71, focal points: `gravity=fp:X:Y` and `gravity_offset` on real pixels, and a focal
//! point set once per original (`PUT`/`DELETE /v1/originals/{hash}/focus`) that every spec
//! of it then honours unless the request says a gravity; a change removes the variants it
//! placed. Three nodes on PostgreSQL are in `cluster.rs`.

use image::{DynamicImage, ImageFormat, Rgb, RgbImage};
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{encode, error_code_of, header, json, spawn_app, TestApp};

/// 400 × 200: red on the left, green in the middle fifth, blue on the right.
pub(crate) fn three_bands() -> Vec<u8> {
    let image = RgbImage::from_fn(400, 200, |x, _| match x {
        0..160 => Rgb([230, 20, 20]),
        160..240 => Rgb([20, 200, 20]),
        _ => Rgb([20, 20, 230]),
    });
    encode(&DynamicImage::ImageRgb8(image), ImageFormat::Png)
}

/// The share of an output's pixels that are mostly red, green and blue.
pub(crate) fn bands_of(png: &[u8]) -> [f64; 3] {
    let image = image::load_from_memory(png).expect("decodes").to_rgb8();
    let mut counts = [0u32; 3];
    for p in image.pixels() {
        let strongest = (0..3).max_by_key(|&c| p.0[c]).unwrap_or(0);
        counts[strongest] += 1;
    }
    let all = f64::from(image.width() * image.height());
    counts.map(|n| f64::from(n) / all)
}

async fn bands(app: &TestApp, hash: &str, query: &str) -> ([f64; 3], String) {
    let r = app
        .get(&format!("/v1/image/{hash}?{query}&format=png"))
        .await;
    assert_eq!(r.status(), 200, "{query}");
    let etag = header(&r, "etag").unwrap_or_default().to_string();
    (bands_of(&r.bytes().await.expect("body")), etag)
}

async fn put_focus(app: &TestApp, hash: &str, body: serde_json::Value) -> reqwest::Response {
    let url = app.url(&format!("/v1/originals/{hash}/focus"));
    app.client
        .put(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request")
}

#[tokio::test]
async fn focal_points_and_offsets_place_the_window_on_real_pixels() {
    let app = spawn_app().await;
    let up = json(app.upload(three_bands()).await).await;
    let hash = up["hash"].as_str().expect("hash").to_string();
    // A 1:1 window of a 2:1 picture, 200 px wide: the middle holds the green band whole.
    let (centre, _) = bands(&app, &hash, "w=50&h=50&fit=cover").await;
    assert!(
        centre[1] > 0.35 && centre[0] > 0.15 && centre[2] > 0.15,
        "{centre:?}"
    );
    let (left, _) = bands(&app, &hash, "w=50&h=50&fit=cover&gravity=fp:0.1:0.5").await;
    assert!(left[0] > 0.75 && left[2] == 0.0, "{left:?}");
    let (px, _) = bands(&app, &hash, "w=50&h=50&fit=cover&gravity=fp:390px:20px").await;
    assert!(px[2] > 0.75 && px[0] == 0.0, "{px:?}");
    // West, moved 10 output px (40 source px) in: 40 px of red fewer.
    let (moved, _) = bands(
        &app,
        &hash,
        "w=50&h=50&fit=cover&gravity=west&gravity_offset=10,0",
    )
    .await;
    let (west, _) = bands(&app, &hash, "w=50&h=50&fit=cover&gravity=west").await;
    assert!((west[0] - 0.8).abs() < 0.03, "{west:?}");
    assert!((moved[0] - 0.6).abs() < 0.03, "{moved:?}");
    let refused = app
        .get(&format!(
            "/v1/image/{hash}?w=50&h=50&gravity=smart&gravity_offset=1,0"
        ))
        .await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code_of(refused).await, "invalid_option");
}

#[tokio::test]
async fn a_focal_point_set_once_places_every_spec_that_leaves_it_the_place() {
    let app = spawn_app().await;
    let up = json(app.upload(three_bands()).await).await;
    let hash = up["hash"].as_str().expect("hash").to_string();
    let cover = "w=50&h=50&fit=cover";
    let (before, etag_before) = bands(&app, &hash, cover).await;
    assert!(before[1] > 0.35, "{before:?}");

    let set = put_focus(&app, &hash, json!({"x": 0.1, "y": 0.5})).await;
    assert_eq!(set.status(), 200);
    let set = json(set).await;
    assert_eq!(set["focus"], json!({"x": 0.1, "y": 0.5}));
    assert_eq!(
        set["variants_removed"], 0,
        "the centred variant stays: gravity=center names it"
    );
    let (left, etag_left) = bands(&app, &hash, cover).await;
    assert!(left[0] > 0.75, "no gravity: the focal point, {left:?}");
    assert_ne!(etag_left, etag_before);
    let (auto, _) = bands(&app, &hash, "w=50&h=50&fit=crop&gravity=auto").await;
    assert!(auto[0] > 0.75, "gravity=auto: the focal point, {auto:?}");
    let (said, etag_said) = bands(&app, &hash, "w=50&h=50&fit=cover&gravity=center").await;
    assert!(said[1] > 0.35, "a gravity said stands, {said:?}");
    assert_eq!(etag_said, etag_before, "and is the variant made before");
    let (contained, _) = bands(&app, &hash, "w=50").await;
    assert!(
        contained[0] > 0.3 && contained[2] > 0.3,
        "contain cuts nothing"
    );
    let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert_eq!(info["focus"], json!({"x": 0.1, "y": 0.5}));

    // Moved: the variants the old point placed go; the next request places on the new one.
    let region = json!({"left": 0.8, "top": 0.0, "width": 0.2, "height": 1.0});
    let set = json(put_focus(&app, &hash, region).await).await;
    assert_eq!(set["focus"]["x"], 0.9);
    assert_eq!(set["variants_removed"], 2, "{set}");
    let (right, _) = bands(&app, &hash, cover).await;
    assert!(right[2] > 0.75, "{right:?}");

    // Cleared: back to the centre, the same variant as before any point was set.
    let url = app.url(&format!("/v1/originals/{hash}/focus"));
    let cleared = app.client.delete(url).send().await.expect("request");
    assert_eq!(cleared.status(), 200);
    assert_eq!(json(cleared).await["focus"], serde_json::Value::Null);
    let (again, etag_again) = bands(&app, &hash, cover).await;
    assert!(again[1] > 0.35, "{again:?}");
    assert_eq!(etag_again, etag_before);
    let info = json(app.get(&format!("/v1/originals/{hash}/info")).await).await;
    assert!(info.get("focus").is_none(), "{info}");

    // Refused by name: a point out of range, a body of neither shape, an unknown original.
    let bad = put_focus(&app, &hash, json!({"x": 2, "y": 0})).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code_of(bad).await, "invalid_option");
    let bad = put_focus(&app, &hash, json!({"x": 0.5})).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let unknown = "ab".repeat(32);
    let missing = put_focus(&app, &unknown, json!({"x": 0.5, "y": 0.5})).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_code_of(missing).await, "not_found");
}

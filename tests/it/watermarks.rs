//! Watermarks through HTTP (issue 31, item 4): `wm=<name>` draws the configured overlay (a
//! stored original) on the output, with the request's overrides; the variant's key holds the
//! overlay's hash and settings, so a changed configuration makes new variants rather than
//! serving stale ones; a takedown of the overlay removes every variant drawn with it; and it
//! works through presets, in only-presets mode too.

use crate::common;

use common::*;
use image::{DynamicImage, ImageFormat, Rgba, RgbaImage};
use sha2::{Digest, Sha256};

const TOKEN: &str = "watermark-admin-token-0123456789";

/// A 200×100 overlay of one colour, opaque.
fn overlay(colour: [u8; 3]) -> Vec<u8> {
    let [r, g, b] = colour;
    let image = RgbaImage::from_pixel(200, 100, Rgba([r, g, b, 255]));
    encode(&DynamicImage::ImageRgba8(image), ImageFormat::Png)
}

fn hash_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A flat grey 400×300 PNG source.
fn grey() -> Vec<u8> {
    let image = RgbaImage::from_pixel(400, 300, Rgba([128, 128, 128, 255]));
    encode(&DynamicImage::ImageRgba8(image), ImageFormat::Png)
}

/// The RGB of a pixel of a PNG answer.
async fn pixel(response: reqwest::Response, x: u32, y: u32) -> [u8; 3] {
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.unwrap();
    image::load_from_memory(&bytes)
        .unwrap()
        .to_rgb8()
        .get_pixel(x, y)
        .0
}

async fn upload_as_admin(app: &TestApp, bytes: Vec<u8>) {
    let r = app.post_as("/v1/originals", TOKEN, bytes).await;
    assert!(r.status().is_success(), "{}", r.status());
}

#[tokio::test]
async fn a_watermark_is_drawn_changes_with_its_configuration_and_goes_with_its_overlay() {
    let (_origin, source) = Origin::serving("/photo.png", grey()).await;
    let (red, blue) = (overlay([255, 0, 0]), overlay([0, 0, 255]));
    let (red_hash, blue_hash) = (hash_of(&red), hash_of(&blue));
    let store = Restartable::new().await;
    let settings = |hash: &str| format!("hash={hash}&position=southeast&scale=0.25&margin=10");
    let app = store
        .spawn(|c| {
            c.security.admin_token = Some(TOKEN.into());
            c.watermarks.insert("logo".into(), settings(&red_hash));
        })
        .await;
    upload_as_admin(&app, red.clone()).await;
    upload_as_admin(&app, blue.clone()).await;

    // A quarter of 400 wide (100×50), 10 px from the bottom-right corner.
    let marked = app.image_by_url(&source, "wm=logo&format=png").await;
    let etag = marked.headers()["etag"].clone();
    // A CDN purges it by the overlay's tag as well as by the source's.
    let tags = header(&marked, "cache-tag").unwrap_or_default().to_string();
    assert!(tags.contains(&red_hash), "{tags}");
    assert_eq!(pixel(marked, 340, 265).await, [255, 0, 0]);
    let plain = app.image_by_url(&source, "format=png").await;
    assert_eq!(pixel(plain, 340, 265).await, [128, 128, 128]);
    // The request's overrides: elsewhere, and faded.
    let moved = app
        .image_by_url(
            &source,
            "wm=logo&wm_pos=northwest&wm_opacity=0.5&format=png",
        )
        .await;
    let faded = pixel(moved, 30, 20).await;
    assert!(
        faded[0] > 170 && faded[0] < 210 && faded[1] < 80,
        "{faded:?}"
    );
    // An unknown name is the request's mistake.
    let unknown = app.image_by_url(&source, "wm=nope&format=png").await;
    assert_eq!(unknown.status(), 400);
    assert_eq!(error_code_of(unknown).await, "invalid_option");
    let runs = app.processing_runs();
    app.stop().await;

    // The same name, another overlay: a new variant, drawn, not the stored one.
    let app = store
        .spawn(|c| {
            c.security.admin_token = Some(TOKEN.into());
            c.watermarks.insert("logo".into(), settings(&blue_hash));
        })
        .await;
    let again = app.image_by_url(&source, "wm=logo&format=png").await;
    assert_ne!(again.headers()["etag"], etag);
    assert_eq!(pixel(again, 340, 265).await, [0, 0, 255]);
    assert!(
        app.processing_runs() >= 1,
        "made anew (runs before: {runs})"
    );

    // Taking the overlay down removes the variants drawn with it, and refuses the watermark.
    let report = app
        .delete_as(&format!("/v1/originals/{blue_hash}"), TOKEN)
        .await;
    assert_eq!(report.status(), 200);
    let report = json(report).await;
    assert!(
        report["variants_removed"].as_u64().unwrap() >= 1,
        "{report}"
    );
    let marked_keys = app.pipeline.variant_keys().await.unwrap();
    assert!(
        !marked_keys
            .iter()
            .any(|k| k.canonical_spec.contains(&format!("wm={blue_hash}"))),
        "a variant drawn with the overlay is left"
    );
    let refused = app.image_by_url(&source, "wm=logo&format=png").await;
    assert_eq!(refused.status(), 451);
    // The source itself is untouched.
    let plain = app.image_by_url(&source, "format=png").await;
    assert_eq!(pixel(plain, 340, 265).await, [128, 128, 128]);
}

#[tokio::test]
async fn watermarks_work_through_presets_in_only_presets_mode() {
    let origin = Origin::start_with("/photo.png", grey()).await;
    let red = overlay([255, 0, 0]);
    let red_hash = hash_of(&red);
    let app = spawn_app_with(|c| {
        c.security.admin_token = Some(TOKEN.into());
        c.security.only_presets = true;
        c.watermarks.insert(
            "logo".into(),
            format!("hash={red_hash}&position=northwest&scale=0.5&margin=0"),
        );
        c.presets
            .insert("marked".into(), "w=200&wm=logo&format=png".into());
    })
    .await;
    upload_as_admin(&app, red).await;
    let r = app.image_from(&origin, "/photo.png", "preset=marked").await;
    // 200 wide: the overlay is 100×50 in the top-left corner.
    assert_eq!(pixel(r, 10, 10).await, [255, 0, 0]);
    // A request's own `wm` is refused in this mode.
    let r = app
        .image_from(&origin, "/photo.png", "preset=marked&wm=logo")
        .await;
    assert_eq!(r.status(), 403);
}

//! The fallback image (issue 30, item 4): a failing source answers the configured fallback,
//! processed with the request's own options, with the configured status and `Cache-Control`
//! and `X-Imgcas-Fallback: <code>`; the source's error stays cached as itself; refusals of
//! the request and takedowns answer as before.

use crate::common;

use common::*;

/// A fallback image written to a file the config names: a 400 × 300 PNG.
fn fallback_file(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("missing.png");
    std::fs::write(&path, png(400, 300, 9)).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn a_missing_source_answers_the_fallback_at_the_requested_size() {
    let files = tempfile::tempdir().unwrap();
    let image = fallback_file(&files);
    let app = spawn_app_with(|c| c.fallback.image = Some(image)).await;
    let origin = Origin::start().await;
    let gone = origin.url("/gone.jpg");

    let first = app.image_by_url(&gone, "w=100&format=png").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-imgcas-fallback"), Some("not_found"));
    assert_eq!(header(&first, "cache-control"), Some("public, max-age=60"));
    // Purged with the failed URL as well: its tag is on the answer.
    assert!(
        header(&first, "cache-tag").is_some_and(|tags| tags.contains("url-")),
        "{:?}",
        header(&first, "cache-tag")
    );
    let etag = header(&first, "etag").unwrap().to_string();
    let fallback_hash = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    assert_eq!(dimensions(&first.bytes().await.unwrap()), (100, 75));
    let runs = app.processing_runs();

    // The origin's 404 is held as itself: the next request asks no origin and runs nothing.
    let second = app.image_by_url(&gone, "w=100&format=png").await;
    assert_eq!(second.status(), 200);
    assert_eq!(header(&second, "x-imgcas-fallback"), Some("not_found"));
    assert_eq!(header(&second, "etag"), Some(etag.as_str()));
    assert_eq!(origin.requests(), 1, "the 404 is cached");
    assert_eq!(app.processing_runs(), runs);

    // The fallback's variants are ordinary ones: asked by hash, the same variant, made once.
    let native = app
        .get(&format!("/v1/image/{fallback_hash}?w=100&format=png"))
        .await;
    assert_eq!(native.status(), 200);
    assert_eq!(header(&native, "etag"), Some(etag.as_str()));
    assert_eq!(header(&native, "x-imgcas-fallback"), None);
    assert_eq!(app.processing_runs(), runs);

    // An unknown hash is a source that fails too.
    let unknown = "0".repeat(64);
    let by_hash = app
        .get(&format!("/v1/image/{unknown}?w=50&format=png"))
        .await;
    assert_eq!(by_hash.status(), 200);
    assert_eq!(header(&by_hash, "x-imgcas-fallback"), Some("not_found"));
    assert_eq!(dimensions(&by_hash.bytes().await.unwrap()), (50, 38));
    app.stop().await;
}

#[tokio::test]
async fn the_status_and_lifetime_are_configured_and_bad_bytes_fall_back_too() {
    let files = tempfile::tempdir().unwrap();
    let image = fallback_file(&files);
    let app = spawn_app_with(|c| {
        c.fallback.image = Some(image);
        c.fallback.status = 404;
        c.fallback.ttl = std::time::Duration::from_secs(5);
    })
    .await;
    let origin =
        Origin::start_with("/broken.jpg", b"\xff\xd8\xff\xe0 this is no JPEG".to_vec()).await;
    origin.status("/down.jpg", 503);

    let broken = app
        .image_from(&origin, "/broken.jpg", "w=40&format=png")
        .await;
    assert_eq!(broken.status(), 404);
    assert_eq!(header(&broken, "x-imgcas-fallback"), Some("undecodable"));
    assert_eq!(header(&broken, "cache-control"), Some("public, max-age=5"));
    assert_eq!(dimensions(&broken.bytes().await.unwrap()).0, 40);

    let down = app
        .image_from(&origin, "/down.jpg", "w=40&format=png")
        .await;
    assert_eq!(down.status(), 404);
    assert_eq!(header(&down, "x-imgcas-fallback"), Some("origin_error"));
    app.stop().await;
}

#[tokio::test]
async fn refusals_and_takedowns_never_fall_back() {
    const KEY: &str = "a-signing-key-of-32-bytes-length";
    let files = tempfile::tempdir().unwrap();
    let image = fallback_file(&files);
    let app = spawn_app_with(|c| c.fallback.image = Some(image)).await;
    let origin = Origin::start().await;

    // An option error is the request's own: 400, no fallback.
    let bad = app.image_from(&origin, "/gone.jpg", "w=-3").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(header(&bad, "x-imgcas-fallback"), None);

    // A taken-down original stays 451.
    let upload = app.upload(png(64, 48, 3)).await;
    let hash = json(upload).await["hash"].as_str().unwrap().to_string();
    app.pipeline
        .take_down(&hash.parse().unwrap())
        .await
        .expect("taken down");
    let taken = app.get(&format!("/v1/image/{hash}?w=32&format=png")).await;
    assert_eq!(taken.status(), 451);
    assert_eq!(header(&taken, "x-imgcas-fallback"), None);
    app.stop().await;

    // A missing signature is refused before any source is looked at.
    let image = fallback_file(&files);
    let signed = spawn_app_with(|c| {
        c.fallback.image = Some(image);
        c.security.signing_key = Some(KEY.into());
    })
    .await;
    let gone = origin.url("/gone.jpg");
    let unsigned = signed.image_by_url(&gone, "w=40&format=png").await;
    assert_eq!(unsigned.status(), 403);
    assert_eq!(header(&unsigned, "x-imgcas-fallback"), None);
    signed.stop().await;
}

#[tokio::test]
async fn a_preset_names_its_own_fallback_and_an_unstored_one_leaves_the_error() {
    let files = tempfile::tempdir().unwrap();
    let image = fallback_file(&files);
    let own = tempfile::tempdir().unwrap();
    let thumb_fallback = own.path().join("thumb.png");
    std::fs::write(&thumb_fallback, png(200, 200, 4)).unwrap();
    let thumb_hash = imgcas::hash::ContentHash::of(&std::fs::read(&thumb_fallback).unwrap());
    let app = spawn_app_with(|c| {
        c.fallback.image = Some(image);
        c.presets.insert(
            "thumb".into(),
            format!("w=60&format=png&fallback={}", thumb_fallback.display()),
        );
    })
    .await;
    let origin = Origin::start().await;
    let thumb = app.image_from(&origin, "/gone.jpg", "preset=thumb").await;
    assert_eq!(thumb.status(), 200);
    assert_eq!(
        header(&thumb, "x-imgcas-source-hash"),
        Some(thumb_hash.to_hex().as_str())
    );
    assert_eq!(dimensions(&thumb.bytes().await.unwrap()), (60, 60));
    // `fallback` is a preset's word, not a request's option.
    let spelled = app
        .image_from(&origin, "/gone.jpg", "w=60&fallback=x")
        .await;
    assert_eq!(spelled.status(), 400);
    app.stop().await;

    // A hash that names no stored original: the source's own error.
    let unstored = spawn_app_with(|c| c.fallback.image = Some("ab".repeat(32))).await;
    let answer = unstored
        .image_from(&origin, "/gone.jpg", "w=60&format=png")
        .await;
    assert_eq!(answer.status(), 404);
    assert_eq!(header(&answer, "x-imgcas-fallback"), None);
    unstored.stop().await;
}

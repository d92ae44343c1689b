//! The sources merchants send (issue 31): HEIC photos from phones and SVG logos, through HTTP
//! from a real origin, come out upright at the asked size in a format browsers show.

use crate::common;

use std::path::PathBuf;

use common::*;

fn testdata(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_portrait_heic_from_a_phone_comes_out_upright_as_webp_and_jpeg() {
    let origin = Origin::start().await;
    // iPhone 8 Plus: stored 4032×3024 with `irot` (and an EXIF orientation saying the same).
    origin.put("/arrow.heic", testdata("heic/arrow.heic"));
    let app = spawn_app().await;
    let source = origin.url("/arrow.heic");

    let webp = app.image_by_url(&source, "w=300&format=webp").await;
    assert_eq!(webp.status(), 200);
    assert_eq!(content_type(&webp), "image/webp");
    assert_eq!(dimensions(&webp.bytes().await.unwrap()), (300, 400));

    // `auto` never answers HEIC, even to a client that says it takes it.
    let mut auto_url = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
    auto_url
        .query_pairs_mut()
        .append_pair("url", &source)
        .append_pair("w", "120")
        .append_pair("format", "auto");
    let auto = app
        .client
        .get(auto_url)
        .header("accept", "image/heic,image/avif,image/webp,*/*")
        .send()
        .await
        .unwrap();
    assert_eq!(auto.status(), 200);
    assert_eq!(content_type(&auto), "image/avif");

    // `original` of a HEIC source answers JPEG.
    let original = app.image_by_url(&source, "w=150&format=original").await;
    assert_eq!(original.status(), 200);
    assert_eq!(content_type(&original), "image/jpeg");
    assert_eq!(dimensions(&original.bytes().await.unwrap()), (150, 200));
    assert_eq!(origin.full(), 1, "one download for every variant");

    // An upload reports the format and the stored size.
    let uploaded = json(app.upload(testdata("heic/pug.heic")).await).await;
    assert_eq!(uploaded["format"], "heic");
    let hash = uploaded["hash"].as_str().unwrap().to_string();
    let jpeg = app
        .get(&format!("/v1/image/{hash}?w=400&format=jpeg"))
        .await;
    assert_eq!(jpeg.status(), 200);
    assert_eq!(dimensions(&jpeg.bytes().await.unwrap()), (400, 300));
}

#[tokio::test]
async fn a_damaged_heic_is_refused_in_the_spec_shape() {
    let origin = Origin::start().await;
    let whole = testdata("heic/pug.heic");
    origin.put("/cut.heic", whole[..whole.len() / 3].to_vec());
    let app = spawn_app().await;
    let refused = app
        .image_by_url(&origin.url("/cut.heic"), "w=200&format=webp")
        .await;
    assert_eq!(refused.status(), 422);
    let body = json(refused).await;
    assert_eq!(body["error"]["code"], "undecodable", "{body}");
}

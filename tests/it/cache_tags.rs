//! CDN purge tags (issue 16): every image answer names its original in `Surrogate-Key`
//! (Fastly) and `Cache-Tag` (Cloudflare), and a by-URL answer names its URL in `Cache-Tag`
//! too, so a CDN drops every variant of an original, or everything one URL served, by one tag.

use crate::common;

use common::*;
use sha2::{Digest, Sha256};

#[tokio::test]
async fn image_answers_carry_the_original_and_the_url_as_purge_tags() {
    let (origin, source) = Origin::serving("/tagged.jpg", jpeg(200, 150, 4)).await;
    let app = spawn_app().await;
    let url_tag = format!("url-{}", hex::encode(Sha256::digest(source.as_bytes())));

    let made = app.image_by_url(&source, "w=50").await;
    assert_eq!(made.status(), 200);
    let hash = header(&made, "x-imgcas-source-hash").unwrap().to_string();
    let tags = |r: &reqwest::Response| {
        (
            header(r, "surrogate-key").map(str::to_string),
            header(r, "cache-tag").map(str::to_string),
        )
    };
    let by_url = (Some(hash.clone()), Some(format!("{hash},{url_tag}")));
    assert_eq!(tags(&made), by_url);
    // The same on a routed hit, a remembered one, and a 304.
    for _ in 0..2 {
        let again = app.image_by_url(&source, "w=50").await;
        assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));
        assert_eq!(tags(&again), by_url);
    }
    let etag = header(&made, "etag").unwrap().to_string();
    let not_modified = app
        .client
        .get(app.url(&format!(
            "/v1/image?url={}&w=50",
            url::form_urlencoded::byte_serialize(source.as_bytes()).collect::<String>()
        )))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), 304);
    assert_eq!(tags(&not_modified), by_url);

    // By hash: the original only.
    let by_hash = app.get(&format!("/v1/image/{hash}?w=50")).await;
    assert_eq!(tags(&by_hash), (Some(hash.clone()), Some(hash.clone())));

    // An origin's failure, held for the URL before any bytes are known, carries its URL tag.
    let missing = origin.url("/missing.jpg");
    let failed = app.image_by_url(&missing, "w=50").await;
    assert_eq!(failed.status(), 404);
    let missing_tag = format!("url-{}", hex::encode(Sha256::digest(missing.as_bytes())));
    assert_eq!(tags(&failed), (None, Some(missing_tag)));

    // A cached processing error of the original is tagged too: it goes with the original.
    let too_small = app.get(&format!("/v1/image/{hash}?min_w=4000")).await;
    assert_eq!(too_small.status(), 422);
    assert_eq!(tags(&too_small), (Some(hash.clone()), Some(hash)));
}

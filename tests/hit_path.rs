//! The hit path's request cache (issue 15): a repeated request skips finding its variant
//! again, yet never answers with what its URL no longer names — a push that remaps the URL,
//! or the end of the mapping's freshness, ends what was remembered. And remembering changes
//! no answer: headers, `304`s and `Vary` are those of the first request.

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn a_remap_by_ingest_ends_the_remembered_request() {
    let origin = Origin::start().await;
    origin.put("/p.jpg", jpeg(300, 200, 1));
    let app = spawn_app().await;
    let source = origin.url("/p.jpg");

    let first = app.image_by_url(&source, "w=100&format=png").await;
    assert_eq!(first.status(), 200);
    let first_hash = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    let first_body = first.bytes().await.unwrap();
    // Remembered now: the same request again is a hit, with the same answer.
    let again = app.image_by_url(&source, "w=100&format=png").await;
    assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));
    assert_eq!(
        header(&again, "x-imgcas-source-hash"),
        Some(first_hash.as_str())
    );
    let etag = header(&again, "etag").unwrap().to_string();
    assert_eq!(again.bytes().await.unwrap(), first_body);
    let not_modified = app
        .client
        .get(app.url(&format!(
            "/v1/image?url={}&w=100&format=png",
            urlencode(&source)
        )))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), 304);

    // The origin's picture changes and a push says so: the URL is mapped to new bytes, and
    // the remembered request must not answer with the old ones.
    origin.put("/p.jpg", jpeg(300, 200, 2));
    let pushed = app
        .client
        .post(app.url("/v1/ingest"))
        .header("content-type", "application/json")
        .body(serde_json::json!({ "urls": [source] }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.status(), 200);
    let after = app.image_by_url(&source, "w=100&format=png").await;
    assert_eq!(after.status(), 200);
    let after_hash = header(&after, "x-imgcas-source-hash").unwrap().to_string();
    assert_ne!(after_hash, first_hash, "served the URL's old bytes");
    assert_ne!(after.bytes().await.unwrap(), first_body);
    app.stop().await;
}

#[tokio::test]
async fn a_remembered_request_lasts_while_its_mapping_is_fresh() {
    let origin = Origin::start().await;
    origin.put("/q.jpg", jpeg(300, 200, 3));
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::from_secs(1)).await;
    let source = origin.url("/q.jpg");
    assert_eq!(app.image_by_url(&source, "w=80").await.status(), 200);
    let asked = origin.requests();
    let hit = app.image_by_url(&source, "w=80").await;
    assert_eq!(header(&hit, "x-imgcas-cache"), Some("hit"));
    assert_eq!(origin.requests(), asked);
    // Past the freshness, the origin is asked again (a conditional request): the request
    // was not answered from memory.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let later = app.image_by_url(&source, "w=80").await;
    assert_eq!(header(&later, "x-imgcas-cache"), Some("revalidated"));
    assert_eq!(origin.conditional(), 1);
    app.stop().await;
}

#[tokio::test]
async fn negotiated_answers_are_remembered_per_accept_class() {
    let app = spawn_app().await;
    let hash = json(app.upload(jpeg(200, 100, 4)).await).await["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let path = app.url(&format!("/v1/image/{hash}?w=50&format=auto"));
    let get = |accept: &'static str| {
        let (client, path) = (app.client.clone(), path.clone());
        async move {
            client
                .get(path)
                .header("accept", accept)
                .send()
                .await
                .unwrap()
        }
    };
    for _ in 0..2 {
        let webp = get("image/webp,*/*").await;
        assert_eq!(header(&webp, "content-type"), Some("image/webp"));
        assert_eq!(header(&webp, "vary"), Some("Accept"));
        let jpeg = get("image/png,*/*").await;
        assert_eq!(header(&jpeg, "content-type"), Some("image/jpeg"));
        let avif = get("image/avif,image/webp").await;
        assert_eq!(header(&avif, "content-type"), Some("image/avif"));
        let refused = get("image/avif;q=0,image/webp").await;
        assert_eq!(header(&refused, "content-type"), Some("image/webp"));
    }
    app.stop().await;
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

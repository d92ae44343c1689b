//! Takedowns (issue 16): `DELETE /v1/originals/<hash>` removes everything stored of an
//! original — its bytes, every variant, every URL entry naming it — and lists the hash, so it
//! is refused with 451 `taken_down` by hash and by every URL whose bytes have it;
//! `DELETE /v1/takedowns/<hash>` lifts that. Run on the embedded default, and by CI again on
//! S3 and on PostgreSQL maps (the pipeline suites), where the variants' bytes are in the
//! bucket too.

use crate::common;

use common::*;

const TOKEN: &str = "takedown-admin-token-0123456789";

async fn delete(app: &TestApp, path: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.delete(app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

/// Everything the stores hold that names `hash`: an index entry, a blob, a bucket object.
async fn stored_of(app: &TestApp, hash: &str) -> Vec<String> {
    let parsed: imgcas::hash::ContentHash = hash.parse().unwrap();
    let mut found = Vec::new();
    if app.pipeline.original(&parsed).await.unwrap().is_some() {
        found.push("originals index entry".to_string());
    }
    if app.pipeline.stored_blobs().await.unwrap().contains(&parsed) {
        found.push("blob".to_string());
    }
    if let Some(bucket) = &app.s3 {
        found.extend(bucket.keys().await.into_iter().filter(|k| k.contains(hash)));
    }
    found
}

#[tokio::test]
async fn a_takedown_removes_everything_of_the_content_and_refuses_it_until_lifted() {
    let origin = Origin::start().await;
    let bytes = jpeg(320, 240, 7);
    // Two URLs with the same bytes, and a third with other bytes that must be untouched.
    origin.put("/a.jpg", bytes.clone());
    origin.put("/b.jpg", bytes.clone());
    origin.put("/other.jpg", jpeg(200, 150, 8));
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let (a, b, other) = (
        origin.url("/a.jpg"),
        origin.url("/b.jpg"),
        origin.url("/other.jpg"),
    );
    let first = app.image_by_url(&a, "w=100&format=webp").await;
    assert_eq!(first.status(), 200);
    let hash = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    assert_eq!(app.image_status(&b, "w=50").await, 200);
    assert_eq!(app.image_status(&other, "w=50").await, 200);
    let by_hash = app.get(&format!("/v1/image/{hash}?w=60&format=png")).await;
    assert_eq!(by_hash.status(), 200);
    let before = app.pipeline.stored_stats().await.unwrap();
    assert_eq!(before.variants.images, 4);

    // Closed without the token, like every removal.
    let path = format!("/v1/originals/{hash}");
    assert_eq!(delete(&app, &path, None).await.status(), 401);
    assert_eq!(
        delete(&app, "/v1/originals/zz", Some(TOKEN)).await.status(),
        400
    );

    let done = delete(&app, &path, Some(TOKEN)).await;
    assert_eq!(done.status(), 200);
    let report = json(done).await;
    assert_eq!(report["hash"], hash.as_str());
    assert_eq!(report["newly_listed"], true);
    assert_eq!(report["variants_removed"], 3, "{report}");
    assert_eq!(report["urls_forgotten"], 2, "{report}");
    assert!(
        report["bytes_freed"].as_u64().unwrap() > bytes.len() as u64,
        "{report}"
    );

    // Nothing of it is stored; the other content is.
    assert_eq!(stored_of(&app, &hash).await, Vec::<String>::new());
    let after = app.pipeline.stored_stats().await.unwrap();
    assert_eq!(after.variants.images, 1);
    assert_eq!(after.urls, 1);
    let verified = app.pipeline.verify(false, &|_, _| {}).await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");

    // Refused by hash, on every route that names it, with no-store.
    for route in [
        format!("/v1/image/{hash}?w=60&format=png"),
        format!("/v1/originals/{hash}"),
        format!("/v1/originals/{hash}/info"),
    ] {
        let r = app.get(&route).await;
        assert_eq!(r.status(), 451, "{route}");
        assert_eq!(header(&r, "cache-control"), Some("no-store"), "{route}");
        assert_eq!(error_code_of(r).await, "taken_down", "{route}");
    }
    // By URL: downloaded once more (its entry was removed), found taken down and remembered
    // as such: the next requests answer without a download, and store nothing.
    let downloads = origin.full();
    for _ in 0..3 {
        let r = app.image_by_url(&a, "w=100&format=webp").await;
        assert_eq!(r.status(), 451);
        assert_eq!(header(&r, "x-imgcas-source-hash"), Some(hash.as_str()));
        assert_eq!(error_code_of(r).await, "taken_down");
    }
    assert_eq!(origin.full(), downloads + 1);
    // An upload of the same bytes is refused too.
    let refused = app.upload_as(TOKEN, bytes.clone()).await;
    assert_eq!(refused.status(), 451);
    // So is an ingest of its URLs, item by item.
    let ingested = app
        .post_json_as(
            "/v1/ingest",
            TOKEN,
            &serde_json::json!({ "urls": [b.as_str()] }),
        )
        .await;
    assert_eq!(ingested.status(), 200);
    let answer = json(ingested).await;
    assert_eq!(answer["summary"]["failed"], 1, "{answer}");
    assert!(answer.to_string().contains("taken_down"), "{answer}");
    assert_eq!(stored_of(&app, &hash).await, Vec::<String>::new());
    // The other content still serves, as a stored hit.
    let r = app.image_by_url(&other, "w=50").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    // The list names it.
    let list = app.get_as("/v1/takedowns", TOKEN).await;
    assert_eq!(json(list).await["takedowns"][0]["hash"], hash.as_str());

    // Taking it down again finds nothing more to remove.
    let again = json(delete(&app, &path, Some(TOKEN)).await).await;
    assert_eq!(
        (
            again["newly_listed"].clone(),
            again["variants_removed"].clone()
        ),
        (false.into(), 0.into())
    );
    assert_eq!(
        again["urls_forgotten"], 2,
        "the URLs remembered as taken down (a by requests, b by the ingest)"
    );

    // Lifted: by hash the bytes are gone (404); a URL downloads again and serves.
    let lifted = delete(&app, &format!("/v1/takedowns/{hash}"), Some(TOKEN)).await;
    assert_eq!(lifted.status(), 200);
    let lifted = json(lifted).await;
    assert_eq!(lifted["lifted"], true);
    assert_eq!(
        app.get(&format!("/v1/image/{hash}?w=60")).await.status(),
        404
    );
    let downloads = origin.full();
    let back = app.image_by_url(&b, "w=50").await;
    assert_eq!(back.status(), 200);
    assert_eq!(origin.full(), downloads + 1);
    assert_eq!(header(&back, "x-imgcas-source-hash"), Some(hash.as_str()));
    let verified = app.pipeline.verify(false, &|_, _| {}).await.unwrap();
    assert!(verified.is_clean(), "{verified:?}");
}

#[tokio::test]
async fn a_hash_never_stored_can_be_taken_down_before_it_arrives() {
    let origin = Origin::start().await;
    let bytes = png(64, 48, 3);
    let hash = imgcas::hash::ContentHash::of(&bytes).to_hex();
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let done = delete(&app, &format!("/v1/originals/{hash}"), Some(TOKEN)).await;
    assert_eq!(done.status(), 200);
    let report = json(done).await;
    for count in ["variants_removed", "urls_forgotten", "bytes_freed"] {
        assert_eq!(report[count], 0, "{count}");
    }
    origin.put("/later.png", bytes.clone());
    let r = app.image_from(&origin, "/later.png", "w=10").await;
    assert_eq!(r.status(), 451);
    assert_eq!(app.upload_as(TOKEN, bytes).await.status(), 451);
    assert_eq!(stored_of(&app, &hash).await, Vec::<String>::new());
    assert_eq!(app.stats().processing_runs, 0);
}

#[tokio::test]
async fn takedowns_are_closed_without_an_admin_token() {
    let app = spawn_app().await;
    let hash = "0".repeat(64);
    for path in [
        format!("/v1/originals/{hash}"),
        format!("/v1/takedowns/{hash}"),
    ] {
        let r = delete(&app, &path, None).await;
        assert_eq!(r.status(), 403, "{path}");
        assert_eq!(error_code_of(r).await, "admin_disabled");
    }
}

/// `DELETE /v1/originals?url=` takes down what a URL is served from; an unknown URL is a 404.
#[tokio::test]
async fn a_takedown_by_url_takes_down_its_content() {
    let (origin, source) = Origin::serving("/u.jpg", jpeg(160, 120, 9)).await;
    let app = spawn_app_with(|c| c.security.admin_token = Some(TOKEN.into())).await;
    let r = app.image_by_url(&source, "w=40").await;
    let hash = header(&r, "x-imgcas-source-hash").unwrap().to_string();
    let mut url = reqwest::Url::parse(&app.url("/v1/originals")).unwrap();
    url.query_pairs_mut().append_pair("url", &source);
    let r = app.delete_url_as(url, TOKEN).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["hash"], hash.as_str());
    assert_eq!(
        app.get(&format!("/v1/image/{hash}?w=40")).await.status(),
        451
    );
    let mut unknown = reqwest::Url::parse(&app.url("/v1/originals")).unwrap();
    unknown
        .query_pairs_mut()
        .append_pair("url", &origin.url("/never.jpg"));
    let r = app.delete_url_as(unknown, TOKEN).await;
    assert_eq!(r.status(), 404);
}

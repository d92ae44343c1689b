//! The URL map's freshness rules: no origin traffic while fresh, a conditional request after,
//! a new hash when the content changes, and the stored mapping when the origin fails.

use crate::common;

use std::time::Duration;

use common::*;
use imgcas::hash::ContentHash;

#[tokio::test]
async fn within_revalidate_after_the_origin_sees_nothing() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/a.jpg", jpeg(300, 200, 1)).await;
    app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(origin.requests(), 1);
    for q in ["w=100", "w=50", "h=20&format=png"] {
        let r = app.image_by_url(&origin.url("/a.jpg"), q).await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(origin.requests(), 1, "fresh mapping: no origin traffic");
}

#[tokio::test]
async fn after_revalidate_after_one_conditional_request_answered_304() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::from_secs(1)).await;
    let origin = Origin::start_with("/a.jpg", jpeg(300, 200, 2)).await;
    let first = app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(first.status(), 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(second.status(), 200);
    assert_eq!(header(&second, "x-imgcas-cache"), Some("revalidated"));
    assert_eq!(origin.conditional(), 1);
    assert_eq!(origin.not_modified(), 1);
    assert_eq!(origin.full(), 1, "no new download");
    assert_eq!(app.downloads(), 1);
    assert_eq!(app.stored_blobs().await.len(), 1);
    assert_eq!(app.processing_runs(), 1);
    // The 304 refreshed the check time: fresh again.
    app.image_from(&origin, "/a.jpg", "w=100").await;
    assert_eq!(origin.requests(), 2);
}

#[tokio::test]
async fn changed_content_is_served_under_its_new_hash() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let old = jpeg(800, 600, 3);
    let origin = Origin::start_with("/p.jpg", old.clone()).await;
    let before = app.image_from(&origin, "/p.jpg", "w=100").await;
    let old_etag = header(&before, "etag").unwrap().to_string();
    assert_eq!(dimensions(&before.bytes().await.unwrap()), (100, 75));

    let new = jpeg(600, 800, 4);
    origin.put("/p.jpg", new.clone());
    let after = app.image_from(&origin, "/p.jpg", "w=100").await;
    assert_eq!(after.status(), 200);
    let new_hash = ContentHash::of(&new).to_hex();
    assert_eq!(
        header(&after, "x-imgcas-source-hash"),
        Some(new_hash.as_str())
    );
    assert_ne!(header(&after, "etag"), Some(old_etag.as_str()));
    assert_eq!(dimensions(&after.bytes().await.unwrap()), (100, 133));
    assert_eq!(origin.full(), 2);
    assert_eq!(app.stored_blobs().await.len(), 2);
}

#[tokio::test]
async fn a_failing_origin_leaves_the_stored_mapping_in_service() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let bytes = jpeg(300, 300, 5);
    let origin = Origin::start_with("/s.jpg", bytes.clone()).await;
    assert_eq!(app.image_from_status(&origin, "/s.jpg", "w=64").await, 200);

    origin.status("/s.jpg", 503);
    let r = app.image_from(&origin, "/s.jpg", "w=64").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("stale"));
    let hash = ContentHash::of(&bytes).to_hex();
    assert_eq!(header(&r, "x-imgcas-source-hash"), Some(hash.as_str()));

    // While the failure is held (1 s after a first failure), the origin is left alone.
    let asked = origin.requests();
    let r = app.image_from(&origin, "/s.jpg", "w=64").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("stale"));
    assert_eq!(origin.requests(), asked);

    // Gone for good is not transient: the client is told, once the backoff has passed.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    origin.status("/s.jpg", 404);
    let r = app.image_from(&origin, "/s.jpg", "w=64").await;
    assert_eq!(r.status(), 404);
    assert_eq!(error_code_of(r).await, "not_found");
}

#[tokio::test]
async fn an_origin_with_only_last_modified_is_revalidated_with_if_modified_since() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let origin = Origin::start().await;
    origin.put_without_etag("/lm.jpg", jpeg(300, 200, 8));
    for expected in ["miss", "revalidated"] {
        let r = app.image_from(&origin, "/lm.jpg", "w=100").await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-imgcas-cache"), Some(expected));
    }
    assert_eq!(origin.conditional(), 1, "the second request is conditional");
    assert_eq!(origin.not_modified(), 1, "and answered 304");
    assert_eq!(origin.full(), 1);
}

#[tokio::test]
async fn validators_that_come_with_a_304_replace_the_stored_ones() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let origin = Origin::start_with("/t.jpg", jpeg(300, 200, 9)).await;
    app.image_from(&origin, "/t.jpg", "w=100").await;
    // The origin moves to a new tag for the same bytes, still honouring the old one once:
    // its 304 carries the new tag.
    origin.retag("/t.jpg", "\"v2\"", true);
    let r = app.image_from(&origin, "/t.jpg", "w=100").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("revalidated"));
    // Now only the new tag matches: asking with the old one would cost a full download.
    origin.retag("/t.jpg", "\"v2\"", false);
    let r = app.image_from(&origin, "/t.jpg", "w=100").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("revalidated"));
    assert_eq!(origin.not_modified(), 2);
    assert_eq!(origin.full(), 1, "one download in all");
}

#[tokio::test]
async fn an_ingest_recheck_asks_the_origin_itself_while_a_request_is_revalidating() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let (origin, url) = Origin::serving("/s.jpg", jpeg(300, 200, 10)).await;
    app.image_by_url(&url, "w=100").await;
    origin.put_slow(
        "/s.jpg",
        jpeg(300, 200, 10),
        Some(Duration::from_millis(600)),
    );
    // A request's revalidation is under way when the merchant pushes the URL.
    let request = {
        let mut target = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
        target
            .query_pairs_mut()
            .append_pair("url", &url)
            .append_pair("w", "100");
        let client = app.client.clone();
        tokio::spawn(async move { client.get(target).send().await.unwrap().status() })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let pushed = app
        .post_json("/v1/ingest", &serde_json::json!({ "urls": [url] }))
        .await;
    assert_eq!(pushed.status(), 200);
    assert_eq!(request.await.unwrap(), 200);
    assert_eq!(
        origin.conditional(),
        2,
        "the push made its own conditional request, after the news"
    );
}

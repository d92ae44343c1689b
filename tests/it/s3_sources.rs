//! Private sources (issue 31, item 3): `url=s3://<bucket>/<key>` for the buckets
//! `IMGCAS_SOURCE_BUCKETS` names, read from a real S3 server (`s3s-fs` in-process, or the
//! one `IMGCAS_TEST_S3_ENDPOINT` names: moto in CI), mapped, deduplicated and revalidated as
//! an HTTP URL is.

use crate::common;

use common::s3::S3Target;
use common::*;

/// An app reading sources from `bucket` on `target`'s server, its own store on disk.
async fn app_reading(target: &S3Target) -> TestApp {
    let (endpoint, bucket) = (target.endpoint.clone(), target.bucket.clone());
    spawn_app_with(move |c| {
        c.storage.backend = imgcas::config::StorageBackend::Fs;
        c.maps.url = None;
        c.storage.s3.endpoint = Some(endpoint);
        c.storage.s3.region = "us-east-1".into();
        c.storage.s3.force_path_style = true;
        c.fetch.source_buckets = vec![bucket];
    })
    .await
}

async fn put(target: &S3Target, key: &str, bytes: Vec<u8>) {
    target
        .client()
        .put_object()
        .bucket(&target.bucket)
        .key(key)
        .body(bytes.into())
        .send()
        .await
        .expect("put");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_s3_source_is_served_and_dedups_with_an_http_source_of_the_same_bytes() {
    let target = S3Target::new().await;
    let photo = jpeg(320, 240, 21);
    put(&target, "catalogue/can of soda.jpg", photo.clone()).await;
    let app = app_reading(&target).await;
    let source = format!("s3://{}/catalogue/can%20of%20soda.jpg", target.bucket);

    let first = app.image_by_url(&source, "w=100&format=webp").await;
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "x-imgcas-cache"), Some("miss"));
    let etag = header(&first, "etag").unwrap().to_string();
    let hash = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    assert_eq!(dimensions(&first.bytes().await.unwrap()), (100, 75));
    let again = app.image_by_url(&source, "w=100&format=webp").await;
    assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));

    // The same bytes behind an HTTP URL: one original, one variant per spec.
    let origin = Origin::start_with("/soda.jpg", photo).await;
    let by_http = app
        .image_from(&origin, "/soda.jpg", "w=100&format=webp")
        .await;
    assert_eq!(header(&by_http, "etag"), Some(etag.as_str()));
    assert_eq!(
        header(&by_http, "x-imgcas-source-hash"),
        Some(hash.as_str())
    );
    assert_eq!(app.processing_runs(), 1, "one variant per spec");
    assert_eq!(app.stored_blobs().await.len(), 1, "one original");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn only_listed_buckets_are_read_and_a_missing_key_is_404() {
    let target = S3Target::new().await;
    let app = app_reading(&target).await;
    let other = app
        .image_by_url("s3://someone-elses-bucket/a.jpg", "w=10")
        .await;
    assert_eq!(other.status(), 403);
    assert_eq!(error_code_of(other).await, "source_not_allowed");
    let missing = app
        .image_by_url(&format!("s3://{}/nothing.jpg", target.bucket), "w=10")
        .await;
    assert_eq!(missing.status(), 404);
    let no_key = app
        .image_by_url(&format!("s3://{}/", target.bucket), "w=10")
        .await;
    assert_eq!(no_key.status(), 400);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_object_is_found_on_revalidation() {
    let target = S3Target::new().await;
    put(&target, "p.jpg", jpeg(200, 100, 1)).await;
    let (endpoint, bucket) = (target.endpoint.clone(), target.bucket.clone());
    let app = spawn_app_with(move |c| {
        c.storage.backend = imgcas::config::StorageBackend::Fs;
        c.maps.url = None;
        c.storage.s3.endpoint = Some(endpoint);
        c.storage.s3.force_path_style = true;
        c.fetch.source_buckets = vec![bucket];
        c.fetch.revalidate_after = std::time::Duration::ZERO;
    })
    .await;
    let source = format!("s3://{}/p.jpg", target.bucket);
    let first = app.image_by_url(&source, "w=50").await;
    assert_eq!(first.status(), 200);
    let before = header(&first, "x-imgcas-source-hash").unwrap().to_string();
    // Unchanged: the conditional read finds the same object.
    let same = app.image_by_url(&source, "w=50").await;
    assert_eq!(header(&same, "x-imgcas-source-hash"), Some(before.as_str()));
    assert_eq!(header(&same, "x-imgcas-cache"), Some("revalidated"));
    // Replaced: the next request maps the URL to the new bytes.
    put(&target, "p.jpg", jpeg(200, 100, 2)).await;
    let changed = app.image_by_url(&source, "w=50").await;
    assert_eq!(changed.status(), 200);
    assert_ne!(
        header(&changed, "x-imgcas-source-hash"),
        Some(before.as_str())
    );
    app.stop().await;
}

const MERCHANT_KEY: &str = "merchant-access-key";
const MERCHANT_SECRET: &str = "merchant-secret-key-0123456789ab";

/// An app whose `catalogue` bucket lives on `endpoint` and is read with `secret`.
async fn app_with_own_bucket(endpoint: String, secret: &'static str) -> TestApp {
    spawn_app_with(move |c| {
        c.storage.backend = imgcas::config::StorageBackend::Fs;
        c.maps.url = None;
        let own = imgcas::config::SourceBucket {
            endpoint: Some(endpoint),
            region: Some("us-east-1".into()),
            force_path_style: Some(true),
            access_key_id: Some(MERCHANT_KEY.into()),
            secret_access_key: Some(secret.into()),
        };
        c.fetch.buckets.insert("catalogue".into(), own);
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bucket_with_its_own_endpoint_and_keys_is_read_with_them() {
    // The node's credential chain has the test keys, which this server refuses: only the
    // bucket's own keys open it.
    common::s3::set_credentials();
    let merchant = common::s3::InProcessS3::start_keyed(MERCHANT_KEY, MERCHANT_SECRET);
    let client = common::s3::client_with(&merchant.endpoint(), (MERCHANT_KEY, MERCHANT_SECRET));
    client
        .create_bucket()
        .bucket("catalogue")
        .send()
        .await
        .expect("create");
    let photo = jpeg(320, 240, 31);
    client
        .put_object()
        .bucket("catalogue")
        .key("soda.jpg")
        .body(photo.into())
        .send()
        .await
        .expect("put");

    let app = app_with_own_bucket(merchant.endpoint(), MERCHANT_SECRET).await;
    let r = app
        .image_by_url("s3://catalogue/soda.jpg", "w=80&format=webp")
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (80, 60));
    // Another bucket is not a source (the table names this one only).
    let other = app.image_by_url("s3://elsewhere/soda.jpg", "w=80").await;
    assert_eq!(other.status(), 403);

    // With a wrong secret the server refuses the read: the configured keys are the ones used.
    let wrong = app_with_own_bucket(merchant.endpoint(), "not-the-merchant-secret-000000").await;
    let r = wrong.image_by_url("s3://catalogue/soda.jpg", "w=80").await;
    assert!(
        r.status().is_server_error() || r.status() == 403,
        "{}",
        r.status()
    );
    assert_ne!(r.status(), 200);
}

/// Audit #3, finding 4: a key whose decoded segments include `..` reached the endpoint as
/// `GET /<bucket>/../<other bucket>/…`, and the allow-list had checked only the bucket. Now a
/// key with an empty, `.` or `..` segment is refused 400 before any traffic, as written or as
/// the URL parser would tidy it; dots inside a name are a key like any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_with_dot_segments_is_refused_before_any_traffic() {
    let target = S3Target::new().await;
    let photo = jpeg(64, 48, 5);
    put(&target, "secret/other/s.jpg", photo.clone()).await;
    put(&target, "v1..2/.hidden..jpg", photo).await;
    let app = app_reading(&target).await;
    let bucket = &target.bucket;
    for key in [
        "..%2Fsecret%2Fother%2Fs.jpg",
        "x%2F..%2F..%2Fsecret%2Fother%2Fs.jpg",
        "x%2F..%2Fsecret%2Fother%2Fs.jpg",
        ".%2Fsecret%2Fother%2Fs.jpg",
        "secret%2F.%2Fother%2Fs.jpg",
        "secret%2F%2Fother%2Fs.jpg",
        "secret/other/s.jpg%2F",
        "%2E%2E%2Fsecret/other/s.jpg",
        // Audit #4 (issue 67): written with plain slashes, the URL parser removed these
        // segments (`x/../secret/…` became `secret/…`) before the key was checked, and the
        // tidied key was read.
        "x/../secret/other/s.jpg",
        "x/%2e%2e/secret/other/s.jpg",
        "x/.%2E/secret/other/s.jpg",
        "secret/./other/s.jpg",
        "secret/%2e/other/s.jpg",
    ] {
        let answer = app
            .image_by_url(&format!("s3://{bucket}/{key}"), "w=10")
            .await;
        assert_eq!(answer.status(), 400, "{key}");
        let body = json(answer).await;
        assert_eq!(body["error"]["code"], "invalid_option", "{key}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("segment")),
            "{key}: {body}"
        );
    }
    assert_eq!(app.stored_blobs().await.len(), 0, "nothing was read");
    let plain = app
        .image_by_url(&format!("s3://{bucket}/secret/other/s.jpg"), "w=10")
        .await;
    assert_eq!(plain.status(), 200);
    let dotted = app
        .image_by_url(&format!("s3://{bucket}/v1..2/.hidden..jpg"), "w=10")
        .await;
    assert_eq!(dotted.status(), 200, "dots inside a segment are a name");
    app.stop().await;
}

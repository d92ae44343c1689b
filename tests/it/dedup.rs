//! The dedup pipeline end to end: resize by URL, one original per content, one download and
//! one processing run for concurrent identical requests, one variant per canonical spec.

use crate::common;

use std::time::Duration;

use common::*;
use imgcas::hash::ContentHash;

#[tokio::test]
async fn a_loopback_origin_image_comes_back_resized() {
    let app = spawn_app().await;
    let bytes = jpeg(800, 600, 1);
    let origin = Origin::start_with("/a.jpg", bytes.clone()).await;

    let r = app.image_from(&origin, "/a.jpg", "w=400").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("image/jpeg"));
    assert_eq!(header(&r, "x-imgcas-cache"), Some("miss"));
    let hash = ContentHash::of(&bytes).to_hex();
    assert_eq!(header(&r, "x-imgcas-source-hash"), Some(hash.as_str()));
    assert_eq!(
        header(&r, "cache-control"),
        Some("public, max-age=300, stale-while-revalidate=300")
    );
    let etag = header(&r, "etag").unwrap().to_string();
    assert!(
        etag.starts_with('"') && !etag.starts_with("W/"),
        "strong ETag"
    );
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (400, 300));

    let again = app.image_from(&origin, "/a.jpg", "w=400").await;
    assert_eq!(header(&again, "x-imgcas-cache"), Some("hit"));
    assert_eq!(header(&again, "etag"), Some(etag.as_str()));
    assert_eq!(origin.full(), 1);
    assert_eq!(app.processing_runs(), 1);

    let webp = app.image_from(&origin, "/a.jpg", "w=200&format=webp").await;
    assert_eq!(header(&webp, "content-type"), Some("image/webp"));
    let body = webp.bytes().await.unwrap();
    assert_eq!(&body[12..16], b"VP8 ", "lossy WebP, not VP8L");
    assert_eq!(dimensions(&body), (200, 150));

    let png = app.image_from(&origin, "/a.jpg", "h=60&format=png").await;
    assert_eq!(header(&png, "content-type"), Some("image/png"));
    assert_eq!(dimensions(&png.bytes().await.unwrap()), (80, 60));
}

#[tokio::test]
async fn head_answers_the_headers_without_a_body() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/a.jpg", jpeg(300, 200, 2)).await;
    let url = app.image_url(&[("url", &origin.url("/a.jpg")), ("w", "100")]);
    let r = app.client.head(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("image/jpeg"));
    assert!(header(&r, "etag").is_some());
    assert!(r.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn identical_bytes_behind_100_urls_are_stored_and_processed_once() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let bytes = jpeg(640, 480, 3);
    for i in 0..100 {
        origin.put(&format!("/merchant-{i}/soda.jpg"), bytes.clone());
    }
    let mut etags = std::collections::HashSet::new();
    for i in 0..100 {
        let r = app
            .image_by_url(&origin.url(&format!("/merchant-{i}/soda.jpg")), "w=120")
            .await;
        assert_eq!(r.status(), 200);
        etags.insert(header(&r, "etag").unwrap().to_string());
    }
    assert_eq!(origin.full(), 100, "each URL is downloaded once");
    assert_eq!(app.stats().originals_stored, 1);
    assert_eq!(app.stored_blobs().await.len(), 1, "one blob");
    assert_eq!(app.processing_runs(), 1, "one processing run for the spec");
    assert_eq!(etags.len(), 1, "one variant");
    if let Some(s3) = &app.s3 {
        // On S3 (IMGCAS_TEST_STORAGE=s3): one object, under its SHA-256 key.
        let hash = imgcas::hash::ContentHash::of(&bytes);
        let keys = s3.keys().await;
        assert_eq!(keys[0], imgcas::blob::key_for(&hash));
        if postgres::pipeline_on_postgres() {
            // With shared maps, the one variant's bytes are in the bucket too.
            assert_eq!(keys.len(), 2, "{keys:?}");
            assert!(
                keys[1].starts_with(&format!("variants/{hash}/")),
                "{keys:?}"
            );
        } else {
            assert_eq!(keys.len(), 1, "{keys:?}");
        }
    }
}

#[tokio::test]
async fn fifty_concurrent_cold_requests_share_one_download_and_one_run() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    origin.put_slow(
        "/hot.jpg",
        jpeg(1600, 1200, 4),
        Some(Duration::from_millis(300)),
    );
    let source = origin.url("/hot.jpg");
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (client, base, source) = (app.client.clone(), app.url("/v1/image"), source.clone());
        tasks.push(tokio::spawn(async move {
            let mut url = reqwest::Url::parse(&base).unwrap();
            url.query_pairs_mut()
                .append_pair("url", &source)
                .append_pair("w", "300")
                .append_pair("format", "webp");
            let r = client.get(url).send().await.unwrap();
            (r.status().as_u16(), r.bytes().await.unwrap())
        }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 200);
        bodies.push(body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(origin.requests(), 1, "one download for 50 requests");
    assert_eq!(
        app.processing_runs(),
        1,
        "one processing run for 50 requests"
    );
}

#[tokio::test]
async fn option_order_and_spelled_out_defaults_name_one_variant() {
    let app = spawn_app().await;
    let (_origin, src) = Origin::serving("/b.jpg", jpeg(500, 500, 5)).await;
    let a = app.image_by_url(&src, "w=100&h=50&fit=cover").await;
    let b = app
        .image_by_url(
            &src,
            "fit=cover&h=50&w=100&gravity=center&q=82&format=original",
        )
        .await;
    let c = app
        .image_by_url(&src, "w=50&h=25&dpr=2&fit=cover&format=jpeg")
        .await;
    assert_eq!(header(&a, "etag"), header(&b, "etag"));
    assert_eq!(header(&a, "etag"), header(&c, "etag"));
    assert_eq!(header(&c, "x-imgcas-cache"), Some("hit"));
    assert_eq!(app.processing_runs(), 1);
    assert_eq!(dimensions(&a.bytes().await.unwrap()), (100, 50));
}

#[tokio::test]
async fn a_matching_if_none_match_gets_304() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/c.jpg", jpeg(200, 200, 6)).await;
    let first = app.image_from(&origin, "/c.jpg", "w=50").await;
    let etag = header(&first, "etag").unwrap().to_string();
    let mut url = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
    url.query_pairs_mut()
        .append_pair("url", &origin.url("/c.jpg"))
        .append_pair("w", "50");
    let r = app
        .client
        .get(url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(header(&r, "etag"), Some(etag.as_str()));
    assert!(header(&r, "cache-control").is_some());
    assert!(r.bytes().await.unwrap().is_empty());
}

#[tokio::test]
async fn format_auto_follows_accept_and_says_so_in_vary() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/d.jpg", jpeg(400, 300, 7)).await;
    let source = origin.url("/d.jpg");
    let url = app.image_url(&[("url", &source), ("w", "100"), ("format", "auto")]);
    let get = |accept: &'static str| app.client.get(url.clone()).header("accept", accept).send();
    let avif = get("image/avif,image/webp,image/*,*/*;q=0.8")
        .await
        .unwrap();
    let webp = get("image/webp,image/*,*/*;q=0.8").await.unwrap();
    let jpeg = get("image/*").await.unwrap();
    assert_eq!(header(&avif, "content-type"), Some("image/avif"));
    assert_eq!(header(&webp, "content-type"), Some("image/webp"));
    assert_eq!(header(&jpeg, "content-type"), Some("image/jpeg"));
    assert_eq!(header(&webp, "vary"), Some("Accept"));
    assert_eq!(header(&jpeg, "vary"), Some("Accept"));
    assert_ne!(header(&webp, "etag"), header(&jpeg, "etag"));
}

/// The request that started a download hangs up: the download goes on in the flight's own
/// task, the requests that come after it join it (one download in all), and the flights
/// gauge is back to 0 once it lands — also when no request came after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hang_up_neither_cancels_nor_repeats_a_shared_download() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let flights = |scrape: &prometheus_parse::Scrape, kind: &str| {
        metric_value(scrape, "imgcas_flights", &[("kind", kind)])
    };
    for (path, seed, followers) in [("/slow.jpg", 3, 10), ("/alone.jpg", 4, 0)] {
        origin.put_slow(path, jpeg(400, 300, seed), Some(Duration::from_secs(1)));
        let source = origin.url(path);
        let impatient = reqwest::Client::builder()
            .timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        let mut url = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
        url.query_pairs_mut()
            .append_pair("url", &source)
            .append_pair("w", "100");
        let hung_up = impatient.get(url).send().await;
        assert!(hung_up.is_err(), "the first client gave up after 100 ms");
        let during = app.metrics().await;
        assert_eq!(
            flights(&during, "download"),
            1.0,
            "{path}: the download goes on"
        );

        let mut later = Vec::new();
        for _ in 0..followers {
            let (client, u) = (app.client.clone(), {
                let mut u = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
                u.query_pairs_mut()
                    .append_pair("url", &source)
                    .append_pair("w", "100");
                u
            });
            later.push(tokio::spawn(async move {
                client.get(u).send().await.unwrap().status()
            }));
        }
        for handle in later {
            assert_eq!(handle.await.unwrap(), 200, "{path}");
        }
        // With no follower, wait for the download to land on its own.
        tokio::time::sleep(Duration::from_millis(if followers == 0 {
            1500
        } else {
            100
        }))
        .await;
        let after = app.metrics().await;
        assert_eq!(flights(&after, "download"), 0.0, "{path}");
        assert_eq!(flights(&after, "process"), 0.0, "{path}");
    }
    assert_eq!(
        origin.full(),
        2,
        "one download per URL, though two clients hung up"
    );
    assert_eq!(app.downloads(), 2);
    // The lonely download was stored: asking now needs no origin.
    let r = app.image_from(&origin, "/alone.jpg", "w=100").await;
    assert_eq!(r.status(), 200);
    assert_eq!(origin.full(), 2);
}

//! Every bad input gets docs/api.md's error shape and status, and permanent errors are cached like
//! results: a corrupt image is decoded once per spec, not once per request. An error the
//! configured limits decided is not: raising the limit lifts it.

use crate::common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn a_corrupt_image_is_422_once_and_an_error_hit_after() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let corrupt = corrupt_jpeg(400, 300, 1);
    origin.put("/broken.jpg", corrupt);

    let first = app.image_from(&origin, "/broken.jpg", "w=100").await;
    assert_eq!(first.status(), 422);
    assert_eq!(header(&first, "cache-control"), Some("public, max-age=300"));
    assert!(header(&first, "x-imgcas-source-hash").is_some());
    let body = json(first).await;
    assert_eq!(body["error"]["code"], "undecodable");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    assert_eq!(app.processing_runs(), 1);

    let second = app.image_from(&origin, "/broken.jpg", "w=100").await;
    assert_eq!(second.status(), 422);
    assert_eq!(header(&second, "x-imgcas-cache"), Some("error-hit"));
    assert_eq!(
        app.processing_runs(),
        1,
        "the cached error is served, not recomputed"
    );
}

#[tokio::test]
async fn bytes_that_are_no_image_are_415() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/page.jpg", b"<!doctype html><p>soft 404</p>".to_vec()).await;
    let r = app.image_from(&origin, "/page.jpg", "w=100").await;
    assert_eq!(r.status(), 415);
    assert_eq!(error_code_of(r).await, "unsupported_format");
}

#[tokio::test]
async fn bad_options_name_the_option() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/a.jpg", jpeg(100, 100, 2)).await;
    for (query, option) in [
        ("w=0", "w"),
        ("w=abc", "w"),
        ("fit=stretch", "fit"),
        ("format=bmp", "format"),
        ("q=101", "q"),
        ("foo=1", "foo"),
        ("rotate=45", "rotate"),
        // Issue 28: repeated options, `format=json` among them, and values over a bound by
        // less than the hundredth a value is kept in.
        ("format=json&format=webp", "format"),
        ("format=webp&format=json", "format"),
        ("w=10&w=20", "w"),
        ("blur=100.0000001", "blur"),
        ("blur=0.2999", "blur"),
        ("dpr=0.9999", "dpr"),
    ] {
        let r = app.image_by_url(&origin.url("/a.jpg"), query).await;
        assert_eq!(r.status(), 400, "{query}");
        let v = json(r).await;
        assert_eq!(v["error"]["code"], "invalid_option", "{query}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{option}`")),
            "{query}: {message}"
        );
    }
    assert_eq!(
        origin.requests(),
        0,
        "bad options are refused before any fetch"
    );

    for path in [
        "/v1/image?w=100",
        "/v1/image?url=file:///etc/passwd",
        "/v1/image?url=%20",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 400, "{path}");
        let v = json(r).await;
        assert_eq!(v["error"]["code"], "invalid_option");
        assert!(v["error"]["message"].as_str().unwrap().contains("`url`"));
    }
}

#[tokio::test]
async fn origin_failures_map_to_their_codes() {
    let app = spawn_app_with(|c| {
        c.fetch.timeout = Duration::from_millis(500);
        c.fetch.max_bytes = 50_000;
    })
    .await;
    let origin = Origin::start().await;
    origin.status("/gone.jpg", 410);
    origin.status("/boom.jpg", 500);
    origin.status("/forbidden.jpg", 403);
    origin.slow("/slow.jpg", Duration::from_secs(3));
    origin.put("/big.jpg", vec![0xFF; 100_000]);
    for (path, status, code) in [
        ("/missing.jpg", 404, "not_found"),
        ("/gone.jpg", 404, "not_found"),
        ("/boom.jpg", 502, "origin_error"),
        ("/forbidden.jpg", 502, "origin_error"),
        ("/slow.jpg", 504, "origin_timeout"),
        ("/big.jpg", 413, "source_too_large"),
    ] {
        let r = app.image_by_url(&origin.url(path), "w=10").await;
        assert_eq!(r.status(), status, "{path}");
        let cc = header(&r, "cache-control").unwrap().to_string();
        assert!(
            !cc.contains("31536000"),
            "{path}: errors are never cached for a year"
        );
        assert_eq!(error_code_of(r).await, code, "{path}");
    }
    // A closed port: connection refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = app
        .image_by_url(&format!("http://{closed}/x.jpg"), "w=10")
        .await;
    assert_eq!(r.status(), 502);
    assert_eq!(error_code_of(r).await, "origin_error");
}

#[tokio::test]
async fn limits_and_constraints_are_422() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    origin.put(
        "/lotta.jpg",
        std::fs::read("testdata/malicious/lottapixel.jpg").unwrap(),
    );
    origin.put(
        "/bomb.gif",
        std::fs::read("testdata/pillow/decompression_bomb.gif").unwrap(),
    );
    origin.put("/small.jpg", jpeg(300, 200, 3));
    for (path, query, code) in [
        ("/lotta.jpg", "w=10", "too_many_pixels"),
        ("/small.jpg", "min_w=1000", "source_too_small"),
        (
            "/small.jpg",
            "w=8000&h=8000&fit=fill&enlarge=1",
            "too_many_pixels",
        ),
    ] {
        let r = app.image_by_url(&origin.url(path), query).await;
        assert_eq!(r.status(), 422, "{path} {query}");
        assert_eq!(error_code_of(r).await, code, "{path} {query}");
    }
    // The bomb's giant is its first frame (its screen is 32x32): refused from the descriptor.
    let r = app.image_from(&origin, "/bomb.gif", "w=10").await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "too_many_pixels");
    // Not an error: AVIF output is built.
    let avif = app
        .image_from(&origin, "/small.jpg", "w=100&format=avif")
        .await;
    assert_eq!(avif.status(), 200);
    assert_eq!(header(&avif, "content-type"), Some("image/avif"));
}

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    for path in ["/healthz", "/readyz"] {
        let r = app.get(path).await;
        assert_eq!(r.status(), 200, "{path}");
    }
}

/// A refusal that the configured limits decided is not stored for good: with the limit raised
/// and the service restarted on the same data dir, the same URL and spec are served.
#[tokio::test]
async fn a_pixel_limit_refusal_is_lifted_by_raising_the_limit() {
    let origin = Origin::start_with("/big.jpg", jpeg(6000, 5000, 5)).await; // 30 MP
                                                                            // Both runs on one data dir, and (when the suite runs on S3) one bucket.
    let storage = Restartable::new().await;
    let app = storage.spawn(|c| c.limits.max_pixels = 20_000_000).await;
    let r = app.image_from(&origin, "/big.jpg", "w=100").await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "too_many_pixels");
    app.stop().await;

    let app = storage.spawn(|c| c.limits.max_pixels = 60_000_000).await;
    let r = app.image_from(&origin, "/big.jpg", "w=100").await;
    assert_eq!(r.status(), 200);
    assert_eq!(dimensions(&r.bytes().await.unwrap()).0, 100);
}

/// Issue 28: a request target over `limits.max_url_bytes` (8 KiB by default) answers 414
/// `url_too_long` before any lookup, by URL, by hash and on the admin routes alike; a source URL
/// within it that is longer once canonical is refused the same way; at the limit, it is served.
#[tokio::test]
async fn urls_over_the_limit_are_414() {
    let app = spawn_app().await;
    let origin = Origin::start_with("/ok.jpg", jpeg(40, 30, 1)).await;
    let fits = format!("{}?{}", origin.url("/ok.jpg"), "p".repeat(7_000));
    let r = app.image_by_url(&fits, "w=10").await;
    assert_eq!(r.status(), 200);

    let long = format!("{}?{}", origin.url("/ok.jpg"), "p".repeat(9_000));
    let r = app.image_by_url(&long, "w=10").await;
    assert_eq!(r.status(), 414);
    assert_eq!(header(&r, "cache-control"), Some("public, max-age=60"));
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "url_too_long");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("8192")));
    let r = app
        .get(&format!(
            "/v1/image/{}?w=10&x={}",
            "0".repeat(64),
            "q".repeat(9_000)
        ))
        .await;
    assert_eq!(r.status(), 414);
    assert_eq!(
        origin.requests(),
        1,
        "only the one within the limit was fetched"
    );
}

/// Issue 28: a spec implying more work than `limits.max_cost` (an 8192 × 6000 GIF or lossless
/// WebP made from a tiny PNG: 37 s and 20 s of a core before) answers 422 `too_costly` before
/// any decode, and is not cached (raising the limit lifts it); the same spec at a size within
/// the limit, blur and sharpen at their largest included, is made.
#[tokio::test]
async fn specs_over_the_cost_limit_are_422_too_costly_before_any_decode() {
    let app = spawn_app().await;
    let (_origin, source) = Origin::serving("/tiny.png", png(12, 9, 3)).await;
    for format in ["format=gif", "format=webp&lossless=1"] {
        let query = format!("w=8192&h=6000&fit=fill&enlarge=1&{format}");
        for _ in 0..2 {
            let r = app.image_by_url(&source, &query).await;
            assert_eq!(r.status(), 422, "{query}");
            assert_ne!(header(&r, "x-imgcas-cache"), Some("error-hit"), "{query}");
            let v = json(r).await;
            assert_eq!(v["error"]["code"], "too_costly", "{query}");
        }
    }
    assert_eq!(app.processing_runs(), 0, "refused before any run");
    let r = app
        .image_by_url(
            &source,
            "w=1200&h=900&fit=fill&enlarge=1&blur=100&sharpen=100&format=jpeg",
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (1200, 900));
}

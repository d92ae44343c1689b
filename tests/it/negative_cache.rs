//! Each class of error is cached for its own lifetime, and says so in `Cache-Control`:
//! bad bytes per hash + spec (for good), a gone URL for minutes, a failing origin for seconds
//! with backoff (or as long as its `Retry-After` asks).

use crate::common;

use std::time::Duration;

use common::*;

fn max_age(r: &reqwest::Response) -> u64 {
    let cc = header(r, "cache-control").expect("Cache-Control");
    cc.split(',')
        .find_map(|d| d.trim().strip_prefix("max-age="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no max-age in {cc:?}"))
}

fn retry_after(r: &reqwest::Response) -> Option<u64> {
    header(r, "retry-after").and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn a_gone_url_is_held_for_minutes_without_origin_traffic() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    origin.status("/gone.jpg", 410);
    let url = origin.url("/gone.jpg");

    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 404);
    assert_eq!(
        header(&r, "x-imgcas-cache"),
        None,
        "the first answer is fresh"
    );
    let age = max_age(&r);
    assert!((100..=120).contains(&age), "minutes, got {age}");
    assert_eq!(error_code_of(r).await, "not_found");

    // Other specs of the same URL: the origin is not asked again.
    for spec in ["w=40", "w=80", "format=webp"] {
        let r = app.image_by_url(&url, spec).await;
        assert_eq!(r.status(), 404);
        assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));
        assert!(max_age(&r) <= 120);
    }
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn a_flapping_origin_is_retried_with_exponential_backoff() {
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::ZERO).await;
    let origin = Origin::start().await;
    origin.status("/flap.jpg", 503);
    let url = origin.url("/flap.jpg");

    // First failure: held 1 s.
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 502);
    assert_eq!(retry_after(&r), Some(1));
    assert_eq!(max_age(&r), 1);
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 502);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));
    assert_eq!(origin.requests(), 1, "held: no second origin request");

    // Second failure in a row: held 2 s.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 502);
    assert_eq!(retry_after(&r), Some(2));
    assert_eq!(origin.requests(), 2);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));
    assert_eq!(origin.requests(), 2, "still inside the 2 s backoff");

    // Third: 4 s. Then the origin comes back and a success ends the streak.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(retry_after(&r), Some(4));
    assert_eq!(origin.requests(), 3);
    origin.put("/flap.jpg", jpeg(200, 150, 7));
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 200);
    assert_eq!(origin.requests(), 4);

    // It fails again: the stored mapping is served stale, and the backoff starts over at 1 s.
    origin.status("/flap.jpg", 500);
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("stale"));
    let (failure, held) = app.pipeline.origin_failure(&url).expect("held");
    assert_eq!(failure.streak, 1);
    assert!(held <= Duration::from_secs(1));
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("stale"));
    assert_eq!(
        origin.requests(),
        5,
        "stale while held, without asking the origin"
    );
}

#[tokio::test]
async fn a_rate_limited_origin_gets_the_pause_it_asks_for() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    origin.status_retry_after("/busy.jpg", 429, "30");
    let url = origin.url("/busy.jpg");
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(r.status(), 502);
    assert_eq!(retry_after(&r), Some(30));
    assert_eq!(max_age(&r), 30);
    assert_eq!(error_code_of(r).await, "origin_error");
    let r = app.image_by_url(&url, "w=40").await;
    assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));
    assert!(retry_after(&r).is_some_and(|s| (28..=30).contains(&s)));
    assert_eq!(origin.requests(), 1);
}

#[tokio::test]
async fn bad_bytes_are_cached_per_hash_and_spec_behind_every_url() {
    let app = spawn_app().await;
    let origin = Origin::start().await;
    let corrupt = corrupt_jpeg(400, 300, 9);
    origin.put("/a.jpg", corrupt.clone());
    origin.put("/b.jpg", corrupt);
    let r = app.image_from(&origin, "/a.jpg", "w=40").await;
    assert_eq!(r.status(), 422);
    let age = max_age(&r);
    assert!((60..=3600).contains(&age), "short, not a year: {age}");
    // Same bytes behind another URL, same spec: the stored error, no second run.
    let r = app.image_from(&origin, "/b.jpg", "w=40").await;
    assert_eq!(r.status(), 422);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("error-hit"));
    assert_eq!(app.processing_runs(), 1);
    // Another spec is another result: processed (and failed) once more.
    let r = app.image_from(&origin, "/b.jpg", "w=80").await;
    assert_eq!(r.status(), 422);
    assert_eq!(app.processing_runs(), 2);
}

//! `/metrics` is valid Prometheus text (parsed by a Prometheus text-format parser) and its
//! series move with the work done.

use crate::common;

use common::metric_value as value;
use common::*;

#[tokio::test]
async fn counters_follow_the_work() {
    let app = spawn_app().await;
    let bytes = jpeg(320, 240, 11);
    let origin = Origin::start_with("/a.jpg", bytes.clone()).await;
    origin.put("/same.jpg", bytes.clone());

    let before = app.metrics().await;
    assert_eq!(value(&before, "imgcas_processing_runs_total", &[]), 0.0);

    assert_eq!(app.image_from_status(&origin, "/a.jpg", "w=50").await, 200);
    assert_eq!(app.image_from_status(&origin, "/a.jpg", "w=50").await, 200);
    // The same bytes behind another URL: downloaded, not stored again.
    assert_eq!(
        app.image_from_status(&origin, "/same.jpg", "w=50").await,
        200
    );
    assert_eq!(
        app.image_from_status(&origin, "/nothing.jpg", "w=50").await,
        404
    );
    assert_eq!(
        app.upload(bytes.clone()).await.status(),
        200,
        "already stored"
    );

    let m = app.metrics().await;
    let image_ok = [("route", "/v1/image"), ("method", "GET"), ("status", "200")];
    assert_eq!(value(&m, "imgcas_http_requests_total", &image_ok), 3.0);
    assert_eq!(
        value(
            &m,
            "imgcas_http_requests_total",
            &[("route", "/v1/image"), ("status", "404")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            "imgcas_http_requests_total",
            &[("route", "/v1/originals"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        value(&m, "imgcas_cache_outcomes_total", &[("outcome", "miss")]),
        2.0
    );
    assert_eq!(
        value(&m, "imgcas_cache_outcomes_total", &[("outcome", "hit")]),
        1.0
    );
    assert_eq!(value(&m, "imgcas_processing_runs_total", &[]), 1.0);
    assert_eq!(value(&m, "imgcas_origin_downloads_total", &[]), 2.0);
    assert_eq!(value(&m, "imgcas_originals_stored_total", &[]), 1.0);
    let saved = value(&m, "imgcas_dedup_bytes_saved_total", &[]);
    assert_eq!(
        saved,
        2.0 * bytes.len() as f64,
        "one download and one upload deduplicated"
    );
    assert_eq!(value(&m, "imgcas_processing_seconds_count", &[]), 1.0);
    assert_eq!(value(&m, "imgcas_queue_wait_seconds_count", &[]), 1.0);
    assert_eq!(
        value(
            &m,
            "imgcas_http_request_duration_seconds_count",
            &[("route", "/v1/image")]
        ),
        4.0
    );
    assert_eq!(value(&m, "imgcas_admission_rejections_total", &[]), 0.0);
    assert_eq!(value(&m, "imgcas_coalesced_waiters", &[]), 0.0);
    assert!(value(&m, "imgcas_hot_cache_bytes", &[]) > 0.0);
    // The hit and the same-bytes request were served from memory, not from the variants map.
    assert_eq!(value(&m, "imgcas_hot_cache_hits_total", &[]), 2.0);
    assert_eq!(value(&m, "imgcas_variant_map_reads_total", &[]), 1.0);
}

/// The label sets of `imgcas_http_requests_total`, read from the raw page.
async fn request_series(app: &TestApp) -> Vec<String> {
    let r = app.get("/metrics").await;
    let text = r.text().await.unwrap();
    let mut series: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("imgcas_http_requests_total{"))
        .filter_map(|l| l.rsplit_once('}').map(|(labels, _)| labels.to_string()))
        .collect();
    series.sort();
    series
}

#[tokio::test]
async fn invented_methods_and_paths_add_no_series() {
    let app = spawn_app().await;
    let send = |method: String, path: String| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        app.client.request(method, app.url(&path)).send()
    };
    for path in ["/v1/image", "/healthz", "/no/such/route"] {
        send("BREW".into(), path.into()).await.unwrap();
    }
    request_series(&app).await; // the page's own GET /metrics series, from here on
    let before = request_series(&app).await;
    for i in 0..50 {
        for path in [
            "/v1/image".to_string(),
            "/healthz".into(),
            format!("/invented/{i}"),
        ] {
            send(format!("X-INVENTED-{i}"), path).await.unwrap();
        }
    }
    let after = request_series(&app).await;
    assert_eq!(before, after, "no new series");
    for labels in &after {
        let method = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("method=\""))
            .map(|v| v.trim_end_matches('"'))
            .unwrap_or_else(|| panic!("a method label in {labels}"));
        assert!(
            ["GET", "HEAD", "POST", "DELETE", "other"].contains(&method),
            "{labels}"
        );
    }
}

//! The hit path's request cache (issue 15): a repeated request skips finding its variant
//! again, yet never answers with what its URL no longer names — a push that remaps the URL,
//! or the end of the mapping's freshness, ends what was remembered. And remembering changes
//! no answer: headers, `304`s and `Vary` are those of the first request.

use crate::common;

use std::time::Duration;

use common::*;
use imgcas::stats::StatsSnapshot;

#[tokio::test]
async fn a_remap_by_ingest_ends_the_remembered_request() {
    let (origin, source) = Origin::serving("/p.jpg", jpeg(300, 200, 1)).await;
    let app = spawn_app().await;

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
        .post_json("/v1/ingest", &serde_json::json!({ "urls": [source] }))
        .await;
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
    let (origin, source) = Origin::serving("/q.jpg", jpeg(300, 200, 3)).await;
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::from_secs(1)).await;
    assert_eq!(app.image_status(&source, "w=80").await, 200);
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

/// The answer of a remembered hit (made before the router, `http/front.rs`) is the router's
/// answer, header for header, and is counted as a routed hit is.
#[tokio::test]
async fn remembered_hits_answer_and_count_as_routed_hits_do() {
    let (_origin, source) = Origin::serving("/q.jpg", jpeg(320, 240, 3)).await;
    let app = spawn_app().await;
    let made = app.image_by_url(&source, "w=90&format=webp").await;
    assert_eq!(header(&made, "x-imgcas-cache"), Some("miss"));
    let hash = header(&made, "x-imgcas-source-hash").unwrap().to_string();
    let by_hash = format!("/v1/image/{hash}?w=90&format=webp");
    let routed_by_hash = app.get(&by_hash).await; // resolved by the router, then remembered
                                                  // Read from the text: the braces of `{hash}` are beyond prometheus_parse.
    let counted = |text: &str, route: &str| -> f64 {
        let series = format!(
            "imgcas_http_requests_total{{route=\"{route}\",method=\"GET\",status=\"200\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    };
    let base = app.url("");
    let scrape = || metrics_text(&app.client, &base);
    let before = scrape().await;
    let hits_before = app.stats().hot_hits;
    // by URL: the first answer was a miss; the second was resolved by the router and is a hit.
    let routed_by_url = app.image_by_url(&source, "w=90&format=webp").await;
    let front_by_url = app.image_by_url(&source, "w=90&format=webp").await;
    let front_by_hash = app.get(&by_hash).await;
    for (routed, front) in [
        (routed_by_url, front_by_url),
        (routed_by_hash, front_by_hash),
    ] {
        assert_eq!(front.status(), 200);
        assert_eq!(answer_headers(&front), answer_headers(&routed));
        assert_eq!(header(&front, "x-imgcas-cache"), Some("hit"));
        assert_eq!(front.bytes().await.unwrap(), routed.bytes().await.unwrap());
    }
    let after = scrape().await;
    assert_eq!(
        counted(&after, "/v1/image") - counted(&before, "/v1/image"),
        2.0
    );
    assert_eq!(
        counted(&after, "/v1/image/{hash}") - counted(&before, "/v1/image/{hash}"),
        1.0
    );
    assert_eq!(app.stats().hot_hits - hits_before, 3);
}

/// A remembered request keeps a weak link to its variant in the hot cache: answered from memory
/// without a variants-map read while linked, and the same answer, with at most one read, once
/// other variants crowd the hot cache (it may let this one go: then the routed path reads it
/// back and the link is made anew).
#[tokio::test]
async fn a_remembered_hit_outlives_its_variant_leaving_the_hot_cache() {
    let origin = Origin::start_with("/h.jpg", jpeg(400, 300, 5)).await;
    // Room for about one variant of these in memory.
    let app = spawn_app_with(|c| c.limits.hot_cache_bytes = 24 << 10).await;
    let source = origin.url("/h.jpg");
    let spec = "w=120&format=png";
    let first = app.image_by_url(&source, spec).await;
    assert_eq!(header(&first, "x-imgcas-cache"), Some("miss"));
    let (etag, body) = (
        header(&first, "etag").unwrap().to_string(),
        first.bytes().await.unwrap(),
    );
    let remembered = app.image_by_url(&source, spec).await; // routed, then remembered
    assert_eq!(remembered.bytes().await.unwrap(), body);
    let from_memory = |stats: &StatsSnapshot| (stats.hot_hits, stats.variant_map_reads);
    let before = from_memory(&app.stats());
    let linked = app.image_by_url(&source, spec).await;
    assert_eq!(linked.bytes().await.unwrap(), body);
    let after = from_memory(&app.stats());
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 0));

    // Other variants, asked for more often (the hot cache admits by frequency), push it out.
    for w in 200..206 {
        for _ in 0..8 {
            let other = app
                .image_by_url(&source, &format!("w={w}&format=png"))
                .await;
            assert_eq!(other.status(), 200);
        }
    }
    let mut reads = Vec::new();
    for _ in 0..3 {
        let before = from_memory(&app.stats());
        let r = app.image_by_url(&source, spec).await;
        assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
        assert_eq!(header(&r, "etag"), Some(etag.as_str()));
        assert_eq!(r.bytes().await.unwrap(), body);
        let after = from_memory(&app.stats());
        reads.push(after.1 - before.1);
    }
    assert!(reads.iter().sum::<u64>() <= 1, "{reads:?}");
    assert_eq!(reads[1..], [0, 0], "from memory again: {reads:?}");
}

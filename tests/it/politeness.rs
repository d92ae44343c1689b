//! Issue 54 on one node (the embedded maps keep the quotas in the process's memory): an
//! origin's request rate, a pause its `Retry-After` asks for, a pause for connections it
//! refuses, tenant budgets, concurrent misses of a stored variant read once, and the learned
//! cost model's readings. (Three nodes on PostgreSQL: `cluster.rs`.)

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use imgcas::config::TenantBudget;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origins_request_rate_holds_and_a_pause_it_asks_for_is_kept() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| {
        c.fetch.per_host_rate = 4.0;
        c.fetch.per_host_concurrency = 8;
    })
    .await;
    for i in 0..12u8 {
        origin.put(&format!("/r{i}.jpg"), jpeg(64, 48, i));
    }
    let mut requests = Vec::new();
    for i in 0..12u8 {
        let (client, url) = (app.client.clone(), app.url("/v1/image"));
        let source = origin.url(&format!("/r{i}.jpg"));
        requests.push(tokio::spawn(async move {
            let mut url = reqwest::Url::parse(&url).unwrap();
            url.query_pairs_mut()
                .append_pair("url", &source)
                .append_pair("w", "32");
            let r = client.get(url).send().await.unwrap();
            r.status().as_u16()
        }));
    }
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    // A burst of one second's worth (4), then 4 a second.
    let most = origin.most_within(Duration::from_secs(1));
    assert!(most <= 8, "{most} requests within a second at 4 a second");
    assert_eq!(origin.requests(), 12);

    // The origin asks for a 2 s pause: no request of this node reaches it meanwhile, for
    // any of its URLs, and those requests answer at once with the time left.
    origin.status_retry_after("/busy.jpg", 429, "2");
    let r = app.image_from(&origin, "/busy.jpg", "w=32").await;
    assert_eq!(r.status(), 502);
    // (The pause runs from the origin's answer, which may have waited for the rate.)
    let asked = Instant::now();
    origin.put("/after.jpg", jpeg(64, 48, 99));
    let before = origin.requests();
    let r = app.image_from(&origin, "/after.jpg", "w=32").await;
    assert_eq!(r.status(), 502, "paused");
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    assert_eq!(origin.requests(), before, "nothing sent while paused");
    tokio::time::sleep(Duration::from_millis(2200).saturating_sub(asked.elapsed())).await;
    // The paused request's URL is held as that failure for its time: another one goes now.
    origin.put("/later.jpg", jpeg(64, 48, 98));
    let r = app.image_from(&origin, "/later.jpg", "w=32").await;
    let status = r.status();
    assert_eq!(
        status,
        200,
        "the pause is over: {}",
        r.text().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_that_refuses_connections_is_paused() {
    // A port nothing listens on: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let app = spawn_app().await;
    for i in 0..3 {
        let r = app
            .image_by_url(&format!("http://127.0.0.1:{port}/{i}.jpg"), "w=10")
            .await;
        assert_eq!(r.status(), 502);
    }
    let scrape = app.metrics().await;
    let origin = format!("http://127.0.0.1:{port}");
    assert_eq!(
        metric_value(
            &scrape,
            "imgcas_origin_pauses_total",
            &[("origin", &origin), ("reason", "refused")]
        ),
        1.0,
        "the third refusal in a row pauses the origin"
    );
    let r = app
        .image_by_url(&format!("http://127.0.0.1:{port}/3.jpg"), "w=10")
        .await;
    assert_eq!(r.status(), 502);
    assert!(header(&r, "retry-after").is_some());
    let scrape = app.metrics().await;
    assert_eq!(
        metric_value(
            &scrape,
            "imgcas_origin_paused_total",
            &[("origin", &origin)]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_over_its_budget_waits_and_hits_never_spend() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| {
        // Every anonymous client on its own bucket: 1,000 units at once, 1,000 a second,
        // so one run takes it far below zero (waits of up to 600 s allowed).
        c.tenants.insert(
            "default".into(),
            TenantBudget {
                rate: 1000.0,
                burst: 1000.0,
                anonymous: false,
            },
        );
        c.limits.max_budget_wait = Duration::from_secs(600);
    })
    .await;
    origin.put("/a.jpg", jpeg(320, 240, 1));
    let source = origin.url("/a.jpg");
    let r = app.image_by_url(&source, "w=100").await;
    assert_eq!(r.status(), 200, "the first run spends the budget");
    let r = app.image_by_url(&source, "w=120").await;
    assert_eq!(r.status(), 429);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(retry >= 2, "{retry}");
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "over_budget");
    // A hit is served whatever the budget.
    let r = app.image_by_url(&source, "w=100").await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.processing_runs(), 1);
    let scrape = app.metrics().await;
    assert_eq!(
        anonymous_metric(&scrape, "imgcas_tenant_over_budget_total"),
        1.0
    );
    assert!(anonymous_metric(&scrape, "imgcas_tenant_spent_units_total") > 1000.0);
    // A batch from another client (a budget of its own under `default`) is charged its
    // downloads, byte for byte: the first item's spends the budget, and the next batch's
    // item is refused before it downloads.
    origin.put("/b1.jpg", jpeg(320, 240, 2));
    origin.put("/b2.jpg", jpeg(320, 240, 3));
    let other = client_from("127.0.0.2");
    let batch = |url: String| {
        let (other, endpoint) = (other.clone(), app.url("/v1/ingest"));
        async move {
            let r = other
                .post(endpoint)
                .header("content-type", "application/json")
                .body(serde_json::json!({ "urls": [url] }).to_string())
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), json(r).await)
        }
    };
    let (status, answer) = batch(origin.url("/b1.jpg")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["status"], "new", "{answer}");
    let full = origin.full();
    let (_, answer) = batch(origin.url("/b2.jpg")).await;
    assert_eq!(
        answer["results"][0]["error"]["code"], "over_budget",
        "{answer}"
    );
    assert_eq!(origin.full(), full, "nothing downloaded over budget");
    // The same tenant asking by hash is refused its runs too.
    let hash = imgcas::hash::ContentHash::of(&jpeg(320, 240, 2));
    let r = app.get(&format!("/v1/image/{hash}?w=90")).await;
    assert_eq!(r.status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_download_waiting_for_a_slot_is_not_timed_out_by_the_fetch_timeout() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| {
        c.fetch.per_host_concurrency = 1;
        c.fetch.timeout = Duration::from_millis(1000);
    })
    .await;
    // Two downloads of 700 ms each through one slot: the second waits 700 ms, then takes
    // 700 ms itself, 1.4 s after it was asked for and within its own 1 s.
    for i in 0..2u8 {
        origin.put_slow(
            &format!("/w{i}.jpg"),
            jpeg(64, 48, i),
            Some(Duration::from_millis(700)),
        );
    }
    let (first, second) = (origin.url("/w0.jpg"), origin.url("/w1.jpg"));
    let (a, b) = tokio::join!(
        app.image_by_url(&first, "w=32"),
        app.image_by_url(&second, "w=32"),
    );
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert_eq!(origin.max_in_flight(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_of_a_stored_variant_read_it_once_and_the_cost_model_learns() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| c.limits.hot_cache_bytes = 0).await;
    origin.put("/h.jpg", jpeg(320, 240, 7));
    let source = origin.url("/h.jpg");
    assert_eq!(app.image_status(&source, "w=100").await, 200);
    // Fifty connections opened first, so that the fifty requests below leave at once over
    // open connections rather than spread over fifty handshakes.
    let opened = (0..50).map(|_| app.client.get(app.url("/healthz")).send());
    for r in futures_util::future::join_all(opened).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    let reads_before = app.stats().variant_map_reads;
    let mut requests = Vec::new();
    // All fifty sent at once (each waits for the others to be ready).
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    for _ in 0..50 {
        let (client, url, source) = (app.client.clone(), app.url("/v1/image"), source.clone());
        let together = together.clone();
        requests.push(tokio::spawn(async move {
            let mut url = reqwest::Url::parse(&url).unwrap();
            url.query_pairs_mut()
                .append_pair("url", &source)
                .append_pair("w", "100");
            together.wait().await;
            client
                .get(url)
                .header("cache-control", "no-cache")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    let reads = app.stats().variant_map_reads - reads_before;
    // Requests that meet a read in flight share it; one arriving after it ended reads again.
    // Measured 1 to 13 here over open connections, 1 to 4 with the cores kept busy (27 in
    // one CI run when each request opened its own connection); each reading alone: 50.
    assert!(reads <= 20, "{reads} reads for 50 concurrent misses");
    // Runs of two classes: the model names them (source, output and operation) and compares
    // its estimates.
    for (i, q) in ["w=60&format=webp", "w=61&format=avif", "w=62&format=webp"]
        .iter()
        .enumerate()
    {
        let r = app.image_by_url(&source, q).await;
        assert_eq!(r.status(), 200, "{i}");
    }
    let scrape = app.metrics().await;
    assert!(metric_value(&scrape, "imgcas_run_estimates_total", &[]) >= 4.0);
    assert_eq!(
        metric_value(
            &scrape,
            "imgcas_cost_class_runs_total",
            &[("class", "jpeg>webp:still")]
        ),
        2.0
    );
}

/// `/v1/image?url=<source>&w=32` on the app at `base` (`app.url("/v1/image")`), for a
/// request sent from a task of its own.
fn image_url(base: &str, source: &str) -> reqwest::Url {
    let mut url = reqwest::Url::parse(base).unwrap();
    url.query_pairs_mut()
        .append_pair("url", source)
        .append_pair("w", "32");
    url
}

/// Issue 67, finding 6: origin A redirects to B, and B asks for a 10-minute pause. B is the
/// origin paused (its own URLs answer at once, unsent), not A; a redirect to B from A is not
/// followed while B's pause lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_asked_through_a_redirect_is_the_answering_origins() {
    let (a, b) = (Origin::start().await, Origin::start().await);
    let app = spawn_app().await;
    a.redirect("/r.jpg", &b.url("/busy.jpg"));
    b.status_retry_after("/busy.jpg", 429, "600");
    let r = app.image_by_url(&a.url("/r.jpg"), "w=32").await;
    assert_eq!(r.status(), 502);

    // B's own URLs: not sent, with the time left.
    b.put("/own.jpg", jpeg(64, 48, 1));
    let before = b.requests();
    let r = app.image_by_url(&b.url("/own.jpg"), "w=32").await;
    assert_eq!(r.status(), 502, "B is paused");
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(retry > 500, "{retry}");
    assert_eq!(b.requests(), before, "nothing sent to B while paused");

    // A's own URLs are served.
    a.put("/own.jpg", jpeg(64, 48, 2));
    let r = app.image_by_url(&a.url("/own.jpg"), "w=32").await;
    assert_eq!(r.status(), 200, "A is not paused");

    // Another of A's redirects to B stops before B.
    a.redirect("/r2.jpg", &b.url("/own.jpg"));
    let r = app.image_by_url(&a.url("/r2.jpg"), "w=32").await;
    assert_eq!(r.status(), 502);
    assert_eq!(
        b.requests(),
        before,
        "a redirect does not reach a paused origin"
    );

    let scrape = app.metrics().await;
    let label = |o: &Origin| format!("http://{}", o.addr);
    let pauses = |o: &Origin| {
        metric_value(
            &scrape,
            "imgcas_origin_pauses_total",
            &[("origin", &label(o)), ("reason", "retry_after")],
        )
    };
    assert_eq!((pauses(&a), pauses(&b)), (0.0, 1.0));
}

/// Issue 67, finding 7: a download waiting for a slot (the node's only one, held by an
/// origin that is slow to send) gives up at its request's deadline with the fetch timeout's
/// answer, 504 `origin_timeout`, a batch's item included, instead of waiting as long as the
/// slot is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_download_waiting_for_a_slot_ends_at_the_requests_deadline() {
    let (slow, other) = (Origin::start().await, Origin::start().await);
    let app = spawn_app_with(|c| {
        c.fetch.concurrency = 1;
        c.fetch.timeout = Duration::from_secs(6);
        c.fetch.min_rate = 0;
        c.server.request_timeout = Duration::from_secs(1);
    })
    .await;
    slow.drip("/d.jpg", jpeg(64, 48, 1), Duration::from_millis(20));
    other.put("/e.jpg", jpeg(64, 48, 2));
    other.put("/f.jpg", jpeg(64, 48, 3));
    let holder = {
        let (client, url) = (app.client.clone(), app.url("/v1/image"));
        let source = slow.url("/d.jpg");
        tokio::spawn(async move { client.get(image_url(&url, &source)).send().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(slow.requests(), 1, "the slot is held");

    let asked = Instant::now();
    let r = app.image_by_url(&other.url("/e.jpg"), "w=32").await;
    let took = asked.elapsed();
    assert_eq!(r.status(), 504, "after {took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(error_code_of(r).await, "origin_timeout");

    // A batch is spared the request limit, not the wait's bound.
    let asked = Instant::now();
    let (status, answer) =
        crate::ingest::ingest(&app, serde_json::json!({ "urls": [other.url("/f.jpg")] })).await;
    let took = asked.elapsed();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["results"][0]["error"]["code"], "origin_timeout",
        "{answer}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(other.requests(), 0, "nothing was sent");
    holder.abort();
}

/// Issue 67, finding 7: one origin, however many of its URLs are asked for at once, holds at
/// most its share of the node's download slots (`fetch.origin_share`, half), so another
/// origin's download starts at once even when that origin sends slowly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_slow_origin_holds_at_most_its_share_of_the_pool() {
    let (slow, fast) = (Origin::start().await, Origin::start().await);
    let app = spawn_app_with(|c| {
        c.fetch.concurrency = 4;
        c.fetch.per_host_concurrency = 8;
        c.fetch.timeout = Duration::from_secs(4);
        c.fetch.min_rate = 0;
    })
    .await;
    let mut held = Vec::new();
    for i in 0..4u8 {
        let path = format!("/s{i}.jpg");
        slow.drip(&path, jpeg(64, 48, i), Duration::from_millis(20));
        let (client, url, source) = (app.client.clone(), app.url("/v1/image"), slow.url(&path));
        held.push(tokio::spawn(async move {
            client.get(image_url(&url, &source)).send().await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(slow.requests(), 2, "half of four slots");
    fast.put("/f.jpg", jpeg(64, 48, 9));
    let asked = Instant::now();
    let r = app.image_by_url(&fast.url("/f.jpg"), "w=32").await;
    assert_eq!(r.status(), 200);
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    for h in held {
        h.abort();
    }
}

/// Issue 67, finding 7: an origin that drips its body (a byte every 50 ms) is cut off after
/// the body's first second, under `fetch.min_rate`, with 504 `origin_timeout`, instead of
/// holding its slot for `fetch.timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dripping_body_is_cut_off_after_its_first_second() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| c.fetch.timeout = Duration::from_secs(8)).await;
    origin.drip("/d.jpg", jpeg(64, 48, 1), Duration::from_millis(50));
    let asked = Instant::now();
    let r = app.image_from(&origin, "/d.jpg", "w=32").await;
    let took = asked.elapsed();
    assert_eq!(r.status(), 504);
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "origin_timeout");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("bytes/s"), "{message}");
}

/// Issue 67, finding 7 as the audit saw it: four origins dripping their bodies fill the
/// node's download slots; a fifth origin's download waits only until the drips are cut off
/// (about a second), not for `fetch.timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_dripping_origins_do_not_starve_a_fifth() {
    let mut drips = Vec::new();
    for _ in 0..4 {
        drips.push(Origin::start().await);
    }
    let app = spawn_app_with(|c| {
        c.fetch.concurrency = 4;
        c.fetch.timeout = Duration::from_secs(8);
    })
    .await;
    let mut held = Vec::new();
    for (i, origin) in drips.iter().enumerate() {
        origin.drip("/d.jpg", jpeg(64, 48, i as u8), Duration::from_millis(50));
        let (client, url) = (app.client.clone(), app.url("/v1/image"));
        let source = origin.url("/d.jpg");
        held.push(tokio::spawn(async move {
            let r = client.get(image_url(&url, &source)).send().await.unwrap();
            r.status().as_u16()
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(drips.iter().all(|o| o.requests() == 1), "four slots held");
    let fifth = Origin::start().await;
    fifth.put("/f.jpg", jpeg(64, 48, 9));
    let asked = Instant::now();
    let r = app.image_by_url(&fifth.url("/f.jpg"), "w=32").await;
    let took = asked.elapsed();
    assert_eq!(r.status(), 200);
    assert!(took < Duration::from_millis(2500), "{took:?}");
    for h in held {
        assert_eq!(h.await.unwrap(), 504, "each drip cut off");
    }
}

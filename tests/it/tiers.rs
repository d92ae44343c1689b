//! Admission's tiers and tenants through HTTP (issue 32): under pressure a batch is refused
//! before any of its work (503 `overloaded` with `Retry-After`, counted for the bulk tier)
//! while image requests keep their turn, `imgcas ingest --server` waits out the
//! `Retry-After` and finishes; and one tenant's burst of cold work does not make another
//! tenant's request wait behind it.
//!
//! The pressure is real processing: an SVG whose filters cost seconds of CPU at 400×400
//! pixels, on one CPU slot (charged what it costs since audit #3, so the next image request
//! is refused for its estimated wait, which sheds batches as a standing queue does).

use crate::common;

use std::time::{Duration, Instant};

use common::*;

/// 400×400 pixels whose filters (a wide dilation, per shape) take seconds to draw.
fn slow_svg(shapes: usize) -> Vec<u8> {
    let mut svg = String::from(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="400" height="400"><defs><filter id="b" x="-50%" y="-50%" width="200%" height="200%"><feGaussianBlur stdDeviation="40"/><feMorphology operator="dilate" radius="30"/><feGaussianBlur stdDeviation="40"/></filter></defs>"##,
    );
    for i in 0..shapes {
        svg.push_str(&format!(
            r##"<rect x="{i}" y="{i}" width="300" height="300" fill="#{:02x}8040" filter="url(#b)"/>"##,
            (i * 37) % 256
        ));
    }
    svg.push_str("</svg>");
    svg.into_bytes()
}

/// `/v1/image?url=<source>&<query>` on the app.
fn image_url(app: &TestApp, source: &str, query: &str) -> String {
    let mut url = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
    url.query_pairs_mut().append_pair("url", source);
    format!("{url}&{query}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_pressure_a_batch_is_shed_first_and_the_cli_waits_it_out() {
    let origin = Origin::start_with("/slow.svg", slow_svg(3)).await;
    origin.put("/item.jpg", jpeg(400, 300, 9));
    let app = spawn_app_with(|c| {
        c.limits.process_concurrency = 1;
        c.limits.queue_target = Duration::from_millis(100);
    })
    .await;
    let slow = origin.url("/slow.svg");
    // The source is downloaded first (a batch without warm specs: no processing run, whose
    // time would teach admission what this SVG costs), so what follows is processing only.
    let r = app
        .client
        .post(app.url("/v1/ingest"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"urls": ["{slow}"]}}"#))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // One run takes the slot for seconds; the next image request cannot be served in time:
    // interactive demand is over capacity.
    let running = {
        let (client, url) = (
            app.client.clone(),
            image_url(&app, &slow, "w=400&format=png"),
        );
        tokio::spawn(async move { client.get(url).send().await.unwrap().status() })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    let waited = app.image_by_url(&slow, "w=399&format=png").await;
    assert_eq!(waited.status(), 503);
    // Refused at once for the wait it would have had (the drawing's cost is known before it
    // runs since audit #3), or, admitted, for waiting past twice the target.
    let message = error_message_of(waited).await;
    assert!(
        message.contains("estimated wait") || message.contains("waited too long"),
        "{message}"
    );

    // A batch now is refused before any of its work, with when to come back.
    let requests = origin.requests();
    let r = app
        .client
        .post(app.url("/v1/ingest"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"urls": ["{}"], "warm": ["w=50"]}}"#,
            origin.url("/item.jpg")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let retry_after: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    assert_eq!(error_code_of(r).await, "overloaded");
    assert_eq!(origin.requests(), requests, "nothing of the batch was done");
    let scrape = app.metrics().await;
    let shed = metric_value(
        &scrape,
        "imgcas_admission_rejections_total",
        &[("reason", "shed_for_interactive"), ("tier", "bulk")],
    );
    assert_eq!(shed, 1.0);

    // The command line, started while the batch is refused, waits out the Retry-After and
    // finishes once the pressure is gone.
    let base = app.url("/");
    let item = origin.url("/item.jpg");
    let started = Instant::now();
    let cli = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        binary::run(
            dir.path(),
            &[],
            &["ingest", "--server", &base, "--warm", "w=50", &item],
        )
    });
    assert_eq!(running.await.unwrap(), 200, "the interactive run finished");
    let (code, out) = cli.await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("new"), "{out}");
    eprintln!(
        "the command finished {:?} after it started",
        started.elapsed()
    );
    let tenants = app.metrics().await;
    let bulk_runs = metric_value(
        &tenants,
        "imgcas_tenant_processing_runs_total",
        &[("tier", "bulk"), ("tenant", "-")],
    );
    assert_eq!(bulk_runs, 1.0, "the warm run was bulk work");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_tenants_burst_does_not_hold_up_another_tenant() {
    let origin = Origin::start().await;
    let app = spawn_app_with(|c| {
        c.limits.process_concurrency = 1;
        c.limits.queue_target = Duration::from_secs(20);
    })
    .await;
    // The big tenant's sources by the host 127.0.0.1, the small one's by `localhost`.
    let mut big = Vec::new();
    for i in 0..12u8 {
        let path = format!("/big{i}.png");
        origin.put(&path, png(1600, 1200, i));
        big.push(origin.url(&path));
    }
    origin.put("/small.png", png(1600, 1200, 99));
    let small = origin.url("/small.png").replace("127.0.0.1", "localhost");
    // Downloaded first, so that what follows is processing only.
    for url in big.iter().chain([&small]) {
        assert_eq!(app.image_status(url, "w=8").await, 200);
    }
    let started = Instant::now();
    let ask = |url: String| {
        let (client, endpoint) = (
            app.client.clone(),
            image_url(&app, &url, "w=1200&format=webp"),
        );
        tokio::spawn(async move {
            let r = client.get(endpoint).send().await.unwrap();
            assert_eq!(r.status(), 200);
            Instant::now()
        })
    };
    let burst: Vec<_> = big.iter().cloned().map(ask).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = Instant::now();
    let small_done = ask(small).await.unwrap();
    let mut big_done = Vec::new();
    for b in burst {
        big_done.push(b.await.unwrap());
    }
    big_done.sort();
    // Runs of the burst that finished while the small tenant's request waited: the one
    // under way when it came, and the rest of the big tenant's turn (a quantum of 4 MP, two
    // runs here). First come, first served, it would wait for every queued run.
    let waited_for = big_done
        .iter()
        .filter(|t| **t > sent && **t < small_done)
        .count();
    let queued = big_done.iter().filter(|t| **t > sent).count();
    eprintln!(
        "small tenant answered {:?} after it asked, behind {waited_for} of the {queued} runs of the burst still to do (all done {:?} after the burst began)",
        small_done - sent,
        *big_done.last().unwrap() - started
    );
    assert!(queued >= 6, "the burst was still queued: {queued}");
    assert!(
        waited_for <= 3,
        "the small tenant waited behind {waited_for} of the big tenant's runs"
    );
    let scrape = app.metrics().await;
    for tenant in ["127.0.0.1", "localhost"] {
        let runs = metric_value(
            &scrape,
            "imgcas_tenant_processing_runs_total",
            &[("tier", "interactive"), ("tenant", tenant)],
        );
        assert!(runs >= 1.0, "{tenant}: {runs}");
    }
}

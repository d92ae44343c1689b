//! Under more cold work than the CPU can take: admission refuses what would wait too long
//! (503 `overloaded` with `Retry-After`), never answers 500, and hits keep flowing. And one
//! slow origin cannot take every download slot.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

#[tokio::test]
async fn cold_work_beyond_capacity_is_shed_while_hits_flow() {
    let app = spawn_app_with(|c| {
        c.limits.process_concurrency = 1;
        c.limits.queue_target = Duration::from_millis(200);
    })
    .await;
    // A 9 MP PNG: no shrink-on-load, so every run decodes all of it.
    let big = png(3000, 3000, 5);
    let r = app.upload(big).await;
    assert_eq!(r.status(), 201);
    let hash = json(r).await["hash"].as_str().unwrap().to_string();
    let by_hash = |q: String| {
        let (client, url) = (
            app.client.clone(),
            app.url(&format!("/v1/image/{hash}?{q}")),
        );
        async move { client.get(url).send().await.unwrap() }
    };
    // Warm one variant: its hits must not queue behind the cold work.
    assert_eq!(by_hash("w=64".into()).await.status(), 200);

    let cold: Vec<_> = (0..24)
        .map(|i| tokio::spawn(by_hash(format!("w={}", 100 + i))))
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut hit_latencies = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let r = by_hash("w=64".into()).await;
        hit_latencies.push(started.elapsed());
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    }

    let (mut ok, mut shed) = (0, 0);
    for task in cold {
        let r = task.await.unwrap();
        match r.status().as_u16() {
            200 => ok += 1,
            503 => {
                let after: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
                assert!(after >= 1);
                assert_eq!(header(&r, "cache-control"), Some("no-store"));
                assert_eq!(error_code_of(r).await, "overloaded");
                shed += 1;
            }
            other => panic!("cold request answered {other}"),
        }
    }
    assert!(ok >= 1, "some cold work is admitted");
    assert!(
        shed >= 12,
        "most of 24 runs of ~9 MP each must be shed, {shed} were"
    );
    let slowest_hit = hit_latencies.iter().max().unwrap();
    assert!(
        *slowest_hit < Duration::from_millis(250),
        "hits wait for no processing: slowest {slowest_hit:?}"
    );
    let m = app.metrics().await;
    let rejected: f64 = m
        .samples
        .iter()
        .filter(|s| s.metric == "imgcas_admission_rejections_total")
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) => v,
            _ => 0.0,
        })
        .sum();
    assert_eq!(rejected as u64, shed);

    // Once the queue drains, the same work is admitted again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = by_hash("w=100".into()).await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_slow_origin_keeps_to_its_own_download_slots() {
    let app = spawn_app_with(|c| {
        c.fetch.per_host_concurrency = 2;
        c.fetch.timeout = Duration::from_secs(10);
    })
    .await;
    let slow = Origin::start().await;
    let fast = Origin::start().await;
    for i in 0..6 {
        slow.put_slow(
            &format!("/{i}.jpg"),
            jpeg(64, 64, i),
            Some(Duration::from_millis(700)),
        );
    }
    fast.put("/f.jpg", jpeg(64, 64, 9));

    let pending: Vec<_> = (0..6)
        .map(|i| {
            let mut target = reqwest::Url::parse(&app.url("/v1/image")).unwrap();
            target
                .query_pairs_mut()
                .append_pair("url", &slow.url(&format!("/{i}.jpg")))
                .append_pair("w", "10");
            let client = app.client.clone();
            tokio::spawn(async move { client.get(target).send().await.unwrap().status() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = app.image_by_url(&fast.url("/f.jpg"), "w=10").await;
    assert_eq!(r.status(), 200);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "another origin is not held up: {:?}",
        started.elapsed()
    );
    for p in pending {
        assert_eq!(p.await.unwrap(), 200);
    }
    assert_eq!(
        slow.max_in_flight(),
        2,
        "never more than 2 downloads from one origin"
    );
}

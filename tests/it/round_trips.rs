//! What a request costs the shared maps, in round trips to PostgreSQL (issue 34): two nodes
//! on one database and one bucket, each request's statements read off the node's
//! `imgcas_maps_statements_total{op}` before and after it.
//!
//! Work a request starts but does not wait for (an original's facts, its fingerprint) and
//! the upkeep's batched writes are not the request's: their operations are left out of the
//! sums (`BACKGROUND`), and everything else a node sent while the request ran is counted.
//! (The near index is read on a request's path only in canonical mode, which this test does
//! not use; on the defaults it is the background fingerprint's report.)

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::postgres::PgServer;
use common::s3::S3Target;
use common::*;

/// Map operations of work no request waits on: the upkeep's (stamps, the purge generation,
/// eviction) and the background computation of facts and fingerprints.
const BACKGROUND: &[&str] = &[
    "mark_urls_requested",
    "mark_variants_served",
    "purge_generation",
    "variant_bytes",
    "put_facts",
    "put_fingerprint",
    "fingerprint",
    "near",
    "blocklist",
    "takedowns",
    // An origin slot given back after its download: spawned, never waited for.
    "release_origin_slot",
];

async fn round_trips(app: &TestApp) -> BTreeMap<String, f64> {
    let scrape = app.metrics().await;
    let mut by_op = BTreeMap::new();
    for sample in &scrape.samples {
        if sample.metric == "imgcas_maps_statements_total" {
            if let (Some(op), prometheus_parse::Value::Counter(n)) =
                (sample.labels.get("op"), &sample.value)
            {
                by_op.insert(op.to_string(), *n);
            }
        }
    }
    by_op
}

/// The round trips of the request `ask` makes, by operation (background ones left out).
async fn cost_of<F, Fut>(app: &TestApp, ask: F) -> (u64, BTreeMap<String, f64>)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = reqwest::Response>,
{
    let before = round_trips(app).await;
    let response = ask().await;
    assert_eq!(response.status(), 200, "{:?}", response.text().await);
    let _ = response.bytes().await;
    // What the request left running (its original's facts and fingerprint) is let finish
    // before the count is read, and counted as the request's unless it is background work.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let after = round_trips(app).await;
    let mut spent = BTreeMap::new();
    for (op, n) in after {
        let d = n - before.get(&op).copied().unwrap_or(0.0);
        if d > 0.0 && !BACKGROUND.contains(&op.as_str()) {
            spent.insert(op, d);
        }
    }
    (spent.values().sum::<f64>() as u64, spent)
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_keep_to_their_round_trip_budgets() {
    let Some(server) = PgServer::or_skip("requests_keep_to_their_round_trip_budgets") else {
        return;
    };
    let url = server.database("round_trip_budgets");
    let bucket = Arc::new(S3Target::new().await);
    let node = |name: &'static str| {
        let (url, bucket) = (url.clone(), bucket.clone());
        spawn_app_with(move |c| {
            bucket.configure(c);
            c.maps.url = Some(url);
            c.cluster.node_id = Some(name.into());
        })
    };
    let (a, b) = (node("a").await, node("b").await);
    let (_origin, source) = Origin::serving("/photo.jpg", jpeg(640, 480, 7)).await;

    let (new_url, ops) = cost_of(&a, || a.image_by_url(&source, "w=100")).await;
    eprintln!("new URL: {new_url} {ops:?}");
    let (new_spec, ops) = cost_of(&a, || a.image_by_url(&source, "w=120")).await;
    eprintln!("new spec: {new_spec} {ops:?}");
    let (other_node, ops) = cost_of(&b, || b.image_by_url(&source, "w=100")).await;
    eprintln!("hit on another node: {other_node} {ops:?}");
    let (remembered, ops) = cost_of(&a, || a.image_by_url(&source, "w=100")).await;
    eprintln!("remembered hit: {remembered} {ops:?}");
    assert!(new_url <= 8, "a new URL took {new_url} round trips");
    assert!(new_spec <= 4, "a new spec of a known URL took {new_spec}");
    assert!(
        other_node <= 2,
        "a hit by URL on another node took {other_node}"
    );
    assert_eq!(remembered, 0, "a hit the node remembers took {remembered}");
}

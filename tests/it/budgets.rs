//! Audit #4's budget findings through HTTP on one node (two nodes on PostgreSQL:
//! `cluster.rs`): one anonymous client could empty a bucket every anonymous request shared,
//! a host's budget was spent by anyone asking for its URLs, a refusal's `Retry-After` grew
//! with the dearest run taken (877 s for everyone), and a run that failed in milliseconds was
//! charged its whole estimate; and memory, which admission did not count at all.

use crate::common;

use std::time::Duration;

use common::*;
use imgcas::config::{Config, TenantBudget};

/// Every anonymous client on a budget of its own under `default`: `rate` units a second,
/// `burst` at once.
fn per_client(c: &mut Config, rate: f64, burst: f64, wait: Duration) {
    c.tenants.insert(
        "default".into(),
        TenantBudget {
            rate,
            burst,
            anonymous: false,
        },
    );
    c.limits.max_budget_wait = wait;
}

async fn by_hash(
    client: &reqwest::Client,
    app: &TestApp,
    hash: &str,
    query: &str,
    forwarded: Option<&str>,
) -> reqwest::Response {
    let mut request = client.get(app.url(&format!("/v1/image/{hash}?{query}")));
    if let Some(f) = forwarded {
        request = request.header("x-forwarded-for", f);
    }
    request.send().await.unwrap()
}

async fn uploaded(app: &TestApp, bytes: Vec<u8>) -> String {
    let r = app.upload(bytes).await;
    assert!(r.status().is_success(), "{}", r.status());
    json(r).await["hash"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_anonymous_client_spends_its_own_budget_not_everyones() {
    // 1,000 units at once, 1,000 a second: one run takes a client's bucket below zero for
    // tens of seconds.
    let app = spawn_app_with(|c| per_client(c, 1000.0, 1000.0, Duration::from_secs(600))).await;
    let hash = uploaded(&app, jpeg(320, 240, 1)).await;
    let a = client_from("127.0.0.1");
    let r = by_hash(&a, &app, &hash, "w=100", None).await;
    assert_eq!(r.status(), 200, "the first run spends client A's budget");
    let r = by_hash(&a, &app, &hash, "w=110", None).await;
    assert_eq!(r.status(), 429, "A's next miss waits");
    // Writing another address into X-Forwarded-For does not give A a fresh bucket: no
    // proxy is trusted.
    let r = by_hash(&a, &app, &hash, "w=111", Some("198.51.100.7")).await;
    assert_eq!(r.status(), 429, "a forged X-Forwarded-For is ignored");
    // Another client is not locked out by A (it was: every anonymous request by hash was
    // the tenant `-`, one bucket).
    let b = client_from("127.0.0.2");
    let r = by_hash(&b, &app, &hash, "w=120", None).await;
    assert_eq!(r.status(), 200, "client B has a budget of its own");
    // A hit is served to A whatever its budget.
    let r = by_hash(&a, &app, &hash, "w=120", None).await;
    assert_eq!(r.status(), 200);
    let scrape = app.metrics().await;
    assert!(anonymous_metric(&scrape, "imgcas_tenant_spent_units_total") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let app = spawn_app_with(|c| {
        per_client(c, 1000.0, 1000.0, Duration::from_secs(600));
        c.server.trusted_proxies = imgcas::config::parse_networks("127.0.0.1").unwrap();
    })
    .await;
    let hash = uploaded(&app, jpeg(320, 240, 2)).await;
    let proxy = client_from("127.0.0.1");
    let r = by_hash(&proxy, &app, &hash, "w=100", Some("198.51.100.7")).await;
    assert_eq!(r.status(), 200);
    let r = by_hash(&proxy, &app, &hash, "w=110", Some("198.51.100.7")).await;
    assert_eq!(r.status(), 429, "the forwarded client's bucket is spent");
    // What a client wrote itself, left of the address the proxy appended, is not believed.
    let r = by_hash(
        &proxy,
        &app,
        &hash,
        "w=111",
        Some("203.0.113.1, 198.51.100.7"),
    )
    .await;
    assert_eq!(r.status(), 429, "the proxy's own entry names the client");
    let r = by_hash(&proxy, &app, &hash, "w=120", Some("198.51.100.8")).await;
    assert_eq!(r.status(), 200, "another forwarded client is served");
    // An untrusted peer's header is ignored: 127.0.0.3 pays as itself.
    let other = client_from("127.0.0.3");
    let r = by_hash(&other, &app, &hash, "w=130", Some("198.51.100.9")).await;
    assert_eq!(r.status(), 200);
    let r = by_hash(&other, &app, &hash, "w=131", Some("198.51.100.10")).await;
    assert_eq!(r.status(), 429, "127.0.0.3 cannot pose as a new client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hosts_budget_is_spent_by_anonymous_requests_only_when_it_says_so() {
    let origin = Origin::start().await;
    for i in 0..3u8 {
        origin.put(&format!("/h{i}.jpg"), jpeg(320, 240, 10 + i));
    }
    let host_budget = |anonymous| {
        move |c: &mut Config| {
            c.tenants.insert(
                "127.0.0.1".into(),
                TenantBudget {
                    rate: 1000.0,
                    burst: 1000.0,
                    anonymous,
                },
            );
            c.limits.max_budget_wait = Duration::from_secs(600);
        }
    };
    let app = spawn_app_with(host_budget(false)).await;
    for i in 0..3u8 {
        let r = app
            .image_by_url(&origin.url(&format!("/h{i}.jpg")), "w=100")
            .await;
        assert_eq!(
            r.status(),
            200,
            "anonymous requests do not spend the host's budget"
        );
    }
    app.stop().await;
    let app = spawn_app_with(host_budget(true)).await;
    let r = app.image_from(&origin, "/h0.jpg", "w=90").await;
    assert_eq!(r.status(), 200);
    let r = app.image_from(&origin, "/h1.jpg", "w=90").await;
    assert_eq!(r.status(), 429, "`anonymous = true`: they do");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_is_bounded_and_a_run_dearer_than_the_budget_refills_is_refused() {
    // 40,000 units a second, waits of 5 s at most: 200,000 units is the dearest run.
    let app = spawn_app_with(|c| per_client(c, 40_000.0, 1000.0, Duration::from_secs(5))).await;
    let dear = uploaded(&app, jpeg(1200, 900, 3)).await;
    let cheap = uploaded(&app, jpeg(320, 240, 4)).await;
    let client = client_from("127.0.0.1");
    // Admitted before at a full bucket, it took the bucket a million units below zero and
    // everyone after waited 27 s or more.
    let r = by_hash(&client, &app, &dear, "w=1200&format=png", None).await;
    assert_eq!(r.status(), 422);
    assert_eq!(header(&r, "cache-control"), Some("no-store"));
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "too_costly", "{body}");
    let r = by_hash(&client, &app, &cheap, "w=100", None).await;
    assert_eq!(r.status(), 200, "the refusal spent nothing");
    let r = by_hash(&client, &app, &cheap, "w=110", None).await;
    assert_eq!(r.status(), 429);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=5).contains(&retry), "Retry-After {retry} s");
}

/// A PNG declaring `side`×`side` whose pixel data is no deflate stream: refused as
/// undecodable at its first data chunk, in a moment, after a plan that costs its size.
fn broken_png(side: u32, seed: u8) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&side.to_be_bytes());
    ihdr.extend_from_slice(&side.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0xff, 0xff, seed, 0xfe, 0x00, 0x11, 0x22, 0x33],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_that_fails_at_once_is_charged_what_it_spent() {
    // A 3000x3000 plan is about 9 M units: the bucket holds 5 M, refills 100,000 a second.
    let app =
        spawn_app_with(|c| per_client(c, 100_000.0, 5_000_000.0, Duration::from_secs(600))).await;
    let origin = Origin::start_with("/broken1.png", broken_png(3000, 1)).await;
    origin.put("/broken2.png", broken_png(3000, 2));
    let r = app.image_from(&origin, "/broken1.png", "w=100").await;
    assert_eq!(r.status(), 422);
    assert_eq!(error_code_of(r).await, "undecodable");
    // Charged in full, the bucket would be 4 M units below zero for 40 s.
    let r = app.image_from(&origin, "/broken2.png", "w=100").await;
    assert_eq!(r.status(), 422, "refunded: the next run is admitted");
    let scrape = app.metrics().await;
    let refunded = anonymous_metric(&scrape, "imgcas_tenant_refunded_units_total");
    // Most of the plan comes back (a failure in milliseconds, even on a loaded machine).
    assert!(refunded > 4_500_000.0, "refunded {refunded} units");
}

/// Audit #4, finding 5: admission counted pixels, not memory. Each run's estimate is now held
/// against `limits.max_memory`: a run needing more than all of it is refused before any decode
/// (and says so), a smaller one is served, and what runs hold is in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_needing_more_memory_than_the_node_allows_is_refused() {
    let app = spawn_app_with(|c| c.limits.max_memory = 64 << 20).await;
    let hash = uploaded(&app, jpeg(2000, 1500, 5)).await;
    // 3 MP decoded, a 3 MP AVIF encoded: about 140 MB by the estimate.
    let r = app
        .get(&format!("/v1/image/{hash}?w=2000&format=avif"))
        .await;
    assert_eq!(r.status(), 422);
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "too_costly", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_memory"),
        "{body}"
    );
    let r = app.get(&format!("/v1/image/{hash}?w=200")).await;
    assert_eq!(r.status(), 200, "a thumbnail fits");
    let scrape = app.metrics().await;
    assert_eq!(
        metric_value(&scrape, "imgcas_processing_memory_limit_bytes", &[]),
        (64u64 << 20) as f64
    );
    assert_eq!(
        metric_value(&scrape, "imgcas_processing_memory_bytes", &[]),
        0.0,
        "nothing held once the runs are done"
    );
}

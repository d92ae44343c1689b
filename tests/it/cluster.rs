//! Three `imgcas serve` processes (the real binary) on one PostgreSQL (started by the
//! harness) and one S3 bucket (the in-process s3s-fs server, or the external one CI names):
//! what one node learned every node knows, and a job runs once in the whole cluster.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::binary::{self, Server};
use common::postgres::PgServer;
use common::s3::S3Target;
use common::*;

/// A node, and its own data dir (which, with shared maps, holds nothing that matters).
struct Node {
    server: Option<Server>,
    base: String,
    _dir: tempfile::TempDir,
}

struct Cluster {
    nodes: Vec<Node>,
    client: reqwest::Client,
}

impl Cluster {
    fn start(maps_url: &str, bucket: &S3Target, extra: &[(&str, String)]) -> Cluster {
        Cluster::start_n(3, maps_url, bucket, extra)
    }

    /// `n` nodes (up to 26), named `node-a`, `node-b`, ….
    fn start_n(n: usize, maps_url: &str, bucket: &S3Target, extra: &[(&str, String)]) -> Cluster {
        let nodes = (b'a'..=b'z')
            .take(n)
            .map(|name| name as char)
            .map(|name| {
                let dir = tempfile::tempdir().unwrap();
                let mut env = vec![
                    ("IMGCAS_MAPS_URL", maps_url.to_string()),
                    ("IMGCAS_NODE_ID", format!("node-{name}")),
                ];
                env.extend(extra.iter().cloned());
                let server = binary::start_with(dir.path(), Some(bucket), &env);
                Node {
                    base: server.base.clone(),
                    server: Some(server),
                    _dir: dir,
                }
            })
            .collect();
        Cluster {
            nodes,
            client: client(),
        }
    }

    async fn image(&self, node: usize, source: &str, query: &str) -> reqwest::Response {
        let mut url = reqwest::Url::parse(&format!("{}/v1/image", self.nodes[node].base)).unwrap();
        url.query_pairs_mut().append_pair("url", source);
        self.client
            .get(format!("{url}&{query}"))
            .send()
            .await
            .expect("request")
    }

    async fn by_hash(&self, node: usize, hash: &str, query: &str) -> reqwest::Response {
        let url = format!("{}/v1/image/{hash}?{query}", self.nodes[node].base);
        self.client.get(url).send().await.expect("request")
    }

    /// Waits until every node answers 451 for `source` (`w=100&format=webp`) and for `hash`
    /// (`w=80`), failing when one still serves it 2 s after `since` (`what` happened then).
    async fn all_refuse_within_2s(&self, source: &str, hash: &str, since: Instant, what: &str) {
        let mut pending: Vec<usize> = (0..self.nodes.len()).collect();
        while !pending.is_empty() {
            assert!(
                since.elapsed() < Duration::from_secs(2),
                "nodes {pending:?} still serve the content 2 s after {what}"
            );
            let mut still = Vec::new();
            for &node in &pending {
                let by_url = self.image(node, source, "w=100&format=webp").await;
                let by_hash = self.by_hash(node, hash, "w=80").await;
                match (by_url.status().as_u16(), by_hash.status().as_u16()) {
                    (451, 451) => {}
                    (200, _) | (_, 200) => still.push(node),
                    other => panic!("node {node} answered {other:?}"),
                }
            }
            pending = still;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A counter of one node's `/metrics`.
    async fn counter(&self, node: usize, name: &str) -> f64 {
        let scrape = scrape(&self.client, &self.nodes[node].base).await;
        metric_value(&scrape, name, &[])
    }

    /// `n` requests for `source` with `query` at once, spread round-robin over the nodes:
    /// each one's status and body.
    async fn at_once(&self, n: usize, source: &str, query: &str) -> Vec<(u16, bytes::Bytes)> {
        self.each_at_once(vec![source.to_string(); n], query).await
    }

    /// A request for each of `sources` with `query`, all at once, spread round-robin over
    /// the nodes: each one's status and body.
    async fn each_at_once(&self, sources: Vec<String>, query: &str) -> Vec<(u16, bytes::Bytes)> {
        let mut requests = Vec::new();
        for (i, source) in sources.into_iter().enumerate() {
            let (client, base) = (
                self.client.clone(),
                self.nodes[i % self.nodes.len()].base.clone(),
            );
            let query = query.to_string();
            requests.push(tokio::spawn(async move {
                let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
                url.query_pairs_mut().append_pair("url", &source);
                let r = client.get(format!("{url}&{query}")).send().await.unwrap();
                (r.status().as_u16(), r.bytes().await.unwrap())
            }));
        }
        let mut answers = Vec::new();
        for request in requests {
            answers.push(request.await.unwrap());
        }
        answers
    }

    /// A counter summed over the nodes still running.
    async fn total(&self, name: &str) -> f64 {
        let mut sum = 0.0;
        for i in 0..self.nodes.len() {
            if self.nodes[i].server.is_some() {
                sum += self.counter(i, name).await;
            }
        }
        sum
    }

    fn kill(&mut self, node: usize) {
        if let Some(server) = self.nodes[node].server.take() {
            server.kill();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(server) = node.server.take() {
                server.kill();
            }
        }
    }
}

fn photo() -> Vec<u8> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/exif-orientation/Landscape_1.jpg");
    std::fs::read(path).unwrap()
}

const RUNS: &str = "imgcas_processing_runs_total";
const DOWNLOADS: &str = "imgcas_origin_downloads_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_share_what_they_learn_and_do_each_job_once() {
    let env = [("IMGCAS_REVALIDATE_AFTER", "1s".to_string())];
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_shared", &env).await else {
        return;
    };

    // (a) A variant made on node A is a hit on B and C, with no processing there.
    origin.put("/a.jpg", jpeg(320, 240, 1));
    let source = origin.url("/a.jpg");
    let r = cluster.image(0, &source, "w=100&format=webp").await;
    if r.status() != 200 {
        panic!("{}: {}", r.status(), r.text().await.unwrap());
    }
    assert_eq!(header(&r, "x-imgcas-cache"), Some("miss"));
    let made = r.bytes().await.unwrap();
    for node in [1, 2] {
        let r = cluster.image(node, &source, "w=100&format=webp").await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"), "node {node}");
        assert_eq!(r.bytes().await.unwrap(), made);
        assert_eq!(cluster.counter(node, RUNS).await, 0.0, "node {node}");
        assert_eq!(cluster.counter(node, DOWNLOADS).await, 0.0, "node {node}");
    }
    assert_eq!(origin.full(), 1);

    // (b) 90 concurrent cold requests for one new URL and spec, 30 on each node: one
    // download and one processing run in the whole cluster, and 90 answers of 200.
    origin.put_slow(
        "/b.jpg",
        jpeg(640, 480, 2),
        Some(Duration::from_millis(300)),
    );
    let source = origin.url("/b.jpg");
    let (runs_before, downloads_before) =
        (cluster.total(RUNS).await, cluster.total(DOWNLOADS).await);
    let mut bodies = std::collections::HashSet::new();
    for (status, body) in cluster.at_once(90, &source, "w=200&format=png").await {
        assert_eq!(status, 200);
        bodies.insert(body);
    }
    assert_eq!(bodies.len(), 1, "every node served the same bytes");
    assert_eq!(origin.full(), 2, "one more download at the origin");
    assert_eq!(cluster.total(DOWNLOADS).await - downloads_before, 1.0);
    assert_eq!(cluster.total(RUNS).await - runs_before, 1.0);

    // (c) An upload to A is served by hash from B.
    let upload = jpeg(200, 150, 3);
    let r = cluster
        .client
        .post(format!("{}/v1/originals", cluster.nodes[0].base))
        .header("content-type", "application/octet-stream")
        .body(upload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let hash = imgcas::hash::ContentHash::of(&upload);
    let r = cluster
        .client
        .get(format!("{}/v1/image/{hash}?w=50", cluster.nodes[1].base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(dimensions(&r.bytes().await.unwrap()).0, 50);
    let r = cluster
        .client
        .get(format!("{}/v1/originals/{hash}", cluster.nodes[2].base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), upload);

    // (d) The origin changes a URL's bytes; B revalidates it; A then serves the new content.
    origin.put("/d.jpg", jpeg(300, 200, 4));
    let source = origin.url("/d.jpg");
    let r = cluster.image(0, &source, "w=30").await;
    assert_eq!(dimensions(&r.bytes().await.unwrap()), (30, 20));
    origin.put("/d.jpg", jpeg(300, 100, 5));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = cluster.image(1, &source, "w=30").await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        dimensions(&r.bytes().await.unwrap()),
        (30, 10),
        "B saw the change"
    );
    let r = cluster.image(0, &source, "w=30").await;
    assert_eq!(
        dimensions(&r.bytes().await.unwrap()),
        (30, 10),
        "and A serves it"
    );
}

/// (e) The node holding a claim is killed mid-processing: the same request on another node
/// completes within the claim's time to live plus one processing time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_owner_died_is_taken_over_after_its_time_to_live() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let ttl = Duration::from_secs(2);
    let mut cluster = Cluster::start(
        &pg.database("cluster_takeover"),
        &bucket,
        &[("IMGCAS_CLAIM_TTL", "2s".to_string())],
    );
    origin.put("/photo.jpg", photo());
    let source = origin.url("/photo.jpg");
    // One processing time of a slow spec (AVIF at high quality), measured on C.
    let started = Instant::now();
    let r = cluster.image(2, &source, "w=1800&format=avif&q=91").await;
    assert_eq!(r.status(), 200);
    let one_run = started.elapsed();

    // A claims a sibling spec of the same cost and is killed while it works.
    let slow = "w=1800&format=avif&q=90";
    let (client, base, s) = (
        cluster.client.clone(),
        cluster.nodes[0].base.clone(),
        source.clone(),
    );
    let on_a = tokio::spawn(async move {
        let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
        url.query_pairs_mut().append_pair("url", &s);
        client.get(format!("{url}&{slow}")).send().await
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let held = pg
            .psql(
                "cluster_takeover",
                "SELECT count(*) FROM imgcas_claims WHERE owner = 'node-a' AND key LIKE 'variant:%'",
            )
            .unwrap();
        if held == "1" {
            break;
        }
        assert!(Instant::now() < deadline, "node A never claimed the run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.kill(0);
    assert!(on_a.await.unwrap().is_err(), "A died before answering");

    let started = Instant::now();
    let r = cluster.image(1, &source, slow).await;
    let waited = started.elapsed();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), Some("image/avif"));
    // The bound, with room for a loaded machine (the run on B may take longer than the one
    // measured on C, with CI's other work beside it): the TTL, one run, and as much again.
    let bound = ttl + one_run * 2 + Duration::from_secs(2);
    assert!(
        waited <= bound,
        "B answered after {waited:?}; the bound is {bound:?} (one run took {one_run:?})"
    );
    assert!(
        waited >= ttl / 2,
        "B cannot have had the claim before it expired ({waited:?})"
    );
    assert_eq!(cluster.counter(1, RUNS).await, 1.0, "B ran it once");
}

/// (f) `imgcas gc --apply` while all three nodes serve and a load writes new originals and
/// variants: it removes old strays, deletes nothing any node indexes, and verify is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gc_while_nodes_serve_and_write_deletes_nothing_indexed() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    let bucket = S3Target::new().await;
    let maps_url = pg.database("cluster_gc");
    // The maintenance commands' data dir: with shared maps it holds nothing they use.
    let offline = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(&maps_url, &bucket, &[]);
    let mut env = bucket.env();
    env.push(("IMGCAS_MAPS_URL", maps_url.clone()));
    env.push(("IMGCAS_GC_GRACE", "1s".to_string()));

    // Strays older than the grace: an original nobody indexed, variant bytes no row names.
    let s3 = bucket.client();
    let stray = imgcas::hash::ContentHash::of(b"stray");
    let stray_variant = format!("variants/{stray}/{}", "ab".repeat(32));
    for key in [imgcas::blob::key_for(&stray), stray_variant.clone()] {
        s3.put_object()
            .bucket(&bucket.bucket)
            .key(&key)
            .body(b"stray".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    // Older than the grace, a second of rounding and a second of slack.
    tokio::time::sleep(Duration::from_millis(3100)).await;

    // The load: uploads to A, each processed on C, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, client) = (stop.clone(), cluster.client.clone());
        let (a, c) = (cluster.nodes[0].base.clone(), cluster.nodes[2].base.clone());
        tokio::spawn(async move {
            let mut written = Vec::new();
            let mut i = 0u8;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && i < 200 {
                i += 1;
                let bytes = jpeg(96, 64, i);
                let r = client
                    .post(format!("{a}/v1/originals"))
                    .body(bytes.clone())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
                let hash = imgcas::hash::ContentHash::of(&bytes);
                let r = client
                    .get(format!("{c}/v1/image/{hash}?w=40"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                written.push(format!("/v1/image/{hash}?w=40"));
            }
            written
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gc_env = env.clone();
    let (code, out) = tokio::task::spawn_blocking(move || {
        binary::run(
            std::path::Path::new("/nonexistent"),
            &gc_env,
            &["gc", "--apply"],
        )
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let written = load.await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("removed 1 unreferenced blobs"), "{out}");
    assert!(
        out.contains("removed 1 variant objects no row names"),
        "{out}"
    );
    assert!(
        written.len() >= 5,
        "the load ran alongside ({})",
        written.len()
    );

    // Everything written is still there: B (which served none of it) finds every variant
    // stored, bytes and all, and verify finds nothing missing.
    for path in &written {
        let r = cluster
            .client
            .get(format!("{}{path}", cluster.nodes[1].base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"), "{path}");
    }
    let dir = offline.path().to_path_buf();
    let (code, out) = tokio::task::spawn_blocking(move || binary::run(&dir, &env, &["verify"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 missing, 0 corrupt"), "{out}");
}

/// PostgreSQL unreachable: hot-cache hits are still served, everything else is 503
/// `storage_unavailable` with `Retry-After`, `/readyz` says so, and service resumes by
/// itself when the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_rides_out_a_database_outage() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    pg.database("cluster_outage");
    let relay = common::relay::Relay::start(([127, 0, 0, 1], pg.port).into()).await;
    let maps_url = format!("postgres://imgcas@{}/cluster_outage", relay.addr);
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = binary::start_with(dir.path(), Some(&bucket), &[("IMGCAS_MAPS_URL", maps_url)]);
    let client = client();
    let get = |path: String| {
        let (client, base) = (client.clone(), node.base.clone());
        async move { client.get(format!("{base}{path}")).send().await.unwrap() }
    };
    let image = |name: &str| {
        let mut url = reqwest::Url::parse("http://x/v1/image").unwrap();
        url.query_pairs_mut().append_pair("url", &origin.url(name));
        format!("/v1/image?{}&w=40", url.query().unwrap())
    };
    origin.put("/hot.jpg", jpeg(120, 80, 1));
    origin.put("/cold.jpg", jpeg(120, 80, 2));
    assert_eq!(get(image("/hot.jpg")).await.status(), 200);

    relay.cut();
    let r = get(image("/hot.jpg")).await;
    assert_eq!(
        r.status(),
        200,
        "a hot variant is served without the database"
    );
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"));
    let r = get(image("/cold.jpg")).await;
    assert_eq!(r.status(), 503);
    assert!(header(&r, "retry-after").is_some());
    assert_eq!(error_code_of(r).await, "storage_unavailable");
    assert_eq!(get("/readyz".into()).await.status(), 503);

    relay.restore();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get("/readyz".into()).await.status() != 200 {
        assert!(
            Instant::now() < deadline,
            "the node never became ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = get(image("/cold.jpg")).await;
    assert_eq!(r.status(), 200, "recovered without a restart");
    node.terminate();
}

/// Audit #3, finding 6: with a short `revalidate_after`, a URL's entry older than it sent a
/// node to claim the revalidation in the maps, and with PostgreSQL down that claim failed:
/// 503 `storage_unavailable` for variants the node held (775 of 875 in the soak). A
/// revalidation that cannot claim now serves the entry it has, as an origin failure does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_variants_are_served_by_url_through_a_database_outage_under_short_revalidation() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    pg.database("cluster_outage_short");
    let relay = common::relay::Relay::start(([127, 0, 0, 1], pg.port).into()).await;
    let maps_url = format!("postgres://imgcas@{}/cluster_outage_short", relay.addr);
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = binary::start_with(
        dir.path(),
        Some(&bucket),
        &[
            ("IMGCAS_MAPS_URL", maps_url),
            ("IMGCAS_REVALIDATE_AFTER", "1s".into()),
        ],
    );
    let client = client();
    let get = |path: String| {
        let (client, base) = (client.clone(), node.base.clone());
        async move { client.get(format!("{base}{path}")).send().await.unwrap() }
    };
    let image = |name: &str, w: u32| {
        let mut url = reqwest::Url::parse("http://x/v1/image").unwrap();
        url.query_pairs_mut().append_pair("url", &origin.url(name));
        format!("/v1/image?{}&w={w}", url.query().unwrap())
    };
    origin.put("/hot.jpg", jpeg(120, 80, 1));
    origin.put("/cold.jpg", jpeg(120, 80, 2));
    for w in [40, 60] {
        assert_eq!(get(image("/hot.jpg", w)).await.status(), 200);
    }

    relay.cut();
    // Past `revalidate_after`: every request for the hot URL wants a revalidation.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    for round in 0..10 {
        for w in [40, 60] {
            let r = get(image("/hot.jpg", w)).await;
            assert_eq!(
                r.status(),
                200,
                "round {round}, w={w}: a held variant by URL"
            );
        }
    }
    let r = get(image("/cold.jpg", 40)).await;
    assert_eq!(r.status(), 503, "nothing held: the maps are needed");
    assert_eq!(error_code_of(r).await, "storage_unavailable");

    relay.restore();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get("/readyz".into()).await.status() != 200 {
        assert!(
            Instant::now() < deadline,
            "the node never became ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = metrics_text(&client, &node.base).await;
    let stale = text_metric(&text, "imgcas_stale_for_maps_total ");
    assert!(stale >= 1.0, "counted: {stale}");
    assert_eq!(get(image("/cold.jpg", 40)).await.status(), 200);
    node.terminate();
}

/// Requests a node answered on the image routes (from its /metrics text).
async fn image_requests(client: &reqwest::Client, base: &str) -> u64 {
    let text = metrics_text(client, base).await;
    text.lines()
        .filter_map(|l| l.strip_prefix("imgcas_http_requests_total{"))
        .filter(|rest| rest.contains("route=\"/v1/image"))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// deploy/nginx-cluster.conf in front of the three nodes: one URI always lands on the same
/// node (a consistent hash of the request URI), URIs spread over the nodes, and a node that
/// died is stepped over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nginx_sends_one_uri_to_one_node_and_steps_over_a_dead_one() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    let Some(nginx_binary) = common::nginx::binary_or_skip() else {
        return;
    };
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let mut cluster = Cluster::start(&pg.database("cluster_lb"), &bucket, &[]);
    let port = common::nginx::free_port();
    let node = |k: usize| {
        cluster.nodes[k]
            .base
            .trim_start_matches("http://")
            .to_string()
    };
    let (a, b, c) = (node(0), node(1), node(2));
    let lb = common::nginx::Nginx::start(&nginx_binary, port, |_| {
        common::nginx::site(
            "nginx-cluster.conf",
            &[
                ("server imgcas-a:8080", format!("server {a}")),
                ("server imgcas-b:8080", format!("server {b}")),
                ("server imgcas-c:8080", format!("server {c}")),
                ("listen 8090;", format!("listen 127.0.0.1:{port};")),
            ],
        )
    });
    let through_lb = |name: &str| {
        let mut url = reqwest::Url::parse(&format!("{}/v1/image", lb.base)).unwrap();
        url.query_pairs_mut().append_pair("url", &origin.url(name));
        format!("{url}&w=32")
    };
    let counts = |cluster: &Cluster| {
        let bases: Vec<String> = cluster.nodes.iter().map(|n| n.base.clone()).collect();
        let client = cluster.client.clone();
        async move {
            let mut out = Vec::new();
            for base in bases {
                out.push(image_requests(&client, &base).await);
            }
            out
        }
    };

    // One URI, ten times: all ten on one node.
    origin.put("/one.jpg", jpeg(64, 48, 1));
    for _ in 0..10 {
        let r = cluster
            .client
            .get(through_lb("/one.jpg"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let after_one = counts(&cluster).await;
    let owner = after_one
        .iter()
        .position(|&n| n == 10)
        .unwrap_or_else(|| panic!("one URI spread over the nodes: {after_one:?}"));
    assert_eq!(after_one.iter().sum::<u64>(), 10, "{after_one:?}");

    // Twenty URIs: more than one node gets some.
    for i in 0..20u8 {
        origin.put(&format!("/p{i}.jpg"), jpeg(64, 48, i + 10));
        let r = cluster
            .client
            .get(through_lb(&format!("/p{i}.jpg")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let after_many = counts(&cluster).await;
    let busy = after_many
        .iter()
        .zip(&after_one)
        .filter(|(now, before)| now > before)
        .count();
    assert!(busy >= 2, "twenty URIs all on one node: {after_many:?}");

    // The URI's node dies: nginx steps over it, and another node serves the stored variant.
    cluster.kill(owner);
    let r = cluster
        .client
        .get(through_lb("/one.jpg"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-imgcas-cache"), Some("hit"), "shared maps");
}

/// (g) A takedown on node A (through `imgcas purge --server`) holds on every node within 2 s:
/// B and C, which had the content in their hot caches and remembered its requests, answer
/// 451 by hash and by URL, and nothing of it is left in the shared maps or the bucket.
/// Lifting it on B restores the URL on C.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takedown_on_one_node_holds_on_every_node_within_two_seconds() {
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    const TOKEN: &str = "cluster-admin-token-0123456789";
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let maps_url = pg.database("cluster_takedown");
    let cluster = Cluster::start(
        &maps_url,
        &bucket,
        &[("IMGCAS_ADMIN_TOKEN", TOKEN.to_string())],
    );
    origin.put("/t.jpg", jpeg(320, 240, 21));
    let source = origin.url("/t.jpg");
    let mut hash = String::new();
    for node in 0..3 {
        for _ in 0..2 {
            let r = cluster.image(node, &source, "w=100&format=webp").await;
            assert_eq!(r.status(), 200, "node {node}");
            hash = header(&r, "x-imgcas-source-hash").unwrap().to_string();
        }
        assert_eq!(cluster.by_hash(node, &hash, "w=80").await.status(), 200);
    }

    let offline = tempfile::tempdir().unwrap();
    let base_a = cluster.nodes[0].base.clone();
    let args = ["purge", &hash, "--server", &base_a, "--admin-token", TOKEN];
    let (code, out) = binary::run(offline.path(), &[], &args);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!(
            "taken down {hash}: 2 variants removed, 1 URL entries forgotten"
        )),
        "{out}"
    );
    let purged = Instant::now();

    // Every node refuses it, by hash and by URL, within 2 s.
    cluster
        .all_refuse_within_2s(&source, &hash, purged, "the takedown")
        .await;
    eprintln!(
        "every node refused the content {:?} after the takedown",
        purged.elapsed()
    );
    let count = |table: &str| {
        pg.psql(
            "cluster_takedown",
            &format!("SELECT count(*) FROM {table} WHERE hash = decode('{hash}', 'hex')"),
        )
        .unwrap()
    };
    assert_eq!(count("imgcas_variants"), "0");
    assert_eq!(count("imgcas_originals"), "0");
    assert_eq!(count("imgcas_takedowns"), "1");
    let keys = bucket.keys().await;
    assert!(!keys.iter().any(|k| k.contains(&hash)), "{keys:?}");
    let mut env = bucket.env();
    env.push(("IMGCAS_MAPS_URL", maps_url.clone()));
    let (code, out) = binary::run(offline.path(), &env, &["verify"]);
    assert_eq!(code, 0, "verify is clean: {out}");

    // Lifted on B: C downloads the URL again on its next request (within 2 s) and serves it.
    let base_b = cluster.nodes[1].base.clone();
    let args = [
        "purge",
        "--lift",
        &hash,
        "--server",
        &base_b,
        "--admin-token",
        TOKEN,
    ];
    let (code, out) = binary::run(offline.path(), &[], &args);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("lifted"), "{out}");
    let lifted = Instant::now();
    loop {
        let r = cluster.image(2, &source, "w=100&format=webp").await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 451);
        assert!(lifted.elapsed() < Duration::from_secs(2), "C still refuses");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 71: a focal point set on node A places every node's crops within 2 s: B and C,
/// which served the centred crop from memory and remembered its request, serve the crop on
/// the point; cleared on C, every node is back on the centre.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_focal_point_set_on_one_node_places_every_nodes_crops_within_two_seconds() {
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_focus", &[]).await else {
        return;
    };
    origin.put("/bands.png", crate::focus::three_bands());
    let source = origin.url("/bands.png");
    let query = "w=50&h=50&fit=cover&format=png";
    let red = |png: &[u8]| crate::focus::bands_of(png)[0];
    let mut hash = String::new();
    for node in 0..3 {
        for _ in 0..2 {
            let r = cluster.image(node, &source, query).await;
            assert_eq!(r.status(), 200, "node {node}");
            hash = header(&r, "x-imgcas-source-hash").unwrap().to_string();
            assert!(
                red(&r.bytes().await.unwrap()) < 0.4,
                "centred on node {node}"
            );
        }
    }
    let focus_url = |node: usize| format!("{}/v1/originals/{hash}/focus", cluster.nodes[node].base);
    let set = cluster
        .client
        .put(focus_url(0))
        .body(r#"{"x": 0.05, "y": 0.5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 200);
    let on_every_node = |changed: Instant, want_red: bool| {
        let (cluster, source) = (&cluster, &source);
        async move {
            for node in 0..3 {
                loop {
                    let r = cluster.image(node, source, query).await;
                    assert_eq!(r.status(), 200);
                    if (red(&r.bytes().await.unwrap()) > 0.75) == want_red {
                        break;
                    }
                    assert!(changed.elapsed() < Duration::from_secs(2), "node {node}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    };
    on_every_node(Instant::now(), true).await;
    let cleared = cluster.client.delete(focus_url(2)).send().await.unwrap();
    assert_eq!(cleared.status(), 200);
    on_every_node(Instant::now(), false).await;
}

/// (g2) Issue 32: the blocklist is shared like the takedown list. Listed on node A (by its
/// SHA-256, and a picture's fingerprint), it holds on every node within 2 s: B and C, which
/// served the bytes from memory, answer 451 `blocked` by URL and by hash, and C refuses an
/// upload of another copy of the listed picture.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blocklist_entry_on_one_node_holds_on_every_node() {
    const TOKEN: &str = "cluster-admin-token-0123456789";
    let env = [("IMGCAS_ADMIN_TOKEN", TOKEN.to_string())];
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_blocklist", &env).await else {
        return;
    };
    let bytes = jpeg(320, 240, 33);
    origin.put("/b.jpg", bytes.clone());
    let source = origin.url("/b.jpg");
    let hash = imgcas::hash::ContentHash::of(&bytes).to_hex();
    for node in 0..3 {
        let r = cluster.image(node, &source, "w=100&format=webp").await;
        assert_eq!(r.status(), 200, "node {node}");
        assert_eq!(cluster.by_hash(node, &hash, "w=80").await.status(), 200);
    }
    let picture = std::fs::read(format!(
        "{}/testdata/photos/kodak-15.jpg",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let post = |body: reqwest::Body, content_type: &'static str| {
        cluster
            .client
            .post(format!("{}/v1/blocklist", cluster.nodes[0].base))
            .bearer_auth(TOKEN)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let by_hash = format!("{{\"sha256\": \"{hash}\"}}");
    assert_eq!(
        post(by_hash.into(), "application/json")
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        post(picture.clone().into(), "image/jpeg")
            .await
            .unwrap()
            .status(),
        200
    );
    let listed = Instant::now();
    cluster
        .all_refuse_within_2s(&source, &hash, listed, "it was listed")
        .await;
    // A copy of the listed picture, in other bytes, is refused on C.
    let image = image::load_from_memory(&picture)
        .unwrap()
        .thumbnail(384, 384);
    let copy = encode(&image, image::ImageFormat::Png);
    let r = post_as(
        &cluster.client,
        format!("{}/v1/originals", cluster.nodes[2].base),
        TOKEN,
        copy,
    )
    .await;
    assert_eq!(r.status(), 451);
    assert_eq!(error_code_of(r).await, "blocked");
}

/// (h) Issue 28: with `revalidate_after = 0` every request asks the origin. A node whose
/// cached entry is older than another node's check must still ask, not adopt that check:
/// once it is done, the check it would adopt is itself older than the node's rule allows, and
/// the origin may have changed since (it has, here).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_does_not_adopt_another_nodes_stale_check() {
    let env = [("IMGCAS_REVALIDATE_AFTER", "0s".to_string())];
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_recheck", &env).await else {
        return;
    };
    for round in 0..3u8 {
        let source = origin.url(&format!("/changing-{round}.jpg"));
        let path = format!("/changing-{round}.jpg");
        origin.put(&path, jpeg(300, 200, 40 + round));
        // B downloads it (B's own copy of the entry is now this check), then A and C check it
        // again (each a 304 that publishes a newer check than B's copy).
        for node in [1, 0, 2] {
            let r = cluster.image(node, &source, "w=30").await;
            assert_eq!(r.status(), 200, "node {node}");
            assert_eq!(dimensions(&r.bytes().await.unwrap()), (30, 20));
        }
        origin.put(&path, jpeg(300, 100, 50 + round));
        let conditional_before = origin.requests();
        // Each node is asked in turn: every one must see the change, asking the origin.
        for node in [1, 0, 2] {
            let r = cluster.image(node, &source, "w=30").await;
            assert_eq!(r.status(), 200, "node {node}");
            assert_eq!(
                dimensions(&r.bytes().await.unwrap()),
                (30, 10),
                "round {round}: node {node} served content another node checked before the change"
            );
        }
        assert!(
            origin.requests() - conditional_before >= 3,
            "every request asked the origin"
        );
    }
}

/// A cluster test's parts: `n` nodes (with `env`) on a database of their own in the
/// harness's PostgreSQL (`None`: no PostgreSQL here, the test skips), a bucket, an origin.
/// (Held in the order they are dropped: nodes first; the server is the harness's.)
async fn cluster_of(
    n: usize,
    database: &str,
    env: &[(&str, String)],
) -> Option<(Cluster, Origin, S3Target)> {
    let pg = PgServer::or_skip("cluster")?;
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let cluster = Cluster::start_n(n, &pg.database(database), &bucket, env);
    Some((cluster, origin, bucket))
}

/// Issue 54 (1): under `revalidate_after = 0`, 100 concurrent requests for one new URL over
/// ten nodes make one full download and one run: a node waiting on another node's check
/// adopts it when it began after the node's request arrived, and otherwise asks with the
/// validators that check recorded (a `304`), never downloading in full again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_nodes_under_zero_revalidation_download_a_new_url_once() {
    let Some((cluster, origin, _bucket)) = cluster_of(
        10,
        "cluster_zero_revalidation",
        &[("IMGCAS_REVALIDATE_AFTER", "0s".to_string())],
    )
    .await
    else {
        return;
    };
    origin.put_slow(
        "/new.jpg",
        jpeg(640, 480, 9),
        Some(Duration::from_millis(300)),
    );
    let source = origin.url("/new.jpg");
    let mut bodies = std::collections::HashSet::new();
    for (status, body) in cluster.at_once(100, &source, "w=120&format=webp").await {
        assert_eq!(status, 200);
        bodies.insert(body);
    }
    assert_eq!(bodies.len(), 1, "every node served the same bytes");
    assert_eq!(origin.full(), 1, "one full download in the cluster");
    // Nodes whose requests came before the check adopt it; the others ask conditionally.
    assert!(
        origin.requests() < 10,
        "{} requests at the origin: fewer than one a node",
        origin.requests()
    );
    assert_eq!(cluster.total(DOWNLOADS).await, 1.0);
    assert_eq!(cluster.total(RUNS).await, 1.0);
}

/// Issue 54 (2): one origin's limits hold for the cluster. Its download slots are the
/// cluster's (`IMGCAS_FETCH_PER_HOST=2` over three nodes: at most two requests at the
/// origin at once, where each node once allowed two of its own), and an origin that answers
/// `429` with `Retry-After: 3` hears from no node for those 3 seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origins_slots_and_pauses_hold_for_every_node() {
    let env = [("IMGCAS_FETCH_PER_HOST", "2".to_string())];
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_origin_limits", &env).await
    else {
        return;
    };
    let mut sources = Vec::new();
    for i in 0..18u8 {
        let path = format!("/slow-{i}.jpg");
        origin.put_slow(&path, jpeg(64, 48, i), Some(Duration::from_millis(150)));
        sources.push(origin.url(&path));
    }
    for (status, _) in cluster.each_at_once(sources, "w=32").await {
        assert_eq!(status, 200);
    }
    assert_eq!(origin.full(), 18);
    assert!(
        origin.max_in_flight() <= 2,
        "{} requests at the origin at once over three nodes, 2 allowed",
        origin.max_in_flight()
    );

    // The pause: asked of node A, kept by B and C for every URL of the origin.
    origin.status_retry_after("/busy.jpg", 429, "3");
    let r = cluster.image(0, &origin.url("/busy.jpg"), "w=32").await;
    assert_eq!(r.status(), 502);
    let answered = Instant::now();
    let mut later = Vec::new();
    for i in 0..6u8 {
        let path = format!("/later-{i}.jpg");
        origin.put(&path, jpeg(64, 48, 100 + i));
        later.push(origin.url(&path));
    }
    let before = origin.requests();
    for (i, source) in later.iter().enumerate() {
        let r = cluster.image(1 + i % 2, source, "w=32").await;
        assert_eq!(r.status(), 502, "node {} during the pause", 1 + i % 2);
        assert!(header(&r, "retry-after").is_some());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        answered.elapsed() < Duration::from_secs(3),
        "the test ran in the pause"
    );
    assert_eq!(origin.requests(), before, "no node asked the paused origin");
    let scrape = scrape(&cluster.client, &cluster.nodes[0].base).await;
    assert_eq!(
        metric_value(
            &scrape,
            "imgcas_origin_pauses_total",
            &[
                ("origin", &format!("http://{}", origin.addr)),
                ("reason", "retry_after")
            ]
        ),
        1.0
    );
    // Once it is over, the origin is asked again (a URL not held by its own failure).
    tokio::time::sleep(Duration::from_millis(3200).saturating_sub(answered.elapsed())).await;
    origin.put("/after.jpg", jpeg(64, 48, 120));
    let r = cluster.image(2, &origin.url("/after.jpg"), "w=32").await;
    assert_eq!(r.status(), 200);
}

/// Issue 54 (3): a URL's held failure is the cluster's. One that answers 503, asked on three
/// nodes five times each over about 2.3 s, is tried once per backoff step (1 s, then 2 s:
/// twice, at most three times with a slow round), where each node once tried on its own (8).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_url_is_tried_once_per_backoff_step_by_the_cluster() {
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_failures", &[]).await else {
        return;
    };
    origin.status("/down.jpg", 503);
    let source = origin.url("/down.jpg");
    let started = Instant::now();
    for _ in 0..5 {
        for node in 0..3 {
            let r = cluster.image(node, &source, "w=32").await;
            assert_eq!(r.status(), 502, "node {node}");
        }
        tokio::time::sleep(Duration::from_millis(450)).await;
    }
    let tried = origin.requests();
    assert!(
        tried <= 3,
        "{tried} tries in {:?} over three nodes",
        started.elapsed()
    );
}

/// Issue 54 (4, 5): a tenant's budget is spent across nodes (spent on A, refused on B, with
/// `Retry-After`; a hit on C still served), and 100 concurrent requests for a stored
/// variant on each of two nodes that never served it read its object once per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_spent_on_one_node_holds_on_the_others_and_hot_misses_read_once() {
    let env = [
        (
            "IMGCAS_TENANTS",
            "127.0.0.1=rate=1000&burst=1000&anonymous=true".to_string(),
        ),
        ("IMGCAS_MAX_BUDGET_WAIT", "600".to_string()),
    ];
    let Some((cluster, origin, _bucket)) = cluster_of(3, "cluster_budgets", &env).await else {
        return;
    };
    origin.put("/t.jpg", jpeg(320, 240, 30));
    let source = origin.url("/t.jpg");
    let r = cluster.image(0, &source, "w=100&format=webp").await;
    assert_eq!(r.status(), 200, "the first run spends the tenant's budget");
    let r = cluster.image(1, &source, "w=120&format=webp").await;
    assert_eq!(r.status(), 429, "refused on another node");
    assert!(header(&r, "retry-after").is_some());
    assert_eq!(error_code_of(r).await, "over_budget");

    for node in [1, 2] {
        let reads_before = cluster
            .counter(node, "imgcas_variant_object_reads_total")
            .await;
        let map_reads_before = cluster
            .counter(node, "imgcas_variant_map_reads_total")
            .await;
        let mut requests = Vec::new();
        for _ in 0..100 {
            let (client, base, source) = (
                cluster.client.clone(),
                cluster.nodes[node].base.clone(),
                source.clone(),
            );
            requests.push(tokio::spawn(async move {
                let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
                url.query_pairs_mut()
                    .append_pair("url", &source)
                    .append_pair("w", "100")
                    .append_pair("format", "webp");
                client.get(url).send().await.unwrap().status().as_u16()
            }));
        }
        for r in requests {
            assert_eq!(r.await.unwrap(), 200, "hits are served over budget");
        }
        let reads = cluster
            .counter(node, "imgcas_variant_object_reads_total")
            .await
            - reads_before;
        assert!(reads <= 1.0, "node {node}: {reads} reads of one object");
        let map_reads = cluster
            .counter(node, "imgcas_variant_map_reads_total")
            .await
            - map_reads_before;
        assert!(
            map_reads <= 1.0,
            "node {node}: {map_reads} reads of one row"
        );
    }
}

/// Issue 34: three nodes through PgBouncer in transaction pooling (ten server connections
/// for the three), doing work of every kind from every node: new URLs and specs, hits by
/// URL and by hash, 30 concurrent cold requests, the upkeep's and the purge generation's
/// statements each second, a takedown. Behind such a pooler a named prepared statement or
/// any session state breaks the next statement; here nothing answers other than expected.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_work_through_pgbouncer_in_transaction_mode() {
    use common::pgbouncer::PgBouncer;
    let Some(pg) = PgServer::or_skip("cluster") else {
        return;
    };
    let Some(bouncer) = PgBouncer::or_skip("cluster_pgbouncer", pg) else {
        return;
    };
    pg.database("cluster_pgbouncer");
    let maps_url = bouncer.url("cluster_pgbouncer");
    let bucket = S3Target::new().await;
    let origin = Origin::start().await;
    let cluster = Cluster::start(
        &maps_url,
        &bucket,
        &[("IMGCAS_REVALIDATE_AFTER", "1s".to_string())],
    );
    let mut hashes = Vec::new();
    for i in 0..4u8 {
        let path = format!("/bounced-{i}.jpg");
        origin.put(&path, jpeg(200 + u32::from(i) * 16, 150, 40 + i));
        let source = origin.url(&path);
        for node in 0..3 {
            let spec = format!("w={}&format=webp", 60 + node * 10);
            let r = cluster.image(node, &source, &spec).await;
            let status = r.status();
            let hash = header(&r, "x-imgcas-source-hash").map(str::to_string);
            assert_eq!(status, 200, "node {node}: {}", r.text().await.unwrap());
            if node == 0 {
                hashes.push(hash.unwrap());
            }
            assert_eq!(
                cluster
                    .by_hash(node, &hashes[usize::from(i)], "w=50")
                    .await
                    .status(),
                200
            );
        }
    }
    origin.put("/bounced-cold.jpg", jpeg(480, 360, 50));
    let source = origin.url("/bounced-cold.jpg");
    let runs_before = cluster.total(RUNS).await;
    for (status, _) in cluster.at_once(30, &source, "w=120").await {
        assert_eq!(status, 200);
    }
    assert_eq!(cluster.total(RUNS).await - runs_before, 1.0, "one run");
    // A few upkeep rounds (stamps, the purge generation) on every node, then revalidations.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for node in 0..3 {
        let r = cluster.image(node, &source, "w=120").await;
        assert_eq!(r.status(), 200, "node {node}");
    }
    // A takedown through the pooler (the offline command, on the shared maps) holds
    // everywhere.
    let offline = tempfile::tempdir().unwrap();
    let hash = hashes[0].clone();
    let mut env = bucket.env();
    env.push(("IMGCAS_MAPS_URL", maps_url.clone()));
    let (code, out) = binary::run(offline.path(), &env, &["purge", &hash]);
    assert_eq!(code, 0, "{out}");
    let purged = Instant::now();
    cluster
        .all_refuse_within_2s(&origin.url("/bounced-0.jpg"), &hash, purged, "the takedown")
        .await;
    for node in 0..3 {
        let page = metrics_text(&cluster.client, &cluster.nodes[node].base).await;
        let failed: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("imgcas_http_requests_total") && l.contains("status=\"5"))
            .collect();
        assert!(failed.is_empty(), "node {node} answered 5xx: {failed:?}");
    }
}

/// Audit #4 on two nodes sharing PostgreSQL: an anonymous client's budget is its own and
/// held across nodes (spent on one, refused on the other with a `Retry-After` within
/// `limits.max_budget_wait`), and another client is served meanwhile on either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_anonymous_clients_budget_is_its_own_on_every_node() {
    let Some((cluster, origin, _bucket)) = cluster_of(
        2,
        "cluster_client_budgets",
        &[
            ("IMGCAS_TENANTS", "default=rate=5000&burst=1000".to_string()),
            ("IMGCAS_MAX_BUDGET_WAIT", "60".to_string()),
            ("IMGCAS_TRUSTED_PROXIES", "127.0.0.1".to_string()),
        ],
    )
    .await
    else {
        return;
    };
    for i in 0..4u8 {
        origin.put(&format!("/c{i}.jpg"), jpeg(320, 240, 40 + i));
    }
    let ask = |node: usize, path: &str, client: &str| {
        let (http, base) = (cluster.client.clone(), cluster.nodes[node].base.clone());
        let (source, client) = (origin.url(path), client.to_string());
        async move {
            let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
            url.query_pairs_mut()
                .append_pair("url", &source)
                .append_pair("w", "100");
            http.get(url)
                .header("x-forwarded-for", client)
                .send()
                .await
                .unwrap()
        }
    };
    let r = ask(0, "/c0.jpg", "198.51.100.7").await;
    assert_eq!(r.status(), 200, "client X's first run, on node 0");
    let r = ask(1, "/c1.jpg", "198.51.100.7").await;
    assert_eq!(r.status(), 429, "X's budget is spent on node 1 too");
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    // Other clients are served meanwhile, on either node (each spends a bucket of its own).
    for (node, client) in [(1, "198.51.100.8"), (0, "198.51.100.9")] {
        let r = ask(node, &format!("/c{}.jpg", 2 + node), client).await;
        assert_eq!(r.status(), 200, "client {client} is served on node {node}");
    }
}

/// Audit #4 (issue 67): a session logged out of on one node is ended on the others too (the
/// logout is shared through the maps): its cookie, replayed to another node, is refused there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_logout_on_one_node_ends_the_session_on_the_others() {
    const ADMIN: &str = "cluster-admin-token-0123456789";
    let Some((cluster, _origin, _bucket)) = cluster_of(
        2,
        "cluster_sessions",
        &[("IMGCAS_ADMIN_TOKEN", ADMIN.to_string())],
    )
    .await
    else {
        return;
    };
    let (a, b) = (&cluster.nodes[0].base, &cluster.nodes[1].base);
    let login = cluster
        .client
        .post(format!("{a}/admin/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={ADMIN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 303);
    let session = header(&login, "set-cookie")
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let savings = |base: String| {
        let (client, session) = (cluster.client.clone(), session.clone());
        async move {
            client
                .get(format!("{base}/admin/savings"))
                .header("cookie", session)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(savings(b.clone()).await, 200, "the cookie opens node B");
    let logout = cluster
        .client
        .post(format!("{a}/admin/logout"))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), 303);
    assert_eq!(savings(a.clone()).await, 401, "ended on node A");
    assert_eq!(
        savings(b.clone()).await,
        401,
        "and on node B, which it never reached"
    );
}

/// Audit #4, finding 6, on two nodes sharing PostgreSQL: origin A redirects to B, and B asks
/// for a pause (429, `Retry-After: 600`). The pause is B's, for every node: node 1 sends B
/// nothing, and serves A's own URLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_asked_through_a_redirect_is_the_answering_origins_on_every_node() {
    let Some((cluster, a, _bucket)) = cluster_of(2, "cluster_redirect_pause", &[]).await else {
        return;
    };
    let b = Origin::start().await;
    a.redirect("/r.jpg", &b.url("/busy.jpg"));
    b.status_retry_after("/busy.jpg", 429, "600");
    let r = cluster.image(0, &a.url("/r.jpg"), "w=32").await;
    assert_eq!(r.status(), 502);
    b.put("/own.jpg", jpeg(64, 48, 61));
    let before = b.requests();
    let r = cluster.image(1, &b.url("/own.jpg"), "w=32").await;
    assert_eq!(r.status(), 502, "B is paused on node 1 too");
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!(retry > 500, "{retry}");
    assert_eq!(b.requests(), before, "nothing sent to B while paused");
    a.put("/own.jpg", jpeg(64, 48, 62));
    let r = cluster.image(1, &a.url("/own.jpg"), "w=32").await;
    assert_eq!(r.status(), 200, "A is not paused");
}

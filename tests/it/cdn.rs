//! imgcas as a CDN's origin, proven with a real cache: nginx (Debian's package) runs
//! `deploy/nginx-cdn.conf` on loopback in front of the app, and the app's own request
//! counters say what reached it.
//!
//! nginx is found as `nginx` on PATH or /usr/sbin/nginx (`common::nginx`). Without it the
//! test says so and passes, unless IMGCAS_TEST_NGINX=1 (set by `.ci/run`, which installs
//! nginx): then a missing nginx fails it.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::nginx::{self, Nginx};
use common::*;

/// deploy/nginx-cdn.conf with its three site lines pointed at `upstream`, a free loopback
/// port and a temporary cache directory.
fn start_cdn(binary: &Path, upstream: std::net::SocketAddr) -> Nginx {
    let port = nginx::free_port();
    Nginx::start(binary, port, |root| {
        nginx::site(
            "nginx-cdn.conf",
            &[
                (
                    "proxy_cache_path /var/cache/nginx/imgcas ",
                    format!("proxy_cache_path {} ", root.join("cache").display()),
                ),
                ("server 127.0.0.1:8080;", format!("server {upstream};")),
                (
                    "listen 127.0.0.1:8081;",
                    format!("listen 127.0.0.1:{port};"),
                ),
            ],
        )
    })
}

struct Answer {
    status: u16,
    cache: String,
    content_type: String,
    body: Vec<u8>,
}

async fn get(client: &reqwest::Client, url: &str, accept: Option<&str>) -> Answer {
    let mut request = client.get(url);
    if let Some(a) = accept {
        request = request.header("accept", a);
    }
    let r = request.send().await.expect("nginx answers");
    let head = |name: &str| header(&r, name).unwrap_or("").to_string();
    let (status, cache, content_type) = (
        r.status().as_u16(),
        head("x-cache-status"),
        head("content-type"),
    );
    Answer {
        status,
        cache,
        content_type,
        body: r.bytes().await.unwrap().to_vec(),
    }
}

/// Polls the app's counters until `want` holds (background revalidation is asynchronous).
async fn until(app: &TestApp, what: &str, want: impl Fn((u64, u64)) -> bool) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = app.image_requests().await;
        if want(seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "{what}: app saw {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nginx_caches_revalidates_varies_and_expires_errors() {
    let Some(binary) = nginx::binary_or_skip() else {
        return;
    };
    let origin = Origin::start_with("/photo.jpg", jpeg(640, 480, 7)).await;
    // By-URL answers live 1 s, so the test can watch one expire.
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::from_secs(1)).await;
    let cdn = start_cdn(&binary, app.addr);
    let client = client();
    let mut source = reqwest::Url::parse(&format!("{}/v1/image", cdn.base)).unwrap();
    source
        .query_pairs_mut()
        .append_pair("url", &origin.url("/photo.jpg"))
        .append_pair("w", "200");
    let by_url = source.to_string();

    // 1. A repeat is served from nginx's cache: nothing reaches imgcas.
    let first = get(&client, &by_url, None).await;
    assert_eq!((first.status, first.cache.as_str()), (200, "MISS"));
    let (reached, _) = app.image_requests().await;
    assert_eq!(reached, 1);
    for _ in 0..5 {
        let again = get(&client, &by_url, None).await;
        assert_eq!((again.status, again.cache.as_str()), (200, "HIT"));
        assert_eq!(again.body, first.body);
    }
    assert_eq!(app.image_requests().await.0, 1, "hits never reach imgcas");

    // 2. Once expired, nginx revalidates with If-None-Match and imgcas answers 304. (nginx
    // counts whole seconds: an entry stored at 10.9 s with max-age=1 expires after 12 s.)
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let expired = get(&client, &by_url, None).await;
    assert_eq!(expired.status, 200);
    assert!(
        ["STALE", "UPDATING", "REVALIDATED"].contains(&expired.cache.as_str()),
        "{}",
        expired.cache
    );
    assert_eq!(expired.body, first.body);
    let (reached, not_modified) = until(&app, "a 304 for the revalidation", |(_, n)| n >= 1).await;
    assert_eq!((reached, not_modified), (2, 1));
    assert_eq!(origin.full(), 1, "the source was downloaded once");
    let fresh = get(&client, &by_url, None).await;
    assert_eq!(fresh.cache, "HIT", "the revalidated entry is fresh again");

    // 3. By hash: immutable, a year in nginx.
    let hash = {
        let r = app.upload(png(300, 200, 1)).await;
        json(r).await["hash"].as_str().unwrap().to_string()
    };
    let by_hash = format!("{}/v1/image/{hash}?w=64&format=webp", cdn.base);
    assert_eq!(get(&client, &by_hash, None).await.cache, "MISS");
    assert_eq!(get(&client, &by_hash, None).await.cache, "HIT");

    // 4. format=auto: one entry per Accept class, each served with its own type.
    let auto = format!("{}/v1/image/{hash}?w=80&format=auto", cdn.base);
    let chrome = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8";
    let firefox_avif = "image/avif,image/webp,*/*";
    let old_safari = "image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5";
    let plain = "*/*";
    let before = app.image_requests().await.0;
    let cases = [
        (chrome, "MISS", "image/avif"),
        (firefox_avif, "HIT", "image/avif"),
        (old_safari, "MISS", "image/webp"),
        (plain, "MISS", "image/jpeg"),
        (chrome, "HIT", "image/avif"),
        (old_safari, "HIT", "image/webp"),
        (plain, "HIT", "image/jpeg"),
    ];
    for (accept, cache, content_type) in cases {
        let a = get(&client, &auto, Some(accept)).await;
        assert_eq!(a.status, 200);
        assert_eq!(
            (a.cache.as_str(), a.content_type.as_str()),
            (cache, content_type),
            "Accept: {accept}"
        );
    }
    assert_eq!(
        app.image_requests().await.0 - before,
        3,
        "one request per Accept class reached imgcas"
    );

    // 4b. w=auto: the width hint is in the key of the requests that read it, so two widths
    // are two entries, each with its own size, and a repeat of either is a hit.
    let hinted = format!("{}/v1/image/{hash}?w=auto&format=png", cdn.base);
    let with_width = |width: &'static str| {
        let client = client.clone();
        let url = hinted.clone();
        async move {
            let r = client
                .get(&url)
                .header("sec-ch-width", width)
                .send()
                .await
                .expect("nginx answers");
            let cache = header(&r, "x-cache-status").unwrap_or("").to_string();
            (cache, dimensions(&r.bytes().await.unwrap()).0)
        }
    };
    assert_eq!(with_width("60").await, ("MISS".to_string(), 64));
    assert_eq!(with_width("30").await, ("MISS".to_string(), 32));
    assert_eq!(with_width("60").await, ("HIT".to_string(), 64));
    assert_eq!(with_width("30").await, ("HIT".to_string(), 32));

    // 4c. deploy/nginx-purge.sh drops every cached variant of an original by its tag (six
    // entries of the PNG above: 3, 4 and 4b), and nothing else.
    let cache_dir = cdn.dir.path().join("cache");
    let purge = |tag: &str| {
        let out = std::process::Command::new("bash")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/deploy/nginx-purge.sh"
            ))
            .arg(&cache_dir)
            .arg(tag)
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(purge(&hash), "6");
    assert_eq!(purge(&hash), "0");
    assert_eq!(get(&client, &by_hash, None).await.cache, "MISS");
    assert_eq!(get(&client, &by_hash, None).await.cache, "HIT");
    assert_eq!(
        get(&client, &by_url, None).await.cache,
        "HIT",
        "another original's entry stays"
    );
    // By URL: the URL's own tag drops what it served.
    let url_tag = {
        use sha2::Digest;
        let source = origin.url("/photo.jpg"); // already in canonical form
        format!(
            "url-{}",
            hex::encode(sha2::Sha256::digest(source.as_bytes()))
        )
    };
    assert_eq!(purge(&url_tag), "1");
    assert_eq!(get(&client, &by_url, None).await.cache, "MISS");

    // 5. Errors expire quickly: an origin failing with 503 gives a 502 held 1 s.
    origin.status("/flaky.jpg", 503);
    let mut flaky = reqwest::Url::parse(&format!("{}/v1/image", cdn.base)).unwrap();
    flaky
        .query_pairs_mut()
        .append_pair("url", &origin.url("/flaky.jpg"));
    let flaky = flaky.to_string();
    let failed = get(&client, &flaky, None).await;
    assert_eq!((failed.status, failed.cache.as_str()), (502, "MISS"));
    assert_eq!(
        get(&client, &flaky, None).await.cache,
        "HIT",
        "held briefly"
    );
    origin.put("/flaky.jpg", jpeg(100, 80, 2));
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let recovered = get(&client, &flaky, None).await;
    assert_eq!(
        recovered.status, 200,
        "the error expired: {}",
        recovered.cache
    );
    assert_eq!(recovered.cache, "EXPIRED");
    // Not found by hash: a minute at most, never a year.
    let missing = format!("{}/v1/image/{}", cdn.base, "0".repeat(64));
    let r = client.get(&missing).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let cc = header(&r, "cache-control").unwrap_or("").to_string();
    assert_eq!(cc, "public, max-age=60");
}

/// `q=auto` reads `Save-Data` (a level down): nginx keys its answers on the hint, so a client
/// saving data is never served the full level's copy, nor the other way round.
#[tokio::test]
async fn nginx_keys_q_auto_on_save_data() {
    let Some(binary) = nginx::binary_or_skip() else {
        return;
    };
    let app = spawn_app().await;
    let cdn = start_cdn(&binary, app.addr);
    let client = client();
    let hash = {
        let r = app.upload(jpeg(640, 480, 3)).await;
        json(r).await["hash"].as_str().unwrap().to_string()
    };
    let url = format!("{}/v1/image/{hash}?w=300&format=jpeg&q=auto", cdn.base);
    let ask = |save: bool| {
        let mut request = client.get(&url);
        if save {
            request = request.header("save-data", "on");
        }
        async move {
            let r = request.send().await.expect("nginx answers");
            let cache = header(&r, "x-cache-status").unwrap_or("").to_string();
            (cache, r.bytes().await.unwrap().to_vec())
        }
    };
    let (cache, full) = ask(false).await;
    assert_eq!(cache, "MISS");
    let (cache, saving) = ask(true).await;
    assert_eq!(cache, "MISS", "another key");
    assert_ne!(saving, full);
    assert_eq!(ask(false).await, ("HIT".to_string(), full));
    assert_eq!(ask(true).await, ("HIT".to_string(), saving));
}

//! imgcas as a CDN's origin, proven with a real cache: nginx (Debian's package) runs
//! `deploy/nginx-cdn.conf` on loopback in front of the app, and the app's own request
//! counters say what reached it.
//!
//! nginx is found as `nginx` on PATH or /usr/sbin/nginx. Without it the test says so and
//! passes, unless IMGCAS_TEST_NGINX=1 (set by `.ci/run`, which installs nginx): then a
//! missing nginx fails it.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/nginx");
        sbin.is_file().then_some(sbin)
    })
}

/// A port free on loopback now (nginx binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// nginx in the foreground on a temporary prefix; killed when dropped.
struct Nginx {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    /// SIGTERM to the master, which stops its workers (SIGKILL would orphan them, still
    /// listening); SIGKILL only if it has not gone within 5 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// Runs deploy/nginx-cdn.conf with its three site lines pointed at `upstream`, a free
    /// loopback port and a temporary cache directory.
    fn start(binary: &Path, upstream: std::net::SocketAddr) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let sample = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx-cdn.conf"),
        )
        .expect("deploy/nginx-cdn.conf");
        let port = free_port();
        let cache = root.join("cache");
        let site = replace_once(
            &replace_once(
                &replace_once(
                    &sample,
                    "proxy_cache_path /var/cache/nginx/imgcas ",
                    &format!("proxy_cache_path {} ", cache.display()),
                ),
                "server 127.0.0.1:8080;",
                &format!("server {upstream};"),
            ),
            "listen 127.0.0.1:8081;",
            &format!("listen 127.0.0.1:{port};"),
        );
        std::fs::write(root.join("imgcas-cdn.conf"), site).unwrap();
        // As root, nginx would hand its workers to `nobody`, who cannot write the temporary
        // cache directory.
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let main = format!(
            "{user}daemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
             error_log {root}/error.log warn;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {root}/client;\n\
             proxy_temp_path {root}/proxy;\n  fastcgi_temp_path {root}/fastcgi;\n\
             uwsgi_temp_path {root}/uwsgi;\n  scgi_temp_path {root}/scgi;\n\
             include {root}/imgcas-cdn.conf;\n}}\n",
            user = if is_root { "user root;\n" } else { "" },
            root = root.display(),
        );
        std::fs::write(root.join("nginx.conf"), main).unwrap();
        let child = Command::new(binary)
            .arg("-p")
            .arg(root)
            .arg("-c")
            .arg(root.join("nginx.conf"))
            .arg("-e")
            .arg(root.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                std::fs::read_to_string(root.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx {
            child,
            base: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "deploy/nginx-cdn.conf must contain `{from}` once"
    );
    text.replacen(from, to, 1)
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
    let Some(binary) = nginx_binary() else {
        assert!(
            std::env::var("IMGCAS_TEST_NGINX").is_err(),
            "IMGCAS_TEST_NGINX is set but no nginx was found"
        );
        skip_unless_ci("nginx not installed (apt install nginx)");
        return;
    };
    let origin = Origin::start().await;
    origin.put("/photo.jpg", jpeg(640, 480, 7));
    // By-URL answers live 1 s, so the test can watch one expire.
    let app = spawn_app_with(|c| c.fetch.revalidate_after = Duration::from_secs(1)).await;
    let cdn = Nginx::start(&binary, app.addr);
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
